"""The torso's convolution for grid observations: a 'valid' 3×3 conv as one matmul with a
Toeplitz matrix, built on each backend the way it runs fastest (`_backend`)."""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._backend import by_platform


class Conv2d(eqx.Module):
    """A 'valid' 2-D convolution (stride 1) computed as one matmul with a Toeplitz matrix.

    Why not `eqx.nn.Conv2d`: under `vmap` over agents each agent has its own kernel, and
    XLA:CPU's batched-kernel convolution scales badly with the agent count. Here the kernel is
    scattered (by a constant gather) into a dense (C·H·W, O·H2·W2) matrix T and the
    convolution is ``x.flatten() @ T``: under `vmap` over examples that is one GEMM, and over
    agents a batched GEMM, which scales linearly (figures: docs/benchmarks.md). For large
    inputs, where T would not fit comfortably, it falls back to im2col with static slices.
    """

    weight: Float[Array, "O C kh kw"]
    bias: Float[Array, " O"]

    def __init__(self, in_channels: int, out_channels: int, kernel: int, *, key: PRNGKeyArray):
        # Same initialisation as eqx.nn.Conv2d: U(±1/sqrt(fan_in)).
        wkey, bkey = jax.random.split(key)
        lim = 1 / math.sqrt(in_channels * kernel * kernel)
        shape = (out_channels, in_channels, kernel, kernel)
        self.weight = jax.random.uniform(wkey, shape, minval=-lim, maxval=lim)
        self.bias = jax.random.uniform(bkey, (out_channels,), minval=-lim, maxval=lim)

    def __call__(self, x: Float[Array, "C H W"]) -> Float[Array, "O H2 W2"]:
        o, c, kh, kw = self.weight.shape
        _, h, w = x.shape
        h2, w2 = h - kh + 1, w - kw + 1
        if c * h * w * o * h2 * w2 <= _TOEPLITZ_MAX:
            gather = functools.partial(_toeplitz_by_gather, hw=(h, w))
            contract = functools.partial(_toeplitz_by_contraction, hw=(h, w))
            t = by_platform(gather, contract, self.weight)
            out = x.reshape(-1) @ t
        else:
            patches = jnp.stack(
                [x[:, i : i + h2, j : j + w2] for i in range(kh) for j in range(kw)],
                axis=1,
            ).reshape(c * kh * kw, h2 * w2)  # rows in the weight's (c, i, j) order
            out = self.weight.reshape(o, c * kh * kw) @ patches
        return out.reshape(o, h2, w2) + self.bias[:, None, None]


_TOEPLITZ_MAX = 4_000_000  # entries of T (16 MB of float32)


def _toeplitz_by_gather(weight: Float[Array, "O C kh kw"], hw: tuple[int, int]) -> Array:
    """T as ``(C·H·W, O·H2·W2)``: the kernel scattered by a constant gather (CPU)."""
    o, c, kh, kw = weight.shape
    (h, w), h2, w2 = hw, hw[0] - kh + 1, hw[1] - kw + 1
    idx = _toeplitz_index(c, h, w, kh, kw)  # (C·H·W, H2·W2) into weight.flatten()+[0]
    wext = jnp.concatenate([weight.reshape(o, -1), jnp.zeros((o, 1))], axis=1)
    return jnp.moveaxis(wext[:, idx], 0, 1).reshape(c * h * w, o * h2 * w2)


def _toeplitz_by_contraction(weight: Float[Array, "O C kh kw"], hw: tuple[int, int]) -> Array:
    """The same T as a contraction of the kernel with a constant 0/1 tensor (accelerators):
    under `vmap` over agents a gather of per-agent weights runs as a slow custom fusion on a
    TPU (and its gradient as a scatter-add); this is one matmul. At full precision, so every
    entry is its kernel tap exactly (a product by 1 plus zeros), as with the gather."""
    o, c, kh, kw = weight.shape
    (h, w), h2, w2 = hw, hw[0] - kh + 1, hw[1] - kw + 1
    taps = c * kh * kw
    onehot = _toeplitz_index(c, h, w, kh, kw)[None] == np.arange(taps)[:, None, None]
    t = jnp.einsum(
        "ok,kpq->poq",
        weight.reshape(o, taps),
        jnp.asarray(onehot, weight.dtype),
        precision=jax.lax.Precision.HIGHEST,
    )
    return t.reshape(c * h * w, o * h2 * w2)


@functools.cache
def _toeplitz_index(c: int, h: int, w: int, kh: int, kw: int) -> np.ndarray:
    """For each (input pixel, output pixel): which kernel tap links them (c·kh·kw: none)."""
    h2, w2 = h - kh + 1, w - kw + 1
    idx = np.full((c, h, w, h2, w2), c * kh * kw, np.int32)
    oh, ow = np.meshgrid(np.arange(h2), np.arange(w2), indexing="ij")
    for ci in range(c):
        for i in range(kh):
            for j in range(kw):
                idx[ci, oh + i, ow + j, oh, ow] = (ci * kh + i) * kw + j
    return idx.reshape(c * h * w, h2 * w2)
