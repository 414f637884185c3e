"""The console script, run as a user would, in a subprocess."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "purejaxppo", *args], capture_output=True, text=True, timeout=280
    )


def test_train_prints_progress_and_summary():
    out = run(
        "train", "--maze", "easy", "--num-envs", "4", "--num-steps", "64",
        "--minibatch-size", "64", "--total-timesteps", "768", "--update-epochs", "2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "update     3/3" in out.stdout
    for field in ("final return", "steps/s", "compile s", "run s"):
        assert field in out.stdout, field


def test_bad_flag_value_is_a_clear_error():
    out = run("train", "--gamma", "1.5")
    assert out.returncode == 2
    assert "PPOConfig.gamma=1.5 is invalid" in out.stderr
    out = run("train", "--num-envs", "many")
    assert out.returncode == 2 and "invalid int value" in out.stderr


def test_help_lists_the_fields():
    out = run("train", "--help")
    assert out.returncode == 0
    for flag in ("--lr", "--num-envs", "--maze", "--max-grad-norm", "--anneal-lr"):
        assert flag in out.stdout, flag
    assert "Adam learning rate" in out.stdout
