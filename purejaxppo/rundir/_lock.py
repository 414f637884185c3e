"""One writer per run directory, and the rules for starting, resuming or overwriting a run.

`claim(run_dir, mode)` is held for as long as a run writes a directory:

* **A lock.** ``RUN_DIR/.lock`` is held with ``flock`` (released by the kernel when the
  process dies, so a killed run never leaves a lock that blocks the next one) and holds the
  owner's pid, host and start time. A second writer is refused at once, naming the owner;
  a lock file whose owner is gone is a stale lock and is taken over, with a warning.
* **A test write before anything compiles.** The directory is created and the lock file
  written, so a read-only directory, a path that is a file or ``/proc/...`` is refused in
  one line before training, not after it.
* **No silent destruction.** ``mode="new"`` refuses a directory that already holds a run;
  ``"overwrite"`` deletes that run's files first; ``"resume"`` needs a checkpointed run.
* **Orphans.** Temporary files of writes killed half-way (``.NAME.tmp-PID``) are removed.
* **Nothing half-made.** A directory the claim created is removed again when the run fails
  or is refused before anything trained was written to it.

Claims are re-entrant within one process: the CLI claims the directory, and the `sweep` and
`write_run` calls inside that run find it already theirs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

LOCK = ".lock"
Mode = Literal["new", "overwrite", "resume", "results"]

#: Files a run writes (globs); ``--overwrite`` removes exactly these.
RUN_FILES = (
    "sweep.json", "pbt.json", "config.json", "ckpt-*.eqx", "metrics.npz", "metrics.csv",
    "params*.eqx", "curves.png", "episode_stats.png", "summary.md", "summary.csv", "agent.gif",
    "hyperparameters.png", "lineage.png", "tb",
)  # fmt: skip


class RunDirError(ValueError):
    """A run directory that cannot be used as asked (in use, holds a run, not writable)."""


class RunDirWarning(UserWarning):
    """Something about a run directory a user should know (a stale lock taken over, a
    damaged checkpoint skipped)."""


_HELD: dict[Path, int] = {}  # run directories this process has claimed, with a depth count


def holds_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a run's files (a checkpointed or a written run)."""
    d = Path(run_dir)
    return d.is_dir() and any(any(d.glob(p)) for p in RUN_FILES if p != "tb")


@contextlib.contextmanager
def claim(run_dir: str | Path, mode: Mode = "new") -> Iterator[Path]:
    """Own ``run_dir`` for the duration of the block (see the module docstring).

    Modes: ``"new"`` (refuse a directory holding a run), ``"overwrite"`` (delete that run's
    files), ``"resume"`` (need ``sweep.json`` or ``pbt.json``), ``"results"`` (write a
    finished run's files next to its own checkpoints; `write_run` checks the rest).
    """
    path = Path(run_dir)
    key = _key(path)
    if key in _HELD:  # this process already owns it: the outer claim made the checks
        _HELD[key] += 1
        try:
            yield path
        finally:
            _HELD[key] -= 1
        return
    created = not path.exists()
    fd = _lock(path)
    _HELD[key] = 1
    try:
        _check_mode(path, mode)
        _remove_orphans(path)
        yield path
    except BaseException:
        if created:  # a run refused or failed before it trained: leave nothing behind
            _remove_if_untrained(path)
        raise
    finally:
        del _HELD[key]
        _unlock(fd)


#: Files that mean a directory holds training or results worth keeping.
TRAINED_FILES = ("ckpt-*.eqx", "config.json", "params*.eqx", "metrics.npz")


def _remove_if_untrained(path: Path) -> None:
    """Remove a directory this claim created if nothing trained was written to it (only the
    lock and a run's description): a refusal that comes late (XLA's memory analysis after
    compiling) leaves no half-made run directory."""
    if not any(any(path.glob(p)) for p in TRAINED_FILES):
        shutil.rmtree(path, ignore_errors=True)


def _key(path: Path) -> Path:
    return path.resolve()


def _lock(path: Path) -> int:
    import fcntl

    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise RunDirError(f"run directory {path}: cannot write there ({_reason(e)}).") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        owner = _read_owner(fd)
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            who = (
                f"pid {owner.get('pid')} on host {owner.get('host')} (since {owner.get('since')})"
                if owner
                else "another process"
            )
            raise RunDirError(
                f"run directory {path} is in use by {who}; wait for that run to end, or "
                "choose another --run-dir."
            ) from e
        raise RunDirError(f"run directory {path}: cannot lock it ({_reason(e)}).") from e
    stale = _read_owner(fd)
    if stale:
        warnings.warn(
            f"{path}: took over a stale lock of pid {stale.get('pid')} on host "
            f"{stale.get('host')} (that process is gone).",
            RunDirWarning,
            stacklevel=4,
        )
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%FT%T")}
    try:  # the test write: fails here, before compiling, on a full or read-only disk
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        raise RunDirError(f"run directory {path}: cannot write there ({_reason(e)}).") from e
    return fd


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)  # an empty lock file: released cleanly, not stale
    os.close(fd)  # closing releases the flock


def _read_owner(fd: int) -> dict:
    try:
        raw = os.pread(fd, 4096, 0)
        owner = json.loads(raw) if raw else {}
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _check_mode(path: Path, mode: Mode) -> None:
    if mode == "resume":
        if not any((path / name).exists() for name in ("sweep.json", "pbt.json")):
            raise RunDirError(
                f"{path}: no sweep.json or pbt.json, so there is no checkpointed run to resume "
                "here; start a new run with --run-dir instead."
            )
        return
    if mode == "overwrite":
        for pattern in RUN_FILES:
            for p in path.glob(pattern):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        return
    if mode == "new" and holds_run(path):
        raise RunDirError(
            f"{path} already holds a run; continue it with --resume {path}, replace it with "
            "--overwrite, or choose another --run-dir."
        )


def _remove_orphans(path: Path) -> None:
    for tmp in path.glob(".*.tmp-*"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__
