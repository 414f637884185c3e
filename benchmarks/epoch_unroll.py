"""Epochs per loop iteration in `learn` (`_ppo.EPOCH_UNROLL`): ms per update, 1 against 2.

    python benchmarks/epoch_unroll.py [CONFIG] [AGENTS] [UPDATES] [ROUNDS]

CONFIG: ``cartpole`` (PureJaxRL's CartPole config, the default) or ``maze`` (the medium-maze
default). AGENTS: 0 (default) is one agent unbatched, as `make_train` runs it; N > 0 vmaps N
agents. Both programs are compiled and run once first; then ROUNDS calls alternate between
them, UPDATES updates each, in one process, and the quartiles of ms per update are printed,
with the compile seconds and whether the two give the same metrics (docs/benchmarks.md).
"""

import sys
import time
import warnings

import jax
import numpy as np

from purejaxppo import PPOConfig, _ppo
from purejaxppo._bench import PUREJAXRL_CARTPOLE
from purejaxppo._xla_cpu import compiler_options, unrolled_threefry
from purejaxppo.envs import make_env

CARTPOLE = PUREJAXRL_CARTPOLE  # PureJaxRL's ppo.py config


def main() -> None:
    args = sys.argv[1:] + [None] * 4
    spec = args[0] or "cartpole"
    if spec not in ("cartpole", "maze"):
        sys.exit(f"CONFIG={spec!r}: use cartpole or maze.")
    agents, updates, rounds = int(args[1] or 0), int(args[2] or 200), int(args[3] or 25)
    if agents < 0 or updates < 1 or rounds < 1:
        sys.exit("AGENTS ≥ 0, UPDATES ≥ 1 and ROUNDS ≥ 1, e.g. cartpole 0 200 25.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 5e5 is not a multiple of the batch: as PureJaxRL
        cfg = PPOConfig.from_purejaxrl(CARTPOLE) if spec == "cartpole" else PPOConfig()
    env = make_env(cfg)

    def init(key):
        return _ppo.init_state(cfg, env, key)

    def step(s):
        return _ppo.update_step(cfg, env, s)

    if agents:
        init, step = jax.vmap(init), jax.vmap(step)
        key = jax.random.split(jax.random.PRNGKey(0), agents)
    else:
        key = jax.random.PRNGKey(0)
    state = jax.jit(init)(key)
    programs, metrics = {}, {}
    for unroll in (1, 2):
        _ppo.EPOCH_UNROLL = unroll  # read while tracing: each program keeps its own

        def run(s):
            return jax.lax.scan(lambda c, _: step(c), s, None, updates)

        t0 = time.perf_counter()
        with unrolled_threefry():
            programs[unroll] = jax.jit(run, compiler_options=compiler_options()).lower(state)
            programs[unroll] = programs[unroll].compile()
        print(f"unroll={unroll}: compile {time.perf_counter() - t0:.2f} s")
        metrics[unroll] = jax.block_until_ready(programs[unroll](state))[1]
    same = all(
        np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
        for a, b in zip(jax.tree.leaves(metrics[1]), jax.tree.leaves(metrics[2]), strict=True)
    )
    print(f"the same metrics bit for bit: {same}")
    times: dict = {1: [], 2: []}
    for _ in range(rounds):
        for unroll, program in programs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(program(state))
            times[unroll].append((time.perf_counter() - t0) / updates * 1e3)
    for unroll, ts in times.items():
        q1, med, q3 = np.percentile(ts, [25, 50, 75])
        print(f"unroll={unroll}: ms/update q1 {q1:.3f}  median {med:.3f}  q3 {q3:.3f}")


if __name__ == "__main__":
    main()
