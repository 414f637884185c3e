"""Population-based training: the exploit/explore step alone, whole runs, resume, bad input."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, SMALL, tree_close, tree_equal
from test_trust import cli

from purejaxppo import PPOConfig, make_train, pbt, resume_pbt
from purejaxppo._engine import Engine, engine_for
from purejaxppo._pbt import PBTCarry, PopulationStep, fitness_of
from purejaxppo._ppo import Metrics
from purejaxppo._programs import INIT
from purejaxppo._search import initial_population

# 6 updates of CartPole (episodes end in every update, so fitness is finite from the first
# generation on): interval 2 gives 3 generations, 2 exploit/explore steps.
CFG = PPOConfig(
    env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2,
    total_timesteps=6 * 128,
)  # fmt: skip
STEP = PopulationStep(
    ranges=(("lr", 1e-5, 1e-2, True), ("ent_coef", 0.0, 0.05, False)),
    fraction=0.25,
    factors=(0.8, 1.25),
    resample_probability=0.25,
    divergence_grad_norm=1e6,
)


def fake_metrics(returns, **bad) -> Metrics:
    """Healthy metrics of (agents, updates) with the given episode returns; ``bad`` sets
    fields (e.g. ``policy_loss``) to given arrays."""
    returns = np.asarray(returns, np.float32)
    zeros = np.zeros_like(returns)
    fields = {f: zeros for f in Metrics._fields if f != "episode_stats"}
    fields.update(episode_return=returns, skipped_steps=zeros.astype(np.int32))
    fields.update(bad)
    return Metrics(**{k: jnp.asarray(v) for k, v in fields.items()})


@pytest.fixture(scope="module")
def population():
    """8 agents with distinct states (initialised from distinct keys) and hyperparameters."""
    keys, hp, pbt_key = initial_population(SMALL, 8, 0, {"lr": (1e-5, 1e-2), "ent_coef": (0, 0.05)})
    engine = engine_for(SMALL, mesh=False)
    return engine.strip(engine.init(keys, hp), 8), hp, pbt_key


@functools.partial(jax.jit, static_argnums=0)
def _step(step, state, hp, metrics, carry):
    return step(state, hp, metrics, carry, np.ones(len(metrics.episode_return), bool))


def call_step(step, state, hp, metrics, key, generation=0):
    """One exploit/explore step of 8 agents, as `Engine.run_generations` runs it."""
    carry = PBTCarry(jnp.asarray(key), jnp.asarray(generation, jnp.int32))
    return _step(step, state, hp, metrics, carry)


def test_exploit_copies_the_parents_whole_state_into_exactly_the_bottom(population):
    state, hp, key = population
    fitness = np.array([5.0, 1.0, 7.0, 3.0, 0.5, 6.0, 2.0, 4.0])  # top: 2, 5; bottom: 4, 1
    metrics = fake_metrics(np.stack([fitness, fitness], 1))
    new, new_hp, carry, record = call_step(STEP, state, hp, metrics, key)
    parents = np.asarray(record.parents)
    assert sorted(np.nonzero(parents != np.arange(8))[0]) == [1, 4]
    assert set(parents[[1, 4]]) <= {2, 5}
    np.testing.assert_array_equal(np.asarray(record.fitness), fitness)
    for i in range(8):
        src = parents[i]
        for name in ("params", "opt_state", "env_state", "obs", "episode_return", "update"):
            want = jax.tree.map(lambda x, s=src: np.asarray(x)[s], getattr(state, name))
            got = jax.tree.map(lambda x, j=i: np.asarray(x)[j], getattr(new, name))
            assert tree_equal(got, want), (i, name)
        # every agent keeps its own PRNG stream, the children included
        np.testing.assert_array_equal(np.asarray(new.key)[i], np.asarray(state.key)[i])
    for name in ("lr", "ent_coef"):  # the kept agents keep their hyperparameters
        keep = parents == np.arange(8)
        np.testing.assert_array_equal(
            np.asarray(getattr(new_hp, name))[keep], np.asarray(getattr(hp, name))[keep]
        )
    assert int(carry.generation) == 1


def test_a_diverged_or_episodeless_agent_is_never_a_parent(population):
    state, hp, key = population
    returns = np.array([[9.0] * 2] * 6 + [[1.0, 1.0], [2.0, 2.0]])
    loss = np.zeros((8, 2), np.float32)
    loss[0, 1] = np.nan  # 0 diverged (NaN loss), 1 a skipped step, 2 a huge gradient
    skipped = np.zeros((8, 2), np.int32)
    skipped[1, 0] = 1
    grad = np.zeros((8, 2), np.float32)
    grad[2, 0] = 1e9
    returns[3:6] = np.nan  # 3, 4, 5 finished no episode
    metrics = fake_metrics(returns, policy_loss=loss, skipped_steps=skipped, grad_norm=grad)
    assert np.isneginf(np.asarray(fitness_of(metrics))[:6]).all()
    step = PopulationStep(STEP.ranges, 0.5, STEP.factors, 0.0, 1e6)  # 4 top, 4 bottom
    for generation in range(20):  # whatever the draw, only 6 and 7 can be parents
        _, _, _, record = call_step(step, state, hp, metrics, key, generation)
        parents = np.asarray(record.parents)
        children = parents != np.arange(8)
        assert children.sum() == 4 and set(parents[children]) <= {6, 7}
    # no healthy agent in the top: nobody is copied at all
    metrics = fake_metrics(np.full((8, 2), np.nan))
    _, _, _, record = call_step(step, state, hp, metrics, key)
    np.testing.assert_array_equal(np.asarray(record.parents), np.arange(8))


def test_explore_stays_in_bounds_applies_the_factors_and_resamples_at_the_rate():
    n, low, high = 20_000, 1e-4, 1e-2
    parent_lr = np.geomspace(low, high, n // 2).astype(np.float32)
    lr = np.concatenate([parent_lr, np.full(n // 2, 5e-3, np.float32)])
    hp = SMALL.traced().batched(lr=jnp.asarray(lr))
    parents = jnp.concatenate([jnp.arange(n // 2), jnp.arange(n // 2)])  # 2nd half: children
    key = jax.random.PRNGKey(3)
    for p in (0.0, 0.25):
        step = PopulationStep((("lr", low, high, True),), 0.5, (0.8, 1.25), p, 1e6)
        out = np.asarray(step.explore(key, hp, parents).lr)
        kept, child = out[: n // 2], out[n // 2 :]
        np.testing.assert_array_equal(kept, parent_lr)  # not children: untouched
        assert ((child >= low) & (child <= high)).all()
        by = [np.clip(parent_lr * np.float32(f), low, high) for f in (0.8, 1.25)]
        factor = [np.isclose(child, b, rtol=1e-6, atol=0) for b in by]
        perturbed = factor[0] | factor[1]
        if p == 0:
            assert perturbed.all()
            inside = (parent_lr * 1.25 < high) & (parent_lr * 0.8 > low)
            share = factor[0][inside].mean()  # each factor drawn with probability 1/2
            assert abs(share - 0.5) < 4 * np.sqrt(0.25 / inside.sum())
        else:
            rate = 1 - perturbed.mean()  # a fresh draw equals a perturbed value ~never
            assert abs(rate - p) < 4 * np.sqrt(p * (1 - p) / (n // 2)), rate
            fresh = child[~perturbed]  # log-uniform: about half below the geometric middle
            assert abs((fresh < np.sqrt(low * high)).mean() - 0.5) < 0.05


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_no_step_equals_the_plain_run_of_the_initial_population():
    ranges = {"lr": (1e-4, 1e-2)}
    with pytest.warns(UserWarning, match="no exploit step"):
        res = pbt(CFG, 4, interval=CFG.num_updates, seed=1, mesh=False, **ranges)
    keys, hp, _ = initial_population(CFG, 4, 1, ranges)
    engine = engine_for(CFG, mesh=False)
    state, metrics = engine.strip(engine(keys, hp), 4)
    assert tree_equal(res.metrics, metrics) and tree_equal(res.state, state)
    np.testing.assert_array_equal(res.lineage, np.arange(4)[:, None])
    assert (res.hyperparameters["lr"] == np.asarray(hp.lr)[:, None]).all()
    # agent 2 alone, as make_train trains it (another batch shape: equal to rounding)
    alone = make_train(CFG.replace(lr=float(hp.lr[2])))(jnp.asarray(keys[2]))
    assert tree_close(jax.tree.map(lambda x: x[2], res.metrics), alone[1], **ACROSS_SHAPES)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_a_whole_run_is_one_program_and_never_recompiles_across_generations():
    kwargs = dict(interval=2, mesh=False, lr=(1e-4, 1e-2), ent_coef=(0.0, 0.05))
    engine = engine_for(CFG, mesh=False)
    before = set(engine._compiled)
    first = pbt(CFG, 6, seed=0, **kwargs)
    traces, compiled = engine.num_traces, set(engine._compiled)
    runs = [k[0] for k in compiled - before if k[0] != INIT]
    # the whole run (2 generations with a step, then the last) is one program
    assert len(runs) == 1 and (runs[0].interval, runs[0].count, runs[0].tail) == (2, 2, 2)
    again = pbt(CFG, 6, seed=0, **kwargs)
    other = pbt(CFG, 6, seed=5, interval=2, mesh=False, lr=(1e-4, 1e-2), ent_coef=(0.0, 0.05))
    assert engine.num_traces == traces and set(engine._compiled) == compiled
    fields = ("metrics", "state", "hyperparameters", "lineage", "fitness")
    for f in fields:  # the same seed: the same run, bit for bit
        assert tree_equal(getattr(first, f), getattr(again, f)), f
    assert not tree_equal(first.metrics, other.metrics)
    assert first.metrics.entropy.shape == (6, 6) and first.lineage.shape == (6, 3)
    assert first.hyperparameters["lr"].shape == (6, 6)
    lr = first.hyperparameters["lr"]
    assert ((lr >= 1e-4) & (lr <= 1e-2)).all() and np.isfinite(lr).all()
    # the schedule is constant within a generation, and children moved at the step
    assert (lr[:, 0] == lr[:, 1]).all() and (lr[:, 2] == lr[:, 3]).all()
    children = first.lineage[:, 1] != np.arange(6)
    assert children.sum() == 1  # a quarter of 6 agents, at least one
    best = first.best()
    assert best.fitness == np.nanmax(first.fitness[:, -1])
    assert [g for g, _ in best.ancestry] == [0, 1, 2] and best.ancestry[-1][1] == best.index
    # its schedule and curve follow its ancestry: generation g's values are its ancestor's
    for g, who in best.ancestry:
        span = slice(2 * g, 2 * g + 2)
        np.testing.assert_array_equal(best.hyperparameters["lr"][span], lr[who, span])
        np.testing.assert_array_equal(
            best.metrics.episode_return[span], first.metrics.episode_return[who, span]
        )
        if g:  # it ran its ancestor's state: a copy at a step, or its own
            assert first.lineage[who, g] == dict(best.ancestry)[g - 1]


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_checkpointed_run_stopped_and_resumed_equals_the_uninterrupted(tmp_path):
    kwargs = dict(interval=2, seed=2, mesh=False, lr=(1e-4, 1e-2), checkpoint_every=1)
    whole = pbt(CFG, 6, run_dir=tmp_path / "a", **kwargs)
    stopped = pbt(CFG, 6, run_dir=tmp_path / "b", should_stop=lambda: True, **kwargs)
    assert whole.finished and not stopped.finished
    assert np.isnan(stopped.metrics.entropy[:, 2:]).all()
    resumed = resume_pbt(tmp_path / "b", mesh=False)
    assert resumed.finished
    assert tree_equal(resumed.metrics, whole.metrics) and tree_equal(resumed.state, whole.state)
    np.testing.assert_array_equal(resumed.lineage, whole.lineage)
    assert tree_equal(resumed.hyperparameters, whole.hyperparameters)
    # chunked or in one program: the same run (another program: equal to rounding)
    one = pbt(CFG, 6, interval=2, seed=2, mesh=False, lr=(1e-4, 1e-2))
    assert tree_close(one.metrics, whole.metrics, **ACROSS_SHAPES)
    np.testing.assert_array_equal(one.lineage, whole.lineage)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(population=1), "population=1"),
        (dict(fraction=0.0), "fraction=0.0"),
        (dict(fraction=0.6), "fraction=0.6"),
        (dict(interval=0), "interval=0"),
        (dict(lr=(1e-2, 1e-5)), "low to high"),
        (dict(num_envs=(2, 8)), "num_envs is static"),
        (dict(log_std_init=(-1.0, 0.0)), "log_std_init only sets"),
        (dict(lrr=(1e-5, 1e-2)), "unknown hyperparameter 'lrr'"),
        (dict(factors=(0.0, 1.2)), "factors="),
        (dict(resample_probability=1.5), "resample_probability=1.5"),
        (dict(exploit="tournament"), "exploit='tournament'"),
        (dict(lr=(-1.0, 1e-2)), "lr"),
    ],
)
def test_bad_input_is_one_line_before_anything_compiles(kwargs, message):
    args = dict(population=4, interval=2, lr=(1e-5, 1e-2))
    args.update(kwargs)
    before = Engine.total_compile_seconds
    with pytest.raises(ValueError, match=message) as e:
        pbt(CFG, mesh=False, **args)
    assert "\n" not in str(e.value)
    assert Engine.total_compile_seconds == before


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_interval_longer_than_the_run_is_allowed_with_a_warning():
    with pytest.warns(UserWarning, match="no exploit step will happen"):
        res = pbt(CFG, 2, interval=100, mesh=False, lr=(1e-4, 1e-3))
    assert res.lineage.shape == (2, 1) and res.finished
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pbt(CFG, 2, interval=3, mesh=False, lr=(1e-4, 1e-3))  # steps happen: no warning


@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_sharded_over_4_devices_equals_one_device_and_resumes_across_counts(tmp_path):
    from test_sharding import run_with_devices

    # 6 agents on 4 devices: padded to 8; the padding takes no part in the ranking.
    run_dir = str(tmp_path / "pbt")
    code = f"""
        from purejaxppo import pbt
        cfg = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=64,
                        update_epochs=2, total_timesteps=6 * 128)
        kw = dict(interval=2, seed=3, fraction=0.5, lr=(1e-4, 1e-2), ent_coef=(0.0, 0.05))
        sharded = pbt(cfg, 6, **kw)
        single = pbt(cfg, 6, mesh=False, **kw)
        out["lineage_equal"] = np.array_equal(sharded.lineage, single.lineage)
        out["children"] = int((sharded.lineage[:, 1:] != np.arange(6)[:, None]).sum())
        out["metrics_equal"] = same(sharded.metrics, single.metrics)
        out["state_equal"] = same(sharded.state, single.state)
        out["hp_equal"] = same(sharded.hyperparameters, single.hyperparameters)
        chunked = pbt(cfg, 6, run_dir={run_dir + "-chunked"!r}, checkpoint_every=1, **kw)
        out["chunked_equal"] = same(chunked.metrics, single.metrics) and np.array_equal(
            chunked.lineage, single.lineage)
        stopped = pbt(cfg, 6, run_dir={run_dir!r}, checkpoint_every=1,
                      should_stop=lambda: True, **kw)
        out["stopped"] = stopped.finished
        """
    out = run_with_devices(code)
    assert out["devices"] == 4 and out["stopped"] is False
    assert out["lineage_equal"] and out["children"] == 6  # 3 per step, 2 steps
    assert out["metrics_equal"] and out["state_equal"] and out["hp_equal"], out
    assert out["chunked_equal"]  # chunks of generations on 4 devices: the same run
    out = run_with_devices(
        f"""
        from purejaxppo import pbt, resume_pbt
        resumed = resume_pbt({run_dir!r})
        cfg = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=64,
                        update_epochs=2, total_timesteps=6 * 128)
        whole = pbt(cfg, 6, interval=2, seed=3, fraction=0.5, lr=(1e-4, 1e-2),
                    ent_coef=(0.0, 0.05), checkpoint_every=1, run_dir={run_dir + "-whole"!r})
        out["finished"] = resumed.finished
        out["equal"] = same(resumed.metrics, whole.metrics) and same(resumed.state, whole.state)
        out["lineage_equal"] = np.array_equal(resumed.lineage, whole.lineage)
        """,
        devices=1,
    )
    assert out["devices"] == 1 and out["finished"] is True
    assert out["equal"] and out["lineage_equal"]


# ---------------------------------------------------------------------- command line ---
CFG_FLAGS = [
    "--env",
    "CartPole-v1",
    "--num-envs",
    "4",
    "--num-steps",
    "32",
    "--minibatch-size",
    "64",
    "--update-epochs",
    "2",
    "--total-timesteps",
    "768",
    "--no-progress",
]  # fmt: skip  (CFG on the command line: 6 updates)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--population", "1"], "population=1"),
        (["--fraction", "0.7"], "fraction=0.7"),
        (["--interval", "0"], "interval=0"),
        (["--factors", "0", "1.2"], "factors="),
        (["--resample-probability", "-0.1"], "resample_probability=-0.1"),
        (["--pbt.lr", "1e-2", "1e-5"], "low to high"),
        (["--checkpoint-every", "-1"], "--checkpoint-every -1"),
    ],
)
def test_cli_bad_flags_exit_2_in_one_line_before_compiling(
    tmp_path, capsys, monkeypatch, flags, message
):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled before refusing bad input")

    monkeypatch.setattr(Engine, "compiled", refuse)
    args = ["pbt", *CFG_FLAGS, "--pbt.lr", "1e-4", "1e-2", *flags]
    code, _, err = cli(capsys, *args, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "r").exists()
    code, _, err = cli(capsys, "pbt", *CFG_FLAGS, "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "give at least one hyperparameter range" in err


@pytest.mark.subprocess
def test_cli_writes_a_pbt_run_directory_and_resume_refuses_changes(tmp_path):
    import subprocess
    import sys

    from PIL import Image

    run_dir = tmp_path / "pbt"
    args = ["pbt", *CFG_FLAGS, "--population", "4", "--interval", "2", "--pbt.lr", "1e-4",
            "1e-2", "--pbt.ent-coef", "0", "0.05", "--run-dir", str(run_dir)]  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "purejaxppo", *args], capture_output=True,
                         text=True, timeout=500)  # fmt: skip
    assert out.returncode == 0, out.stderr
    for name in ("pbt.json", "config.json", "metrics.npz", "summary.md"):
        assert (run_dir / name).stat().st_size > 0, name
    for name in ("curves.png", "hyperparameters.png", "lineage.png"):
        assert Image.open(run_dir / name).size[0] > 100, name
    data = np.load(run_dir / "metrics.npz")
    assert data["hp_lr"].shape == (4, 6) and data["lineage"].shape == (4, 3)
    assert data["episode_return"].shape == (4, 6) and data["fitness"].shape == (4, 3)
    lr = data["hp_lr"]
    assert ((lr >= 1e-4) & (lr <= 1e-2)).all()
    best = int(np.argmax(data["fitness"][:, -1]))
    assert f"| best agent | {best} |" in out.stdout
    changed = ["pbt", "--resume", str(run_dir), "--interval", "3"]
    again = subprocess.run([sys.executable, "-m", "purejaxppo", *changed], capture_output=True,
                           text=True, timeout=500)  # fmt: skip
    assert again.returncode == 2 and "--interval would change the run" in again.stderr
