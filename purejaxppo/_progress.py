"""What the compiled program tells the host about each update: `Progress`, built inside the
program (`aggregate`, and with trackers `per_agent_table`) and packed into one vector
(`pack`). The vectors of `updates_per_callback` updates travel together in one
`jax.debug.callback` (`Engine` makes the call), and `deliver` hands the progress function
each due update's `Progress` in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._config import TRACED_FIELDS, PPOConfig
from ._ppo import Metrics


class Progress(NamedTuple):
    """What the progress function receives for an update, aggregated over all agents
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
    #: in the same callback as the rest (what trackers log), so it costs no other transfer.
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


def block_rows(
    last_update, metrics: Metrics, healthy, hp: PPOConfig, valid, agents: bool
) -> tuple[tuple[str, ...], Float[Array, "updates n"]]:
    """A block of updates' `Progress` as `pack`'s vectors, one row per update, built at once
    from the block's stacked ``metrics`` and ``healthy`` (leading axis: the block's updates,
    the last of them ``last_update``); with ``agents``, each row carries `per_agent_table`
    too, whose names come first. Per update, these small ops cost as much as the callback."""
    length = healthy.shape[0]
    update = last_update - length + 1 + jnp.arange(length)
    names: tuple[str, ...] = ()

    def row(u, m, h):
        nonlocal names
        table = None
        if agents:
            names, table = per_agent_table(m, hp, valid)
        return pack(aggregate(u, m, h, valid), table)

    packed = jax.vmap(row)(update, metrics, healthy)
    return names, packed


#: The host hears from the program after about this many env steps per agent (whole
#: updates, at most `MAX_UPDATES_PER_CALLBACK`). Per update, building `Progress` and calling
#: back cost one PureJaxRL CartPole agent ~0.7 ms of its 1.5 ms on a 2-core CPU.
STEPS_PER_CALLBACK = 8192
#: The same on an accelerator (TPU, GPU), where a host callback costs ~1.5 ms (the chip
#: waits for the host) against one maze agent's ~11 ms update on a TPU v5e: 8 such updates
#: per callback keep the progress bar under 2 % (docs/benchmarks.md, "On a TPU").
ACCELERATOR_STEPS_PER_CALLBACK = 65536
#: So that a slow env with small updates still shows progress every few updates.
MAX_UPDATES_PER_CALLBACK = 16


def updates_per_callback(
    cfg: PPOConfig, every: int, num_updates: int, platform: str = "cpu"
) -> int:
    """How many of a program's ``num_updates`` updates one host callback carries: the
    fewest that cover `STEPS_PER_CALLBACK` env steps per agent (on ``platform`` ``"cpu"``;
    `ACCELERATOR_STEPS_PER_CALLBACK` elsewhere), at most `MAX_UPDATES_PER_CALLBACK` or
    ``every`` if larger, and dividing ``num_updates`` (one loop body: a remainder would
    compile the update a second time). Every due update is still delivered, each as its
    own call."""
    if num_updates <= 1:
        return 1
    steps = STEPS_PER_CALLBACK if platform == "cpu" else ACCELERATOR_STEPS_PER_CALLBACK
    want = -(-steps // (cfg.num_envs * cfg.num_steps))
    most = min(num_updates, max(every, MAX_UPDATES_PER_CALLBACK, 1))
    want = min(max(want, every), most)
    # the smallest divisor of num_updates at least `want`, if one is within `most`
    for k in range(want, most + 1):
        if num_updates % k == 0:
            return k
    # else the largest below it
    return next(k for k in range(want, 0, -1) if num_updates % k == 0)


class Arrival(NamedTuple):
    """When the callback now delivering a `Progress` reached the host (`time.perf_counter`)
    and the newest update it carries, and when its program started and from which update:
    the updates of one callback arrive together, so a rate is measured from the program's
    start to a callback's newest update, never between the rows of one callback."""

    t: float
    update: int
    start: float
    start_update: int


class ProgramClock:
    """When an engine's program was last dispatched (`started`); its first callback adds the
    update it started from."""

    def __init__(self):
        self.start = time.perf_counter()
        self.update: int | None = None

    def started(self) -> None:
        self.start, self.update = time.perf_counter(), None


_arrival = threading.local()


def arrival() -> Arrival:
    """The `Arrival` of the `Progress` being delivered now (called from a progress
    function; elsewhere: now, update 0)."""
    now = time.perf_counter()
    return getattr(_arrival, "now", None) or Arrival(now, 0, now, 0)


def deliver(
    progress: ProgressFn,
    names: tuple[str, ...],
    every: int,
    last: int,
    clock: ProgramClock,
    packed,
) -> None:
    """Call ``progress`` with the `Progress` of each row of ``packed`` (`pack`'s vectors,
    one per update, in order) whose update is due: a multiple of ``every``, or ``last``. As
    NumPy values; with ``names``, `Progress.agents` as the documented dict of ``(agents,)``."""
    rows = np.asarray(packed)
    head, ints = rows[:, : len(SCALARS)], rows[:, : len(SCALARS)].view(np.int32)
    updates = ints[:, SCALARS.index("update")]
    if clock.update is None:
        clock.update = int(updates[0]) - 1
    _arrival.now = Arrival(time.perf_counter(), int(updates[-1]), clock.start, clock.update)
    try:
        for j in range(len(rows)):
            fields = {k: (ints if k in _INTS else head)[j, i] for i, k in enumerate(SCALARS)}
            if fields["update"] % every and fields["update"] != last:
                continue
            agents = None
            if names:
                table = rows[j, len(SCALARS) :].reshape(-1, len(names))
                agents = {k: table[:, i] for i, k in enumerate(names)}
            progress(Progress(**fields, agents=agents))
    finally:
        _arrival.now = None
