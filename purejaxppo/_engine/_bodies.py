"""The traced bodies of the engine's programs, as plain functions of what they need.

`per_agent` maps one agent's function over the agent axis (over a mesh, in groups);
`update_scan` runs a number of updates of every agent in blocks, one host callback after each
block (`report_block` builds and sends it); `generations` runs PBT's generations around it.
`Engine.program` composes them; nothing here compiles or holds state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._config import PPOConfig
from .._placement import AXIS
from .._ppo import Metrics, RunnerState
from .._ppo import healthy as ppo_healthy
from .._programs import Between
from .._progress import block_rows

#: ``report(state, hparams, metrics, healthy)``: sends a block's `Progress` to the host.
Report = Callable[[RunnerState, PPOConfig, Metrics, jax.Array], None]


def per_agent(fn: Callable, valid: np.ndarray, mesh: Mesh | None, group: int | None = None):
    """vmap ``fn`` over the agent axis; under a mesh, each device maps its own shard.

    With ``group``, each device's agents run as a `lax.map` over groups of ``group``
    (padded by repeating the first agent; the padding is dropped): peak memory is one
    group's, in the same one program.
    """
    local = len(valid) // (1 if mesh is None else mesh.shape[AXIS])

    # One agent at a time: the plain per-agent program. A vmap over an axis of size 1
    # still lowers to batched ops, which XLA:CPU ran slower for one agent
    # (docs/benchmarks.md); this also makes a one-agent sweep bitwise `make_train`.
    def one(*args):
        out = fn(*jax.tree.map(lambda x: x[0], args))
        return jax.tree.map(lambda x: x[None], out)

    if group is not None and group < local:
        mapped = in_groups(one if group == 1 else jax.vmap(fn), group)
    elif local == 1:
        mapped = one
    else:
        mapped = jax.vmap(fn)
    if mesh is None:
        return mapped
    spec = PartitionSpec(AXIS)
    # check_vma=False: the per-agent code has no collectives, so JAX's varying-axis type
    # checks (which would demand pcasts on every scan carry initialised from constants)
    # buy nothing here.
    return jax.shard_map(mapped, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)


def in_groups(mapped: Callable, group: int) -> Callable:
    """``mapped`` (batched over a leading axis) applied ``group`` rows at a time."""

    def run(*args):
        n = jax.tree.leaves(args)[0].shape[0]
        count = -(-n // group)
        pad = count * group - n

        def split(x):
            if pad:
                x = jnp.concatenate([x, jnp.repeat(x[:1], pad, axis=0)])
            return x.reshape(count, group, *x.shape[1:])

        out = jax.lax.map(lambda a: mapped(*a), jax.tree.map(split, args))
        return jax.tree.map(lambda x: x.reshape(count * group, *x.shape[2:])[:n], out)

    return run


def update_scan(
    step: Callable,
    state: RunnerState,
    hp: PPOConfig,
    num_updates: int,
    per_callback: int,
    valid: np.ndarray,
    report: Report | None,
) -> tuple[RunnerState, Metrics]:
    """``num_updates`` of ``step`` (every agent's update) in blocks of ``per_callback``,
    ``report`` after each block; metrics ``(agent, update, ...)``.

    Each block also carries which agents have stayed healthy (`_ppo.healthy`) at every
    update so far, for the progress rows. Nested in blocks the same way with no ``report``,
    the computation and its results are the same.
    """
    healthy0 = jnp.ones(valid.shape, bool)

    def updates(carry, length):
        """``length`` updates, then one host callback with each one's `Progress`, built
        here for the block at once (per update, its small ops cost as much as the
        callback)."""
        state, healthy = carry
        state, metrics = jax.lax.scan(lambda s, _: step(s, hp), state, None, length=length)
        # healthy after each update: healthy before the block and at every update so far
        ok = ppo_healthy(metrics)
        ok = healthy & jax.lax.associative_scan(jnp.logical_and, ok, axis=0)
        if report is not None:
            report(state, hp, metrics, ok)
        return (state, ok[-1]), metrics

    carry = (state, healthy0)
    if per_callback == num_updates:
        carry, metrics = updates(carry, num_updates)
    else:  # (block, update, ...) -> (update, ...)
        carry, metrics = jax.lax.scan(
            lambda c, _: updates(c, per_callback), carry, None,
            length=num_updates // per_callback,
        )  # fmt: skip
        metrics = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), metrics)
    # (update, agent) -> (agent, update): the agent axis leads everywhere.
    return carry[0], jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), metrics)


def report_block(
    due: Callable,
    mesh: Mesh | None,
    with_agents: bool,
    valid: np.ndarray,
    state: RunnerState,
    hp: PPOConfig,
    metrics: Metrics,
    healthy: jax.Array,
) -> None:
    """The host callback after a block of updates: every update's `Progress` rows
    (`_progress.block_rows`), gathered once under a mesh, handed to ``due`` on the host."""
    names, packed = block_rows(state.update[0], metrics, healthy, hp, valid, with_agents)
    if mesh is not None and names:  # one all-gather, quietly
        packed = jax.lax.with_sharding_constraint(packed, NamedSharding(mesh, PartitionSpec()))
    jax.debug.callback(lambda rows: due(names, rows), packed)


def generations(
    scan: Callable[[RunnerState, PPOConfig, int], tuple[RunnerState, Metrics]],
    between: Between,
    state: RunnerState,
    hp: PPOConfig,
    carry: Any,
    interval: int,
    count: int,
    tail: int,
    valid: np.ndarray,
):
    """``count`` generations of ``scan(state, hp, interval)`` then ``between``, and ``tail``
    more updates (`Engine.run_generations`). Metrics ``(agent, count * interval + tail)``,
    records ``(agent, count, ...)``."""

    def generation(c, _):
        state, hp, carry = c
        state, metrics = scan(state, hp, interval)
        state, hp, carry, record = between(state, hp, metrics, carry, valid)
        return (state, hp, carry), (metrics, record)

    (state, hp, carry), (metrics, records) = jax.lax.scan(
        generation, (state, hp, carry), None, length=count
    )
    # (generation, agent, update) -> (agent, generation * update); records agent-first
    metrics = jax.tree.map(
        lambda x: jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:]), metrics
    )
    if tail:
        state, last = scan(state, hp, tail)
        metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b], 1), metrics, last)
    return state, hp, carry, metrics, jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), records)
