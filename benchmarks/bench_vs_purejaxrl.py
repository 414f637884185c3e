"""Side by side with PureJaxRL's own scripts: whole-process time and final return, same jax.

Run:  PUREJAXRL_DIR=/path/to/purejaxrl pytest benchmarks/bench_vs_purejaxrl.py -s

``PUREJAXRL_DIR`` is a checkout of https://github.com/luchris429/purejaxrl (the directory
holding ``purejaxrl/ppo_continuous_action.py``). Its code needs ``flax`` and ``distrax`` in
this venv (``pip install flax distrax``) and gymnax, and the Brax cases brax
(``pip install -e ".[brax]"``); without the checkout or those packages a case is skipped,
saying which is missing. On a TPU machine: docs/benchmarks.md, "On a TPU".
``BENCH_ROUNDS`` (default 3) sets the rounds; ``BENCH_SIDE=theirs`` or ``ours`` runs one side
alone (for a device call too short for both); ``BENCH_SEEDS`` replaces a case's seed count
(more seeds, narrower CIs, where the device has room) and ``BENCH_FIRST_SEED`` (default 0)
draws another set (their key ``PRNGKey(first)``, our seeds ``first, first + 1, ...``);
``BENCH_UPDATES`` shortens every case to that many updates, e.g. the Brax cases:

    BENCH_UPDATES=20 BENCH_ROUNDS=2 PUREJAXRL_DIR=... \\
        pytest benchmarks/bench_vs_purejaxrl.py -s -k "hopper or inverted"

Cases (`CASES`): gymnax Pendulum-v1 at 2 and 16 seeds and MountainCarContinuous-v0 at 2, on
the Pendulum config below; Brax inverted_pendulum and hopper on their script's own Brax
config (2,048 envs × 10 steps); ``ppo.py`` on its own CartPole config at 16 and 256 seeds ×
500k steps and 2,048 seeds × 100k steps; the same script on ``examples/brax_minatar.ipynb``'s
config (SpaceInvaders- and Breakout-MinAtar, 10M steps) at 16 seeds; ``ppo_rnn.py`` on its
own CartPole config at 16 seeds.

Each round runs PureJaxRL, then ours, each in a fresh process (cold caches, nothing shared),
and times the whole process (interpreter start to exit) as well as its compile and run
phases; the ratio is ours / theirs per round. Their side is ``jax.jit(jax.vmap(train))`` of
their own ``make_train`` over the seeds, as their README shows. Ours is
``PPOConfig.from_purejaxrl`` of the same dict, placed as `sweep` places the agents.

Their code runs unmodified, through six documented adapters (`THEIRS`), for API drift
only: ``wrappers.py`` imports ``navix`` and ``brax`` at the top (stand-in modules when they
are not installed; only their Navix and Brax wrappers use them);
``ppo_continuous_action.py`` builds every env with ``BraxGymnaxWrapper(ENV_NAME)`` (for a
gymnax name it gets the gymnax env instead,
its 1.0 step output of terminated and truncated folded back into their one ``done``, as
older gymnax gave); its ``ClipAction`` clips to ±1 (for a gymnax env, to the env's own
action bounds, which is what their code's own TODO asks for: Pendulum's torque is ±2); and
``ppo_rnn.py``'s ``gymnax.make`` gets the same folded step (adapter 4), and its
``nn.GRUCell()`` and ``GRUCell.initialize_carry(key, (batch,), size)`` the current flax
spelling, ``GRUCell(features=128)`` and zeros of (batch, 128), which is what the old ones
gave (adapter 5). The folded step also trims gymnax 1.0's ``info`` to older gymnax's
``{"discount"}`` (adapter 6): 1.0 adds each step's final observation, which their metrics
stack for every step (MinAtar at 16 seeds asked for 361 GB of temporaries on a 16 GB TPU;
CartPole's four floats cost little either way, and ran without it before 2026-12-06).
Both sides then normalise observations and rewards and treat a time limit as their code
does (theirs as a termination, ours as a bootstrapped truncation); the ``-timelimit-`` cases
run ours with ``bootstrap_truncation=False``, their treatment (issue 59's ablation; their
side is the same as the case without the suffix).
"""

import json
import os
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from purejaxppo._bench import PUREJAXRL_CARTPOLE

pytestmark = pytest.mark.timeout(7200)

#: ``ppo_continuous_action.py``'s config on gymnax Pendulum-v1, as in the issue's table.
PENDULUM = dict(
    LR=3e-4, NUM_ENVS=64, NUM_STEPS=64, TOTAL_TIMESTEPS=1e6, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=32, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.0, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ENV_NAME="Pendulum-v1", ANNEAL_LR=False,
    NORMALIZE_ENV=True,
)  # fmt: skip

#: Its own ``__main__`` config (Brax hopper, the positional pipeline), without DEBUG's prints.
BRAX = dict(
    LR=3e-4, NUM_ENVS=2048, NUM_STEPS=10, TOTAL_TIMESTEPS=5e7, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=32, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.0, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ENV_NAME="hopper", ANNEAL_LR=False,
    NORMALIZE_ENV=True,
)  # fmt: skip


#: ``ppo_rnn.py``'s own config (CartPole, a GRU of 128); it has no ACTIVATION key, which
#: `PPOConfig.from_purejaxrl` needs: "relu" is what its network uses (their code ignores it).
RNN = dict(
    LR=2.5e-4, NUM_ENVS=4, NUM_STEPS=128, TOTAL_TIMESTEPS=5e5, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=4, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ENV_NAME="CartPole-v1", ANNEAL_LR=True, ACTIVATION="relu",
)  # fmt: skip

#: Our side of ``ppo_rnn.py``: its Dense(128)-relu embedding as our torso, its GRU of 128,
#: and its heads' Dense(128)-relu layers (``head_widths``).
OUR_GRU = dict(
    network="gru", hidden_size=128, mlp_widths=(128,), conv_channels=(), head_widths=(128,)
)


#: ``ppo.py``'s own config (CartPole-v1), as `purejaxppo bench --suite scaling` runs it.
CARTPOLE = dict(PUREJAXRL_CARTPOLE)

#: ``examples/brax_minatar.ipynb``'s config. That notebook's ``make_train`` is ``ppo.py``'s
#: (the same code but for line breaks, and gymnax's own copies of the two wrappers), so the
#: cases run ``ppo.py`` with it.
MINATAR = dict(
    LR=5e-3, NUM_ENVS=64, NUM_STEPS=128, TOTAL_TIMESTEPS=1e7, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=8, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ACTIVATION="relu", ENV_NAME="SpaceInvaders-MinAtar", ANNEAL_LR=True,
)  # fmt: skip


class Case(NamedTuple):
    module: str  # their script
    config: dict  # its config dict, given to both sides
    seeds: int
    gymnax: bool  # a gymnax env (adapters 2 and 3), not one of Brax's
    ours: dict | None = None  # `PPOConfig` fields that replace from_purejaxrl's on our side


#: The cases; the Brax ones are long at full length (50M steps): ``BENCH_UPDATES`` shortens.
CASES = {
    "pendulum-2": Case("ppo_continuous_action", PENDULUM, 2, gymnax=True),
    "pendulum-16": Case("ppo_continuous_action", PENDULUM, 16, gymnax=True),
    "mountaincar-2": Case(
        "ppo_continuous_action",
        {**PENDULUM, "ENV_NAME": "MountainCarContinuous-v0"},
        2,
        gymnax=True,
    ),  # fmt: skip
    "inverted_pendulum-2": Case(
        "ppo_continuous_action", {**BRAX, "ENV_NAME": "inverted_pendulum"}, 2, gymnax=False
    ),
    "hopper-2": Case("ppo_continuous_action", BRAX, 2, gymnax=False),
    # ppo.py on its own config: the many-seeds cases of docs/benchmarks.md, "On a TPU"
    "cartpole-16": Case("ppo", CARTPOLE, 16, gymnax=True),
    "cartpole-256": Case("ppo", CARTPOLE, 256, gymnax=True),
    "cartpole-2048": Case("ppo", {**CARTPOLE, "TOTAL_TIMESTEPS": 1e5}, 2048, gymnax=True),
    "cartpole-timelimit-256": Case(
        "ppo", CARTPOLE, 256, gymnax=True, ours={"bootstrap_truncation": False}
    ),  # ours ends a return at CartPole's time limit, as theirs does (issue 59's ablation)
    "spaceinvaders-16": Case("ppo", MINATAR, 16, gymnax=True),
    "breakout-16": Case("ppo", {**MINATAR, "ENV_NAME": "Breakout-MinAtar"}, 16, gymnax=True),
    "rnn-cartpole-16": Case("ppo_rnn", RNN, 16, gymnax=True, ours=OUR_GRU),
    "rnn-cartpole-16-pieces": Case(
        "ppo_rnn", RNN, 16, gymnax=True, ours={**OUR_GRU, "sequence_length": 16}
    ),  # ours re-runs pieces of 16 steps (`sequence_length`), theirs whole rollouts
    "rnn-cartpole-timelimit-16": Case(
        "ppo_rnn", RNN, 16, gymnax=True, ours={**OUR_GRU, "bootstrap_truncation": False}
    ),  # ours ends a return at CartPole's time limit, as theirs does (issue 59's ablation)
}

#: Their side, run in a fresh process: the adapters (module docstring), then their
#: ``make_train`` under ``jax.jit(jax.vmap(...))``.
THEIRS = """
import json, sys, time, types
sys.path.insert(0, {src!r})
for name in ("navix", "brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training"):
    try:
        __import__(name)
    except ImportError:  # adapter 1: their wrappers.py imports navix and brax at the top
        stub = types.ModuleType(name)
        stub.EpisodeWrapper = stub.AutoResetWrapper = object  # for their Brax wrapper alone
        sys.modules[name] = stub
import jax, numpy as np
import {module} as m

class Folded:  # adapters 2 and 4: gymnax >= 1.0's step, folded back to older gymnax's
    def __init__(self, env, params=None):
        self._env, self._params = env, params

    def __getattr__(self, name):
        return getattr(self._env, name)

    def _p(self, p):
        return self._params if p is None else p

    def reset(self, key, p=None):
        return self._env.reset(key, self._p(p))

    def step(self, key, state, action, p=None):
        out = self._env.step(key, state, action, self._p(p))
        if len(out) == 6:  # terminated and truncated apart: one done, as before
            obs, state, reward, terminated, truncated, info = out
            # adapter 6: older gymnax's info held "discount" alone; 1.0's also holds the
            # episode's final observation, which their metrics stack for every step
            # (MinAtar at 16 seeds: 361 GB of temporaries on a 16 GB chip)
            return obs, state, reward, terminated | truncated, {{"discount": info["discount"]}}
        return out

    def observation_space(self, p=None):
        return self._env.observation_space(self._p(p))

    def action_space(self, p=None):
        return self._env.action_space(self._p(p))


def gymnax_env(name, backend="positional"):  # adapter 2: a gymnax name gets the gymnax env
    import gymnax

    env, params = gymnax.make(name)
    return Folded(env, params)


if hasattr(m, "gymnax"):  # adapter 4: ppo.py and ppo_rnn.py call gymnax.make directly
    make = m.gymnax.make
    m.gymnax = types.SimpleNamespace(make=lambda name: (lambda e, p: (Folded(e), p))(*make(name)))

if hasattr(m, "ScannedRNN"):  # adapter 5: flax >= 0.8's GRUCell needs its size
    import flax.linen as linen
    import jax.numpy as jnp

    adapted = types.ModuleType("flax.linen")
    adapted.__dict__.update(linen.__dict__)
    adapted.GRUCell = lambda **kw: linen.GRUCell(features=128, **kw)  # their size, fixed
    m.nn = adapted
    m.ScannedRNN.initialize_carry = staticmethod(lambda b, h: jnp.zeros((b, h)))  # as before

if hasattr(m, "BraxGymnaxWrapper") and {gymnax!r}:
    m.BraxGymnaxWrapper = gymnax_env
    clip = m.ClipAction

    def bounded_clip(env):  # adapter 3: clip to the env's own action bounds
        space = env.action_space(None)
        return clip(env, low=float(np.min(space.low)), high=float(np.max(space.high)))

    m.ClipAction = bounded_clip

config = {config!r}
train = jax.jit(jax.vmap(m.make_train(config)))
keys = jax.random.split(jax.random.PRNGKey({first}), {seeds})
t0 = time.perf_counter()
compiled = train.lower(keys).compile()
t1 = time.perf_counter()
out = compiled(keys)
jax.block_until_ready(out)
t2 = time.perf_counter()
info = out["metrics"] if "metrics" in out else out["metric"]  # ppo_rnn.py: "metric"
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
from purejaxppo._engine import Engine
from purejaxppo._agents import agent_inputs
from purejaxppo._placement import mesh_for
warnings.simplefilter("ignore")
cfg = PPOConfig.from_purejaxrl({config!r}).replace(**{ours!r})
agents = Engine(cfg, mesh=mesh_for(None, {seeds}))
keys, hp, _ = agent_inputs(cfg, {{}}, list(range({first}, {first} + {seeds})))
t0 = time.perf_counter()
state, metrics = agents(keys, hp)
jax.block_until_ready(metrics)
total = time.perf_counter() - t0
ret = agents.strip(metrics, {seeds}).episode_return
tail = max(1, ret.shape[1] // 20)
print("RESULT " + json.dumps(dict(compile_s=agents.compile_seconds,
    run_s=total - agents.compile_seconds, returns=np.nanmean(ret[:, -tail:], 1).tolist())))
"""


def purejaxrl_source(brax: bool = True) -> Path:
    """The ``purejaxrl`` package directory of ``$PUREJAXRL_DIR``, or a pytest skip saying
    what is missing (``brax``: the case needs Brax itself)."""
    root = os.environ.get("PUREJAXRL_DIR")
    if not root:
        pytest.skip("set PUREJAXRL_DIR to a checkout of luchris429/purejaxrl to compare")
    src = Path(root) / "purejaxrl"
    if not (src / "ppo_continuous_action.py").is_file():
        pytest.skip(f"PUREJAXRL_DIR={root}: no purejaxrl/ppo_continuous_action.py there")
    needs = ("flax", "distrax", "gymnax") + (("brax",) if brax else ())
    missing = [name for name in needs if find_spec(name) is None]
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


def env_int(name: str, default: int, least: int) -> int:
    """``$NAME`` as a whole number ≥ ``least`` (``default`` when unset), or one line saying so."""
    text = os.environ.get(name, str(default))
    if not text.isdigit() or int(text) < least:
        raise pytest.UsageError(f"{name}={text!r}: give a whole number >= {least}, or unset it")
    return int(text)


@pytest.mark.parametrize("case", list(CASES))
def test_side_by_side(benchmark, case):
    module, config, seeds, gymnax, ours = CASES[case]
    seeds = env_int("BENCH_SEEDS", seeds, least=1)
    first = env_int("BENCH_FIRST_SEED", 0, least=0)
    src = purejaxrl_source(brax=not gymnax)
    config = dict(config)
    if os.environ.get("BENCH_UPDATES"):
        config["TOTAL_TIMESTEPS"] = (
            int(os.environ["BENCH_UPDATES"]) * config["NUM_ENVS"] * config["NUM_STEPS"]
        )
    theirs_code = THEIRS.format(
        src=str(src), module=module, gymnax=gymnax, config=config, seeds=seeds, first=first
    )
    ours_code = OURS.format(config=config, seeds=seeds, first=first, ours=ours or {})
    side = os.environ.get("BENCH_SIDE", "both")
    if side not in ("both", "theirs", "ours"):
        raise ValueError(f"BENCH_SIDE={side!r}: use theirs, ours, or leave it unset for both")
    sides = {"theirs": theirs_code, "ours": ours_code}
    if side != "both":  # one side per process: a device call too short for both
        sides = {side: sides[side]}
    rounds = []

    def measure():
        for _ in range(int(os.environ.get("BENCH_ROUNDS", "3"))):
            r = {}
            for name, code in sides.items():
                r[name] = whole_process(code)
                # each side as it ends, so that a call cut short keeps what finished
                print(f"\n{case} {name}: " + json.dumps(r[name]), flush=True)
            if len(r) == 2:
                r["ratio"] = r["ours"]["process_s"] / r["theirs"]["process_s"]
            rounds.append(r)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    summary = dict(
        case=case, seeds=seeds, first_seed=first, updates=int(config["TOTAL_TIMESTEPS"])
        // (config["NUM_ENVS"] * config["NUM_STEPS"]), jax=__import__("jax").__version__,
        side=side, rounds=rounds,
    )  # fmt: skip
    if side == "both":
        ratios = [r["ratio"] for r in rounds]
        summary.update(
            ratio_min=min(ratios), ratio_median=float(np.median(ratios)), ratio_max=max(ratios)
        )
    benchmark.extra_info.update(summary)
    print("\n" + json.dumps(summary, indent=1))
    if summary["updates"] >= 100:  # a full-length run: both sides finished episodes late on
        for r in rounds:
            assert all(np.all(np.isfinite(r[name]["returns"])) for name in sides)
