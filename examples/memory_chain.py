"""Experiment (not a test): memory on bsuite's MemoryChain, GRU against feedforward.

Run:  python examples/memory_chain.py --memory-length 5 --steps 204800

MemoryChain (gymnax) shows a context bit at an episode's first step and asks for it at the
last, ``memory_length`` steps later: +1 for the right answer, -1 for the wrong one. A
memoryless policy is at chance (expected return 0). Trains 4 seeds of each network in one
program per network (the same config otherwise: a Linear(64) encoder, 64 envs × 32 steps,
4 epochs of 4 minibatches of 8 env sequences, lr 1e-3) and plays 1,000 fresh greedy
episodes per agent. ``--memory-length 5 --steps 204800`` is the slow test's config.
"""

import argparse
import json
import time

import jax
import numpy as np

from purejaxppo import PPOConfig, evaluate, sweep


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--memory-length", type=int, default=5)
    p.add_argument("--steps", type=int, default=204_800)
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args()
    common = dict(
        env="MemoryChain-bsuite", memory_length=args.memory_length, conv_channels=(),
        mlp_widths=(64,), num_envs=64, num_steps=32, minibatch_size=512, update_epochs=4,
        lr=1e-3, total_timesteps=args.steps // 2048 * 2048,
    )  # fmt: skip
    for network, extra in (("gru", {"hidden_size": 64}), ("shared", {})):
        cfg = PPOConfig(network=network, **extra, **common)
        t0 = time.perf_counter()
        res = sweep(cfg, seeds=args.seeds)
        train_s = time.perf_counter() - t0
        ev = evaluate(cfg, res.state.params, jax.random.PRNGKey(7), 1000)
        returns = np.nanmean(np.asarray(res.metrics.episode_return)[:, -10:], axis=1)
        print(json.dumps(dict(
            network=network, memory_length=args.memory_length, steps=cfg.total_timesteps,
            train_s=round(train_s, 1), training_return_last10=returns.round(3).tolist(),
            greedy_return_1000=np.asarray(ev.episode_return.mean(-1)).round(3).tolist(),
        )))  # fmt: skip


if __name__ == "__main__":
    main()
