"""Checkpoint files: atomic writes, refusal of anything truncated, corrupted or foreign.

The chunked-run driver that writes them is `_chunks.run_chunks` (one agent is a one-seed
sweep, `train_with_checkpoints`). A run directory holds ``sweep.json`` and the last two
checkpoints ``ckpt-<update>.eqx`` of the run (``ckpt-p<i>-<update>.eqx`` per static setting).

Checkpoint format (one file, `write_verified`): a JSON header line, then the payload written
by `equinox.tree_serialise_leaves` (every agent's whole `RunnerState` — network, optimiser
state, env state, running episode sums, PRNG key, update counter — and the metrics of every
update so far). The header carries the format version, what wrote it (the run's id, the
sweep's config, seeds and axes), the update counter, and the payload's length and SHA-256,
so a truncated or corrupted file (skipped for an older one on resume), or one written by
another run, is refused before anything is loaded. ``params.eqx`` uses the same header.

Why Equinox serialisation and not Orbax: the state is a pytree of a few MB per agent on one
host; `tree_serialise_leaves` writes it in one call with no extra dependency, and loads it
into a template built from the config, which is also how we know a checkpoint fits the config.
Orbax's async, sharded, multi-host machinery is not needed here.

Writes are atomic: temporary file in the same directory, flush, fsync, rename, fsync of the
directory. A crash leaves either the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import warnings
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .._config import GRU_DEFAULTS, GRU_LEGACY, PPOConfig
from ..envs._own import OwnEnv
from ._lock import RunDirWarning

FORMAT = "purejaxppo-checkpoint-1"
KEEP = 2


class CheckpointError(ValueError):
    """A checkpoint (or ``params.eqx``) that cannot be used: truncated, corrupted, or for
    another config. ``damaged`` is True for a file cut short or altered (resume can fall
    back to an older checkpoint), False for a whole file that belongs to another run."""

    def __init__(self, message: str, *, damaged: bool = False):
        super().__init__(message)
        self.damaged = damaged


def config_to_json(cfg: PPOConfig) -> dict:
    return {f.name: _jsonable(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def config_defaults() -> dict:
    """Every `PPOConfig` field's default, as `config_to_json` writes it: what a run directory
    written before a field existed meant by its absence."""
    return {f.name: _jsonable(f.default) for f in dataclasses.fields(PPOConfig)}


def upgrade_config(d: dict) -> dict:
    """A stored config's fields as this release reads them.

    A recurrent network's initialisation fields that a run directory written before their
    defaults changed does not hold keep what it meant (`GRU_LEGACY`); other networks ignore
    those fields, so theirs are today's defaults whatever was written (a config of 1bc39c7
    wrote ``head_init_gain`` for every network)."""
    d = dict(d)
    if d.get("network", "shared") == "gru":
        return {**GRU_LEGACY, **d}
    return {**d, **GRU_DEFAULTS}


def config_from_json(d: dict) -> PPOConfig:
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = set(d) - names
    if unknown:
        raise CheckpointError(f"config has unknown fields {sorted(unknown)}.")
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in upgrade_config(d).items()}
    return PPOConfig(**fixed)


def _jsonable(v):
    if isinstance(v, OwnEnv):  # an env object: its label (the object is given again to load)
        return v.label
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.ndarray, jax.Array)):
        return v.tolist()
    return v


def checkpoints(run_dir: str | Path, program: int | None = None) -> list[Path]:
    """The run's checkpoints, oldest first (``program``: one static setting of a sweep)."""
    pattern = "ckpt-" + ("" if program is None else f"p{program}-") + "[0-9]" * 8 + ".eqx"
    return sorted(Path(run_dir).glob(pattern))


def write_checkpoint(
    run_dir: str | Path, identity: dict, update: int, tree, program: int | None = None
) -> Path:
    """Atomically write ``tree`` as ``ckpt-<update>.eqx``, stamped with ``identity``.

    ``identity`` (JSON) says what wrote it (the run's id, config, seeds, sweep axes);
    `read_checkpoint` refuses the file unless it is given the same identity. The last two
    checkpoints *of this run* are kept: pruning reads each file's header and never touches a
    file another run wrote.
    """
    run_dir = Path(run_dir)
    buf = io.BytesIO()
    eqx.tree_serialise_leaves(buf, tree)
    name = "ckpt-" + ("" if program is None else f"p{program}-") + f"{update:08d}.eqx"
    path = run_dir / name
    write_verified(path, {"format": FORMAT, "update": update, **identity}, buf.getvalue())
    ours = [
        p for p in checkpoints(run_dir, program) if header_of(p).get("run") == identity.get("run")
    ]
    for old in ours[:-KEEP]:
        old.unlink()
    return path


def read_checkpoint(path: str | Path, identity: dict, like):
    """Read a checkpoint into a pytree shaped like ``like``; refuse it whole or load it whole."""
    path = Path(path)
    header, payload = read_verified(path, FORMAT, "checkpoint")
    differ = sorted(k for k in identity if header.get(k) != identity[k])
    if differ:
        raise CheckpointError(
            f"{path}: written by a different {' and '.join(differ)}; resume with the run's "
            "own config.json (purejaxppo train --resume RUN_DIR)."
        )
    try:
        return eqx.tree_deserialise_leaves(io.BytesIO(payload), like)
    except Exception as e:  # pragma: no cover - the checksum catches corruption first
        raise CheckpointError(f"{path}: payload does not match this config's state: {e}") from e


def read_newest_intact(run_dir: str | Path, identity: dict, like, program: int | None = None):
    """The newest checkpoint that reads back whole, or None when there is none.

    A truncated or corrupted newer file (a disk that filled up, a copy cut short) is skipped
    with a `RunDirWarning` naming it; a checkpoint of another run is refused outright.
    """
    found = checkpoints(run_dir, program)
    for i, path in enumerate(reversed(found)):
        try:
            return read_checkpoint(path, identity, like)
        except CheckpointError as e:
            if not e.damaged:
                raise
            older = found[-2 - i].name if i + 1 < len(found) else None
            warnings.warn(
                f"{e} " + (f"Resuming from {older} instead." if older else "No older checkpoint."),
                RunDirWarning,
                stacklevel=2,
            )
    if found:
        raise CheckpointError(f"{run_dir}: no intact checkpoint left to resume from.")
    return None


def write_verified(path: Path, header: dict, payload: bytes) -> None:
    """Atomically write a JSON header line (with the payload's length and SHA-256) and
    ``payload``: what `read_verified` needs to refuse a truncated or altered file."""
    header = {**header, "payload_bytes": len(payload)}
    header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    atomic_write(path, json.dumps(header).encode() + b"\n" + payload)


def read_verified(path: Path, fmt: str, what: str) -> tuple[dict, bytes]:
    """The header and payload of a `write_verified` file, or a `CheckpointError` naming it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the {what} ({e.strerror}).") from e
    newline = raw.find(b"\n")
    try:
        header = json.loads(raw[:newline]) if newline > 0 else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != fmt:
        raise CheckpointError(f"{path}: not a purejaxppo {what} (unreadable header).", damaged=True)
    payload = raw[newline + 1 :]
    if len(payload) != header.get("payload_bytes"):
        raise CheckpointError(
            f"{path}: truncated or padded: payload is {len(payload)} bytes, the header says "
            f"{header.get('payload_bytes')}.",
            damaged=True,
        )
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise CheckpointError(
            f"{path}: corrupted: the payload's SHA-256 does not match.", damaged=True
        )
    return header, payload


def header_of(path: Path) -> dict:
    """A checkpoint's JSON header, or {} when it cannot be read (never raises)."""
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
    except (OSError, ValueError):
        return {}
    return header if isinstance(header, dict) else {}


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file in the same
    directory, flushed and fsynced, renamed over ``path``, and the directory fsynced. A
    failed write (a full disk) removes its temporary file and leaves ``path`` as it was."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PARAMS_FORMAT = "purejaxppo-params-1"


def params_name(i: int, n: int) -> str:
    """The parameter file of static program ``i`` of ``n`` (``params.eqx`` when only one)."""
    return "params.eqx" if n == 1 else f"params-{i}.eqx"


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
