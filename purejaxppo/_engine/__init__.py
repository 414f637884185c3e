"""The one execution engine: a batch of agents as one (optionally sharded) XLA program.

Everything that trains goes through `Engine`: `make_train` (a one-agent view), `sweep`,
checkpointed runs and sharding. `Engine(cfg)` trains a flat batch of agents (leading axis =
agent; each has its own PRNG key and its own numeric hyperparameters):

    state = engine.init(keys, hparams)            # one program
    state, metrics = engine.run(state, hparams, K)  # one program per chunk size
    state, metrics = engine(keys, hparams)          # init + every update: one program

`_agents.agent_inputs` builds ``keys`` and ``hparams`` for seeds × hyperparameter settings;
`_placement` pads and places them on the devices.

**Scan outside, vmap inside.** The update loop is a `lax.scan` whose body updates every agent
at once. That is the same computation as vmapping `make_train` (vmap of a scan *is* a scan of
the vmapped body), but it gives the body a place, outside the per-agent code, where the
progress callback sees all agents together: one host callback for the whole population, not
one per agent as a `jax.debug.callback` under `vmap` would fire.

**Blocks of updates.** The scan runs blocks of `updates_per_callback` updates; after each,
the block's `Progress` rows are built at once and sent in one callback: per update, those
small ops and the callback cost one CartPole agent ~0.7 ms of its 1.5 ms update. Without a
progress function the loop is nested the same way (the same computation).

**Sharding.** With more than one device (or a `mesh` with an ``"agents"`` axis), the agent
axis is padded to a multiple of the device count and each update runs under `jax.shard_map`:
every device updates only its own agents, with no communication between them (agents are
independent), in one SPMD program compiled once. Padding agents repeat agent 0's key and
hyperparameters; `strip` drops them. The only cross-device traffic is the progress aggregate
(a few scalars per update, in the callback's block). Inputs are placed with
`jax.make_array_from_callback`, which also works when the mesh spans several hosts after
`jax.distributed.initialize()`.

**Groups.** Each device's agents run as a `lax.map` over groups of ``G`` vmapped agents, still
one program and one update scan (`_bodies.in_groups`). The width defaults per backend
(`default_group_size`): on CPU about 16 MFLOP of forward pass per minibatch per group,
measured at or near the best width from CartPole's small agents to the maze's and
Pendulum's large ones; on GPU/TPU every agent at once. When XLA's memory
analysis says a program cannot fit the device, the same mechanism narrows the groups.

Modules, one job each: `_core` (`Engine`: placing agents, the programs it compiles, fitting
them to memory, `CompileClock`), `_bodies` (the traced bodies of those programs: per-agent
mapping over a mesh and in groups, the update scan in blocks with its host callback, PBT's
generations), `_kept` (the compiled programs kept, least recently used dropped) and
`_shared` (`engine_for`: one engine per static config).
"""

from ._core import CompileClock as CompileClock
from ._core import Engine as Engine
from ._shared import engine_for as engine_for
