"""Brax hopper with PureJaxRL's own ``ppo_continuous_action.py`` config, on this CPU.

    python examples/brax_hopper.py [--updates 100] [--run-dir runs/hopper] [--resume]

`PPOConfig.from_purejaxrl` maps PureJaxRL's defaults (2048 envs × 10 steps, 4 epochs of 32
minibatches, lr 3e-4, 256-256 tanh actor and critic, NORMALIZE_ENV, positional backend) with
TOTAL_TIMESTEPS set by ``--updates``. The run is checkpointed in ``--run-dir`` (Ctrl-C or
SIGTERM stop at a chunk; ``--resume`` continues). Prints the return curve (mean over the
update's finished episodes) every tenth of the run. An experiment, not a test
(docs/benchmarks.md).
"""

import argparse
import signal
import time

import numpy as np

from purejaxppo import PPOConfig, resume_sweep, sweep

PUREJAXRL = {
    "LR": 3e-4, "NUM_ENVS": 2048, "NUM_STEPS": 10, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 32,
    "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.0, "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "hopper", "ANNEAL_LR": False,
    "NORMALIZE_ENV": True, "BACKEND": "positional",
}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=100)
    p.add_argument("--run-dir", default="runs/brax-hopper")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()
    batch = PUREJAXRL["NUM_ENVS"] * PUREJAXRL["NUM_STEPS"]
    cfg = PPOConfig.from_purejaxrl({**PUREJAXRL, "TOTAL_TIMESTEPS": batch * args.updates})
    stop = []  # SIGTERM/SIGINT: stop after the running chunk, with its checkpoint
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(1))
    t0 = time.perf_counter()
    if args.resume:
        res = resume_sweep(args.run_dir, should_stop=lambda: bool(stop))
    else:
        res = sweep(cfg, seeds=[0], run_dir=args.run_dir, checkpoint_every="auto",
                    should_stop=lambda: bool(stop))  # fmt: skip
    total = time.perf_counter() - t0
    ret = np.asarray(res.metrics.episode_return)[0]
    done = int(np.isfinite(ret).nonzero()[0].max()) + 1 if np.isfinite(ret).any() else 0
    print(f"{'finished' if res.finished else 'stopped'}: {done} of {cfg.num_updates} updates; "
          f"compile {res.timings['compile_s']:.1f} s, run {res.timings['run_s']:.1f} s, "
          f"total {total:.1f} s")  # fmt: skip
    print("update | env steps | mean episode return (updates with finished episodes)")
    for u in range(
        max(1, cfg.num_updates // 10) - 1, cfg.num_updates, max(1, cfg.num_updates // 10)
    ):
        window = ret[max(0, u - 4) : u + 1]
        if np.isfinite(window).any():
            print(f"{u + 1:6d} | {(u + 1) * batch:10,d} | {np.nanmean(window):8.1f}")


if __name__ == "__main__":
    main()
