"""Any registered Jumanji environment with a discrete or multi-discrete action spec.

`JumanjiEnv` wraps one Jumanji env for the trainer (`Env` interface, auto-reset, truncation
kept apart from termination). Two choices are made per env:

* **Observation encoder.** Board games get a grid (C×H×W, uint8 one-hots where the cells are
  categorical) for the convolutional torso; every other env gets the fallback, which
  flattens every numeric leaf of the observation (except ``action_mask``) into one float32
  vector for the MLP. ``ENCODERS`` lists the per-env ones.
* **Action layout.** A ``DiscreteArray`` is one categorical. A ``MultiDiscreteArray`` is one
  categorical over the product space when its mask is *joint* (shaped like the action space,
  e.g. Minesweeper's rows × cols, Tetris's rotations × columns) or, without a mask, when the
  product is small (≤ ``JOINT_MAX``); it is *factorised* (independent categoricals, one per
  dimension) when the mask is per dimension (k × max(nvec), e.g. JobShop, the multi-agent
  envs) or the unmasked product is large. `action_layout` tells which.

Multi-agent Jumanji envs (Connector, Cleaner, LevelBasedForaging, RobotWarehouse, ...) are
trained as one centralised agent: one factor per agent and the *sum* of the agents' rewards.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, PRNGKeyArray

from ._base import Env, EnvStep, select_tree

#: Largest product space an *unmasked* multi-discrete action gets a joint categorical for.
JOINT_MAX = 4096

#: Step caps for evaluation where the env itself has no ``time_limit`` (its episodes end by
#: themselves). Training is not capped.
EPISODE_CAPS = {"Game2048-v1": 2000, "Minesweeper-v0": 100, "Knapsack-v1": 50}
DEFAULT_CAP = 1000


# ---- observation encoders: observation -> one array --------------------------------------
def _one_hot_grid(board: Array, num_classes: int) -> Array:
    """(H, W) integer cells → (num_classes, H, W) uint8 one-hot planes."""
    return jnp.moveaxis(jax.nn.one_hot(board, num_classes, dtype=jnp.uint8), -1, 0)


def _snake(env, obs) -> Array:
    # Jumanji's (H, W, 5) float planes (body, head, tail, fruit, body order in [0, 1]).
    return jnp.moveaxis(obs.grid, -1, 0).astype(jnp.float32)


def _game_2048(env, obs) -> Array:
    # Cells hold exponents (0: empty, k: tile 2^k); a tile cannot exceed 2^(cells + 1).
    n = env.board_size
    return _one_hot_grid(obs.board, n * n + 2)


def _sliding_tile(env, obs) -> Array:
    n = obs.puzzle.shape[-1]
    return _one_hot_grid(obs.puzzle, n * n)  # tile numbers, 0 = the empty square


def _minesweeper(env, obs) -> Array:
    return _one_hot_grid(obs.board + 1, 10)  # -1 unexplored, 0..8 neighbouring mines


def _tetris(env, obs) -> Array:
    # The falling piece (4×4) sits in the top-left corner of a second plane, so the whole
    # observation is one grid for the convolutions (a fixed position the MLP can read).
    piece = jnp.zeros_like(obs.grid).at[:4, :4].set(obs.tetromino)
    return jnp.stack([obs.grid, piece]).astype(jnp.uint8)


def _pac_man(env, obs) -> Array:
    # Planes: open cells, pellets, power-ups, Pac-Man, ghosts (2 while they are frightened).
    # Coordinates follow Jumanji's own PacMan network: pellet and ghost rows are [:, 1],
    # the player's row is ``x``; eaten pellets are moved to (0, 0), a wall, cleared below.
    grid = obs.grid
    pellets = jnp.zeros_like(grid).at[obs.pellet_locations[:, 1], obs.pellet_locations[:, 0]].set(1)
    power = jnp.zeros_like(grid).at[obs.power_up_locations[:, 1], obs.power_up_locations[:, 0]]
    power = power.set(1)
    player = jnp.zeros_like(grid).at[obs.player_locations.x, obs.player_locations.y].set(1)
    ghost_value = jnp.where(obs.frightened_state_time > 0, 2, 1)
    ghosts = jnp.zeros_like(grid).at[obs.ghost_locations[:, 1], obs.ghost_locations[:, 0]]
    ghosts = ghosts.set(ghost_value)
    planes = jnp.stack([grid, pellets, power, player, ghosts]).at[1:3, 0, 0].set(0)
    return planes.astype(jnp.uint8)


def flatten_observation(env, obs) -> Array:
    """The fallback: every numeric leaf except ``action_mask``, flattened, as float32."""
    leaves = jax.tree.leaves(_without_mask(obs))
    return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in leaves])


#: Per-env observation encoders; envs not listed use `flatten_observation`.
ENCODERS: dict[str, Callable[[Any, Any], Array]] = {
    "Snake-v1": _snake,
    "Game2048-v1": _game_2048,
    "SlidingTilePuzzle-v0": _sliding_tile,
    "Minesweeper-v0": _minesweeper,
    "Tetris-v0": _tetris,
    "PacMan-v1": _pac_man,
}


def _without_mask(obs):
    if hasattr(obs, "_replace") and "action_mask" in getattr(obs, "_fields", ()):
        return obs._replace(action_mask=None)
    if hasattr(obs, "replace") and hasattr(obs, "action_mask"):  # chex dataclasses
        return obs.replace(action_mask=None)
    return obs


# ---- action layouts ------------------------------------------------------------------------
class ActionLayout(NamedTuple):
    """How a Jumanji action spec maps onto our categorical policy."""

    kind: str  # "discrete" | "joint" | "factorised"
    nvec: tuple[int, ...]  # the env's action dimensions
    dims: tuple[int, ...]  # the policy's factors: (A,) for discrete/joint, nvec if factorised


def action_layout(spec, mask_shape: tuple[int, ...] | None, name: str = "env") -> ActionLayout:
    """Decide joint or factorised for an action spec and the shape of its mask (if any)."""
    from jumanji import specs

    if isinstance(spec, specs.DiscreteArray):
        n = int(spec.num_values)
        return ActionLayout("discrete", (n,), (n,))
    if isinstance(spec, specs.MultiDiscreteArray):
        nvec = tuple(int(v) for v in np.asarray(spec.num_values).reshape(-1))
        if mask_shape == nvec:
            return ActionLayout("joint", nvec, (math.prod(nvec),))
        if mask_shape == (len(nvec), max(nvec)):
            return ActionLayout("factorised", nvec, nvec)
        if mask_shape is None:
            if math.prod(nvec) <= JOINT_MAX:
                return ActionLayout("joint", nvec, (math.prod(nvec),))
            return ActionLayout("factorised", nvec, nvec)
        raise ValueError(
            f"PPOConfig.env={name!r}: its action mask has shape {mask_shape}, neither joint "
            f"{nvec} nor per dimension {(len(nvec), max(nvec))}; purejaxppo cannot map it onto "
            "a categorical policy. Pick another env."
        )
    raise ValueError(
        f"PPOConfig.env={name!r}: its action spec is {type(spec).__name__}, not discrete or "
        "multi-discrete; purejaxppo's policies are categorical. Pick another env."
    )


# ---- building an env offline ----------------------------------------------------------------
def make_jumanji(name: str, time_limit: int | None = None):
    """``jumanji.make(name)``, with a clear error instead of a retry loop when an env needs a
    download (Sokoban-v0's level set comes from the Hugging Face Hub) and cannot get it."""
    import jumanji
    from huggingface_hub import constants as hf
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    kwargs = {} if time_limit is None else {"time_limit": time_limit}
    offline = hf.HF_HUB_OFFLINE
    hf.HF_HUB_OFFLINE = True  # the local cache first, and fail at once if the file is missing
    try:
        return jumanji.make(name, **kwargs)
    except TypeError as e:
        if "time_limit" in str(e):
            raise ValueError(
                f"PPOConfig.time_limit={time_limit!r}: env {name!r} takes no time limit (its "
                "episodes end by themselves); leave time_limit=None."
            ) from e
        raise
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as e:  # not in the local cache
        if offline or not _hub_reachable():
            raise RuntimeError(
                f"PPOConfig.env={name!r} downloads data from the Hugging Face Hub when it is "
                f"built ({e.__class__.__name__}), and this machine cannot reach the Hub nor "
                "find the file in its local cache (~/.cache/huggingface). Build it once on a "
                f"connected machine (python -c \"import jumanji; jumanji.make('{name}')\") and "
                "copy that cache here, or pick another env."
            ) from e
    finally:
        hf.HF_HUB_OFFLINE = offline
    return jumanji.make(name, **kwargs)  # online, and the file is not cached yet: download


def _hub_reachable(timeout: float = 3.0) -> bool:
    import socket

    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


# ---- the env -----------------------------------------------------------------------------------
class JumanjiState(NamedTuple):
    inner: Any  # Jumanji's own state
    key: PRNGKeyArray  # for auto-resets: our own, so no env's state layout is assumed


class JumanjiEnv(Env):
    """A Jumanji env with auto-reset, its observation encoder and its action layout.

    Endings: Jumanji marks a real ending with discount 0 (``termination``) and a time-limit
    cut with discount 1 (``truncation``); a truncated step bootstraps from V(final obs).
    """

    can_truncate = True

    def __init__(self, name: str, time_limit: int | None = None):
        self.name = name
        self.env = make_jumanji(name, time_limit)
        example = jax.eval_shape(self.env.reset, jax.random.PRNGKey(0))[1].observation
        mask = getattr(example, "action_mask", None)
        self.layout = action_layout(
            self.env.action_spec, None if mask is None else tuple(mask.shape), name
        )
        self.encoder = ENCODERS.get(name, flatten_observation)
        encoded = jax.eval_shape(lambda o: self.encoder(self.env, o), example)
        self.obs_shape, self.obs_dtype = tuple(encoded.shape), encoded.dtype
        self.num_actions = sum(self.layout.dims)
        limit = getattr(self.env, "time_limit", None)
        self.max_episode_steps = int(limit or EPISODE_CAPS.get(name, DEFAULT_CAP))
        if name == "Minesweeper-v0":  # reward 1 per safe cell revealed: all of them is a win
            e = self.env
            self.success_return = float(e.num_rows * e.num_cols - e.num_mines)

    @property
    def action_dims(self) -> tuple[int, ...]:
        return self.layout.dims

    def encode(self, obs) -> Array:
        return self.encoder(self.env, obs)

    def mask(self, obs) -> Bool[Array, " A"]:
        """The legal actions, flattened the way the policy reads them."""
        m = getattr(obs, "action_mask", None)
        if m is None:
            return jnp.ones(self.num_actions, bool)
        if self.layout.kind == "factorised" and len(set(self.layout.nvec)) > 1:
            return jnp.concatenate([m[i, :n] for i, n in enumerate(self.layout.nvec)])
        return m.reshape(-1)

    def env_action(self, action) -> Array:
        """Our action (an index, or one index per factor) as Jumanji's action."""
        if self.layout.kind == "joint":  # product index -> one index per dimension
            return jnp.stack(jnp.unravel_index(action, self.layout.nvec)).astype(jnp.int32)
        return action.astype(jnp.int32)

    def reset(self, key):
        key, reset_key = jax.random.split(key)
        state, ts = self.env.reset(reset_key)
        return JumanjiState(state, key), self.encode(ts.observation), self.mask(ts.observation)

    def step(self, state, action):
        key, reset_key = jax.random.split(state.key)
        next_state, ts = self.env.step(state.inner, self.env_action(action))
        done = ts.last()
        # Under vmap the reset runs at every step whatever we write (a select, not a branch).
        reset_state, reset_ts = self.env.reset(reset_key)
        inner = select_tree(done, reset_state, next_state)
        final_obs = self.encode(ts.observation)
        return JumanjiState(inner, key), EnvStep(
            obs=jnp.where(done, self.encode(reset_ts.observation), final_obs),
            mask=jnp.where(done, self.mask(reset_ts.observation), self.mask(ts.observation)),
            # Multi-agent envs reward each agent; the centralised agent gets their sum.
            reward=jnp.sum(ts.reward).astype(jnp.float32),
            terminated=done & jnp.all(ts.discount == 0),
            done=done,
            final_obs=final_obs,
        )
