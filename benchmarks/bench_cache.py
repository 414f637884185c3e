"""Compile time of the medium-maze trainer, cold and from the persistent compilation cache.

Run:  pytest benchmarks/bench_cache.py -s

Three fresh processes in a row share one empty temporary cache directory: the first compiles
cold and writes the cache, the next two compile from it. Each reports tracing and lowering
(`Engine.lower`: the floor, which no cache removes) apart from XLA's compile (`.compile()`),
for the one-agent program of the default config (819,200 steps) and for 64 agents.
"""

import tempfile

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(1800)

CODE = """
import json, sys, time, jax
from purejaxppo import PPOConfig
from purejaxppo.engine import enable_compilation_cache
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
from purejaxppo._xla_cpu import compiler_options
enable_compilation_cache(sys.argv[1] if len(sys.argv) > 1 else {cache!r})
cfg = PPOConfig()
rows = {{}}
for n in (1, 64):
    keys, hp, _ = agent_inputs(cfg, {{}}, list(range(n)))
    engine = Engine(cfg, mesh=False)
    t0 = time.perf_counter()
    lowered = engine.lower(keys, hp)
    t1 = time.perf_counter()
    lowered.compile(compiler_options())
    t2 = time.perf_counter()
    rows[n] = dict(trace_lower_s=round(t1 - t0, 2), compile_s=round(t2 - t1, 2))
print("RESULT " + json.dumps(rows))
"""


def test_compile_cold_and_warm(benchmark):
    with tempfile.TemporaryDirectory() as cache:
        code = CODE.format(cache=cache)
        runs = [measure(code, 1200) for _ in range(3)]
    result = {"cold": runs[0], "warm": runs[1], "warm again": runs[2]}
    report(benchmark, benchmark.pedantic(lambda: result, rounds=1, iterations=1))
