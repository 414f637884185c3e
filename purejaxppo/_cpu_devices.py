"""One JAX CPU device per core, so that many agents run one program per core.

XLA:CPU runs one program's small operations on about one core: one medium-maze agent barely
speeds up from a second core, and vmapping agents together does not fill it either.
Split into one CPU device per core, the engine's agent axis is sharded over the devices like
over GPUs, and each core runs its own share of the agents (the gain: docs/benchmarks.md).

JAX fixes its CPU device count when its backends start, so this has to happen before any
JAX operation: ``import purejaxppo`` does it (`at_import`). ``PUREJAXPPO_CPU_DEVICES=1``
keeps JAX's default of one CPU device (or give a count); a count the user set wins:
``XLA_FLAGS=--xla_force_host_platform_device_count=N``, or
``jax.config.update("jax_num_cpu_devices", N)`` before JAX's first operation, even after the
import. On a GPU or TPU host the CPU devices are not the default devices: nothing changes.
"""

from __future__ import annotations

import os
import sys
import warnings

import jax

#: Environment variable: how many CPU devices ``import purejaxppo`` gives JAX.
ENV = "PUREJAXPPO_CPU_DEVICES"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def requested_cpu_devices() -> int:
    """The count ``$PUREJAXPPO_CPU_DEVICES`` asks for (unset or ``auto``: one per usable
    core). A bad value raises `ValueError` with one line naming the variable and the fix."""
    raw = os.environ.get(ENV, "").strip()
    if raw in ("", "auto"):
        return usable_cores()
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(
            f"{ENV}={raw!r}: need a positive number of CPU devices (1: JAX's default of one), "
            "or 'auto' for one per core."
        )
    return count


def user_set_cpu_devices() -> bool:
    """Whether the user chose the CPU device count themselves (XLA_FLAGS or jax's config)."""
    flags = os.environ.get("XLA_FLAGS", "")
    return "xla_force_host_platform_device_count" in flags or jax.config.jax_num_cpu_devices >= 0


def use_cpu_devices(count: int | None = None) -> int | None:
    """Give JAX ``count`` CPU devices (default: `requested_cpu_devices`).

    Returns the count set, or None where it left JAX alone: the user set the count
    (`user_set_cpu_devices`), ``count`` is 1 (JAX's default), or JAX's backends have already
    started (a device count can no longer change; ``jax.devices("cpu")`` tells what there is).
    """
    count = requested_cpu_devices() if count is None else count
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"use_cpu_devices({count!r}): need a positive number of CPU devices.")
    if count == 1 or user_set_cpu_devices():
        return None
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # backends already initialised
        return None
    return count


def at_import() -> None:
    """`use_cpu_devices` with the requested count. A bad ``$PUREJAXPPO_CPU_DEVICES`` keeps
    JAX's default and warns, except under the ``purejaxppo`` command, which refuses it in
    one line with exit status 2 (`requested_cpu_devices` again)."""
    try:
        use_cpu_devices()
    except ValueError as e:
        command = bool(sys.argv) and os.path.basename(sys.argv[0]) == "purejaxppo"
        if not command:
            warnings.warn(f"{e} Keeping JAX's default CPU devices.", stacklevel=3)
