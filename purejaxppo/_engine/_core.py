"""`Engine`: a batch of agents of one static config as one compiled program (see the
package's docstring), and `CompileClock`, the one way compile and run time are told apart."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh
from jaxtyping import PRNGKeyArray

from .._agents import batched, num_agents_of
from .._config import PPOConfig
from .._distributions import policy_distribution
from .._groups import balanced_width, check_group_size, default_group_size
from .._memory import BUDGET_FRACTION, available_bytes, fit_to_memory
from .._networks import network_shapes
from .._placement import AXIS, agent_mesh, gather, place, replicate
from .._ppo import Metrics, RunnerState, init_state, update_step
from .._programs import INIT, TRAIN, Between, Generations, Init, Program, Run, Train
from .._progress import ProgramClock, ProgressFn, deliver, updates_per_callback
from .._xla_cpu import compiler_options, unrolled_threefry
from ..envs import lowering_for, make_env
from ._bodies import generations, per_agent, report_block, update_scan
from ._kept import keep_alive

#: `Engine.compile_ahead` on a CPU too (tests and benchmarks: the same program, in a thread).
AHEAD_ON_CPU = False
_LOWERING = threading.RLock()  # programs trace and lower one at a time; XLA compiles in parallel


def _check_updates(caller: str, num_updates: Any) -> None:
    if not isinstance(num_updates, int) or isinstance(num_updates, bool) or num_updates < 1:
        raise ValueError(f"{caller}(num_updates={num_updates!r}): need a positive int.")


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
        self._ahead: dict = {}  # cache key -> Future of a program compiling in the background
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
        _check_updates("run", num_updates)
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
            pending = self._ahead.pop(cache_key, None)
            if pending is not None:  # compiling in the background: wait for it
                program = pending.result()
            else:
                program = self._fitted(kind, num_agents, args)
            self._compiled[cache_key] = program
            seconds = time.perf_counter() - t0
            self.compile_seconds += seconds
            Engine.total_compile_seconds += seconds
        keep_alive(self, cache_key)
        self.clock.started()  # the caller runs it now: rates count from here
        return self._compiled[cache_key]

    def compile_ahead(self, num_updates: int, keys: PRNGKeyArray, hparams: PPOConfig) -> bool:
        """Start compiling ``run``'s ``num_updates``-update program for these agents in a
        background thread, from the shapes `init` gives; `run` then waits for it (the wait
        is its compile time). Why: XLA compiles on the host while the device runs, and two
        programs compile at once, so a run's init program (a Craftax world generator: 52 s
        on a TPU) and its first chunk's compile overlap, and a tail chunk's program compiles
        while the earlier chunks run. The same program as `run` compiles itself.

        The program is planned against the device memory free when this is called (call
        it before a program runs, not during). Only on an accelerator with one device (no
        mesh) for now: on a 2-core CPU it paid too (a chunked Craftax run 0.75x, the maze
        0.95x: benchmarks/bench_compile_ahead.py) but the CPU's several devices and many
        agents are not measured yet (`AHEAD_ON_CPU` turns it on there). A process that
        ends while it compiles waits for it. Returns whether it started."""
        _check_updates("compile_ahead", num_updates)
        if self.mesh is not None or (self._device().platform == "cpu" and not AHEAD_ON_CPU):
            return False
        n = num_agents_of(keys, hparams, self.cfg)
        keys, hp = self._place((keys, batched(hparams, n)), n)
        state = jax.eval_shape(self.program(INIT, n), keys, hp)
        kind, args = Run(num_updates), (state, hp)
        cache_key = (kind, n, jax.tree.structure(args))
        if cache_key in self._compiled or cache_key in self._ahead:
            return False
        future: Future = Future()
        have = self._budget()  # now, not while a program runs and holds its temporaries

        def compile_() -> None:
            try:
                future.set_result(self._fitted(kind, n, args, have))
            except BaseException as e:  # raised where `run` waits for it
                future.set_exception(e)

        self._ahead[cache_key] = future
        # Not a daemon: a process that ends while XLA compiles waits for it, where a daemon
        # thread coming back from XLA into a finalising interpreter aborts the process.
        threading.Thread(target=compile_, name="purejaxppo-compile", daemon=False).start()
        return True

    def _compile(self, kind: Program, num_agents: int, group: int | None, args):
        return self._lower(kind, num_agents, group, args).compile(compiler_options())

    def _lower(self, kind: Program, num_agents: int, group: int | None, args):
        # A fresh function per program: jax's caches of its trace, lowering and executable
        # hang on this function (weakly), so once our compiled program is dropped
        # (`MAX_PROGRAMS`) nothing keeps the executable alive.
        # One at a time: `unrolled_threefry` edits jax's table of lowerings. The env sees
        # the platform the program is for (`lowering_platform`).
        with _LOWERING, unrolled_threefry(), lowering_for(self._device().platform):
            return jax.jit(self.program(kind, num_agents, group)).lower(*args)

    def _fitted(self, kind: Program, num_agents: int, args, have: int | None = None):
        """Compile ``kind`` to fit ``have`` bytes of device memory (default: what is free
        now, `_budget`) (`_memory.fit_to_memory`): all of a device's agents at once, or in
        groups that fit, or a one-line refusal."""
        have = self._budget() if have is None else have
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

    def _budget(self) -> int:
        """The device memory a program may plan with now, bytes."""
        return int(available_bytes(self._device()) * BUDGET_FRACTION) // self._host_share()

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
        init = per_agent(lambda key, c: init_state(c, self.env, key), valid, self.mesh, group)
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
                scan = functools.partial(self._scan, valid=valid, group=group)
                return lambda state, hp, carry: generations(
                    scan, between, state, hp, carry, interval, count, tail, valid
                )
        raise TypeError(f"Engine.program: {kind!r} is not a Program (see _programs).")

    def _scan(self, state: RunnerState, hp: PPOConfig, num_updates: int, valid, group=None):
        """``num_updates`` updates of every agent (`_bodies.update_scan`), in blocks of
        `updates_per_callback`, with this engine's progress callback after each."""
        self.num_traces += 1
        step = per_agent(lambda s, c: update_step(c, self.env, s), valid, self.mesh, group)
        report = None
        if self.progress is not None:
            report = functools.partial(
                report_block, self._deliver, self.mesh, self.progress_agents, valid
            )
        per_callback = updates_per_callback(
            self.cfg, self.progress_every, num_updates, self._device().platform
        )
        return update_scan(step, state, hp, num_updates, per_callback, valid, report)

    def _deliver(self, names: tuple[str, ...], packed) -> None:
        """On the host: a block's rows to ``progress`` (`_progress.deliver`)."""
        deliver(self.progress, names, self.progress_every, self.cfg.num_updates, self.clock, packed)


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
