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
one program and one update scan (`_in_groups`). The width defaults per backend
(`default_group_size`): on CPU about 16 MFLOP of forward pass per minibatch per group,
measured at or near the best width from CartPole's small agents to the maze's and
Pendulum's large ones; on GPU/TPU every agent at once. When XLA's memory
analysis says a program cannot fit the device, the same mechanism narrows the groups.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PRNGKeyArray

from ._agents import batched, num_agents_of
from ._config import PPOConfig
from ._distributions import policy_distribution
from ._groups import balanced_width, check_group_size, default_group_size
from ._memory import BUDGET_FRACTION, available_bytes, fit_to_memory
from ._networks import network_shapes
from ._placement import AXIS, agent_mesh, gather, place, replicate
from ._ppo import Metrics, RunnerState, init_state, update_step
from ._ppo import healthy as ppo_healthy
from ._programs import INIT, TRAIN, Between, Generations, Init, Program, Run, Train
from ._progress import ProgramClock, ProgressFn, block_rows, deliver, updates_per_callback
from ._xla_cpu import compiler_options, unrolled_threefry
from .envs import make_env


class Engine:
    """Train a batch of agents of one static config as one (optionally sharded) program.

    Args:
        cfg: the static config (shapes, env); numeric hyperparameters come per agent.
        mesh: a `Mesh` with an ``"agents"`` axis, ``None`` for every device (the default), or
            ``False`` for no sharding. One device means plain `vmap`, no `shard_map`.
        progress: called on the host with the `Progress` of every ``progress_every``-th
            update and the last, in order, in bursts: one host callback carries a block of
            updates (`updates_per_callback`).
        group_size: run each device's agents in groups of this many, one group after
            another inside the program. None: the backend's default (`default_group_size`),
            in balanced groups. A width that does not divide the agents pads the last group
            (repeating the first agent; dropped); a width ≥ the agents per device runs them
            all at once. Memory may narrow it further: ``groups`` records the width each
            program runs.
        progress_agents: also give the progress callback every agent's metrics and
            hyperparameters (`Progress.agents`): what experiment trackers log.
    """

    total_compile_seconds = 0.0  # over every instance in this process (sweep timings)

    def __init__(
        self,
        cfg: PPOConfig,
        *,
        mesh: Mesh | None | bool = None,
        progress: ProgressFn | None = None,
        progress_every: int = 1,
        group_size: int | None = None,
        progress_agents: bool = False,
    ):
        if mesh is None:
            mesh = agent_mesh() if jax.device_count() > 1 else False
        if mesh is not False and AXIS not in mesh.axis_names:
            raise ValueError(f"Engine(mesh=...): the mesh needs an axis named {AXIS!r}.")
        if not isinstance(progress_every, int) or progress_every < 1:
            raise ValueError(f"progress_every={progress_every!r}: need a positive int.")
        self.cfg = cfg
        self.env = make_env(cfg)
        # Build the network abstractly now, so a network that cannot serve this env (e.g.
        # network="per_cell" without a grid-cell action) fails here, not inside the jit.
        network_shapes(cfg, self.env.obs_shape, policy_distribution(cfg, self.env))
        self.mesh: Mesh | None = None if mesh is False or mesh.size == 1 else mesh
        self.progress = progress
        self.progress_every = progress_every
        self.progress_agents = progress_agents
        check_group_size(group_size)
        self.group_size = group_size
        self.groups: dict = {}  # (Program, num_agents) -> agents per group it runs
        self.num_traces = 0
        self.compile_seconds = 0.0  # time spent compiling this object's programs so far
        self._compiled: dict = {}
        self.clock = ProgramClock()  # when the program now running started (progress rates)
        self._default_width: int | None | bool = False  # `default_group_size`, once needed

    # ------------------------------------------------------------------------- layout ---
    @property
    def num_devices(self) -> int:
        return 1 if self.mesh is None else self.mesh.shape[AXIS]

    def padded(self, num_agents: int) -> int:
        """Agents actually computed: ``num_agents`` rounded up to a multiple of the devices."""
        d = self.num_devices
        return -(-num_agents // d) * d

    def strip(self, tree: Any, num_agents: int) -> Any:
        """Drop the padding agents (leading axis) and bring the arrays to the host."""
        return jax.tree.map(lambda x: np.asarray(gather(x))[:num_agents], tree)

    def _place(self, tree: Any, num_agents: int) -> Any:
        """Pad the agent axis and put each device's shard on it (`_placement.place`)."""
        return place(tree, self.padded(num_agents), self.mesh)

    def _replicate(self, tree: Any) -> Any:
        """Every device holds the whole of ``tree`` (`_placement.replicate`)."""
        return replicate(tree, self.mesh)

    # ---------------------------------------------------------------------- programs ---
    def init(self, keys: PRNGKeyArray, hparams: PPOConfig) -> RunnerState:
        """Initial states of ``len(keys)`` agents (padded; see `strip`)."""
        n = num_agents_of(keys, hparams, self.cfg)
        keys, hparams = self._place((keys, batched(hparams, n)), n)
        return self.compiled(INIT, n, keys, hparams)(keys, hparams)

    def run(
        self, state: RunnerState, hparams: PPOConfig, num_updates: int
    ) -> tuple[RunnerState, Metrics]:
        """``num_updates`` more updates of every agent; metrics are ``(agents, num_updates)``.

        ``engine(keys, hp)`` equals ``init`` followed by chunks of ``run`` adding up to
        ``cfg.num_updates``, bit for bit on CPU (tested).
        """
        if not isinstance(num_updates, int) or num_updates < 1:
            raise ValueError(f"run(num_updates={num_updates!r}): need a positive int.")
        n = num_agents_of(None, hparams, self.cfg)
        state, hparams = self._place((state, batched(hparams, n)), n)
        return self.compiled(Run(num_updates), n, state, hparams)(state, hparams)

    def run_generations(
        self,
        state: RunnerState,
        hparams: PPOConfig,
        carry: Any,
        interval: int,
        count: int,
        between: Between,
        tail: int = 0,
    ) -> tuple[RunnerState, PPOConfig, Any, Metrics, Any]:
        """``count`` generations, each ``interval`` updates then ``between`` across the agents.

        One program (a scan over generations around the update scan), so a population can
        act on itself — copy states, change hyperparameters — with no recompile and no host
        round trip. ``between(state, hparams, metrics, carry, valid)`` sees every agent at
        once (under a mesh, XLA gathers across devices for it; ``valid`` marks the real
        agents, not the padding) and returns ``(state, hparams, carry, record)``.
        ``carry`` is a replicated pytree (a PRNG key, counters). ``tail`` more updates follow
        the last generation, with no ``between`` after them (a run's last generation), in
        the same program. Returns the new state, hyperparameters and carry, the metrics
        ``(agents, count * interval + tail)`` and the records ``(agents, count, ...)``
        (every record leaf must lead with the agent axis).
        """
        for name, v in (("interval", interval), ("count", count), ("tail", tail + 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"run_generations({name}={v!r}): need a positive int.")
        n = num_agents_of(None, hparams, self.cfg)
        state, hparams = self._place((state, batched(hparams, n)), n)
        carry = self._replicate(carry)
        program = Generations(interval, count, between, tail)
        return self.compiled(program, n, state, hparams, carry)(state, hparams, carry)

    def __call__(self, keys: PRNGKeyArray, hparams: PPOConfig) -> tuple[RunnerState, Metrics]:
        """Every update of every agent in one program (init + one scan)."""
        n = num_agents_of(keys, hparams, self.cfg)
        keys, hparams = self._place((keys, batched(hparams, n)), n)
        return self.compiled(TRAIN, n, keys, hparams)(keys, hparams)

    def shapes(self, keys: PRNGKeyArray, hparams: PPOConfig) -> tuple[RunnerState, Metrics]:
        """Shapes and dtypes (no padding) of the agents' state and of one update's metrics."""
        hp = batched(hparams, num_agents_of(keys, hparams, self.cfg))
        state = jax.eval_shape(jax.vmap(lambda k, c: init_state(c, self.env, k)), keys, hp)
        one = jax.eval_shape(jax.vmap(lambda s, c: update_step(c, self.env, s)[1]), state, hp)
        return state, one

    def lower(self, keys: PRNGKeyArray, hparams: PPOConfig):
        """The lowered whole-run program: ``.compile(compiler_options())`` (`_xla_cpu`) compiles
        it as the engine does, to time compilation alone."""
        n = num_agents_of(keys, hparams, self.cfg)
        keys, hparams = self._place((keys, batched(hparams, n)), n)
        return self._lower(TRAIN, n, self.group_width(n), (keys, hparams))

    def group_width(self, num_agents: int) -> int | None:
        """Agents per group on each device for ``num_agents`` agents, before any narrowing for
        memory (None: all of a device's agents at once)."""
        local = self.padded(num_agents) // self.num_devices
        if self.group_size is not None:
            return None if self.group_size >= local else self.group_size
        if self._default_width is False:  # worked out once per engine (tens of ms)
            self._default_width = default_group_size(self.cfg, self._device().platform, self.env)
        width = self._default_width
        return None if width is None or width >= local else balanced_width(local, width)

    def compiled(self, kind: Program, num_agents: int, *args):
        """The compiled program ``kind`` for ``num_agents`` agents and inputs like ``args``.

        Compiled ahead of time on first use, with this backend's compiler options (see
        `_xla_cpu`), and timed in ``compile_seconds`` so callers can report compile and run
        time apart. ``kind`` is a `Program` (`_programs`): ``INIT``, ``TRAIN``, ``Run(n)``
        or ``Generations(...)``.
        """
        cache_key = (kind, num_agents, jax.tree.structure(args))
        if cache_key not in self._compiled:
            t0 = time.perf_counter()
            program = self._fitted(kind, num_agents, args)
            self._compiled[cache_key] = program
            seconds = time.perf_counter() - t0
            self.compile_seconds += seconds
            Engine.total_compile_seconds += seconds
        _keep_alive(self, cache_key)
        self.clock.started()  # the caller runs it now: rates count from here
        return self._compiled[cache_key]

    def _compile(self, kind: Program, num_agents: int, group: int | None, args):
        return self._lower(kind, num_agents, group, args).compile(compiler_options())

    def _lower(self, kind: Program, num_agents: int, group: int | None, args):
        # A fresh function per program: jax's caches of its trace, lowering and executable
        # hang on this function (weakly), so once our compiled program is dropped
        # (`MAX_PROGRAMS`) nothing keeps the executable alive.
        with unrolled_threefry():
            return jax.jit(self.program(kind, num_agents, group)).lower(*args)

    def _fitted(self, kind: Program, num_agents: int, args):
        """Compile ``kind`` to fit the device's memory (`_memory.fit_to_memory`): all of a
        device's agents at once, or in groups that fit, or a one-line refusal."""
        have = int(available_bytes(self._device()) * BUDGET_FRACTION) // self._host_share()
        program, group = fit_to_memory(
            lambda group: self._compile(kind, num_agents, group, args),
            num_agents=num_agents,
            local=self.padded(num_agents) // self.num_devices,
            width=self.group_width(num_agents),
            have=have,
            num_devices=self.num_devices,
            device_kind=self._device().device_kind,
        )
        self.groups[(kind, num_agents)] = group
        return program

    def _host_share(self) -> int:
        """How many of the mesh's devices share this host's memory: CPU devices (one per
        core, `_cpu_devices`) each plan with their share of it; accelerators have their own."""
        if self.mesh is None or self._device().platform != "cpu":
            return 1
        return sum(d.process_index == jax.process_index() for d in self.mesh.devices.flat)

    def _device(self):
        return jax.devices()[0] if self.mesh is None else self.mesh.devices.flat[0]

    def program(self, kind: Program, num_agents: int, group: int | None = None) -> Callable:
        """The pure, unjitted function of program ``kind`` (see `compiled`).

        `make_train`'s view traces it inline when it is called under a caller's own
        transformation (`jax.jit`, `jax.vmap`, ...), so both paths run one definition.
        ``group``: run each device's agents in groups of this many, one group after another.
        """
        valid = np.arange(self.padded(num_agents)) < num_agents
        init = self._per_agent(lambda key, c: init_state(c, self.env, key), valid, group)
        match kind:
            case Init():
                return init
            case Train():
                return lambda keys, hp: self._scan(
                    init(keys, hp), hp, self.cfg.num_updates, valid, group
                )
            case Run(num_updates):
                return lambda state, hp: self._scan(state, hp, num_updates, valid, group)
            case Generations(interval, count, between, tail):
                return lambda state, hp, carry: self._generations(
                    state, hp, carry, interval, count, between, tail, valid, group
                )
        raise TypeError(f"Engine.program: {kind!r} is not a Program (see _programs).")

    def _per_agent(self, fn, valid: np.ndarray, group: int | None = None):
        """vmap ``fn`` over the agent axis; under a mesh, each device maps its own shard.

        With ``group``, each device's agents run as a `lax.map` over groups of ``group``
        (padded by repeating the first agent; the padding is dropped): peak memory is one
        group's, in the same one program.
        """
        local = len(valid) // self.num_devices

        # One agent at a time: the plain per-agent program. A vmap over an axis of size 1
        # still lowers to batched ops, which XLA:CPU ran slower for one agent
        # (docs/benchmarks.md); this also makes a one-agent sweep bitwise `make_train`.
        def one(*args):
            out = fn(*jax.tree.map(lambda x: x[0], args))
            return jax.tree.map(lambda x: x[None], out)

        if group is not None and group < local:
            mapped = _in_groups(one if group == 1 else jax.vmap(fn), group)
        elif local == 1:
            mapped = one
        else:
            mapped = jax.vmap(fn)
        if self.mesh is None:
            return mapped
        spec = PartitionSpec(AXIS)
        # check_vma=False: the per-agent code has no collectives, so JAX's varying-axis type
        # checks (which would demand pcasts on every scan carry initialised from constants)
        # buy nothing here.
        return jax.shard_map(mapped, mesh=self.mesh, in_specs=spec, out_specs=spec, check_vma=False)

    def _scan(self, state: RunnerState, hp: PPOConfig, num_updates: int, valid, group=None):
        self.num_traces += 1
        step = self._per_agent(lambda s, c: update_step(c, self.env, s), valid, group)
        healthy0 = jnp.ones(valid.shape, bool)

        def updates(carry, length):
            """``length`` updates, then one host callback with each one's `Progress`, built
            here for the block at once (per update, its small ops cost as much as the
            callback)."""
            state, healthy = carry
            state, metrics = jax.lax.scan(lambda s, _: step(s, hp), state, None, length=length)
            # healthy after each update: healthy before the block and at every update so far
            ok = ppo_healthy(metrics)
            ok = healthy & jax.lax.associative_scan(jnp.logical_and, ok, axis=0)
            if self.progress is not None:
                self._report(state, hp, metrics, ok, valid)
            return (state, ok[-1]), metrics

        carry = (state, healthy0)
        # In blocks of updates, one host callback after each (module docstring). Nested the
        # same way without one, the computation is the same and so are its results.
        per_callback = updates_per_callback(
            self.cfg, self.progress_every, num_updates, self._device().platform
        )
        if per_callback == num_updates:
            carry, metrics = updates(carry, num_updates)
        else:  # (block, update, ...) -> (update, ...)
            carry, metrics = jax.lax.scan(
                lambda c, _: updates(c, per_callback), carry, None,
                length=num_updates // per_callback,
            )  # fmt: skip
            metrics = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), metrics)
        # (update, agent) -> (agent, update): the agent axis leads everywhere.
        return carry[0], jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), metrics)

    def _report(self, state, hp, metrics: Metrics, healthy, valid) -> None:
        """The host callback after a block of updates, with every update's `Progress`."""
        names, packed = block_rows(
            state.update[0], metrics, healthy, hp, valid, self.progress_agents
        )
        if self.mesh is not None and names:  # one all-gather, quietly
            packed = jax.lax.with_sharding_constraint(
                packed, NamedSharding(self.mesh, PartitionSpec())
            )
        due = functools.partial(
            deliver, self.progress, names, self.progress_every, self.cfg.num_updates, self.clock
        )
        jax.debug.callback(due, packed)

    def _generations(self, state, hp, carry, interval, count, between, tail, valid, group):
        def generation(c, _):
            state, hp, carry = c
            state, metrics = self._scan(state, hp, interval, valid, group)
            state, hp, carry, record = between(state, hp, metrics, carry, valid)
            return (state, hp, carry), (metrics, record)

        (state, hp, carry), (metrics, records) = jax.lax.scan(
            generation, (state, hp, carry), None, length=count
        )
        # (generation, agent, update) -> (agent, generation * update); records agent-first
        metrics = jax.tree.map(
            lambda x: jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:]), metrics
        )
        if tail:
            state, last = self._scan(state, hp, tail, valid, group)
            metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b], 1), metrics, last)
        return state, hp, carry, metrics, jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), records)


_ENGINES: dict = {}

#: Compiled programs kept across all engines; the least recently used is dropped first (and
#: compiled again if it is needed again). An XLA:CPU program holds ~600 memory mappings (3
#: per kernel) until it is freed, and Linux allows 65,530 per process (``vm.max_map_count``):
#: a process that kept every program crashed inside XLA after about a hundred.
MAX_PROGRAMS = 24
_RECENT: OrderedDict = OrderedDict()  # (id(engine), cache key) -> engine


class CompileClock:
    """Compile and run seconds of whatever ran since it was made: compiling is every
    engine's in this process (`Engine.total_compile_seconds`), running is the rest of the
    wall time. The one way sweeps, PBT and chunks tell the two apart."""

    def __init__(self) -> None:
        self.start, self.compile_start = time.perf_counter(), Engine.total_compile_seconds

    def seconds(self) -> tuple[float, float]:
        """``(compile_s, run_s)`` so far."""
        compile_s = Engine.total_compile_seconds - self.compile_start
        return compile_s, time.perf_counter() - self.start - compile_s


def _keep_alive(engine: Engine, cache_key) -> None:
    """Mark ``engine``'s program ``cache_key`` as just used; free the oldest past the limit."""
    entry = (id(engine), cache_key)  # the engine is a value here, so its id stays its own
    _RECENT[entry] = engine
    _RECENT.move_to_end(entry)
    while len(_RECENT) > MAX_PROGRAMS:
        (_, old_key), old_engine = _RECENT.popitem(last=False)
        old_engine._compiled.pop(old_key, None)


def engine_for(
    cfg: PPOConfig,
    mesh: Mesh | None | bool = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    group_size: int | None = None,
    progress_agents: bool = False,
) -> Engine:
    """The shared `Engine` for ``cfg``'s static fields, this placement and group width.

    Configs that differ only in traced hyperparameters run the same programs, so
    `make_train` and `sweep` reuse one engine (and its compiled programs) for them; a new
    ``progress`` function means a new program. Up to 8 engines are kept, and
    `MAX_PROGRAMS` compiled programs across all of them.
    """
    if mesh is None and jax.device_count() == 1:
        mesh = False  # what `Engine` makes of it: share the engine with explicit False
    mesh_key = mesh if isinstance(mesh, bool) or mesh is None else id(mesh)
    key = (
        tuple(cfg.static_fields().items()),
        cfg.max_grad_norm is None,
        mesh_key,
        jax.device_count() if mesh is None else 0,
        progress,
        progress_every,
        group_size,
        progress_agents,
    )
    if key not in _ENGINES:
        if len(_ENGINES) >= 8:
            _ENGINES.pop(next(iter(_ENGINES)))
        _ENGINES[key] = Engine(
            cfg, mesh=mesh, progress=progress, progress_every=progress_every,
            group_size=group_size, progress_agents=progress_agents,
        )  # fmt: skip
    return _ENGINES[key]


def _in_groups(mapped: Callable, group: int) -> Callable:
    """``mapped`` (batched over a leading axis) applied ``group`` rows at a time."""

    def run(*args):
        n = jax.tree.leaves(args)[0].shape[0]
        count = -(-n // group)
        pad = count * group - n

        def split(x):
            if pad:
                x = jnp.concatenate([x, jnp.repeat(x[:1], pad, axis=0)])
            return x.reshape(count, group, *x.shape[1:])

        out = jax.lax.map(lambda a: mapped(*a), jax.tree.map(split, args))
        return jax.tree.map(lambda x: x.reshape(count * group, *x.shape[2:])[:n], out)

    return run
