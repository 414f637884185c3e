"""TensorBoard: one event directory per agent (TensorBoard's "runs"), through the same path
as W&B; the finished run adds the aggregates over agents, the summary table and figures."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np

from ._base import Finished, TrackedAgent, TrackedRun, check_every, installed


@dataclasses.dataclass(frozen=True)
class TensorBoard:
    """Write every agent's metrics as TensorBoard scalars (needs ``pip install
    'purejaxppo[tb]'``): ``log_dir/<agent name>/`` per agent (x axis: the agent's env steps),
    and when the run finishes ``log_dir/all agents/`` (mean, min and max over healthy agents,
    per setting), the summary table as text and the figures as images. None: the run
    directory's ``tb/``. ``every``: as in `WandB`."""

    log_dir: str | None = None
    every: int | Literal["auto"] = "auto"

    name: ClassVar[str] = "TensorBoard"

    def __post_init__(self):
        check_every("TensorBoard", self.every)

    def check(self) -> None:
        if not installed("tensorboardX"):
            raise ImportError(
                "TensorBoard logging needs tensorboardX: pip install 'purejaxppo[tb]'."
            )

    def check_run_dir(self, who: str, run_dir) -> None:
        """Its default place is the run directory: a run without one needs ``log_dir``."""
        if self.log_dir is None and run_dir is None:
            raise ValueError(
                f"{who}(tracker=TensorBoard()): with no run_dir, give TensorBoard(log_dir=...)."
            )

    def open(self, run: TrackedRun, stored: dict | None) -> _Session:
        return _Session(self, Path(self.log_dir or Path(run.run_dir) / "tb"), run)


class _Session:
    def __init__(self, options: TensorBoard, log_dir: Path, run: TrackedRun):
        from ..rundir._events import EventFile

        self.options = options
        self.log_dir = log_dir
        self.run = run
        self.files = {a.index: EventFile(log_dir / run_name(a.name)) for a in run.agents}

    def state(self) -> dict:
        return {"options": dataclasses.asdict(self.options)}

    def log(self, update: int, rows: Sequence[tuple[TrackedAgent, dict[str, float]]]) -> None:
        skip = ("update", "env_steps")
        for agent, row in rows:
            values = {
                k: v
                for k, v in row.items()
                if k not in skip and (self.run.kind == "pbt" or not k.startswith("hp/"))
            }
            # one event of every value per agent and update (x axis: the agent's env steps)
            self.files[agent.index].add(int(row["env_steps"]), values)

    def finish(self, finished: Finished | None) -> None:
        for f in self.files.values():
            f.close()
        if finished is None:
            return
        from tensorboardX import SummaryWriter

        from .._results import SweepResult

        if isinstance(finished.result, SweepResult):
            from ..rundir import write_tensorboard

            write_tensorboard(self.log_dir / "all agents", finished.result)
        writer = SummaryWriter(str(self.log_dir / "summary"))
        try:
            writer.add_text("summary", _markdown(finished.table))
            if finished.lineage:
                writer.add_text("lineage", _markdown(finished.lineage))
            for name, path in finished.files.items():
                if path.suffix == ".png":
                    from PIL import Image

                    image = np.asarray(Image.open(path).convert("RGB"))
                    writer.add_image(name, image, dataformats="HWC")
        finally:
            writer.close()


def run_name(name: str) -> str:
    """An agent's name as a directory name (TensorBoard's run name)."""
    return re.sub(r"[^A-Za-z0-9_.=,+-]+", "_", name).strip("_") or "agent"


def _markdown(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in columns) + " |" for r in rows]
    return "\n".join(lines)
