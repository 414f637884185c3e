"""Benchmarks behind three design choices (README, "Design choices made for speed").

Run:  pytest benchmarks/bench_design.py -s --benchmark-json=design.json

* the Toeplitz-matmul conv against `lax.conv` with per-agent kernels under `vmap`;
* the packed-key sort shuffle against `jax.random.permutation`;
* LLVM O1 against the default O2 for the trainer program: compile and run seconds.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(1800)


@pytest.mark.parametrize("agents", [1, 8])
def test_conv_toeplitz_vs_lax_conv(benchmark, agents):
    """Forward + weight gradient of the reference's conv on 1,024 maze images per agent."""
    code = f"""
    import json, time, jax, jax.numpy as jnp
    from purejaxppo._conv import Conv2d
    A, B = {agents}, 1024
    keys = jax.random.split(jax.random.PRNGKey(0), A)
    convs = jax.vmap(lambda k: Conv2d(3, 1, 3, key=k))(keys)
    x = (jax.random.uniform(jax.random.PRNGKey(1), (A, B, 3, 10, 10)) > 0.7).astype(jnp.float32)

    def toeplitz(conv, x):
        return jnp.sum(jax.vmap(conv)(x) ** 2)

    def lax_conv(conv, x):
        y = jax.vmap(lambda xi: jax.lax.conv_general_dilated(xi[None], conv.weight, (1, 1),
                                                             "VALID")[0])(x)
        return jnp.sum((y + conv.bias[:, None, None]) ** 2)

    out = {{"agents": A}}
    for name, f in (("toeplitz", toeplitz), ("lax_conv", lax_conv)):
        g = jax.jit(jax.vmap(jax.grad(f)))
        jax.block_until_ready(g(convs, x))
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            jax.block_until_ready(g(convs, x))
            ts.append(time.perf_counter() - t)
        out[name + "_ms"] = min(ts) * 1e3
    out["lax_conv_over_toeplitz"] = out["lax_conv_ms"] / out["toeplitz_ms"]
    print("RESULT " + json.dumps(out))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


def test_shuffle_vs_permutation(benchmark):
    code = """
    import json, time, jax
    from purejaxppo._ppo import shuffle
    key = jax.random.PRNGKey(0)
    out = {}
    for name, f in (("packed_sort", lambda k: shuffle(k, 8192)),
                    ("jax_random_permutation", lambda k: jax.random.permutation(k, 8192))):
        f = jax.jit(f)
        jax.block_until_ready(f(key))
        ts = []
        for _ in range(50):
            t = time.perf_counter()
            jax.block_until_ready(f(key))
            ts.append(time.perf_counter() - t)
        out[name + "_ms"] = min(ts) * 1e3
    out["permutation_over_packed"] = out["jax_random_permutation_ms"] / out["packed_sort_ms"]
    print("RESULT " + json.dumps(out))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


@pytest.mark.parametrize("level", [1, 2])
def test_compile_opt_level(benchmark, level):
    """Medium maze, 5 updates: compile seconds and run seconds at LLVM O1 (ours) and O2."""
    code = f"""
    import json, time, jax, equinox as eqx
    from purejaxppo import PPOConfig, make_train
    cfg = PPOConfig(maze="medium", total_timesteps=8192 * 5)
    train = make_train(cfg)
    f = eqx.filter_jit(train._train, compiler_options={{"xla_backend_optimization_level": {level}}})
    key, hp = jax.random.PRNGKey(0), cfg.traced()
    t0 = time.perf_counter()
    compiled = f.lower(key, hp).compile()
    t1 = time.perf_counter()
    jax.block_until_ready(compiled(key, hp))
    t2 = time.perf_counter()
    print("RESULT " + json.dumps(dict(opt_level={level}, compile_s=t1 - t0, run_s=t2 - t1)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


def test_one_agent_engine_vs_make_train(benchmark):
    """One medium-maze agent, 10 updates: `make_train` against the sweep engine `Engine`.

    `Engine` runs one agent per device as the plain per-agent program (a size-1 vmap ran
    ~20 % slower on XLA:CPU). Alternating rounds in one process, medians.
    """
    code = """
    import json, time, statistics, jax
    from purejaxppo import PPOConfig, make_train
    from purejaxppo._engine import Engine
    from purejaxppo._agents import agent_inputs
    cfg = PPOConfig(total_timesteps=8192 * 10)
    key = jax.random.PRNGKey(0)
    solo = make_train(cfg).compile(key)
    agents = Engine(cfg, mesh=False)
    keys, hp, _ = agent_inputs(cfg, {}, [0])
    jax.block_until_ready(solo(key)), jax.block_until_ready(agents(keys, hp))
    t = {"make_train": [], "agents_1": []}
    for _ in range(3):
        for name, f in (("make_train", lambda: solo(key)), ("agents_1", lambda: agents(keys, hp))):
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            t[name].append(time.perf_counter() - t0)
    sps = {k: cfg.total_timesteps / statistics.median(v) for k, v in t.items()}
    print("RESULT " + json.dumps(dict(steps_per_s=sps, rounds=t)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
