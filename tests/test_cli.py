"""The console script, run as a user would, in subprocesses: train, sweep, eval, bench."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(600)]

TINY = [
    "--maze",
    "easy",
    "--num-envs",
    "4",
    "--num-steps",
    "64",
    "--minibatch-size",
    "64",
    "--total-timesteps",
    "768",
    "--update-epochs",
    "2",
    "--eval-episodes",
    "4",
]  # fmt: skip  (3 updates)
METRICS = ("episode_return", "entropy", "grad_norm", "skipped_steps")


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "purejaxppo", *args], capture_output=True, text=True, timeout=500
    )


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("train")
    out = run("train", *TINY, "--seeds", "2", "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stderr
    return run_dir, out


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sweep")
    out = run("sweep", *TINY, "--sweep.lr", "1e-4", "1e-3", "--seeds", "2",
              "--run-dir", str(run_dir), "--no-gif")  # fmt: skip
    assert out.returncode == 0, out.stderr
    return run_dir, out


def check_run_dir(run_dir, shape):
    with np.load(run_dir / "metrics.npz") as npz:
        for name in METRICS:
            assert npz[name].shape == (*shape, 3), name
        names = list(npz["axis_names"])
        assert names[-1] == "update" and len(names) == len(shape) + 1
        assert list(npz["env_steps"]) == [256, 512, 768]
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == int(np.prod(shape)) * 3  # tidy: one row per agent x update
    for column in (*names[:-1], "update", "env_steps", *METRICS):
        assert column in rows[0], column
    with Image.open(run_dir / "curves.png") as png:
        png.load()
        assert png.size[0] > 100 and png.size[1] > 100
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["config"]["maze"] == "easy" and "compile_s" in meta["timings"]
    return names


def test_train_writes_a_run_directory(train_dir):
    run_dir, out = train_dir
    assert check_run_dir(run_dir, (2,)) == ["seed", "update"]
    for text in ("final return", "steps/s", "compile s", "run s", "| seeds |", "2/2"):
        assert text in out.stdout, text
    with Image.open(run_dir / "agent.gif") as gif:
        assert gif.n_frames > 1
    summary = (run_dir / "summary.md").read_text()
    assert "IQM" in summary and "No agent diverged." in summary


def test_sweep_writes_labelled_axes_and_a_row_per_setting(sweep_dir):
    run_dir, out = sweep_dir
    assert check_run_dir(run_dir, (2, 2)) == ["lr", "seed", "update"]
    with open(run_dir / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["lr"]) for r in rows] == [1e-4, 1e-3]
    for column in ("return_mean", "return_iqm", "iqm_ci", "success_rate", "steps_per_s"):
        assert column in rows[0]
    assert "4 agent(s)" in out.stdout


def test_eval_every_agent_and_a_gif(train_dir, tmp_path):
    run_dir, _ = train_dir
    gif = run_dir / "best.gif"  # a relative --gif lands in the run directory
    assert not gif.exists()
    out = run("eval", str(run_dir), "--episodes", "3", "--gif", "best.gif")
    assert out.returncode == 0, out.stderr
    table = [line for line in out.stdout.splitlines() if line[:1].isdigit()]
    assert len(table) == 2  # one row per agent
    with Image.open(gif) as g:
        assert g.n_frames > 1
    out = run("eval", str(run_dir), "--agent", "5")
    assert out.returncode == 2 and "agents 0..1" in out.stderr


def test_bench_prints_a_table():
    out = run("bench", *TINY[:-2], "--agents", "1", "2", "--updates", "1")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert all(float(r[3].replace(",", "")) > 0 for r in rows)  # steps/s


def test_config_file_and_flags(tmp_path):
    good = tmp_path / "cfg.yaml"
    good.write_text(
        "maze: easy\nnum_envs: 4\nnum_steps: 32\nminibatch_size: 64\nupdate_epochs: 1\n"
        "total_timesteps: 128\ngamma: 1.5\nmlp_widths: [16, 16]\n"
    )
    out = run("train", "--config", str(good))
    assert out.returncode == 2 and "--gamma 1.5 is invalid" in out.stderr
    run_dir = tmp_path / "run"
    out = run("train", "--config", str(good), "--gamma", "0.9", "--run-dir", str(run_dir),
              "--no-gif", "--eval-episodes", "0", "--no-progress")  # fmt: skip
    assert out.returncode == 0, out.stderr
    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    assert cfg["gamma"] == 0.9 and cfg["num_envs"] == 4 and cfg["mlp_widths"] == [16, 16]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"lr": 1e-3, "learning_rate": 1e-3}))
    out = run("train", "--config", str(bad))
    assert out.returncode == 2 and "unknown fields ['learning_rate']" in out.stderr
