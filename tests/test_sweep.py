"""Sweeps: labelled axes, the solo-equality contract, divergence isolation, one compile."""

import sys
import warnings

import jax
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, SMALL

from purejaxppo import Metrics, PPOConfig, SweepResult, make_train, sweep
from purejaxppo.stats import iqm

pytestmark = pytest.mark.timeout(900)

# Vmapped agents run batched GEMMs whose float32 summation order can differ from a lone
# agent's, so equality is to float32 rounding, not bitwise (conftest.ACROSS_SHAPES).


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), **ACROSS_SHAPES)


@pytest.fixture(scope="module")
def grid():
    return sweep(SMALL, seeds=3, lr=[3e-4, 1e-3], ent_coef=[0.0, 0.01])


def test_grid_axes_and_shapes(grid):
    assert list(grid.axes) == ["lr", "ent_coef", "seed"]
    assert grid.axes["lr"] == [3e-4, 1e-3] and grid.axes["seed"] == [0, 1, 2]
    assert grid.metrics.episode_return.shape == (2, 2, 3, SMALL.num_updates)
    assert grid.diverged.shape == (2, 2, 3) and not grid.diverged.any()
    assert grid.values["lr"].shape == (2, 2)


@pytest.mark.parametrize("lr_index, ent_index, seed", [(0, 0, 0), (1, 1, 2), (1, 0, 1)])
def test_swept_agent_equals_solo_run(grid, lr_index, ent_index, seed):
    lr, ent = grid.axes["lr"][lr_index], grid.axes["ent_coef"][ent_index]
    one = grid.agent(lr=lr, ent_coef=ent, seed=seed)
    assert one.config.lr == lr and one.config.ent_coef == ent and one.seed == seed
    state, metrics = make_train(SMALL.replace(lr=lr, ent_coef=ent))(jax.random.PRNGKey(seed))
    for name in ("entropy", "value_loss", "policy_loss", "episode_return", "grad_norm"):
        close(getattr(one.metrics, name), getattr(metrics, name))
    for a, b in zip(jax.tree.leaves(one.state.params), jax.tree.leaves(state.params), strict=True):
        close(a, b)


@pytest.mark.slow
def test_one_and_three_axis_grids_and_random_search():
    one = sweep(SMALL, seeds=[4, 7], gamma=[0.9])
    assert list(one.axes) == ["gamma", "seed"] and one.axes["seed"] == [4, 7]
    assert one.metrics.entropy.shape == (1, 2, SMALL.num_updates)
    three = sweep(SMALL, seeds=1, lr=[1e-4, 3e-4], clip_eps=[0.1, 0.2, 0.3], vf_coef=[0.5])
    assert list(three.axes) == ["lr", "clip_eps", "vf_coef", "seed"]
    assert three.metrics.entropy.shape == (2, 3, 1, 1, SMALL.num_updates)
    rnd = sweep(SMALL, seeds=2, search="random", num_samples=5, lr=(1e-5, 1e-2), gamma=(0.9, 0.99))
    assert list(rnd.axes) == ["sample", "seed"]
    assert rnd.metrics.entropy.shape == (5, 2, SMALL.num_updates)
    lrs = rnd.values["lr"]
    assert lrs.shape == (5,) and (lrs >= 1e-5).all() and (lrs <= 1e-2).all()
    assert len(set(lrs.round(12))) == 5
    assert rnd.agent(sample=3, seed=1).config.lr == pytest.approx(lrs[3])


def test_divergent_agents_are_flagged_and_isolated():
    # lr=50 blows up (gradient norms ~1e12) but stays finite under Adam; lr=1e30 makes the
    # loss non-finite, so those steps are skipped and the parameters stay finite.
    mixed = sweep(SMALL, seeds=2, lr=[3e-4, 50.0, 1e30], ent_coef=[0.01])
    train = make_train(SMALL.replace(lr=3e-4, ent_coef=0.01))  # the healthy agents, alone
    alone = [train(jax.random.PRNGKey(seed))[1] for seed in (0, 1)]
    assert mixed.diverged[1:].all() and not mixed.diverged[0].any()
    assert (mixed.metrics.skipped_steps[2] > 0).any() and (
        mixed.metrics.skipped_steps[:2] == 0
    ).all()
    for leaf in jax.tree.leaves(mixed.state.params):
        assert np.isfinite(np.asarray(leaf)).all()  # the NaN agent kept its last finite params
    for name in ("entropy", "value_loss", "episode_return"):
        for seed in (0, 1):
            close(getattr(mixed.metrics, name)[0, 0, seed], getattr(alone[seed], name))
    assert np.isfinite(mixed.metrics.entropy[0]).all()
    # Aggregates leave the diverged agents out (no NaN/inf) and name them instead.
    assert mixed.diverged_agents() == [
        {"lr": lr, "ent_coef": 0.01, "seed": s} for lr in (50.0, 1e30) for s in (0, 1)
    ]
    rows = mixed.summary(last=2)
    assert [r["healthy"] for r in rows] == [2, 0, 0]
    assert [r["diverged"] for r in rows] == [[], [0, 1], [0, 1]]
    assert rows[1]["return_mean"] is None and rows[1]["iqm_ci"] is None
    assert rows[0]["return_mean"] is None or np.isfinite(rows[0]["return_mean"])


def test_summary_leaves_diverged_agents_out_of_every_aggregate():
    # Known data: 2 settings x 4 seeds x 3 updates; agent (1, 2) diverged with inf/NaN returns.
    ret = np.array(
        [
            [[0.1, 0.2, 0.3], [0.2, np.nan, 0.5], [0.0, 0.0, 0.9], [0.4, 0.4, 0.4]],
            [[1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [np.inf, np.nan, -np.inf], [0.0, 1.0, np.nan]],
        ]
    )
    metrics = Metrics(*[ret] * (len(Metrics._fields) - 1))  # no episode statistics
    diverged = np.zeros((2, 4), bool)
    diverged[1, 2] = True
    res = SweepResult(
        metrics=metrics, state=None, diverged=diverged, config=SMALL,
        axes={"lr": [1e-4, 3e-4], "seed": [0, 1, 2, 3]}, values={"lr": np.array([1e-4, 3e-4])},
    )  # fmt: skip
    assert res.diverged_agents() == [{"lr": 3e-4, "seed": 2}]
    rows = res.summary(last=2)
    # Per seed: mean of the last 2 finite returns.
    first = np.array([0.25, 0.35, 0.45, 0.4])
    second = np.array([1.0, 0.5, 0.5])  # seed 2 left out; seed 3's last two finite: 0, 1
    for row, scores in zip(rows, (first, second), strict=True):
        assert row["return_mean"] == pytest.approx(scores.mean())
        assert row["return_iqm"] == pytest.approx(iqm(scores))
        assert all(np.isfinite(row["iqm_ci"]))
    assert rows[1]["healthy"] == 3 and rows[1]["diverged"] == [2]
    assert rows[0]["return_iqm"] == pytest.approx(np.mean([0.35, 0.4]))  # middle 50 % of 4


def test_progress_fires_once_per_update_for_all_agents():
    calls = []
    res = sweep(SMALL, seeds=3, progress=calls.append)  # 3 agents, 3 updates
    assert [int(p.update) for p in calls] == [1, 2, 3]  # not 9: one callback for all agents
    assert all(int(p.num_agents) == 3 and int(p.diverged) == 0 for p in calls)
    # the fields travel packed in one float32 vector (integers bitcast): unpacked exactly
    assert all(p.update.dtype == np.int32 and p.agents is None for p in calls)
    for p, returns in zip(calls, np.asarray(res.metrics.episode_return).T, strict=True):
        finished = returns[np.isfinite(returns)]
        assert int(p.agents_with_episodes) == finished.size
        if finished.size:
            assert float(p.return_max) == finished.max() and float(p.return_min) == finished.min()
            assert float(p.return_mean) == pytest.approx(finished.mean(), rel=1e-6)
        else:
            assert np.isnan(p.return_mean)


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_progress_travels_in_blocks_and_every_due_update_arrives(monkeypatch):
    import purejaxppo._engine._core as engine_module

    cfg = SMALL.replace(num_envs=2, num_steps=16, minibatch_size=16, total_timesteps=32 * 32)
    callbacks = []  # the host callbacks the program makes: the packed rows each carries
    deliver = engine_module.deliver
    monkeypatch.setattr(
        engine_module, "deliver", lambda *a: (callbacks.append(a[-1].shape), deliver(*a))
    )
    seen = []
    sweep(cfg, seeds=2, progress=seen.append)
    assert [int(p.update) for p in seen] == list(range(1, 33))  # each update, in order
    assert callbacks == [(16, 7), (16, 7)]  # in two callbacks of 16 updates' 7 scalars
    seen.clear(), callbacks.clear()
    sweep(cfg, seeds=2, progress=seen.append, progress_every=3)
    assert [int(p.update) for p in seen] == [*range(3, 31, 3), 32]  # due ones, and the last
    assert len(callbacks) == 2


def test_updates_per_callback_divides_the_updates():
    from purejaxppo.engine import updates_per_callback

    fast = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=128, minibatch_size=128)
    assert updates_per_callback(fast, 1, 976) == 16  # 8,192 env steps per agent
    assert updates_per_callback(fast, 1, 1000) == 10  # the nearest divisor below
    assert updates_per_callback(fast, 1, 97) == 1  # a prime: one callback per update
    assert updates_per_callback(fast, 1, 3) == 3  # a short run: one callback at its end
    assert updates_per_callback(fast, 1, 0) == updates_per_callback(fast, 1, 1) == 1
    assert updates_per_callback(fast, 100, 1000) == 100  # progress_every, if larger
    big = fast.replace(num_envs=64, minibatch_size=1024)  # 8,192 steps an update
    assert updates_per_callback(big, 1, 976) == 1
    # an accelerator waits ~1.5 ms for each callback: 65,536 steps per agent, at most 16
    assert updates_per_callback(big, 1, 1000, "tpu") == 8
    assert updates_per_callback(big, 1, 100, "gpu") == 10  # the quick start: 10 callbacks
    assert updates_per_callback(fast, 1, 976, "tpu") == 16


def test_same_shape_sweeps_do_not_recompile():
    from purejaxppo._engine import engine_for

    # 12 agents, as the `grid` fixture: the program may already be compiled (engines are
    # shared by static config), so what is checked is that nothing is traced again.
    a = sweep(SMALL, seeds=3, lr=[1e-4, 3e-4], ent_coef=[0.0, 0.02])
    traces = engine_for(SMALL).num_traces
    assert traces >= 1
    b = sweep(SMALL, seeds=3, lr=[2e-4, 4e-4], ent_coef=[0.0, 0.02])  # new values
    c = sweep(SMALL, seeds=[5, 6, 7], lr=[6e-4, 8e-4], gamma=[0.9, 0.95])  # still 12 agents
    assert engine_for(SMALL).num_traces == traces
    assert a.metrics.entropy.shape == b.metrics.entropy.shape
    assert not np.array_equal(a.metrics.entropy, b.metrics.entropy)
    assert c.metrics.entropy.shape == (2, 2, 3, SMALL.num_updates)


@pytest.mark.slow
def test_static_field_sweep_runs_one_program_per_value():
    cfg = SMALL.replace(total_timesteps=512)  # 4 updates at 4 envs, 2 at 8 envs
    res = sweep(cfg, seeds=1, num_envs=[4, 8], lr=[3e-4])
    assert list(res.axes) == ["num_envs", "lr", "seed"]
    assert res.metrics.entropy.shape == (2, 1, 1, 4)
    ent = res.metrics.entropy
    assert np.isfinite(ent[0]).all()
    assert np.isfinite(ent[1, ..., :2]).all() and np.isnan(ent[1, ..., 2:]).all()  # padding
    # Each static setting equals its own solo run.
    _, solo = make_train(cfg.replace(num_envs=8))(jax.random.PRNGKey(0))
    close(ent[1, 0, 0, :2], solo.entropy)
    assert res.agent(num_envs=8, seed=0).config.num_envs == 8


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"learning_rate": [1e-3]}, r"unknown hyperparameter 'learning_rate'"),
        ({"lr": []}, r"lr=\[\] is empty"),
        ({"lr": ["fast"]}, r"must be numbers"),
        ({"lr": [[1e-3, 2e-3]]}, r"flat list of numbers"),
        ({"lr": 1e-3}, r"must be a list of values"),
        ({"lr": [-1.0]}, r"PPOConfig.lr=-1.0 is invalid"),
    ],
)
def test_bad_sweeps_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sweep(SMALL, seeds=1, **kwargs)


def test_vmapping_a_static_field_is_refused():
    import jax.numpy as jnp

    with warnings.catch_warnings():  # equinox also warns about an array in a static field
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"num_envs is static .* Static fields: \['env'"):
            PPOConfig(num_envs=jnp.array([16, 32]))
    with pytest.raises(ValueError, match="is static .* cannot be sampled"):
        sweep(SMALL, search="random", num_samples=2, num_envs=(4, 8))


def test_a_one_agent_sweep_is_bitwise_the_solo_run():
    # One agent per device runs the plain per-agent program (no vmap of size 1), so it is
    # exactly `make_train`'s computation.
    from conftest import tree_equal

    res = sweep(SMALL, seeds=[3], mesh=False)
    state, metrics = make_train(SMALL)(jax.random.PRNGKey(3))
    assert tree_equal(jax.tree.map(lambda x: x[0], res.metrics), metrics)
    assert tree_equal(jax.tree.map(lambda x: x[0], res.state.params), state.params)


def test_the_progress_bar_rate_counts_whole_blocks_from_the_program_start():
    import io
    import re
    import time

    from purejaxppo._progress import ProgramClock, Progress, deliver, pack
    from purejaxppo.cli._progress import ProgressBar

    cfg = SMALL.replace(total_timesteps=SMALL.batch_size * 16)
    bar = ProgressBar(cfg, num_agents=2)
    rows = np.stack([np.asarray(pack(Progress(u, 1.0, 0.0, 2.0, 2, 0, 2))) for u in range(1, 17)])
    clock = ProgramClock()
    clock.start = time.perf_counter() - 2.0  # the program started 2 s before its first block
    sys.stdout, out = io.StringIO(), sys.stdout
    try:
        deliver(bar, (), 1, cfg.num_updates, clock, rows)  # 16 updates in one callback
    finally:
        sys.stdout = out
    rate = float(re.search(r"steps/s=([\d,]+)", bar.bar.postfix).group(1).replace(",", ""))
    # 16 updates of 2 agents in ~2 s, not 15 updates over the microseconds between the rows
    assert 0.5 < rate / (16 * 2 * cfg.batch_size / 2.0) <= 1.0
    bar.close()
