"""Runs a researcher can trust: protected run directories, checks before training, no
silently wrong output, one clear line for every mistake (in-process unless marked)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, SMALL, cli, one_line, tree_close, tree_equal

from purejaxppo import PPOConfig, load_policy, sweep
from purejaxppo._agents import agent_inputs
from purejaxppo._chunks import auto_chunk, shorter_chunk
from purejaxppo._engine import Engine, engine_for
from purejaxppo._evaluate import evaluate, has_success
from purejaxppo._programs import TRAIN
from purejaxppo.rundir import CheckpointError, write_run
from purejaxppo.rundir._lock import RunDirError, RunDirWarning, claim

pytestmark = pytest.mark.timeout(600)

SMALL_FLAGS = [
    "--maze",
    "medium",
    "--num-envs",
    "4",
    "--num-steps",
    "32",
    "--minibatch-size",
    "64",
    "--update-epochs",
    "2",
    "--total-timesteps",
    "384",
    "--no-progress",
    "--no-gif",
    "--eval-episodes",
    "0",
]  # fmt: skip  (SMALL on the command line: 3 updates)


@pytest.fixture
def no_compiling(monkeypatch):
    """Fail the test if anything compiles: the checks must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("compiled before refusing bad input")

    monkeypatch.setattr(Engine, "compiled", refuse)


# ------------------------------------------------------------- 1. run directories ---
def test_a_directory_holding_a_run_is_refused_unless_resume_or_overwrite(
    tmp_path, capsys, no_compiling
):
    (tmp_path / "sweep.json").write_text("{}")
    (tmp_path / "ckpt-00000009.eqx").write_bytes(b"an old run's checkpoint")
    code, _, err = cli(capsys, "train", *SMALL_FLAGS, "--run-dir", str(tmp_path))
    assert code == 2 and one_line(err)
    assert "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert (tmp_path / "ckpt-00000009.eqx").exists()  # nothing touched


@pytest.mark.slow  # over ~6 s: the fast tier stays under 5 minutes
def test_overwrite_replaces_the_old_run_and_pruning_keeps_only_this_runs_files(tmp_path, capsys):
    old = tmp_path / "ckpt-00000009.eqx"
    old.write_bytes(b"an old run's checkpoint")
    (tmp_path / "config.json").write_text("{}")
    code, _, err = cli(
        capsys, "train", *SMALL_FLAGS, "--run-dir", str(tmp_path), "--overwrite",
        "--checkpoint-every", "1",
    )  # fmt: skip
    assert code == 0, err
    assert not old.exists()
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == [
        "ckpt-00000002.eqx", "ckpt-00000003.eqx",
    ]  # fmt: skip
    assert json.loads((tmp_path / "config.json").read_text())["finished"] is True


def test_a_foreign_checkpoint_is_never_pruned(tmp_path):
    from purejaxppo.rundir._format import write_checkpoint

    foreign = write_checkpoint(tmp_path, {"run": "theirs"}, 9, {"x": np.zeros(1)})
    for update in (2, 3, 4):
        write_checkpoint(tmp_path, {"run": "ours"}, update, {"x": np.zeros(1)})
    names = sorted(p.name for p in tmp_path.glob("ckpt-*"))
    assert names == ["ckpt-00000003.eqx", "ckpt-00000004.eqx", foreign.name]


def test_orphaned_temporary_files_are_removed(tmp_path):
    orphan = tmp_path / ".ckpt-00000004.eqx.tmp-99999"
    orphan.write_bytes(b"half a checkpoint from a killed write")
    with claim(tmp_path, "new"):
        assert not orphan.exists()


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path):
    (tmp_path / ".lock").write_text(json.dumps({"pid": 999999, "host": "gone", "since": "x"}))
    with pytest.warns(RunDirWarning, match="stale lock of pid 999999 on host gone"):
        with claim(tmp_path, "new"):
            pass


@pytest.mark.subprocess
def test_a_second_writer_is_refused_naming_the_owner(tmp_path, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from purejaxppo.rundir._lock import claim\n"
            f"with claim({str(tmp_path)!r}, 'new'):\n"
            "    print('held', flush=True); time.sleep(60)"
        )],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = cli(capsys, "train", *SMALL_FLAGS, "--run-dir", str(tmp_path))
        assert code == 2 and one_line(err)
        assert f"in use by pid {holder.pid} on host" in err
        with pytest.raises(RunDirError, match="in use"):
            sweep(SMALL, [0], run_dir=tmp_path, checkpoint_every=1)
    finally:
        holder.kill()
        holder.wait()
    with pytest.warns(RunDirWarning, match=f"stale lock of pid {holder.pid}"):
        with claim(tmp_path, "new"):  # killed: the kernel released it; the file is stale
            pass


# ------------------------------------------------------- 2. checks before training ---
@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_unwritable_run_dir_is_refused_before_compiling(tmp_path, capsys, no_compiling, where):
    target = {"file": tmp_path / "a-file" / "run", "proc": Path("/proc/purejaxppo-test")}[where]
    (tmp_path / "a-file").write_text("not a directory")
    code, _, err = cli(capsys, "train", *SMALL_FLAGS, "--run-dir", str(target))
    assert code == 2 and one_line(err) and "cannot write there" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--eval-episodes", "-1"], "--eval-episodes -1"),
        (["--progress-every", "0"], "--progress-every 0"),
        (["--lr", "inf"], "--lr inf is invalid: it must be a finite number"),
        (["--clip-eps", "0"], "--clip-eps 0.0 is invalid"),
        (["--seeds", "0"], "--seeds 0"),
    ],
)
def test_bad_flags_are_one_line_before_compiling(tmp_path, capsys, no_compiling, flags, message):
    code, _, err = cli(capsys, "train", *SMALL_FLAGS, *flags, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and one_line(err) and message in err
    assert not (tmp_path / "r" / "config.json").exists()


def test_a_random_range_high_to_low_names_the_field(capsys, no_compiling):
    code, _, err = cli(capsys, "sweep", *SMALL_FLAGS, "--search", "random", "--num-samples",
                       "2", "--sweep.lr", "1e-2", "1e-4")  # fmt: skip
    assert code == 2 and one_line(err) and "lr=(0.01, 0.0001) must be given low to high" in err


def test_a_full_disk_mid_run_is_one_line_with_a_resume_command(tmp_path, capsys, monkeypatch):
    from purejaxppo import _chunks

    real, calls = _chunks.write_checkpoint, []

    def fill_up(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(tmp_path / "ckpt-00000002.eqx"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_chunks, "write_checkpoint", fill_up)
    code, _, err = cli(capsys, "train", *SMALL_FLAGS, "--run-dir", str(tmp_path),
                       "--checkpoint-every", "1")  # fmt: skip
    assert code == 2 and one_line(err)
    assert "No space left on device" in err and "ckpt-00000001.eqx is intact" in err
    assert f"purejaxppo train --resume {tmp_path}" in err
    monkeypatch.setattr(_chunks, "write_checkpoint", real)
    code, _, err = cli(capsys, "train", "--resume", str(tmp_path), "--no-progress",
                       "--no-gif", "--eval-episodes", "0")  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "config.json").read_text())["finished"] is True


# ----------------------------------------------------------- 3. chunks and SIGTERM ---
def test_the_default_chunks_divide_the_run_and_shrink_past_a_minute():
    assert auto_chunk(100) == 10 and auto_chunk(8) == 1 and auto_chunk(1) == 1
    assert auto_chunk(97) == 10  # no divisor near a tenth: one remainder chunk
    assert auto_chunk(120) == 12 and 120 % auto_chunk(120) == 0
    assert shorter_chunk(10, 1.0) == 10  # 10 s a chunk: kept
    assert shorter_chunk(10, 20.0) == 2  # 200 s: the largest divisor within 60 s
    assert shorter_chunk(10, 100.0) == 1


@pytest.mark.subprocess
def test_sigterm_without_checkpoint_every_stops_early_and_resumes_bit_identically(tmp_path):
    run_dir = tmp_path / "run"
    cfg = SMALL.replace(total_timesteps=128 * 400)  # 400 updates: 10 chunks by default
    flags = [*SMALL_FLAGS[:10], "--total-timesteps", str(cfg.total_timesteps), "--seed", "3"]
    cmd = [sys.executable, "-m", "purejaxppo", "train"]
    proc = subprocess.Popen([*cmd, *flags, "--run-dir", str(run_dir), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 240
    while not list(run_dir.glob("ckpt-*.eqx")) and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    proc.send_signal(15)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 143, err
    assert "stopping at the end of this chunk" in err
    assert f"resume with: purejaxppo train --resume {run_dir}" in out
    stopped = max(int(p.stem.split("-")[1]) for p in run_dir.glob("ckpt-*.eqx"))
    assert stopped < 400 and stopped % 40 == 0  # stopped early, at a chunk boundary
    done = subprocess.run([*cmd, "--resume", str(run_dir), "--no-gif", "--eval-episodes", "0",
                           "--no-progress"], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    whole = sweep(cfg, seeds=[3], run_dir=tmp_path / "whole", checkpoint_every="auto")
    with np.load(run_dir / "metrics.npz") as npz:
        for name in ("entropy", "grad_norm", "episode_return"):
            np.testing.assert_array_equal(npz[name], getattr(whole.metrics, name))


# ------------------------------------------------------------- 4. no silent errors ---
@pytest.fixture(scope="module")
def static_sweep_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("static")
    res = sweep(SMALL, seeds=2, num_envs=[4, 12], run_dir=run_dir, checkpoint_every=1)
    write_run(run_dir, res, eval_episodes=2, gif=False)
    return run_dir, res


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_a_static_sweep_labels_each_programs_env_steps(static_sweep_dir):
    run_dir, res = static_sweep_dir
    with np.load(run_dir / "metrics.npz") as npz:
        assert npz["env_steps"].tolist() == [[128, 256, 384], [384, -1, -1]]
    import csv

    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    steps = {(r["num_envs"], r["update"]): int(r["env_steps"]) for r in rows}
    assert steps[("4", "3")] == 384 and steps[("12", "1")] == 384
    assert ("12", "2") not in steps  # the 12-env program ran one update (no padded rows)
    with open(run_dir / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    assert [r["success_rate"] != "" for r in summary] == [True, True]  # each program evaluated
    programs = res.timings["programs"]
    assert len(programs) == 2 and programs[0]["run_s"] != programs[1]["run_s"]
    assert [r["run_s"] for r in summary] == [f"{p['run_s']:.6g}" for p in programs]
    from purejaxppo.rundir._write import steps_trained

    assert steps_trained(res) == 2 * (3 * 128 + 1 * 384)  # 2 seeds, each program's own batch


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_success_is_reported_only_for_envs_that_define_it():
    assert has_success(SMALL)
    assert not has_success(PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8,
                                     minibatch_size=32, total_timesteps=32))  # fmt: skip
    assert has_success(PPOConfig(env="Minesweeper-v0", num_envs=2, num_steps=8,
                                 minibatch_size=16, total_timesteps=16))  # fmt: skip
    assert not has_success(PPOConfig(env="Snake-v1", num_envs=2, num_steps=8,
                                     minibatch_size=16, total_timesteps=16))  # fmt: skip
    cfg = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=8, minibatch_size=32,
                    total_timesteps=32, network="separate", conv_channels=())  # fmt: skip
    res = sweep(cfg, seeds=1)
    ev = evaluate(cfg, res.state.params, jax.random.PRNGKey(0), 2)
    assert not np.asarray(ev.success).any()  # returns of ~20: never "solved"


def test_resume_refuses_flags_that_would_change_the_run(tmp_path, capsys, no_compiling):
    code, _, err = cli(capsys, "train", "--resume", str(tmp_path), "--lr", "1e-3", "--seeds", "3")
    assert code == 2 and one_line(err)
    assert "--lr, --seeds would change the run" in err


def test_a_sweeps_config_json_is_not_silently_reduced_to_its_base(tmp_path, capsys, no_compiling):
    meta = {"config": {"lr": 3e-4}, "axes": {"lr": [1e-4, 1e-3], "seed": [0, 1]}}
    (tmp_path / "config.json").write_text(json.dumps(meta))
    code, _, err = cli(capsys, "train", "--config", str(tmp_path / "config.json"))
    assert code == 2 and one_line(err) and "swept ['lr']" in err


@pytest.fixture(scope="module")
def written_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("written")
    write_run(run_dir, sweep(SMALL, seeds=2), eval_episodes=0, gif=False)
    return run_dir


def test_a_tampered_or_truncated_params_file_is_refused(written_run, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(written_run, run_dir)
    load_policy(run_dir, seed=1)  # intact: loads
    params = run_dir / "params.eqx"
    good = params.read_bytes()
    flipped = bytearray(good)
    for i in range(len(good) - 400, len(good)):
        flipped[i] ^= 0xFF
    params.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_policy(run_dir, seed=1)
    params.write_bytes(good[:-7])
    code, _, err = cli(capsys, "eval", str(run_dir))
    assert code == 2 and one_line(err) and "params.eqx: truncated" in err


def test_a_config_json_that_no_longer_matches_the_params_is_one_line(written_run, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(written_run, run_dir)
    meta = json.loads((run_dir / "config.json").read_text())
    meta["config"]["mlp_widths"] = [32]
    (run_dir / "config.json").write_text(json.dumps(meta))
    code, _, err = cli(capsys, "eval", str(run_dir))
    assert code == 2 and one_line(err) and "does not match config.json" in err
    (run_dir / "config.json").write_text(json.dumps(meta)[:50])
    code, _, err = cli(capsys, "eval", str(run_dir))
    assert code == 2 and one_line(err) and "config.json: unreadable config.json" in err


def test_resume_without_or_with_a_damaged_sweep_json_is_one_line(tmp_path, capsys, no_compiling):
    code, _, err = cli(capsys, "train", "--resume", str(tmp_path))
    assert code == 2 and one_line(err) and "no config.json, sweep.json or pbt.json" in err
    (tmp_path / "sweep.json").write_text('{"config": {"lr": ')
    code, _, err = cli(capsys, "train", "--resume", str(tmp_path))
    assert code == 2 and one_line(err) and "unreadable sweep.json" in err


def test_malformed_yaml_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: 1e-3\nmlp_widths: [64, 64\n")
    code, _, err = cli(capsys, "train", "--config", str(bad))
    assert code == 2 and one_line(err) and "not valid YAML" in err and str(bad) in err


def test_an_array_or_non_finite_hyperparameter_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"PPOConfig.lr=.* not shape \(2,\).*sweep\(cfg, lr="):
        PPOConfig(lr=jnp.array([1e-3, 3e-4]))
    with pytest.raises(ValueError, match="PPOConfig.lr=inf is invalid"):
        PPOConfig(lr=float("inf"))
    with pytest.raises(ValueError, match="PPOConfig.ent_coef=nan"):
        PPOConfig(ent_coef=float("nan"))
    assert PPOConfig(lr=jnp.asarray(1e-3)).lr == jnp.asarray(1e-3)  # a scalar array is fine
    batch = SMALL.traced().batched(lr=jnp.full(3, 1e-3))  # the way to a batch of values
    assert batch.lr.shape == (3,)


# ------------------------------------------------------------------------ 5. memory ---
def test_a_population_that_cannot_fit_is_refused_with_the_largest_count(monkeypatch):
    monkeypatch.setenv("PUREJAXPPO_MEMORY_BYTES", str(200_000))  # less than one agent needs
    with pytest.raises(ValueError, match=r"need .* per agent.*at most about \d+ agents fit"):
        engine_for(SMALL.replace(lr=1e-3), mesh=False, progress_every=7)(
            *agent_inputs(SMALL, {}, [0, 1])[:2]
        )


@pytest.mark.slow
def test_a_population_too_big_for_one_pass_is_split_and_equals_one_program(monkeypatch):
    cfg = SMALL.replace(update_epochs=1)
    keys, hp, _ = agent_inputs(cfg, {}, list(range(6)))
    whole = engine_for(cfg, mesh=False)(keys, hp)
    need = engine_for(cfg, mesh=False).compiled(TRAIN, 6, keys, hp)
    from purejaxppo._memory import program_bytes

    total = program_bytes(need)
    temp = need.memory_analysis().temp_size_in_bytes
    # Room for the inputs and outputs and about three agents' temporaries, not six.
    monkeypatch.setenv("PUREJAXPPO_MEMORY_BYTES", str(int((total - temp * 2.5 / 6) / 0.8)))
    split_engine = Engine(cfg, mesh=False)
    split = split_engine(keys, hp)
    assert split_engine.groups[(TRAIN, 6)] < 6  # split into groups, in one program
    assert tree_close(split, whole, **ACROSS_SHAPES)
    solo = Engine(cfg, mesh=False, group_size=1)(keys, hp)  # one at a time: each agent alone
    assert tree_close(solo, whole, **ACROSS_SHAPES)
    again = Engine(cfg, mesh=False, group_size=1)(keys, hp)
    assert tree_equal(again, solo)  # one program, one batch shape: bitwise


def refusing_compiler(monkeypatch, widest: int):
    """Make the engine's compiler refuse, as a TPU's does, any program running more than
    ``widest`` agents at once (0: every program)."""
    real = Engine._compile

    def compile_(self, kind, num_agents, group, args):
        width = group or self.padded(num_agents) // self.num_devices
        if width > widest:
            raise RuntimeError(
                "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in "
                "memory space hbm. Used 92.8G of 15.75G hbm."
            )
        return real(self, kind, num_agents, group, args)

    monkeypatch.setattr(Engine, "_compile", compile_)


def test_a_program_the_compiler_refuses_for_memory_is_refused_in_one_line(monkeypatch):
    refusing_compiler(monkeypatch, widest=0)
    with pytest.raises(ValueError, match="one agent of this config does not fit the device"):
        Engine(SMALL, mesh=False)(*agent_inputs(SMALL, {}, [0, 1])[:2])  # a fresh engine


@pytest.mark.slow
def test_a_program_the_compiler_refuses_for_memory_is_split_into_groups(monkeypatch):
    cfg = SMALL.replace(update_epochs=1)
    keys, hp, _ = agent_inputs(cfg, {}, list(range(4)))
    whole = engine_for(cfg, mesh=False)(keys, hp)
    refusing_compiler(monkeypatch, widest=2)
    split_engine = Engine(cfg, mesh=False)
    split = split_engine(keys, hp)
    assert split_engine.groups[(TRAIN, 4)] == 2
    assert tree_close(split, whole, **ACROSS_SHAPES)


def test_metrics_that_cannot_fit_are_refused_before_compiling(
    monkeypatch, no_compiling, tmp_path, capsys
):
    monkeypatch.setenv("PUREJAXPPO_MEMORY_BYTES", str(10**9))
    big = SMALL.replace(total_timesteps=128 * 10**8)
    with pytest.raises(ValueError, match="metrics of 4 agent.*100,000,000 updates need"):
        sweep(big, seeds=4)
    monkeypatch.setenv("PUREJAXPPO_MEMORY_BYTES", str(10**7))
    with pytest.raises(ValueError, match="1000 agent.*host memory.*train at most \\d+ agents"):
        sweep(SMALL, seeds=1000)
    code, _, err = cli(capsys, "train", *SMALL_FLAGS, "--seeds", "1000", "--run-dir",
                       str(tmp_path / "r"))  # fmt: skip
    assert code == 2 and one_line(err) and "train at most" in err


def test_the_memory_budget_reads_the_host(monkeypatch):
    from purejaxppo._memory import available_bytes

    monkeypatch.delenv("PUREJAXPPO_MEMORY_BYTES", raising=False)
    assert 10**8 < available_bytes() < 10**14  # the host's, not a made-up figure
    monkeypatch.setenv("PUREJAXPPO_MEMORY_BYTES", "1234")
    assert available_bytes() == 1234


def test_resume_and_overwrite_together_are_refused(tmp_path, no_compiling):
    with pytest.raises(ValueError, match="give one of them"):
        sweep(SMALL, [0], run_dir=tmp_path, checkpoint_every=1, resume=True, overwrite=True)
