"""Experiment (not a test): PPO against a uniformly random masked policy on Jumanji envs.

Run:  python examples/beat_random.py --env Snake-v1 Game2048-v1 Minesweeper-v0

For each env: train ``--seeds`` agents in one program with the config below (the same for
every env; set before the measured runs, after a 100k-step probe showed that a convolution
torso with several channels ran at ~5k steps/s here, so the torso is an MLP on the encoded
grid), then play the same ``--episodes`` fresh episodes with every trained agent (sampling
from its policy, as in training) and with a uniformly random policy over the legal actions,
and print the mean episode return of each with a 95 % bootstrap CI and the margin
(trained − random).

The random policy is the trained network with its policy head zeroed: all logits equal, so
it picks uniformly among the actions the env's mask allows — the same masking the agent gets.

Minesweeper uses the per-cell network (one logit per board cell from "same" convolutions)
and a discount of 0.5: at 0.99 the advantage of a click is mostly the luck of later clicks,
and neither network learned anything (README, "Against a uniformly random policy"):

    python examples/beat_random.py --env Minesweeper-v0 --network per_cell \
        --conv-channels 16 16 --mlp-widths 64 --gamma 0.5 --steps 1000000 --seeds 2
"""

import argparse
import json
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo import PPOConfig, evaluate, sweep
from purejaxppo.stats import bootstrap_ci

# One batch layout for every env: 64 envs × 128 steps, 8 minibatches of 1,024, 4 epochs,
# advantage normalisation and gradient clipping (2048's rewards reach the hundreds).
COMMON = dict(
    num_envs=64, num_steps=128, minibatch_size=1024, update_epochs=4, normalize_advantages=True,
    max_grad_norm=0.5, lr=3e-4, ent_coef=0.01, gamma=0.99, gae_lambda=0.95,
)  # fmt: skip
# An MLP on the encoded grid: with several channels the 3×3 convolution torso costs
# 40 ms per 1,024-row minibatch step on this CPU (Toeplitz or im2col alike), 10× the MLP.
NETWORK = dict(conv_channels=(), mlp_widths=(256, 128))


def config(env: str, steps: int, network: dict = NETWORK, gamma: float | None = None) -> PPOConfig:
    batch = COMMON["num_envs"] * COMMON["num_steps"]
    common = COMMON if gamma is None else dict(COMMON, gamma=gamma)
    return PPOConfig(env=env, total_timesteps=max(1, steps // batch) * batch, **common, **network)


def uniform_policy(params):
    """The same network with a zero policy head: uniform over the legal actions."""
    if hasattr(params, "cell_logit"):  # network="per_cell": the 1×1 convolution scores cells
        head = lambda p: (p.cell_logit.weight, p.cell_logit.bias)  # noqa: E731
    else:
        head = lambda p: (p.policy_head.weight, p.policy_head.bias)  # noqa: E731
    return eqx.tree_at(head, params, tuple(jnp.zeros_like(x) for x in head(params)))


def run(
    env: str, steps: int, seeds: int, episodes: int, network: dict = NETWORK, gamma=None
) -> dict:
    cfg = config(env, steps, network, gamma)
    t0 = time.perf_counter()

    def progress(p):  # long runs: a line every 10 updates, so progress is visible
        print(f"  update {int(p.update)}/{cfg.num_updates}: return {float(p.return_mean):.2f}, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)  # fmt: skip

    res = sweep(cfg, seeds, progress=progress, progress_every=10)
    train_s = time.perf_counter() - t0
    key = jax.random.PRNGKey(2**31 - 1)  # the same episodes for every policy
    trained = np.asarray(evaluate(cfg, res.state.params, key, episodes, greedy=False)
                         .episode_return)  # fmt: skip
    rand = np.asarray(evaluate(cfg, uniform_policy(res.state.params), key, episodes,
                               greedy=False).episode_return)  # fmt: skip
    per_seed = trained.mean(-1)
    lo, hi = bootstrap_ci(trained.reshape(-1), np.mean)
    rlo, rhi = bootstrap_ci(rand.reshape(-1), np.mean)
    return dict(
        env=env, steps=cfg.total_timesteps, seeds=seeds, episodes=episodes,
        network=cfg.network, conv_channels=cfg.conv_channels, mlp_widths=cfg.mlp_widths,
        gamma=cfg.gamma,
        train_s=round(train_s, 1), compile_s=round(res.timings.get("compile_s", float("nan")), 1),
        trained_return=float(trained.mean()), trained_ci=[float(lo), float(hi)],
        trained_per_seed=[round(float(x), 2) for x in per_seed],
        random_return=float(rand.mean()), random_ci=[float(rlo), float(rhi)],
        margin=float(trained.mean() - rand.mean()),
        ratio=float(trained.mean() / rand.mean()) if rand.mean() else None,
    )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", nargs="+", default=["Snake-v1", "Game2048-v1", "Minesweeper-v0"])
    p.add_argument("--steps", type=int, default=3_000_000)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--episodes", type=int, default=500)
    p.add_argument("--conv-channels", type=int, nargs="*", default=NETWORK["conv_channels"])
    p.add_argument("--mlp-widths", type=int, nargs="+", default=NETWORK["mlp_widths"])
    p.add_argument("--network", default="shared", help='"shared", or "per_cell" (Minesweeper)')
    p.add_argument("--gamma", type=float, default=None, help="discount (default: COMMON's 0.99)")
    args = p.parse_args()
    net = dict(
        network=args.network,
        conv_channels=tuple(args.conv_channels),
        mlp_widths=tuple(args.mlp_widths),
    )
    for env in args.env:
        result = run(env, args.steps, args.seeds, args.episodes, net, args.gamma)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
