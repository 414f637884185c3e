"""Checkpoint files: atomic writes, refusal of anything truncated, corrupted or foreign.

The chunked training loop that writes them is `_sweep._run_chunked` (one agent is a one-seed
sweep, `train_with_checkpoints`). A run directory holds ``sweep.json`` and the last two
checkpoints ``ckpt-<update>.eqx``.

Checkpoint format (one file): a JSON header line, then the payload written by
`equinox.tree_serialise_leaves` (every agent's whole `RunnerState` — network, optimiser
state, env state, running episode sums, PRNG key, update counter — and the metrics of every
update so far). The header carries the format version, what wrote it (the sweep's config,
seeds and axes), the update counter, and the payload's length and SHA-256, so a truncated or
corrupted file, or one written for another sweep, is refused before anything is loaded.

Why Equinox serialisation and not Orbax: the state is a pytree of a few MB per agent on one
host; `tree_serialise_leaves` writes it in one call with no extra dependency, and loads it
into a template built from the config, which is also how we know a checkpoint fits the config.
Orbax's async, sharded, multi-host machinery is not needed here.

Writes are atomic: temporary file in the same directory, flush, fsync, rename, fsync of the
directory. A crash leaves either the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from ._config import PPOConfig

FORMAT = "purejaxppo-checkpoint-1"
KEEP = 2


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: truncated, corrupted, or for another config."""


def config_to_json(cfg: PPOConfig) -> dict:
    return {f.name: _jsonable(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def config_from_json(d: dict) -> PPOConfig:
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = set(d) - names
    if unknown:
        raise CheckpointError(f"config has unknown fields {sorted(unknown)}.")
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    return PPOConfig(**fixed)


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.ndarray, jax.Array)):
        return v.tolist()
    return v


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's checkpoints, oldest first."""
    return sorted(Path(run_dir).glob("ckpt-*.eqx"))


def write_checkpoint(run_dir: str | Path, identity: dict, update: int, tree) -> Path:
    """Atomically write ``tree`` as ``ckpt-<update>.eqx``, stamped with ``identity``.

    ``identity`` (JSON) says what wrote it (config, seed or sweep axes); `read_checkpoint`
    refuses the file unless it is given the same identity. The last two checkpoints are kept.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    eqx.tree_serialise_leaves(buf, tree)
    payload = buf.getvalue()
    header = {
        "format": FORMAT,
        "update": update,
        **identity,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    path = run_dir / f"ckpt-{update:08d}.eqx"
    atomic_write(path, json.dumps(header).encode() + b"\n" + payload)
    for old in checkpoints(run_dir)[:-KEEP]:
        old.unlink()
    return path


def read_checkpoint(path: str | Path, identity: dict, like):
    """Read a checkpoint into a pytree shaped like ``like``; refuse it whole or load it whole."""
    path = Path(path)
    raw = path.read_bytes()
    newline = raw.find(b"\n")
    try:
        header = json.loads(raw[:newline]) if newline > 0 else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a purejaxppo checkpoint (unreadable header).")
    payload = raw[newline + 1 :]
    if len(payload) != header["payload_bytes"]:
        raise CheckpointError(
            f"{path}: truncated or padded: payload is {len(payload)} bytes, the header says "
            f"{header['payload_bytes']}. Resume from the previous checkpoint instead."
        )
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise CheckpointError(f"{path}: corrupted: the payload's SHA-256 does not match.")
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


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
