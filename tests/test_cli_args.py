"""The command line's argument handling, in-process (`main(argv)`): nothing here compiles.

The end-to-end commands (train, sweep, eval, bench in fresh processes) are in test_cli.py.
"""

import pytest

from purejaxppo._cli import main


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``purejaxppo ARGS`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as e:  # tyro exits for --help and for flags it cannot parse
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bad_flag_value_is_a_clear_error(capsys):
    code, _, err = cli(capsys, "train", "--gamma", "1.5")
    assert code == 2 and "PPOConfig.gamma=1.5 is invalid" in err
    code, _, err = cli(capsys, "train", "--num-envs", "many")
    assert code == 2 and "--num-envs" in err and "many" in err
    code, _, err = cli(capsys, "sweep", "--seeds", "2")
    assert code == 2 and "--sweep.<field>" in err
    code, _, err = cli(capsys, "train", "--stop-at", "1000", "--checkpoint-every", "0")
    assert code == 2 and "--stop-at 1000" in err and "--checkpoint-every 0" in err
    code, _, err = cli(capsys, "train", "--env", "Mazee-v0")
    assert code == 2 and "PPOConfig.env='Mazee-v0' is invalid" in err and "Maze-v0" in err


def test_help_lists_the_fields(capsys):
    code, out, _ = cli(capsys, "train", "--help")
    assert code == 0
    for flag in ("--lr", "--num-envs", "--maze", "--max-grad-norm", "--anneal-lr", "--seeds"):
        assert flag in out, flag
    assert "Adam learning rate" in out
    code, out, _ = cli(capsys, "sweep", "--help")
    assert code == 0 and "--sweep.lr" in out and "--search" in out


@pytest.mark.parametrize("args", [["eval", "/nonexistent-run-dir"], ["bench", "--updates", "0"]])
def test_eval_and_bench_refuse_bad_input_before_compiling(capsys, args):
    code, _, err = cli(capsys, *args)
    assert code == 2 and err.startswith("purejaxppo ")


def test_bench_measures_aggregate_steps_per_second():
    from conftest import SMALL

    from purejaxppo._bench import time_updates

    row = time_updates(SMALL, agents=2, updates=1, mesh=False)
    assert row.agents == 2 and row.compile_s > 0 and row.update_s > 0
    assert row.steps_per_s == pytest.approx(2 * SMALL.batch_size / row.update_s)
    assert row.steps_per_s_per_agent == pytest.approx(row.steps_per_s / 2)
    with pytest.raises(ValueError, match="updates=0"):
        time_updates(SMALL, agents=1, updates=0)
