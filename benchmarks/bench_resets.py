"""Cheap resets: training steps/s on random 10x10 mazes against a fixed 10x10 layout.

Run:  pytest benchmarks/bench_resets.py -s

Same network and batch (the seed's config); only the maze source differs: the medium layout,
random mazes drawn from per-env pools (``maze_pool=64``, the default), and random mazes
generated at every reset (``maze_pool=0``, Jumanji's way under vmap). All three are compiled in
one process and timed in alternating rounds of 2 updates (medians), so machine noise hits
them alike. Timed: the training updates (``train.run(state, 2)``); the one-time start-up
(``train.init``, which fills the pools: 64 mazes x 16 envs) is reported apart.
Target: pooled random >= 80 % of the fixed layout's steps/s.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)


def test_random_maze_reset_pool(benchmark):
    code = """
    import json, time, statistics, jax
    from purejaxppo import PPOConfig, make_train
    configs = {"fixed_medium": dict(maze="medium"), "random_pool64": dict(maze="random"),
               "random_no_pool": dict(maze="random", maze_pool=0)}
    key = jax.random.PRNGKey(0)
    trains, states, init_s = {}, {}, {}
    for name, kw in configs.items():
        train = make_train(PPOConfig(**kw))
        jax.block_until_ready(train.init(key))  # compile
        t0 = time.perf_counter()
        states[name] = jax.block_until_ready(train.init(key))
        init_s[name] = time.perf_counter() - t0
        jax.block_until_ready(train.run(states[name], 2))  # compile + warm up
        trains[name] = train
    times = {name: [] for name in trains}
    for _ in range(5):
        for name, train in trains.items():
            t0 = time.perf_counter()
            jax.block_until_ready(train.run(states[name], 2))
            times[name].append(time.perf_counter() - t0)
    sps = {name: 8192 * 2 / statistics.median(t) for name, t in times.items()}
    print("RESULT " + json.dumps(dict(
        steps_per_s=sps, pool_vs_fixed=sps["random_pool64"] / sps["fixed_medium"],
        no_pool_vs_fixed=sps["random_no_pool"] / sps["fixed_medium"], init_s=init_s,
        rounds=times)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
