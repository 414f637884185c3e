"""Checkpointed training: K updates per compiled chunk, atomic checkpoints, exact resume.

A run directory holds ``config.json`` and the last two checkpoints ``ckpt-<update>.eqx``.

Checkpoint format (one file): a JSON header line, then the payload written by
`equinox.tree_serialise_leaves` (the whole `RunnerState` — network, optimiser state, env
state, running episode sums, PRNG key, update counter — and the metrics of every update so
far). The header carries the format version, the config, the update counter, and the payload's
length and SHA-256, so a truncated or corrupted file, or one written for another config, is
refused before anything is loaded.

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
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._config import PPOConfig
from ._ppo import Metrics, RunnerState, Train, make_train, update_step

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


def save(run_dir: str | Path, cfg: PPOConfig, seed: int, state: RunnerState, metrics: Metrics):
    """Atomically write a checkpoint of one agent's ``state`` and ``metrics``; keep the last two."""
    identity = {"config": config_to_json(cfg), "seed": seed}
    return write_checkpoint(run_dir, identity, int(state.update), (state, metrics))


def load(path: str | Path, train: Train, seed: int) -> tuple[RunnerState, Metrics]:
    """Load a checkpoint written for ``train.cfg``; refuse anything else, loading nothing."""
    identity = {"config": config_to_json(train.cfg), "seed": seed}
    return read_checkpoint(path, identity, _template(train, seed))


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
    _atomic_write(path, json.dumps(header).encode() + b"\n" + payload)
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


def train_with_checkpoints(
    cfg: PPOConfig,
    run_dir: str | Path,
    *,
    seed: int = 0,
    checkpoint_every: int = 10,
    resume: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    progress=None,
) -> tuple[RunnerState, Metrics, bool]:
    """Train in chunks of ``checkpoint_every`` updates, checkpointing after each chunk.

    With ``resume=True`` it continues from the run's last checkpoint. Results equal those of
    an uninterrupted ``make_train(cfg)(jax.random.PRNGKey(seed))`` bit for bit on CPU.
    ``should_stop()`` is polled after each chunk (the CLI sets it on SIGINT/SIGTERM); the
    return's last item says whether training finished.
    """
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every}: need a positive int.")
    run_dir = Path(run_dir)
    train = make_train(cfg, progress=progress)
    done = 0
    if resume:
        found = checkpoints(run_dir)
        if not found:
            raise CheckpointError(f"{run_dir}: no checkpoint to resume from.")
        state, metrics = load(found[-1], train, seed)
        done = int(state.update)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(
            run_dir / "config.json",
            json.dumps({"config": config_to_json(cfg), "seed": seed}, indent=1).encode(),
        )
        state = train.init(jax.random.PRNGKey(seed))
        metrics = _template(train, seed)[1]
        metrics = jax.tree.map(lambda x: jnp.full(x.shape, _fill(x.dtype), x.dtype), metrics)
    while done < cfg.num_updates:
        k = min(checkpoint_every, cfg.num_updates - done)
        state, chunk = train.run(state, k)
        metrics = jax.tree.map(lambda m, c, d=done, k=k: m.at[d : d + k].set(c), metrics, chunk)
        done += k
        save(run_dir, cfg, seed, state, metrics)
        if done < cfg.num_updates and should_stop():
            return state, metrics, False
    return state, metrics, True


def read_run_config(run_dir: str | Path) -> tuple[PPOConfig, int]:
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise CheckpointError(f"{run_dir}: no config.json; is this a purejaxppo run directory?")
    d = json.loads(path.read_text())
    return config_from_json(d["config"]), int(d["seed"])


def _template(train: Train, seed: int):
    """Zeros shaped like (state, metrics of every update), from shapes alone (no compile)."""
    cfg = train.cfg.traced()
    state = jax.eval_shape(train.init, jax.random.PRNGKey(seed))
    _, one = jax.eval_shape(lambda s: update_step(cfg, train.env, s), state)
    metrics = jax.tree.map(lambda x: jax.ShapeDtypeStruct((cfg.num_updates,), x.dtype), one)
    return jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), (state, metrics))


def _fill(dtype):
    return np.nan if jnp.issubdtype(dtype, jnp.floating) else 0


def _atomic_write(path: Path, data: bytes) -> None:
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
