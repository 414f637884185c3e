"""What a tracker is given: the run and its agents, each update's values, the finished run."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


def check_every(who: str, every) -> None:
    """``every``: a positive int or ``"auto"``, else one line."""
    if every == "auto" or (isinstance(every, int) and not isinstance(every, bool) and every >= 1):
        return
    raise ValueError(f"{who}(every={every!r}): give a positive int (updates) or 'auto'.")


def installed(module: str) -> bool:
    """Whether ``module`` is there to import, without importing it: ``check()`` runs before
    the compile, and ``import wandb`` alone takes ~0.4 s, which the writer thread's import
    spends beside the compile instead."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing; a module without a spec
        return False


class TrackingWarning(UserWarning):
    """A tracker failed; training goes on without it (said once per tracker)."""


@dataclasses.dataclass(frozen=True)
class TrackedAgent:
    """One agent of a tracked run.

    ``index`` is its flat position (the row order of the run's results and summary), ``name``
    its label (``"lr=0.001 seed=3"``), ``coords`` its sweep coordinates and seed (PBT:
    ``{"agent": i}``), ``config`` its full config as JSON (its own hyperparameters set) and
    ``steps_per_update`` the env steps one update gives it (its batch size).
    """

    index: int
    name: str
    coords: dict
    config: dict
    steps_per_update: int


@dataclasses.dataclass(frozen=True)
class TrackedRun:
    """A run as trackers see it: ``kind`` is ``"train"``, ``"sweep"`` or ``"pbt"``; ``name``
    the run's name (its run directory's, else a time stamp); ``run_dir`` None for a run
    kept in memory; ``resumed`` whether it continues a checkpointed run."""

    kind: str
    name: str
    agents: tuple[TrackedAgent, ...]
    run_dir: Path | None = None
    resumed: bool = False


@dataclasses.dataclass(frozen=True)
class Finished:
    """What a finished run adds: ``table`` the summary rows (a sweep: one per setting, with
    IQM and bootstrap CI; PBT: one per agent), ``scores`` each agent's final score (None: no
    episode, or diverged), ``files`` the run directory's figures and GIF by name, ``lineage``
    (PBT: rows of generation, agent, parent, fitness and hyperparameters) and ``result``
    (the `SweepResult` or `PBTResult`)."""

    table: list[dict]
    scores: list[float | None]
    files: dict[str, Path] = dataclasses.field(default_factory=dict)
    lineage: list[dict] | None = None
    result: Any = None


@runtime_checkable
class Session(Protocol):
    """One tracked run in one backend. Every call comes from one background thread."""

    def state(self) -> dict:
        """What to keep in the run directory (``tracking.json``) to continue it on resume
        (W&B: its run ids); JSON."""
        ...

    def log(self, update: int, rows: Sequence[tuple[TrackedAgent, dict[str, float]]]) -> None:
        """One update's values, per agent: finite floats by name, with ``update``,
        ``env_steps`` and ``steps_per_s``."""
        ...

    def finish(self, finished: Finished | None) -> None:
        """Close the run; ``finished`` is None when it stopped early (resumable)."""
        ...

    # Optional: ``cpu_elsewhere() -> float``, the CPU seconds the backend has spent so far
    # outside the writer thread (W&B: its service process), counted in ``every="auto"``'s
    # cost of a write beside the thread's own.


@runtime_checkable
class Tracker(Protocol):
    """A logging backend's options (hashable, frozen): `WandB`, `TensorBoard`, or your own.

    ``every``: write every this many updates, or ``"auto"`` (every update while writing
    costs under 1 % of the run's wall time in CPU, the tracker's thread and its session's
    ``cpu_elsewhere()``; else every k-th; the run's last update is always written).
    ``check()`` runs before anything compiles and raises one clear line if the backend
    cannot be used (its package missing); ``open(run, stored)`` starts a `Session`
    (``stored``: what its session's ``state()`` kept in the run directory, on resume).
    """

    name: str
    every: int | str

    def check(self) -> None: ...

    def open(self, run: TrackedRun, stored: dict | None) -> Session: ...
