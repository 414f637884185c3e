"""What the CLI shows while it works: the progress bar (fed from inside the compiled program)
and the lines said between stages."""

from __future__ import annotations

import math
import sys

from .._config import PPOConfig
from .._progress import arrival


class ProgressBar:
    """tqdm bar fed with every update's `Progress` of the whole population (in blocks)."""

    def __init__(self, cfg: PPOConfig, num_agents: int):
        self.cfg = cfg
        self.steps_per_update = cfg.batch_size * num_agents
        self.bar = None  # made at the first callback, so compilation is not in its clock
        self.best = -math.inf

    def __call__(self, p) -> None:
        from tqdm.auto import tqdm

        update = int(p.update)
        if self.bar is None:
            self.bar = tqdm(total=self.cfg.num_updates, initial=update - 1, unit="update",
                            dynamic_ncols=True, file=sys.stdout)  # fmt: skip
        self.bar.update(update - self.bar.n)
        post = {}
        # over whole callbacks from the program's start: a block's updates arrive together
        a = arrival()
        if a.update > a.start_update and a.t > a.start:
            rate = (a.update - a.start_update) * self.steps_per_update / (a.t - a.start)
            post["steps/s"] = f"{rate:,.0f}"
        mean = float(p.return_mean)
        if not math.isnan(mean):
            self.best = max(self.best, float(p.return_max))
            post["return"] = f"{mean:.3f}"
        if self.best > -math.inf:
            post["best"] = f"{self.best:.3f}"
        if int(p.diverged):
            post["diverged"] = int(p.diverged)
        self.bar.set_postfix(post, refresh=False)
        if update == self.cfg.num_updates:
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def log(text: str) -> None:
    print(text, flush=True)


def maze_name(cfg: PPOConfig) -> str:
    spec = cfg.maze_spec
    return spec if isinstance(spec, str) or spec is None else "custom"


def env_name(cfg: PPOConfig) -> str:
    """The env as the banner names it: the maze too, for Maze-v0."""
    return f"{cfg.env} maze={maze_name(cfg)}" if cfg.env == "Maze-v0" else str(cfg.env)


#: Said between the banner and the progress bar's first update, which comes after compiling.
def compiling(progress: bool) -> str:
    """The line said between the banner and the first update (compiling takes seconds)."""
    bar = "the progress bar starts with the first update; " if progress else ""
    return f"compiling ({bar}cached for next time) ..."


def say(text: str, main_process: bool) -> None:
    if main_process:
        print(text, flush=True)
