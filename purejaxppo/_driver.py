"""One run driver under `sweep` and `pbt` (and so their resumes and the CLI): what a run
does around its programs, whatever it trains.

A run goes: its trackers and progress relay (`tracking._runs.tracked`), its run directory
claimed with the run's spec (`open_run`: one writer), the recorder started, the caller's
programs, the results written into the directory if the run finished, the trackers
finished. `sweep` and `pbt` differ only in what they check, the spec they record, what
they train and how they write their results.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jax
from jax.sharding import Mesh

from ._chunks import RunFiles, check_chunking, open_run
from ._groups import check_group_size
from ._placement import mesh_for
from ._progress import ProgressFn
from .tracking import TrackedRun, Tracker
from .tracking._base import Finished
from .tracking._recorder import Recorder, as_trackers
from .tracking._runs import finish, tracked


class _Result(Protocol):
    finished: bool


R = TypeVar("R", bound=_Result)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Where and how a run trains, beside what it trains: the arguments `sweep` and `pbt`
    share (their docstrings say what each does). ``checkpoint_every`` is a count of updates
    (or ``"auto"``) for a sweep and of generations for PBT."""

    mesh: Mesh | None | bool = None
    group_size: int | None = None
    progress: ProgressFn | None = None
    progress_every: int = 1
    run_dir: str | Path | None = None
    checkpoint_every: int | str | None = None
    resume: bool = False
    overwrite: bool = False
    should_stop: Callable[[], bool] | None = None
    stop_at: int | None = None
    write_results: bool = True
    tracker: Tracker | Sequence[Tracker] | None = None

    def checked(self, kind: str, *, unit: str, auto: bool) -> bool:
        """Refuse a bad group size or chunking option in one line naming it, before anything
        compiles; returns whether the run is checkpointed in chunks."""
        check_group_size(self.group_size, f"{kind}(group_size)")
        return check_chunking(
            kind, self.run_dir, self.checkpoint_every, self.resume, self.overwrite,
            self.stop_at, unit=unit, auto=auto,
        )  # fmt: skip

    def trackers(self, kind: str) -> tuple[Tracker, ...]:
        """The run's trackers, each checked (`as_trackers`)."""
        return as_trackers(self.tracker, kind, self.run_dir)

    def engine_options(self, num_agents: int, progress: ProgressFn | None, trackers) -> dict:
        """`engine_for`'s keyword arguments for ``num_agents`` agents reporting to
        ``progress`` (the relay `drive` hands over)."""
        return dict(
            mesh=mesh_for(self.mesh, num_agents),
            progress=progress,
            progress_every=self.progress_every,
            group_size=self.group_size,
            progress_agents=bool(trackers),
        )


def drive(
    kind: str,
    options: RunOptions,
    *,
    chunked: bool,
    trackers: tuple[Tracker, ...],
    spec: dict,
    tracked_run: Callable[[], TrackedRun],
    train: Callable[[RunFiles | None, ProgressFn | None, Recorder | None], R],
    write: Callable[[R], None],
    finished: Callable[[R, str | Path | None], Finished],
    open_options: dict | None = None,
) -> R:
    """Run ``train(files, progress, recorder)`` as a ``kind`` run (``"sweep"`` or ``"pbt"``)
    with ``options`` (module docstring). ``spec`` identifies the run in its directory
    (``<kind>.json``); ``write(result)`` writes a finished run's results there (process 0,
    unless ``options.write_results`` is False); ``finished(result, run_dir or None)`` is
    what the trackers record when it finished."""
    with tracked(trackers, tracked_run, options.progress) as (progress, recorder):
        files: Any = contextlib.nullcontext()
        if chunked:
            files = open_run(
                options.run_dir, kind, spec, resume=options.resume, overwrite=options.overwrite,
                **(open_options or {}),
            )  # fmt: skip
        with files as files:
            if recorder is not None:  # after the claim: trackers write into run_dir
                recorder.start()
            result = train(files, progress, recorder)
        wrote = chunked and result.finished and options.write_results
        wrote = wrote and jax.process_index() == 0
        if wrote:
            write(result)
        run_dir = options.run_dir if wrote else None
        finish(recorder, finished(result, run_dir) if result.finished else None)
    return result
