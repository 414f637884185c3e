"""The command line's argument handling, in-process (`main(argv)`): nothing here compiles.

The end-to-end commands (train, sweep, eval, bench in fresh processes) are in test_cli.py.
"""

import pytest
from conftest import cli


def test_bad_flag_value_is_a_clear_error(capsys):
    code, _, err = cli(capsys, "train", "--gamma", "1.5")
    assert code == 2 and "--gamma 1.5 is invalid" in err and "PPOConfig" not in err
    code, _, err = cli(capsys, "train", "--num-envs", "many")
    assert code == 2 and "--num-envs" in err and "many" in err
    code, _, err = cli(capsys, "sweep", "--seeds", "2")
    assert code == 2 and "--sweep.<field>" in err
    code, _, err = cli(capsys, "train", "--stop-at", "1000", "--checkpoint-every", "0")
    assert code == 2 and "--stop-at 1000" in err and "--checkpoint-every 0" in err
    code, _, err = cli(capsys, "train", "--env", "Mazee-v0")
    assert code == 2 and "--env 'Mazee-v0' is invalid" in err and "Maze-v0" in err


def test_a_refusal_speaks_the_command_lines_words(capsys):
    """The flag, not the field; what a command line can give, not a Python type; one line
    short enough to read."""
    code, _, err = cli(capsys, "train", "--maze", "medum")
    assert code == 2 and err.startswith("purejaxppo train: --maze 'medum' is unknown")
    assert "--config file" in err and "#/./S/G" in err and len(err.splitlines()) == 1
    code, _, err = cli(capsys, "train", "--env", "Cartpole-v1")
    assert code == 2 and "Did you mean 'CartPole-v1' (gymnax)" in err
    assert len(err.splitlines()) == 1 and len(err) < 320, len(err)


def test_help_lists_the_fields(capsys):
    code, out, _ = cli(capsys, "train", "--help")
    assert code == 0
    for flag in ("--lr", "--num-envs", "--maze", "--max-grad-norm", "--anneal-lr", "--seeds"):
        assert flag in out, flag
    assert "Adam learning rate" in out
    code, out, _ = cli(capsys, "sweep", "--help")
    assert code == 0 and "--sweep.lr" in out and "--search" in out


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "/nonexistent-run-dir"],
        ["bench", "--updates", "0"],
        ["bench", "--suite", "scaling", "--updates", "0"],
    ],
)
def test_eval_and_bench_refuse_bad_input_before_compiling(capsys, args):
    code, _, err = cli(capsys, *args)
    assert code == 2 and err.startswith("purejaxppo ")
    assert "--updates" in err or "eval" in args[0], err  # names the field
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback


def test_bench_rounds_the_length_up_to_whole_batches(capsys):
    """``bench`` times a few updates: a length that is not whole batches is rounded up (and
    said), not refused; a whole one is kept."""
    from purejaxppo.cli._bench import timed_config
    from purejaxppo.cli._flags import BenchCmd

    cfg = timed_config(BenchCmd(num_envs=1024, num_steps=64))  # default 819,200: 12.5 batches
    assert cfg.total_timesteps == 13 * 65_536 and "→ 851,968" in capsys.readouterr().out
    cfg = timed_config(BenchCmd(num_envs=16, num_steps=512))
    assert cfg.total_timesteps == 819_200 and capsys.readouterr().out == ""


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_bench_measures_aggregate_steps_per_second():
    from conftest import SMALL

    from purejaxppo._bench import time_updates

    row = time_updates(SMALL, agents=2, updates=1, mesh=False)
    assert row.agents == 2 and row.compile_s > 0 and row.update_s > 0
    assert row.steps_per_s == pytest.approx(2 * SMALL.batch_size / row.update_s)
    assert row.steps_per_s_per_agent == pytest.approx(row.steps_per_s / 2)
    with pytest.raises(ValueError, match="updates=0"):
        time_updates(SMALL, agents=1, updates=0)


# ----------------------------------------------------------- every config field a flag ---
def _flag_value(name: str, default):
    """A non-default value of the field's annotated type, and the words that type it."""
    import types
    import typing

    from purejaxppo.cli._flags import flag_type as _flag_type

    kind = _flag_type(name)
    flag = f"--{name.replace('_', '-')}"
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None: an X
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if kind is bool:  # a choice of None, True, False
            return True, [flag, "True"]
    if kind is bool:
        value = not bool(default)
        return value, [f"--{name.replace('_', '-')}" if value else f"--no-{name.replace('_', '-')}"]
    if kind is int:
        return 7, [f"--{name.replace('_', '-')}", "7"]
    if kind is float:
        return 0.125, [f"--{name.replace('_', '-')}", "0.125"]
    if kind is str:
        return "other", [f"--{name.replace('_', '-')}", "other"]
    if typing.get_origin(kind) is tuple:
        return (3, 5), [f"--{name.replace('_', '-')}", "3", "5"]
    raise AssertionError(f"PPOConfig.{name}: no test value for flag type {kind}")


def test_every_config_field_is_a_flag_of_its_own_type():
    """Generated from PPOConfig's own field list, so a new field cannot be missed."""
    import dataclasses

    import tyro

    from purejaxppo import PPOConfig
    from purejaxppo.cli._flags import TrainCmd

    for field in dataclasses.fields(PPOConfig):
        value, words = _flag_value(field.name, field.default)
        cmd = tyro.cli(TrainCmd, args=words)
        assert getattr(cmd, field.name) == value, (field.name, words)


def test_memory_length_is_settable_from_the_command_line():
    import tyro

    from purejaxppo.cli._files import config_of as _config_of
    from purejaxppo.cli._flags import TrainCmd

    cmd = tyro.cli(TrainCmd, args=["--env", "MemoryChain-bsuite", "--memory-length", "5"])
    assert _config_of(cmd).memory_length == 5


def test_help_shows_each_optional_fields_type(capsys):
    code, out, _ = cli(capsys, "train", "--help")
    assert code == 0
    assert "--memory-length {None}|INT" in out and "--time-limit {None}|INT" in out
