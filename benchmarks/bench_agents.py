"""Agent-axis scaling: aggregate steps/s and memory of many agents in one program.

Run:  pytest benchmarks/bench_agents.py -s --benchmark-json=agents.json

Medium maze, seed hyperparameters, `sweep(cfg, seeds=N)` (one vmapped program). Each agent
count runs in a fresh process; throughput is timed on a second call of the compiled program
(compile reported separately), over ``UPDATES`` updates: the per-update cost does not depend on
how many updates follow, and the full 100-update run of 256 agents would take over an hour here.
Peak RSS is the process's maximum resident set, the whole of JAX included.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

UPDATES = 2


@pytest.mark.parametrize("agents", [1, 4, 16, 64, 256])
def test_aggregate_steps_per_second(benchmark, agents):
    code = f"""
    import json, time, resource, jax
    from purejaxppo import PPOConfig, make_train
    cfg = PPOConfig(maze="medium", total_timesteps=8192 * {UPDATES})
    keys = jax.random.split(jax.random.PRNGKey(0), {agents})
    f = jax.vmap(make_train(cfg))
    t0 = time.perf_counter()
    jax.block_until_ready(f(keys))  # compile + first run
    t1 = time.perf_counter()
    jax.block_until_ready(f(keys))
    t2 = time.perf_counter()
    steps = {agents} * cfg.total_timesteps
    print("RESULT " + json.dumps(dict(
        agents={agents}, updates={UPDATES}, first_call_s=t1 - t0,
        compile_s_approx=(t1 - t0) - (t2 - t1),
        run_s=t2 - t1, aggregate_steps_per_s=steps / (t2 - t1),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
