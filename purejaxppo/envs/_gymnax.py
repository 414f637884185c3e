"""gymnax environments (gymnax 1.0 API; ``pip install purejaxppo[gymnax]``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from ._base import Env, EnvStep, select_tree


class GymnaxState(NamedTuple):
    inner: Any  # gymnax's env state
    key: PRNGKeyArray  # gymnax steps take a key; each env carries its own


class GymnaxEnv(Env):
    """A gymnax environment (gymnax 1.0 API), with truncation kept apart from termination.

    We call ``step_env`` (no reset) and ``reset_env`` ourselves rather than gymnax's auto-reset
    ``step``, so the observation reached at a time-limit truncation is kept (``final_obs``)
    and GAE bootstraps from its value. Image observations (MinAtar's H×W×C booleans) become
    C×H×W uint8 for the convolutional torso; vectors stay float32. No action masks: all legal.
    Box action spaces (Pendulum-v1, MountainCarContinuous-v0) are continuous: the action is a
    float vector, already clipped to the bounds by the policy.
    """

    can_truncate = True

    def __init__(self, name: str, time_limit: int | None = None, memory_length: int | None = None):
        try:
            import gymnax
        except ImportError as e:
            raise ImportError(
                f"PPOConfig(env={name!r}) needs gymnax: pip install 'purejaxppo[gymnax]'."
            ) from e
        self.env, self.params = gymnax.make(name)
        if time_limit is not None:
            self.params = self.params.replace(max_steps_in_episode=time_limit)
        if memory_length is not None:  # MemoryChain-bsuite (the config checks the name)
            self.params = self.params.replace(memory_length=memory_length)
        if name == "MemoryChain-bsuite":  # +1 for the right answer at the end, -1 otherwise
            self.success_return = 1.0
        space = self.env.action_space(self.params)
        if hasattr(space, "n"):  # discrete
            self.num_actions = int(space.n)
        else:  # a Box: a Gaussian policy over its dimensions; all "legal" (mask of ones)
            (k,) = tuple(space.shape)
            low = np.broadcast_to(np.asarray(space.low, np.float64), (k,))
            high = np.broadcast_to(np.asarray(space.high, np.float64), (k,))
            self.action_bounds = (tuple(map(float, low)), tuple(map(float, high)))
            self.num_actions = k
        shape = tuple(self.env.observation_space(self.params).shape)
        self.image = len(shape) == 3
        self.obs_shape = (shape[2], shape[0], shape[1]) if self.image else shape
        self.obs_dtype = jnp.uint8 if self.image else jnp.float32
        self.max_episode_steps = int(self.params.max_steps_in_episode)

    def encode(self, obs) -> Array:
        if self.image:
            return jnp.moveaxis(obs, -1, 0).astype(jnp.uint8)
        return obs.astype(jnp.float32).reshape(self.obs_shape)

    def reset(self, key):
        key, reset_key = jax.random.split(key)
        obs, state = self.env.reset_env(reset_key, self.params)
        return GymnaxState(state, key), self.encode(obs), jnp.ones(self.num_actions, bool)

    def step(self, state, action):
        key, step_key, reset_key = jax.random.split(state.key, 3)
        obs, inner, reward, terminated, _ = self.env.step_env(
            step_key, state.inner, action, self.params
        )
        truncated = self.env.is_truncated(inner, self.params)
        done = jnp.logical_or(terminated, truncated)
        reset_obs, reset_inner = self.env.reset_env(reset_key, self.params)
        inner = select_tree(done, reset_inner, inner)
        final_obs = self.encode(obs)
        return GymnaxState(inner, key), EnvStep(
            obs=jnp.where(done, self.encode(reset_obs), final_obs),
            mask=jnp.ones(self.num_actions, bool),
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, bool),  # a cut at the time limit is not one
            done=done,
            final_obs=final_obs,
        )
