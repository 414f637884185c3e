"""Brax environments (``env="brax/<name>"``; ``pip install purejaxppo[brax]``).

Continuous control (MuJoCo-style locomotion) through Brax's own physics pipelines, with the
backend a config field (``brax_backend``: "positional", "spring", "generalized", "mjx").
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Int

from ._base import Env, EnvStep, select_tree

# Brax's offline renderer (`brax.io.image`, run directories' agent.gif) draws with MuJoCo,
# which picks its OpenGL backend when first imported: EGL works headless. A user's own
# MUJOCO_GL wins; this module is imported before any Brax import of ours.
os.environ.setdefault("MUJOCO_GL", "egl")

#: Brax's episode length in its training wrappers (and PureJaxRL's): a truncation.
DEFAULT_EPISODE_STEPS = 1000
BACKENDS = ("positional", "spring", "generalized", "mjx")


class BraxState(NamedTuple):
    inner: Any  # Brax's State (pipeline state, obs, reward, done, metrics, info)
    first: Any  # the state this env was reset to: auto-resets return to it (as Brax does)
    t: Int[Array, ""]  # steps into the episode, for the time limit


def brax_names() -> list[str]:
    """Brax's registered environments (an ImportError without the extra)."""
    from brax import envs

    return sorted(envs._envs)  # Brax keeps its registry in this dict; it has no public list


class BraxEnv(Env):
    """A Brax environment, with its time limit as a truncation and Brax-style auto-resets.

    * **Actions** are a float vector in [-1, 1]ᵏ (Brax's actuators scale them; PureJaxRL's
      `ClipAction` uses the same bounds), so the policy is a Gaussian clipped there.
    * **Endings.** Brax's ``done`` (e.g. the pendulum fell, the hopper's torso dropped) is a
      termination; reaching ``max_episode_steps`` (default 1000) is a truncation, which
      bootstraps from V(final observation), unlike PureJaxRL's wrapper, which treats both
      alike.
    * **Auto-reset** returns an env to the state it was first reset to, as Brax's own
      `AutoResetWrapper` (and so PureJaxRL) does: a fresh random reset at every step of every
      env would run the physics initialisation under `vmap` at every step.
    """

    can_truncate = True

    def __init__(self, name: str, backend: str = "positional", time_limit: int | None = None):
        from brax import envs

        self.name = name
        self.env = envs.get_environment(name, backend=backend)
        k = int(self.env.action_size)
        self.num_actions = k
        self.action_bounds = ((-1.0,) * k, (1.0,) * k)
        self.obs_shape = (int(self.env.observation_size),)
        self.obs_dtype = jnp.float32
        self.max_episode_steps = int(time_limit or DEFAULT_EPISODE_STEPS)

    def reset(self, key):
        state = self.env.reset(key)
        mask = jnp.ones(self.num_actions, bool)
        return BraxState(state, state, jnp.zeros((), jnp.int32)), state.obs, mask

    def step(self, state, action):
        nxt = self.env.step(state.inner, action)
        t = state.t + 1
        terminated = nxt.done > 0.5
        done = terminated | (t >= self.max_episode_steps)
        inner = select_tree(done, state.first, nxt)
        return BraxState(inner, state.first, jnp.where(done, 0, t)), EnvStep(
            obs=jnp.where(done, state.first.obs, nxt.obs),
            mask=jnp.ones(self.num_actions, bool),
            reward=jnp.asarray(nxt.reward, jnp.float32),
            terminated=terminated,
            done=done,
            final_obs=nxt.obs,
        )
