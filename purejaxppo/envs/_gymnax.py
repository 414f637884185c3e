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
    and GAE bootstraps from its value. No action masks: every action is legal.

    Spaces, as the policy and the network need them:

    * a Discrete action space gets a categorical policy; a 1-D Box (Pendulum-v1,
      MountainCarContinuous-v0, PointRobot-misc, Reacher-misc, Swimmer-misc) a Gaussian one,
      whose action is already clipped to the bounds;
    * 3-D observations are H×W×C images, given to the convolutional torso as C×H×W: uint8
      for MinAtar's 0/1 channels (a quarter of float32's buffer), float32 otherwise
      (Pong-misc);
    * other Box observations are flattened into a float32 vector (Catch-bsuite's 10×5 board,
      DeepSea-bsuite's grid) for the MLP;
    * a Discrete observation (FrozenLake-misc's cell index) becomes a one-hot vector.

    Any other space is refused in one line when the env is built, before anything compiles.
    """

    can_truncate = True

    def __init__(self, name: str, time_limit: int | None = None, memory_length: int | None = None):
        try:
            import gymnax
        except ImportError as e:
            raise ImportError(
                f"PPOConfig(env={name!r}) needs gymnax: pip install 'purejaxppo[gymnax]'."
            ) from e
        try:
            self.env, self.params = gymnax.make(name)
        except (OSError, ValueError) as e:  # MNISTBandit-bsuite downloads MNIST when made
            raise ValueError(
                f"PPOConfig.env={name!r}: gymnax could not build it ({type(e).__name__}: {e})."
            ) from e
        if time_limit is not None:
            self.params = self.params.replace(max_steps_in_episode=time_limit)
        if memory_length is not None:  # MemoryChain-bsuite (the config checks the name)
            self.params = self.params.replace(memory_length=memory_length)
        if name == "MemoryChain-bsuite":  # +1 for the right answer at the end, -1 otherwise
            self.success_return = 1.0
        self.name = name
        self._action_space(self.env.action_space(self.params))
        self._observation_space(self.env.observation_space(self.params))
        self.max_episode_steps = int(self.params.max_steps_in_episode)

    def _action_space(self, space) -> None:
        kind = type(space).__name__
        if kind == "Discrete":
            self.num_actions = int(space.n)
        elif kind == "Box" and len(tuple(space.shape)) == 1:  # a Gaussian over its dimensions
            (k,) = tuple(space.shape)
            low = np.broadcast_to(np.asarray(space.low, np.float64), (k,))
            high = np.broadcast_to(np.asarray(space.high, np.float64), (k,))
            self.action_bounds = (tuple(map(float, low)), tuple(map(float, high)))
            self.num_actions = k
        else:
            self._refuse("action", space)

    def _observation_space(self, space) -> None:
        kind = type(space).__name__
        self.one_hot = kind == "Discrete"
        if self.one_hot:
            self.image, self.obs_shape, self.obs_dtype = False, (int(space.n),), jnp.float32
            return
        if kind != "Box":
            self._refuse("observation", space)
        shape = tuple(space.shape)
        self.image = len(shape) == 3
        if self.image:  # H×W×C -> C×H×W
            self.obs_shape = (shape[2], shape[0], shape[1])
            self.obs_dtype = jnp.uint8 if self.name.endswith("-MinAtar") else jnp.float32
        else:
            self.obs_shape, self.obs_dtype = (int(np.prod(shape)),), jnp.float32

    def _refuse(self, what: str, space) -> None:
        shape = getattr(space, "shape", None)
        raise ValueError(
            f"PPOConfig.env={self.name!r}: its {what} space is {type(space).__name__}"
            + (f" of shape {tuple(shape)}" if shape is not None else "")
            + "; the trainer takes Discrete or Box"
            + (" (1-D) actions." if what == "action" else " observations.")
        )

    def encode(self, obs) -> Array:
        if self.one_hot:
            return jax.nn.one_hot(obs, self.obs_shape[0], dtype=jnp.float32)
        if self.image:
            return jnp.moveaxis(obs, -1, 0).astype(self.obs_dtype)
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
