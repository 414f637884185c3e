"""Continuous actions: the Gaussian policy, clipping, observation and reward normalisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, tree_close, tree_equal
from scipy import stats

from purejaxppo import (
    PPOConfig,
    _ppo,
    evaluate,
    load_policy,
    make_train,
    sweep,
    train_with_checkpoints,
)
from purejaxppo._distributions import DiagGaussian, policy_distribution
from purejaxppo._normalize import RewardScaler, RunningStats
from purejaxppo.rundir import write_run

pytest.importorskip("gymnax")

PENDULUM = PPOConfig(
    env="Pendulum-v1",
    network="separate",
    conv_channels=(),
    mlp_widths=(32, 32),
    activation="tanh",
    num_envs=4,
    num_steps=64,
    minibatch_size=64,
    update_epochs=2,
    total_timesteps=4 * 64 * 4,
)  # fmt: skip  (4 updates; Pendulum's episodes end at step 200, in the last one)


# ----------------------------------------------------------------- the distribution ---
def test_gaussian_log_prob_and_entropy_match_the_closed_form():
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    mean = jax.random.normal(k[0], (50, 3))
    log_std = jax.random.uniform(k[1], (50, 3), minval=-2, maxval=1)
    action = jax.random.normal(k[2], (50, 3)) * 2
    dist = DiagGaussian(3, (-1.0,) * 3, (1.0,) * 3)
    p = jnp.concatenate([mean, log_std], -1)
    expected = stats.norm.logpdf(action, mean, np.exp(log_std)).sum(-1)
    np.testing.assert_allclose(dist.log_prob(p, action), expected, rtol=1e-5, atol=1e-5)
    entropy = stats.norm.entropy(mean, np.exp(log_std)).sum(-1)
    np.testing.assert_allclose(dist.entropy(p), entropy, rtol=1e-5, atol=1e-5)


def test_tanh_squashing_subtracts_the_log_det_of_its_jacobian():
    dist = DiagGaussian(2, (-2.0, 0.0), (2.0, 1.0), squash=True)
    plain = DiagGaussian(2, (-2.0, 0.0), (2.0, 1.0))
    k = jax.random.split(jax.random.PRNGKey(1), 2)
    p = jnp.concatenate([jax.random.normal(k[0], (20, 2)), jnp.full((20, 2), -0.5)], -1)
    u = jax.random.normal(k[1], (20, 2)) * 1.5
    # The squash's Jacobian by autodiff, on the CPU: a TPU's float32 tanh is an approximation,
    # and 1 - tanh² (its derivative) cancels it to a relative error of ~4e-4 at |u| ≈ 4.
    with jax.default_device(jax.devices("cpu")[0]):
        jac = jax.vmap(jax.jacfwd(dist.env_action))(jax.device_put(u, jax.devices("cpu")[0]))
        log_det = np.log(np.abs(np.linalg.det(np.float64(jac))))
    np.testing.assert_allclose(
        dist.log_prob(p, u), plain.log_prob(p, u) - log_det, rtol=1e-4, atol=1e-4
    )
    # Far in the tails float32's 1 - tanh²(u) cancels to garbage; the stable form does not
    # (against float64).
    tail = jnp.array([[9.0, -12.0]])
    half = np.array([2.0, 0.5])
    exact = np.sum(np.log((1 - np.tanh(np.float64(tail)) ** 2) * half))
    p1 = jnp.zeros((1, 4))
    np.testing.assert_allclose(plain.log_prob(p1, tail) - dist.log_prob(p1, tail), exact, rtol=1e-5)
    a = dist.env_action(u)
    assert (a >= jnp.array([-2.0, 0.0])).all() and (a <= jnp.array([2.0, 1.0])).all()


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_clipping_at_the_bounds_leaves_the_stored_log_prob_alone():
    cfg = PENDULUM.replace(log_std_init=2.0)  # std 7.4 against bounds of ±2: most clip
    train = make_train(cfg)
    state = train.init(jax.random.PRNGKey(0))
    env = train.env
    state, traj, _ = _ppo.collect(cfg.traced(), env, state)
    assert (jnp.abs(traj.action) > 2.0).mean() > 0.5  # the buffer keeps the raw samples
    flat = jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), traj)
    flat = flat._replace(final_obs=None)
    adv = jnp.ones(cfg.batch_size)
    _, info = _ppo.ppo_loss(
        state.params, cfg.traced(), flat, adv, adv, policy_distribution(cfg, env)
    )
    assert abs(float(info.approx_kl)) < 1e-6 and float(info.clip_frac) == 0.0  # ratio 1


# ---------------------------------------------------------------- normalisation ---
def test_running_stats_equal_numpy_over_everything_seen():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (16, 3)).astype(np.float32) for _ in range(40)]
    s = RunningStats.init((3,))
    for b in batches:
        s = s.update(jnp.asarray(b))
    seen = np.concatenate(batches)
    # The prior (count 1e-4 at mean 0, var 1) moves the estimate by ~1e-4/640: invisible.
    np.testing.assert_allclose(s.mean, seen.mean(0), rtol=1e-5)
    np.testing.assert_allclose(s.var, seen.var(0), rtol=1e-4)
    assert float(s.count) == pytest.approx(640, rel=1e-6)


def test_reward_scaling_against_a_hand_computation():
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=(30, 4)).astype(np.float32)
    dones = rng.random((30, 4)) < 0.1
    gamma = 0.9
    scaler = RewardScaler.init(4)
    returns, seen, got, expected = np.zeros(4), [], [], []
    for r, d in zip(rewards, dones, strict=True):
        scaler, scaled = scaler.scale(jnp.asarray(r), jnp.asarray(d), gamma)
        returns = returns * gamma * (1 - d) + r
        seen.append(returns.copy())
        everything = np.concatenate(seen)  # with the prior: count 1e-4, mean 0, var 1
        n = everything.size
        mean = everything.sum() / (n + 1e-4)
        var = (((everything - mean) ** 2).sum() + 1e-4 * (1 + mean**2)) / (n + 1e-4)
        got.append(np.asarray(scaled))
        expected.append(r / np.sqrt(var + 1e-8))
    np.testing.assert_allclose(np.stack(got), np.stack(expected), rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_normalisation_is_on_for_continuous_envs_and_off_for_discrete_ones():
    state, metrics = make_train(PENDULUM)(jax.random.PRNGKey(0))
    assert state.obs_norm is not None and state.reward_norm is not None
    assert float(state.obs_norm.count) == pytest.approx(4 * (1 + 64 * 4), rel=1e-6)
    assert np.isfinite(metrics.episode_return[-1])  # raw returns: Pendulum's -16..0 per step
    assert float(metrics.episode_return[-1]) < -100
    from conftest import SMALL

    state, _ = make_train(SMALL.replace(total_timesteps=128))(jax.random.PRNGKey(0))
    assert state.obs_norm is None and state.reward_norm is None
    off = PENDULUM.replace(normalize_obs=False, normalize_reward=False)
    assert make_train(off).init(jax.random.PRNGKey(0)).obs_norm is None


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_statistics_survive_checkpoints_and_serve_evaluation(tmp_path):
    whole_state, whole_metrics = make_train(PENDULUM)(jax.random.PRNGKey(3))
    stops = iter([True])
    train_with_checkpoints(
        PENDULUM, tmp_path / "ck", seed=3, checkpoint_every=1, should_stop=lambda: next(stops)
    )
    state, metrics, finished = train_with_checkpoints(
        PENDULUM, tmp_path / "ck", seed=3, checkpoint_every=1, resume=True
    )
    assert finished
    assert tree_equal(state.obs_norm, whole_state.obs_norm)
    assert tree_equal(state.reward_norm, whole_state.reward_norm)
    assert tree_equal(metrics, whole_metrics)

    res = sweep(PENDULUM, seeds=[3])
    with pytest.raises(ValueError, match="pass obs_norm=state.obs_norm"):
        evaluate(PENDULUM, res.state.params, jax.random.PRNGKey(0), 2)
    ev = evaluate(PENDULUM, res.state.params, jax.random.PRNGKey(0), 2, obs_norm=res.state.obs_norm)
    write_run(tmp_path / "run", res, eval_episodes=0, gif=False)
    policy = load_policy(tmp_path / "run", seed=3)
    assert tree_equal(policy.obs_norm, jax.tree.map(lambda x: x[0], res.state.obs_norm))
    env = make_train(PENDULUM).env
    _, obs, mask = env.reset(jax.random.PRNGKey(0))
    action = policy(obs, mask)
    assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0
    # A policy without the statistics acts differently: they are really used.
    assert not np.allclose(action, type(policy)(policy.network, policy.dist)(obs, mask))
    assert np.isfinite(np.asarray(ev.episode_return)).all()


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_a_swept_continuous_agent_equals_its_solo_run():
    res = sweep(PENDULUM, seeds=2, lr=[3e-4, 1e-3])
    solo = make_train(PENDULUM.replace(lr=1e-3))(jax.random.PRNGKey(1))
    agent = res.agent(lr=1e-3, seed=1)
    assert tree_close(agent.metrics, solo[1], **ACROSS_SHAPES)
    assert tree_close(agent.state.params, solo[0].params, **ACROSS_SHAPES)
    assert tree_close(agent.state.obs_norm, solo[0].obs_norm, **ACROSS_SHAPES)


# -------------------------------------------------------------------- bad input ---
@pytest.mark.parametrize(
    "changes, message",
    [
        ({"network": "per_cell"}, "network='per_cell' is invalid: it cannot serve continuous"),
        ({"log_std_init": 50.0}, "log_std_init=50.0 is invalid"),
    ],
)
def test_options_that_cannot_serve_continuous_actions_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        make_train(PENDULUM.replace(**changes))


def test_continuous_options_on_a_discrete_env_are_refused():
    from conftest import SMALL

    for name in ("squash_actions", "state_dependent_std"):
        with pytest.raises(ValueError, match=f"{name}=True is invalid: it applies to continuous"):
            make_train(SMALL.replace(**{name: True}))


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_squashed_and_state_dependent_variants_train():
    for changes in ({"squash_actions": True}, {"state_dependent_std": True, "log_std_init": -1.0}):
        cfg = PENDULUM.replace(**changes)
        state, metrics = make_train(cfg)(jax.random.PRNGKey(0))
        assert np.isfinite(np.asarray(metrics.entropy)).all()
        assert int(metrics.skipped_steps.sum()) == 0
    net = make_train(cfg).init(jax.random.PRNGKey(0)).params
    out, _ = net(jnp.zeros(3))
    assert out.shape == (2,) and net.log_std is None
    assert float(out[1]) == pytest.approx(-1.0, abs=0.05)  # the head starts near the init


# --------------------------------------------------------------------------- learning ---
def pendulum_config(updates: int) -> PPOConfig:
    """The Pendulum config of docs/benchmarks.md (examples/continuous.py), cut to ``updates``."""
    import runpy
    from pathlib import Path

    example = Path(__file__).parents[1] / "examples" / "continuous.py"
    cfg = runpy.run_path(str(example))["CONFIG"]
    return cfg.replace(total_timesteps=cfg.batch_size * updates)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pendulum_learns_what_a_random_policy_cannot():
    from purejaxppo._agents import agent_inputs
    from purejaxppo._engine import engine_for
    from purejaxppo.stats import final_scores

    cfg = pendulum_config(50)  # 204,800 steps per agent
    res = sweep(cfg, seeds=2)
    scores = final_scores(np.asarray(res.metrics.episode_return), 10)
    keys, hp, _ = agent_inputs(cfg, {}, [0, 1])
    untrained = engine_for(cfg).init(keys, hp)
    key = jax.random.PRNGKey(7)
    before = evaluate(cfg, untrained.params, key, 16, greedy=False, obs_norm=untrained.obs_norm)
    after = evaluate(cfg, res.state.params, key, 16, obs_norm=res.state.obs_norm)
    assert (np.asarray(before.episode_return).mean(-1) < -800).all(), before.episode_return
    assert (scores > -400).all(), scores  # training returns, each seed's last 10 updates
    assert (np.asarray(after.episode_return).mean(-1) > -400).all(), after.episode_return


CONTINUOUS_SCRIPT = {
    "LR": 3e-4,
    "NUM_ENVS": 2048,
    "NUM_STEPS": 10,
    "TOTAL_TIMESTEPS": 5e7,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 32,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.0,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "Pendulum-v1",
    "ANNEAL_LR": False,
    "NORMALIZE_ENV": True,
    "DEBUG": True,
}  # fmt: skip  (PureJaxRL's ppo_continuous_action.py defaults, on a gymnax env)


def test_from_purejaxrl_maps_the_continuous_script():
    with pytest.warns(UserWarning, match="not a multiple"):
        cfg = PPOConfig.from_purejaxrl(CONTINUOUS_SCRIPT)
    assert cfg.env == "Pendulum-v1" and cfg.mlp_widths == (256, 256)
    assert cfg.normalize_obs is True and cfg.normalize_reward is True
    assert (cfg.num_envs, cfg.num_steps, cfg.minibatch_size) == (2048, 10, 640)
    assert cfg.network == "separate" and cfg.clip_value and cfg.normalize_advantages
    assert (cfg.vf_coef, cfg.adam_eps, cfg.max_grad_norm) == (0.25, 1e-5, 0.5)
    assert cfg.log_std_init == 0.0 and not cfg.squash_actions and not cfg.state_dependent_std
    off = PPOConfig.from_purejaxrl({**CONTINUOUS_SCRIPT, "NORMALIZE_ENV": False,
                                    "TOTAL_TIMESTEPS": 2048 * 10 * 4})  # fmt: skip
    assert off.normalize_obs is False and off.normalize_reward is False
    with pytest.raises(ValueError, match="BACKEND needs NORMALIZE_ENV"):
        d = {k: v for k, v in CONTINUOUS_SCRIPT.items() if k != "NORMALIZE_ENV"}
        PPOConfig.from_purejaxrl({**d, "BACKEND": "spring", "TOTAL_TIMESTEPS": 204800})


def test_mountain_car_is_continuous_and_unbounded_actions_cannot_be_squashed():
    from types import SimpleNamespace

    from purejaxppo.envs import make_env

    cfg = PENDULUM.replace(env="MountainCarContinuous-v0")
    env = make_env(cfg)
    assert env.action_bounds == ((-1.0,), (1.0,)) and env.action_dims == (1,)
    unbounded = SimpleNamespace(action_bounds=((-np.inf,), (np.inf,)), action_dims=(1,))
    assert isinstance(policy_distribution(cfg, unbounded), DiagGaussian)
    with pytest.raises(ValueError, match="squash_actions=True is invalid: .* unbounded"):
        policy_distribution(cfg.replace(squash_actions=True), unbounded)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_a_non_finite_observation_stays_in_its_own_agent():
    from purejaxppo._agents import agent_inputs
    from purejaxppo._engine import Engine

    keys, hp, _ = agent_inputs(PENDULUM, {}, [0, 1])
    engine = Engine(PENDULUM, mesh=False)
    state = engine.strip(engine.init(keys, hp), 2)
    inner = state.env_state.inner  # agent 1's pendulums start with a NaN angular velocity
    theta_dot = np.array(inner.theta_dot)
    theta_dot[1] = np.nan
    poisoned = inner.replace(theta_dot=theta_dot)
    state = eqx_replace(state, env_state=state.env_state._replace(inner=poisoned))
    after, metrics = engine.run(state, hp, 1)
    after, metrics = engine.strip((after, metrics), 2)
    assert not np.isfinite(after.obs_norm.mean[1]).all()  # agent 1's statistics are gone
    assert int(metrics.skipped_steps[1].sum()) > 0  # its steps are skipped: flagged diverged
    assert np.isfinite(after.obs_norm.mean[0]).all() and int(metrics.skipped_steps[0].sum()) == 0
    alone = Engine(PENDULUM, mesh=False)
    one = jax.tree.map(lambda x: x[:1], state)
    solo, _ = alone.run(one, jax.tree.map(lambda x: x[:1], hp), 1)
    solo = alone.strip(solo, 1)
    assert tree_close(jax.tree.map(lambda x: x[0], after.obs_norm),
                      jax.tree.map(lambda x: x[0], solo.obs_norm), **ACROSS_SHAPES)  # fmt: skip


def eqx_replace(module, **changes):
    import dataclasses

    return dataclasses.replace(module, **changes)


def test_a_narrow_first_layer_computes_what_the_linear_does():
    """PureJaxRL's network on Pendulum's 3 floats runs its first layers as broadcast products
    (`_networks._linear`, a speed choice); outputs and gradients must be the Linear's own,
    to float rounding."""
    import equinox as eqx

    from purejaxppo._networks import NARROW_INPUT, _linear

    lin = eqx.nn.Linear(3, 256, key=jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
    assert x.shape[-1] <= NARROW_INPUT

    def loss(layer, fn):
        return jnp.sum(jnp.tanh(jax.vmap(lambda v: fn(layer, v))(x)) ** 2)

    ours, theirs = (jax.jit(lambda m, f=f: jax.value_and_grad(loss)(m, f))(lin)
                    for f in (_linear, lambda m, v: m(v)))  # fmt: skip
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    wide = eqx.nn.Linear(NARROW_INPUT + 1, 4, key=jax.random.PRNGKey(2))
    v = jnp.arange(NARROW_INPUT + 1.0)
    assert jnp.array_equal(_linear(wide, v), wide(v))  # wider inputs: the Linear itself
