"""Scanned GAE against a plain Python loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import gae


def gae_loop(rewards, values, next_values, terminated, done, gamma, lam):
    """The textbook recursion, one env at a time, in float64."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, n] else gamma * next_values[t, n]
            delta = rewards[t, n] + bootstrap - values[t, n]
            running = delta + (0.0 if done[t, n] else gamma * lam * running)
            adv[t, n] = running
    return adv, adv + values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_python_loop(seed):
    rng = np.random.default_rng(seed)
    T, N = 37, 5
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    values = rng.normal(size=(T, N)).astype(np.float32)
    next_values = rng.normal(size=(T, N)).astype(np.float32)
    done = rng.random((T, N)) < 0.15  # episode ends in the middle of the rollout
    # Some endings are truncations: done but not terminated (bootstrap from next_values).
    terminated = done & (rng.random((T, N)) < 0.6)
    assert done.sum() > 5 and (done & ~terminated).sum() > 0
    adv, target = jax.jit(gae)(rewards, values, next_values, terminated, done, 0.97, 0.9)
    ref_adv, ref_target = gae_loop(rewards, values, next_values, terminated, done, 0.97, 0.9)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target, ref_target, rtol=1e-5, atol=1e-5)


def test_gae_does_not_leak_across_episode_boundary():
    # Two steps; the first ends its episode. The second step's advantage must not flow back.
    rewards = jnp.array([[0.0], [5.0]])
    values = jnp.zeros((2, 1))
    next_values = jnp.zeros((2, 1))
    done = jnp.array([[True], [False]])
    adv, _ = gae(rewards, values, next_values, done, done, 0.99, 0.95)
    assert float(adv[0, 0]) == 0.0
    assert float(adv[1, 0]) == 5.0


def test_gae_truncation_bootstraps_from_final_value():
    # A single truncated step: advantage = r + γ·V(final obs) − V(s), computable by hand.
    r, v, v_final, gamma = 1.0, 0.5, 2.0, 0.9
    args = (jnp.array([[r]]), jnp.array([[v]]), jnp.array([[v_final]]))
    adv, _ = gae(*args, jnp.array([[False]]), jnp.array([[True]]), gamma, 0.95)
    np.testing.assert_allclose(adv[0, 0], r + gamma * v_final - v, rtol=1e-6)
    adv, _ = gae(*args, jnp.array([[True]]), jnp.array([[True]]), gamma, 0.95)
    np.testing.assert_allclose(adv[0, 0], r - v, rtol=1e-6)
