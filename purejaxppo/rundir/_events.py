"""`EventFile`: TensorBoard scalars written synchronously, one event per step.

Why not tensorboardX's `SummaryWriter`: its ``add_scalar`` makes one event per value, and
every event goes through a `multiprocessing.Queue` (pickled, ten deep) to a writer thread,
~150 µs an event, which a fast run pays on its critical path. Here an event is serialized
and appended to a buffered file in the caller's thread (tensorboardX's own `EventsWriter`,
the record framing TensorBoard reads).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

#: A live file is flushed (so TensorBoard shows it) when this long has passed since the last.
FLUSH_S = 10.0


class EventFile:
    """One event file in ``log_dir`` (made if missing): `add` one step's scalars, `close`."""

    def __init__(self, log_dir: str | Path):
        from tensorboardX.event_file_writer import EventsWriter

        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self._writer = EventsWriter(str(Path(log_dir) / "events"))
        self._flushed = time.monotonic()

    def add(self, step: int, values: Mapping[str, float]) -> None:
        """One event at ``step`` with every ``tag: value`` of ``values``."""
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values.items()])
        self._writer.write_event(Event(wall_time=time.time(), step=int(step), summary=summary))
        if time.monotonic() - self._flushed > FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self._writer.flush()
        self._flushed = time.monotonic()

    def close(self) -> None:
        self._writer.close()
