"""Reproducer: compiled XLA:CPU programs kept alive exhaust the process's memory mappings.

Run:  python tests/map_count.py --hold jax --programs 120   # aborts in XLA's compile near
                                                            # vm.max_map_count (65,530)
      python tests/map_count.py --hold ours --programs 120  # finishes: mappings level off

Each loaded XLA:CPU executable holds about 3 memory mappings per kernel it JIT-compiled, and
frees them only when the executable is freed. Linux allows ``vm.max_map_count`` (65,530 by
default) per process; past it, the next ``mmap`` in XLA's compiler fails and the process
aborts inside ``backend_compile_and_load`` (docs/jax-versions.md: the "segfault" of the jax
0.11.2 fast tier). Each program here is ``--sorts`` independent sorts (one kernel each, ~3
mappings) of a vector scaled by the program's index, so every program is new.

* ``--hold jax``: the compiled programs stay alive, as jax's caches kept every program
  compiled through one long-lived jitted callable (equinox's ``filter_jit`` of a module-level
  function, our lowering until 2026-12-03);
* ``--hold ours``: the engine's rule (`purejaxppo._engine._kept.MAX_PROGRAMS`): a fresh ``jax.jit``
  per program and only the ``--keep`` most recently used ones held, older ones freed.

Prints the process's mappings after every ``--every`` programs, and the mean added per program.
"""

import argparse
import time
from collections import OrderedDict

import jax
import jax.numpy as jnp


def mappings() -> int:
    """Lines of ``/proc/self/maps``: the memory mappings this process holds."""
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def program(index: int, sorts: int):
    """A function no earlier call made: ``sorts`` sorts of ``x`` scaled by distinct numbers."""

    def f(x):
        return sum(jnp.sort(x * (index * sorts + j + 1)) for j in range(sorts))

    return f


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hold", choices=["jax", "ours"], required=True)
    p.add_argument("--programs", type=int, default=120)
    p.add_argument("--sorts", type=int, default=200)
    p.add_argument("--keep", type=int, default=4, help="programs held with --hold ours")
    p.add_argument("--every", type=int, default=10)
    args = p.parse_args()
    with open("/proc/sys/vm/max_map_count") as f:
        limit = int(f.read())
    print(f"jax {jax.__version__}, vm.max_map_count {limit}", flush=True)
    x = jnp.linspace(-1.0, 1.0, 64)
    held: OrderedDict = OrderedDict()
    start, t0 = mappings(), time.perf_counter()
    for i in range(args.programs):
        compiled = jax.jit(program(i, args.sorts)).lower(x).compile()
        compiled(x).block_until_ready()
        held[i] = compiled
        if args.hold == "ours":
            while len(held) > args.keep:
                held.popitem(last=False)
        del compiled
        if (i + 1) % args.every == 0:
            now = mappings()
            print(
                f"{i + 1} programs: {now} mappings (+{(now - start) / (i + 1):.0f} per program), "
                f"{time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    print(f"finished: {args.programs} programs, {mappings()} mappings", flush=True)


if __name__ == "__main__":
    main()
