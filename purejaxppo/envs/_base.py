"""The environment interface the trainer sees: one env, auto-reset, encoded observations.

``reset(key) -> (state, obs, mask)`` and ``step(state, action) -> (state, EnvStep)``, for
*one* environment; the trainer batches with `jax.vmap`. Observations come out already
encoded for the network, in a compact dtype (uint8 images for grids), so rollout buffers
stay small.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

#: The trainer's per-update metrics (the fields of `purejaxppo.Metrics`): an env's
#: ``episode_stats`` may not take these names, which share the run directory's columns.
#: Declared here, where envs are checked, since envs import nothing of the trainer
#: (tests/test_own_env.py keeps the two lists equal).
METRIC_NAMES = (
    "episode_return", "episode_length", "episodes", "policy_loss", "value_loss", "entropy",
    "approx_kl", "clip_frac", "explained_variance", "grad_norm", "skipped_steps",
    "episode_stats",
)  # fmt: skip


#: The platform names `lowering_for` takes (`jax.Device.platform`'s, and jax's backend names).
PLATFORMS = ("cpu", "gpu", "tpu", "cuda", "rocm")

_LOWERING_FOR: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "purejaxppo_lowering_for", default=None
)


def lowering_platform() -> str:
    """The platform the program being traced is for: the trainer's engine says so while it
    traces its programs (its devices' platform), else ``jax.default_backend()``.

    For a step written two ways, one per platform (Craftax's on accelerators): choosing
    here traces one of them, where `jax.lax.platform_dependent` traces and batches both
    (1.5x the tracing of a Craftax update). A function traced outside the engine, for
    another platform than the default backend's, gets the default's way: the same values,
    at that platform's speed for it."""
    return _LOWERING_FOR.get() or jax.default_backend()


@contextlib.contextmanager
def lowering_for(platform: str) -> Iterator[None]:
    """Within the block (in this thread), `lowering_platform()` is ``platform``: a jax
    platform name as `jax.Device.platform` gives it ("cpu", "gpu", "tpu")."""
    if platform not in PLATFORMS:
        raise ValueError(
            f"lowering_for({platform!r}): use a jax platform name, one of {list(PLATFORMS)}."
        )
    token = _LOWERING_FOR.set(platform)
    try:
        yield
    finally:
        _LOWERING_FOR.reset(token)


class EnvStep(NamedTuple):
    """What one env step hands the trainer."""

    obs: Array  # encoded observation *after* auto-reset (the next episode's first one on a reset)
    mask: Bool[Array, " A"]  # legal actions in ``obs``
    reward: Float[Array, ""]
    terminated: Bool[Array, ""]  # a true ending: no bootstrapping from the next state
    done: Bool[Array, ""]  # the episode ended (terminated or truncated) and was reset
    # The observation reached *before* an auto-reset, for envs that can truncate (time
    # limits): a truncated step bootstraps from V(final_obs). None for envs whose every
    # ending is a termination (Maze), where the trainer then skips that extra forward pass.
    final_obs: Array | None = None
    # The env's per-episode statistics (`Env.episode_stats`, in that order) for the episode
    # that ended at this step; read only where ``done``. None for envs that report none.
    stats: Float[Array, " K"] | None = None


class Env:
    """Base class: a single environment with automatic reset (public: subclass it to train
    your own env with action masks or explicit truncation; docs/guide.md "Your own
    environment").

    Contract: ``reset(key) -> (state, obs, mask)`` and ``step(state, action) -> (state,
    EnvStep)`` for *one* env, traceable under `jax.jit` and `jax.vmap`; ``obs`` always has
    shape ``obs_shape`` and dtype ``obs_dtype``; ``mask`` is a bool vector of legal actions
    (all True if every action is legal). ``action`` is an int32 scalar (one categorical
    factor), an int32 vector (several, ``action_dims``) or a float32 vector of
    ``num_actions`` numbers (``action_bounds`` set: continuous).
    """

    num_actions: int
    obs_shape: tuple[int, ...]
    obs_dtype: Any
    max_episode_steps: int  # the time limit: evaluation plays at most this many steps
    can_truncate: bool = False  # True: steps carry `final_obs` and truncation bootstraps
    has_refresh: bool = False  # True: `refresh` runs once per update (instance pools)
    # An episode that ends with at least this return solved the task (Maze: reached the
    # target; Minesweeper: cleared the board). None: the env has no notion of success, and
    # evaluations report none rather than a number that means nothing.
    success_return: float | None = None
    # Continuous actions: ``(low, high)``, one bound per action dimension (±inf: unbounded);
    # the policy is then a Gaussian over ``action_dims[0]`` numbers. None: discrete actions.
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    # Names of numbers the env reports for each episode when it ends (`EnvStep.stats`), e.g.
    # Craftax's achievements (1 if unlocked in that episode): each becomes a metric, its
    # mean over the episodes that ended in an update (`Metrics.episode_stats`).
    episode_stats: tuple[str, ...] = ()
    # True: `frame` draws a state (the run directory's agent.gif, `write_gif`).
    can_draw: bool = False

    @property
    def action_dims(self) -> tuple[int, ...]:
        """The policy's categorical factors: ``(num_actions,)`` unless factorised."""
        return (self.num_actions,)

    def refresh(self, state: Any, key: PRNGKeyArray) -> Any:
        """Once per update, outside the step loop: e.g. replace one pooled instance."""
        return state

    def reset(self, key: PRNGKeyArray) -> tuple[Any, Array, Bool[Array, " A"]]:
        raise NotImplementedError

    def frame(self, state: Any) -> np.ndarray:
        """One env's ``state`` as an RGB image, ``(H, W, 3)`` uint8, on the host (envs with
        ``can_draw``): a GIF's frame, so it need not trace."""
        raise NotImplementedError

    def step(self, state: Any, action: Int[Array, ""]) -> tuple[Any, EnvStep]:
        raise NotImplementedError


def select_tree(done: Bool[Array, ""], reset: Any, current: Any) -> Any:
    """Auto-reset as a select: the reset pytree where ``done``, else the current one.

    Under vmap a `lax.cond` would run both branches anyway, so a select says what really runs.
    """
    return jax.tree.map(lambda r, c: jnp.where(done, r, c), reset, current)


def ended_step(
    num_actions: int, reward, terminated, done, first_obs: Array, final_obs: Array, stats=None
) -> EnvStep:
    """The `EnvStep` of an env that resets where ``done``: ``first_obs`` (the next episode's
    first observation) is the next observation there, ``final_obs`` (the one reached) is kept
    for bootstrapping a truncation, and every action is legal."""
    return EnvStep(
        obs=jnp.where(done, first_obs, final_obs),
        mask=jnp.ones(num_actions, bool),
        reward=jnp.asarray(reward, jnp.float32),
        terminated=jnp.asarray(terminated, bool),
        done=jnp.asarray(done, bool),
        final_obs=final_obs,
        stats=stats,
    )
