"""How many agents a device runs side by side: the group width.

`Engine` runs each device's agents as a `lax.map` over groups of G vmapped agents
(`_engine._bodies.in_groups`). This module holds the width's rules: the backend's default
(`default_group_size`, from one observation's `forward_flops`), the check of a width a user
gives (`check_group_size`), and the even split of a device's agents into groups
(`balanced_width`).
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ._config import PPOConfig
from ._distributions import policy_distribution
from ._networks import AbstractRecurrentActorCritic, network_shapes
from .envs import make_env

#: On CPU, a default group does about this much forward-pass work per minibatch (agents ×
#: ``minibatch_size`` × `forward_flops` per row). Measured at or near the best width on the
#: project's 2-core CPU for works per agent from 1.2 to 49 MFLOP (CartPole to the medium
#: maze, Pendulum's 256-256 networks; docs/benchmarks.md).
CPU_FLOPS_PER_GROUP = 16e6


def default_group_size(cfg: PPOConfig, platform: str, env: Any = None) -> int | None:
    """The group width `Engine` runs when none is given (``None``: every agent at once).

    On CPU, ``CPU_FLOPS_PER_GROUP / work`` agents per group rounded to a power of two (at
    least one; so a power-of-two population splits into groups without padding agents), where
    ``work`` is one agent's forward pass over one minibatch (`forward_flops` × rows): an
    agent with large minibatches or wide networks keeps XLA:CPU's cores busy on its own
    (the maze, Pendulum's 256-256 networks: one at a time was fastest), while agents with
    little work per operation want several side by side (CartPole's: 4–16), which spreads
    XLA:CPU's fixed cost per operation. ``env`` (default: ``make_env(cfg)``) gives the
    observation and action shapes. Measured, docs/benchmarks.md. On GPU and TPU, every agent
    at once (memory permitting: see `Engine`).
    """
    if platform != "cpu":
        return None
    env = make_env(cfg) if env is None else env
    dtype = jnp.float32 if cfg.normalize_obs else env.obs_dtype  # what the network is fed
    row = forward_flops(cfg, env.obs_shape, policy_distribution(cfg, env), dtype)
    return 2 ** max(0, round(math.log2(CPU_FLOPS_PER_GROUP / (row * cfg.minibatch_size))))


def check_group_size(group_size: Any, where: str = "group_size") -> None:
    """Refuse a group width that is not a positive int (or None), in one line."""
    ok = isinstance(group_size, int) and not isinstance(group_size, bool) and group_size >= 1
    if group_size is not None and not ok:
        raise ValueError(
            f"{where}={group_size!r}: need a positive number of agents per group, or None for "
            "the backend's default (a width ≥ the agents per device runs them all at once)."
        )


def balanced_width(local: int, width: int) -> int:
    """The width of as many groups as ``width`` needs, evened out: the least padding."""
    return -(-local // -(-local // width))


def forward_flops(cfg, obs_shape: tuple[int, ...], action, obs_dtype=jnp.float32) -> float:
    """XLA's estimate of the floating-point operations of one observation's forward pass (one
    step of a recurrent network): the work per minibatch row, for `Engine`'s CPU group width.

    Lowered, never compiled or run (tens of milliseconds). Where the backend's cost analysis
    gives no estimate, twice the parameter count (one multiply-add per weight).
    """
    net = network_shapes(cfg, obs_shape, action)
    obs = jax.ShapeDtypeStruct(tuple(obs_shape), obs_dtype)
    if isinstance(net, AbstractRecurrentActorCritic):
        forward = lambda n, o: n.step(n.initial_hidden(), o)  # noqa: E731
    else:
        forward = lambda n, o: n(o)  # noqa: E731
    cost = jax.jit(forward).lower(net, obs).cost_analysis()
    flops = cost.get("flops") if isinstance(cost, dict) else None
    if not flops or flops <= 0:
        leaves = jax.tree.leaves(eqx.filter(net, eqx.is_inexact_array))
        flops = 2.0 * sum(math.prod(x.shape) for x in leaves)
    return float(flops)
