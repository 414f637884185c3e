"""Action masking, the loss's log-probs, entropy and the value loss."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ULP_ATOL

from purejaxppo import PPOConfig, _ppo
from purejaxppo._distributions import MASKED_LOGIT, entropy, masked_log_probs, sample_action, take
from purejaxppo.envs import make_env

SMALL = PPOConfig(num_envs=8, num_steps=64, minibatch_size=128, total_timesteps=512 * 2)


def test_forbidden_actions_never_sampled():
    key = jax.random.PRNGKey(0)
    k_mask, k_logits, k_sample = jax.random.split(key, 3)
    n, a = 20_000, 6
    mask = jax.random.bernoulli(k_mask, 0.5, (n, a))
    mask = mask.at[:, 0].set(mask[:, 0] | ~mask.any(-1))  # at least one legal action per row
    # Large logits on the forbidden actions: masking must still win.
    logits = jax.random.normal(k_logits, (n, a)) * 5 + jnp.where(mask, 0.0, 50.0)
    actions = sample_action(k_sample, masked_log_probs(logits, mask))
    legal = np.asarray(mask)[np.arange(n), np.asarray(actions)]
    assert legal.all()
    # And every legal action does get sampled somewhere (the mask is not over-restrictive).
    counts = np.bincount(np.asarray(actions), minlength=a)
    assert (counts > 0).all()


def test_entropy_is_finite_and_correct_with_masks():
    logits = jnp.array([[0.3, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    mask = jnp.array(
        [[True, True, True, True], [True, False, True, False], [True, False, False, False]]
    )
    lp = masked_log_probs(logits, mask)
    ent = entropy(lp)
    assert np.isfinite(np.asarray(ent)).all()
    np.testing.assert_allclose(ent[1], np.log(2.0), rtol=1e-6)  # uniform over 2 legal moves
    np.testing.assert_allclose(ent[2], 0.0, atol=1e-6)  # one legal move: deterministic
    # The reference in float64 on the host: a TPU's float32 `log` is itself off by ~2e-5 here.
    p = np.exp(np.float64(logits[0]) - np.log(np.exp(np.float64(logits[0])).sum()))
    np.testing.assert_allclose(ent[0], -(p * np.log(p)).sum(), rtol=1e-5)
    # The gradient of the entropy is finite too (0·(-inf) would make it NaN).
    g = jax.grad(lambda x: entropy(masked_log_probs(x, mask)).sum())(logits)
    assert np.isfinite(np.asarray(g)).all()
    assert MASKED_LOGIT > -np.inf


@pytest.fixture(scope="module")
def rollout():
    cfg = SMALL
    env = make_env(cfg)
    hp = cfg.traced()
    state = _ppo.init_state(hp, env, jax.random.PRNGKey(3))
    state, traj, _ = jax.jit(lambda s: _ppo.collect(hp, env, s))(state)
    return cfg, state, traj


def test_rollout_never_takes_a_forbidden_action(rollout):
    _, _, traj = rollout
    mask, action = np.asarray(traj.mask), np.asarray(traj.action)
    assert (~mask).any(), "the maze rollout should meet walls"
    assert np.take_along_axis(mask, action[..., None], -1).all()


def test_loss_log_probs_equal_rollout_log_probs(rollout):
    cfg, state, traj = rollout
    flat = jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), traj)
    adv = jnp.ones(cfg.batch_size)
    total, info = jax.jit(lambda n, b: _ppo.ppo_loss(n, cfg.traced(), b, adv, adv))(
        state.params, flat
    )
    logits, _ = jax.vmap(state.params)(flat.obs)
    loss_side = take(masked_log_probs(logits, flat.mask), flat.action)
    # Same network, same masking, same parameters: the PPO ratio is 1 before any update. The
    # rollout and the loss run the network on different batch shapes (num_envs rows against
    # the whole batch), so float32 sums may differ in order: equal to a few ulps, not bitwise.
    np.testing.assert_allclose(loss_side, flat.log_prob, rtol=0, atol=ULP_ATOL)
    assert abs(float(info.approx_kl)) < 1e-10
    assert float(info.clip_frac) == 0.0  # |ratio - 1| ~ 1e-7, far inside clip ε = 0.2
    assert float(info.policy_loss) == pytest.approx(-1.0, abs=ULP_ATOL)  # -mean(ratio · 1)
    assert np.isfinite(float(total)) and np.isfinite(float(info.entropy))


def test_value_loss_does_not_broadcast_and_matches_hand_computation():
    cfg = PPOConfig(vf_coef=1.0, ent_coef=0.0)
    env = make_env(cfg)
    net = _ppo.init_state(cfg.traced(), env, jax.random.PRNGKey(0)).params
    # Scale the value head so the three observations get clearly different values.
    net = eqx.tree_at(lambda n: n.value_head.weight, net, net.value_head.weight * 50)
    obs = jnp.stack([env.reset(k)[1] for k in jax.random.split(jax.random.PRNGKey(1), 3)])
    _, values = jax.vmap(net)(obs)
    assert values.shape == (3,)  # a scalar per example, never (B, 1)
    assert float(values.max() - values.min()) > 0.1
    targets = values + jnp.array([0.03, -0.02, 0.01])  # matched errors small, cross pairs large
    mb = _ppo.Transition(
        obs=obs,
        mask=jnp.ones((3, 4), bool),
        action=jnp.zeros(3, jnp.int32),
        log_prob=jnp.zeros(3),
        value=values,
        reward=jnp.zeros(3),
        terminated=jnp.zeros(3, bool),
        done=jnp.zeros(3, bool),
    )
    _, info = _ppo.ppo_loss(net, cfg.traced(), mb, jnp.zeros(3), targets)
    v = np.asarray(values, np.float64)
    expected = np.mean((v - np.asarray(targets)) ** 2)
    np.testing.assert_allclose(float(info.value_loss), expected, rtol=1e-5)
    # The broadcast defect ((B,1) - (B,)) would give the mean over all pairs instead:
    broadcast = np.mean((v[:, None] - np.asarray(targets)[None, :]) ** 2)
    assert broadcast > 2 * expected
