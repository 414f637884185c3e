"""Many agents in one program: labelled sweeps over seeds and hyperparameters.

``sweep(cfg, seeds=64, lr=[1e-4, 3e-4], ent_coef=[0.0, 0.01])`` trains every combination
(2 × 2 settings × 64 seeds = 256 agents) in one `Engine` program, and
returns the metrics with labelled axes ``("lr", "ent_coef", "seed", "update")``.

**Seeds and keys.** Seed ``s`` is trained with ``jax.random.PRNGKey(s)``; ``seeds=N`` means
seeds ``0 … N-1``, and a list of ints chooses them. The same seed gets the same key in every
hyperparameter setting (common random numbers), so ``res.agent(lr=…, seed=5)`` equals
``make_train(cfg.replace(lr=…))(jax.random.PRNGKey(5))``.

**Static fields** (shapes and loop lengths) cannot be vmapped. Given several values, they run
one program per static combination; the results are stacked on the same labelled axes (the
update axis is padded with NaN where static settings give different numbers of updates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from ._agents import agent_inputs
from ._chunks import RunFiles, planned_chunks, run_chunks
from ._config import PPOConfig, static_field_names
from ._driver import RunOptions, drive
from ._engine import CompileClock, engine_for
from ._ppo import Metrics, RunnerState, healthy
from ._progress import ProgressFn
from ._results import SweepResult, unfilled
from ._search import check_sweep_args, hyperparameter_values, seed_list, static_bases
from .envs import describe_env
from .rundir import write_run
from .rundir._format import config_from_json, config_to_json, read_json
from .tracking import TrackedRun, Tracker
from .tracking._runs import run_name, sweep_agents, sweep_finished


class TrainedAgent(NamedTuple):
    """What `train_with_checkpoints` returns: one agent's final state, its metrics (leading
    axis: update) and whether the run finished (False: stopped early, resumable)."""

    state: RunnerState
    metrics: Metrics
    finished: bool


class ProgramResult(NamedTuple):
    """One static setting's program: its agents' metrics and states shaped
    ``(*settings, seed, ...)``, the updates done in all and in this call, and whether it
    finished."""

    metrics: Metrics
    state: RunnerState
    done: int
    updates_run: int
    finished: bool


def sweep(
    cfg: PPOConfig,
    seeds: int | Sequence[int] = 1,
    *,
    search: str = "grid",
    num_samples: int | None = None,
    sample_seed: int = 0,
    divergence_grad_norm: float = 1e6,
    mesh: Mesh | None | bool = None,
    group_size: int | None = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    run_dir: str | Path | None = None,
    checkpoint_every: int | str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    should_stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
    write_results: bool = True,
    env: Any = None,
    tracker: Tracker | Sequence[Tracker] | None = None,
    **axes: Any,
) -> SweepResult:
    """Train every (hyperparameter setting × seed) of a sweep in one vmapped program.

    Args:
        cfg: the base config; swept fields override it.
        seeds: number of seeds (0 … N-1) or an explicit list of seed ints.
        search: ``"grid"`` (product of the given lists) or ``"random"`` (``num_samples``
            draws; each field is a ``(low, high)`` range, log-uniform for ``lr`` and
            ``adam_eps``, uniform otherwise).
        num_samples: number of random-search samples.
        sample_seed: seed of the random-search draws.
        divergence_grad_norm: an agent is flagged in ``diverged`` when any parameter or loss
            becomes NaN/inf, when a step was skipped for a non-finite loss or gradient
            (``metrics.skipped_steps``), or when its gradient norm ever exceeds this. (Adam's
            normalised steps keep a blown-up agent finite: lr=50 gives norms of 1e12 with
            finite, useless parameters; healthy runs here stay below 1e2.)
        mesh: where the agents run: ``None`` shards the agent axis over every device (one
            device: plain vmap; on CPU, one device per core, see `_cpu_devices`; fewer agents
            than devices take only as many, one agent none: `mesh_for`), a `Mesh` with an
            ``"agents"`` axis (see `agent_mesh`) chooses the devices, ``False`` keeps
            everything on the default device. Results agree agent by agent to float32
            rounding (another vmap width per device; tested).
        group_size: agents vmapped together on each device; the groups run one after another
            inside the one program. None: the backend's default (`default_group_size`: a
            few agents at a time on CPU, all at once on GPU/TPU). Results agree with any
            other width to float rounding (bitwise for the same width).
        progress: ``progress(Progress)`` is called on the host for every
            ``progress_every``-th update and the last, for all agents together (from inside
            the program, a block of updates per host callback: `updates_per_callback`).
        run_dir: train in chunks of ``checkpoint_every`` updates and checkpoint every
            agent's whole state atomically into ``run_dir`` after each chunk.
            ``checkpoint_every="auto"`` (the default with ``run_dir``): a tenth of the run
            per chunk, shortened after a chunk that ran longer than `CHUNK_SECONDS`.
            Chunking never changes results (bit for bit on CPU, tested). When the sweep
            finishes, its results are written there too (`write_run` without evaluation),
            so `read_run`, `load_policy` and ``purejaxppo eval`` can use the directory.
            The directory is locked while the sweep runs (one writer); a directory that
            already holds a run is refused unless ``resume`` or ``overwrite`` is given.
            Static fields run one program after another, each with its own checkpoints.
        resume: continue the sweep checkpointed in ``run_dir`` (see also `resume_sweep`),
            from its newest intact checkpoint (a damaged newer one is skipped, with a
            warning).
        overwrite: delete the run already in ``run_dir`` first.
        should_stop: polled after each chunk; ``True`` stops with a valid checkpoint and a
            result whose ``finished`` is False.
        stop_at: stop at the first checkpoint at or past this many env steps per agent
            (a long run in sittings: `resume_sweep` goes on towards ``total_timesteps``).
        write_results: with ``run_dir``, write the finished run's results there (False:
            the caller writes them, as the CLI does with its evaluation and GIF).
        env: your own environment (as in `make_train`): ``cfg.replace(env=env)``.
        tracker: log every agent's metrics as it trains (`purejaxppo.tracking.WandB`,
            `TensorBoard`, or several in a list): one tracked run per agent, with its
            config, sweep coordinates and seed; when the sweep finishes, its summary table
            (and with ``run_dir``, its figures). A resumed sweep continues the same tracked
            runs (their ids are kept in ``run_dir``). A failing tracker is a warning; the
            sweep goes on.
        **axes: field name → list of values (grid) or (low, high) (random).
    """
    if env is not None:
        cfg = cfg.replace(env=env)
    if run_dir is not None and checkpoint_every is None:
        checkpoint_every = "auto"
    options = RunOptions(
        mesh=mesh, group_size=group_size, progress=progress, progress_every=progress_every,
        run_dir=run_dir, checkpoint_every=checkpoint_every, resume=resume, overwrite=overwrite,
        should_stop=should_stop, stop_at=stop_at, write_results=write_results, tracker=tracker,
    )  # fmt: skip
    chunked = options.checked("sweep", unit="updates", auto=True)
    num_agents = check_sweep_args(cfg, seeds, search, num_samples, axes, chunked)
    trackers = options.trackers("sweep")
    seeds = seed_list(seeds)  # after the checks: a refused count is never materialised
    static_axes = {k: list(v) for k, v in axes.items() if k in static_field_names()}
    traced_axes = {k: v for k, v in axes.items() if k not in static_axes}
    values, hyper_axes = hyperparameter_values(search, traced_axes, num_samples, sample_seed)
    bases = static_bases(cfg, axes)
    all_axes = {**static_axes, **hyper_axes, "seed": seeds}
    labelled = {k: _broadcast_static(v, static_axes) for k, v in values.items()}
    kind = "sweep" if set(all_axes) - {"seed"} else "train"

    def tracked_run() -> TrackedRun:
        agents = sweep_agents(cfg, all_axes, labelled)
        where = None if run_dir is None else Path(run_dir)
        return TrackedRun(kind, run_name(run_dir, kind), agents, where, resume)

    spec = {
        "config": config_to_json(cfg),
        "seeds": seeds,
        "search": search,
        "num_samples": num_samples,
        "sample_seed": sample_seed,
        "divergence_grad_norm": divergence_grad_norm,
        "group_size": group_size,
        "axes": {k: [int(x) if k in static_axes else float(x) for x in v] for k, v in axes.items()},
    }
    if describe_env(cfg) is not None:  # an own environment, described (names: no key, as
        spec["env"] = describe_env(cfg)  # before; checkpoints are stamped with the spec)

    def train(files: RunFiles | None, progress, recorder) -> SweepResult:
        run = options.engine_options(num_agents, progress, trackers)
        results, programs = [], []
        for i, base in enumerate(bases):
            if recorder is not None:  # this program's agents follow the previous ones'
                jax.effects_barrier()
                recorder.program(i * (num_agents // len(bases)))
            clock = CompileClock()
            if files is None:
                r = _run_whole(base, values, seeds, **run)
            else:
                r = _run_chunked(
                    base, values, seeds, files.of_program(None if len(bases) == 1 else i),
                    checkpoint_every, should_stop, stop_at,
                    runs_chunks=not results or results[-1].finished,  # stopped: later wait
                    **run,
                )  # fmt: skip
            compile_s, run_s = clock.seconds()
            widths = engine_for(base, **run).groups
            width = min((w for (_, n), w in widths.items() if n == num_agents), default=None)
            programs.append(
                {"compile_s": compile_s, "run_s": run_s, "updates_run": r.updates_run,
                 "group_size": width}
            )  # fmt: skip
            results.append(r)
        return _sweep_result(
            cfg, results, programs, all_axes, labelled, ndim=len(hyper_axes) + 1,
            divergence_grad_norm=divergence_grad_norm,
        )  # fmt: skip

    return drive(
        "sweep", options, chunked=chunked, trackers=trackers, spec=spec,
        tracked_run=tracked_run, train=train,
        write=lambda result: write_run(run_dir, result, eval_episodes=0, gif=False, overwrite=True),
        finished=sweep_finished,
        open_options=dict(
            settings={"checkpoint_every": checkpoint_every}, defaults={"group_size": None}
        ),
    )  # fmt: skip


def resume_sweep(
    run_dir: str | Path,
    *,
    mesh: Mesh | None | bool = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    should_stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
    write_results: bool = True,
    env: Any = None,
    tracker: Tracker | Sequence[Tracker] | None = None,
) -> SweepResult:
    """Continue the checkpointed sweep in ``run_dir`` (its ``sweep.json`` gives the rest).

    The result equals that of the uninterrupted sweep, bit for bit on CPU. The device count
    may differ from the first run's (checkpoints hold the agents without padding). A sweep
    of an environment object needs it again as ``env`` (one that is not the recorded one is
    refused); one named by an import path is imported again. ``tracker`` continues the
    sweep's tracked runs (the ids its trackers kept in ``run_dir``).
    """
    spec = read_json(Path(run_dir) / "sweep.json", "sweep.json")
    return sweep(
        config_from_json(spec["config"]),
        spec["seeds"],
        search=spec["search"],
        num_samples=spec["num_samples"],
        sample_seed=spec["sample_seed"],
        divergence_grad_norm=spec["divergence_grad_norm"],
        group_size=spec.get("group_size"),  # absent in sweeps written before it existed
        mesh=mesh,
        progress=progress,
        progress_every=progress_every,
        run_dir=run_dir,
        checkpoint_every=spec["checkpoint_every"],
        resume=True,
        should_stop=should_stop,
        stop_at=stop_at,
        write_results=write_results,
        env=env,
        tracker=tracker,
        **spec["axes"],
    )


def train_with_checkpoints(
    cfg: PPOConfig,
    run_dir: str | Path,
    *,
    seed: int = 0,
    checkpoint_every: int = 10,
    resume: bool = False,
    should_stop: Callable[[], bool] | None = None,
    progress: ProgressFn | None = None,
    env: Any = None,
    tracker: Tracker | Sequence[Tracker] | None = None,
) -> TrainedAgent:
    """One agent trained in chunks of ``checkpoint_every`` updates, checkpointed after each.

    A one-seed `sweep` with ``run_dir`` (the same files and checkpoints; `resume_sweep` and
    ``purejaxppo train --resume`` continue it), returning the agent's own `TrainedAgent`
    ``(state, metrics, finished)`` without the seed axis. Results equal
    ``make_train(cfg)(PRNGKey(seed))`` bit for bit on CPU; ``resume=True`` continues from the
    last checkpoint, which must have been written for the same ``cfg`` and ``seed`` (a
    damaged newest one is skipped, with a warning).
    """
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every!r}: need a positive int.")
    res = sweep(
        cfg, [seed], run_dir=run_dir, checkpoint_every=checkpoint_every, resume=resume,
        should_stop=should_stop, progress=progress, env=env, tracker=tracker,
    )  # fmt: skip
    state, metrics = jax.tree.map(lambda x: x[0], (res.state, res.metrics))
    return TrainedAgent(state, metrics, res.finished)


def _set_updates(m: np.ndarray, c: np.ndarray, start: int) -> np.ndarray:
    if not m.flags.writeable:  # loaded from a checkpoint: copy once, then fill in place
        m = np.array(m)
    m[:, start : start + c.shape[1]] = c
    return m


def _unflatten(tree, shape):
    return jax.tree.map(lambda x: np.asarray(x).reshape(*shape, *x.shape[1:]), tree)


def _pad_updates(metrics: Metrics, n: int) -> Metrics:
    def pad(x):
        missing = n - x.shape[-1]
        if missing == 0:
            return x
        fill = np.nan if x.dtype.kind == "f" else 0
        return np.concatenate([x, np.full((*x.shape[:-1], missing), fill, x.dtype)], -1)

    return jax.tree.map(pad, metrics)


def _broadcast_static(v: np.ndarray, static_axes: dict) -> np.ndarray:
    sizes = tuple(len(x) for x in static_axes.values())
    return np.broadcast_to(v, (*sizes, *v.shape)) if sizes else v


def _sweep_result(
    cfg: PPOConfig, results: list[ProgramResult], programs: list[dict], axes: dict,
    values: dict, *, ndim: int, divergence_grad_norm: float,
) -> SweepResult:  # fmt: skip
    """The programs' results stacked on the sweep's labelled ``axes`` (static axes first; the
    update axis padded with NaN where programs differ), with their timings."""
    num_updates = max(r.metrics.episode_return.shape[-1] for r in results)
    metrics = [_pad_updates(r.metrics, num_updates) for r in results]
    stack = (lambda *xs: np.stack(xs)) if len(results) > 1 else (lambda x: x)
    states = [r.state for r in results]
    try:
        state = jax.tree.map(stack, *states)
    except ValueError:  # different static shapes: keep a list per static setting
        state = states
    return SweepResult(
        metrics=jax.tree.map(stack, *metrics),
        state=state,
        diverged=np.asarray(stack(*[_diverged(r, ndim, divergence_grad_norm) for r in results])),
        axes=axes,
        values=values,
        config=cfg,
        finished=all(r.finished for r in results),
        timings={
            "compile_s": sum(p["compile_s"] for p in programs),
            "run_s": sum(p["run_s"] for p in programs),
            "programs": programs,  # one per static setting, in order
        },
    )


def _run_whole(base: PPOConfig, values: dict, seeds: list[int], **run) -> ProgramResult:
    """One program over (settings × seeds) from start to finish, in one call."""
    keys, hparams, shape = agent_inputs(base, values, seeds)
    agents = engine_for(base, **run)
    state, metrics = agents(keys, hparams)
    n, updates = len(keys), base.num_updates
    return ProgramResult(
        _unflatten(agents.strip(metrics, n), shape),
        _unflatten(agents.strip(state, n), shape),
        done=updates,
        updates_run=updates,
        finished=True,
    )


def _run_chunked(
    base, values, seeds, files: RunFiles, every, should_stop, stop_at, runs_chunks=True, **run
) -> ProgramResult:
    """One program in chunks of ``every`` updates (`run_chunks`), from the newest intact
    checkpoint of ``files`` when there is one. ``runs_chunks=False`` only loads or
    initialises (a sweep stopped before this static setting's turn)."""
    keys, hparams, shape = agent_inputs(base, values, seeds)
    n, updates = len(keys), base.num_updates
    agents = engine_for(base, **run)

    def like():  # the template of a checkpoint: (state, metrics of every update)
        state_shape, metrics_shape = agents.shapes(keys, hparams)
        return (
            jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), state_shape),
            jax.tree.map(lambda x: np.zeros((n, updates), x.dtype), metrics_shape),
        )

    def advance(carry, done, size):
        state, metrics = carry
        state, chunk = agents.run(state, hparams, size)
        chunk = agents.strip(chunk, n)
        if metrics is None:  # NaN (0 for counts) until an update fills it: never stale
            metrics = jax.tree.map(lambda c: unfilled((n, updates), c.dtype), chunk)
        metrics = jax.tree.map(lambda m, c: _set_updates(m, c, done), metrics, chunk)
        return (state, metrics), size

    loaded = files.newest(like)
    done = int(loaded[0].update[0]) if loaded is not None else 0
    # On an accelerator the chunks' programs compile in the background (`compile_ahead`):
    # the first while init compiles, a shorter tail's once init is in (one program lowers
    # at a time: lowered first, the tail would hold up init).
    stop = None if stop_at is None else -(-stop_at // base.batch_size)  # in updates
    sizes = planned_chunks(done, updates, every, stop) if runs_chunks else []
    for size in sizes[:1]:
        agents.compile_ahead(size, keys, hparams)
    carry = loaded if loaded is not None else (agents.init(keys, hparams), None)
    if sizes[1:]:  # planned against the memory free once init has run, as in turn
        jax.block_until_ready(carry[0])
    for size in sizes[1:]:
        agents.compile_ahead(size, keys, hparams)
    if runs_chunks:
        carry, done, _, ran = run_chunks(
            carry, done=done, total=updates, every=every, advance=advance, files=files,
            checkpoint=lambda c: (agents.strip(c[0], n), c[1]), should_stop=should_stop,
            stop_at=stop_at, env_steps=lambda d: d * base.batch_size,
        )  # fmt: skip
    else:
        ran = 0
    state, metrics = carry
    if metrics is None:  # no chunk ran (a static setting whose turn had not come)
        _, metrics_shape = agents.shapes(keys, hparams)
        metrics = jax.tree.map(lambda x: unfilled((n, updates), x.dtype), metrics_shape)
    return ProgramResult(
        _unflatten(metrics, shape),
        _unflatten(agents.strip(state, n), shape),
        done=done,
        updates_run=ran,
        finished=done == updates,
    )


def _diverged(r: ProgramResult, ndim: int, divergence_grad_norm: float) -> np.ndarray:
    """Per agent: a parameter became NaN/inf, or an update run so far was not `healthy`."""
    bad_params = [
        ~np.isfinite(np.asarray(x).reshape(*x.shape[:ndim], -1)).all(-1)
        for x in jax.tree.leaves(r.state.params)
        if np.asarray(x).dtype.kind == "f"
    ]
    ran = jax.tree.map(lambda x: np.asarray(x)[..., : r.done], r.metrics)
    unhealthy = ~np.asarray(healthy(ran, divergence_grad_norm)).all(-1)
    return np.logical_or.reduce([unhealthy, *bad_params])
