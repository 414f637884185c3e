"""Rows of a matrix in a given order, ``words[perm]``: each agent's packed batch, once per epoch.

On a TPU, XLA runs a gather with per-agent indices at ~13 ns per index (docs/benchmarks.md,
"On a TPU"); this is the one left in an accelerator's update. There, `permute_rows` runs a
Pallas kernel instead: each agent's rows are copied into the chip's vector memory whole, and
then row by row in the permutation's order (3x faster than XLA's gather for the maze's 256 x
8,192 rows of 84 words). Every other platform, batches too big for the kernel's memory, and
a jax without Pallas's TPU API take XLA's gather. Either way the result is ``words[perm]``
bit for bit: a copy, no arithmetic.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jaxtyping import Array, Int, UInt32

#: Vector memory the kernel may plan for (its input and output blocks, each double-buffered),
#: at most 3/4 of the chip's (`pltpu.get_tpu_info`: 128 MiB on a v5e or v6e, 64 MiB on a v5p,
#: 16 MiB on a v4). Bigger batches take XLA's gather.
VMEM_BUDGET = 48 * 2**20
#: The vector memory assumed where no TPU is attached (a program exported for a TPU from
#: another machine): a v5e's, the chip the kernel was measured on.
ASSUMED_VMEM = 128 * 2**20

#: Row copies per iteration of the kernel's loop (8 and 16 measured alike on a v5e).
UNROLL = 8
#: Rows per agent the kernel takes at most: its permutation sits in scalar memory (1 MiB,
#: double-buffered, maybe padded), measured at 8,192 rows; more take XLA's gather.
MAX_ROWS = 16384


def permute_rows(
    words: UInt32[Array, "rows w"], perm: Int[Array, " rows"]
) -> UInt32[Array, "rows w"]:
    """``words[perm]``, exactly; ``perm`` must be a permutation of ``arange(rows)``.

    Batched by `jax.vmap` (the engine maps it over agents) as one kernel over every agent.
    """
    return _permute_p.bind(words[None], perm[None].astype(jnp.int32))[0]


def _gather(words: UInt32[Array, "a rows w"], perm: Int[Array, "a rows"]):
    return jax.vmap(lambda x, p: x[p])(words, perm)


# A primitive of its own, so that each platform gets its own lowering (jax picks the rule per
# platform, also when one program is exported for several at once): the kernel on a TPU, XLA's
# gather everywhere else. Its operands carry a leading axis of agents.
_permute_p = Primitive("purejaxppo_permute_rows")
_permute_p.def_impl(_gather)
_permute_p.def_abstract_eval(lambda words, perm: jax.core.ShapedArray(words.shape, words.dtype))


def _batch(args, dims):
    """vmap: the mapped axis joins the agents' axis (an unmapped operand is broadcast)."""
    size = next(x.shape[d] for x, d in zip(args, dims, strict=True) if d is not None)

    def leading(x, d):
        return jnp.broadcast_to(x, (size, *x.shape)) if d is None else jnp.moveaxis(x, d, 0)

    words, perm = (leading(x, d) for x, d in zip(args, dims, strict=True))
    flat = _permute_p.bind(words.reshape(-1, *words.shape[2:]), perm.reshape(-1, perm.shape[-1]))
    return flat.reshape(words.shape), 0


def _tpu_lowering(ctx, words, perm):
    rows_and_width = ctx.avals_in[0].shape[1:]
    fits = rows_and_width[0] <= MAX_ROWS and _vmem_bytes(rows_and_width) <= min(
        VMEM_BUDGET, _vmem_capacity() * 3 // 4
    )
    kernel = _pallas if fits and _has_pallas() else _gather
    return mlir.lower_fun(kernel, multiple_results=False)(ctx, words, perm)


batching.primitive_batchers[_permute_p] = _batch
mlir.register_lowering(_permute_p, mlir.lower_fun(_gather, multiple_results=False))
mlir.register_lowering(_permute_p, _tpu_lowering, platform="tpu")


def _vmem_capacity() -> int:
    try:
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.get_tpu_info().vmem_capacity_bytes
    except Exception:  # no TPU attached here (ValueError), or a jax without the call
        return ASSUMED_VMEM


def _vmem_bytes(shape: tuple[int, int]) -> int:
    """What the kernel asks of vector memory for one agent's rows: input and output blocks,
    double-buffered, and room for the rest."""
    return 4 * _block_bytes(shape) + 8 * 2**20


@functools.cache
def _has_pallas() -> bool:
    """Whether this jax has Pallas's TPU API (else a TPU takes the gather too)."""
    try:
        from jax.experimental import pallas as pl  # noqa: F401
        from jax.experimental.pallas import tpu as pltpu
    except ImportError:
        return False
    return hasattr(pltpu, "CompilerParams") and hasattr(pltpu, "SMEM")


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
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=_vmem_bytes((rows, width))),
        interpret=interpret,
    )(perm[:, None, :].astype(jnp.int32), words)
