"""Overhead of the in-program progress bar: one host callback per update for all agents.

Run:  pytest benchmarks/bench_progress.py -s

Two programs of the same config and agents, one with the CLI's tqdm progress bar fed by the
per-update `Progress` callback and one without; run time only (both compiled first), in
alternating rounds in one process so machine noise hits both alike, medians compared.

* ``test_cost_per_callback``: a tiny config with 200 short updates, where the callback's
  fixed cost is as large a share as it can be; gives the cost of one callback in ms.
* ``test_overhead_medium_maze``: the seed's medium-maze config (4 updates, 16 agents): the
  share that matters in practice. Target: < 3 %.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CODE = """
import json, time, io, contextlib, statistics, jax
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine, agent_inputs
from purejaxppo.cli._progress import ProgressBar
cfg = PPOConfig(**{cfg})
keys, hp, _ = agent_inputs(cfg, {{}}, list(range({agents})))
calls = []
bar = ProgressBar(cfg, {agents})
def progress(p):
    calls.append(1)
    bar(p)
plain, shown = Engine(cfg), Engine(cfg, progress=progress)
sink = io.StringIO()
def once(a):
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sink):
        jax.block_until_ready(a(keys, hp)[1])
    return time.perf_counter() - t0
once(plain), once(shown)  # compile both, warm up
calls.clear()
times = {{"plain": [], "progress": []}}
for _ in range({rounds}):
    times["plain"].append(once(plain))
    times["progress"].append(once(shown))
p, s = statistics.median(times["plain"]), statistics.median(times["progress"])
print("RESULT " + json.dumps(dict(
    agents={agents}, updates=cfg.num_updates, callbacks_per_run=len(calls) // {rounds},
    plain_median_s=p, progress_median_s=s, overhead=s / p - 1,
    ms_per_callback=(s - p) / cfg.num_updates * 1e3,
    update_ms=p / cfg.num_updates * 1e3, rounds=times)))
"""


def _run(benchmark, cfg: dict, agents: int, rounds: int) -> dict:
    code = CODE.format(cfg=cfg, agents=agents, rounds=rounds)
    result = report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
    assert result["callbacks_per_run"] == result["updates"]  # one per update, not per agent
    return result


def test_cost_per_callback(benchmark):
    tiny = dict(maze="easy", num_envs=4, num_steps=16, minibatch_size=64, update_epochs=1,
                total_timesteps=64 * 200)  # fmt: skip
    _run(benchmark, tiny, agents=4, rounds=9)


def test_overhead_medium_maze(benchmark):
    _run(benchmark, dict(maze="medium", total_timesteps=8192 * 4), agents=16, rounds=5)
