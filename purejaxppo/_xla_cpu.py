"""Per-program XLA options: speed and compile time only, never results."""

from __future__ import annotations

import contextlib

import jax


def compiler_options() -> dict:
    """XLA options for the engine's compiled programs (nothing is set process-wide).

    On CPU, LLVM optimisation level 1 instead of the default 2 compiles faster with no
    measurable change in run time: the hot loops are Eigen GEMMs and simple fusions that O1
    already vectorises (figures: docs/benchmarks.md).
    """
    if jax.default_backend() == "cpu":
        return {"xla_backend_optimization_level": 1}
    return {}


#: `unrolled_threefry` applies below this jax version only (see there).
UNROLL_BELOW = (0, 11)


@contextlib.contextmanager
def unrolled_threefry():
    """While our programs are lowered, lower the threefry PRNG hash as on GPU and TPU.

    On CPU, jax lowers threefry2x32 as a 5-iteration loop (a smaller program). Every random
    draw inside the rollout scan then becomes a nested while loop whose per-iteration
    overhead dwarfs its work (the unrolled form's gain: docs/benchmarks.md). Same hash, so the
    same bits: only the lowering differs. Scoped: the CPU rule is restored on exit, so programs
    compiled outside this block keep jax's default. Uses jax's table of platform lowerings
    (present in jax 0.9 and 0.10, tested); without it this does nothing. Only below jax 0.11
    (`UNROLL_BELOW`): jax 0.11.2's XLA:CPU compiled the unrolled form of a 3-update program
    for minutes ("Very slow compile?"), against 3–5 s with jax's loop.
    """
    if jax.__version_info__ >= UNROLL_BELOW:
        yield
        return
    try:
        from jax._src.interpreters import mlir
        from jax.extend.random import threefry2x32_p as prim

        table = mlir._platform_specific_lowerings["cpu"]
    except (ImportError, AttributeError, KeyError):  # another jax: keep its default
        yield
        return
    saved = table.pop(prim, None)  # without it, jax uses the generic (unrolled) rule
    try:
        yield
    finally:
        if saved is not None:
            table[prim] = saved
