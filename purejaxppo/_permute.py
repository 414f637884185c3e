"""Rows of a matrix in a given order, ``words[perm]``: each agent's packed batch, once per epoch.

On a TPU, XLA runs a gather with per-agent indices at ~13 ns per index (docs/benchmarks.md,
"On a TPU"); this is the one left in an accelerator's update. There, `permute_rows` runs a
Pallas kernel instead: each agent's rows are copied into the chip's vector memory whole, and
then row by row in the permutation's order (3x faster than XLA's gather for the maze's 256 x
8,192 rows of 84 words). Every other platform, and batches too big for vector memory, take
XLA's gather. Either way the result is ``words[perm]`` bit for bit: a copy, no arithmetic.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Int, UInt32

#: Vector memory the kernel may plan for: its input and output blocks, each double-buffered.
#: Every TPU since v4 has at least 64 MiB of it (`pltpu.get_tpu_info`); bigger batches take
#: XLA's gather.
VMEM_BUDGET = 48 * 2**20

#: Row copies per iteration of the kernel's loop (8 and 16 measured alike on a v5e).
UNROLL = 8


def permute_rows(
    words: UInt32[Array, "rows w"], perm: Int[Array, " rows"]
) -> UInt32[Array, "rows w"]:
    """``words[perm]``, exactly; ``perm`` must be a permutation of ``arange(rows)``.

    Batched by `jax.vmap` (the engine maps it over agents) as one kernel over every agent.
    """
    return _batched_permute(words[None], perm[None])[0]


@jax.custom_batching.custom_vmap
def _batched_permute(words, perm):
    return _by_platform(words, perm)


@_batched_permute.def_vmap
def _rule(axis_size, in_batched, words, perm):
    words_batched, perm_batched = in_batched
    # one leading axis of agents, as the kernel's grid wants it
    words = words if words_batched else jnp.broadcast_to(words, (axis_size, *words.shape))
    perm = perm if perm_batched else jnp.broadcast_to(perm, (axis_size, *perm.shape))
    flat = _by_platform(words.reshape(-1, *words.shape[2:]), perm.reshape(-1, perm.shape[-1]))
    return flat.reshape(words.shape), True


def _by_platform(words, perm):
    if _block_bytes(words.shape[-2:]) * 4 > VMEM_BUDGET or not _has_pallas():
        return _gather(words, perm)
    return lax.platform_dependent(words, perm, tpu=_pallas, default=_gather)


@functools.cache
def _has_pallas() -> bool:
    """Whether this jax has Pallas's TPU API. Every platform traces the TPU branch, so a jax
    without it must not get that far: it takes the gather everywhere."""
    try:
        from jax.experimental import pallas as pl  # noqa: F401
        from jax.experimental.pallas import tpu as pltpu
    except ImportError:
        return False
    return hasattr(pltpu, "CompilerParams") and hasattr(pltpu, "SMEM")


def _gather(words: UInt32[Array, "a rows w"], perm: Int[Array, "a rows"]):
    return jax.vmap(lambda x, p: x[p])(words, perm)


def _block_bytes(shape: tuple[int, int]) -> int:
    """One agent's rows in vector memory: tiles of 8 rows x 128 words."""
    rows, width = shape
    return -(-rows // 8) * 8 * (-(-width // 128) * 128) * 4


@functools.partial(jax.jit, static_argnames="interpret")
def _pallas(
    words: UInt32[Array, "a rows w"], perm: Int[Array, "a rows"], interpret: bool = False
) -> UInt32[Array, "a rows w"]:
    """The TPU kernel: one grid step per agent, its permutation in scalar memory."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    agents, rows, width = words.shape

    def kernel(perm_ref, in_ref, out_ref):
        def copy_row(i):
            out_ref[pl.ds(i, 1), :] = in_ref[pl.ds(perm_ref[0, i], 1), :]

        def rows_of_a_block(block, carry):  # unrolled by hand: jax 0.9's Pallas takes no unroll=
            for k in range(UNROLL):
                copy_row(block * UNROLL + k)
            return carry

        lax.fori_loop(0, rows // UNROLL, rows_of_a_block, 0)
        for i in range(rows - rows % UNROLL, rows):
            copy_row(i)

    return pl.pallas_call(
        kernel,
        grid=(agents,),
        in_specs=[
            pl.BlockSpec((None, 1, rows), lambda a: (a, 0, 0), memory_space=pltpu.SMEM),
            pl.BlockSpec((None, rows, width), lambda a: (a, 0, 0)),
        ],
        out_specs=pl.BlockSpec((None, rows, width), lambda a: (a, 0, 0)),
        out_shape=jax.ShapeDtypeStruct(words.shape, words.dtype),
        compiler_params=pltpu.CompilerParams(
            vmem_limit_bytes=4 * _block_bytes((rows, width)) + 8 * 2**20
        ),
        interpret=interpret,
    )(perm[:, None, :].astype(jnp.int32), words)
