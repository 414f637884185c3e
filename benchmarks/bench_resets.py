"""Cheap resets: training steps/s on random 10x10 mazes against a fixed 10x10 layout.

Run:  pytest benchmarks/bench_resets.py -s

Same network and batch (the reference's config); only the maze source differs: the medium layout,
random mazes drawn from per-env pools (``maze_pool=64``, the default), and random mazes
generated at every reset (``maze_pool=0``, Jumanji's way under vmap). All three are compiled in
one process and timed in alternating rounds of 2 updates (medians), so machine noise hits
them alike. Timed: the training updates (``train.run(state, 2)``); the one-time start-up
(``train.init``, which fills the pools: 64 mazes x 16 envs) is reported apart.
Target: pooled random >= 80 % of the fixed layout's steps/s.
"""

import importlib.util

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


CRAFTAX = """
import json, statistics, time, jax, jax.numpy as jnp
from purejaxppo import PPOConfig
from purejaxppo.envs import make_env, select_tree
env = make_env(PPOConfig(env={name!r}, conv_channels=(), mlp_widths=(64,)))
N, T = 16, 100
state, _, _ = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), N))

def library_step(s, a, k, reset):  # Craftax's own step_env, with or without a fresh world
    obs, inner, r, done, _ = env.env.step_env(k, s.inner, a, env.params)
    if reset:
        _, world = env.env.reset_env(jax.random.fold_in(k, 1), env.params)
        inner = select_tree(done, world, inner)
    return s._replace(inner=inner), done

variants = {{
    "pool": lambda s, a, k: (lambda s2, o: (s2, o.done))(*env.step(s, a)),
    "step_only": lambda s, a, k: library_step(s, a, k, False),
    "reset_every_step": lambda s, a, k: library_step(s, a, k, True),
}}

def rollout(step):
    def run(s, key):
        def body(s, k):
            a = jax.random.randint(k, (N,), 0, env.num_actions)
            s, done = jax.vmap(step)(s, a, jax.random.split(k, N))
            return s, done.sum()
        return jax.lax.scan(body, s, jax.random.split(key, T))
    return jax.jit(run)

runs = {{k: rollout(v) for k, v in variants.items()}}
for k, f in runs.items():
    jax.block_until_ready(f(state, jax.random.PRNGKey(1)))  # compile
times = {{k: [] for k in runs}}
for r in range(3):
    for k, f in runs.items():
        t0 = time.perf_counter()
        jax.block_until_ready(f(state, jax.random.PRNGKey(2 + r)))
        times[k].append(time.perf_counter() - t0)
refresh = jax.jit(jax.vmap(env.refresh))
keys = jax.random.split(jax.random.PRNGKey(9), N)
jax.block_until_ready(refresh(state, keys))
t0 = time.perf_counter()
jax.block_until_ready(refresh(state, keys))
refresh_s = time.perf_counter() - t0
steps_per_s = {{k: N * T / statistics.median(v) for k, v in times.items()}}
print("RESULT " + json.dumps(dict(env={name!r}, envs=N, steps=T, steps_per_s=steps_per_s,
      refresh_ms_16_envs=refresh_s * 1e3,
      pool_over_reset_every_step=steps_per_s["pool"] / steps_per_s["reset_every_step"])))
"""


@pytest.mark.parametrize(
    "name", ["craftax/Craftax-Classic-Symbolic-v1", "craftax/Craftax-Symbolic-v1"]
)
def test_craftax_reset_pool(benchmark, name):
    """Craftax's world generation against its step: env steps/s of 16 envs (random actions,
    3 alternating rounds of 100 steps, medians) with the adapter's pool, with Craftax's step
    alone (no reset: the ceiling), and with a fresh world at every step (an auto-reset under
    vmap); and what the pool's once-per-update refresh costs. Skipped without craftax."""
    if importlib.util.find_spec("craftax") is None:
        pytest.skip("pip install '.[craftax]'")
    code = CRAFTAX.format(name=name)
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
