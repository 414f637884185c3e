"""Read an offline W&B run file (``run-<id>.wandb``) back, record by record, with wandb's
own record type (`wandb.proto.wandb_internal_pb2.Record`).

wandb 0.31 ships no Python reader for these files (its ``datastore`` module is gone; the
``LocalApi`` reader is an open pull request, wandb/wandb#12745), so the framing is read
here: the ``:W&B`` header (7 bytes), then LevelDB's log format (32 KiB blocks; each record
piece has a 7-byte header: CRC, length, type FULL/FIRST/MIDDLE/LAST). Every payload is
parsed by wandb's protobuf; nothing here interprets the contents.

A run's file is written by wandb-core, which closes (and so flushes) it only after
``run.finish()`` has returned: wandb 0.31 sends that last request without waiting for it
(``ServiceConnection.inform_finish``). For a moment the file can hold its header alone, so
`read_runs` waits for each file's ``exit`` record, the last one a finished run writes.
"""

from __future__ import annotations

import glob
import json
import struct
import time
from pathlib import Path

HEADER, BLOCK = 7, 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path):
    """Every `Record` in the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if len(data) < HEADER:  # created, its header not yet flushed
        return
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, pieces = 7, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # the block's tail is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        pos += HEADER
        chunk, pos = data[pos : pos + length], pos + length
        if kind == 0 or len(chunk) < length:  # the end, or a record not yet flushed
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
    summary, saved files' names and whether its ``exit`` record is there, from its records."""
    out = {"history": [], "summary": {}, "config": {}, "files": [], "exited": False}
    for r in records(path):
        kind = r.WhichOneof("record_type")
        if kind == "exit":
            out["exited"] = True
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


def read_runs(directory: str | Path, timeout: float = 60.0) -> list[dict]:
    """Every offline run under ``directory`` (``wandb/offline-run-*``), oldest first, each
    read once wandb-core has written its ``exit`` record (finished runs only: an unfinished
    one fails after ``timeout`` seconds, naming its file)."""
    paths = sorted(glob.glob(str(Path(directory) / "wandb" / "offline-run-*" / "run-*.wandb")))
    deadline = time.monotonic() + timeout
    runs = {}
    while True:
        runs |= {p: read_run(p) for p in paths if not runs.get(p, {}).get("exited")}
        waiting = [p for p, r in runs.items() if not r["exited"]]
        if not waiting:
            return [{**runs[p], "path": p} for p in paths]
        assert time.monotonic() < deadline, f"no exit record after {timeout:g} s in {waiting}"
        time.sleep(0.05)
