"""Read an offline W&B run file (``run-<id>.wandb``) back, record by record, with wandb's
own record type (`wandb.proto.wandb_internal_pb2.Record`).

wandb 0.31 ships no Python reader for these files (its ``datastore`` module is gone; the
``LocalApi`` reader is an open pull request, wandb/wandb#12745), so the framing is read
here: the ``:W&B`` header (7 bytes), then LevelDB's log format (32 KiB blocks; each record
piece has a 7-byte header: CRC, length, type FULL/FIRST/MIDDLE/LAST). Every payload is
parsed by wandb's protobuf; nothing here interprets the contents.
"""

from __future__ import annotations

import glob
import json
import struct
from pathlib import Path

HEADER, BLOCK = 7, 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path):
    """Every `Record` in the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, pieces = 7, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # the block's tail is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        pos += HEADER
        chunk, pos = data[pos : pos + length], pos + length
        if kind == 0:
            break
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pieces + chunk)
            pieces = b""
            yield record
        elif kind in (FIRST, MIDDLE):
            pieces += chunk


def read_run(path: str | Path) -> dict:
    """One offline run: its id, name, group, job type, config, history rows (dicts),
    summary and saved files' names, from its records."""
    out = {"history": [], "summary": {}, "config": {}, "files": []}
    for r in records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out.update(id=r.run.run_id, name=r.run.display_name, group=r.run.run_group,
                       job_type=r.run.job_type, tags=list(r.run.tags))  # fmt: skip
            for item in r.run.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in r.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append(
                {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            )
        elif kind == "files":
            out["files"].extend(f.path for f in r.files.files)
        elif kind == "summary":
            for item in r.summary.update:
                out["summary"]["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return out


def read_runs(directory: str | Path) -> list[dict]:
    """Every offline run under ``directory`` (``wandb/offline-run-*``), oldest first."""
    paths = sorted(glob.glob(str(Path(directory) / "wandb" / "offline-run-*" / "run-*.wandb")))
    return [{**read_run(p), "path": p} for p in paths]
