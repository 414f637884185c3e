"""Where the CPU and the accelerators (TPU, GPU) want different programs: each choice here.

Every choice is the *same computation* written two ways, picked when a program is lowered for
its platform (`by_platform`), so one config trains the same agents on either backend; only
speed differs (figures: docs/benchmarks.md, "On a TPU"). The choices:

=========================  =====================================  ================================
choice                     CPU                                    TPU / GPU
=========================  =====================================  ================================
minibatch rows (`_ppo`)    gather each field's rows per           pack every field of a row into
                           minibatch: nothing copied per epoch    one uint32 row, permute the
                                                                  packed rows once per epoch,
                                                                  slice minibatches (`_packing`)
epochs per loop iteration  2 (`_ppo.EPOCH_UNROLL`: XLA:CPU      1 (the same speed, half the
                           schedules a small agent better)        program to compile)
conv as a matrix           the kernel scattered by a constant     a one-hot contraction on the
(`_networks.Conv2d`)       gather                                 matrix unit, at full precision
agents side by side        ~16 MFLOP per group                    every agent at once
(`_groups`)                (`default_group_size`)                 (memory permitting)
compiler options,          O1, threefry unrolled below jax 0.11   the defaults
PRNG lowering (`_xla_cpu`)
=========================  =====================================  ================================

Why they differ: XLA:CPU pays per kernel launch and handles an indexed read (a gather) as
cheaply as any loop, while on a TPU a gather whose indices differ per agent (what `vmap`
makes of one agent's indexing) runs as a slow custom fusion that costs per index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def by_platform(cpu: Callable[..., Any], accelerator: Callable[..., Any], *args: Any) -> Any:
    """``cpu(*args)`` in a program lowered for the CPU, ``accelerator(*args)`` for any other
    platform. Both must return the same shapes and dtypes; only the chosen one is compiled
    (`jax.lax.platform_dependent`), so a program for one platform carries no dead branch."""
    return jax.lax.platform_dependent(*args, cpu=cpu, default=accelerator)
