"""Run directories written on a TPU read, evaluate and resume on this CPU (tests/data/runs-tpu:
how they were made is in its README). A run moved between backends is compared with the
uninterrupted run on the TPU: the TPU's updates are the checkpoint's own, bit for bit; those
computed here differ by the backends' rounding (float32 on the CPU, one bfloat16 pass per
matrix product on the TPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import cli

from purejaxppo import load_policy
from purejaxppo._backend import describe_place, ran_on
from purejaxppo.envs import make_env
from purejaxppo.rundir import read_run

DATA = Path(__file__).parent / "data" / "runs-tpu"
LOSSES = ("policy_loss", "value_loss", "entropy", "grad_norm")


def metrics(run_dir: Path) -> dict[str, np.ndarray]:
    with np.load(run_dir / "metrics.npz") as z:
        return {k: z[k] for k in z.files}


def test_a_tpu_run_is_evaluated_and_loaded_on_a_cpu(capsys):
    meta = json.loads((DATA / "finished" / "config.json").read_text())
    assert meta["ran_on"]["backend"] == "tpu" and meta["ran_on"]["device_kind"] == "TPU v5 lite"
    code, out, err = cli(capsys, "eval", DATA / "finished", "--episodes", "4", "--gif", "")
    assert code == 0, err
    here = describe_place(ran_on())  # "cpu", or the chip this suite runs on
    assert f"trained on tpu (TPU v5 lite × 1), jax 0.10.2; evaluating on {here}" in out
    returns = [
        float(line.split(" | ")[2]) for line in out.splitlines() if line[:4] in ("0 | ", "1 | ")
    ]
    assert returns == [1.0, 1.0]  # both agents solve the easy maze, as on the TPU
    policy = load_policy(DATA / "finished", seed=1)
    _, obs, mask = make_env(read_run(DATA / "finished")["config"]).reset(jax.random.PRNGKey(0))
    assert bool(mask[int(policy(obs, mask))])  # a legal action of the maze


@pytest.mark.slow
def test_a_tpu_run_resumed_on_a_cpu_follows_the_uninterrupted_tpu_run(tmp_path, capsys):
    if jax.default_backend() != "cpu":  # the CLI resumes on this machine's own backend
        pytest.skip(f"checks a move to a CPU; here the resume would run on {ran_on()['backend']}")
    run_dir = tmp_path / "stopped"
    shutil.copytree(DATA / "stopped", run_dir)
    code, out, err = cli(
        capsys, "train", "--resume", run_dir, "--no-progress", "--eval-episodes", "0", "--no-gif"
    )
    assert code == 0, err
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["ran_on"]["backend"] == "cpu" and meta["started_on"]["backend"] == "tpu"
    assert "resumed from checkpoints written on tpu (TPU v5 lite × 1)" in out
    moved, whole = metrics(run_dir), metrics(DATA / "finished")
    half = 4  # the checkpoint's updates: the TPU's own numbers
    for name in LOSSES + ("episode_return",):
        np.testing.assert_array_equal(moved[name][:, :half], whole[name][:, :half], err_msg=name)
    # the CPU's updates: measured 2026-12-06, at most 6e-5 apart (grad_norm of ~0.1)
    for name in LOSSES:
        np.testing.assert_allclose(moved[name], whole[name], rtol=1e-3, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(moved["episode_return"], whole["episode_return"], atol=1e-6)
