"""PPOConfig: defaults are the reference's; bad values are refused with the field and the fix."""

import functools
import math

import jax
import jax.numpy as jnp
import pytest
from conftest import needs_gymnax

from purejaxppo import PPOConfig


def test_defaults_are_the_seed_hyperparameters():
    c = PPOConfig()
    assert (c.num_envs, c.num_steps, c.update_epochs, c.minibatch_size) == (16, 512, 10, 1024)
    assert (c.lr, c.adam_eps, c.gamma, c.gae_lambda, c.clip_eps) == (3e-4, 1e-7, 0.99, 0.95, 0.2)
    assert (c.ent_coef, c.vf_coef, c.max_grad_norm) == (0.01, 0.5, None)
    assert not (c.normalize_advantages or c.anneal_lr or c.clip_value)
    assert c.env == "Maze-v0" and c.maze_spec == "medium"
    assert (c.batch_size, c.num_minibatches, c.num_updates) == (8192, 8, 100)
    assert (c.conv_channels, c.mlp_widths) == ((1,), (64,))


def test_numeric_hyperparameters_are_leaves_and_shapes_are_static():
    leaves = jax.tree.leaves(PPOConfig(max_grad_norm=0.5))
    assert len(leaves) == 9  # lr, adam_eps, gamma, gae_lambda, clip_eps, ent_coef, vf_coef,
    # max_grad_norm, log_std_init
    stacked = jax.tree.map(lambda x: jnp.array([x, x]), PPOConfig())
    assert stacked.lr.shape == (2,) and stacked.num_envs == 16


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"minibatch_size": 1000}, r"minibatch_size=1000 .* divide the batch"),
        ({"total_timesteps": 100}, r"total_timesteps=100 .* smaller than one batch"),
        ({"total_timesteps": 10_000}, r"multiple of the batch .* use 8192 or 16384"),
        ({"num_envs": 0}, r"num_envs=0 .* positive integer"),
        ({"num_steps": -1}, r"num_steps=-1"),
        ({"update_epochs": 0}, r"update_epochs=0"),
        ({"lr": 0.0}, r"lr=0.0 .* must be > 0"),
        ({"lr": -1e-3}, r"lr=-0.001"),
        ({"gamma": 1.5}, r"gamma=1.5 .* \(0, 1\]"),
        ({"gamma": 0.0}, r"gamma=0.0"),
        ({"gae_lambda": -0.1}, r"gae_lambda=-0.1"),
        ({"clip_eps": -0.2}, r"clip_eps=-0.2"),
        ({"ent_coef": -0.01}, r"ent_coef=-0.01"),
        ({"vf_coef": -1.0}, r"vf_coef=-1.0"),
        ({"max_grad_norm": 0.0}, r"max_grad_norm=0.0"),
        ({"lr": "fast"}, r"lr='fast' .* must be a number"),
        ({"env": "Snake-v1", "maze": "easy"}, r"maze options apply to Maze-v0 only"),
        (
            {"env": "Maze-v1"},
            r"env='Maze-v1' is invalid: no environment of that name.*"
            r"Did you mean 'Maze-v0' \(Jumanji\)",
        ),
        ({"env": "Snake-v2"}, r"no environment of that name.*Did you mean 'Snake-v1' \(Jumanji\)"),
        ({"time_input": 1}, r"time_input=1 is invalid: use True or False"),
        ({"bootstrap_truncation": "no"}, r"bootstrap_truncation='no' is invalid: use True or"),
        ({"env": "CartPole-v1", "maze": "easy"}, r"maze options apply to Maze-v0 only"),
        (
            {"network": "cnn"},
            r"'cnn' is invalid: use one of \['shared', 'separate', 'per_cell', 'gru'\]",
        ),
        ({"activation": "gelu"}, r"activation='gelu' is invalid"),
        ({"maze_pool": -1}, r"maze_pool=-1 is invalid"),
    ],
)
def test_invalid_configs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PPOConfig(**kwargs)


def test_replace_returns_a_new_config():
    c = PPOConfig()
    d = c.replace(lr=1e-3)
    assert c.lr == 3e-4 and d.lr == 1e-3


def test_random_valid_configs_construct_and_invalid_ones_are_refused():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None)
    @given(
        num_envs=st.integers(1, 64),
        num_steps=st.integers(1, 256),
        updates=st.integers(1, 50),
        mb_divisor=st.integers(1, 8),
        lr=st.floats(1e-7, 1.0),
        gamma=st.floats(1e-3, 1.0),
        lam=st.floats(1e-3, 1.0),
        clip=st.floats(1e-6, 10.0),
        ent=st.floats(0.0, 1.0),
    )
    def valid(num_envs, num_steps, updates, mb_divisor, lr, gamma, lam, clip, ent):
        batch = num_envs * num_steps
        mb = batch // mb_divisor if batch % mb_divisor == 0 else batch
        c = PPOConfig(
            num_envs=num_envs, num_steps=num_steps, total_timesteps=batch * updates,
            minibatch_size=mb, lr=lr, gamma=gamma, gae_lambda=lam, clip_eps=clip, ent_coef=ent,
        )  # fmt: skip
        assert c.num_updates == updates and c.num_minibatches * mb == batch

    @settings(max_examples=200, deadline=None)
    @given(
        field=st.sampled_from(["lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef"]),
        value=st.one_of(
            st.floats(max_value=-1e-9),
            st.floats(min_value=1.0 + 1e-6, max_value=1e6),
            st.just(float("nan")),
            st.just(float("inf")),
            st.just(0.0),
        ),
    )
    def invalid(field, value):
        bad = (
            not math.isfinite(value)
            or {
                "lr": value <= 0,
                "gamma": not (0 < value <= 1),
                "gae_lambda": not (0 < value <= 1),
                "clip_eps": value <= 0,
                "ent_coef": value < 0,
                "vf_coef": value < 0,
            }[field]
        )
        if bad:
            with pytest.raises(ValueError, match=f"PPOConfig.{field}="):
                PPOConfig(**{field: value})
        else:
            PPOConfig(**{field: value})

    valid()
    invalid()


@needs_gymnax  # builds CartPole
def test_env_options_are_declared_and_checked_in_envs_alone():
    """The env options are declared once, in `envs` (`EnvOptions`, which `PPOConfig`
    inherits), checked there, and `envs` never imports the PPO config."""
    import ast
    import dataclasses
    from pathlib import Path

    import purejaxppo.envs as envs

    for path in Path(envs.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "_config", path  # `from .._config import ...`
    names = [f.name for f in dataclasses.fields(envs.EnvOptions)]
    assert names == [f.name for f in dataclasses.fields(PPOConfig)][: len(names)]
    assert "env" in names and "time_input" in names and "num_envs" not in names
    assert not set(names) & set(vars(PPOConfig).get("__annotations__", {}))  # not redeclared

    Options = functools.partial(envs.EnvOptions, env="CartPole-v1")  # not a PPOConfig
    envs.check_env(Options())
    assert envs.make_env(Options()).num_actions == 2
    with pytest.raises(ValueError, match="PPOConfig.maze_window=4 is invalid"):
        Options(env="Maze-v0", maze_view="local", maze_window=4)  # checked when made
    with pytest.raises(ValueError, match="memory_length=3 is invalid: it applies to MemoryChain"):
        Options(memory_length=3)
