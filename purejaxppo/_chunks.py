"""The one chunked-run driver under `sweep`, `pbt` and `train_with_checkpoints`.

A checkpointed run trains in chunks and writes every agent's whole state atomically after
each. What is common to every kind of run lives here:

* `check_chunking`: the arguments of a chunked run, one line each, before anything runs;
* `open_run`: the owner claim (one writer per run directory), then the run's description
  (``sweep.json`` / ``pbt.json``) written for a new run or checked for a resumed one;
* `RunFiles`: the newest intact checkpoint to resume from, and the checkpoint writes;
* `run_chunks`: the loop: advance one chunk, checkpoint, stop when asked (by any process).

The caller supplies only what one chunk runs (``advance``) and what a checkpoint holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

import jax

from ._backend import ran_on
from ._engine import CompileClock
from ._placement import any_process
from .rundir._format import (
    CheckpointError,
    atomic_write,
    checkpoints,
    config_defaults,
    read_json,
    read_newest_intact,
    upgrade_config,
    write_checkpoint,
)
from .rundir._lock import claim

Carry = TypeVar("Carry")

#: ``checkpoint_every="auto"``: the longest a chunk should run, so that a SIGTERM (which
#: stops at the end of the chunk, with a checkpoint) is honoured well within a typical
#: preemption grace period, and a SIGKILL loses at most this much work.
CHUNK_SECONDS = 60.0

_WHAT = {"sweep": "sweep", "pbt": "PBT run"}


def check_chunking(
    who: str,
    run_dir: Any,
    every: Any,
    resume: bool,
    overwrite: bool,
    stop_at: Any,
    *,
    unit: str,
    auto: bool,
) -> bool:
    """Refuse bad chunking arguments in one line naming ``who``'s argument; returns whether
    the run is chunked (``run_dir`` given). ``unit``: what ``every`` counts; ``auto``: whether
    ``every="auto"`` is allowed."""
    if run_dir is None:
        if every is not None or resume or overwrite:
            raise ValueError(
                f"{who}: checkpoint_every=, resume= and overwrite= need run_dir=<directory>."
            )
    else:
        positive = isinstance(every, int) and not isinstance(every, bool) and every >= 1
        if not positive and not (auto and every == "auto"):
            also = " or 'auto'" if auto else ""
            raise ValueError(
                f"{who}(run_dir=...): checkpoint_every={every!r}; give a positive int "
                f"({unit} per chunk and checkpoint){also}."
            )
    if resume and overwrite:
        raise ValueError(
            f"{who}: resume=True continues the run in run_dir and overwrite=True deletes it; "
            "give one of them."
        )
    bad_stop = not isinstance(stop_at, int) or isinstance(stop_at, bool) or stop_at < 1
    if stop_at is not None and (run_dir is None or bad_stop):
        raise ValueError(
            f"{who}(stop_at={stop_at!r}): give a positive number of env steps, with "
            "run_dir= and checkpoint_every= (it stops at a checkpoint)."
        )
    return run_dir is not None


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """A chunked run's checkpoints: its directory, its identity (the run's description and
    id, checked against every checkpoint read) and, in a sweep over static fields, which
    program's checkpoints (None: the only one)."""

    run_dir: Path
    identity: dict
    program: int | None = None

    def of_program(self, program: int | None) -> RunFiles:
        return dataclasses.replace(self, program=program)

    def newest(self, like: Callable[[], Any]) -> Any | None:
        """The newest intact checkpoint read into the template ``like()`` (called only when
        a checkpoint exists: a template can cost a trace), or None."""
        if not checkpoints(self.run_dir, self.program):
            return None
        return read_newest_intact(self.run_dir, self.identity, like(), self.program)

    def save(self, done: int, tree: Any) -> None:
        """Checkpoint ``tree`` (host arrays) after ``done`` units; only process 0 writes."""
        if jax.process_index() == 0:
            write_checkpoint(self.run_dir, self.identity, done, tree, self.program)


@contextlib.contextmanager
def open_run(
    run_dir: str | Path,
    kind: str,
    spec: dict,
    *,
    resume: bool,
    overwrite: bool,
    settings: dict | None = None,
    defaults: dict | None = None,
) -> Iterator[RunFiles]:
    """Hold ``run_dir`` for this run (process 0 claims it: one writer), with its description.

    A new run writes ``<kind>.json``: ``spec``, ``settings`` (stored, not part of the
    identity: they may differ on resume) and a fresh run id. A resumed run checks the stored
    file describes ``spec`` (``defaults`` fill fields that older releases did not write, and
    `config_defaults` the config fields added since, `upgrade_config` those whose default
    changed), and keeps the stored description as the
    identity its checkpoints are stamped with.
    """
    mode = "resume" if resume else "overwrite" if overwrite else "new"
    owner = claim(run_dir, mode) if jax.process_index() == 0 else contextlib.nullcontext()
    with owner:
        path = Path(run_dir) / f"{kind}.json"
        if resume:
            written = read_json(path, path.name)
            stored = {**(defaults or {}), **written}
            ours, theirs = spec.get("config"), stored.get("config")
            if isinstance(ours, dict) and isinstance(theirs, dict):  # fields added since
                added = {k: v for k, v in config_defaults().items() if k in ours}
                upgraded = upgrade_config(theirs).items()
                stored["config"] = {
                    **added,
                    **{k: v for k, v in upgraded if k in theirs or k in ours},
                }
            skip = {"run", "ran_on", *(settings or {})}
            if stored.get("env") != spec.get("env"):
                raise CheckpointError(
                    f"{run_dir}: this {_WHAT[kind]} was trained on {stored.get('env')!r}, "
                    f"not {spec.get('env')!r}; resume it with its environment (env=...)."
                )
            described = {k: v for k, v in stored.items() if k not in skip}
            if described != spec:
                raise CheckpointError(
                    f"{run_dir}: {path.name} describes a different {_WHAT[kind]} "
                    f"(it differs in {_differences(described, spec)})."
                )
            run_id = stored.get("run", "")
            # Its checkpoints are stamped with the description as written: keep stamping it.
            spec = {k: v for k, v in written.items() if k not in skip}
        else:
            run_id = uuid.uuid4().hex
            if jax.process_index() == 0:
                stored = {**spec, **(settings or {}), "ran_on": ran_on(), "run": run_id}
                text = json.dumps(stored, indent=1)
                atomic_write(path, text.encode())
        yield RunFiles(Path(run_dir), {kind: spec, "run": run_id})


class Chunked(NamedTuple, Generic[Carry]):
    """Where `run_chunks` stopped: the carry, the units done in all, whether the run is
    finished, and the units this call ran."""

    carry: Carry
    done: int
    finished: bool
    ran: int


def run_chunks(
    carry: Carry,
    *,
    done: int,
    total: int,
    every: int | str,
    advance: Callable[[Carry, int, int], tuple[Carry, int]],
    files: RunFiles | None = None,
    checkpoint: Callable[[Carry], Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
    env_steps: Callable[[int], int] = lambda done: 0,
) -> Chunked[Carry]:
    """Advance ``carry`` from ``done`` to ``total`` units in chunks, checkpointing after each.

    ``advance(carry, done, size)`` runs one chunk of at most ``size`` units and returns the
    new carry and the units it ran. ``every``: units per chunk, or ``"auto"`` (`auto_chunk`,
    shortened by `shorter_chunk` after a chunk that ran long). With ``files``, every process
    calls ``checkpoint(carry)`` (gathering is a collective) and process 0 writes it. Stops
    early, after a checkpoint, when ``should_stop()`` is true on any process or when
    ``env_steps(done)`` reaches ``stop_at``.
    """
    start = done
    size = first_chunk(total, every)
    while done < total:
        clock = CompileClock()
        carry, ran = advance(carry, done, min(size, total - done))
        _, seconds = clock.seconds()
        if every == "auto":
            size = shorter_chunk(size, seconds / ran)
        done += ran
        if files is not None:
            files.save(done, checkpoint(carry))
        if done == total:
            break
        if any_process(should_stop is not None and should_stop()):
            break
        if stop_at is not None and env_steps(done) >= stop_at:
            break
    return Chunked(carry, done, done == total, done - start)


def first_chunk(total: int, every: int | str) -> int:
    """The size of `run_chunks`' chunks, until ``"auto"`` shortens them."""
    return auto_chunk(total) if every == "auto" else every


def planned_chunks(done: int, total: int, every: int | str, stop: int | None = None) -> list[int]:
    """The distinct chunk sizes `run_chunks` will run from ``done`` (a program each), unless
    ``"auto"`` shortens a chunk that ran long or the run is asked to stop: the chunks, then
    a shorter tail where they do not divide what is left. ``stop``: the run stops at the
    first chunk's end at or past this unit (`run_chunks`' ``stop_at``), so it may never
    reach the tail."""
    size, left = first_chunk(total, every), total - done
    if left <= 0:
        return []
    if stop is not None and stop > done:  # the chunk ends it runs to before it stops
        left = min(left, -(-(stop - done) // size) * size)
    elif stop is not None:
        left = min(left, size)  # the first chunk ends it
    return [min(size, left)] + ([left % size] if left > size and left % size else [])


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


def _differences(stored: dict, spec: dict) -> str:
    """The description's keys (a config's fields as ``config.<name>``) that differ, for the
    refusal to resume: which setting to give as the run had it."""
    keys = []
    for k in sorted(set(stored) | set(spec)):
        a, b = stored.get(k), spec.get(k)
        if k == "config" and isinstance(a, dict) and isinstance(b, dict):
            keys += [f"config.{f}" for f in sorted(set(a) | set(b)) if a.get(f) != b.get(f)]
        elif a != b:
            keys.append(k)
    return ", ".join(keys)
