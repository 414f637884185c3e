"""Core trainer benchmarks (issue: one-program PPO on the medium maze).

Run:  pytest benchmarks/bench_core.py -s --benchmark-json=core.json

Each measurement runs in a fresh process (cold caches). What is timed:
* the one-program run: compile seconds and run seconds separately, steps/s of the run;
* the same pieces (rollout, batch, update) as three jitted calls driven from a Python loop:
  the reference system's design;
* compile time at 10 and at 1,000 updates (it must not grow with the number of updates);
* peak RSS of one agent's medium-maze run, and the bytes of its rollout buffer.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(1800)

MEDIUM = "PPOConfig(maze='medium', total_timesteps=819_200)"


def test_one_program_medium(benchmark):
    code = f"""
    import json, time, resource, jax
    from purejaxppo import PPOConfig, make_train
    cfg = {MEDIUM}
    t0 = time.perf_counter()
    train = make_train(cfg)
    run = train.compile(jax.random.PRNGKey(0))
    t1 = time.perf_counter()
    state, m = run(jax.random.PRNGKey(0)); jax.block_until_ready(m)
    t2 = time.perf_counter()
    ret = m.episode_return
    print("RESULT " + json.dumps(dict(
        design="one program", compile_s=t1 - t0, run_s=t2 - t1, total_s=t2 - t0,
        steps_per_s=cfg.total_timesteps / (t2 - t1),
        steps_per_s_incl_compile=cfg.total_timesteps / (t2 - t0),
        last10_return=float(ret[-10:].mean()),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


def test_reference_design_python_loop_medium(benchmark):
    """The same pieces as three jitted calls per update, from a Python loop (the reference)."""
    code = f"""
    import json, time, jax, jax.numpy as jnp
    from purejaxppo import PPOConfig
    from purejaxppo import _ppo
    from purejaxppo.envs import make_env
    cfg = {MEDIUM}
    hp, env = cfg.traced(), make_env(cfg)

    def batch(state, traj):
        _, last_value = jax.vmap(state.params)(state.obs)
        next_values = jnp.concatenate([traj.value[1:], last_value[None]], axis=0)
        adv, target = _ppo.gae(traj.reward, traj.value, next_values, traj.terminated,
                               traj.done, hp.gamma, hp.gae_lambda)
        flat = jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), traj)
        return flat, adv.reshape(-1), target.reshape(-1)

    t0 = time.perf_counter()
    init = jax.jit(lambda k: _ppo.init_state(hp, env, k))
    rollout = jax.jit(lambda s: _ppo.collect(hp, env, s))
    batch = jax.jit(batch)
    update = jax.jit(lambda s, b, a, t: _ppo.learn(hp, s, b, a, t))
    state = init(jax.random.PRNGKey(0))
    returns = []
    for i in range(cfg.num_updates):
        state, traj, sums = rollout(state)
        flat, adv, target = batch(state, traj)
        state, info = update(state, flat, adv, target)
        returns.append(float(sums.returns / jnp.maximum(sums.count, 1)))
        if i == 0:
            t_first = time.perf_counter()
    t2 = time.perf_counter()
    print("RESULT " + json.dumps(dict(
        design="python loop (reference)", total_s=t2 - t0, first_update_s=t_first - t0,
        steps_per_s_incl_compile=cfg.total_timesteps / (t2 - t0),
        steps_per_s_after_first=(cfg.total_timesteps - cfg.batch_size) / (t2 - t_first),
        last10_return=sum(returns[-10:]) / 10)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


@pytest.mark.parametrize("num_updates", [10, 1000])
def test_compile_time_vs_num_updates(benchmark, num_updates):
    code = f"""
    import json, time, jax
    from purejaxppo import PPOConfig, make_train
    cfg = PPOConfig(maze='medium', total_timesteps=8192 * {num_updates})
    t0 = time.perf_counter()
    make_train(cfg).compile(jax.random.PRNGKey(0))
    t1 = time.perf_counter()
    print("RESULT " + json.dumps(dict(num_updates={num_updates}, compile_s=t1 - t0)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))


def test_rollout_buffer_bytes(benchmark):
    """Bytes of one agent's stored rollout (uint8 observations) vs float32 images."""
    code = f"""
    import json, jax, numpy as np
    from purejaxppo import PPOConfig
    from purejaxppo import _ppo
    from purejaxppo.envs import make_env
    cfg = {MEDIUM}
    hp, env = cfg.traced(), make_env(cfg)
    state = jax.eval_shape(lambda k: _ppo.init_state(hp, env, k), jax.random.PRNGKey(0))
    _, traj, _ = jax.eval_shape(lambda s: _ppo.collect(hp, env, s), state)
    nbytes = sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(traj))
    obs_f32 = np.prod(traj.obs.shape) * 4
    print("RESULT " + json.dumps(dict(
        rollout_bytes=int(nbytes), obs_bytes=int(np.prod(traj.obs.shape)),
        obs_bytes_if_float32=int(obs_f32),
        seed_design_bytes_10_shuffled_float32_copies=int(10 * obs_f32))))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
