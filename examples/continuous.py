"""Continuous control, several seeds in one program: gymnax Pendulum-v1 or Brax's
inverted pendulum, each 2,048,000 steps per seed by default.

    python examples/continuous.py pendulum [--seeds 4] [--updates 500]
    python examples/continuous.py inverted_pendulum [--seeds 2]     # needs .[brax]

``pendulum`` (rl-zoo's γ = 0.95 region for Pendulum; PureJaxRL's separate 64-64 tanh
network, gradient clip and LR annealing): 16 envs × 256 steps per update, 10 epochs of 8
minibatches of 512, lr 1e-3, no entropy bonus. ``inverted_pendulum`` (PureJaxRL's continuous
algorithm: 256-256 tanh, advantage normalisation, value clipping, Adam eps 1e-5, γ 0.99):
64 envs × 64 steps, 4 epochs of 8 minibatches of 512, lr 3e-4. Both: a diagonal Gaussian,
observation and reward normalisation on (the default for continuous envs). Prints each
seed's mean episode return over the last 10 updates and the curve every tenth of the run
(figures: docs/benchmarks.md).
"""

import argparse
import time

import numpy as np

from purejaxppo import PPOConfig, sweep
from purejaxppo.stats import final_scores

CONFIG = PPOConfig(
    env="Pendulum-v1", network="separate", conv_channels=(), mlp_widths=(64, 64),
    activation="tanh", num_envs=16, num_steps=256, minibatch_size=512, update_epochs=10,
    gamma=0.95, gae_lambda=0.95, lr=1e-3, anneal_lr=True, ent_coef=0.0, clip_eps=0.2,
    max_grad_norm=0.5, total_timesteps=4096 * 500,
)  # fmt: skip
#: Changes to CONFIG per preset (built when chosen: a Brax config needs the brax extra).
PRESETS = {
    "pendulum": {},
    "inverted_pendulum": dict(
        env="brax/inverted_pendulum", mlp_widths=(256, 256), num_envs=64, num_steps=64,
        update_epochs=4, gamma=0.99, lr=3e-4, anneal_lr=False, normalize_advantages=True,
        clip_value=True, adam_eps=1e-5, vf_coef=0.25,
    ),
}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("preset", choices=sorted(PRESETS))
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--updates", type=int, default=500)
    args = p.parse_args()
    base = CONFIG.replace(**PRESETS[args.preset])
    cfg = base.replace(total_timesteps=base.batch_size * args.updates)
    t0 = time.perf_counter()
    res = sweep(cfg, seeds=args.seeds)
    total = time.perf_counter() - t0
    ret = np.asarray(res.metrics.episode_return)
    steps = args.seeds * cfg.total_timesteps
    print(f"{args.seeds} seeds × {cfg.total_timesteps:,} steps: compile "
          f"{res.timings['compile_s']:.1f} s, run {res.timings['run_s']:.1f} s "
          f"({steps / res.timings['run_s']:,.0f} steps/s), total {total:.1f} s")  # fmt: skip
    print("last 10 updates, per seed:", [round(float(x), 1) for x in final_scores(ret, 10)])
    print("update | env steps | mean return of the 10 updates up to it, per seed")
    every = max(1, cfg.num_updates // 10)
    for u in range(every - 1, cfg.num_updates, every):
        window = np.nanmean(ret[:, max(0, u - 9) : u + 1], -1)
        per_seed = [round(float(x), 1) for x in window]
        print(f"{u + 1:6d} | {(u + 1) * cfg.batch_size:9,d} | {per_seed}")


if __name__ == "__main__":
    main()
