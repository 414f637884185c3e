"""One process of a 2-process JAX run on localhost (tests/test_multiprocess.py starts two).

    python multiprocess_worker.py PROCESS_ID PORT TASK OUT_DIR

Each process has 2 forced CPU devices (XLA_FLAGS, set by the test) and joins the other through
`jax.distributed.initialize` (CPU collectives: gloo); TASK runs on the 4 devices of the two
processes. Results go to ``OUT_DIR/<task>-<process id>.npz`` and every file this process wrote
or renamed into a run directory to ``OUT_DIR/<task>-<process id>-writes.json``.
"""

import builtins
import json
import os
import sys

import jax
import numpy as np

pid, port, task, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)
assert jax.device_count() == 4 and jax.local_device_count() == 2, jax.devices()

RUNS = os.path.join(out, "runs")
writes = []  # every write into RUNS by this process: renames and files opened for writing
_replace, _open = os.replace, builtins.open


def replace(src, dst, *args, **kwargs):
    if str(dst).startswith(RUNS):
        writes.append(str(dst))
    return _replace(src, dst, *args, **kwargs)


def open_(file, mode="r", *args, **kwargs):
    if isinstance(file, str | os.PathLike) and str(file).startswith(RUNS):
        if any(c in mode for c in "wax+"):
            writes.append(str(file))
    return _open(file, mode, *args, **kwargs)


os.replace, builtins.open = replace, open_

from purejaxppo import PPOConfig, pbt, resume_pbt, resume_sweep, sweep  # noqa: E402

SMALL = PPOConfig(maze="medium", num_envs=4, num_steps=32, minibatch_size=64,
                  update_epochs=2, total_timesteps=384)  # fmt: skip
CARTPOLE = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=64,
                     update_epochs=2, total_timesteps=6 * 128)  # fmt: skip
AXES = dict(lr=[1e-4, 3e-4, 1e-3])  # 3 settings x 2 seeds = 6 agents on 4 devices
PBT = dict(interval=2, seed=3, fraction=0.5, lr=(1e-4, 1e-2), ent_coef=(0.0, 0.05))


def save(name: str, **arrays) -> None:
    np.savez(os.path.join(out, f"{name}-{pid}.npz"), **arrays)


def metrics_of(res) -> dict:
    return {f"metrics_{k}": np.asarray(v) for k, v in res.metrics.columns().items()}


if task == "sweep":
    res = sweep(SMALL, seeds=2, **AXES)
    save("sweep", params=np.concatenate(
        [np.asarray(x).reshape(6, -1) for x in jax.tree.leaves(res.state.params)], 1),
        **metrics_of(res))  # fmt: skip
elif task == "checkpoint-stop":
    run = os.path.join(RUNS, "sweep")
    res = sweep(SMALL, seeds=2, run_dir=run, checkpoint_every=1, should_stop=lambda: True, **AXES)
    save("checkpoint-stop", finished=np.asarray(res.finished))
elif task == "checkpoint-resume":
    res = resume_sweep(os.path.join(RUNS, "sweep"))
    save("checkpoint-resume", finished=np.asarray(res.finished), **metrics_of(res))
elif task == "pbt":
    res = pbt(CARTPOLE, 6, **PBT)
    save("pbt", lineage=res.lineage, hp_lr=res.hyperparameters["lr"], **metrics_of(res))
elif task == "pbt-checkpoint":
    run = os.path.join(RUNS, "pbt")
    stopped = pbt(CARTPOLE, 6, run_dir=run, checkpoint_every=1, should_stop=lambda: True, **PBT)
    res = resume_pbt(run)
    save("pbt-checkpoint", stopped=np.asarray(stopped.finished), lineage=res.lineage,
         **metrics_of(res))  # fmt: skip
elif task == "tracked":

    class Recording:  # a tracker that keeps what it is given (tracking.Tracker)
        name, every, opened, rows = "recording", 1, False, []

        def check(self):
            pass

        def open(self, run, stored):
            self.opened = True
            return self

        def state(self):
            return {}

        def log(self, update, rows):
            self.rows += [(a.index, update, row["entropy"]) for a, row in rows]

        def finish(self, finished):
            self.scores = finished.scores

    tracker = Recording()
    res = sweep(SMALL, seeds=2, tracker=tracker, **AXES)
    rows = np.asarray(tracker.rows).reshape(-1, 3)
    save("tracked", opened=np.asarray(tracker.opened), rows=rows, **metrics_of(res))
else:
    raise SystemExit(f"unknown task {task!r}")

with _open(os.path.join(out, f"{task}-{pid}-writes.json"), "w") as f:
    json.dump(writes, f)
