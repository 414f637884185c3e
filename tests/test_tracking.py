"""Experiment tracking: every agent's per-update values reach W&B and TensorBoard through the
one progress callback, are read back from the files each backend wrote, and a failing
tracker never stops or changes a run."""

import importlib.util
import os
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, SMALL, cli, one_line, read_tensorboard, tree_close, tree_equal

from purejaxppo import make_train, pbt, resume_sweep, sweep
from purejaxppo._agents import agent_inputs
from purejaxppo._engine import Engine
from purejaxppo.stats import final_scores
from purejaxppo.tracking import TensorBoard, TrackingWarning, WandB

pytestmark = pytest.mark.timeout(900)

needs_wandb = pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="pip install '.[wandb]'"
)

SERIES = ("episode_return", "entropy", "value_loss", "approx_kl", "clip_frac", "grad_norm")


def offline(tmp_path, **kw) -> WandB:
    """Offline W&B into ``tmp_path/wb``, every update (tests read each one back)."""
    return WandB(project="tests", mode="offline", dir=str(tmp_path / "wb"), every=1, **kw)


def read_wandb(tmp_path) -> dict:
    from wandb_reader import read_runs

    return {r["name"]: r for r in read_runs(tmp_path / "wb")}


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_the_progress_callback_carries_every_agents_values():
    seen = []
    cfg = SMALL
    keys, hp, _ = agent_inputs(cfg, {"lr": np.array([1e-3, 3e-4, 1e-4])}, [0, 1])
    engine = Engine(cfg, mesh=False, progress=seen.append, progress_agents=True)
    _, metrics = engine(keys, hp)
    jax.effects_barrier()
    assert [int(p.update) for p in seen] == list(range(1, cfg.num_updates + 1))
    for u, p in enumerate(seen):  # the values the program returned, from the same program
        for name, series in metrics.columns().items():
            np.testing.assert_array_equal(np.asarray(p.agents[name]), np.asarray(series)[:, u])
        np.testing.assert_array_equal(np.asarray(p.agents["hp/lr"]), np.asarray(hp.lr))
    plain = []
    Engine(cfg, mesh=False, progress=plain.append)(keys, hp)
    jax.effects_barrier()
    assert plain[0].agents is None  # opt-in: the progress bar's callback stays small


@needs_wandb
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_a_sweep_logs_one_wandb_run_per_agent_and_a_summary(tmp_path):
    res = sweep(SMALL, seeds=2, lr=[1e-3, 3e-4], tracker=offline(tmp_path, tags=("t",)))
    runs = read_wandb(tmp_path)
    names = {f"lr={lr:.4g} seed={s}" for lr in (1e-3, 3e-4) for s in (0, 1)}
    assert set(runs) == names | {next(n for n in runs if n.endswith("/summary"))}
    for name in names:
        r = runs[name]
        lr, seed = float(name.split()[0][3:]), int(name[-1])
        agent = res.agent(lr=lr, seed=seed)
        assert r["job_type"] == "sweep" and r["tags"] == ["t"]
        assert r["config"]["lr"] == pytest.approx(lr) and r["config"]["seed"] == seed
        assert r["config"]["coords"] == {"lr": pytest.approx(lr), "seed": seed}
        assert r["config"]["num_envs"] == SMALL.num_envs  # the agent's full config
        assert r["config"]["versions"]["jax"] == jax.__version__
        assert "requirements.txt" not in r["files"]  # opt-in: WandB(requirements=True)
        history = [h for h in r["history"] if "update" in h]
        assert [h["update"] for h in history] == list(range(1, SMALL.num_updates + 1))
        assert [h["env_steps"] for h in history] == [
            u * SMALL.batch_size for u in range(1, SMALL.num_updates + 1)
        ]
        for name_ in SERIES:  # float32 values, written as JSON floats: exactly them
            want = np.asarray(getattr(agent.metrics, name_))
            got = np.array([h.get(name_, np.nan) for h in history], np.float32)
            np.testing.assert_array_equal(got, want)
        assert "hp/lr" not in history[0]  # a sweep's hyperparameters are its config
        # from the program's start, so the first callback's updates have a rate too
        assert all(h["steps_per_s"] > 0 for h in history)
    groups = {r["group"] for r in runs.values()}
    assert len(groups) == 1  # one group: the sweep
    (summary,) = [r for n, r in runs.items() if n.endswith("/summary")]
    assert summary["job_type"] == "summary"
    assert summary["summary"]["summary/nrows"] == 2  # the table: one row per setting


@needs_wandb
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_a_resumed_sweep_continues_the_same_wandb_runs(tmp_path):
    cfg = SMALL.replace(total_timesteps=SMALL.batch_size * 4)
    tracker = offline(tmp_path)
    run_dir = tmp_path / "run"
    first = sweep(cfg, seeds=2, run_dir=run_dir, checkpoint_every=2, stop_at=cfg.batch_size * 2,
                  tracker=tracker)  # fmt: skip
    assert not first.finished
    ids = {n: r["id"] for n, r in read_wandb(tmp_path).items()}
    assert len(ids) == 2  # stopped early: no summary run yet
    done = resume_sweep(run_dir, tracker=tracker)
    whole = sweep(cfg, seeds=2, tracker=Quiet())  # the same (tracked) program, uninterrupted
    assert tree_equal(done.metrics, whole.metrics)
    from wandb_reader import read_runs

    runs = read_runs(tmp_path / "wb")
    by_id = {}
    for r in runs:
        by_id.setdefault(r["id"], []).extend(h["update"] for h in r["history"] if "update" in h)
    for name, run_id in ids.items():  # the same W&B run, continued: updates 1..4 in all
        assert sorted(by_id[run_id]) == [1, 2, 3, 4], name
    assert any(r["name"].endswith("/summary") for r in runs)


@needs_wandb
@pytest.mark.slow  # over ~6 s: the fast tier stays under 5 minutes
def test_requirements_lists_the_packages_in_the_groups_first_run(tmp_path):
    sweep(SMALL, seeds=2, tracker=offline(tmp_path, requirements=True))
    runs = read_wandb(tmp_path)
    assert "requirements.txt" in runs["seed=0"]["files"]
    assert "requirements.txt" not in runs["seed=1"]["files"]  # once per group
    req = Path(runs["seed=0"]["path"]).parent / "files" / "requirements.txt"
    assert f"jax=={jax.__version__}" in req.read_text().split()


@needs_wandb
@pytest.mark.slow  # over ~6 s: the fast tier stays under 5 minutes
def test_wandb_mode_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    make_train(SMALL, tracker=WandB(project="tests", dir=str(tmp_path / "wb"), every=1))(
        jax.random.PRNGKey(0)
    )
    (run,) = [r for r in read_wandb(tmp_path).values() if r["job_type"] == "train"]
    assert len([h for h in run["history"] if "update" in h]) == SMALL.num_updates


def test_tensorboard_gets_every_agent_through_the_same_path(tmp_path):
    res = sweep(SMALL, seeds=2, tracker=TensorBoard(str(tmp_path / "tb"), every=1))
    for seed in (0, 1):
        scalars = read_tensorboard(tmp_path / "tb" / f"seed={seed}")
        steps = [s for s, _ in scalars["entropy"]]
        assert steps == [u * SMALL.batch_size for u in range(1, SMALL.num_updates + 1)]
        for name in SERIES:  # NaN (no episode ended) is not written
            got = dict(scalars.get(name, []))
            got = np.array([got.get(s, np.nan) for s in steps], np.float32)
            np.testing.assert_array_equal(got, np.asarray(getattr(res.metrics, name))[seed])
    aggregate = read_tensorboard(tmp_path / "tb" / "all agents")
    assert len(aggregate["entropy/mean"]) == SMALL.num_updates
    assert "summary" in {p.name for p in (tmp_path / "tb").iterdir()}


@needs_wandb
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_pbt_logs_schedules_and_lineage(tmp_path):
    cfg = SMALL.replace(total_timesteps=SMALL.batch_size * 4)
    res = pbt(cfg, 4, interval=2, lr=(1e-4, 1e-2), tracker=offline(tmp_path))
    runs = read_wandb(tmp_path)
    for i in range(4):
        history = [h for h in runs[f"agent={i}"]["history"] if "update" in h]
        got = np.array([h["hp/lr"] for h in history], np.float32)
        np.testing.assert_array_equal(got, res.hyperparameters["lr"][i])
    (summary,) = [r for n, r in runs.items() if n.endswith("/summary")]
    assert summary["summary"]["lineage/nrows"] == 4 * res.lineage.shape[1]


class Quiet:
    """A tracker that keeps nothing: a tracked run's program, for bitwise comparisons."""

    name, every = "quiet", 1

    def check(self):
        pass

    def open(self, run, stored):
        return self

    def state(self):
        return {}

    def log(self, update, rows):
        pass

    def finish(self, finished):
        pass


class Slow(Quiet):
    """A tracker whose writes cost ``costs`` of CPU (the last one for every later write),
    recording which updates it got."""

    name, every = "slow", "auto"

    def __init__(self, *costs: float):
        self.costs = costs or (0.02,)
        self.updates = []

    def log(self, update, rows):
        cost = self.costs[min(len(self.updates), len(self.costs) - 1)]
        start = time.thread_time()
        while time.thread_time() - start < cost:
            pass
        self.updates.append(update)

    def finish(self, finished):
        self.finished = finished


@pytest.mark.slow  # over ~6 s: the fast tier stays under 5 minutes
def test_auto_writes_fewer_updates_when_writing_costs_more_than_its_share():
    cfg = SMALL.replace(total_timesteps=SMALL.batch_size * 40)
    slow = Slow()
    res = sweep(cfg, seeds=2, tracker=slow)
    assert slow.updates[0] == 1 and slow.updates[-1] == cfg.num_updates  # the last: always
    assert len(slow.updates) < cfg.num_updates / 2  # 20 ms a write, ~ms an update: strided
    assert slow.updates == sorted(set(slow.updates))
    want = final_scores(np.asarray(res.metrics.episode_return)).reshape(-1)
    np.testing.assert_array_equal(np.array(slow.finished.scores, float), want)


class Elsewhere(Slow):
    """Writes free in the writer thread, but 20 ms each of a backend's own process (as W&B's
    service serializes and writes what `log` hands it), reported by ``cpu_elsewhere``."""

    def __init__(self):
        super().__init__(0.0)
        self.cpu = 0.0

    def log(self, update, rows):
        super().log(update, rows)
        self.cpu += 0.02

    def cpu_elsewhere(self):
        return self.cpu


def test_auto_counts_the_cpu_a_backend_spends_in_its_own_process():
    cfg = SMALL.replace(total_timesteps=SMALL.batch_size * 40)
    elsewhere = Elsewhere()
    sweep(cfg, seeds=2, tracker=elsewhere)
    assert elsewhere.updates[-1] == cfg.num_updates
    assert len(elsewhere.updates) < cfg.num_updates / 2


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_the_cpu_of_a_process_is_read_from_proc():
    from purejaxppo.tracking._wandb import _proc_stat

    name, parent, cpu = _proc_stat(os.getpid())
    assert name == Path("/proc/self/comm").read_text().strip()
    assert parent == os.getppid() and cpu > 0
    assert _proc_stat(2**31 - 1) is None  # no such process


def test_auto_does_not_take_a_first_write_s_setup_for_its_rate():
    # W&B's first log in a process imports for ~50 ms, its later ones take ~0.2 ms. A rate
    # from a 0.3 s first write gives a stride of hundreds of ms-long updates: the first and
    # the last written; the later writes' rate (row building only) is every update or
    # nearly (how near depends on the machine's update time against 1 % of it)
    cfg = SMALL.replace(total_timesteps=SMALL.batch_size * 40)
    slow = Slow(0.3, 0.0)
    sweep(cfg, seeds=2, tracker=slow)
    assert slow.updates[0] == 1 and slow.updates[-1] == cfg.num_updates
    assert len(slow.updates) >= cfg.num_updates // 4, slow.updates


class Broken(Quiet):
    """A tracker whose every write fails, as a full disk would make it."""

    name, every = "broken", 1

    def __init__(self, at: str):
        self.at = at

    def open(self, run, stored):
        if self.at == "open":
            raise OSError(28, "No space left on device")
        return self

    def log(self, update, rows):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("at", ["open", "log"])
def test_a_failing_tracker_warns_once_and_changes_nothing(at):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracked = sweep(SMALL, seeds=2, tracker=Broken(at))
    said = [w for w in caught if issubclass(w.category, TrackingWarning)]
    assert len(said) == 1 and "No space left on device" in str(said[0].message)
    assert "training goes on" in str(said[0].message)
    assert tree_equal(tracked.metrics, sweep(SMALL, seeds=2, tracker=Quiet()).metrics)
    # untracked: another program (no callback reads the agents' values), so to rounding
    assert tree_close(tracked.metrics, sweep(SMALL, seeds=2).metrics, **ACROSS_SHAPES)


def test_a_missing_package_is_one_line_before_compiling(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'purejaxppo\[wandb\]'"):
        sweep(SMALL, tracker=WandB(project="p"))
    before = Engine.total_compile_seconds
    code, _, err = cli(capsys, "train", "--maze", "medium", "--wandb", "p", "--run-dir",
                       tmp_path / "r")  # fmt: skip
    assert code == 2 and one_line(err) and "--wandb" in err and "purejaxppo[wandb]" in err
    assert Engine.total_compile_seconds == before and not (tmp_path / "r").exists()


@needs_wandb
def test_checking_for_wandb_does_not_import_it():
    import subprocess

    code = (
        "import sys; from purejaxppo.tracking import WandB, TensorBoard; WandB().check(); "
        "TensorBoard().check(); print(sorted({'wandb', 'tensorboardX'} & set(sys.modules)))"
    )  # the import (~0.4 s) is the writer thread's, beside the compile
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[-2] == "[]"


def test_bad_tracker_arguments_are_one_line():
    with pytest.raises(TypeError, match="tracker="):
        sweep(SMALL, tracker="wandb")
    with pytest.raises(ValueError, match="mode="):
        WandB(mode="sometimes")
    with pytest.raises(ValueError, match="requirements="):
        WandB(requirements="yes")
    with pytest.raises(ValueError, match=r"TensorBoard\(log_dir=\.\.\.\)"):
        sweep(SMALL, tracker=TensorBoard())  # its default place is a run directory
    train = make_train(SMALL, tracker=TensorBoard("unused"))
    with pytest.raises(ValueError, match="sweep"):
        jax.vmap(train)(jax.random.split(jax.random.PRNGKey(0), 2))


@needs_wandb
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_the_cli_logs_a_sweep_and_resume_continues_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["--maze", "medium", "--num-envs", "4", "--num-steps", "32", "--minibatch-size",
            "64", "--update-epochs", "2", "--total-timesteps", "512", "--sweep.lr", "1e-3",
            "3e-4", "--seeds", "2", "--no-progress", "--eval-episodes", "2"]  # fmt: skip
    code, out, err = cli(capsys, "sweep", *args, "--run-dir", run_dir, "--checkpoint-every", "2",
                         "--stop-at", "256", "--wandb", "tests", "--wandb-mode", "offline",
                         "--wandb-group", "g1", "--wandb-requirements", "--tensorboard",
                         "--track-every", "1")  # fmt: skip
    assert code == 0, err
    code, out, err = cli(capsys, "sweep", "--resume", run_dir, "--no-progress")
    assert code == 0, err
    from wandb_reader import read_runs

    runs = read_runs(run_dir)
    agents = {r["id"] for r in runs if r["job_type"] == "sweep"}
    assert len(agents) == 4  # --resume without --wandb continued the same four W&B runs
    assert {r["group"] for r in runs} == {"g1"}
    # --wandb-requirements: the group's first run, in both sittings (kept for --resume)
    listed = [r["id"] for r in runs if "requirements.txt" in r["files"]]
    assert len(listed) == 2 and len(set(listed)) == 1
    (summary,) = [r for r in runs if r["job_type"] == "summary"]
    assert {"summary/nrows", "curves/path"} <= set(summary["summary"])
    assert summary["summary"]["agent/_type"] == "video-file"  # agent.gif, as a video
    assert (run_dir / "tb" / "lr=0.001 seed=0".replace(" ", "_")).is_dir()


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_the_cli_pbt_logs_every_agent_and_its_schedule_to_tensorboard(tmp_path, capsys):
    run_dir = tmp_path / "pbt"
    code, _, err = cli(capsys, "pbt", "--maze", "medium", "--num-envs", "4", "--num-steps", "32",
                       "--minibatch-size", "64", "--update-epochs", "1", "--total-timesteps",
                       "512", "--population", "3", "--interval", "2", "--pbt.lr", "1e-4", "1e-2",
                       "--no-progress", "--run-dir", run_dir, "--tensorboard")  # fmt: skip
    assert code == 0, err
    lr = np.load(run_dir / "metrics.npz")["hp_lr"]  # (agent, update): each one's schedule
    batch = 4 * 32
    for i in range(3):
        written = sorted(read_tensorboard(run_dir / "tb" / f"agent={i}")["hp/lr"])
        updates = [step // batch for step, _ in written]  # every="auto": some, the last always
        assert updates[-1] == 4 and updates == sorted(set(updates))
        got = np.array([v for _, v in written], np.float32)
        np.testing.assert_array_equal(got, lr[i][np.array(updates) - 1])
    assert (run_dir / "tb" / "summary").is_dir()
