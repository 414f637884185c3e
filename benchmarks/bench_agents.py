"""Agent-axis scaling: aggregate steps/s and memory of many agents in one program.

Run:  pytest benchmarks/bench_agents.py -s --benchmark-json=agents.json

Medium maze, seed hyperparameters, N agents (seeds 0…N-1) in one engine program, measured by
`purejaxppo._bench.time_updates`: the same code as ``purejaxppo bench``. Each agent count runs
in a fresh process; the one-update program is compiled (reported apart) and warmed up, then
``UPDATES`` updates are timed: the per-update cost does not depend on how many updates follow,
and the full 100-update run of 256 agents would take over an hour here. Peak RSS is the
process's maximum resident set, the whole of JAX included.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

UPDATES = 2


@pytest.mark.parametrize("agents", [1, 4, 16, 64, 256])
def test_aggregate_steps_per_second(benchmark, agents):
    code = f"""
    import json, resource
    from purejaxppo import PPOConfig
    from purejaxppo._bench import time_updates
    row = time_updates(PPOConfig(maze="medium"), {agents}, updates={UPDATES}, mesh=False)
    print("RESULT " + json.dumps(dict(
        row._asdict(), aggregate_steps_per_s=row.steps_per_s,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
