"""A chunked run with its chunk programs compiled in the background (`Engine.compile_ahead`)
against the same run compiling them in turn: whole `sweep` calls in fresh processes,
alternating, the medians compared.

Run:  pytest benchmarks/bench_compile_ahead.py -s

The run: one agent of the medium maze (the default config) in chunks of 30 of its 100 updates
(a tail of 10: three programs besides init), or Craftax-Classic at a small config where the
``craftax`` extra is installed (`CASES`). Compile-ahead is on by default on an accelerator
only; here it is switched on and off (`AHEAD_ON_CPU`) so the CPU measures it too, where its
compiles share the cores with the run.
"""

import statistics

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CASES = {
    "maze": "PPOConfig()",
    "craftax": (
        'PPOConfig(env="craftax/Craftax-Classic-Symbolic-v1", network="gru", hidden_size=32, '
        "conv_channels=(), mlp_widths=(32,), num_envs=8, num_steps=16, minibatch_size=64, "
        "update_epochs=1, total_timesteps=100 * 128)"
    ),
}

CODE = """
import json, tempfile, time
t0 = time.perf_counter()
import jax
from purejaxppo import PPOConfig, sweep
from purejaxppo._engine import _core
_core.AHEAD_ON_CPU = {ahead}
res = sweep({cfg}, [0], run_dir=tempfile.mkdtemp(), checkpoint_every=30, mesh=False)
jax.block_until_ready(res.metrics)
print("RESULT " + json.dumps(dict(
    whole_s=time.perf_counter() - t0, compile_s=res.timings["compile_s"],
    run_s=res.timings["run_s"], backend=jax.default_backend())))
"""


@pytest.mark.parametrize("case", list(CASES))
def test_compile_ahead_against_in_turn(benchmark, case):
    if case == "craftax":
        pytest.importorskip("craftax", reason="needs the craftax extra")

    def rounds(n=3):
        times = {"ahead": [], "in_turn": []}
        for _ in range(n):
            for name, ahead in (("in_turn", False), ("ahead", True)):
                times[name].append(measure(CODE.format(ahead=ahead, cfg=CASES[case])))
        return times

    times = benchmark.pedantic(rounds, rounds=1, iterations=1)
    med = {k: statistics.median(r["whole_s"] for r in v) for k, v in times.items()}
    result = report(
        benchmark,
        dict(
            case=case,
            whole_s_median=med,
            ratio=med["ahead"] / med["in_turn"],
            rounds={k: [(r["whole_s"], r["compile_s"]) for r in v] for k, v in times.items()},
        ),
    )
    assert result["ratio"] > 0
