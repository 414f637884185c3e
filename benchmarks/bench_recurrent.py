"""What memory costs: seconds per update of the GRU network against the MLP of the same width.

Run:  pytest benchmarks/bench_recurrent.py -s

`test_gru_long_rollouts_in_pieces` is the second config: 512-step rollouts, whole or cut
into pieces (``sequence_length``), against the feedforward network.

One config (random 10×10 mazes seen through the 5×5 local window, 16 envs × 128 steps,
4 epochs of 4 minibatches = 4 env sequences each), two networks of width 64: ``gru`` (a
Linear(64) encoder, then a GRU of 64, then the heads) and ``shared`` (MLP 64-64, then the
heads). For 1 and 16 agents, both engines are compiled and warmed up, then timed for 3
updates per round, 5 alternating rounds in one process; medians are compared.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)


@pytest.mark.parametrize("agents", [1, 16])
def test_gru_against_mlp_seconds_per_update(benchmark, agents):
    code = f"""
import json, statistics, time, jax
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
base = PPOConfig(maze="random", maze_view="local", maze_window=5, conv_channels=(),
                 num_envs=16, num_steps=128, minibatch_size=512, update_epochs=4)
configs = {{"gru": base.replace(network="gru", hidden_size=64, mlp_widths=(64,)),
           "mlp": base.replace(mlp_widths=(64, 64))}}
engines = {{k: Engine(c, mesh=False) for k, c in configs.items()}}
# Each engine's own hyperparameters: their static fields choose the program (the engine
# refuses another config's since this benchmark once timed the MLP twice that way).
hps = {{k: agent_inputs(c, {{}}, list(range({agents})))[:2] for k, c in configs.items()}}
states, compile_s = {{}}, {{}}
for k, e in engines.items():  # compile and warm up
    keys, hp = hps[k]
    t0 = time.perf_counter()
    states[k] = e.init(keys, hp)
    states[k], m = e.run(states[k], hp, 3)
    jax.block_until_ready(m)
    compile_s[k] = time.perf_counter() - t0
times = {{k: [] for k in engines}}
for _ in range(5):
    for k, e in engines.items():
        t0 = time.perf_counter()
        states[k], m = e.run(states[k], hps[k][1], 3)
        jax.block_until_ready(m)
        times[k].append((time.perf_counter() - t0) / 3)
gru, mlp = statistics.median(times["gru"]), statistics.median(times["mlp"])
print("RESULT " + json.dumps(dict(agents={agents}, update_s_gru=gru, update_s_mlp=mlp,
                                  ratio=gru / mlp, first_call_s=compile_s, rounds=times)))
"""
    report(benchmark, benchmark.pedantic(measure, args=(code, 1800), rounds=1, iterations=1))


def test_gru_long_rollouts_in_pieces(benchmark):
    """Issue 39's recurrent case: one agent, 16 envs × 512 steps on the medium maze seen
    through a 3×3 window, 10 epochs × 8 minibatches of 1,024, GRU of 128 against the default
    feedforward network; the GRU learning from whole 512-step rollouts and from pieces of
    ``sequence_length`` steps. Milliseconds per update (3 updates per round, 3 rounds
    alternating, medians)."""
    code = """
import json, statistics, time, jax
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
base = PPOConfig(maze_view="local", maze_window=3, num_envs=16, num_steps=512,
                 minibatch_size=1024, update_epochs=10, total_timesteps=16 * 512 * 100)
gru = base.replace(network="gru", hidden_size=128)
configs = {"feedforward": base, "gru_whole": gru}
configs.update({f"gru_pieces_{n}": gru.replace(sequence_length=n) for n in (4, 16)})
engines = {k: Engine(c, mesh=False) for k, c in configs.items()}
hps = {k: agent_inputs(c, {}, [0])[:2] for k, c in configs.items()}
states = {}
for k, e in engines.items():  # compile and warm up, at the timed length (3 updates)
    states[k] = e.init(*hps[k])
    states[k], m = e.run(states[k], hps[k][1], 3)
    jax.block_until_ready(m)
times = {k: [] for k in engines}
for _ in range(3):
    for k, e in engines.items():
        t0 = time.perf_counter()
        states[k], m = e.run(states[k], hps[k][1], 3)
        jax.block_until_ready(m)
        times[k].append((time.perf_counter() - t0) / 3 * 1000)
ff = statistics.median(times["feedforward"])
print("RESULT " + json.dumps({
    "ms_per_update": {k: statistics.median(v) for k, v in times.items()},
    "over_feedforward": {k: statistics.median(v) / ff for k, v in times.items()},
    "compile_s": {k: e.compile_seconds for k, e in engines.items()}, "rounds": times}))
"""
    report(benchmark, benchmark.pedantic(measure, args=(code, 3000), rounds=1, iterations=1))
