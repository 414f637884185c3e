"""The grouped agent axis: agents run as a `lax.map` over groups of G vmapped agents."""

import json
import math

import jax
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, SMALL, needs_cpu, needs_gymnax, tree_close, tree_equal

from purejaxppo import PPOConfig, sweep
from purejaxppo._agents import agent_inputs
from purejaxppo._distributions import Categorical, policy_distribution
from purejaxppo._engine import Engine
from purejaxppo._groups import CPU_FLOPS_PER_GROUP, forward_flops
from purejaxppo._programs import TRAIN
from purejaxppo.cli import main
from purejaxppo.engine import default_group_size
from purejaxppo.envs import make_env

CFG = SMALL.replace(update_epochs=1)


@pytest.fixture(scope="module")
def six():
    keys, hp, _ = agent_inputs(CFG, {"lr": np.linspace(1e-4, 1e-3, 6)}, [0])
    whole = Engine(CFG, mesh=False, group_size=6)
    return keys, hp, whole(keys, hp)


@pytest.mark.parametrize(
    "width", [pytest.param(w, marks=pytest.mark.slow) for w in (2, 4)]
)  # 4 does not divide 6: the last group is padded
def test_grouped_equals_ungrouped_agent_by_agent(six, width):
    keys, hp, whole = six
    engine = Engine(CFG, mesh=False, group_size=width)
    grouped = engine(keys, hp)
    assert engine.groups[(TRAIN, 6)] == width
    assert jax.tree.leaves(grouped[1])[0].shape[0] == 6  # the padding agents are dropped
    assert tree_close(grouped, whole, **ACROSS_SHAPES)
    assert tree_equal(Engine(CFG, mesh=False, group_size=width)(keys, hp), grouped)  # bitwise


def test_a_width_at_or_above_the_population_runs_it_all_at_once(six):
    keys, hp, whole = six
    engine = Engine(CFG, mesh=False, group_size=100)  # allowed: all six in one group
    assert tree_equal(engine(keys, hp), whole)  # the same program as group_size=6
    assert engine.groups[(TRAIN, 6)] == 6


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_one_compile_per_config_shape_and_width():
    engine = Engine(CFG, mesh=False, group_size=2)
    for lo in (1e-4, 3e-4):  # new hyperparameter values: the same program
        keys, hp, _ = agent_inputs(CFG, {"lr": np.linspace(lo, 1e-3, 5)}, [0])
        state = engine.init(keys, hp)
        engine.run(state, hp, 1)
    assert engine.num_traces == 1 and len(engine._compiled) == 2  # init, run: compiled once
    keys, hp, _ = agent_inputs(CFG, {}, list(range(7)))  # another population size
    engine.run(engine.init(keys, hp), hp, 1)
    assert engine.num_traces == 2


@needs_cpu
def test_forward_flops_counts_the_multiply_adds_of_an_mlp():
    # PureJaxRL's CartPole network: separate 4-64-64-2 actor and 4-64-64-1 critic
    cfg = PPOConfig(env="CartPole-v1", network="separate", mlp_widths=(64, 64))
    macs = (4 * 64 + 64 * 64 + 64 * 2) + (4 * 64 + 64 * 64 + 64 * 1)
    flops = forward_flops(cfg, (4,), Categorical((2,)))
    assert 2 * macs * 0.95 < flops < 2 * macs * 1.1  # plus biases and activations


@needs_cpu
def test_the_cpu_default_follows_the_documented_rule():
    def rule(cfg):  # 16 MFLOP / one agent's forward pass over a minibatch, to a power of 2
        env = make_env(cfg)
        row = forward_flops(cfg, env.obs_shape, policy_distribution(cfg, env))
        return 2 ** max(0, round(math.log2(CPU_FLOPS_PER_GROUP / (row * cfg.minibatch_size))))

    assert default_group_size(PPOConfig(), "cpu") == rule(PPOConfig()) == 1  # 49 MFLOP
    assert default_group_size(SMALL, "cpu") == rule(SMALL) == 4  # 64-row minibatches
    assert default_group_size(PPOConfig(), "gpu") is None  # every agent at once
    assert default_group_size(PPOConfig(), "tpu") is None
    maze = Engine(SMALL, mesh=False)  # groups of 4 on CPU, balanced
    assert maze.group_width(64) == 4
    assert maze.group_width(6) == 3  # two groups of 3, not 4 + 2 padded
    assert maze.group_width(4) is None and maze.group_width(1) is None  # one group: a vmap
    assert Engine(PPOConfig(), mesh=False, group_size=5).group_width(12) == 5  # as asked


@needs_gymnax
@needs_cpu
def test_the_cpu_default_gives_small_agents_wide_groups():
    def cartpole(**changes):  # PureJaxRL's CartPole config: 2.3 MFLOP per agent-minibatch
        return PPOConfig(
            env="CartPole-v1", network="separate", mlp_widths=(64, 64), activation="tanh",
            num_envs=4, num_steps=128, minibatch_size=128, total_timesteps=512 * 8,
        ).replace(**changes)  # fmt: skip

    assert default_group_size(cartpole(), "cpu") == 8  # 16 / 2.3 = 7.0, to a power of two
    assert default_group_size(cartpole(minibatch_size=512), "cpu") == 2  # 16 / 9.2
    assert default_group_size(cartpole(minibatch_size=64), "cpu") == 16  # 16 / 1.15


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_an_invalid_width_is_one_clear_line(bad):
    with pytest.raises(ValueError, match=r"group_size=.*positive number of agents per group"):
        Engine(CFG, mesh=False, group_size=bad)


def test_sweep_refuses_an_invalid_width_before_compiling(monkeypatch):
    monkeypatch.setattr(Engine, "compiled", lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(ValueError, match=r"sweep\(group_size\)=0"):
        sweep(CFG, 2, group_size=0)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_the_cli_refuses_an_invalid_width_with_exit_2(capsys, monkeypatch, tmp_path, command):
    monkeypatch.setattr(Engine, "compiled", lambda *a, **k: pytest.fail("compiled"))
    axes = ["--sweep.lr", "1e-3", "3e-4"] if command == "sweep" else []
    code = main([command, "--group-size", "0", "--run-dir", str(tmp_path / "r"), *axes])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--group-size 0" in err


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_sweep_runs_the_width_asked_and_records_it(tmp_path, six):
    _, _, whole = six
    res = sweep(CFG, [0], lr=list(np.linspace(1e-4, 1e-3, 6)), group_size=4)
    assert res.timings["programs"][0]["group_size"] == 4
    flat = jax.tree.map(lambda x: x.reshape(6, *x.shape[2:]), res.metrics)
    assert tree_close(flat, whole[1], **ACROSS_SHAPES)
    # A checkpointed sweep stores the width in sweep.json (resume_sweep passes it back).
    run = sweep(CFG, [0, 1], run_dir=tmp_path, checkpoint_every=2, group_size=1)
    assert json.loads((tmp_path / "sweep.json").read_text())["group_size"] == 1
    assert run.timings["programs"][0]["group_size"] == 1


def test_the_engine_refuses_hyperparameters_of_another_config():
    # Their static fields would choose another program than the engine's, silently.
    keys, hp, _ = agent_inputs(CFG, {}, [0, 1])
    engine = Engine(CFG.replace(num_envs=8, total_timesteps=768), mesh=False)
    with pytest.raises(ValueError, match=r"num_envs=4 but the engine's config has num_envs=8"):
        engine.init(keys, hp)
    with pytest.raises(ValueError, match="num_envs"):
        engine(keys, hp)
