"""Probe environments: tiny problems that each isolate one part of PPO and learn in seconds.

After rejax's probes: if the value cannot learn a constant or the policy cannot learn the
rewarded action, the fault is in that part of the algorithm, not in a hard environment. They
drive `_ppo.init_state` and `_ppo.update_step` (the algorithm itself) on a hand-built `Env`.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo._ppo import init_state, update_step
from purejaxppo.envs import Env, EnvStep

CFG = PPOConfig(
    num_envs=8, num_steps=16, minibatch_size=32, update_epochs=4, total_timesteps=8 * 16 * 30,
    conv_channels=(), mlp_widths=(16,), lr=3e-3, ent_coef=0.0,
)  # fmt: skip


class BitState(NamedTuple):
    bit: jax.Array
    key: jax.Array


class ContextualBandit(Env):
    """One-step episodes: the observation is a one-hot of a random bit; ``reward_for`` says
    whether the reward depends on the action matching the bit, or is constant."""

    num_actions = 2
    obs_shape = (2,)
    obs_dtype = jnp.float32
    max_episode_steps = 1

    def __init__(self, action_matters: bool):
        self.action_matters = action_matters

    def _draw(self, key):
        key, sub = jax.random.split(key)
        bit = jax.random.bernoulli(sub).astype(jnp.int32)
        return BitState(bit, key), jax.nn.one_hot(bit, 2), jnp.ones(2, bool)

    def reset(self, key):
        return self._draw(key)

    def step(self, state, action):
        reward = (action == state.bit).astype(jnp.float32) if self.action_matters else 1.0
        new, obs, mask = self._draw(state.key)
        done = jnp.asarray(True)
        return new, EnvStep(obs, mask, jnp.asarray(reward, jnp.float32), done, done)


def train(env: Env, cfg: PPOConfig = CFG):
    @jax.jit
    def run(key):
        state = init_state(cfg.traced(), env, key)
        return jax.lax.scan(lambda s, _: update_step(cfg.traced(), env, s), state, None,
                            length=cfg.num_updates)  # fmt: skip

    return run(jax.random.PRNGKey(0))


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
@pytest.mark.timeout(300)
def test_value_learns_a_constant_reward():
    state, metrics = train(ContextualBandit(action_matters=False))
    # One-step episodes of reward 1: every state's value is 1.
    _, values = jax.vmap(state.params)(jnp.eye(2))
    np.testing.assert_allclose(np.asarray(values), 1.0, atol=0.1)
    assert float(metrics.value_loss[-1]) < float(metrics.value_loss[0])


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
@pytest.mark.timeout(300)
def test_policy_learns_the_rewarded_action_for_each_observation():
    state, metrics = train(ContextualBandit(action_matters=True))
    ret = np.asarray(metrics.episode_return)
    assert ret[:3].mean() < 0.75  # starts near chance (0.5)
    assert ret[-3:].mean() > 0.95  # ends choosing the matching action
    logits, _ = jax.vmap(state.params)(jnp.eye(2))
    assert list(np.argmax(np.asarray(logits), -1)) == [0, 1]
