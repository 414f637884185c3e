"""Overhead of the in-program progress bar: every update's `Progress` for all agents,
in one host callback per block of updates (`_progress.updates_per_callback`).

Run:  pytest benchmarks/bench_progress.py -s

Programs of the same config and agents, with the CLI's tqdm progress bar fed by the
`Progress` callback and without; run time only (all compiled first), in alternating rounds
in one process so machine noise hits all alike, medians compared.

* ``test_cost_per_callback``: a tiny config with 200 short updates, where the callback's
  fixed cost is as large a share as it can be; gives its cost per update in ms.
* ``test_overhead_medium_maze``: the reference's medium-maze config (4 updates, 16 agents): the
  share that matters in practice. Target: < 3 %.
* ``test_blocks_fast_env``: PureJaxRL's CartPole config (updates of 1.6 ms at one agent),
  each program also built "flat" (one update per block, so one callback per update: the
  design before blocks) to give both ratios: blocked / flat and progress / plain.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CODE = """
import json, time, io, contextlib, statistics, jax
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
from purejaxppo.cli._progress import ProgressBar
cfg = PPOConfig(**{cfg})
keys, hp, _ = agent_inputs(cfg, {{}}, list(range({agents})))
calls = []
bar = [None]  # a fresh bar per run, as the CLI makes
def progress(p):
    calls.append(1)
    bar[0](p)
plain, shown = Engine(cfg), Engine(cfg, progress=progress)
sink = io.StringIO()
def once(a):
    bar[0] = ProgressBar(cfg, {agents})
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
    ms_per_update=(s - p) / cfg.num_updates * 1e3,
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


BLOCKS = """
import json, time, io, contextlib, statistics, jax
import purejaxppo._progress as progress_module
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
from purejaxppo.cli._progress import ProgressBar
cfg = PPOConfig(**{cfg})
keys, hp, _ = agent_inputs(cfg, {{}}, list(range({agents})))
bar = [None]  # a fresh bar per run, as the CLI makes
def progress(p):
    bar[0](p)
sink = io.StringIO()
cpu = {{}}
def once(a, name=None):
    bar[0] = ProgressBar(cfg, {agents})
    c0, t0 = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(sink):
        jax.block_until_ready(a(keys, hp)[1])
    cpu.setdefault(name, []).append(time.process_time() - c0)  # every thread's CPU time
    return time.perf_counter() - t0
engines = {{}}
for flat in (True, False):  # the block size is fixed when a program is traced
    progress_module.MAX_UPDATES_PER_CALLBACK = 1 if flat else 16
    for shown in (False, True):
        name = ("flat " if flat else "") + ("progress" if shown else "plain")
        engines[name] = Engine(cfg, progress=progress if shown else None)
        once(engines[name])  # compile, warm up
times = {{k: [] for k in engines}}
for _ in range({rounds}):
    for k, e in engines.items():
        times[k].append(once(e, k))
m = {{k: statistics.median(v) for k, v in times.items()}}
cpu_s = {{k: statistics.median(cpu[k]) for k in engines}}
print("RESULT " + json.dumps(dict(
    agents={agents}, updates=cfg.num_updates,
    per_callback=progress_module.updates_per_callback(cfg, 1, cfg.num_updates),
    median_s=m, median_cpu_s=cpu_s, progress_overhead=m["progress"] / m["plain"] - 1,
    flat_progress_overhead=m["flat progress"] / m["plain"] - 1,
    flat_plain_vs_plain=m["flat plain"] / m["plain"] - 1, rounds=times)))
"""


@pytest.mark.parametrize("agents, updates, rounds", [(1, 976, 9), (64, 200, 3)])
def test_blocks_fast_env(benchmark, agents, updates, rounds):
    cfg = dict(env="CartPole-v1", num_envs=4, num_steps=128, minibatch_size=128,
               total_timesteps=512 * updates)  # fmt: skip
    code = BLOCKS.format(cfg=cfg, agents=agents, rounds=rounds)
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
