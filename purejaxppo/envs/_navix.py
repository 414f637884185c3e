"""Navix's MiniGrid ports (``env="navix/<registered name>"``; ``pip install purejaxppo[navix]``).

Navix steps one env at a time under `jit`, like gymnax, but resets lazily: its ``step`` on
an ended episode returns the reset instead of a step. We call its ``_step`` and ``reset``
ourselves, so every step is a step and the observation a truncated episode ended on is kept.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ._base import Env, ended_step, select_tree

PREFIX = "navix/"
#: Navix's ``make`` gives every env this time limit unless asked for another.
DEFAULT_MAX_STEPS = 100
#: Navix's step types (``navix.environments.environment.StepType``).
TRUNCATION, TERMINATION = 1, 2


def registered_names() -> list[str]:
    """Navix's registered environments (an ImportError without the extra)."""
    import navix

    return list(navix.registry())


def base_name(name: str) -> str:
    """The registered name in ``name`` (the name itself: this suite adds nothing to it)."""
    return name


def refusal(name: str) -> str | None:
    """Why ``name`` (registered) cannot be trained; None: every Navix env can."""
    return None


class NavixEnv(Env):
    """A Navix environment: its symbolic observation through the conv torso, its time limit
    (``max_steps``, Navix's default 100, or ``time_limit``) as a truncation.

    * **Observations** are Navix's default for the env (symbolic: the grid's H×W cells,
      three uint8 channels each: object, colour, state), given to the torso as 3×H×W.
    * **Endings.** A ``TERMINATION`` step (the goal reached, lava) ends without
      bootstrapping; a ``TRUNCATION`` (the time limit) bootstraps from V(final observation).
    * **Auto-reset** draws the next episode from the key Navix keeps in its state, as its
      own ``step`` would, one step earlier: the step that ends an episode returns the next
      one's first observation.
    * **Success:** Navix's tasks pay 1 on reaching the goal and nothing else that is positive,
      so a return of at least 1 is a solved episode.
    """

    can_truncate = True
    can_draw = True
    success_return = 1.0

    def __init__(self, name: str, time_limit: int | None = None):
        import navix

        self.name = name
        self.env = navix.make(name, max_steps=int(time_limit or DEFAULT_MAX_STEPS))
        self.max_episode_steps = int(self.env.max_steps)
        self.num_actions = int(self.env.action_space.n)
        shape = tuple(self.env.observation_space.shape)
        if len(shape) != 3:
            raise ValueError(
                f"PPOConfig.env={PREFIX + name!r}: its observation has shape {shape}; the "
                "trainer takes Navix's grid observations (H×W×C)."
            )
        self.obs_shape = (shape[2], shape[0], shape[1])
        self.obs_dtype = (
            jnp.uint8 if np.dtype(self.env.observation_space.dtype) == np.uint8 else (jnp.float32)
        )

    def encode(self, obs) -> Array:
        return jnp.moveaxis(obs, -1, 0).astype(self.obs_dtype)

    def frame(self, state) -> np.ndarray:
        """Navix's own sprites (`navix.observations.rgb`), 4× enlarged (8 px a cell)."""
        import navix

        if not hasattr(self, "_rgb"):
            self._rgb = jax.jit(navix.observations.rgb)
        image = np.asarray(self._rgb(state.state))
        return np.repeat(np.repeat(image, 4, axis=0), 4, axis=1)

    def reset(self, key):
        timestep = self.env.reset(key)
        return timestep, self.encode(timestep.observation), jnp.ones(self.num_actions, bool)

    def step(self, state, action):
        nxt = self.env._step(state, action)  # Navix's step without its lazy reset
        terminated = nxt.step_type == TERMINATION
        done = nxt.step_type > 0
        first = self.env.reset(nxt.state.key)  # what Navix's own step would reset to
        return select_tree(done, first, nxt), ended_step(
            self.num_actions, nxt.reward, terminated, done, self.encode(first.observation),
            self.encode(nxt.observation),
        )  # fmt: skip


ENV = NavixEnv  # what the registry builds for this suite's names
