"""Overhead of experiment tracking (W&B offline, TensorBoard) at 1 and 64 agents.

Run:  pytest benchmarks/bench_tracking.py -s   (W&B's rows need pip install '.[wandb]')

Each round runs the same compiled sweep four times in one process, alternating: untracked,
with a tracker that writes nothing (``quiet``: the tracked program, its callbacks and the
recorder, which every tracker pays), with ``TensorBoard()`` and with ``WandB(mode="offline")``
(``every="auto"``, the default; the 64-agent long run leaves out ``quiet``). A tracked
run's time is the whole `sweep` call: opening one W&B run per agent, every write, and
finishing them (the summary run included), as a user waits for it. Both programs are
compiled before the rounds, so compile time is not in any of them. Medians
over the rounds (one agent's runs are short and noisy, ±7 %: 15 rounds of CartPole, 9 of the
maze); the overhead is tracked / untracked - 1. Target: ≤ 2 %.

* ``test_overhead_medium_maze``: the reference's medium maze (8,192 env steps per update), the
  case that matters in practice.
* ``test_overhead_cold``: what a user sees: fresh processes alternating, each one sweep
  with its compile (no persistent cache), untracked and tracked, 64 maze agents for 6 and
  20 updates (~30 s and ~110 s); opening the W&B runs overlaps the compile here.
* ``test_overhead_long_run``: runs of the length users train (one maze agent for the quick
  start's 100 updates; 64 agents for 50), where fixed costs are a small share.
* ``test_overhead_fast_env``: CartPole at PureJaxRL's config and length, where an update of
  64 agents takes ~40 ms (one agent's ~1.6 ms): the worst case for a per-update logger on a
  2-core CPU.
"""

import importlib.util

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CODE = """
import json, time, tempfile, statistics, importlib.util, warnings, jax
from purejaxppo import PPOConfig, sweep
from purejaxppo.tracking import TensorBoard, WandB
cfg = PPOConfig(**{cfg})
class Quiet:  # writes nothing: what any tracker pays (the tracked program, its callbacks)
    name, every = "quiet", "auto"
    def check(self): pass
    def open(self, run, stored): return self
    def state(self): return {{}}
    def log(self, update, rows): pass
    def finish(self, finished): pass
kinds = {kinds} + (["wandb"] if importlib.util.find_spec("wandb") else [])
def tracker(kind, d):
    if kind == "wandb":
        return WandB(project="bench", mode="offline", dir=d)
    if kind == "quiet":
        return Quiet()
    return TensorBoard(d) if kind == "tensorboard" else None
def once(kind):
    d = tempfile.mkdtemp()
    t0 = time.perf_counter()
    res = sweep(cfg, seeds={agents}, tracker=tracker(kind, d))
    assert res.timings["compile_s"] < 1.0, res.timings  # compiled before the rounds
    return time.perf_counter() - t0
for kind in ("none", "tensorboard"):  # compile both programs (untracked, tracked) first
    sweep(cfg, seeds={agents}, tracker=tracker(kind, tempfile.mkdtemp()))
times = {{k: [] for k in kinds}}
for _ in range({rounds}):
    for k in kinds:
        times[k].append(once(k))
median = {{k: statistics.median(v) for k, v in times.items()}}
print("RESULT " + json.dumps(dict(
    agents={agents}, updates=cfg.num_updates, untracked_s=median["none"],
    overhead={{k: median[k] / median["none"] - 1 for k in kinds if k != "none"}},
    rounds=times)))
"""


COLD = """
import json, time, tempfile
t0 = time.perf_counter()
from purejaxppo import PPOConfig, sweep
from purejaxppo.tracking import TensorBoard, WandB
d = tempfile.mkdtemp()
tracker = {{"none": None, "tensorboard": TensorBoard(d),
            "wandb": WandB(project="bench", mode="offline", dir=d)}}["{kind}"]
res = sweep(PPOConfig(**{cfg}), seeds={agents}, tracker=tracker)
print("RESULT " + json.dumps(dict(total_s=time.perf_counter() - t0, **res.timings)))
"""


@pytest.mark.parametrize("updates", [6, 20])
def test_overhead_cold(benchmark, updates):
    import statistics

    kinds = ["none", "tensorboard"] + (["wandb"] if importlib.util.find_spec("wandb") else [])
    cfg = dict(maze="medium", total_timesteps=8192 * updates)

    def rounds():
        times = {k: [] for k in kinds}
        for _ in range(2):
            for k in kinds:
                code = COLD.format(kind=k, cfg=cfg, agents=64)
                times[k].append(measure(code)["total_s"])
        return times

    times = benchmark.pedantic(rounds, rounds=1, iterations=1)
    median = {k: statistics.median(v) for k, v in times.items()}
    overhead = {k: median[k] / median["none"] - 1 for k in kinds[1:]}
    report(benchmark, dict(agents=64, updates=updates, untracked_s=median["none"],
                           overhead=overhead, rounds=times))  # fmt: skip


def _run(benchmark, cfg: dict, agents: int, rounds: int, quiet: bool = True, timeout: int = 900):
    kinds = ["none", "quiet", "tensorboard"] if quiet else ["none", "tensorboard"]
    code = CODE.format(cfg=cfg, agents=agents, rounds=rounds, kinds=kinds)
    run = benchmark.pedantic(measure, args=(code, timeout), rounds=1, iterations=1)
    return report(benchmark, run)


MAZE = {
    1: dict(maze="medium", total_timesteps=8192 * 24),  # ~3.5 s
    64: dict(maze="medium", total_timesteps=8192 * 6),
}  # ~33 s; 5.5 s an update
# PureJaxRL's CartPole config at its full length (5e5 steps: 976 updates)
CARTPOLE = dict(env="CartPole-v1", num_envs=4, num_steps=128, minibatch_size=128,
                total_timesteps=499_712)  # fmt: skip


@pytest.mark.parametrize("agents", [1, 64])
def test_overhead_medium_maze(benchmark, agents):
    _run(benchmark, MAZE[agents], agents, rounds=9 if agents == 1 else 2)


@pytest.mark.parametrize("agents", [1, 64])
def test_overhead_fast_env(benchmark, agents):
    _run(benchmark, CARTPOLE, agents, rounds=15 if agents == 1 else 2)


def test_overhead_cli_quick_start(benchmark, tmp_path):
    """The README's quick start as a user runs it: ``purejaxppo train`` (one maze agent, 100
    updates, with its progress bar, evaluation and GIF), plain, ``--tensorboard`` and
    ``--wandb bench --wandb-mode offline``: whole fresh processes alternating, compile
    included, each its own run directory."""
    import statistics
    import subprocess
    import sys
    import time

    kinds = {"none": [], "tensorboard": ["--tensorboard"]}
    if importlib.util.find_spec("wandb"):
        kinds["wandb"] = ["--wandb", "bench", "--wandb-mode", "offline"]

    def rounds():
        times = {k: [] for k in kinds}
        for r in range(3):
            for k, flags in kinds.items():
                command = [sys.executable, "-m", "purejaxppo", "train",
                           "--run-dir", str(tmp_path / f"{k}-{r}"), *flags]  # fmt: skip
                t0 = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True, timeout=900)
                times[k].append(time.perf_counter() - t0)
        return times

    times = benchmark.pedantic(rounds, rounds=1, iterations=1)
    median = {k: statistics.median(v) for k, v in times.items()}
    overhead = {k: median[k] / median["none"] - 1 for k in kinds if k != "none"}
    report(benchmark, dict(agents=1, untracked_s=median["none"], overhead=overhead, rounds=times))


@pytest.mark.parametrize("agents", [1, 64])
def test_overhead_long_run(benchmark, agents):
    """Runs of the quick start's length, warm: one maze agent for its 819,200 steps (100
    updates, ~10 s; 9 rounds), and 64 agents for half of it (50 updates, ~3 min each; 2
    rounds, no quiet tracker): what a tracker's fixed costs come to in a run of the length
    users train (W&B opens and finishes one run per agent)."""
    if agents == 1:
        _run(benchmark, dict(maze="medium"), 1, rounds=9)
    else:
        cfg = dict(maze="medium", total_timesteps=8192 * 50)
        _run(benchmark, cfg, 64, rounds=2, quiet=False, timeout=3400)  # 8 runs of ~3 min
