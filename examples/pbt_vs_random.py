"""Experiment (not a test): population-based training against random search, same budget.

Run:  python examples/pbt_vs_random.py --population 32 --repeats 5

PureJaxRL's CartPole-v1 config (4 envs × 128 steps, 4 epochs of 4 minibatches, linear lr
annealing) with ``--steps`` env steps per agent. Both procedures draw the same initial
population — lr log-uniform in [1e-5, 1e-1], ent_coef uniform in [0, 0.05], one PRNG key per
agent — from the procedure's seed:

* random search: every agent trains with its draw to the end (`pbt` with an interval
  covering the whole run: no exploit step; the same program as a sweep);
* PBT: every ``--interval`` updates the bottom quarter copies the top quarter and perturbs
  (×0.8 / ×1.25, resample with probability 0.25), within the same ranges.

Same population, same env steps per agent, same keys. Per procedure seed, it records the
final return of the best agent and the population's median (an agent's final return: its
mean episode return over the last ``--interval`` updates, diverged agents counted as the
worst), then prints the mean over the procedure seeds with a 95 % percentile-bootstrap CI,
and PBT − random per seed. Output: one JSON line per procedure and a summary table.
"""

import argparse
import json
import time
import warnings

import numpy as np

from purejaxppo import PPOConfig, pbt
from purejaxppo.stats import bootstrap_ci

CARTPOLE = dict(LR=2.5e-4, NUM_ENVS=4, NUM_STEPS=128, TOTAL_TIMESTEPS=5e5, UPDATE_EPOCHS=4,
                NUM_MINIBATCHES=4, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01,
                VF_COEF=0.5, MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ENV_NAME="CartPole-v1",
                ANNEAL_LR=True)  # fmt: skip


def final_returns(res) -> np.ndarray:
    """Each agent's mean return over the last interval; diverged or episodeless: -inf."""
    return np.asarray(res.fitness[:, -1], np.float64)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--population", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5, help="procedure seeds")
    p.add_argument("--steps", type=float, default=2.5e5, help="env steps per agent")
    p.add_argument("--interval", type=int, default=25, help="updates between PBT steps")
    args = p.parse_args()
    cfg = PPOConfig.from_purejaxrl({**CARTPOLE, "TOTAL_TIMESTEPS": args.steps})
    ranges = dict(lr=(1e-5, 1e-1), ent_coef=(0.0, 0.05))
    rows = []
    for seed in range(args.repeats):
        for method, interval in (("random", cfg.num_updates), ("pbt", args.interval)):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # random search: "no exploit step" is the point
                res = pbt(cfg, args.population, interval=interval, seed=seed, **ranges)
            final = final_returns(res)
            final[~np.isfinite(final)] = 0.0  # CartPole's worst return is > 0: counts as worst
            best = res.best()
            row = dict(method=method, seed=seed, best=float(final.max()),
                       median=float(np.median(final)), best_lr_end=float(best.config.lr),
                       seconds=round(time.perf_counter() - t0, 1))  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\nCartPole-v1, population {args.population}, {int(args.steps):,} steps per agent, "
          f"PBT interval {args.interval} updates, {args.repeats} procedure seeds")  # fmt: skip
    print(f"{'':8s} {'best agent (95% CI)':>26s} {'population median (95% CI)':>30s}")
    per = {m: {k: np.array([r[k] for r in rows if r["method"] == m]) for k in ("best", "median")}
           for m in ("random", "pbt")}  # fmt: skip
    for m in ("random", "pbt"):
        cells = []
        for k in ("best", "median"):
            x = per[m][k]
            lo, hi = bootstrap_ci(x, np.mean) if len(x) > 1 else (x[0], x[0])
            cells.append(f"{x.mean():7.1f} [{lo:6.1f}, {hi:6.1f}]")
        print(f"{m:8s} {cells[0]:>26s} {cells[1]:>30s}")
    for k in ("best", "median"):
        d = per["pbt"][k] - per["random"][k]
        lo, hi = bootstrap_ci(d, np.mean) if len(d) > 1 else (d[0], d[0])
        wins = int((d > 0).sum())
        print(f"PBT - random, {k}: {d.mean():+.1f} [{lo:+.1f}, {hi:+.1f}], PBT ahead in "
              f"{wins}/{len(d)} seeds")  # fmt: skip


if __name__ == "__main__":
    main()
