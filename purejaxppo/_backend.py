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
permuting the packed rows  (not used)                             TPU: a Pallas kernel, rows
(`_permute`)                                                      copied in vector memory; GPU,
                                                                  or rows too big for it: XLA's
                                                                  gather
epochs per loop iteration  2 (`_ppo.EPOCH_UNROLL`: XLA:CPU      1 (the same speed, half the
                           schedules a small agent better)        program to compile)
conv as a matrix           the kernel scattered by a constant     a one-hot contraction on the
(`_conv.Conv2d`)           gather                                 matrix unit, at full precision
agents side by side        ~16 MFLOP per group                    every agent at once
(`_groups`)                (`default_group_size`)                 (memory permitting)
compiler options,          O1, threefry unrolled below jax 0.11   the defaults
PRNG lowering (`_xla_cpu`)
Craftax's restarts         pool world picked by an index          one select among the world and
(`envs._craftax`)          (a gather), then a select              the pool's (a gather under vmap
                                                                  is slow on a TPU)
Craftax's step             Craftax's own ``step_env``             the same with each dynamic
(`envs._craftax`, chosen                                          slice cut by masks
by `lowering_platform`:                                           (`envs._slices`; measured on a
one way traced)                                                   TPU, not on a GPU)
host callbacks of          every ~8,192 env steps per agent       every ~65,536 (the chip waits
progress (`_progress`)     (`STEPS_PER_CALLBACK`)                 ~1.5 ms for each callback)
float32 matrix products    float32, whatever the setting          ``cfg.matmul_precision``:
(`matmul_precision`)                                              "default" is one bfloat16 pass
                                                                  on a TPU
=========================  =====================================  ================================

Why they differ: XLA:CPU pays per kernel launch and handles an indexed read (a gather) as
cheaply as any loop, while on a TPU a gather whose indices differ per agent (what `vmap`
makes of one agent's indexing) runs as a slow custom fusion that costs per index.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax


def by_platform(cpu: Callable[..., Any], accelerator: Callable[..., Any], *args: Any) -> Any:
    """``cpu(*args)`` in a program lowered for the CPU, ``accelerator(*args)`` for any other
    platform. Both must return the same shapes and dtypes; only the chosen one is compiled
    (`jax.lax.platform_dependent`), so a program for one platform carries no dead branch."""
    return jax.lax.platform_dependent(*args, cpu=cpu, default=accelerator)


def matmul_precision(precision: str) -> contextlib.AbstractContextManager:
    """The context a program's matrix products are traced in: ``"default"`` leaves the
    backend's (or the caller's own `jax.default_matmul_precision`); ``"high"`` or
    ``"highest"`` set it. jax reads it when each product is traced, so it applies under a
    caller's own `jit` or `vmap` too."""
    if precision == "default":
        return contextlib.nullcontext()
    return jax.default_matmul_precision(precision)


def ran_on() -> dict:
    """Where this process trains: backend, device kind and count, processes, versions. Run
    directories record it (``config.json``'s ``ran_on``), so a run moved between a TPU and a
    CPU says where each part ran."""
    import jaxlib

    from . import __version__

    device = jax.devices()[0]
    return {
        "backend": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "purejaxppo": __version__,
    }


def describe_place(place: dict) -> str:
    """``ran_on()`` in a few words: "tpu (TPU v5 lite × 1), jax 0.10.2"."""
    return (
        f"{place.get('backend', '?')} ({place.get('device_kind', '?')} × "
        f"{place.get('device_count', '?')}), jax {place.get('jax', '?')}"
    )


def devices_line() -> str:
    """This process's devices for a banner: "cpu × 2 device(s)", "TPU v5 lite × 1"."""
    device, count = jax.devices()[0], jax.device_count()
    if device.platform == "cpu":
        return f"cpu × {count} device(s)"
    return f"{device.device_kind} × {count}"
