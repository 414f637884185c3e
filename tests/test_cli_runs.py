"""What a new user meets on the command line, run in this process (`main(argv)`): evaluating a
PBT run, resuming a finished run, refusals that leave nothing behind, what the CLI says while
it works, and run directories written by an earlier release (tests/data/runs-0dd128a).

Tests that train (end-to-end runs) are in the slow tier; the refusals, the messages and the
readers of committed run directories are in the fast one."""

import json
import re
import shutil
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from conftest import cli, compilation_cache_off, needs_gymnax, one_line

from purejaxppo._engine import Engine
from purejaxppo.cli import main

DATA = Path(__file__).parent / "data" / "runs-0dd128a"

#: A few seconds to compile, well under one to run: CartPole, 2 updates per agent.
TINY = [
    "--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--minibatch-size", "32",
    "--total-timesteps", "256", "--update-epochs", "1", "--mlp-widths", "8", "--no-progress",
]  # fmt: skip


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


#: 3 agents, 3 generations of one update each (PBT's own checkpoint after each).
PBT_ARGS = ["pbt", *TINY, "--total-timesteps", "384", "--population", "3", "--interval", "1",
            "--pbt.lr", "1e-4", "1e-3"]  # fmt: skip


@pytest.fixture
def no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled before refusing bad input")

    monkeypatch.setattr(Engine, "compiled", refuse)


@pytest.fixture(scope="module")
def pbt_dir(tmp_path_factory):
    """A finished PBT run of 3 agents, 3 generations, written by `purejaxppo pbt`."""
    run_dir = tmp_path_factory.mktemp("pbt") / "run"
    try:
        code = main(PBT_ARGS + ["--run-dir", str(run_dir)])
    finally:
        compilation_cache_off()
    assert code == 0
    return run_dir


# ------------------------------------------------------------------ 1. eval of a PBT run ---
@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
def test_eval_of_a_pbt_run_scores_every_agent_with_its_final_hyperparameters(pbt_dir, capsys):
    import jax

    from purejaxppo import evaluate
    from purejaxppo.rundir import load_agents, read_run

    meta = read_run(pbt_dir)
    assert meta["kind"] == "pbt" and meta["axes"] == {"agent": [0, 1, 2]}
    with np.load(pbt_dir / "metrics.npz") as npz:  # the schedule's last value, per agent
        np.testing.assert_array_equal(meta["values"]["lr"], npz["hp_lr"][:, -1])
    # where it ran, recorded and said (a PBT run writes its own config.json)
    assert meta["ran_on"]["backend"] == jax.default_backend() and "started_on" not in meta
    assert f"Trained on {jax.default_backend()} (" in (pbt_dir / "summary.md").read_text()
    code, out, err = cli(capsys, "eval", pbt_dir, "--episodes", "3")
    assert code == 0, err
    assert f"trained on {jax.default_backend()} (" in out
    rows = [line.split(" | ") for line in out.splitlines() if line[:1].isdigit()]
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert [float(r[1]) for r in rows] == pytest.approx(meta["values"]["lr"], rel=1e-3)
    # the table's returns are the agents' own, evaluated directly
    ((params, norm),) = load_agents(pbt_dir)
    ev = evaluate(meta["config"], params, jax.random.PRNGKey(12_345), 3, obs_norm=norm)
    mean = np.asarray(ev.episode_return).mean(-1)
    assert [float(r[2]) for r in rows] == pytest.approx(mean, abs=5e-4)


@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
def test_a_pbt_agent_loads_as_a_policy(pbt_dir):
    import jax

    from purejaxppo import load_policy
    from purejaxppo.envs import make_env
    from purejaxppo.rundir import load_agents, read_run

    policy = load_policy(pbt_dir, agent=2)
    ((params, _),) = load_agents(pbt_dir)
    first = np.asarray(jax.tree.leaves(policy.network)[0])
    assert (first == np.asarray(jax.tree.leaves(params)[0])[2]).all()  # agent 2's own
    env = make_env(read_run(pbt_dir)["config"])
    _, obs, mask = env.reset(jax.random.PRNGKey(0))
    assert policy(obs, mask).shape == ()


@needs_gymnax  # the run is CartPole's
def test_eval_of_a_pbt_run_from_an_earlier_release_reads_its_final_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "pbt"
    shutil.copytree(DATA / "pbt", run_dir)
    assert not (run_dir / "params.eqx").exists()  # that release wrote none
    code, out, err = cli(capsys, "eval", run_dir, "--episodes", "2")
    assert code == 0, err
    rows = [line.split(" | ") for line in out.splitlines() if line[:1].isdigit()]
    with np.load(run_dir / "metrics.npz") as npz:
        final_lr = npz["hp_lr"][:, -1]
    assert [float(r[1]) for r in rows] == pytest.approx(final_lr, rel=1e-3)


# ------------------------------------------------------------ 3. resume of a finished run ---
@pytest.mark.parametrize(("command", "name"), [("train", "train-finished"), ("pbt", "pbt")])
def test_resume_of_a_finished_run_says_so_and_changes_nothing(
    tmp_path, capsys, no_compiling, command, name
):
    run_dir = tmp_path / name
    shutil.copytree(DATA / name, run_dir)
    before = snapshot(run_dir)
    code, out, err = cli(capsys, command, "--resume", run_dir)
    assert code == 0 and not err
    assert "finished" in out and "nothing changed" in out and f"eval {run_dir}" in out
    assert snapshot(run_dir) == before


def test_resume_of_a_pbt_run_with_train_names_the_right_command(tmp_path, capsys, no_compiling):
    code, _, err = cli(capsys, "train", "--resume", DATA / "pbt")
    assert code == 2 and one_line(err) and "purejaxppo pbt --resume" in err


# ---------------------------------------------------- 4, 7. refusals leave no directory ---
@pytest.mark.parametrize(
    "args",
    [
        ["train", "--seeds", "100000000"],
        ["sweep", "--search", "random", "--num-samples", "0", "--sweep.lr", "1e-4", "1e-3"],
        ["sweep", "--num-samples", "3", "--sweep.lr", "1e-4", "1e-3"],
        ["pbt", "--env", "CartPole-v1", "--population", "10000000", "--pbt.lr", "1e-4", "1e-3"],
        ["train", "--env", "NoSuchEnv-v0"],
    ],
    ids=["seeds", "num-samples-0", "num-samples-grid", "population", "env"],
)
def test_a_refused_run_writes_nothing_and_refuses_in_seconds(tmp_path, capsys, no_compiling, args):
    run_dir = tmp_path / "run"
    t0 = time.perf_counter()
    code, out, err = cli(capsys, *args, "--run-dir", run_dir)
    seconds = time.perf_counter() - t0
    assert code == 2 and one_line(err), err
    assert not out  # not even the banner
    assert not run_dir.exists()
    assert seconds < 10, seconds  # a count far too large is refused from its size alone


def test_memory_refusal_names_the_count_that_fits(capsys, no_compiling, tmp_path):
    code, _, err = cli(capsys, "train", "--seeds", "100000000", "--run-dir", tmp_path / "r")
    assert code == 2 and "100000000 agent(s)" in err and "train at most" in err


def test_a_late_failure_removes_the_directory_its_claim_made(tmp_path):
    from purejaxppo.rundir._lock import claim

    made = tmp_path / "new"
    with pytest.raises(RuntimeError), claim(made, "new"):
        (made / "sweep.json").write_text("{}")  # a description only: nothing trained
        raise RuntimeError("refused after compiling")
    assert not made.exists()
    kept = tmp_path / "trained"
    with pytest.raises(RuntimeError), claim(kept, "new"):
        (kept / "ckpt-00000001.eqx").write_bytes(b"x")  # a checkpoint is never thrown away
        raise RuntimeError("failed mid-run")
    assert (kept / "ckpt-00000001.eqx").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(RuntimeError), claim(existing, "new"):
        raise RuntimeError("refused")
    assert existing.is_dir()  # not ours to remove


# ----------------------------------------------------------- 6. what the CLI says, GIFs ---
@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
def test_train_says_what_it_is_doing_and_records_the_resolved_maze(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, out, err = cli(
        capsys, "train", "--num-envs", "4", "--num-steps", "64", "--minibatch-size", "64",
        "--total-timesteps", "512", "--update-epochs", "1", "--eval-episodes", "2",
        "--run-dir", run_dir,
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    said = [next(i for i, s in enumerate(lines) if s.startswith(p))
            for p in ("purejaxppo train: Maze-v0 maze=medium", "compiling", "evaluating 1 agent",
                      "drawing the GIF", "summary")]  # fmt: skip
    assert said == sorted(said)  # in the order they happen
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["config"]["maze"] == "medium"  # what the banner said, not null
    assert (run_dir / "agent.gif").stat().st_size > 0


def test_maze_gif_frames_show_the_states_walls_agent_and_target():
    import jax

    from purejaxppo import PPOConfig
    from purejaxppo._figures import _MAZE_COLOURS, _maze_frame
    from purejaxppo.envs import make_env

    env = make_env(PPOConfig(maze="medium"))
    state, _ = jax.jit(env.env.reset)(jax.random.PRNGKey(3))
    cell = 24
    image = _maze_frame(state, cell)
    walls = np.asarray(state.walls)
    assert image.shape == (walls.shape[0] * cell, walls.shape[1] * cell, 3)
    centre = image[cell // 2 :: cell, cell // 2 :: cell]  # one pixel per cell
    agent = (int(state.agent_position.row), int(state.agent_position.col))
    target = (int(state.target_position.row), int(state.target_position.col))
    for r, c in np.ndindex(*walls.shape):
        kind = 3 if (r, c) == agent else 2 if (r, c) == target else int(walls[r, c])
        assert (centre[r, c] == _MAZE_COLOURS[kind]).all(), (r, c)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_a_long_episode_gif_stops_at_the_cap_and_says_the_episode_length(monkeypatch):
    import jax

    from purejaxppo import PPOConfig
    from purejaxppo._distributions import policy_distribution
    from purejaxppo._evaluate import Policy
    from purejaxppo._figures import write_gif
    from purejaxppo._ppo import init_state
    from purejaxppo.envs import JumanjiEnv, make_env

    cfg = PPOConfig(env="SlidingTilePuzzle-v0", time_limit=12)  # ends at the limit
    env = make_env(cfg)
    policy = Policy(init_state(cfg, env, jax.random.PRNGKey(0)).params,
                    policy_distribution(cfg, env), None)  # fmt: skip
    drawn = []
    monkeypatch.setattr(type(env.env), "animate", lambda self, states, **kw: drawn.append(states))
    assert isinstance(env, JumanjiEnv)
    said = []
    frames = write_gif(Path("unused.gif"), cfg, policy, jax.random.PRNGKey(1), max_frames=5,
                       log=said.append)  # fmt: skip
    assert frames == 5 and len(drawn[0]) == 5
    assert len(said) == 1 and "the first 4 of the episode's" in said[0]


@needs_gymnax
def test_a_run_without_success_or_renderer_says_so_in_one_line(tmp_path, capsys):
    """gymnax's CartPole defines no success and has no renderer: the run says both, once,
    instead of a silent "n/a" and a missing GIF."""
    code, out, err = cli(capsys, "train", *TINY, "--run-dir", tmp_path / "r")
    assert code == 0, err
    said = [line for line in (out + err).splitlines() if line.startswith("CartPole-v1: ")]
    assert said == [
        "CartPole-v1: no success rate (the env defines none) and no agent.gif (gymnax has no "
        "renderer)."
    ]
    assert not (tmp_path / "r" / "agent.gif").exists()


# ------------------------------------------------------ 8. names from other libraries ---
def test_an_unknown_name_labels_each_close_match_with_its_library(capsys, no_compiling):
    code, _, err = cli(capsys, "train", "--env", "Cartpole-v1")
    assert code == 2 and one_line(err)
    assert "no environment of that name" in err and "'CartPole-v1' (gymnax)" in err


# ---------------------------------------------------------- 9. an interrupted run ---
@pytest.mark.parametrize("command", [["eval"], ["train", "--resume"], ["pbt", "--resume"]])
def test_a_directory_that_is_not_there_is_named(tmp_path, capsys, no_compiling, command):
    code, _, err = cli(capsys, *command, tmp_path / "nowhere")
    assert code == 2 and one_line(err) and "nowhere: no such directory" in err
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "empty").mkdir()
    code, _, err = cli(capsys, *command, tmp_path / "empty")
    assert code == 2 and one_line(err) and "is this a purejaxppo run directory?" in err


def test_eval_of_an_interrupted_run_says_how_to_finish_it(tmp_path, capsys, no_compiling):
    code, _, err = cli(capsys, "eval", DATA / "sweep-stopped")
    assert code == 2 and one_line(err)
    assert "interrupted sweep run" in err and "update 2 of 4" in err
    assert f"purejaxppo sweep --resume {DATA / 'sweep-stopped'}" in err


@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
def test_an_interrupted_run_of_an_earlier_release_resumes_and_then_evaluates(tmp_path, capsys):
    run_dir = tmp_path / "sweep"
    shutil.copytree(DATA / "sweep-stopped", run_dir)
    code, _, err = cli(capsys, "sweep", "--resume", run_dir, "--no-progress", "--no-gif",
                       "--eval-episodes", "0")  # fmt: skip
    assert code == 0, err
    meta = json.loads((run_dir / "config.json").read_text())
    assert meta["finished"] and meta["kind"] == "sweep"
    with np.load(run_dir / "metrics.npz") as npz:
        returns = npz["episode_return"]  # (lr, seed, update)
        assert returns.shape == (2, 2, 4) and np.isfinite(npz["value_loss"]).all()
    code, out, err = cli(capsys, "eval", run_dir, "--episodes", "2")
    assert code == 0 and len([s for s in out.splitlines() if s[:1].isdigit()]) == 4


# ---------------------------------------------------------------------- 10. figures ---
@pytest.fixture
def titles_and_legends(monkeypatch):
    """What each figure drawn in the test says: its axes' titles and legend labels."""
    from matplotlib.axes import Axes

    seen = {"titles": [], "legends": []}
    set_title, legend = Axes.set_title, Axes.legend

    def spy_title(self, label, *a, **kw):
        seen["titles"].append(label)
        return set_title(self, label, *a, **kw)

    def spy_legend(self, *a, **kw):
        out = legend(self, *a, **kw)
        seen["legends"].append([t.get_text() for t in out.get_texts()])
        return out

    monkeypatch.setattr(Axes, "set_title", spy_title)
    monkeypatch.setattr(Axes, "legend", spy_legend)
    return seen


def test_a_one_seed_curve_claims_no_confidence_band(tmp_path, titles_and_legends):
    from purejaxppo._figures import plot_curves

    one = {"lr=0.001": np.linspace(0, 1, 5)[None]}  # (1 seed, 5 updates)
    plot_curves(tmp_path / "a.png", one, np.arange(1, 6), "Maze-v0 medium")
    assert "no confidence band" in titles_and_legends["titles"][-1]
    assert "bootstrap" not in titles_and_legends["titles"][-1]
    two = {"lr=0.001": np.linspace(0, 1, 10).reshape(2, 5)}
    plot_curves(tmp_path / "b.png", two, np.arange(1, 6), "Maze-v0 medium")
    assert "95 % bootstrap CI" in titles_and_legends["titles"][-1]


@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
@pytest.mark.parametrize("interval", [1, 4])
def test_the_lineage_legend_names_exactly_the_lines_drawn(titles_and_legends, interval):
    from purejaxppo import PPOConfig, pbt
    from purejaxppo.rundir._pbt_files import _lineage

    cfg = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=32,
                    total_timesteps=384, update_epochs=1, mlp_widths=(8,))  # fmt: skip
    with pytest.warns(UserWarning) if interval >= 3 else _no_warning():
        res = pbt(cfg, 4, interval=interval, lr=(1e-4, 1e-3))
    _lineage(res, res.best())
    (labels,) = titles_and_legends["legends"]
    copied = (res.lineage[:, 1:] != np.arange(4)[:, None]).any()
    kept = (res.lineage[:, 1:] == np.arange(4)[:, None]).any()
    assert any("ancestry" in s for s in labels)
    assert any("copied" in s for s in labels) == bool(copied)
    assert any("kept" in s for s in labels) == bool(kept)
    assert "red" not in titles_and_legends["titles"][-1]  # colours are the legend's job
    if interval == 1:
        assert copied  # 3 exploit steps of 4 agents: someone copied
    else:
        assert len(labels) == 1  # one generation: no lineage lines at all


def _no_warning():
    import contextlib

    return contextlib.nullcontext()


# ------------------------------------------ 5. a sweep's run directory, usable at once ---
@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
def test_a_sweep_with_a_run_dir_leaves_a_usable_run_directory(tmp_path):
    import jax
    from conftest import SMALL

    from purejaxppo import load_policy, sweep
    from purejaxppo.rundir import read_run, write_run

    run_dir = tmp_path / "my-sweep"
    res = sweep(SMALL, seeds=2, lr=[3e-4, 1e-3], run_dir=run_dir)  # checkpoint_every: "auto"
    assert read_run(run_dir)["finished"]
    policy = load_policy(run_dir, lr=1e-3, seed=1)
    agent = res.agent(lr=1e-3, seed=1)
    for a, b in zip(jax.tree.leaves(policy.network), jax.tree.leaves(agent.state.params),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    write_run(run_dir, res, eval_episodes=2, gif=False)  # its own directory: evaluation added
    assert read_run(run_dir)["finished"]


# ------------------------------------------------ the same flags in every training command ---
def test_every_training_command_has_the_shared_run_flags():
    import dataclasses

    from purejaxppo.cli._flags import PBTCmd, RunDirFlags, SweepCmd, TrainCmd

    shared = {f.name for f in dataclasses.fields(RunDirFlags)}
    assert {"run_dir", "resume", "overwrite", "stop_at", "config", "devices"} <= shared
    for command in (TrainCmd, SweepCmd, PBTCmd):
        assert shared <= {f.name for f in dataclasses.fields(command)}, command


@pytest.mark.slow  # trains: an end-to-end run (the slow tier)
def test_pbt_stop_at_then_resume_equals_the_uninterrupted_run(pbt_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, out, err = cli(capsys, *PBT_ARGS, "--stop-at", "128", "--run-dir", run_dir)
    assert code == 0, err
    assert "--stop-at 128: stopped at a generation" in out and not (run_dir / "params.eqx").exists()
    code, _, err = cli(capsys, "pbt", "--resume", run_dir, "--no-progress")
    assert code == 0, err
    with np.load(run_dir / "metrics.npz") as a, np.load(pbt_dir / "metrics.npz") as b:
        assert a.files == b.files
        for name in a.files:  # one machine, the same programs: bit for bit
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.slow  # compiles and times the medium maze and CartPole for one agent (~20 s)
def test_the_scaling_suite_keeps_to_its_budget_on_any_backend(capsys):
    """`bench --suite scaling` with a budget its first row uses up: every later count, and
    the full run of 256 agents, are skipped (the full run once ran unbudgeted when its row
    was); each table's first row still runs. `--suite gpu`, the old name, runs it and says
    it is going."""
    code, out, err = cli(capsys, "bench", "--suite", "gpu", "--budget-s", "1", "--updates", "1")
    assert code == 0, err
    assert "--suite gpu is now --suite scaling" in err
    maze, _, cartpole = out.partition("purejaxppo bench: CartPole-v1")
    assert maze.count("skipped: estimated") == 4  # 64, 256, 1024 and 4096 agents
    assert "full run, 256 agents: skipped (its timing row was skipped)" in maze
    if find_spec("gymnax") is None:
        assert "CartPole rows skipped: they need gymnax" in out
    else:  # PureJaxRL's config: 1 agent timed, 256 and 2048 skipped
        assert "(PureJaxRL's ppo.py config)" in cartpole
        assert re.search(r"^\s+1\s+1\*", cartpole, re.M)
        assert cartpole.count("skipped: estimated") == 2
