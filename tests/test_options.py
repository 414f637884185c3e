"""The off-by-default PPO options: advantage normalisation, value clipping, grad clipping, LR
annealing. Each is checked against a hand computation, then all together in a short run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_train
from purejaxppo._networks import SharedActorCritic
from purejaxppo._ppo import Transition, make_optimizer, ppo_loss

CFG = PPOConfig(maze="easy", num_envs=4, num_steps=32, minibatch_size=64, total_timesteps=512)


def batch(net, n=6, seed=0):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    obs = (jax.random.uniform(k1, (n, 3, 10, 10)) > 0.8).astype(jnp.uint8)
    logits, values = jax.vmap(net)(obs)
    mask = jnp.ones((n, 4), bool)
    action = jnp.zeros(n, jnp.int32)
    log_prob = jax.nn.log_softmax(logits)[:, 0]
    z = jnp.zeros(n)
    return Transition(obs, mask, action, log_prob, values, z, z > 0, z > 0), values


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_advantage_normalisation_and_value_clipping_by_hand():
    net = SharedActorCritic((3, 10, 10), 4, key=jax.random.PRNGKey(0))
    mb, values = batch(net)
    adv = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    target = values + jnp.array([1.0, -1.0, 0.05, -0.05, 2.0, 0.0])
    # Ratio is exactly 1 here, so the policy loss is -mean(advantage).
    _, raw = ppo_loss(net, CFG.traced(), mb, adv, target)
    np.testing.assert_allclose(raw.policy_loss, -3.5, rtol=1e-6)
    _, norm = ppo_loss(net, CFG.replace(normalize_advantages=True).traced(), mb, adv, target)
    np.testing.assert_allclose(norm.policy_loss, 0.0, atol=1e-6)  # normalised: mean 0
    # Value clipping: pretend the rollout values were 0.5 lower; the clipped prediction may move
    # at most clip_eps=0.2 from them, and the loss takes the larger of the two errors.
    old = mb._replace(value=values - 0.5)
    _, clipped = ppo_loss(net, CFG.replace(clip_value=True).traced(), old, adv, target)
    v, t, o = (np.asarray(a, np.float64) for a in (values, target, values - 0.5))
    expected = np.mean(np.maximum((v - t) ** 2, (o + np.clip(v - o, -0.2, 0.2) - t) ** 2))
    np.testing.assert_allclose(clipped.value_loss, expected, rtol=1e-5)
    assert float(clipped.value_loss) > float(raw.value_loss)


def test_gradient_clipping_and_lr_annealing_in_the_optimiser():
    params = jnp.zeros(10)
    grad = jnp.full(10, 10.0)  # global norm ~31.6
    # A huge Adam eps makes the step proportional to the (clipped) gradient, so clipping shows.
    cfg = CFG.replace(adam_eps=1e6, lr=1.0)
    plain = make_optimizer(cfg)
    clip = make_optimizer(cfg.replace(max_grad_norm=1.0))
    u_plain, _ = plain.update(grad, plain.init(params), params)
    u_clip, _ = clip.update(grad, clip.init(params), params)
    ratio = float(jnp.linalg.norm(u_plain) / jnp.linalg.norm(u_clip))
    np.testing.assert_allclose(ratio, float(jnp.linalg.norm(grad)), rtol=1e-3)

    # Annealing: lr × (1 − update/num_updates), constant within an update.
    acfg = CFG.replace(anneal_lr=True, lr=1.0, adam_eps=1e6)
    tx = make_optimizer(acfg)
    state = tx.init(params)
    steps_per_update = acfg.update_epochs * acfg.num_minibatches
    norms = []
    for _ in range(steps_per_update * acfg.num_updates):
        u, state = tx.update(jnp.ones(10), state, params)
        norms.append(float(jnp.linalg.norm(u)))
    per_update = np.array(norms).reshape(acfg.num_updates, steps_per_update)
    assert np.allclose(per_update, per_update[:, :1])  # constant within an update
    expected = 1.0 - np.arange(acfg.num_updates) / acfg.num_updates
    np.testing.assert_allclose(per_update[:, 0] / per_update[0, 0], expected, rtol=1e-5)


@pytest.mark.slow
def test_all_options_together_train_and_differ_from_default():
    cfg = CFG.replace(normalize_advantages=True, clip_value=True, max_grad_norm=0.5, anneal_lr=True)
    _, m = make_train(cfg)(jax.random.PRNGKey(0))
    _, d = make_train(CFG)(jax.random.PRNGKey(0))
    for name in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        assert np.isfinite(np.asarray(getattr(m, name))).all(), name
    assert not np.allclose(m.policy_loss, d.policy_loss)


def test_time_input_adds_the_episode_fraction_as_a_plane(key):
    from purejaxppo.envs import make_env

    cfg = PPOConfig(maze="easy", time_input=True, time_limit=3)
    env = make_env(cfg)
    assert env.obs_shape == (4, 10, 10) and env.obs_dtype == jnp.float32
    state, obs, _ = env.reset(key)
    seen = [float(obs[3, 0, 0])]
    for _ in range(4):  # a maze agent cannot reach the goal in 3 steps: cut at the limit
        state, out = env.step(state, jnp.int32(0))
        seen.append(float(out.obs[3, 0, 0]))
        assert np.all(np.asarray(out.obs[3]) == seen[-1])  # constant over the plane
        np.testing.assert_array_equal(out.obs[:3], out.obs[:3].astype(jnp.uint8))
    np.testing.assert_allclose(seen, [0, 1 / 3, 2 / 3, 0, 1 / 3], rtol=1e-6)  # reset at 3


@pytest.mark.slow
def test_time_input_appends_a_feature_to_vectors_and_trains(key):
    from purejaxppo.envs import make_env

    cfg = PPOConfig(env="Knapsack-v1", time_input=True, num_envs=4, num_steps=16,
                    minibatch_size=32, total_timesteps=128)  # fmt: skip
    env = make_env(cfg)
    inner = make_env(cfg.replace(time_input=False))
    assert env.obs_shape == (inner.obs_shape[0] + 1,)
    _, metrics = make_train(cfg)(key)
    assert np.all(np.isfinite(metrics.policy_loss))
    maze = PPOConfig(maze="easy", time_input=True, num_envs=4, num_steps=32,
                     minibatch_size=64, total_timesteps=128)  # fmt: skip
    _, metrics = make_train(maze)(key)
    assert np.all(np.isfinite(metrics.value_loss))
