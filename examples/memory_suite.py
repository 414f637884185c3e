"""Experiment (not a test): the GRU network against the feedforward one on a partially
observed suite task, XLand-MiniGrid's MiniGrid-MemoryS8 (needs ``pip install -e
".[xminigrid]"``).

Run:  python examples/memory_suite.py --network gru ff --steps 5000000

The agent sees an object at the start, walks a corridor and must pick the matching one of
two at its end; its 7×7 view never holds both, so a policy without memory is at chance
(success 0.5). For each network: train ``--seeds`` agents in one program (the Empty-8x8
config of tests/test_suites.py: 64 envs × 128 steps, 4 epochs of minibatches of 1,024,
advantage normalisation, gradient clip 0.5, lr 3e-4, entropy 0.01; the grid flattened into
an MLP of 256, then a GRU of 128 with a head layer of 128, or an MLP of 256-128), then play
``--episodes`` fresh episodes with each agent, greedy and sampled, and print one JSON line:
seconds (compile included), each seed's return over its last 5 updates and its success.
"""

import argparse
import json
import time

import jax
import numpy as np

from purejaxppo import PPOConfig, evaluate, sweep

NETWORKS = {
    "gru": dict(network="gru", mlp_widths=(256,), hidden_size=128, head_widths=(128,)),
    "ff": dict(mlp_widths=(256, 128)),
}
COMMON = dict(
    num_envs=64, num_steps=128, minibatch_size=1024, update_epochs=4, normalize_advantages=True,
    max_grad_norm=0.5, lr=3e-4, ent_coef=0.01, gamma=0.99, gae_lambda=0.95, conv_channels=(),
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="xminigrid/MiniGrid-MemoryS8")
    parser.add_argument("--network", nargs="+", choices=list(NETWORKS), default=["gru", "ff"])
    parser.add_argument("--steps", type=int, default=5_000_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    batch = COMMON["num_envs"] * COMMON["num_steps"]
    for net in args.network:
        cfg = PPOConfig(
            env=args.env, total_timesteps=max(1, args.steps // batch) * batch,
            **COMMON, **NETWORKS[net],
        )  # fmt: skip
        start = time.perf_counter()
        res = sweep(cfg, args.seeds)
        jax.block_until_ready(res.state.params)
        seconds = time.perf_counter() - start
        key = jax.random.PRNGKey(123)
        greedy = evaluate(cfg, res.state.params, key, args.episodes, greedy=True)
        sampled = evaluate(cfg, res.state.params, key, args.episodes, greedy=False)
        returns = np.nanmean(np.asarray(res.metrics.episode_return)[..., -5:], axis=-1)
        row = dict(
            env=args.env, network=net, steps=cfg.total_timesteps, seconds=round(seconds, 1),
            last_return=returns.round(3).ravel().tolist(),
            greedy_success=np.asarray(greedy.success).mean(-1).ravel().tolist(),
            sampled_success=np.asarray(sampled.success).mean(-1).ravel().tolist(),
        )  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
