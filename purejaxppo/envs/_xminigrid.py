"""XLand-MiniGrid's MiniGrid ports (``env="xminigrid/<registered name>"``;
``pip install purejaxppo[xminigrid]``).

Its XLand envs are refused for now: on their default parameters the ruleset is empty (no
goal), and the rulesets of its benchmarks are downloaded by the package at run time.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from ._base import Env, ended_step, select_tree

PREFIX = "xminigrid/"
XLAND = "XLand-MiniGrid-"
#: XLand-MiniGrid's step types (``xminigrid.types.StepType``): the last step of an episode.
LAST = 2


def registered_names() -> list[str]:
    """XLand-MiniGrid's registered environments (an ImportError without the extra)."""
    import xminigrid

    return list(xminigrid.registered_environments())


def refusal(name: str) -> str | None:
    """Why ``name`` (registered) cannot be trained yet; None if it can."""
    if name.startswith(XLAND):
        return (
            "XLand envs need a ruleset benchmark (xminigrid.load_benchmark downloads one at "
            "run time), which is not supported yet; its MiniGrid ports (xminigrid/MiniGrid-*) "
            "are."
        )
    return None


class XMiniGridState(NamedTuple):
    timestep: Any  # XLand-MiniGrid's TimeStep (its state, step type, reward, discount, obs)
    key: PRNGKeyArray  # for the next episode's reset


class XMiniGridEnv(Env):
    """An XLand-MiniGrid environment: its egocentric view through the conv torso, its time
    limit (``max_steps`` of its params, or ``time_limit``) as a truncation.

    * **Observations:** the agent's view, V×V cells of two uint8 channels (tile, colour),
      given to the torso as 2×V×V.
    * **Endings.** XLand-MiniGrid marks an episode's last step ``LAST``, with discount 0 for a
      termination (the goal reached) and 1 for the time limit, which then bootstraps from
      V(final observation).
    * **Success:** it pays ``1 - 0.9 * steps / max_steps`` on reaching the goal and nothing
      otherwise, so any positive return is a solved episode (at least 0.1 at the last step;
      `success_return` is set below that).
    """

    can_truncate = True
    success_return = 0.05

    def __init__(self, name: str, time_limit: int | None = None):
        import xminigrid

        self.name = name
        self.env, params = xminigrid.make(name)
        if time_limit is not None:
            params = params.replace(max_steps=int(time_limit))
        self.params = params
        self.max_episode_steps = int(params.max_steps)
        self.num_actions = int(self.env.num_actions(params))
        v, _, c = self.env.observation_shape(params)
        self.obs_shape, self.obs_dtype = (c, v, v), jnp.uint8

    def encode(self, obs) -> Array:
        return jnp.moveaxis(obs, -1, 0).astype(self.obs_dtype)

    def reset(self, key):
        key, reset_key = jax.random.split(key)
        timestep = self.env.reset(self.params, reset_key)
        mask = jnp.ones(self.num_actions, bool)
        return XMiniGridState(timestep, key), self.encode(timestep.observation), mask

    def step(self, state, action):
        nxt = self.env.step(self.params, state.timestep, action)
        done = nxt.step_type == LAST
        terminated = done & (nxt.discount == 0)
        key, reset_key = jax.random.split(state.key)
        first = self.env.reset(self.params, reset_key)
        return XMiniGridState(select_tree(done, first, nxt), key), ended_step(
            self.num_actions, nxt.reward, terminated, done, self.encode(first.observation),
            self.encode(nxt.observation),
        )  # fmt: skip


ENV = XMiniGridEnv  # what the registry builds for this suite's names
