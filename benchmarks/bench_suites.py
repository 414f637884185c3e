"""The env suites by name: steps/s of 1 and 16 agents (Navix's and XLand-MiniGrid's
Empty-8x8, Craftax-Classic-Symbolic).

Run:  pytest benchmarks/bench_suites.py -s

Each case runs in a fresh process, the same config for all: ``tests/test_suites.py``'s for
the solved Empty-8x8 (64 envs × 128 steps, 4 epochs of 8 minibatches, an MLP of 256-128 on
the flattened observation), timed by `time_updates` (one-update programs, compiled and
warmed up first; the default layout: on CPU, one device per core). Skipped without the
suite's extra.
"""

import importlib.util

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

SUITES = {
    "craftax": "craftax/Craftax-Classic-Symbolic-v1",
    "navix": "navix/Navix-Empty-8x8-v0",
    "xminigrid": "xminigrid/MiniGrid-Empty-8x8",
}
CONFIG = dict(
    num_envs=64, num_steps=128, minibatch_size=1024, update_epochs=4, normalize_advantages=True,
    max_grad_norm=0.5, lr=3e-4, ent_coef=0.01, conv_channels=(), mlp_widths=(256, 128),
)  # fmt: skip


@pytest.mark.parametrize("agents", [1, 16])
@pytest.mark.parametrize("suite", list(SUITES))
def test_suite_steps_per_second(benchmark, suite, agents):
    if importlib.util.find_spec(suite) is None:
        pytest.skip(f"pip install '.[{suite}]'")
    code = f"""
import json
from purejaxppo import PPOConfig
from purejaxppo._bench import time_updates
cfg = PPOConfig(env={SUITES[suite]!r}, total_timesteps=64 * 128 * 10, **{CONFIG!r})
row = time_updates(cfg, {agents}, updates=3)
print("RESULT " + json.dumps(dict(env=cfg.env, **row._asdict())))
"""
    report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
