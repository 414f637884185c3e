"""Side by side with PureJaxRL's own scripts: whole-process time and final return, same jax.

Run:  PUREJAXRL_DIR=/path/to/purejaxrl pytest benchmarks/bench_vs_purejaxrl.py -s

``PUREJAXRL_DIR`` is a checkout of https://github.com/luchris429/purejaxrl (the directory
holding ``purejaxrl/ppo_continuous_action.py``). Its code needs ``flax`` and ``distrax`` in
this venv (``pip install flax distrax``); without the checkout or those packages every case
is skipped, saying which is missing. ``BENCH_ROUNDS`` (default 3) sets the rounds;
``BENCH_UPDATES`` shortens every case to that many updates.

Each round runs PureJaxRL, then ours, each in a fresh process (cold caches, nothing shared),
and times the whole process (interpreter start to exit) as well as its compile and run
phases; the ratio is ours / theirs per round. Their side is ``jax.jit(jax.vmap(train))`` of
their own ``make_train`` over the seeds, as their README shows. Ours is
``PPOConfig.from_purejaxrl`` of the same dict, placed as `sweep` places the agents.

Their code runs unmodified, through three documented adapters (`THEIRS`), for API drift
only: ``wrappers.py`` imports ``navix`` at the top (a stand-in module when navix is not
installed; only their Navix wrapper uses it); ``ppo_continuous_action.py`` builds every env
with ``BraxGymnaxWrapper(ENV_NAME)`` (for a gymnax name it gets the gymnax env instead,
its 1.0 step output of terminated and truncated folded back into their one ``done``, as
older gymnax gave); and its ``ClipAction`` clips to ±1 (for a gymnax env, to the env's own
action bounds, which is what their code's own TODO asks for: Pendulum's torque is ±2).
Both sides then normalise observations and rewards and treat a time limit as their code
does (theirs as a termination, ours as a bootstrapped truncation).
"""

import json
import os
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(7200)

#: ``ppo_continuous_action.py``'s config on gymnax Pendulum-v1, as in the issue's table.
PENDULUM = dict(
    LR=3e-4, NUM_ENVS=64, NUM_STEPS=64, TOTAL_TIMESTEPS=1e6, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=32, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.0, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ENV_NAME="Pendulum-v1", ANNEAL_LR=False,
    NORMALIZE_ENV=True,
)  # fmt: skip

CASES = {
    "pendulum-2": ("ppo_continuous_action", PENDULUM, 2),
    "pendulum-16": ("ppo_continuous_action", PENDULUM, 16),
}

#: Their side, run in a fresh process: the adapters (module docstring), then their
#: ``make_train`` under ``jax.jit(jax.vmap(...))``.
THEIRS = """
import json, sys, time, types
sys.path.insert(0, {src!r})
try:
    import navix  # noqa: F401
except ImportError:  # adapter 1: their wrappers.py imports navix for one wrapper
    sys.modules["navix"] = types.ModuleType("navix")
import jax, numpy as np
import {module} as m

def gymnax_env(name, backend="positional"):  # adapter 2: a gymnax name gets the gymnax env
    import gymnax
    env, params = gymnax.make(name)

    class Env:
        action_size = env.action_space(params).shape[0]

        def reset(self, key, p=None):
            return env.reset(key, params)

        def step(self, key, state, action, p=None):
            out = env.step(key, state, action, params)
            if len(out) == 6:  # gymnax >= 1.0: terminated and truncated apart
                obs, state, reward, terminated, truncated, info = out
                return obs, state, reward, terminated | truncated, info
            return out

        def observation_space(self, p):
            return env.observation_space(params)

        def action_space(self, p):
            return env.action_space(params)

    return Env()

if hasattr(m, "BraxGymnaxWrapper") and {gymnax!r}:
    m.BraxGymnaxWrapper = gymnax_env
    clip = m.ClipAction

    def bounded_clip(env):  # adapter 3: clip to the env's own action bounds
        space = env.action_space(None)
        return clip(env, low=float(np.min(space.low)), high=float(np.max(space.high)))

    m.ClipAction = bounded_clip

config = {config!r}
train = jax.jit(jax.vmap(m.make_train(config)))
keys = jax.random.split(jax.random.PRNGKey(0), {seeds})
t0 = time.perf_counter()
compiled = train.lower(keys).compile()
t1 = time.perf_counter()
out = compiled(keys)
jax.block_until_ready(out)
t2 = time.perf_counter()
info = out["metrics"]
ret = np.asarray(info["returned_episode_returns"], np.float64)
done = np.asarray(info["returned_episode"], np.float64)
tail = max(1, ret.shape[1] // 20)  # the last 5 % of updates
axes = tuple(range(1, ret.ndim))
last = (ret[:, -tail:] * done[:, -tail:]).sum(axes) / done[:, -tail:].sum(axes)
print("RESULT " + json.dumps(dict(compile_s=t1 - t0, run_s=t2 - t1, returns=last.tolist())))
"""

#: Our side, run in a fresh process: the same dict, the agents placed as `sweep` places them.
OURS = """
import json, time, warnings
import jax, numpy as np
from purejaxppo import PPOConfig
from purejaxppo._engine import Engine, agent_inputs, mesh_for
warnings.simplefilter("ignore")
cfg = PPOConfig.from_purejaxrl({config!r})
agents = Engine(cfg, mesh=mesh_for(None, {seeds}))
keys, hp, _ = agent_inputs(cfg, {{}}, list(range({seeds})))
t0 = time.perf_counter()
state, metrics = agents(keys, hp)
jax.block_until_ready(metrics)
total = time.perf_counter() - t0
ret = agents.strip(metrics, {seeds}).episode_return
tail = max(1, ret.shape[1] // 20)
print("RESULT " + json.dumps(dict(compile_s=agents.compile_seconds,
    run_s=total - agents.compile_seconds, returns=np.nanmean(ret[:, -tail:], 1).tolist())))
"""


def purejaxrl_source() -> Path:
    """The ``purejaxrl`` package directory of ``$PUREJAXRL_DIR``, or a pytest skip saying
    what is missing."""
    root = os.environ.get("PUREJAXRL_DIR")
    if not root:
        pytest.skip("set PUREJAXRL_DIR to a checkout of luchris429/purejaxrl to compare")
    src = Path(root) / "purejaxrl"
    if not (src / "ppo_continuous_action.py").is_file():
        pytest.skip(f"PUREJAXRL_DIR={root}: no purejaxrl/ppo_continuous_action.py there")
    missing = [name for name in ("flax", "distrax", "gymnax") if find_spec(name) is None]
    if missing:
        pytest.skip(f"PureJaxRL's code needs {', '.join(missing)}: pip install {' '.join(missing)}")
    return src


def whole_process(code: str, timeout: int = 3600) -> dict:
    """Run ``code`` in a fresh interpreter; its RESULT line plus the whole process's seconds."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    seconds = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(out.stderr[-4000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return {**json.loads(line[len("RESULT ") :]), "process_s": seconds}


@pytest.mark.parametrize("case", list(CASES))
def test_side_by_side(benchmark, case):
    src = purejaxrl_source()
    module, config, seeds = CASES[case]
    config = dict(config)
    if os.environ.get("BENCH_UPDATES"):
        config["TOTAL_TIMESTEPS"] = (
            int(os.environ["BENCH_UPDATES"]) * config["NUM_ENVS"] * config["NUM_STEPS"]
        )
    gymnax = "/" not in config["ENV_NAME"] and config["ENV_NAME"][0].isupper()
    theirs_code = THEIRS.format(
        src=str(src), module=module, gymnax=gymnax, config=config, seeds=seeds
    )
    ours_code = OURS.format(config=config, seeds=seeds)
    rounds = []

    def measure():
        for _ in range(int(os.environ.get("BENCH_ROUNDS", "3"))):
            theirs, ours = whole_process(theirs_code), whole_process(ours_code)
            ratio = ours["process_s"] / theirs["process_s"]
            rounds.append(dict(theirs=theirs, ours=ours, ratio=ratio))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    ratios = [r["ratio"] for r in rounds]
    summary = dict(
        case=case, seeds=seeds, updates=int(config["TOTAL_TIMESTEPS"])
        // (config["NUM_ENVS"] * config["NUM_STEPS"]), jax=__import__("jax").__version__,
        ratio_min=min(ratios), ratio_median=float(np.median(ratios)), ratio_max=max(ratios),
        rounds=rounds,
    )  # fmt: skip
    benchmark.extra_info.update(summary)
    print("\n" + json.dumps(summary, indent=1))
    if summary["updates"] >= 100:  # a full-length run: both sides finished episodes late on
        for r in rounds:
            assert np.all(np.isfinite(r["theirs"]["returns"] + r["ours"]["returns"]))
