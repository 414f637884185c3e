"""JAX's persistent compilation cache: a second run of the same config skips the compile.

The command line turns it on by default (``--no-compile-cache`` turns it off,
``--compile-cache-dir DIR`` moves it); from Python it is one call, before anything compiles:

    import purejaxppo
    purejaxppo.engine.enable_compilation_cache()   # ~/.cache/purejaxppo/xla, or a path

JAX keys each entry by the program's HLO, the compile options, the backend and the jax and
jaxlib versions, so a cached program is the program that would have been compiled: results
are bit-identical (tested), and a jax upgrade simply misses. Why not always on for the
Python API: it writes to the user's disk, which a library should not do unasked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from pathlib import Path

import jax

#: Overrides the default cache directory (the CLI's ``--compile-cache-dir`` wins over it).
ENV_VAR = "PUREJAXPPO_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$PUREJAXPPO_CACHE_DIR``, else ``$XDG_CACHE_HOME/purejaxppo/xla/<host tag>``
    (~/.cache/...), one directory per kind of CPU (`host_tag`)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "purejaxppo" / "xla" / host_tag()


def host_tag() -> str:
    """The machine's architecture and a hash of its CPU's feature flags.

    XLA:CPU caches machine code for the CPU it compiled on, and JAX's cache key does not
    include the CPU's features: a home directory shared by machines of different CPU types
    (a cluster's NFS home) would hand one machine another's code. One directory per feature
    set keeps them apart.
    """
    features = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                features = line
                break
    digest = hashlib.sha256(features.encode()).hexdigest()[:12]
    return f"{platform.machine() or 'unknown'}-{digest}"


def enable_compilation_cache(path: str | Path | None = None) -> Path:
    """Use JAX's persistent compilation cache in ``path`` (default: `default_cache_dir`).

    Call it before the first compile of the process: JAX decides once, at its first compile,
    whether a cache is in use. Every program is cached, however fast it compiled (the
    trainer's programs take seconds; JAX's default threshold of 1 s would skip the small
    ones). Returns the directory; a directory that cannot be created is one line.
    """
    path = Path(path).expanduser() if path is not None else default_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(
            f"compilation cache {path}: cannot create it ({e.strerror}); choose another "
            "directory (--compile-cache-dir) or turn it off (--no-compile-cache)."
        ) from e
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
