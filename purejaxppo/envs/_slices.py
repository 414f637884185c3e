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

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal


def masked_slices(
    fn: Callable[..., Any],
    min_elements: int = 1,
    points: bool = False,
    by_platform: bool = False,
) -> Callable[..., Any]:
    """``fn`` (a pure function of arrays) with every dynamic slice of at least
    ``min_elements`` elements taken by masks; the same results, bit for bit (module
    docstring). A slice at a constant start is left alone: under `vmap` it is no gather.

    ``points``: also each gather and scatter at one index (``x[i]`` with an index array,
    ``x.at[i, j].set(v)`` and its ``add``/``mul``/``min``/``max``), as a masked read or a
    select; other gathers and scatters are left as they are. Not yet measured on a chip,
    so no env uses it (docs/experiments/craftax-tpu.md).

    ``by_platform``: each masked read is picked when the program is lowered
    (`jax.lax.platform_dependent`): the env's own indexed read on a CPU, which reads less,
    the masks elsewhere, so a program exported for several platforms holds each one's.
    (Tracing it costs about what a choice between ``fn`` and its rewrite does: both add
    ~3 s to lowering Craftax's update on a CPU, docs/experiments/craftax-tpu.md.)"""

    def rule(eqn, ins: list):
        how = _how(eqn, min_elements, points)
        if how is None:
            return None
        if not by_platform:
            return how(*ins)
        own = functools.partial(eqn.primitive.bind, **eqn.params)
        return lax.platform_dependent(*map(jnp.asarray, ins), cpu=own, default=how)

    traced: dict = {}  # fn's program by the arguments' structure and types

    def rewritten(*args):
        leaves, tree = jax.tree.flatten(args)
        key = (tree, tuple(jax.typeof(x) for x in leaves))
        if key in traced:
            closed, out_tree = traced[key]
        else:
            closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
            out_tree = jax.tree.structure(shapes)
            # Traced once per type (a second trace under `vmap` or `jit` then costs half as
            # much); not when ``fn`` closes over an outer trace's values.
            if not any(isinstance(c, jax.core.Tracer) for c in closed.consts):
                traced[key] = closed, out_tree
        return jax.tree.unflatten(out_tree, _eval(rule, closed.jaxpr, closed.consts, *leaves))

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
            cut = jnp.max(jnp.where(pick, moved, _lowest(x.dtype)), axis=-1)
        x = jnp.moveaxis(cut, -1, axis)
    return x


def _lowest(dtype) -> Any:
    """The value no element is below: what a masked max reads where the mask is off."""
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(-np.inf, dtype)
    return jnp.asarray(jnp.iinfo(dtype).min, dtype)


def _at(index, x):
    """True at ``x[index[0], ..., index[k-1]]`` (its first ``k`` axes), broadcastable to
    ``x``; nowhere for an index outside ``x``."""
    k = index.shape[0]
    mask = jnp.ones(x.shape[:k], bool)
    for d in range(k):
        at = jnp.arange(x.shape[d], dtype=index.dtype) == index[d]
        mask = mask & at.reshape((1,) * d + (-1,) + (1,) * (k - d - 1))
    return mask.reshape(mask.shape + (1,) * (x.ndim - k))


def _pick(x, index):
    """``x[index[0], ..., index[k-1]]`` (the rest of its axes whole) by a masked reduction
    over the first ``k`` axes; the dtype's lowest value (False) where no index matches."""
    mask, axes = _at(index, x), tuple(range(index.shape[0]))
    if x.dtype == jnp.bool_:
        return jnp.any(mask & x, axis=axes)
    return jnp.max(jnp.where(mask, x, _lowest(x.dtype)), axis=axes)


def _how(eqn, min_elements: int, points: bool) -> Callable[..., Any] | None:
    """The masked form of ``eqn`` (a function of its inputs), or None to keep it."""
    name, p = eqn.primitive.name, eqn.params
    if name == "dynamic_slice":
        starts = eqn.invars[1:]
        if math.prod(p["slice_sizes"]) >= min_elements and not all(
            isinstance(s, Literal) for s in starts
        ):
            return functools.partial(_masked_slice, slice_sizes=p["slice_sizes"])
    elif points and name == "gather":
        return _gather_how(eqn)
    elif points and name in _COMBINE:
        return _scatter_how(eqn)
    return None


def _gather_how(eqn) -> Callable[..., Any] | None:
    """A gather at one index of the first axes, the rest whole (``x[i]``, ``x[i, j]``), by
    `_pick`; None for any other gather (left to XLA)."""
    p = eqn.params
    x, index = (v.aval for v in eqn.invars)
    dn, sizes, mode = p["dimension_numbers"], tuple(p["slice_sizes"]), p["mode"]
    k = len(dn.start_index_map)
    fill = mode == lax.GatherScatterMode.FILL_OR_DROP
    if (
        not (index.ndim >= 1 and index.shape[-1] == k and math.prod(index.shape[:-1]) == 1)
        or tuple(dn.start_index_map) != tuple(range(k))
        or tuple(getattr(dn, "operand_batching_dims", ()))
        or sizes != (1,) * k + tuple(x.shape[k:])
        or (fill and p["fill_value"] is None)
    ):
        return None

    def gather(x, index):
        x, index = jnp.asarray(x), jnp.asarray(index).reshape(k)  # (a literal: a Python value)
        bounds = jnp.asarray(x.shape[:k], index.dtype) - 1
        if not fill:  # CLIP or PROMISE_IN_BOUNDS: the index clamped onto the operand
            index = jnp.clip(index, 0, bounds)
        out = _pick(x, index).reshape(eqn.outvars[0].aval.shape)
        if fill:
            outside = jnp.any((index < 0) | (index > bounds))
            out = jnp.where(outside, jnp.asarray(p["fill_value"], x.dtype), out)
        return out

    return gather


#: A scatter's combination of the old value with the update, by primitive.
_COMBINE = {
    "scatter": lambda old, new: new,
    "scatter-add": lax.add,
    "scatter-mul": lax.mul,
    "scatter-min": lax.min,
    "scatter-max": lax.max,
}


def _scatter_how(eqn) -> Callable[..., Any] | None:
    """A scatter at one index of the first axes, the rest whole (``x.at[i, j].set(v)``), as
    a select of the combined value there; None for any other scatter (left to XLA)."""
    p = eqn.params
    x, index, update = (v.aval for v in eqn.invars)
    dn, mode = p["dimension_numbers"], p["mode"]
    k = len(dn.scatter_dims_to_operand_dims)
    if (
        index.shape != (k,)
        or tuple(dn.scatter_dims_to_operand_dims) != tuple(range(k))
        or tuple(dn.inserted_window_dims) != tuple(range(k))
        or tuple(dn.update_window_dims) != tuple(range(x.ndim - k))
        or tuple(getattr(dn, "operand_batching_dims", ()))
        or tuple(update.shape) != tuple(x.shape[k:])
    ):
        return None
    combine = _COMBINE[eqn.primitive.name]

    def scatter(x, index, update):
        x, index = jnp.asarray(x), jnp.asarray(index)  # (a literal: a Python value)
        if mode != lax.GatherScatterMode.FILL_OR_DROP:  # CLIP or PROMISE_IN_BOUNDS
            index = jnp.clip(index, 0, jnp.asarray(x.shape[:k], index.dtype) - 1)
        new = combine(x, jnp.broadcast_to(jnp.asarray(update, x.dtype), x.shape))
        return jnp.where(_at(index, x), new, x)  # outside x (FILL_OR_DROP): dropped

    return scatter


def _eval(rule: Callable[..., Any], jaxpr: Jaxpr, consts, *args) -> list:
    """Evaluate ``jaxpr`` equation by equation, ``rule``'s value where it has one (else the
    equation's own), into loops, branches and calls too."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _apply(rule, eqn, ins)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def _apply(rule: Callable[..., Any], eqn, ins: list):
    name, p = eqn.primitive.name, eqn.params
    out = rule(eqn, ins)
    if out is not None:
        return out
    if name in ("jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call"):
        # a call: inlined (an env's step is never differentiated: a custom rule is unused)
        closed = next(p[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in p)
        return _eval(rule, closed.jaxpr, closed.consts, *ins)
    if name in ("scan", "while", "cond"):  # the same loop or branch, its programs rewritten
        return eqn.primitive.bind(*ins, **{k: _rewrite(rule, v) for k, v in p.items()})
    return eqn.primitive.bind(*ins, **p)


def _rewrite(rule: Callable[..., Any], param):
    """A loop's or a branch's program (a ClosedJaxpr, or a tuple of them) with ``rule``
    applied, taking and giving the same types; any other parameter as it is."""
    if isinstance(param, tuple) and param and all(isinstance(b, ClosedJaxpr) for b in param):
        return tuple(_rewrite(rule, b) for b in param)
    if not isinstance(param, ClosedJaxpr):
        return param
    types = [v.aval for v in param.jaxpr.invars]
    specs = [jax.ShapeDtypeStruct(t.shape, t.dtype, weak_type=t.weak_type) for t in types]
    return jax.make_jaxpr(lambda *xs: _eval(rule, param.jaxpr, param.consts, *xs))(*specs)
