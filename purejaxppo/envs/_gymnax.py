"""gymnax environments (gymnax 1.0 API; ``pip install purejaxppo[gymnax]``)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from .._errors import one_line as _one_line
from ._base import Env, EnvStep, ended_step, select_tree


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
    _public = False  # True: an object stepped through its own auto-resetting ``step``
    _arity = 5  # how many values that ``step`` returns (6: gymnax 1.0's, with truncation)

    def __init__(self, name: str, time_limit: int | None = None, memory_length: int | None = None):
        try:
            import gymnax
        except ImportError as e:
            raise ImportError(
                f"PPOConfig(env={name!r}) needs gymnax: pip install 'purejaxppo[gymnax]'."
            ) from e
        try:
            env, params = gymnax.make(name)
        except (OSError, ValueError) as e:  # MNISTBandit-bsuite downloads MNIST when made
            raise ValueError(
                f"PPOConfig.env={name!r}: gymnax could not build it ({type(e).__name__}: {e})."
            ) from e
        if memory_length is not None:  # MemoryChain-bsuite (the config checks the name)
            params = params.replace(memory_length=memory_length)
        if name == "MemoryChain-bsuite":  # +1 for the right answer at the end, -1 otherwise
            self.success_return = 1.0
        self._setup(env, params, name, time_limit)

    @classmethod
    def of(cls, env: Any, params: Any, label: str, time_limit: int | None = None) -> GymnaxEnv:
        """A gymnax-style object (your own env; see `purejaxppo.envs.OwnEnv`), with
        ``params`` (None: its ``default_params``). A subclass of gymnax's ``Environment``
        (it has ``step_env`` and ``reset_env``) steps as the named envs do; any other object
        through its own auto-resetting ``step``: gymnax 1.0's six outputs ``(obs, state,
        reward, terminated, truncated, info)`` with ``info["final_observation"]`` bootstrap
        truncations, while the older five ``(obs, state, reward, done, info)`` make every
        ending a termination."""
        self = cls.__new__(cls)
        where = f"PPOConfig.env={label!r}"
        if params is None:
            try:
                params = env.default_params
            except Exception as e:
                raise ValueError(f"{where}: its default_params raised {_one_line(e)}.") from e
        self._setup(env, params, label, time_limit)
        self._check_raw(where)
        return self

    def _setup(self, env: Any, params: Any, name: str, time_limit: int | None) -> None:
        self.env, self.name = env, name
        where = f"PPOConfig.env={name!r}"
        if time_limit is not None:
            if not hasattr(params, "max_steps_in_episode"):
                raise ValueError(
                    f"PPOConfig.time_limit={time_limit!r} is invalid: {name!r}'s params have "
                    "no max_steps_in_episode to set; drop time_limit."
                )
            params = _replace(params, max_steps_in_episode=time_limit)
        self.params = params
        # gymnax's own classes (and subclasses) step without auto-reset, so we keep the
        # observation a truncated episode ends on; other objects step through ``step``
        self._public = not (hasattr(env, "step_env") and hasattr(env, "reset_env"))
        reads = (("action", self._action_space), ("observation", self._observation_space))
        for what, read in reads:
            try:
                space = getattr(env, f"{what}_space")(params)
            except Exception as e:
                raise ValueError(f"{where}: its {what}_space(params) raised {_one_line(e)}.") from e
            read(space)
        limit = getattr(params, "max_steps_in_episode", None)
        if limit is None:
            raise ValueError(
                f"{where}: its params have no max_steps_in_episode (the episode's time limit, "
                "which evaluation plays to at most); add the field to its params."
            )
        self.max_episode_steps = int(np.asarray(limit))

    def _check_raw(self, where: str) -> None:
        """The object's own observations keep one shape and dtype; how its step ends."""
        key = jax.random.PRNGKey(0)
        reset = self.env.reset if self._public else self.env.reset_env
        step = self.env.step if self._public else self.env.step_env
        try:
            obs, state = jax.eval_shape(lambda k: reset(k, self.params), key)
        except Exception as e:
            raise ValueError(f"{where}: its reset does not trace ({_one_line(e)}).") from e
        action = (
            jnp.zeros((), jnp.int32)
            if self.action_bounds is None
            else jnp.zeros((self.num_actions,), jnp.float32)
        )
        try:
            out = jax.eval_shape(lambda k, s, a: step(k, s, a, self.params), key, state, action)
        except Exception as e:
            raise ValueError(f"{where}: its step does not trace ({_one_line(e)}).") from e
        if len(out) not in (5, 6):
            raise ValueError(
                f"{where}: its step returns {len(out)} values; gymnax's returns (obs, state, "
                "reward, terminated, truncated, info), or (obs, state, reward, done, info)."
            )
        for when, x in (("reset", obs), ("step", out[0])):
            if (tuple(x.shape), x.dtype) != (tuple(obs.shape), obs.dtype):
                raise ValueError(
                    f"{where}: its observation is {tuple(obs.shape)} {obs.dtype} at reset but "
                    f"{tuple(x.shape)} {x.dtype} after a {when}; observations must keep one "
                    "shape and dtype."
                )
        self._arity = len(out)
        if self._public:
            info = out[-1]
            self.can_truncate = (
                len(out) == 6 and isinstance(info, dict) and "final_observation" in info
            )

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
        reset = self.env.reset if self._public else self.env.reset_env
        obs, state = reset(reset_key, self.params)
        return GymnaxState(state, key), self.encode(obs), jnp.ones(self.num_actions, bool)

    def step(self, state, action):
        if self._public:
            return self._step_public(state, action)
        key, step_key, reset_key = jax.random.split(state.key, 3)
        obs, inner, reward, terminated, _ = self.env.step_env(
            step_key, state.inner, action, self.params
        )
        truncated = self.env.is_truncated(inner, self.params)
        done = jnp.logical_or(terminated, truncated)
        reset_obs, reset_inner = self.env.reset_env(reset_key, self.params)
        inner = select_tree(done, reset_inner, inner)
        # ``terminated``: a cut at the time limit is not one
        return GymnaxState(inner, key), ended_step(
            self.num_actions, reward, terminated, done, self.encode(reset_obs), self.encode(obs)
        )

    def _step_public(self, state, action):
        """An object without ``step_env``: its own auto-resetting ``step``."""
        key, step_key = jax.random.split(state.key)
        out = self.env.step(step_key, state.inner, action, self.params)
        if self._arity == 6:
            obs, inner, reward, terminated, truncated, info = out
            done = jnp.logical_or(terminated, truncated)
        else:  # (obs, state, reward, done, info): every ending counts as a termination
            obs, inner, reward, done, info = out
            terminated = done
        done = jnp.asarray(done, bool)
        if not self.can_truncate:  # no final observation to bootstrap from
            terminated = done
        final_obs = self.encode(info["final_observation"]) if self.can_truncate else None
        return GymnaxState(inner, key), EnvStep(
            obs=self.encode(obs),
            mask=jnp.ones(self.num_actions, bool),
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, bool),
            done=done,
            final_obs=final_obs,
        )


def _replace(params: Any, **changes) -> Any:
    """``params`` with ``changes``: a flax/chex dataclass, a dataclass or a NamedTuple."""
    if hasattr(params, "replace"):
        return params.replace(**changes)
    if hasattr(params, "_replace"):
        return params._replace(**changes)
    return dataclasses.replace(params, **changes)
