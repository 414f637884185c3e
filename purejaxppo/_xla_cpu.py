"""Per-program XLA options: speed and compile time only, never results."""

from __future__ import annotations

import jax


def compiler_options() -> dict:
    """XLA options for the `make_train` program (nothing is set process-wide).

    On CPU, LLVM optimisation level 1 instead of the default 2 compiles the medium-maze program
    faster with no measurable change in run time (the hot loops are Eigen GEMMs and simple
    fusions that O1 already vectorises): 6.8 s against 7.5 s, run 0.84 s against 0.86 s, in
    benchmarks/bench_design.py::test_compile_opt_level.
    """
    if jax.default_backend() == "cpu":
        return {"xla_backend_optimization_level": 1}
    return {}
