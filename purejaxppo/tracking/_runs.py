"""The tracked run of a sweep or a PBT run: its agents, and what its finish adds; and the
one place a run's `Recorder` starts and finishes (`tracked`)."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ._base import Finished, TrackedAgent
from ._recorder import RELAY, Recorder

#: The figures and GIF of a run directory a finished run hands to its trackers.
FILES = ("curves.png", "episode_stats.png", "hyperparameters.png", "lineage.png", "agent.gif")

_HOLD: contextvars.ContextVar[list | None] = contextvars.ContextVar("tracking_hold", default=None)


def sweep_agents(cfg, axes: dict, values: dict) -> tuple[TrackedAgent, ...]:
    """Every agent of a sweep, in its flat order (static axes first, seed last)."""
    from .._axes import static_setting
    from .._results import _py
    from ..rundir._format import config_to_json

    shape = tuple(len(v) for v in axes.values())
    agents = []
    for j, index in enumerate(np.ndindex(*shape)):
        coords = {k: _py(v[i]) for (k, v), i in zip(axes.items(), index, strict=True)}
        changes = {k: _py(np.asarray(v)[index[:-1]]) for k, v in values.items()}
        changes.update(static_setting(axes, index))
        config = cfg.replace(**changes)
        name = " ".join(f"{k}={_short(v)}" for k, v in coords.items() if len(axes[k]) > 1)
        agents.append(
            TrackedAgent(j, name or f"seed={coords['seed']}", coords, config_to_json(config),
                         config.batch_size)
        )  # fmt: skip
    return tuple(agents)


def pbt_agents(cfg, hp) -> tuple[TrackedAgent, ...]:
    """Every member of a PBT population, with its initial hyperparameters."""
    from .._config import TRACED_FIELDS
    from ..rundir._format import config_to_json

    n = len(np.asarray(hp.lr))
    agents = []
    for i in range(n):
        changes = {
            k: float(np.asarray(getattr(hp, k))[i])
            for k in TRACED_FIELDS
            if getattr(hp, k) is not None and np.ndim(getattr(hp, k))
        }
        agents.append(
            TrackedAgent(i, f"agent={i}", {"agent": i}, config_to_json(cfg.replace(**changes)),
                         cfg.batch_size)
        )  # fmt: skip
    return tuple(agents)


def run_name(run_dir, kind: str) -> str:
    return Path(run_dir).name if run_dir is not None else f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


@contextlib.contextmanager
def tracked(trackers: tuple, run_of, progress) -> Iterator[tuple[Any, Recorder | None]]:
    """Around a run: ``(progress, recorder)`` for its engine. With trackers, the engine's
    progress function is `RELAY` (made with ``progress_agents=True``) on every process, so
    every process compiles the same program; process 0 alone records (``run_of()`` builds
    its `TrackedRun`). Without trackers: ``(progress, None)``, nothing changes.

    A run that raises closes its sessions as stopped early, then raises.
    """
    if not trackers:
        yield progress, None
        return
    recorder = Recorder(trackers, run_of()) if jax.process_index() == 0 else None
    with contextlib.ExitStack() as stack:
        if progress is not None:
            stack.enter_context(RELAY.attached(progress))
        if recorder is not None:
            stack.enter_context(RELAY.attached(recorder))
        try:
            yield RELAY, recorder
        except BaseException:
            if recorder is not None:
                with contextlib.suppress(Exception):  # the run's own error is what matters
                    jax.effects_barrier()
                recorder.finish(None)
            raise


def finish(recorder: Recorder | None, finished: Finished | None) -> None:
    """Finish ``recorder``'s sessions, or hand them to the caller's `hold_finish`."""
    if recorder is None:
        return
    jax.effects_barrier()  # every callback of the last program has been queued
    held = _HOLD.get()
    if held is not None and finished is not None:
        held.append((recorder, finished))
    else:
        recorder.finish(finished)


@contextlib.contextmanager
def hold_finish() -> Iterator[list]:
    """Hold the finish of the runs made inside (the CLI: it writes the run directory, with
    its evaluation and GIF, after `sweep` returns); call `finish_held` after writing."""
    token = _HOLD.set([])
    held = _HOLD.get()
    try:
        yield held
    finally:
        _HOLD.reset(token)
        finish_held(held, None)  # any the caller did not finish (it failed): no files


def finish_held(held: list, run_dir: Path | None, table: list[dict] | None = None) -> None:
    """Finish the held runs, with ``run_dir``'s figures and GIF (and ``table`` in place of
    the result's own summary, e.g. with the success rate)."""
    for recorder, finished in list(held):
        files = run_files(run_dir) if run_dir is not None else finished.files
        held.remove((recorder, finished))
        recorder.finish(
            Finished(
                table if table is not None else finished.table, finished.scores, files,
                finished.lineage, finished.result,
            )
        )  # fmt: skip


def run_files(run_dir) -> dict[str, Path]:
    if run_dir is None:
        return {}
    found = {name: Path(run_dir) / name for name in FILES}
    return {name: path for name, path in found.items() if path.is_file()}


def sweep_finished(result, run_dir) -> Finished:
    from ..stats import final_scores

    scores = final_scores(np.asarray(result.metrics.episode_return))
    scores = np.where(result.diverged, np.nan, scores).reshape(-1)
    return Finished(
        table=[summary_row(r) for r in result.summary()],
        scores=[float(s) if np.isfinite(s) else None for s in scores],
        files=run_files(run_dir),
        result=result,
    )


def pbt_finished(res, run_dir) -> Finished:
    fitness = res.fitness[:, -1]
    hp = {k: v[:, -1] for k, v in res.hyperparameters.items()}
    table = [
        {"agent": i, "fitness": _finite(fitness[i]), **{k: float(v[i]) for k, v in hp.items()}}
        for i in range(res.population)
    ]
    lineage = []
    for g, i in itertools.product(range(res.lineage.shape[1]), range(res.population)):
        parent = int(res.lineage[i, g])
        start = min(g * res.interval, res.num_updates - 1)  # the generation's first update
        lineage.append(
            {"generation": g, "agent": i, "parent": parent, "copied": parent != i,
             "fitness": _finite(res.fitness[i, g]),
             **{k: float(v[i, start]) for k, v in res.hyperparameters.items()}}
        )  # fmt: skip
    return Finished(
        table=table, scores=[_finite(f) for f in fitness], files=run_files(run_dir),
        lineage=lineage, result=res,
    )  # fmt: skip


def _finite(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def summary_row(row: dict) -> dict:
    """A summary row (`SweepResult.summary`, `write_run`) as flat table cells."""
    out = dict(row)
    ci = out.pop("iqm_ci", None)
    out["iqm_ci_low"], out["iqm_ci_high"] = (None, None) if ci is None else map(float, ci)
    out["diverged"] = len(out.get("diverged") or [])
    return out


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
