"""How much memory a program may use, and how much a compiled program needs.

Used before anything runs: a population too large for the device is split into groups that
run one after another inside the same program (`Engine`), or refused with the estimate and
the largest count that fits, instead of dying with RESOURCE_EXHAUSTED after minutes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from ._groups import balanced_width

#: Share of the available memory a program may plan to use (the rest: the host's own
#: arrays, checkpoint buffers, XLA's fragmentation).
BUDGET_FRACTION = 0.8


def available_bytes(device: jax.Device | None = None) -> int:
    """Free memory of ``device`` (default: the first one): an accelerator's free bytes, or
    on CPU the host's available memory, within the container's cgroup limit if it has one.
    The environment variable ``PUREJAXPPO_MEMORY_BYTES`` overrides it (tests, shared hosts)."""
    override = os.environ.get("PUREJAXPPO_MEMORY_BYTES")
    if override:
        return int(float(override))
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return _host_available()


def device_peak(device: jax.Device | None = None) -> tuple[int, int] | None:
    """``(peak bytes in use, bytes limit)`` of an accelerator since its process started, or
    None where the device keeps no such count (a CPU)."""
    device = device or jax.devices()[0]
    stats = (device.memory_stats() or {}) if device.platform != "cpu" else {}
    if "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"]), int(stats.get("bytes_limit", 0))


def program_bytes(compiled) -> int:
    """Peak memory XLA plans for a compiled program: arguments, outputs and temporaries
    (less what outputs alias from arguments)."""
    m = compiled.memory_analysis()
    return int(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )


def fit_to_memory(
    compile_: Callable[[int | None], Any],
    *,
    num_agents: int,
    local: int,
    width: int | None,
    have: int,
    num_devices: int,
    device_kind: str,
) -> tuple[Any, int]:
    """A compiled program of ``num_agents`` agents (``local`` per device, padding included)
    that fits ``have`` bytes per device, and the agents per group it runs.

    ``compile_(width)`` first (None: all of a device's agents at once); if XLA's memory
    analysis says it does not fit, groups narrowed from the measured per-agent temporaries
    (a `lax.map` over groups of a vmap: peak memory is one group's); else a one-line
    refusal with the estimate and the largest count that fits.

    A TPU's compiler refuses a program larger than the chip itself (RESOURCE_EXHAUSTED
    at compile time, not at run time): then a one-agent program measures an agent's
    share, and the groups are sized from it."""
    program = _compile_if_it_fits(compile_, width)
    if program is not None and program_bytes(program) <= have:
        return program, width or local
    if program is None and (width or local) > 1:  # measure one agent's share instead
        probe, probe_width = _compile_if_it_fits(compile_, 1), 1
    else:
        probe, probe_width = program, width or local
    if probe is None:
        raise ValueError(
            f"one agent of this config does not fit the device ({device_kind}, "
            f"{format_bytes(have)} available): its compiler refused it. Shrink num_envs, "
            "num_steps or the network."
        )
    m = probe.memory_analysis()
    temp_per_agent = m.temp_size_in_bytes / probe_width
    fixed = program_bytes(probe) - m.temp_size_in_bytes  # inputs, outputs: not grouped
    need = fixed + temp_per_agent * local
    group = min(int((have - fixed) // max(temp_per_agent, 1)), (width or local) - 1)
    while group >= 1:  # the estimate is linear in the group; XLA's analysis decides
        group = balanced_width(local, group)
        program = _compile_if_it_fits(compile_, group)
        if program is not None and program_bytes(program) <= have:
            return program, group
        group //= 2
    per_agent = need / local
    fit = max(0, int(have // per_agent)) * num_devices
    raise ValueError(
        f"{num_agents} agent(s) of this config need "
        f"{format_bytes(need * num_devices)} ({format_bytes(per_agent)} per agent) and "
        f"{format_bytes(have)} per device is available; at most about {fit} agents fit. "
        "Train fewer agents at once, or shrink num_envs, num_steps or the network."
    )


def _compile_if_it_fits(compile_: Callable[[int | None], Any], group: int | None) -> Any:
    """``compile_(group)``, or None where the compiler itself runs out of device memory."""
    try:
        return compile_(group)
    except Exception as e:  # jax's XlaRuntimeError; its class moved between releases
        if "RESOURCE_EXHAUSTED" in str(e) and "memory" in str(e).lower():
            return None
        raise


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _host_available() -> int:
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except OSError:
        pass
    if free is None:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    limit = _cgroup_room()
    return min(free, limit) if limit is not None else free


def _cgroup_room() -> int | None:
    """Room left under a cgroup v2 (or v1) memory limit, if one is set."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            raw = Path(limit_file).read_text().strip()
            if raw == "max" or int(raw) > 1 << 60:
                return None
            return int(raw) - int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
    return None
