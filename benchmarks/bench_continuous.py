"""Continuous control: Pendulum-v1 steps/s at 1 and 16 agents, and what normalisation costs.

Run:  pytest benchmarks/bench_continuous.py -s

The Pendulum config of docs/benchmarks.md (examples/continuous.py's CONFIG: 16 envs
× 256 steps, 10 epochs of 8 minibatches, separate 64-64 tanh MLPs). Throughput: the CLI's
`time_updates` (one-update programs, compiled and warmed up first). Normalisation cost: two
engines of the same config, observation and reward normalisation on and off, 5 updates each,
alternating rounds in one process, medians compared (target: at most 5 % of update time).
"""

from pathlib import Path

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

EXAMPLE = Path(__file__).parents[1] / "examples" / "continuous.py"
CONFIG = f"""
import runpy
cfg = runpy.run_path({str(EXAMPLE)!r})["CONFIG"]
"""


@pytest.mark.parametrize("agents", [1, 16])
def test_pendulum_steps_per_second(benchmark, agents):
    code = (
        CONFIG
        + f"""
import json
from purejaxppo._bench import time_updates
row = time_updates(cfg, {agents}, updates=5, mesh=False)
print("RESULT " + json.dumps(row._asdict()))
"""
    )
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


def test_normalisation_cost(benchmark):
    code = (
        CONFIG
        + """
import json, statistics, time, jax
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
engines = {
    "normalised": Engine(cfg, mesh=False),
    "raw": Engine(cfg.replace(normalize_obs=False, normalize_reward=False), mesh=False),
}
hps = {k: agent_inputs(e.cfg, {}, [0])[:2] for k, e in engines.items()}  # each its own
states = {k: e.init(*hps[k]) for k, e in engines.items()}
for k, e in engines.items():  # compile and warm up
    states[k], m = e.run(states[k], hps[k][1], 5)
    jax.block_until_ready(m)
times = {k: [] for k in engines}
for _ in range(7):
    for k, e in engines.items():
        t0 = time.perf_counter()
        states[k], m = e.run(states[k], hps[k][1], 5)
        jax.block_until_ready(m)
        times[k].append((time.perf_counter() - t0) / 5)
on, off = statistics.median(times["normalised"]), statistics.median(times["raw"])
print("RESULT " + json.dumps(dict(update_s_normalised=on, update_s_raw=off,
                                  overhead=on / off - 1, rounds=times)))
"""
    )
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
