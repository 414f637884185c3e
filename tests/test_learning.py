"""Learning on the reference's mazes, with its budgets (fixed keys, no tuning to the test)."""

import jax
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_train

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_easy_maze_two_seeds_reach_099_within_81920_steps():
    cfg = PPOConfig(maze="easy", total_timesteps=81_920)
    keys = jax.numpy.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    _, metrics = jax.vmap(make_train(cfg))(keys)
    final = np.asarray(metrics.episode_return[:, -1])
    assert final.shape == (2,)
    assert (final >= 0.99).all(), final


def test_medium_maze_last_10_updates_reach_097_within_819200_steps():
    cfg = PPOConfig(maze="medium", total_timesteps=819_200)
    _, metrics = make_train(cfg)(jax.random.PRNGKey(0))
    ret = np.asarray(metrics.episode_return)
    assert ret.shape == (100,)
    assert np.nanmean(ret[-10:]) >= 0.97, ret[-10:]
    assert ret[0] < 0.5  # it really learned: the first update is far from solved
