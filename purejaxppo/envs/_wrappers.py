"""Wrappers that change what any env shows the network."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ._base import Env


class TimedState(NamedTuple):
    inner: Any
    t: Int[Array, ""]  # steps taken in the current episode


class TimeInput(Env):
    """Adds ``t / max_episode_steps`` to any env's observation (``PPOConfig.time_input``).

    Jumanji's own Maze network takes ``step_count / time_limit`` as an input: Maze reports
    the time limit as a termination, so without it the value of a state near the deadline
    is unpredictable. Grids get one more constant plane, vectors one more feature; the
    observation becomes float32 (for Maze, 4x the rollout buffer of the uint8 image).
    """

    def __init__(self, env: Env):
        if len(env.obs_shape) not in (1, 3):
            raise ValueError(
                f"PPOConfig.time_input=True needs a vector or C×H×W observation, not shape "
                f"{env.obs_shape}; set time_input=False."
            )
        self.inner = env
        self.num_actions = env.num_actions
        self.max_episode_steps = env.max_episode_steps
        self.can_truncate = env.can_truncate
        self.has_refresh = env.has_refresh
        self.success_return = env.success_return
        self.action_bounds = env.action_bounds
        self.episode_stats = env.episode_stats
        shape = env.obs_shape
        self.obs_shape = (shape[0] + 1, *shape[1:])
        self.obs_dtype = jnp.float32

    @property
    def action_dims(self) -> tuple[int, ...]:
        return self.inner.action_dims

    def with_time(self, obs: Array, t: Int[Array, ""]) -> Float[Array, "*shape"]:
        frac = jnp.asarray(t, jnp.float32) / self.max_episode_steps
        obs = obs.astype(jnp.float32)
        if obs.ndim == 3:
            return jnp.concatenate([obs, jnp.full((1, *obs.shape[1:]), frac)])
        return jnp.append(obs, frac)

    def refresh(self, state, key):
        return TimedState(self.inner.refresh(state.inner, key), state.t)

    def reset(self, key):
        state, obs, mask = self.inner.reset(key)
        t = jnp.zeros((), jnp.int32)
        return TimedState(state, t), self.with_time(obs, t), mask

    def step(self, state, action):
        inner, out = self.inner.step(state.inner, action)
        t = state.t + 1
        next_t = jnp.where(out.done, 0, t)
        final_obs = None if out.final_obs is None else self.with_time(out.final_obs, t)
        out = out._replace(obs=self.with_time(out.obs, next_t), final_obs=final_obs)
        return TimedState(inner, next_t), out
