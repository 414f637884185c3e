"""The multi-host path for real: two JAX processes on localhost, 2 CPU devices each.

JAX's distributed runtime runs several processes on one host, each with its own (forced) CPU
devices, joined by a coordinator and CPU collectives (gloo). That is the code path of a
multi-host run — `jax.distributed.initialize`, inputs placed with `make_array_from_callback`
on a mesh spanning processes, results gathered with `process_allgather`, process 0 alone
writing the run directory — without a second machine. What it does not prove: a real network
between hosts, and GPUs (docs/guide.md#many-devices-many-hosts).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import SMALL

from purejaxppo import PPOConfig, pbt, sweep

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]

WORKER = Path(__file__).with_name("multiprocess_worker.py")
CARTPOLE = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=64,
                     update_epochs=2, total_timesteps=6 * 128)  # fmt: skip
PBT = dict(interval=2, seed=3, fraction=0.5, lr=(1e-4, 1e-2), ent_coef=(0.0, 0.05))
# Agents per device differ from the single-process run (another vmap width): equal to float
# rounding, as in tests/test_sharding.py; integer fields and lineages exactly.
TOL = dict(rtol=1e-4, atol=1e-5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def env(devices: int = 2) -> dict:
    return {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
            "JAX_PLATFORMS": "cpu"}  # fmt: skip


def two_processes(command, timeout: int = 800) -> list[subprocess.CompletedProcess]:
    """Start ``command(process_id, port)`` twice, wait for both, return both results."""
    port = free_port()
    procs = [
        subprocess.Popen(
            command(i, port), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        for i in range(2)
    ]
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
    for d in done:
        assert d.returncode == 0, d.stderr[-4000:]
    return done


def run_task(task: str, out: Path) -> list[dict]:
    two_processes(lambda i, port: [sys.executable, str(WORKER), str(i), str(port), task, str(out)])
    results = [dict(np.load(out / f"{task}-{i}.npz")) for i in range(2)]
    writes = [json.loads((out / f"{task}-{i}-writes.json").read_text()) for i in range(2)]
    assert writes[1] == [], writes[1]  # process 1 never writes the run directory
    return results, writes


def close(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind != "f":
        return np.array_equal(a, b)
    return np.allclose(a, b, equal_nan=True, **TOL)


def metrics_close(result: dict, metrics) -> bool:
    return all(close(result[f"metrics_{k}"], v) for k, v in metrics.columns().items())


def test_a_sweep_over_two_processes_equals_one_process_and_resumes_across_them(tmp_path):
    (results, _) = run_task("sweep", tmp_path)
    single = sweep(SMALL, seeds=2, lr=[1e-4, 3e-4, 1e-3], mesh=False)
    params = np.concatenate(
        [np.asarray(x).reshape(6, -1) for x in jax.tree.leaves(single.state.params)], 1
    )
    for r in results:  # both processes hold the whole gathered result
        assert metrics_close(r, single.metrics) and close(r["params"], params)
    stop, writes = run_task("checkpoint-stop", tmp_path)
    assert not stop[0]["finished"] and any("ckpt-" in w for w in writes[0])
    assert (tmp_path / "runs" / "sweep" / "sweep.json").exists()
    resumed, _ = run_task("checkpoint-resume", tmp_path)
    for r in resumed:
        assert r["finished"] and metrics_close(r, single.metrics)


def test_pbt_exploits_across_processes_as_on_one(tmp_path):
    results, _ = run_task("pbt", tmp_path)
    single = pbt(CARTPOLE, 6, mesh=False, **PBT)
    for r in results:
        np.testing.assert_array_equal(r["lineage"], single.lineage)
        assert (r["lineage"][:, 1:] != np.arange(6)[:, None]).sum() == 6  # 3 copies per step
        assert metrics_close(r, single.metrics) and close(r["hp_lr"], single.hyperparameters["lr"])
    resumed, _ = run_task("pbt-checkpoint", tmp_path)
    for r in resumed:
        assert not r["stopped"]
        np.testing.assert_array_equal(r["lineage"], single.lineage)
        assert metrics_close(r, single.metrics)


def test_a_tracked_sweep_logs_every_agent_from_process_0_only(tmp_path):
    results, _ = run_task("tracked", tmp_path)
    assert bool(results[0]["opened"]) and not bool(results[1]["opened"])
    rows = results[0]["rows"]  # (agent, update, entropy) of all 6 agents on 4 devices
    assert len(rows) == 6 * SMALL.num_updates and len(results[1]["rows"]) == 0
    entropy = results[0]["metrics_entropy"].reshape(6, -1)
    for agent, update, value in rows:
        assert np.float32(value) == entropy[int(agent), int(update) - 1]
    single = sweep(SMALL, seeds=2, lr=[1e-4, 3e-4, 1e-3], mesh=False)
    assert metrics_close(results[0], single.metrics)  # tracked: the same training


def test_the_documented_distributed_cli_trains_one_run_directory(tmp_path):
    run_dir = tmp_path / "runs" / "cli"
    flags = ["--maze", "medium", "--num-envs", "4", "--num-steps", "32", "--minibatch-size",
             "64", "--update-epochs", "2", "--total-timesteps", "384", "--no-progress",
             "--no-gif", "--eval-episodes", "0", "--seeds", "6",
             "--run-dir", str(run_dir)]  # fmt: skip

    def command(i, port):
        return [sys.executable, "-m", "purejaxppo", "train", *flags, "--distributed",
                "--coordinator-address", f"localhost:{port}", "--num-processes", "2",
                "--process-id", str(i)]  # fmt: skip

    done = two_processes(command)
    # Gloo's own log lines ("[Gloo] Rank 1 is connected to 1 peer ranks. ..."), printed from
    # several threads, can interleave mid-line (leaving a line of its content, or an empty
    # one where two of its newlines meet), so a line is Gloo's by its content too.
    ours = [
        x for x in done[1].stdout.splitlines()
        if x.strip() and not x.startswith("[Gloo]") and "peer ranks" not in x
    ]  # fmt: skip
    assert "4 device(s)" in done[0].stdout and ours == [], ours  # process 1 prints nothing
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["finished"] is True
    single = sweep(SMALL, seeds=6, mesh=False)
    metrics = np.load(run_dir / "metrics.npz")
    assert close(metrics["entropy"].reshape(6, -1), single.metrics.entropy.reshape(6, -1))
    assert not list(run_dir.glob(".*.tmp-*"))  # no half-written file of either process
