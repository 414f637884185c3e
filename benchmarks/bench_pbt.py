"""The cost of PBT's exploit/explore step at population 64, against the updates it follows.

Run:  pytest benchmarks/bench_pbt.py -s

PureJaxRL's CartPole-v1 config, 64 agents, PBT interval 10 updates (lr and ent_coef tuned).
In one process, after compiling both: rounds alternate between

* ``plain``: `Engine.run` of 40 updates (4 × the interval), and
* ``pbt``: `Engine.run_generations` of 4 generations of 10 updates, each followed by the
  exploit/explore step, on the same states,

and the medians give the step's overhead as a share of the update time. The step alone (the
jitted `PopulationStep` on the 64 agents' states) is timed too, over many calls: its median
divided by 10 updates' median is the overhead without the round-to-round noise of the two
whole programs.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CODE = """
import json, statistics, time, jax, jax.numpy as jnp, numpy as np
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine
from purejaxppo._pbt import PBTCarry, check_pbt_args
from purejaxppo._search import initial_population
from purejaxppo._bench import PUREJAXRL_CARTPOLE
CARTPOLE = PUREJAXRL_CARTPOLE  # PureJaxRL's ppo.py config
cfg = PPOConfig.from_purejaxrl(CARTPOLE)
N, INTERVAL, GENS, ROUNDS = 64, 10, 4, 7
ranges = dict(lr=(1e-5, 1e-2), ent_coef=(0.0, 0.05))
step = check_pbt_args(cfg, N, INTERVAL, "truncation", 0.25, "perturb", (0.8, 1.25), 0.25,
                      1e6, ranges)
keys, hp, pbt_key = initial_population(cfg, N, 0, ranges)
engine = Engine(cfg, mesh=False)
state = engine.init(keys, hp)
carry = PBTCarry(jnp.asarray(pbt_key), jnp.asarray(0, jnp.int32))
t0 = time.perf_counter(); s1, m = engine.run(state, hp, INTERVAL * GENS); jax.block_until_ready(m)
compile_plain = time.perf_counter() - t0
t0 = time.perf_counter()
out = engine.run_generations(state, hp, carry, INTERVAL, GENS, step); jax.block_until_ready(out)
compile_pbt = time.perf_counter() - t0
times = {"plain": [], "pbt": []}
for _ in range(ROUNDS):
    t0 = time.perf_counter(); s1, m = engine.run(state, hp, INTERVAL * GENS)
    jax.block_until_ready(m); times["plain"].append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    out = engine.run_generations(state, hp, carry, INTERVAL, GENS, step)
    jax.block_until_ready(out); times["pbt"].append(time.perf_counter() - t0)
plain, with_steps = (statistics.median(times[k]) for k in ("plain", "pbt"))
# The step alone, on the states after 40 updates and their metrics.
valid = np.ones(N, bool)
alone = jax.jit(lambda s, h, mm, c: step(s, h, mm, c, valid))
mm = jax.tree.map(lambda x: x[:, -INTERVAL:], m)
jax.block_until_ready(alone(s1, hp, mm, carry))
calls = []
for _ in range(50):
    t0 = time.perf_counter(); jax.block_until_ready(alone(s1, hp, mm, carry))
    calls.append(time.perf_counter() - t0)
step_s = statistics.median(calls)
interval_s = plain / GENS
print("RESULT " + json.dumps(dict(
    population=N, interval=INTERVAL, generations=GENS,
    plain_s=round(plain, 3), pbt_s=round(with_steps, 3),
    overhead_whole_programs=round(with_steps / plain - 1, 4),
    step_alone_ms=round(step_s * 1e3, 3), interval_s=round(interval_s, 3),
    overhead_step_alone=round(step_s / interval_s, 5),
    compile_plain_s=round(compile_plain, 1), compile_pbt_s=round(compile_pbt, 1),
    rounds=times)))
"""


def test_exploit_explore_overhead_at_population_64(benchmark):
    report(benchmark, benchmark.pedantic(measure, args=(CODE, 3000), rounds=1, iterations=1))
