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

import contextlib
import dataclasses
import itertools
import json
import numbers
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh

from ._axes import index_of, split_program, static_setting
from ._checkpoint import (
    CheckpointError,
    atomic_write,
    checkpoints,
    config_from_json,
    config_to_json,
    read_newest_intact,
    write_checkpoint,
)
from ._config import TRACED_FIELDS, PPOConfig, static_field_names
from ._engine import (
    Engine,
    ProgressFn,
    agent_inputs,
    any_process,
    check_group_size,
    engine_for,
    mesh_for,
)
from ._memory import BUDGET_FRACTION, available_bytes, format_bytes
from ._ownership import claim
from ._ppo import Metrics, RunnerState
from .stats import bootstrap_ci, final_scores, iqm

LOG_UNIFORM_FIELDS = ("lr", "adam_eps")  # random search samples these log-uniformly


class Agent(eqx.Module):
    """One agent picked out of a sweep: its config, key, final state and metrics."""

    config: PPOConfig
    seed: int = eqx.field(static=True)
    state: RunnerState
    metrics: Metrics  # leading axis: update
    diverged: bool = eqx.field(static=True)


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Sweep results with labelled axes.

    ``metrics`` leaves have shape ``(*axis_sizes, num_updates)``; ``state`` leaves and
    ``diverged`` have shape ``axis_sizes``. ``axes`` maps each axis name to its coordinates,
    in order; the last swept axis before ``"update"`` is always ``"seed"``. For random search
    the hyperparameter axis is ``"sample"`` and ``values`` holds each sample's values.
    ``timings`` holds this call's ``compile_s`` and ``run_s`` and, per static setting in
    ``programs``, those plus ``updates_run`` and ``group_size`` (the agents per group the
    program ran, on each device).
    """

    metrics: Metrics
    state: RunnerState
    diverged: np.ndarray
    axes: dict
    values: dict  # field name -> array of shape axis_sizes[:-1]
    config: PPOConfig
    finished: bool = True  # False when a checkpointed sweep was stopped early
    timings: dict = dataclasses.field(default_factory=dict)  # compile_s, run_s, programs

    def diverged_agents(self) -> list[dict]:
        """Each diverged agent by name: its swept coordinates, hyperparameters and seed."""
        names = []
        for index in zip(*np.nonzero(self.diverged), strict=True):
            coords = {k: _py(v[i]) for (k, v), i in zip(self.axes.items(), index, strict=True)}
            hp = {k: _py(v[index[: v.ndim]]) for k, v in self.values.items()}
            names.append({**coords, **{k: v for k, v in hp.items() if k not in coords}})
        return names

    def summary(self, last: int = 10, confidence: float = 0.95) -> list[dict]:
        """One row per hyperparameter setting, over its *healthy* seeds (never NaN/inf
        because of a diverged agent, which is left out and named in ``diverged``).

        Each seed's score is its mean episode return over the last ``last`` updates that
        finished episodes. Row keys: the setting's coordinates, ``seeds``, ``healthy``,
        ``scored`` (healthy seeds that finished an episode), ``return_mean``,
        ``return_iqm`` with ``iqm_ci`` (percentile bootstrap over seeds), ``return_min``,
        ``return_max`` and ``diverged`` (the seeds left out).
        """
        scores = final_scores(np.asarray(self.metrics.episode_return), last)
        setting_axes = list(self.axes)[:-1]
        rows = []
        for index in itertools.product(*[range(len(self.axes[k])) for k in setting_axes]):
            per_seed = scores[index]
            healthy = ~self.diverged[index]
            good = per_seed[healthy & np.isfinite(per_seed)]
            row = {k: _py(self.axes[k][i]) for k, i in zip(setting_axes, index, strict=True)}
            for k, v in self.values.items():
                row.setdefault(k, _py(v[index[: v.ndim]]))
            seeds = self.axes["seed"]
            row.update(
                seeds=len(seeds),
                healthy=int(healthy.sum()),
                scored=int(good.size),
                return_mean=float(good.mean()) if good.size else None,
                return_iqm=float(iqm(good)) if good.size else None,
                iqm_ci=tuple(bootstrap_ci(good, iqm, confidence)) if good.size > 1 else None,
                return_min=float(good.min()) if good.size else None,
                return_max=float(good.max()) if good.size else None,
                diverged=[seeds[i] for i in np.nonzero(self.diverged[index])[0]],
            )
            rows.append(row)
        return rows

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    def _state_at(self, index: tuple[int, ...]) -> RunnerState:
        if not isinstance(self.state, list):
            return jax.tree.map(lambda x: x[index], self.state)
        # Static settings with different shapes: one stacked state per static combination.
        program, local = split_program(self.axes, index)
        return jax.tree.map(lambda x: x[local], self.state[program])

    @property
    def state_static_shape(self) -> tuple[int, ...]:
        return tuple(len(self.axes[k]) for k in self.axes if k in static_field_names())

    def agent(self, **coords) -> Agent:
        """The agent at the given coordinates, e.g. ``res.agent(lr=3e-4, seed=5)``.

        Axes of length one may be omitted. For random search, give ``sample=i``.
        """
        return self.agent_at(index_of(self.axes, coords))

    def agent_at(self, index: tuple[int, ...]) -> Agent:
        """The agent at an index into the swept axes (``metrics`` leaves' leading axes)."""
        changes = {k: _py(v[index[:-1]]) for k, v in self.values.items()}
        changes.update(static_setting(self.axes, index))
        return Agent(
            config=self.config.replace(**changes),
            seed=int(self.axes["seed"][index[-1]]),
            state=self._state_at(index),
            metrics=jax.tree.map(lambda x: x[index], self.metrics),
            diverged=bool(self.diverged[index]),
        )


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
        progress: ``progress(Progress)`` is called on the host once per ``progress_every``
            updates for all agents together (from inside the program).
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
        **axes: field name → list of values (grid) or (low, high) (random).
    """
    check_group_size(group_size, "sweep(group_size)")
    if run_dir is not None and checkpoint_every is None:
        checkpoint_every = "auto"
    chunked = _check_chunking(run_dir, checkpoint_every, resume)
    num_agents = check_sweep_args(cfg, seeds, search, num_samples, axes, chunked)
    seed_list = _seeds(seeds)  # after the checks: a refused count is never materialised
    static_axes = {k: list(v) for k, v in axes.items() if k in static_field_names()}
    traced_axes = {k: v for k, v in axes.items() if k not in static_axes}
    if resume and overwrite:
        raise ValueError("sweep: resume=True continues the run in run_dir and overwrite=True "
                         "deletes it; give one of them.")  # fmt: skip
    bad_stop = not isinstance(stop_at, int) or isinstance(stop_at, bool) or stop_at < 1
    if stop_at is not None and (not chunked or bad_stop):
        raise ValueError(
            f"sweep(stop_at={stop_at!r}): give a positive number of env steps, with "
            "run_dir= and checkpoint_every= (it stops at a checkpoint)."
        )

    if search == "grid":
        names = list(traced_axes)
        grids = np.meshgrid(
            *[np.asarray(v, np.float64) for v in traced_axes.values()], indexing="ij"
        )
        values = {n: g for n, g in zip(names, grids, strict=True)}
        hyper_axes = {n: list(traced_axes[n]) for n in names}
    else:  # "random" (check_sweep_args refused anything else)
        rng = np.random.default_rng(sample_seed)
        values = {}
        for name, (low, high) in traced_axes.items():
            if name in LOG_UNIFORM_FIELDS:
                values[name] = np.exp(rng.uniform(np.log(low), np.log(high), num_samples))
            else:
                values[name] = rng.uniform(low, high, num_samples)
        hyper_axes = {"sample": list(range(num_samples))}

    bases = static_bases(cfg, axes)
    mesh = mesh_for(mesh, num_agents)
    run = dict(mesh=mesh, progress=progress, progress_every=progress_every, group_size=group_size)
    spec = {
        "config": config_to_json(cfg),
        "seeds": seed_list,
        "search": search,
        "num_samples": num_samples,
        "sample_seed": sample_seed,
        "divergence_grad_norm": divergence_grad_norm,
        "group_size": group_size,
        "axes": {k: [int(x) if k in static_axes else float(x) for x in v] for k, v in axes.items()},
    }
    owner = contextlib.nullcontext()
    if chunked and jax.process_index() == 0:  # one writer: process 0 of a multi-host run
        owner = claim(run_dir, "resume" if resume else "overwrite" if overwrite else "new")
    results, programs = [], []
    with owner:
        if chunked:
            run_id = _start_or_check(Path(run_dir), spec, checkpoint_every, resume)
        for i, base in enumerate(bases):
            compile_before, t0 = Engine.total_compile_seconds, time.perf_counter()
            if chunked:
                runs_chunks = not results or results[-1][2]  # stopped: later programs wait
                r = _run_chunked(
                    base, values, seed_list, {"sweep": spec, "run": run_id}, Path(run_dir),
                    checkpoint_every, should_stop, stop_at, None if len(bases) == 1 else i,
                    runs_chunks, **run,
                )  # fmt: skip
            else:
                r = (*_run(base, values, seed_list, **run), True, base.num_updates)
            compile_s = Engine.total_compile_seconds - compile_before
            run_s = time.perf_counter() - t0 - compile_s
            widths = engine_for(base, **run).groups
            width = min((w for (_, n), w in widths.items() if n == num_agents), default=None)
            programs.append(
                {"compile_s": compile_s, "run_s": run_s, "updates_run": r[3], "group_size": width}
            )
            results.append(r)
    finished = all(r[2] for r in results)

    num_updates = max(r[0].episode_return.shape[-1] for r in results)
    metrics = [_pad_updates(r[0], num_updates) for r in results]
    stack = (lambda *xs: np.stack(xs)) if len(results) > 1 else (lambda x: x)
    metrics = jax.tree.map(stack, *metrics)
    states = [r[1] for r in results]
    try:
        state = jax.tree.map(stack, *states)
    except ValueError:  # different static shapes: keep a list per static setting
        state = states
    timings = {
        "compile_s": sum(p["compile_s"] for p in programs),
        "run_s": sum(p["run_s"] for p in programs),
        "programs": programs,  # one per static setting, in order
    }
    ndim = len(hyper_axes) + 1  # before the static axes are stacked and updates padded
    diverged = stack(*[_diverged(r[1], r[0], ndim, divergence_grad_norm) for r in results])
    all_axes = {**static_axes, **hyper_axes, "seed": seed_list}
    result = SweepResult(
        metrics=metrics,
        state=state,
        diverged=np.asarray(diverged),
        axes=all_axes,
        values={k: _broadcast_static(v, static_axes) for k, v in values.items()},
        config=cfg,
        finished=finished,
        timings=timings,
    )
    if chunked and finished and write_results and jax.process_index() == 0:
        from ._rundir import write_run  # the run directory's writers build on this module

        write_run(run_dir, result, eval_episodes=0, gif=False, overwrite=True)
    return result


def resume_sweep(
    run_dir: str | Path,
    *,
    mesh: Mesh | None | bool = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    should_stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
    write_results: bool = True,
) -> SweepResult:
    """Continue the checkpointed sweep in ``run_dir`` (its ``sweep.json`` gives the rest).

    The result equals that of the uninterrupted sweep, bit for bit on CPU. The device count
    may differ from the first run's (checkpoints hold the agents without padding).
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
        **spec["axes"],
    )


def _check_chunking(run_dir, checkpoint_every, resume) -> bool:
    if run_dir is None:
        if checkpoint_every is not None or resume:
            raise ValueError("sweep: checkpoint_every= and resume= need run_dir=<directory>.")
        return False
    ok = checkpoint_every == "auto" or (
        isinstance(checkpoint_every, int)
        and not isinstance(checkpoint_every, bool)
        and checkpoint_every >= 1
    )
    if not ok:
        raise ValueError(
            f"sweep(run_dir=...): checkpoint_every={checkpoint_every!r}; give a positive int "
            "(updates per chunk and checkpoint) or 'auto'."
        )
    return True


def _run(base: PPOConfig, values: dict, seeds: list[int], **run):
    """One program over (settings × seeds); returns arrays shaped (*settings, S, ...)."""
    keys, hparams, shape = agent_inputs(base, values, seeds)
    agents = engine_for(base, **run)
    state, metrics = agents(keys, hparams)
    return _unflatten(agents.strip(metrics, len(keys)), shape), _unflatten(
        agents.strip(state, len(keys)), shape
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
) -> tuple[RunnerState, Metrics, bool]:
    """One agent trained in chunks of ``checkpoint_every`` updates, checkpointed after each.

    A one-seed `sweep` with ``run_dir`` (the same files and checkpoints; `resume_sweep` and
    ``purejaxppo train --resume`` continue it), returning the agent's own ``(state, metrics,
    finished)`` without the seed axis. Results equal ``make_train(cfg)(PRNGKey(seed))`` bit
    for bit on CPU; ``resume=True`` continues from the last checkpoint, which must have been
    written for the same ``cfg`` and ``seed`` (a damaged newest one is skipped, with a warning).
    """
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every!r}: need a positive int.")
    res = sweep(
        cfg, [seed], run_dir=run_dir, checkpoint_every=checkpoint_every, resume=resume,
        should_stop=should_stop, progress=progress,
    )  # fmt: skip
    state, metrics = jax.tree.map(lambda x: x[0], (res.state, res.metrics))
    return state, metrics, res.finished


def _start_or_check(run_dir: Path, spec: dict, every: int, resume: bool) -> str:
    """Write a new run's ``sweep.json``, or check a resumed one's; returns the run's id."""
    path = run_dir / "sweep.json"
    if resume:
        stored = {"group_size": None, **read_json(path, "sweep.json")}
        if {k: v for k, v in stored.items() if k not in ("checkpoint_every", "run")} != spec:
            raise CheckpointError(f"{run_dir}: sweep.json describes a different sweep.")
        return stored.get("run", "")
    run_id = uuid.uuid4().hex
    if jax.process_index() == 0:
        text = json.dumps({**spec, "checkpoint_every": every, "run": run_id}, indent=1)
        atomic_write(path, text.encode())
    return run_id


def _run_chunked(
    base, values, seeds, identity, run_dir: Path, every, should_stop, stop_at, program,
    runs_chunks=True, **run,
):  # fmt: skip
    """`_run` in chunks of ``every`` updates with a checkpoint of every agent after each.

    Starts from the newest intact checkpoint of ``program`` when there is one. Returns
    ``(metrics, state, finished, updates_run)``; ``runs_chunks=False`` only loads or
    initialises (a sweep stopped before this static setting's turn).
    """
    keys, hparams, shape = agent_inputs(base, values, seeds)
    n = len(keys)
    agents = engine_for(base, **run)
    updates = base.num_updates
    loaded = None
    if checkpoints(run_dir, program):  # the template costs a trace of the update: only now
        state_shape, metrics_shape = agents.shapes(keys, hparams)
        like = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), state_shape)
        metrics_like = jax.tree.map(lambda x: np.zeros((n, updates), x.dtype), metrics_shape)
        loaded = read_newest_intact(run_dir, identity, (like, metrics_like), program)
    if loaded is not None:
        state, metrics = loaded
        done = int(state.update[0])
    else:
        state, metrics, done = agents.init(keys, hparams), None, 0
    start, writer = done, jax.process_index() == 0
    size = auto_chunk(updates) if every == "auto" else every
    while runs_chunks and done < updates:
        k = min(size, updates - done)
        t0, compile_before = time.perf_counter(), agents.compile_seconds
        state, chunk = agents.run(state, hparams, k)
        chunk = agents.strip(chunk, n)
        seconds = time.perf_counter() - t0 - (agents.compile_seconds - compile_before)
        if every == "auto":
            size = shorter_chunk(size, seconds / k)
        if metrics is None:  # NaN (0 for counts) until an update fills it: never stale
            metrics = jax.tree.map(lambda c: _unfilled((n, updates), c.dtype), chunk)
        metrics = jax.tree.map(lambda m, c, d=done: _set_updates(m, c, d), metrics, chunk)
        done += k
        # Every process gathers (a collective: one process alone would wait forever); only
        # process 0 writes.
        host_state = agents.strip(state, n)
        if writer:
            write_checkpoint(run_dir, identity, done, (host_state, metrics), program)
        stop = any_process(should_stop is not None and should_stop())
        if done < updates and (stop or (stop_at is not None and done * base.batch_size >= stop_at)):
            break
    state = agents.strip(state, n)
    if metrics is None:  # no chunk ran (a static setting whose turn had not come)
        _, metrics_shape = agents.shapes(keys, hparams)
        metrics = jax.tree.map(lambda x: _unfilled((n, updates), x.dtype), metrics_shape)
    return _unflatten(metrics, shape), _unflatten(state, shape), done == updates, done - start


def _unfilled(shape: tuple[int, ...], dtype) -> np.ndarray:
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0, dtype)


#: ``checkpoint_every="auto"``: the longest a chunk should run, so that a SIGTERM (which
#: stops at the end of the chunk, with a checkpoint) is honoured well within a typical
#: preemption grace period, and a SIGKILL loses at most this much work.
CHUNK_SECONDS = 60.0


def auto_chunk(num_updates: int) -> int:
    """The first chunk size of ``checkpoint_every="auto"``: about a tenth of the run, a
    divisor of ``num_updates`` where one lies between a twentieth and a tenth (one compiled
    chunk program instead of two)."""
    target = -(-num_updates // 10)
    for k in range(target, max(1, num_updates // 20) - 1, -1):
        if num_updates % k == 0:
            return k
    return target


def shorter_chunk(size: int, seconds_per_update: float) -> int:
    """After a chunk: ``size``, or the largest divisor of it that runs within
    `CHUNK_SECONDS` (a divisor, so the remaining updates still split into whole chunks)."""
    if size * seconds_per_update <= CHUNK_SECONDS:
        return size
    for k in range(size - 1, 0, -1):
        if size % k == 0 and k * seconds_per_update <= CHUNK_SECONDS:
            return k
    return 1


def read_json(path: Path, what: str) -> dict:
    """A run directory's JSON file, or one line naming the file and what to do."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError as e:
        raise CheckpointError(f"{path}: no {what}; is this a purejaxppo run directory?") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{path}: unreadable {what} ({e}); the file is damaged: restore it from a copy."
        ) from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: {what} is not a JSON object; the file is damaged.")
    return data


def check_sweep_args(
    cfg: PPOConfig,
    seeds: int | Sequence[int],
    search: str,
    num_samples: int | None,
    axes: dict,
    chunked: bool,
) -> int:
    """Every argument of a sweep that can be checked without compiling, and whether its
    agents' host-side arrays fit in memory: one line naming the argument, in about a second
    even for a count far too large (no per-agent list is built first). Returns the number of
    agents. The CLI calls it before it writes anything."""
    if search not in ("grid", "random"):
        raise ValueError(f"sweep(search={search!r}): use 'grid' or 'random'.")
    if search == "random":
        bad = not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool)
        if bad or num_samples < 1:
            raise ValueError(
                f"sweep(search='random'): num_samples={num_samples!r}; give a positive number "
                "of samples (--num-samples N)."
            )
    elif num_samples is not None:
        raise ValueError(
            f"sweep(num_samples={num_samples!r}): it applies to search='random' (--search "
            "random); a grid sweep trains every combination of the given lists."
        )
    check_axes(cfg, axes, search)
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"sweep(seeds={seeds}): need at least one seed.")
        num_seeds = int(seeds)
    else:
        num_seeds = len(_seeds(seeds))
    traced = {k: v for k, v in axes.items() if k not in static_field_names()}
    settings = num_samples if search == "random" else _count(traced)
    num_agents = num_seeds * settings
    check_host_memory(static_bases(cfg, axes), num_agents, chunked)
    return num_agents


def static_bases(cfg: PPOConfig, axes: dict) -> list[PPOConfig]:
    """One config per combination of the swept static fields (one program each)."""
    static = {k: list(v) for k, v in axes.items() if k in static_field_names()}
    combos = list(itertools.product(*static.values())) or [()]
    return [cfg.replace(**dict(zip(static, c, strict=True))) for c in combos]


def check_host_memory(
    bases: list[PPOConfig], num_agents: int, chunked: bool, extra_per_update: int = 0
) -> None:
    """Refuse, before compiling, a sweep whose host-side arrays cannot fit in memory: the
    metrics of every update (10 float32 fields per agent per update: they grow with
    total_timesteps) and the agents' final states (with checkpoints: the host copy, its
    serialisation and the file's bytes). The program's own memory is the engine's check.
    ``extra_per_update``: more host bytes per agent per update (PBT's schedules)."""
    from ._ppo import init_state

    have = int(available_bytes() * BUDGET_FRACTION)
    per_update = len(Metrics._fields) * 4 + extra_per_update
    metrics = sum(num_agents * b.num_updates * per_update for b in bases)
    if metrics > have:
        fit = have // max(1, metrics // num_agents)
        updates = sum(b.num_updates for b in bases)
        fix = (
            f"train at most {fit} agents at once"
            if fit
            else f"lower total_timesteps (about {updates * have // metrics:,} updates fit)"
        )
        raise ValueError(
            f"the metrics of {num_agents} agent(s) × {max(b.num_updates for b in bases):,} "
            f"updates need {format_bytes(metrics)}, and {format_bytes(have)} is available; "
            f"{fix}."
        )
    per_agent = metrics / num_agents
    for b in bases:
        env = engine_for(b, mesh=False).env
        state = jax.eval_shape(lambda k, b=b, env=env: init_state(b, env, k), jax.random.PRNGKey(0))
        per_agent += sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)) * (
            4 if chunked else 2
        )
    if per_agent * num_agents > have:
        raise ValueError(
            f"{num_agents} agent(s) need {format_bytes(per_agent * num_agents)} of host memory "
            f"for their states and metrics ({format_bytes(per_agent)} each), and "
            f"{format_bytes(have)} is available; train at most {int(have // per_agent)} "
            "agents at once."
        )


def _count(hyper_axes: dict) -> int:
    return int(np.prod([len(v) for v in hyper_axes.values()])) if hyper_axes else 1


def _set_updates(m: np.ndarray, c: np.ndarray, start: int) -> np.ndarray:
    if not m.flags.writeable:  # loaded from a checkpoint: copy once, then fill in place
        m = np.array(m)
    m[:, start : start + c.shape[1]] = c
    return m


def _unflatten(tree, shape):
    return jax.tree.map(lambda x: np.asarray(x).reshape(*shape, *x.shape[1:]), tree)


def _diverged(state: RunnerState, metrics: Metrics, ndim: int, max_grad_norm: float):
    """An agent diverged if a parameter or loss became NaN/inf, or its gradients blew up."""

    def bad(x):
        x = np.asarray(x)
        if x.dtype.kind != "f":
            return np.zeros(x.shape[:ndim], bool)
        return ~np.isfinite(x.reshape(*x.shape[:ndim], -1)).all(-1)

    flags = [bad(x) for x in jax.tree.leaves(state.params)]
    for name in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        flags.append(bad(getattr(metrics, name)))
    with np.errstate(invalid="ignore"):
        flags.append((np.asarray(metrics.grad_norm) > max_grad_norm).any(-1))
    flags.append((np.asarray(metrics.skipped_steps) > 0).any(-1))
    return np.logical_or.reduce(flags)


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


def _seeds(seeds) -> list[int]:
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"sweep(seeds={seeds}): need at least one seed.")
        return list(range(int(seeds)))
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, numbers.Integral) for s in seeds):
        raise ValueError(f"sweep(seeds={seeds!r}): give a count or a non-empty list of ints.")
    return [int(s) for s in seeds]


def check_axes(cfg: PPOConfig, axes: dict, search: str) -> None:
    """Refuse a bad sweep axis (unknown field, empty, not numbers, a value the config
    refuses, a random range given high to low) before anything compiles."""
    fields = set(TRACED_FIELDS) | set(static_field_names())
    for name, vals in axes.items():
        if name not in fields:
            close = [f for f in sorted(fields) if name.replace("_", "") in f.replace("_", "")]
            hint = f" Did you mean {close}?" if close else ""
            raise ValueError(
                f"sweep: unknown hyperparameter {name!r}.{hint} Traced (vmappable) fields: "
                f"{list(TRACED_FIELDS)}; static fields: {list(static_field_names())}."
            )
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence | np.ndarray):
            raise ValueError(f"sweep: {name}={vals!r} must be a list of values.")
        if len(vals) == 0:
            raise ValueError(f"sweep: {name}=[] is empty; give at least one value.")
        if name in TRACED_FIELDS:
            arr = np.asarray(vals)
            if arr.ndim != 1:
                raise ValueError(
                    f"sweep: {name} must be a flat list of numbers, got shape {arr.shape}."
                )
            if arr.dtype.kind not in "iuf" or arr.dtype == bool:
                raise ValueError(f"sweep: {name}={list(vals)!r} must be numbers.")
            if search == "random":
                if len(vals) != 2:
                    raise ValueError(f"sweep(search='random'): {name} must be a (low, high) range.")
                low, high = (float(v) for v in vals)
                if not low < high:
                    raise ValueError(
                        f"sweep(search='random'): {name}=({low:g}, {high:g}) must be given "
                        f"low to high, e.g. ({min(low, high):g}, {max(low, high):g})."
                    )
                for v in (low, high):  # both ends must make a valid config
                    cfg.replace(**{name: v})
            if search == "grid":
                for v in vals:  # every value must make a valid config on its own
                    cfg.replace(**{name: float(v)})
        else:
            if search == "random":
                raise ValueError(
                    f"sweep: {name} is static (it fixes shapes) and cannot be sampled; "
                    "give it as a list in a grid sweep."
                )
            for v in vals:
                cfg.replace(**{name: v})


def _py(v):
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return int(v)
    return float(v) if np.ndim(v) == 0 and isinstance(v, (numbers.Real, np.floating)) else v
