"""PureJaxRL's CartPole config through `PPOConfig.from_purejaxrl`: time and return.

Run:  pytest benchmarks/bench_purejaxrl.py -s

The issue's reference, PureJaxRL's own ``ppo.py`` on this machine class: 5.4 s compile +
2.6 s run for 1 seed, 7.2 s + 32.2 s for 16 seeds (vmapped). Each size runs in a fresh
process; compile and run are timed apart (ahead-of-time compile, then the run). The agents
are placed as `sweep` places them: over every device (one per core on CPU), one agent alone.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CARTPOLE = dict(
    LR=2.5e-4, NUM_ENVS=4, NUM_STEPS=128, TOTAL_TIMESTEPS=5e5, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=4, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ENV_NAME="CartPole-v1", ANNEAL_LR=True,
)  # fmt: skip


@pytest.mark.parametrize("seeds", [1, 16])
def test_cartpole_purejaxrl_config(benchmark, seeds):
    code = f"""
    import json, time, warnings, resource, jax, numpy as np
    from purejaxppo import PPOConfig
    from purejaxppo._engine import Engine
    from purejaxppo._agents import agent_inputs
    from purejaxppo._placement import mesh_for
    warnings.simplefilter("ignore")
    cfg = PPOConfig.from_purejaxrl({CARTPOLE!r})
    agents = Engine(cfg, mesh=mesh_for(None, {seeds}))  # placed as `sweep` places them
    keys, hp, _ = agent_inputs(cfg, {{}}, list(range({seeds})))
    t0 = time.perf_counter()
    state, metrics = agents(keys, hp)  # compiles ahead of time, then runs
    jax.block_until_ready(metrics)
    total = time.perf_counter() - t0
    ret = agents.strip(metrics, {seeds}).episode_return
    last = np.nanmean(ret[:, -20:], axis=1)
    print("RESULT " + json.dumps(dict(
        seeds={seeds}, compile_s=agents.compile_seconds, run_s=total - agents.compile_seconds,
        total_s=total, steps=cfg.total_timesteps, return_last20_mean=float(last.mean()),
        return_last20_min=float(last.min()),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
    """
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
