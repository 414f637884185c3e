"""Environments behind one small interface: reset/step of a single env, with auto-reset.

The trainer only sees `Env`: ``reset(key) -> (state, obs, mask)`` and
``step(state, action) -> (state, Transition)``, for *one* environment; it batches with
`jax.vmap`. Observations come out already encoded for the network, in a compact dtype
(uint8 images for mazes) so that rollout buffers stay small.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jumanji
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ._config import PPOConfig
from ._mazes import LayoutGenerator, MazeLayout, resolve_maze


class EnvStep(NamedTuple):
    """What one env step hands the trainer."""

    obs: Array  # encoded observation *after* auto-reset (the next episode's first one on a reset)
    mask: Bool[Array, " A"]  # legal actions in ``obs``
    reward: Float[Array, ""]
    terminated: Bool[Array, ""]  # a true ending: no bootstrapping from the next state
    done: Bool[Array, ""]  # the episode ended (terminated or truncated) and was reset


class Env:
    """Base class: a single environment with automatic reset."""

    num_actions: int
    obs_shape: tuple[int, ...]
    obs_dtype: Any
    max_episode_steps: int  # the time limit: evaluation plays at most this many steps

    def reset(self, key: PRNGKeyArray) -> tuple[Any, Array, Bool[Array, " A"]]:
        raise NotImplementedError

    def step(self, state: Any, action: Int[Array, ""]) -> tuple[Any, EnvStep]:
        raise NotImplementedError


class JumanjiMaze(Env):
    """Jumanji ``Maze-v0`` with the seed's 3-channel image encoding.

    Channel 0 is the walls, channel 1 a one-hot of the agent, channel 2 a one-hot of the target,
    stored as uint8 (a quarter of float32). The action mask is Jumanji's own.
    """

    def __init__(self, maze, maze_size=(10, 10), time_limit: int | None = None):
        resolved = resolve_maze(maze, maze_size)
        if isinstance(resolved, MazeLayout):
            generator = LayoutGenerator(resolved)
        else:
            from jumanji.environments.routing.maze.generator import RandomGenerator

            generator = RandomGenerator(num_rows=resolved[0], num_cols=resolved[1])
        self.env = jumanji.environments.Maze(generator=generator, time_limit=time_limit)
        self.num_actions = int(self.env.action_spec.num_values)
        self.obs_shape = (3, self.env.num_rows, self.env.num_cols)
        self.obs_dtype = jnp.uint8
        self.max_episode_steps = int(self.env.time_limit)

    def encode(self, obs) -> Array:
        rows = jnp.arange(self.env.num_rows)[:, None]
        cols = jnp.arange(self.env.num_cols)[None, :]
        # Comparisons against an iota fuse into one elementwise kernel; a scatter would not.
        agent = (rows == obs.agent_position.row) & (cols == obs.agent_position.col)
        target = (rows == obs.target_position.row) & (cols == obs.target_position.col)
        return jnp.stack([obs.walls, agent, target]).astype(jnp.uint8)

    def reset(self, key):
        state, ts = self.env.reset(key)
        return state, self.encode(ts.observation), ts.observation.action_mask

    def step(self, state, action):
        next_state, ts = self.env.step(state, action)
        done = ts.last()
        # We always run under vmap, where a `lax.cond` would evaluate both branches anyway, so
        # a select says what really runs. The state's key goes straight to the generator, which
        # splits it (Jumanji's AutoResetWrapper splits it once more first: one more PRNG call
        # per env step, for nothing).
        reset_state, reset_ts = self.env.reset(next_state.key)
        state = jax.tree.map(lambda r, n: jnp.where(done, r, n), reset_state, next_state)
        obs = jax.tree.map(lambda r, n: jnp.where(done, r, n), reset_ts.observation, ts.observation)
        return state, EnvStep(
            obs=self.encode(obs),
            mask=obs.action_mask,
            reward=ts.reward.astype(jnp.float32),
            terminated=done & (ts.discount == 0),
            done=done,
        )


def make_env(cfg: PPOConfig) -> Env:
    """The environment a config names."""
    if cfg.env == "Maze-v0":
        return JumanjiMaze(cfg.maze_spec, cfg.maze_size, cfg.time_limit)
    raise ValueError(f"PPOConfig.env={cfg.env!r} is not supported yet; use 'Maze-v0'.")
