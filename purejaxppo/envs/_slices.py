"""An env's own step with its dynamic slices cut by masks instead of indexed reads.

`masked_slices(fn)` returns ``fn`` with the same arguments and results, whose traced program
has each `jax.lax.dynamic_slice` (a window of a map, one level of a stack of maps, one cell)
replaced by comparisons and a max along each sliced axis. The slices' values are the same
bit for bit: a slice selects values and the mask keeps exactly those. (Float arithmetic on
them may still be fused and rounded differently by XLA, as after any change to a program:
Craftax's step on the CPU came out the same bits, tests/test_suites.py.)

Why: under `jax.vmap` over envs each such slice has a start per env and becomes a gather,
which XLA:TPU runs as a slow custom fusion or, for a window, a loop over the batch
(openxla/xla#12982). Craftax's step reads its map that way: masking its slices took its 64
steps at 1,024 envs from 325 to 227 ms on a TPU v5e, and an update at its baseline's config
from 0.577 to 0.374 s (docs/benchmarks.md, "Craftax on a TPU"). The masks read the whole
operand, which a vector unit does at once and a CPU does more slowly, so an env picks this
by platform (`purejaxppo.envs._craftax`).

This rewrites the env's traced program, not its source: the env's code is its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal


def masked_slices(fn: Callable[..., Any], min_elements: int = 1) -> Callable[..., Any]:
    """``fn`` (a pure function of arrays) with every dynamic slice of at least
    ``min_elements`` elements taken by masks; the same results, bit for bit (module
    docstring). A slice at a constant start is left alone: under `vmap` it is no gather."""

    def wanted(eqn) -> bool:
        starts = eqn.invars[1:]
        return math.prod(eqn.params["slice_sizes"]) >= min_elements and not all(
            isinstance(s, Literal) for s in starts
        )

    def rewritten(*args):
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = _eval(wanted, closed.jaxpr, closed.consts, *jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(shapes), out)

    return rewritten


def _masked_slice(x, *starts, slice_sizes):
    """`lax.dynamic_slice(x, starts, slice_sizes)` by masks: along each sliced axis, output
    row ``i`` is the max over the axis of ``x`` where the index is ``start + i`` (the start
    clamped as dynamic_slice clamps it) and the dtype's lowest value elsewhere."""
    for axis, (start, size) in enumerate(zip(starts, slice_sizes, strict=True)):
        n = x.shape[axis]
        if size == n:
            continue
        start = jnp.clip(jnp.asarray(start, jnp.int32), 0, n - size)
        pick = jnp.arange(n)[None, :] == start + jnp.arange(size)[:, None]  # (size, n)
        moved = jnp.moveaxis(x, axis, -1)[..., None, :]  # (..., 1, n)
        if x.dtype == jnp.bool_:
            cut = jnp.any(pick & moved, axis=-1)
        else:
            lowest = -np.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
            cut = jnp.max(jnp.where(pick, moved, jnp.asarray(lowest, x.dtype)), axis=-1)
        x = jnp.moveaxis(cut, -1, axis)
    return x


def _eval(wanted: Callable[[Any], bool], jaxpr: Jaxpr, consts, *args) -> list:
    """Evaluate ``jaxpr`` equation by equation, masking the wanted slices, into loops,
    branches and calls too."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _apply(wanted, eqn, ins)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def _apply(wanted: Callable[[Any], bool], eqn, ins: list):
    name, p = eqn.primitive.name, eqn.params

    def run(closed: ClosedJaxpr) -> Callable[..., list]:
        return lambda *a: _eval(wanted, closed.jaxpr, closed.consts, *a)

    if name == "dynamic_slice" and wanted(eqn):
        return _masked_slice(*ins, slice_sizes=p["slice_sizes"])
    if name in ("jit", "pjit", "closed_call", "core_call"):
        return run(p["jaxpr"] if "jaxpr" in p else p["call_jaxpr"])(*ins)
    if name in ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"):
        return run(p["call_jaxpr"] if "call_jaxpr" in p else p["fun_jaxpr"])(*ins)
    if name == "cond":
        return lax.switch(ins[0], [run(b) for b in p["branches"]], *ins[1:])
    if name == "scan":
        return _scan(run(p["jaxpr"]), p, ins)
    if name == "while":
        return _while(run(p["cond_jaxpr"]), run(p["body_jaxpr"]), p, ins)
    return eqn.primitive.bind(*ins, **p)


def _scan(body: Callable[..., list], p: dict, ins: list) -> list:
    nc, ncarry = p["num_consts"], p["num_carry"]
    consts, init, xs = ins[:nc], ins[nc : nc + ncarry], ins[nc + ncarry :]

    def step(carry, x):
        outs = body(*consts, *carry, *x)
        return outs[:ncarry], outs[ncarry:]

    carry, ys = lax.scan(
        step, init, xs, length=p["length"], reverse=p["reverse"], unroll=p["unroll"]
    )
    return [*carry, *ys]


def _while(cond: Callable[..., list], body: Callable[..., list], p: dict, ins: list) -> list:
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts, init = ins[:nc], ins[nc : nc + nb], ins[nc + nb :]
    return lax.while_loop(
        lambda c: cond(*cond_consts, *c)[0], lambda c: body(*body_consts, *c), init
    )
