"""Rows of many arrays as one uint32 matrix: what the accelerators' minibatches are cut from.

`pack_rows` lays every leaf of a pytree whose leaves share a leading row axis side by side,
bit for bit, as ``(rows, words)`` uint32; `unpack_rows` reverses it exactly (a bitcast, no
arithmetic). Why: on a TPU, indexing rows with per-agent indices costs per *index*, not per
byte, so permuting one packed matrix once per epoch costs what permuting one of its ten-odd
fields did per minibatch (`_backend`; figures: docs/benchmarks.md, "On a TPU").
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, UInt32


class _Leaf(NamedTuple):
    shape: tuple[int, ...]  # one row's shape
    dtype: Any
    start: int  # first word in the packed row
    words: int


class RowLayout(NamedTuple):
    """Where each leaf lives in a packed row (static: part of the traced program)."""

    treedef: Any
    leaves: tuple[_Leaf, ...]
    words: int  # words per packed row


def pack_rows(tree: Any) -> tuple[UInt32[Array, "rows words"], RowLayout]:
    """Every leaf's row ``i`` side by side in row ``i`` of one uint32 matrix.

    Leaves of 4-byte dtypes take one word per element, 1- and 2-byte dtypes (bool, uint8,
    bfloat16, ...) share words (planar, padded to a whole word per leaf); 8-byte ones take
    two.
    """
    leaves, treedef = jax.tree.flatten(tree)
    rows = leaves[0].shape[0]
    parts, specs, start = [], [], 0
    for x in leaves:
        if x.shape[0] != rows:
            raise ValueError(f"pack_rows: leaves disagree on the rows ({x.shape[0]} != {rows}).")
        words = _to_words(x)
        specs.append(_Leaf(tuple(x.shape[1:]), x.dtype, start, words.shape[1]))
        parts.append(words)
        start += words.shape[1]
    return jnp.concatenate(parts, axis=1), RowLayout(treedef, tuple(specs), start)


def unpack_rows(packed: UInt32[Array, "rows words"], layout: RowLayout) -> Any:
    """The pytree `pack_rows` packed, for these rows: bit-identical leaves."""
    rows = packed.shape[0]
    leaves = [
        _from_words(packed[:, s.start : s.start + s.words], rows, s.shape, s.dtype)
        for s in layout.leaves
    ]
    return jax.tree.unflatten(layout.treedef, leaves)


def _to_words(x: Array) -> UInt32[Array, "rows w"]:
    rows = x.shape[0]
    flat = x.reshape(rows, -1)
    if flat.dtype == jnp.bool_:
        flat = flat.astype(jnp.uint8)
    size = np.dtype(flat.dtype).itemsize
    if size == 4:
        return lax.bitcast_convert_type(flat, jnp.uint32)
    if size == 8:
        return lax.bitcast_convert_type(flat, jnp.uint32).reshape(rows, -1)
    # 1- and 2-byte elements share words planar: word j holds elements j, j + q, j + 2q, ...
    # (q words), so unpacking is shifts and one concatenation, with no minor axis of 4 bytes
    # (which a TPU pads to 128 lanes: the maze's observations took ~100 ms per 256-agent
    # update to unpack from consecutive bytes; docs/benchmarks.md).
    per = 4 // size
    q = -(-flat.shape[1] // per)
    flat = jnp.pad(flat, ((0, 0), (0, per * q - flat.shape[1])))
    bits = lax.bitcast_convert_type(flat, _UNSIGNED[size])
    # plane by plane, so that no 4-byte copy of the whole field is made first
    word = bits[:, :q].astype(jnp.uint32)
    for k in range(1, per):
        word = word | (bits[:, k * q : (k + 1) * q].astype(jnp.uint32) << (8 * size * k))
    return word


def _from_words(words: Array, rows: int, shape: tuple[int, ...], dtype: Any) -> Array:
    n = math.prod(shape)
    stored = jnp.uint8 if dtype == jnp.bool_ else dtype
    size = np.dtype(stored).itemsize
    if size == 4:
        flat = lax.bitcast_convert_type(words, stored)
    elif size == 8:
        flat = lax.bitcast_convert_type(words.reshape(rows, -1, 2), stored)
    else:
        mask = jnp.uint32((1 << (8 * size)) - 1)
        planes = [
            ((words >> (8 * size * k)) & mask).astype(_UNSIGNED[size]) for k in range(4 // size)
        ]
        bits = jnp.concatenate(planes, axis=1)[:, :n]
        flat = lax.bitcast_convert_type(bits, stored)
    if dtype == jnp.bool_:
        flat = flat != 0
    return flat.reshape(rows, *shape)


_UNSIGNED = {1: jnp.uint8, 2: jnp.uint16}
