"""Reproducer: a vmapped orthogonal init, the program that deadlocked jaxlib 0.10 on 2 cores.

Run:  python tests/lapack_deadlock.py --init jax    # hangs on jax 0.10.2 (0 % CPU)
      python tests/lapack_deadlock.py --init ours   # finishes: only unbatched LAPACK calls

``jax.jit(jax.vmap(f))`` over 2 keys, where ``f`` builds 16 independent 64×64 orthogonal
matrices: under vmap, jax's initializer becomes a *batched* LAPACK QR, which jaxlib 0.10 splits
into chunks scheduled on the XLA:CPU thread pool it is running on, then waits for; with every
pool worker doing the same, nothing runs them (docs/jax-versions.md). Our initializer
(`purejaxppo._orthogonal.orthogonal`) runs a vmapped QR as a `lax.map` of unbatched LAPACK calls,
which never split. Prints the batched LAPACK custom calls in the lowered program, then runs it
``--calls`` times.
"""

import argparse
import re
import time

import jax
import jax.numpy as jnp

from purejaxppo._orthogonal import orthogonal

#: A LAPACK custom call in lowered StableHLO text, with its number of batch dimensions.
LAPACK_CALL = re.compile(r'custom_call @(lapack_\w+)\([^)]*\) \{[^\n]*?num_batch_dims = "(\d+)"')


def lapack_calls(text: str, batched_only: bool = False) -> list[str]:
    """The LAPACK custom calls in lowered StableHLO text (only those with a batch dimension,
    the kind jaxlib 0.10 splits and can deadlock on, with ``batched_only``)."""
    calls = LAPACK_CALL.findall(text)
    return sorted({name for name, dims in calls if dims != "0" or not batched_only})


def build(init: str):
    def f(key):
        keys = jax.random.split(key, 16)
        if init == "jax":
            make = jax.nn.initializers.orthogonal()
            return [make(k, (64, 64), jnp.float32) for k in keys]
        return [orthogonal(k, (64, 64), scale=1.0) for k in keys]

    return jax.jit(jax.vmap(f))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--init", choices=["jax", "ours"], default="ours")
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args()
    fn = build(args.init)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    text = fn.lower(keys).as_text()
    batched = lapack_calls(text, batched_only=True)
    print(f"jax {jax.__version__}, init={args.init}: batched LAPACK calls in the program:", batched)
    t0 = time.perf_counter()
    for _ in range(args.calls):
        jax.block_until_ready(fn(keys))
    print(f"{args.calls} calls in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
