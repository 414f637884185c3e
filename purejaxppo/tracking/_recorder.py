"""The one path from the compiled program to every tracker: `Recorder`.

The engine's progress callback (`Progress.agents`: every agent's values, for each update)
reaches `RELAY`, which hands it to the recorders attached for the run. A `Recorder` turns
the values into host arrays and queues them; one background thread opens the trackers'
sessions (while the program compiles), writes every queued update and finishes the
sessions. So the callback, which the program waits on, only copies a few floats per agent.

A tracker that raises is warned about once and dropped; the run goes on (and its results
are the same: nothing here feeds back into the program).
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._progress import Arrival, arrival
from ._base import Finished, Session, TrackedRun, Tracker, TrackingWarning

#: In the run directory: each tracker's session state (W&B run ids), so a resumed run
#: continues the same tracked runs.
STATE_FILE = "tracking.json"

#: ``every="auto"``: each tracker's share of the run's wall time it may spend writing (its
#: thread's CPU time): past it, it writes every k-th update (the run directory keeps all).
AUTO_BUDGET = 0.01

#: The longest `Recorder.finish` waits for the writer (a tracker stuck on its network).
FINISH_TIMEOUT_S = 600.0


class _Relay:
    """The engine's progress function for tracked runs: one object for every run, so tracked
    runs of one static config share their compiled programs; it forwards each `Progress` to
    the callbacks attached now."""

    def __init__(self):
        self.targets: list[Callable] = []

    def __call__(self, progress) -> None:
        for target in list(self.targets):
            target(progress)

    @contextlib.contextmanager
    def attached(self, target: Callable):
        self.targets.append(target)
        try:
            yield target
        finally:
            self.targets.remove(target)


RELAY = _Relay()


def as_trackers(tracker: Any, who: str, run_dir: Any = None) -> tuple[Tracker, ...]:
    """``tracker`` (None, one tracker or a sequence) as a tuple, each checked (its package
    present; with ``check_run_dir``, the run's directory or its absence) before anything
    compiles; anything else is one line naming ``who``."""
    if tracker is None:
        return ()
    trackers = tuple(tracker) if isinstance(tracker, (list, tuple)) else (tracker,)
    for t in trackers:
        if not isinstance(t, Tracker):
            raise TypeError(
                f"{who}(tracker={t!r}): give purejaxppo.tracking.WandB(...), TensorBoard(...) "
                "or an object with name, check() and open(run, stored) (tracking.Tracker)."
            )
        t.check()
        if hasattr(t, "check_run_dir"):
            t.check_run_dir(who, run_dir)
    return trackers


class Recorder:
    """The trackers of one run: the progress callback's receiver and the writer thread.

    `start` starts the writer, which opens every session (while the program compiles); call
    it with each `Progress` (through `RELAY`), `program` before each program of a sweep over
    static fields (its agents' offset), and `finish` at the end.
    Only process 0 of a multi-process run should make one (the others' `RELAY` has no target).
    """

    def __init__(self, trackers: Sequence[Tracker], run: TrackedRun):
        self.run = run
        self.trackers = list(trackers)
        self.sessions: dict[int, Session] = {}
        self.offset = 0
        self._queue: queue.Queue = queue.Queue()
        self._warned: set[int] = set()
        self._clock: dict[int, tuple[float, int]] = {}  # offset -> its start (t, update)
        self._period: float | None = None  # wall seconds per update
        self._cost: dict[int, float] = {}  # tracker -> CPU seconds per write (moving mean)
        self._first: set[int] = set()  # trackers past their first write
        self._cpu_elsewhere: dict[int, float] = {}  # tracker -> its backend's CPU seconds
        self._written: dict[int, tuple[int, int]] = {}  # tracker -> (offset, update) last written
        self._last: tuple | None = None  # the newest update's values
        self._thread = threading.Thread(target=self._write, name="purejaxppo-tracking", daemon=True)
        self._queue.put(self._open)
        self._started = False

    def start(self) -> None:
        """Start the writer (it opens the sessions): once the run directory is the run's own
        (claimed), since trackers write into it."""
        if not self._started:
            self._started = True
            self._thread.start()

    # -------------------------------------------------------------- callback thread ---
    def __call__(self, progress) -> None:
        if progress.agents is None:
            return
        values = {k: np.asarray(v) for k, v in progress.agents.items()}
        self._queue.put((self.offset, int(progress.update), values, arrival()))

    def program(self, offset: int) -> None:
        """The agents of the next program start at flat index ``offset``."""
        self.offset = offset

    # ------------------------------------------------------------------ main thread ---
    def finish(self, finished: Finished | None) -> None:
        """Write what is queued, then finish every session (``None``: stopped early)."""
        if not self._started:  # nothing was opened
            return
        self._queue.put(self._flush_last)
        self._queue.put(lambda: self._each(lambda s: s.finish(finished)))
        self._queue.put(None)
        self._thread.join(FINISH_TIMEOUT_S)
        if self._thread.is_alive():
            warnings.warn(
                f"tracking: the trackers did not finish within {FINISH_TIMEOUT_S:.0f} s; "
                "the run's own files are complete.",
                TrackingWarning,
                stacklevel=2,
            )

    # --------------------------------------------------------------- writer thread ---
    def _write(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                if callable(item):
                    item()
                else:
                    self._log(*item)
            except Exception as e:  # noqa: BLE001 - never let the writer die with items queued
                self._fail(-1, "failed", e)

    def _open(self) -> None:
        stored = read_state(self.run.run_dir) if self.run.resumed else {}
        for i, t in enumerate(self.trackers):
            try:
                self.sessions[i] = t.open(self.run, stored.get(t.name))
            except Exception as e:  # noqa: BLE001 - a tracker never stops training
                self._fail(i, "could not start", e)
        if self.run.run_dir is not None:
            states = {}
            for i, s in self.sessions.items():
                with contextlib.suppress(Exception):
                    states[self.trackers[i].name] = s.state()
            if states:
                try:
                    write_state(self.run.run_dir, {**stored, **states})
                except OSError as e:
                    self._fail(-1, f"could not write {STATE_FILE}", e)

    def _log(self, offset: int, update: int, values: dict, arrived: Arrival) -> None:
        if self._last is not None and self._last[0] != offset:  # a new program: end the last
            self._flush_last()
        t0, u0 = self._clock.setdefault(offset, (arrived.start, arrived.start_update))
        if arrived.update > u0:  # wall seconds per update, for the auto strides
            self._period = (arrived.t - t0) / (arrived.update - u0)
        self._last = (offset, update, values, arrived)
        due = [i for i in self.sessions if update % self._stride(i) == 0]
        if due:
            self._write_rows(offset, update, values, arrived, due)

    def _write_rows(self, offset: int, update: int, values: dict, arrived: Arrival, due):
        start = time.thread_time()
        t0, u0 = self._clock[offset]
        names = list(values)
        table = np.stack([values[k] for k in names], axis=1)  # (agents, names)
        rows = []
        # as Python floats in one go: per element, NumPy scalars cost ~10x (64 agents: 1 ms,
        # in slices of the GIL the program's next callback waits for)
        finite = np.isfinite(table).tolist()
        for j, (row_values, ok) in enumerate(zip(table.tolist(), finite, strict=True)):
            agent = self.run.agents[offset + j]
            row = {k: v for k, v, f in zip(names, row_values, ok, strict=True) if f}
            row["update"] = update
            row["env_steps"] = update * agent.steps_per_update
            if arrived.update > u0:  # over whole callbacks: their updates arrive together
                row["steps_per_s"] = (
                    (arrived.update - u0) * agent.steps_per_update / (arrived.t - t0)
                )
            rows.append((agent, row))
        shared = (time.thread_time() - start) / len(due)  # building the rows, split
        for i in due:
            start = time.thread_time()
            self._each(lambda s: s.log(update, rows), only=i)
            self._written[i] = (offset, update)
            # elsewhere: what the backend spent since its last write (it works after `log`)
            elsewhere = self._elsewhere(i)
            cost = shared + time.thread_time() - start + elsewhere
            if i not in self._first:  # a first write pays one-time setup (imports): not a rate
                self._first.add(i)
            elif i not in self._cost:
                self._cost[i] = cost
            else:
                self._cost[i] = 0.8 * self._cost[i] + 0.2 * cost

    def _elsewhere(self, i: int) -> float:
        """CPU seconds tracker ``i``'s session spent outside this thread since the last call
        (its ``cpu_elsewhere``; 0 without one)."""
        session = self.sessions.get(i)
        try:
            now = float(session.cpu_elsewhere())
        except Exception:  # noqa: BLE001 - optional, and only an estimate
            return 0.0
        before = self._cpu_elsewhere.get(i, now)
        self._cpu_elsewhere[i] = now
        return max(0.0, now - before)

    def _stride(self, i: int) -> int:
        """Updates between the writes of tracker ``i``: its ``every``, or with ``"auto"``
        the fewest that keep its CPU time within `AUTO_BUDGET` of the run's."""
        every = getattr(self.trackers[i], "every", 1)
        if every != "auto":
            return every
        if i not in self._cost or self._period is None or self._period <= 0:
            return 1
        return max(1, math.ceil(self._cost[i] / (AUTO_BUDGET * self._period)))

    def _flush_last(self) -> None:
        """Write the newest update to every tracker that skipped it (its curves end where
        the run does)."""
        if self._last is None:
            return
        offset, update, values, arrived = self._last
        due = [i for i in self.sessions if self._written.get(i) != (offset, update)]
        if due:
            self._write_rows(offset, update, values, arrived, due)

    def _each(self, call: Callable[[Session], Any], only: int | None = None) -> None:
        for i, s in list(self.sessions.items()):
            if only is not None and i != only:
                continue
            try:
                call(s)
            except Exception as e:  # noqa: BLE001 - a tracker never stops training
                self._fail(i, "failed", e)
                self.sessions.pop(i, None)

    def _fail(self, i: int, what: str, e: Exception) -> None:
        if i in self._warned:
            return
        self._warned.add(i)
        name = self.trackers[i].name if i >= 0 else "tracking"
        warnings.warn(
            f"{name} {what} ({type(e).__name__}: {e}); training goes on without it.",
            TrackingWarning,
            stacklevel=2,
        )


def read_state(run_dir: Path | None) -> dict:
    """The trackers' kept state in ``run_dir`` (``{}`` if none, or unreadable)."""
    if run_dir is None:
        return {}
    try:
        return json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def write_state(run_dir: Path, state: dict) -> None:
    from ..rundir._format import atomic_write

    atomic_write(Path(run_dir) / STATE_FILE, json.dumps(state, indent=1).encode())
