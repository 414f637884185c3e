"""Jumanji's Maze-v0 with the reference's image encoding, an egocentric or local (partially
observed) view, a reset pool of random mazes, and an optional visited-cells plane."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jumanji
from jaxtyping import Array, Bool

from ._base import Env, EnvStep, select_tree
from ._layouts import LayoutGenerator, MazeLayout, resolve_maze


class JumanjiMaze(Env):
    """Jumanji ``Maze-v0`` with the reference's 3-channel image encoding, or an egocentric one.

    ``view="full"``: channel 0 is the walls, channel 1 a one-hot of the agent, channel 2 a
    one-hot of the target, stored as uint8 (a quarter of float32). ``view="egocentric"``: the
    walls and the target on a (2H−1)×(2W−1) canvas shifted so that the agent sits at its
    centre (so no agent channel), with everything outside the maze a wall. ``view="local"``:
    the egocentric view cut to the ``window``×``window`` cells around the agent, so the maze
    is partially observed (the target is invisible until it is within the window). The
    action mask is Jumanji's own in every view. ``visited=True`` adds a last plane, the cells
    the agent has stood on in this episode, in the same view (the state then carries it:
    `VisitedMaze`).
    """

    def __init__(
        self,
        maze,
        maze_size=(10, 10),
        time_limit: int | None = None,
        pool_size: int = 0,
        view: str = "full",
        refresh: int = 1,
        visited: bool = False,
        window: int = 5,
    ):
        resolved = resolve_maze(maze, maze_size)
        if isinstance(resolved, MazeLayout):
            generator = LayoutGenerator(resolved)
            pool_size = 0  # a fixed layout's reset is already two PRNG calls
        else:
            from jumanji.environments.routing.maze.generator import RandomGenerator

            generator = RandomGenerator(num_rows=resolved[0], num_cols=resolved[1])
        self.env = _Maze(generator=generator, time_limit=time_limit)
        self.num_actions = int(self.env.action_spec.num_values)
        h, w = self.env.num_rows, self.env.num_cols
        self.view = view
        self.visited = visited
        planes = (3 if view == "full" else 2) + visited
        side = {"full": (h, w), "egocentric": (2 * h - 1, 2 * w - 1), "local": (window, window)}
        self.obs_shape = (planes, *side[view])
        self.obs_dtype = jnp.uint8
        self.max_episode_steps = int(self.env.time_limit)
        self.success_return = 1.0  # the target's reward; every other step gives 0
        self.pool_size = pool_size
        self.refresh_count = refresh
        self.has_refresh = pool_size > 0

    def _cell(self, pos) -> Bool[Array, "H W"]:
        """One-hot of a position. Comparisons against an iota fuse into one elementwise
        kernel; a scatter would not."""
        rows = jnp.arange(self.env.num_rows)[:, None]
        cols = jnp.arange(self.env.num_cols)[None, :]
        return (rows == pos.row) & (cols == pos.col)

    def encode(self, obs, visited: Bool[Array, "H W"] | None = None) -> Array:
        """The network's input for a Jumanji observation (and the visited cells, if kept)."""
        agent = self._cell(obs.agent_position)
        target = self._cell(obs.target_position)
        extra = [visited] if self.visited else []
        if self.view == "full":
            return jnp.stack([obs.walls, agent, target, *extra]).astype(jnp.uint8)
        # Egocentric: the walls and target as seen from the agent, which is always at the
        # centre. An MLP then reads "wall to my left" from the same input wherever the agent
        # is, instead of learning it once per cell (docs/experiments/random-maze.md).
        # Local: the same, with only window // 2 cells of margin around the maze, then cut to
        # the window: what lies further away is not seen.
        h, w = self.env.num_rows, self.env.num_cols
        if self.view == "local":
            h = w = self.obs_shape[1] // 2 + 1
        pad = ((h - 1, h - 1), (w - 1, w - 1))
        canvas = jnp.stack(
            [
                jnp.pad(obs.walls.astype(jnp.uint8), pad, constant_values=1),
                jnp.pad(target.astype(jnp.uint8), pad),
                *(jnp.pad(v.astype(jnp.uint8), pad) for v in extra),
            ]
        )
        start = (0, obs.agent_position.row, obs.agent_position.col)
        return jax.lax.dynamic_slice(canvas, start, self.obs_shape)

    def reset(self, key):
        state, obs = self._reset(key)
        if not self.visited:
            return state, self.encode(obs), obs.action_mask
        seen = self._cell(obs.agent_position)
        return VisitedMaze(state, seen), self.encode(obs, seen), obs.action_mask

    def step(self, state, action):
        if not self.visited:
            state, obs, out = self._step(state, action)
            return state, out._replace(obs=self.encode(obs))
        inner, obs, out = self._step(state.inner, action)
        # A new episode starts from its first cell only.
        seen = jnp.where(out.done, False, state.visited) | self._cell(obs.agent_position)
        return VisitedMaze(inner, seen), out._replace(obs=self.encode(obs, seen))

    def refresh(self, state, key):
        """Replace ``refresh_count`` slots of this env's pool with newly generated mazes."""
        if self.visited:
            return VisitedMaze(self._refresh(state.inner, key), state.visited)
        return self._refresh(state, key)

    def _reset(self, key):
        """Jumanji's state (in a `PooledMaze` with a pool) and observation, no memory."""
        if not self.pool_size:
            state, ts = self.env.reset(key)
            return state, ts.observation
        pool_key, pick_key, state_key = jax.random.split(key, 3)
        pool = jax.vmap(self._generate)(jax.random.split(pool_key, self.pool_size))
        i = jax.random.randint(pick_key, (), 0, self.pool_size)
        state, obs = self._from_pool(pool, i, state_key)
        return PooledMaze(state, pool), obs

    def _step(self, state, action):
        """A step with auto-reset: the new state, Jumanji's observation, and the `EnvStep`
        whose ``obs`` the caller encodes (it is Jumanji's observation here)."""
        inner = state.inner if self.pool_size else state
        next_state, ts = self.env.step(inner, action)
        done = ts.last()
        # We always run under vmap, where a `lax.cond` would evaluate both branches anyway, so
        # a select says what really runs: the reset branch runs at *every* step.
        if self.pool_size:
            # Random mazes: draw from this env's pool (a gather), not the maze generator
            # (a while loop, ~500x the cost of a step).
            key, sub = jax.random.split(next_state.key)
            i = (jax.random.bits(sub, (), jnp.uint32) % self.pool_size).astype(jnp.int32)
            reset_state, reset_obs = self._from_pool(state.pool, i, key)
        else:
            # Fixed layouts: the state's key goes straight to the generator, which splits it
            # (Jumanji's AutoResetWrapper splits it once more first: one more PRNG call per
            # env step, for nothing).
            reset_state, reset_ts = self.env.reset(next_state.key)
            reset_obs = reset_ts.observation
        new = select_tree(done, reset_state, next_state)
        obs = select_tree(done, reset_obs, ts.observation)
        out = EnvStep(
            obs=obs,
            mask=obs.action_mask,
            reward=ts.reward.astype(jnp.float32),
            terminated=done & (ts.discount == 0),
            done=done,
        )
        return (PooledMaze(new, state.pool) if self.pool_size else new), obs, out

    def _refresh(self, state: PooledMaze, key) -> PooledMaze:
        """The slots are consecutive from a random one (mod the pool size), so they are distinct."""
        n = self.refresh_count
        slot_key, maze_key = jax.random.split(key)
        first = jax.random.randint(slot_key, (), 0, self.pool_size)
        j = (first + jnp.arange(n)) % self.pool_size
        # n = 1 keeps the key unsplit: the same mazes as before this option existed.
        keys = jax.random.split(maze_key, n) if n > 1 else maze_key[None]
        new = jax.vmap(self._generate)(keys)
        pool = jax.tree.map(lambda old, fresh: old.at[j].set(fresh), state.pool, new)
        return PooledMaze(state.inner, pool)

    def _generate(self, key) -> MazePool:
        s = self.env.generator(key)
        return MazePool(
            walls=s.walls,
            start=jnp.stack([s.agent_position.row, s.agent_position.col]).astype(jnp.int32),
            target=jnp.stack([s.target_position.row, s.target_position.col]).astype(jnp.int32),
        )

    def _from_pool(self, pool: MazePool, i, key):
        """Jumanji's ``Maze.reset`` with the maze taken from the pool instead of generated."""
        from jumanji.environments.routing.maze.types import Position, State

        walls = pool.walls[i]
        agent = Position(row=pool.start[i, 0], col=pool.start[i, 1])
        target = Position(row=pool.target[i, 0], col=pool.target[i, 1])
        state = State(
            agent_position=agent,
            target_position=target,
            walls=walls,
            action_mask=self.env._compute_action_mask(walls, agent),
            step_count=jnp.array(0, jnp.int32),
            key=key,
        )
        return state, self.env._observation_from_state(state)


class _Maze(jumanji.environments.Maze):
    """Jumanji's ``Maze``, the same dynamics (tested against it, step by step), with its
    per-env indexing written as comparisons: the wall beside the agent (`walls[row, col]`)
    and the chosen action's legality (``action_mask[action]``). Under `vmap` over envs each
    index is a gather, which a TPU runs as a slow custom fusion (docs/benchmarks.md, "On a
    TPU")."""

    def _compute_action_mask(self, walls: Array, agent_position) -> Bool[Array, " 4"]:
        rows = jnp.arange(self.num_rows)[:, None]
        cols = jnp.arange(self.num_cols)[None, :]
        legal = []
        for dr, dc in _MOVES:
            row, col = agent_position.row + dr, agent_position.col + dc
            inside = (row >= 0) & (row < self.num_rows) & (col >= 0) & (col < self.num_cols)
            legal.append(inside & ~jnp.any(walls & (rows == row) & (cols == col)))
        return jnp.stack(legal)

    def step(self, state, action):
        from jumanji.environments.routing.maze.types import Position, State
        from jumanji.types import termination, transition

        # An illegal move (into a wall or off the grid) is a no-op (action 4), as in Jumanji.
        legal = jnp.any(state.action_mask & (jnp.arange(4) == action))
        action = jax.lax.select(legal, action, 4)
        dr = jnp.where(action == 0, -1, jnp.where(action == 2, 1, 0))
        dc = jnp.where(action == 1, 1, jnp.where(action == 3, -1, 0))
        pos = state.agent_position
        agent_position = Position(row=pos.row + dr, col=pos.col + dc)
        action_mask = self._compute_action_mask(state.walls, agent_position)
        state = State(
            agent_position=agent_position,
            target_position=state.target_position,
            walls=state.walls,
            action_mask=action_mask,
            key=state.key,
            step_count=state.step_count + 1,
        )
        observation = self._observation_from_state(state)
        target_reached = state.agent_position == state.target_position
        done = ~jnp.any(action_mask) | target_reached | (state.step_count >= self.time_limit)
        reward = jnp.array(target_reached, float)
        timestep = jax.lax.cond(done, termination, transition, reward, observation)
        return state, timestep


#: Jumanji's moves, (row, col) offsets of actions 0–3: up, right, down, left.
_MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))


class MazePool(NamedTuple):
    """Pre-generated mazes of one env: walls (P, H, W), start and target (P, 2)."""

    walls: Array
    start: Array
    target: Array


class PooledMaze(NamedTuple):
    inner: Any  # Jumanji's maze state
    pool: MazePool


class VisitedMaze(NamedTuple):
    inner: Any  # the maze's state without the memory (Jumanji's, or a PooledMaze)
    visited: Bool[Array, "H W"]  # cells the agent has stood on in this episode
