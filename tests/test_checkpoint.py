"""Chunked training, atomic checkpoints, exact resume, and refusal of bad checkpoints."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import tree_equal

from purejaxppo import PPOConfig, make_train, resume_sweep, sweep, train_with_checkpoints
from purejaxppo.rundir import CheckpointError
from purejaxppo.rundir._format import checkpoints
from purejaxppo.rundir._lock import RunDirWarning

pytestmark = pytest.mark.timeout(600)

CFG = PPOConfig(
    maze="medium", num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, total_timesteps=512
)  # 4 updates


@pytest.fixture(scope="module")
def uninterrupted():
    return make_train(CFG)(jax.random.PRNGKey(3))


def test_chunks_equal_one_program_bit_for_bit(uninterrupted):
    train = make_train(CFG)
    state = train.init(jax.random.PRNGKey(3))
    state, m1 = train.run(state, 2)
    state, m2 = train.run(state, 2)
    ref_state, ref_metrics = uninterrupted
    assert tree_equal(state.params, ref_state.params)
    assert tree_equal(state.opt_state, ref_state.opt_state)
    both = jax.tree.map(lambda a, b: np.concatenate([a, b]), m1, m2)
    assert tree_equal(both, ref_metrics)


def test_stop_and_resume_equals_uninterrupted(tmp_path, uninterrupted):
    calls = []
    state, metrics, finished = train_with_checkpoints(
        CFG, tmp_path, seed=3, checkpoint_every=1, should_stop=lambda: calls.append(1) or True
    )
    assert not finished and int(state.update) == 1
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-00000001.eqx"]
    state, metrics, finished = train_with_checkpoints(
        CFG, tmp_path, seed=3, checkpoint_every=1, resume=True
    )
    assert finished and int(state.update) == CFG.num_updates
    assert len(checkpoints(tmp_path)) == 2  # only the last two are kept
    ref_state, ref_metrics = uninterrupted
    assert tree_equal(state.params, ref_state.params)
    assert tree_equal(metrics, ref_metrics)


def test_a_stopped_sweep_flags_no_agent_for_the_updates_it_has_not_run(tmp_path):
    res = sweep(CFG, [3], run_dir=tmp_path, checkpoint_every=1, should_stop=lambda: True)
    assert not res.finished and not res.diverged.any()  # its NaN-filled updates are not run
    assert np.isnan(np.asarray(res.metrics.policy_loss)[:, 1:]).all()


@pytest.fixture
def one_checkpoint(tmp_path):
    train_with_checkpoints(CFG, tmp_path, seed=3, checkpoint_every=2, should_stop=lambda: True)
    (path,) = checkpoints(tmp_path)
    return path


def resume(run_dir, cfg=CFG, seed=3):
    return train_with_checkpoints(cfg, run_dir, seed=seed, checkpoint_every=2, resume=True)


def test_truncated_checkpoint_is_refused(one_checkpoint):
    data = one_checkpoint.read_bytes()
    one_checkpoint.write_bytes(data[:-1])
    with (
        pytest.warns(RunDirWarning, match="truncated.*No older checkpoint"),
        pytest.raises(CheckpointError, match="no intact checkpoint"),
    ):
        resume(one_checkpoint.parent)


def test_flipped_byte_is_refused(one_checkpoint):
    data = bytearray(one_checkpoint.read_bytes())
    data[-100] ^= 0x01
    one_checkpoint.write_bytes(bytes(data))
    with (
        pytest.warns(RunDirWarning, match="corrupted"),
        pytest.raises(CheckpointError, match="no intact checkpoint"),
    ):
        resume(one_checkpoint.parent)


def test_resume_falls_back_past_a_truncated_checkpoint(tmp_path, uninterrupted):
    kwargs = dict(seed=3, checkpoint_every=1)
    stops = iter([False, True])
    train_with_checkpoints(CFG, tmp_path, **kwargs, should_stop=lambda: next(stops))
    older, newest = checkpoints(tmp_path)
    newest.write_bytes(newest.read_bytes()[:-10])  # a disk that filled up mid-copy
    with pytest.warns(RunDirWarning, match=f"truncated.*Resuming from {older.name} instead"):
        state, metrics, finished = train_with_checkpoints(CFG, tmp_path, **kwargs, resume=True)
    assert finished
    ref_state, ref_metrics = uninterrupted
    assert tree_equal(state.params, ref_state.params)
    assert tree_equal(metrics, ref_metrics)


def test_checkpoint_of_another_config_or_seed_is_refused(one_checkpoint):
    with pytest.raises(CheckpointError, match="different sweep"):
        resume(one_checkpoint.parent, CFG.replace(lr=1e-3))
    with pytest.raises(CheckpointError, match="different sweep"):
        resume(one_checkpoint.parent, seed=4)


def test_garbage_file_is_refused(one_checkpoint):
    one_checkpoint.write_bytes(b"\x00\x01 not a checkpoint")
    with (
        pytest.warns(RunDirWarning, match="not a purejaxppo checkpoint"),
        pytest.raises(CheckpointError, match="no intact checkpoint"),
    ):
        resume(one_checkpoint.parent)


@pytest.mark.subprocess
def test_sigterm_then_resume_in_subprocesses(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "--maze", "medium", "--num-envs", "4", "--num-steps", "32", "--minibatch-size", "64",
        "--update-epochs", "2", "--total-timesteps", str(128 * 1000), "--seed", "3",
    ]  # fmt: skip
    # 1,000 one-update chunks (~7 s here): long enough that SIGTERM, sent when the first
    # checkpoint appears, lands mid-run even on a fast machine (40 chunks took 0.26 s and
    # sometimes ended before the signal).
    cmd = [sys.executable, "-m", "purejaxppo", "train"]
    proc = subprocess.Popen(
        [*cmd, *args, "--run-dir", str(run_dir), "--checkpoint-every", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 240
    while not checkpoints(run_dir) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert checkpoints(run_dir), proc.stderr.read() if proc.poll() is not None else "no checkpoint"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 143, err
    assert "resume with: purejaxppo train --resume" in out
    stopped_at = len(checkpoints(run_dir)) and int(checkpoints(run_dir)[-1].stem.split("-")[1])
    assert 1 <= stopped_at < 1000

    done = subprocess.run(
        [*cmd, "--resume", str(run_dir), "--no-gif", "--eval-episodes", "0"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    cfg = PPOConfig(
        maze="medium", num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2,
        total_timesteps=128 * 1000,
    )  # fmt: skip
    resumed = resume_sweep(run_dir)  # everything is done: loads the last checkpoint only
    whole = sweep(cfg, seeds=[3])
    assert tree_equal(resumed.state, whole.state)
    assert tree_equal(resumed.metrics, whole.metrics)
    with np.load(run_dir / "metrics.npz") as npz:  # what the CLI wrote
        np.testing.assert_array_equal(npz["entropy"], whole.metrics.entropy)
    assert not list(Path(run_dir).glob(".*tmp*"))  # no temporary files left behind
    assert os.path.exists(run_dir / "config.json")


# ---- sweeps: chunks, checkpoints and resume of many agents ----
@pytest.fixture(scope="module")
def whole_sweep():
    return sweep(CFG, seeds=2, lr=[3e-4, 1e-3])


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_chunked_sweep_equals_one_program_bit_for_bit(tmp_path, whole_sweep):
    chunked = sweep(CFG, seeds=2, lr=[3e-4, 1e-3], run_dir=tmp_path, checkpoint_every=2)
    assert chunked.finished
    assert tree_equal(chunked.metrics, whole_sweep.metrics)
    assert tree_equal(chunked.state, whole_sweep.state)
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-00000002.eqx", "ckpt-00000004.eqx"]


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_stopped_sweep_resumes_to_the_uninterrupted_result(tmp_path, whole_sweep):
    stopped = sweep(
        CFG, seeds=2, lr=[3e-4, 1e-3], run_dir=tmp_path, checkpoint_every=2,
        should_stop=lambda: True,
    )  # fmt: skip
    assert not stopped.finished
    assert np.isfinite(stopped.metrics.entropy[..., :2]).all()
    assert np.isnan(stopped.metrics.entropy[..., 2:]).all()  # not run yet: NaN, not stale
    resumed = resume_sweep(tmp_path)
    assert resumed.finished
    assert tree_equal(resumed.metrics, whole_sweep.metrics)
    assert tree_equal(resumed.state, whole_sweep.state)


def test_stop_at_stops_at_the_first_checkpoint_past_it_and_resume_goes_on(tmp_path, whole_sweep):
    kwargs = dict(seeds=2, lr=[3e-4, 1e-3], run_dir=tmp_path, checkpoint_every=2)
    stopped = sweep(CFG, **kwargs, stop_at=CFG.batch_size + 1)  # past update 1: stop at 2
    assert not stopped.finished
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-00000002.eqx"]
    assert np.isnan(stopped.metrics.entropy[..., 2:]).all()
    resumed = resume_sweep(tmp_path, stop_at=CFG.total_timesteps)  # at the end: no stop
    assert resumed.finished
    assert tree_equal(resumed.metrics, whole_sweep.metrics)
    with pytest.raises(ValueError, match="stop_at=5.*with run_dir= and checkpoint_every="):
        sweep(CFG, seeds=1, stop_at=5)
    with pytest.raises(ValueError, match="stop_at=True"):
        sweep(CFG, seeds=1, run_dir=tmp_path / "b", checkpoint_every=2, stop_at=True)


def test_bad_sweep_checkpoints_are_refused(tmp_path):
    sweep(CFG, seeds=1, lr=[3e-4], run_dir=tmp_path, checkpoint_every=2, should_stop=lambda: True)
    (path,) = checkpoints(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.warns(RunDirWarning), pytest.raises(CheckpointError, match="no intact"):
        resume_sweep(tmp_path)
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match="describes a different sweep"):
        sweep(CFG, seeds=2, lr=[3e-4], run_dir=tmp_path, checkpoint_every=2, resume=True)
    with pytest.raises(ValueError, match="need run_dir"):
        sweep(CFG, checkpoint_every=2)


@pytest.mark.slow
def test_a_static_sweep_checkpoints_each_program_and_resumes_exactly(tmp_path):
    kwargs = dict(seeds=1, num_envs=[4, 8], run_dir=tmp_path, checkpoint_every=2)
    stopped = sweep(CFG, **kwargs, should_stop=lambda: True)
    assert not stopped.finished
    assert [p.name for p in checkpoints(tmp_path, 0)] == ["ckpt-p0-00000002.eqx"]
    assert checkpoints(tmp_path, 1) == []  # its turn had not come
    resumed = resume_sweep(tmp_path)
    assert resumed.finished
    assert [p.name for p in checkpoints(tmp_path, 1)][-1] == "ckpt-p1-00000002.eqx"
    whole = sweep(CFG, seeds=1, num_envs=[4, 8])
    assert tree_equal(resumed.metrics, whole.metrics)
    programs = resumed.timings["programs"]  # this sitting's work only: for steps/s
    assert [p["updates_run"] for p in programs] == [2, 2]
