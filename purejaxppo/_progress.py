"""What the compiled program tells the host once per update: `Progress`, built inside the
program (`aggregate`, and with trackers `per_agent_table`), packed into one vector (`pack`)
and handed to the progress function by one `jax.debug.callback` (`Engine` makes the call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._config import TRACED_FIELDS, PPOConfig
from ._ppo import Metrics


class Progress(NamedTuple):
    """What the progress callback receives once per update, aggregated over all agents
    (host values: NumPy scalars, and arrays in ``agents``).

    Returns are over agents that finished an episode in this update *and* are still healthy
    (finite metrics, no skipped steps so far in this program call: a chunk, or the whole run),
    so one diverged agent never turns an aggregate into NaN or inf; ``diverged`` counts the
    others. NaN only when no agent finished an episode in this update.
    """

    update: Int[Array, ""]
    return_mean: Float[Array, ""]
    return_min: Float[Array, ""]
    return_max: Float[Array, ""]
    agents_with_episodes: Int[Array, ""]
    diverged: Int[Array, ""]
    num_agents: Int[Array, ""]
    #: Per agent, only from an engine made with ``progress_agents=True`` (None otherwise):
    #: every metric series of this update by name (`Metrics.columns`) and each traced
    #: hyperparameter as ``hp/<name>``, float32 ``(agents,)``, padding agents dropped. It rides
    #: in the same one callback per update (what trackers log), so it costs no other transfer.
    agents: dict[str, Array] | None = None


ProgressFn = Callable[[Progress], None]


def aggregate(update, m: Metrics, healthy, valid) -> Progress:
    has = healthy & jnp.asarray(valid) & jnp.isfinite(m.episode_return)
    count = jnp.sum(has)
    ret = m.episode_return
    mean = jnp.sum(jnp.where(has, ret, 0.0)) / jnp.maximum(count, 1)
    nan = jnp.float32(jnp.nan)
    return Progress(
        update=update,
        return_mean=jnp.where(count > 0, mean, nan),
        return_min=jnp.where(count > 0, jnp.min(jnp.where(has, ret, jnp.inf)), nan),
        return_max=jnp.where(count > 0, jnp.max(jnp.where(has, ret, -jnp.inf)), nan),
        agents_with_episodes=count.astype(jnp.int32),
        diverged=jnp.sum(~healthy & jnp.asarray(valid)).astype(jnp.int32),
        num_agents=int(valid.sum()),
    )


def per_agent_table(m: Metrics, hp: PPOConfig, valid) -> tuple[tuple[str, ...], Array]:
    """`Progress.agents` as it travels: the names, and one float32 ``(agents, names)`` array
    of each metric series and traced hyperparameter, real agents only. One array, not one
    per name: a host callback's cost grows with its leaves (~45 µs each on CPU)."""
    n = int(np.sum(valid))  # the padding agents come last
    values = {**m.columns(), **{f"hp/{k}": getattr(hp, k) for k in TRACED_FIELDS}}
    values = {k: v for k, v in values.items() if v is not None}
    table = jnp.stack([jnp.asarray(v, jnp.float32)[:n] for v in values.values()], axis=1)
    return tuple(values), table


#: `Progress`'s scalar fields in `pack` order; the integer ones travel bitcast (exact).
SCALARS = tuple(f for f in Progress._fields if f != "agents")
_INTS = frozenset({"update", "agents_with_episodes", "diverged", "num_agents"})


def pack(report: Progress, table: Array | None = None) -> Float[Array, " n"]:
    """``report`` (and `per_agent_table`'s ``table``) as the one float32 vector the callback
    carries: a callback costs ~20 µs per leaf on CPU, and `Progress` has seven."""
    head = [
        jax.lax.bitcast_convert_type(jnp.asarray(getattr(report, k), jnp.int32), jnp.float32)
        if k in _INTS
        else jnp.asarray(getattr(report, k), jnp.float32)
        for k in SCALARS
    ]
    parts = [jnp.stack(head)] + ([] if table is None else [table.reshape(-1)])
    return jnp.concatenate(parts)


def deliver(progress: ProgressFn, names: tuple[str, ...], packed) -> None:
    """Call ``progress`` with the `Progress` in ``packed`` (`pack`'s vector), as NumPy
    values; with ``names``, `Progress.agents` as the documented dict of ``(agents,)``."""
    values = np.asarray(packed)
    head, ints = values[: len(SCALARS)], values[: len(SCALARS)].view(np.int32)
    fields = {k: (ints if k in _INTS else head)[i] for i, k in enumerate(SCALARS)}
    agents = None
    if names:
        table = values[len(SCALARS) :].reshape(-1, len(names))
        agents = {k: table[:, i] for i, k in enumerate(names)}
    progress(Progress(**fields, agents=agents))
