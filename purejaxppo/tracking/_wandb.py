"""Weights & Biases: one W&B run per agent, in one group per training run.

Why one run per agent: W&B's UI is built around runs. Each agent as a run, with its full
config, lets the runs table filter and sort agents, "Group by" any swept field (a line per
setting with its band over seeds) and the parallel-coordinates and parameter-importance
panels read the sweep directly. One run with per-agent series would put 64 × 20 series
into one run's panels, with no config per agent to group by.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal

from ._base import Finished, TrackedAgent, TrackedRun, check_every, installed

MODES = ("online", "offline", "disabled")


@dataclasses.dataclass(frozen=True)
class WandB:
    """Log every agent to Weights & Biases (needs ``pip install 'purejaxppo[wandb]'``).

    Args:
        project: the W&B project (None: W&B's default, ``WANDB_PROJECT``).
        entity: the team or user (None: yours).
        group: the group of this run's agent runs (None: the run directory's name, else a
            time stamp).
        mode: ``"online"``, ``"offline"`` (written under ``dir``; ``wandb sync`` uploads it
            later) or ``"disabled"``; None: W&B's default (``WANDB_MODE``).
        tags: tags of every run.
        dir: where W&B writes its files (None: the run directory, else W&B's default).
        every: log every this many updates, or ``"auto"``: every update while that costs
            under 1 % of the run's time (on a CPU, 64 agents of a fast env cost more: about
            0.2 ms per agent per update), else every k-th; the last update always.
        requirements: also list every installed package in the group's first run (W&B's
            ``requirements.txt``). Off by default: W&B reads each package's metadata, ~70 ms
            of CPU beside the training; every run's config has ``versions`` of the packages
            that decide its results either way.
    """

    project: str | None = None
    entity: str | None = None
    group: str | None = None
    mode: Literal["online", "offline", "disabled"] | None = None
    tags: tuple[str, ...] = ()
    dir: str | None = None
    every: int | Literal["auto"] = "auto"
    requirements: bool = False

    name: ClassVar[str] = "W&B"

    def __post_init__(self):
        check_every("WandB", self.every)
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"WandB(mode={self.mode!r}): give one of {', '.join(MODES)}.")
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise ValueError(f"WandB(tags={self.tags!r}): give a tuple of strings.")
        if not isinstance(self.requirements, bool):
            raise ValueError(f"WandB(requirements={self.requirements!r}): give True or False.")

    def check(self) -> None:
        if not installed("wandb"):
            raise ImportError("W&B logging needs wandb: pip install 'purejaxppo[wandb]'.")

    def open(self, run: TrackedRun, stored: dict | None) -> _Session:
        return _Session(self, run, stored or {})


class _Session:
    def __init__(self, options: WandB, run: TrackedRun, stored: dict):
        import wandb

        self.wandb = wandb
        self.options = options
        self.run = run
        self.group = stored.get("group") or options.group or run.name
        ids = stored.get("ids", {})
        directory = options.dir or (str(run.run_dir) if run.run_dir is not None else None)
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
        self.common = dict(
            project=options.project, entity=options.entity, group=self.group,
            tags=list(options.tags), dir=directory, reinit="create_new",
            # W&B's own default, read here: its Settings object given below would mask it
            mode=options.mode or os.environ.get("WANDB_MODE") or None,
        )  # fmt: skip
        self.runs = {}
        for agent in run.agents:
            stored_id = ids.get(str(agent.index))
            r = wandb.init(
                name=agent.name, job_type=run.kind, config=_config(run, agent),
                id=stored_id, resume="allow" if stored_id else None, **self.common,
                # the installed packages once per group, if asked: 90 % of an init's CPU
                settings=_settings(wandb, requirements=options.requirements and not self.runs),
            )  # fmt: skip
            r.define_metric("env_steps")
            r.define_metric("*", step_metric="env_steps")
            self.runs[agent.index] = r
        self.service = _service_processes()

    def cpu_elsewhere(self) -> float:
        """CPU seconds of W&B's service processes (``wandb-core``, which serializes and
        writes every logged value) so far: their share of the machine is the run's cost."""
        return sum(stat[2] for pid in self.service if (stat := _proc_stat(pid)) is not None)

    def state(self) -> dict:
        ids = {str(i): r.id for i, r in self.runs.items()}
        options = {**dataclasses.asdict(self.options), "tags": list(self.options.tags)}
        return {"options": options, "group": self.group, "ids": ids}

    def log(self, update: int, rows: Sequence[tuple[TrackedAgent, dict[str, float]]]) -> None:
        for agent, row in rows:
            if self.run.kind != "pbt":  # a sweep's hyperparameters are constant: its config
                row = {k: v for k, v in row.items() if not k.startswith("hp/")}
            self.runs[agent.index].log(row)

    def finish(self, finished: Finished | None) -> None:
        if finished is not None:
            for agent, score in zip(self.run.agents, finished.scores, strict=True):
                if score is not None:
                    self.runs[agent.index].summary["final_return"] = score
        for r in self.runs.values():
            r.finish()
        if finished is not None:
            self._summary_run(finished)

    def _summary_run(self, finished: Finished) -> None:
        """One more run in the group, ``<group>/summary``: the summary table, the figures,
        the GIF and (PBT) the lineage table."""
        wandb = self.wandb
        r = wandb.init(
            name=f"{self.group}/summary", job_type="summary",
            config={"kind": self.run.kind, "agents": len(self.run.agents)}, **self.common,
            settings=_settings(wandb, requirements=False),
        )  # fmt: skip
        data = {"summary": _table(wandb, finished.table)}
        if finished.lineage:
            data["lineage"] = _table(wandb, finished.lineage)
        for path in finished.files.values():
            if path.suffix == ".gif":
                data[path.stem] = wandb.Video(str(path), format="gif")
            else:
                data[path.stem] = wandb.Image(str(path))
        r.log(data)
        r.finish()


def _service_processes() -> list[int]:
    """The pids of this process's W&B service processes (``wandb-core``, ``wandb-symon``),
    from Linux's /proc (elsewhere: none, and `cpu_elsewhere` is 0)."""
    try:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    me = os.getpid()
    found = []
    for pid in pids:
        stat = _proc_stat(pid)
        if stat is not None and stat[1] == me and stat[0].startswith("wandb"):
            found.append(pid)
    return found


def _proc_stat(pid: int) -> tuple[str, int, float] | None:
    """``(name, parent pid, CPU seconds)`` of a process, from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    close = text.rindex(")")  # the name is in parentheses, and may hold any character
    name, fields = text[text.index("(") + 1 : close], text[close + 2 :].split()
    # fields from the 3rd: state, ppid (4th), ..., utime (14th), stime (15th), in clock ticks
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settings(wandb, requirements: bool):
    """W&B settings for many runs in one process: no console capture (the progress bar
    stays ours), no system-metrics sampler or machine scan per run, no git or code."""
    quiet = dict(console="off", silent=True, disable_git=True, save_code=False)
    extra = dict(x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True,
                 x_save_requirements=requirements)  # fmt: skip
    try:
        return wandb.Settings(**quiet, **extra)
    except Exception:  # noqa: BLE001 - a W&B release without these experimental settings
        return wandb.Settings(**quiet)


def _config(run: TrackedRun, agent: TrackedAgent) -> dict:
    """The agent's full config, its sweep coordinates and seed, the run's kind and the
    `versions` that decide its results."""
    return {**agent.config, "coords": agent.coords, "kind": run.kind, "agent": agent.index,
            **({"seed": agent.coords["seed"]} if "seed" in agent.coords else {}),
            "versions": versions()}  # fmt: skip


#: The packages whose versions decide a run's numbers (W&B's config ``versions``).
VERSIONED = ("purejaxppo", "jax", "jaxlib", "equinox", "optax", "numpy")


@functools.cache
def versions() -> dict[str, str]:
    """Python's and each installed `VERSIONED` package's version (one metadata read each,
    once per process: ~1 ms in all, where listing every package takes ~70 ms)."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def _table(wandb, rows: list[dict]):
    columns = list(dict.fromkeys(k for row in rows for k in row))
    data = [[_cell(row.get(k)) for k in columns] for row in rows]
    return wandb.Table(columns=columns, data=data)


def _cell(v):
    if isinstance(v, (list, tuple, dict)):
        return str(v)
    return v
