"""Aggregate steps/s of 64 agents per group width, against one agent (issue 24).

Run:  pytest benchmarks/bench_groups.py -s

The medium-maze default config (16 envs × 512 steps, 10 epochs of 8 minibatches). One agent,
and 64 agents in one program with the agent axis run as a `lax.map` over groups of G
vmapped agents (`Engine(group_size=G)`; G = 64: all at once), and the backend's default
width (`default_group_size`; 1 on CPU for this config). Every engine is
compiled and warmed up first; then rounds alternate over the layouts, one update each, in
one process, and medians are compared as aggregate steps/s relative to one agent.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def test_aggregate_steps_per_second_per_group_width(benchmark):
    code = f"""
import json, statistics, time, jax
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
cfg = PPOConfig()
layouts = {{"one agent": (1, None), "64, default width": (64, None),
           **{{f"64 in groups of {{g}}": (64, g) for g in {WIDTHS}}}}}
engines, inputs, states, compile_s = {{}}, {{}}, {{}}, {{}}
for name, (n, g) in layouts.items():
    engines[name] = Engine(cfg, mesh=False, group_size=g)
    keys, hp, _ = agent_inputs(cfg, {{}}, list(range(n)))
    t0 = time.perf_counter()
    states[name] = engines[name].init(keys, hp)
    states[name], m = engines[name].run(states[name], hp, 1)
    jax.block_until_ready(m)
    compile_s[name], inputs[name] = time.perf_counter() - t0, hp
times = {{k: [] for k in layouts}}
for _ in range(3):
    for name, (n, g) in layouts.items():
        t0 = time.perf_counter()
        states[name], m = engines[name].run(states[name], inputs[name], 1)
        jax.block_until_ready(m)
        times[name].append(n * cfg.batch_size / (time.perf_counter() - t0))
one = statistics.median(times["one agent"])
med = {{k: statistics.median(v) for k, v in times.items()}}
rows = {{k: dict(steps_per_s=round(med[k]), vs_one=round(med[k] / one, 3),
                first_call_s=round(compile_s[k], 1)) for k in times}}
print("RESULT " + json.dumps(dict(rows=rows, rounds=times)))
"""
    report(benchmark, benchmark.pedantic(measure, args=(code, 3000), rounds=1, iterations=1))
