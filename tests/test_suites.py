"""The JAX env suites by name: Craftax (``craftax/<name>``), Navix (``navix/<name>``) and
XLand-MiniGrid (``xminigrid/<name>``).

Each adapter is checked against its library's own env stepped directly (observations,
rewards, terminations against truncations, resets), then trained: one update of 2 agents in
the fast tier, and Empty-8x8 solved (greedy success >= 0.9 on fresh episodes) in the slow
one. Without a suite's extra its tests are skipped, saying which; the refusal of its names
is tested either way.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ULP_ATOL, needs_craftax, needs_navix, needs_xminigrid, tree_close

from purejaxppo import PPOConfig, evaluate, make_train, sweep, train_with_checkpoints
from purejaxppo.envs import Env, EnvStep, _craftax, _navix, _xminigrid, make_env
from purejaxppo.rundir import write_run

pytestmark = pytest.mark.timeout(600)


def _actions(forward: int, left: int, right: int) -> np.ndarray:
    """A policy that reaches the goal of an empty room now and then: mostly forward, some
    turns (the suites number their actions differently)."""
    return np.random.default_rng(0).choice([forward, left, right], size=400, p=[0.6, 0.2, 0.2])


def _moveaxis(obs):
    return np.moveaxis(np.asarray(obs), -1, 0)


# ------------------------------------------------------------------ against the library ---
@needs_navix
@pytest.mark.slow  # over ~6 s: the fast tier stays under 5 minutes
def test_navix_steps_as_navix_itself_with_its_resets_one_step_earlier():
    import navix

    name, limit = "Navix-Empty-5x5-v0", 12
    ours = make_env(PPOConfig(env="navix/" + name, time_limit=limit))
    theirs = navix.make(name, max_steps=limit)
    assert ours.max_episode_steps == limit and ours.num_actions == theirs.action_space.n
    key = jax.random.PRNGKey(3)
    state, obs, _ = jax.jit(ours.reset)(key)
    timestep = jax.jit(theirs.reset)(key)
    np.testing.assert_array_equal(obs, _moveaxis(timestep.observation))
    step, their_step = jax.jit(ours.step), jax.jit(theirs.step)
    ends = {"terminated": 0, "truncated": 0}
    for a in _actions(forward=2, left=0, right=1):  # Navix: rotate ccw, rotate cw, forward
        action = jnp.asarray(a, jnp.int32)
        state, out = step(state, action)
        timestep = their_step(timestep, action)
        np.testing.assert_array_equal(out.final_obs, _moveaxis(timestep.observation))
        # Two programs (ours and the library's): floats agree to a few ulps, not bit for bit.
        np.testing.assert_allclose(out.reward, timestep.reward, rtol=0, atol=ULP_ATOL)
        assert bool(out.done) == bool(timestep.is_done())
        assert bool(out.terminated) == bool(timestep.is_termination())
        if out.done:
            ends["terminated" if out.terminated else "truncated"] += 1
            timestep = their_step(timestep, action)  # Navix's lazy reset: a step of its own
        np.testing.assert_array_equal(out.obs, _moveaxis(timestep.observation))
    assert ends["terminated"] > 0 and ends["truncated"] > 0, ends


@needs_xminigrid
def test_xminigrid_steps_as_xminigrid_itself():
    import xminigrid

    name, limit = "MiniGrid-Empty-5x5", 12
    ours = make_env(PPOConfig(env="xminigrid/" + name, time_limit=limit))
    env, params = xminigrid.make(name)
    params = params.replace(max_steps=limit)
    assert ours.max_episode_steps == limit and ours.num_actions == env.num_actions(params)
    key = jax.random.PRNGKey(3)
    state, obs, _ = jax.jit(ours.reset)(key)
    timestep = env.reset(params, jax.random.split(key)[1])  # ours keeps the first half
    np.testing.assert_array_equal(obs, _moveaxis(timestep.observation))
    step = jax.jit(ours.step)
    their_step, their_reset = jax.jit(env.step, static_argnums=0), jax.jit(env.reset)
    ends = {"terminated": 0, "truncated": 0}
    for a in _actions(forward=0, left=2, right=1):  # XLand-MiniGrid: forward, right, left
        action = jnp.asarray(a, jnp.int32)
        reset_key = jax.random.split(state.key)[1]  # the key ours resets with, if it ends
        state, out = step(state, action)
        timestep = their_step(params, timestep, action)
        np.testing.assert_array_equal(out.final_obs, _moveaxis(timestep.observation))
        np.testing.assert_allclose(out.reward, timestep.reward, rtol=0, atol=ULP_ATOL)
        assert bool(out.done) == bool(timestep.last())
        assert bool(out.terminated) == (bool(timestep.last()) and float(timestep.discount) == 0)
        if out.done:
            ends["terminated" if out.terminated else "truncated"] += 1
            timestep = their_reset(params, reset_key)
        np.testing.assert_array_equal(out.obs, _moveaxis(timestep.observation))
    assert ends["terminated"] > 0 and ends["truncated"] > 0, ends


@pytest.fixture
def xland_benchmark(tmp_path, monkeypatch):
    """A two-ruleset benchmark saved where XLand-MiniGrid looks for ``trivial-21k``'s file
    (its data directory pointed at ``tmp_path``): hold a red ball; be near a blue key."""
    import xminigrid.benchmarks as benchmarks
    from xminigrid.core.constants import TILES_REGISTRY, Colors, Tiles
    from xminigrid.core.goals import AgentHoldGoal, AgentNearGoal
    from xminigrid.core.rules import EmptyRule

    monkeypatch.setattr(benchmarks, "DATA_PATH", str(tmp_path))
    ball, key = TILES_REGISTRY[Tiles.BALL, Colors.RED], TILES_REGISTRY[Tiles.KEY, Colors.BLUE]
    goals = np.stack([AgentHoldGoal(tile=ball).encode(), AgentNearGoal(tile=key).encode()])
    rules = np.stack([np.stack([np.asarray(EmptyRule().encode())] * 2)] * 2)
    tiles = np.stack([np.stack([np.asarray(ball), np.asarray(key)])] * 2)
    data = dict(goals=goals, rules=rules, init_tiles=tiles, num_rules=np.zeros(2, np.int32))
    benchmarks.save_bz2_pickle(data, str(tmp_path / benchmarks.NAME2HFFILENAME["trivial-21k"]))
    return benchmarks.load_benchmark_from_path(str(tmp_path / "trivial_21k"))


@needs_xminigrid
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_an_xland_ruleset_steps_as_xminigrid_itself(xland_benchmark):
    """``@trivial-21k#1``: every episode on ruleset 1, as XLand-MiniGrid's env on params with
    that ruleset (observations, rewards, endings, resets)."""
    import xminigrid

    name = "XLand-MiniGrid-R1-9x9"
    ours = make_env(PPOConfig(env=f"xminigrid/{name}@trivial-21k#1", time_limit=20))
    env, params = xminigrid.make(name)
    params = params.replace(max_steps=20, ruleset=xland_benchmark.get_ruleset(1))
    key = jax.random.PRNGKey(5)
    state, obs, _ = jax.jit(ours.reset)(key)
    timestep = env.reset(params, jax.random.split(key)[1])
    np.testing.assert_array_equal(obs, _moveaxis(timestep.observation))
    np.testing.assert_array_equal(state.timestep.state.goal_encoding, xland_benchmark.goals[1])
    step = jax.jit(ours.step)
    their_step, their_reset = jax.jit(env.step), jax.jit(env.reset)  # params: arrays
    rng = np.random.default_rng(1)
    ends = 0
    for a in rng.integers(0, ours.num_actions, size=120):
        action = jnp.asarray(a, jnp.int32)
        reset_key = jax.random.split(state.key)[1]
        state, out = step(state, action)
        timestep = their_step(params, timestep, action)
        np.testing.assert_array_equal(out.final_obs, _moveaxis(timestep.observation))
        np.testing.assert_allclose(out.reward, timestep.reward, rtol=0, atol=ULP_ATOL)
        assert bool(out.done) == bool(timestep.last())
        if out.done:
            ends += 1
            timestep = their_reset(params, reset_key)
        np.testing.assert_array_equal(out.obs, _moveaxis(timestep.observation))
    assert ends >= 5


@needs_xminigrid
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_xland_episodes_draw_their_rulesets_from_the_benchmark(xland_benchmark):
    env = make_env(PPOConfig(env="xminigrid/XLand-MiniGrid-R1-9x9@trivial-21k"))
    states, _, _ = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 64))
    goals = np.asarray(states.timestep.state.goal_encoding)
    drawn = [int(np.flatnonzero((np.asarray(xland_benchmark.goals) == g).all(1))[0]) for g in goals]
    assert 16 <= drawn.count(0) <= 48  # both rulesets, about half each (binomial, p = 0.5)
    res = sweep(PPOConfig(env="xminigrid/XLand-MiniGrid-R1-9x9@trivial-21k", **SMALL), 2)
    assert np.all(np.isfinite(np.asarray(res.metrics.policy_loss)))


@pytest.mark.parametrize(
    "suffix, says",
    [
        ("", "name one of XLand-MiniGrid's ruleset benchmarks"),
        ("@small-1m", "small_1m_v3 is missing) and nothing is downloaded here"),
        ("@trivial-1k", "no ruleset benchmark 'trivial-1k'"),
        ("@trivial-21k#2", "give a number from 0 to 1 after '#'"),
        ("@trivial-21k#x", "give a number from 0 to 1 after '#'"),
    ],
)
@needs_xminigrid
def test_xland_names_without_a_usable_benchmark_are_refused_in_one_line(
    xland_benchmark, suffix, says
):
    with pytest.raises(ValueError, match="PPOConfig.env=") as info:
        PPOConfig(env=f"xminigrid/XLand-MiniGrid-R1-9x9{suffix}")
    assert says in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="applies to XLand envs only"):
        PPOConfig(env="xminigrid/MiniGrid-Empty-8x8@trivial-21k")


@needs_xminigrid
def test_a_damaged_benchmark_file_is_refused_in_one_line(tmp_path, monkeypatch):
    import xminigrid.benchmarks as benchmarks

    monkeypatch.setattr(benchmarks, "DATA_PATH", str(tmp_path))
    (tmp_path / benchmarks.NAME2HFFILENAME["trivial-21k"]).write_bytes(b"not a benchmark")
    with pytest.raises(ValueError, match="cannot be read .*fetch it again") as info:
        PPOConfig(env="xminigrid/XLand-MiniGrid-R1-9x9@trivial-21k")
    assert "\n" not in str(info.value)


@pytest.mark.slow  # Craftax's step compiles slowly (twice here: ours and its own)
@needs_craftax
def test_craftax_steps_as_craftax_and_restarts_in_its_pool():
    """Between resets, Craftax's own ``step_env``; an ended episode restarts in one of the
    env's pooled worlds, each Craftax's own ``reset_env``; the time limit is a truncation
    and death a termination; `refresh` replaces one slot with a new world."""
    limit = 30
    ours = make_env(PPOConfig(env="craftax/Craftax-Classic-Symbolic-v1", time_limit=limit))
    env, params = ours.env, ours.params
    assert (ours.max_episode_steps, ours.num_actions, ours.obs_shape) == (limit, 17, (1345,))
    state, obs, _ = jax.jit(ours.reset)(jax.random.PRNGKey(0))
    pool_key = jax.random.split(jax.random.PRNGKey(0), 3)[1]
    # Craftax's own worlds (generated one by one here, vmapped there: to a few ulps)
    for i, k in enumerate(jax.random.split(pool_key, _craftax.POOL)):
        world_obs, world = env.reset_env(k, params)
        np.testing.assert_allclose(state.pool_obs[i], world_obs, rtol=0, atol=ULP_ATOL)
        pooled = jax.tree.map(lambda p, j=i: p[j], state.pool)
        assert tree_close(pooled, world, rtol=0, atol=ULP_ATOL)
    assert any(np.array_equal(obs, o) for o in state.pool_obs)
    step = jax.jit(ours.step)
    their_step = jax.jit(env.step_env)
    ends = 0
    for t, a in enumerate(np.random.default_rng(0).integers(0, 17, 2 * limit)):
        action = jnp.asarray(a, jnp.int32)
        step_key = jax.random.split(state.key, 3)[1]
        their_obs, _, reward, done, _ = their_step(step_key, state.inner, action, params)
        state_before = state
        state, out = step(state, action)
        np.testing.assert_allclose(out.final_obs, their_obs, rtol=0, atol=ULP_ATOL)
        np.testing.assert_allclose(out.reward, reward, rtol=0, atol=ULP_ATOL)
        assert bool(out.done) == bool(done)
        if out.done:  # the time limit here: random play does not die in 30 steps
            ends += 1
            assert t + 1 == limit * ends and not out.terminated
            assert any(np.array_equal(out.obs, o) for o in state_before.pool_obs)
            assert int(state.inner.timestep) == 0
        else:
            np.testing.assert_array_equal(out.obs, out.final_obs)
    assert ends == 2
    health = jnp.zeros_like(state.inner.player_health)
    dead = state._replace(inner=state.inner.replace(player_health=health))
    _, out = step(dead, jnp.asarray(0, jnp.int32))
    assert bool(out.done) and bool(out.terminated)  # death: no bootstrap
    fresh = jax.jit(ours.refresh)(state, jax.random.PRNGKey(5))
    pairs = zip(fresh.pool_obs, state.pool_obs, strict=True)
    changed = [not np.array_equal(a, b) for a, b in pairs]
    assert sum(changed) == 1, changed


@pytest.mark.slow  # ~8 s (Craftax's world generation compiles slowly)
@needs_craftax
def test_craftax_restarts_alike_on_every_backend():
    """The accelerators' restart (one elementwise select among the env's world and its pool)
    gives the CPU's (an indexed read of the pool, then a select), bit for bit, under vmap:
    the pooled world ``i`` and its first observation where ``done``, else the world as it
    is."""
    ours = make_env(PPOConfig(env="craftax/Craftax-Classic-Symbolic-v1"))
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    reset = jax.jit(jax.vmap(ours.reset))
    states, others = reset(keys)[0], reset(keys[::-1])[0].inner  # others: "the world as it is"
    i = jnp.array([0, 1, 2, 3, 3, 2, 1, 0])
    done = jnp.array([True, False, True, True, False, True, False, True])
    args = (states, i, done, others)
    cpu = jax.jit(jax.vmap(_craftax._restart_gathered))(*args)
    accelerator = jax.jit(jax.vmap(_craftax._restart_selected))(*args)
    for a, b in zip(jax.tree.leaves(cpu), jax.tree.leaves(accelerator), strict=True):
        np.testing.assert_array_equal(a, b)
    world, first_obs = accelerator
    np.testing.assert_array_equal(first_obs, states.pool_obs[jnp.arange(8), i])
    np.testing.assert_array_equal(world.map[1], others.map[1])  # not done: unchanged
    np.testing.assert_array_equal(world.map[0], states.pool.map[0, 0])  # done: pool world 0


@needs_craftax
def test_craftax_traces_the_step_of_the_platform_its_program_is_for(monkeypatch):
    """One way traced, the one for the program's platform (`lowering_platform`): Craftax's
    own step for the CPU, its masked rewrite (no gather under `vmap`) for an accelerator;
    and the engine tells the env the platform of the device it lowers for."""
    from purejaxppo._engine import Engine
    from purejaxppo.envs import lowering_for, lowering_platform

    ours = make_env(PPOConfig(env="craftax/Craftax-Classic-Symbolic-v1"))
    states = jax.eval_shape(jax.vmap(ours.reset), jax.random.split(jax.random.PRNGKey(0), 4))[0]
    actions = jax.ShapeDtypeStruct((4,), jnp.int32)
    texts = {}
    for platform in ("cpu", "tpu"):
        with lowering_for(platform):
            texts[platform] = str(jax.make_jaxpr(jax.vmap(ours.step))(states, actions))
    # The step adds no platform choice (the restarts' one remains, in both).
    assert texts["tpu"].count("platform_index[") == texts["cpu"].count("platform_index[") == 1
    # Craftax's reads of its map are gathers under vmap (219 here); masked, its slices are
    # not (62 left: its reads at index arrays, and the restarts' CPU branch).
    assert texts["cpu"].count("gather[") > 2 * texts["tpu"].count("gather[")
    assert lowering_platform() == jax.default_backend()  # outside: the default's
    with pytest.raises(ValueError, match=r"lowering_for\('TPU'\): use a jax platform name"):
        with lowering_for("TPU"):
            pass

    seen = []
    monkeypatch.setattr(
        Engine, "program", lambda self, *a: seen.append(lowering_platform()) or (lambda: 0)
    )
    engine = Engine(PPOConfig(), mesh=False)
    monkeypatch.setattr(engine, "_device", lambda: type("D", (), {"platform": "gpu"})())
    engine._lower(None, 1, None, ())
    assert seen == ["gpu"]


@pytest.mark.slow  # Craftax's step compiles twice per case (~15 s Classic, ~60 s the full game)
@needs_craftax
@pytest.mark.parametrize(
    "name, points",
    [
        ("Craftax-Classic-Symbolic-v1", False),
        ("Craftax-Symbolic-v1", False),
        ("Craftax-Classic-Symbolic-v1", True),  # its gathers and scatters masked too
    ],
)
def test_craftax_masked_step_is_its_own(name, points):
    """The accelerators' step (Craftax's ``step_env`` with its slices cut by masks,
    `envs._slices`) gives Craftax's own under vmap over envs, for steps from fresh worlds
    with random actions: observations, worlds, rewards, endings, achievements, every integer
    equal (on this machine every float was too; across CPUs, a stated tolerance)."""
    from purejaxppo.envs._slices import masked_slices

    ours = make_env(PPOConfig(env=f"craftax/{name}"))
    envs, steps = 6, 6

    def run(step_env):
        def go(key):
            _, worlds = jax.vmap(ours.env.reset_env, (0, None))(
                jax.random.split(key, envs), ours.params
            )

            def body(worlds, key):
                act_key, step_key = jax.random.split(key)
                actions = jax.random.randint(act_key, (envs,), 0, ours.num_actions)
                out = jax.vmap(step_env)(jax.random.split(step_key, envs), worlds, actions)
                return out[1], out

            return jax.lax.scan(body, worlds, jax.random.split(key, steps))

        return jax.jit(go)(jax.random.PRNGKey(3))

    own, masked = run(ours._step_env), run(masked_slices(ours._step_env, points=points))
    for a, b in zip(jax.tree.leaves(own), jax.tree.leaves(masked), strict=True):
        if jnp.issubdtype(a.dtype, jnp.floating):  # two programs: XLA may fuse them apart
            np.testing.assert_allclose(a, b, rtol=ULP_ATOL, atol=ULP_ATOL)
        else:  # the map, positions, inventories, endings: read and written alike
            np.testing.assert_array_equal(a, b)
    moved = np.asarray(own[0].player_position) != np.asarray(own[1][1].player_position[0])
    assert moved.any()  # the players went somewhere: the windows were cut at new places


# ---------------------------------------------------------------------- training -----------
SMALL = dict(
    conv_channels=(), mlp_widths=(32,), num_envs=4, num_steps=16, minibatch_size=32,
    update_epochs=1, total_timesteps=64, time_limit=8,
)  # fmt: skip
SUITE_ENVS = [
    pytest.param("craftax/Craftax-Classic-Symbolic-v1", marks=needs_craftax),
    pytest.param("navix/Navix-DoorKey-5x5-v0", marks=needs_navix),
    pytest.param("xminigrid/MiniGrid-DoorKey-5x5", marks=needs_xminigrid),
]


@pytest.mark.parametrize("name", SUITE_ENVS)
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_one_update_of_two_agents(name):
    cfg = PPOConfig(env=name, **SMALL)
    res = sweep(cfg, 2)
    assert res.metrics.policy_loss.shape[:2] == (2, 1)
    for x in (res.metrics.policy_loss, res.metrics.value_loss, res.metrics.entropy):
        assert np.all(np.isfinite(np.asarray(x)))
    assert int(np.asarray(res.metrics.skipped_steps).sum()) == 0
    ended = np.asarray(res.metrics.episodes) > 0
    assert ended.all()  # a time limit of 8 in 16-step rollouts
    for stat, series in res.metrics.episode_stats.items():  # Craftax's achievements
        assert np.all((np.asarray(series) >= 0) & (np.asarray(series) <= 1)), stat  # rates
    if name.startswith("craftax/"):
        assert len(res.metrics.episode_stats) == 22
        assert "achievements/collect_wood" in res.metrics.episode_stats
    env = make_env(cfg)
    if not name.startswith("craftax/"):
        assert env.obs_dtype == jnp.uint8 and len(env.obs_shape) == 3  # a grid, kept compact


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("navix/Navix-Empty-5x5-v0", marks=needs_navix),
        pytest.param("xminigrid/MiniGrid-Empty-5x5", marks=needs_xminigrid),
        pytest.param(
            "craftax/Craftax-Classic-Symbolic-v1", marks=[needs_craftax, pytest.mark.slow]
        ),
    ],
)
@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_a_gif_of_one_episode_drawn_by_the_suites_renderer(tmp_path, name):
    from PIL import Image

    from purejaxppo._distributions import policy_distribution
    from purejaxppo._evaluate import Policy
    from purejaxppo._figures import write_gif
    from purejaxppo._ppo import init_state
    from purejaxppo.envs import can_render

    cfg = PPOConfig(env=name, **SMALL)  # a time limit of 8 steps
    assert can_render(cfg) and not can_render(cfg.replace(time_input=True))
    env, key = make_env(cfg), jax.random.PRNGKey(1)
    policy = Policy(init_state(cfg, env, key).params, policy_distribution(cfg, env), None)
    said = []
    frames = write_gif(tmp_path / "a.gif", cfg, policy, key, log=said.append)
    first = env.frame(jax.jit(env.reset)(key)[0])
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3
    with Image.open(tmp_path / "a.gif") as gif:  # Pillow merges repeated frames: durations
        shown = 0
        for i in range(gif.n_frames):
            gif.seek(i)
            shown += gif.info["duration"]
        assert shown == 150 * frames and gif.size == (first.shape[1], first.shape[0])
    assert 1 <= frames <= 8 and f"{frames} frames of the episode's" in said[0]


SOLVE = dict(
    num_envs=64, num_steps=128, minibatch_size=1024, update_epochs=4, normalize_advantages=True,
    max_grad_norm=0.5, lr=3e-4, ent_coef=0.01, conv_channels=(), mlp_widths=(256, 128),
    total_timesteps=64 * 128 * 37,
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("navix/Navix-Empty-8x8-v0", marks=needs_navix),
        pytest.param("xminigrid/MiniGrid-Empty-8x8", marks=needs_xminigrid),
    ],
)
def test_empty_8x8_is_solved(name):
    """Greedy success >= 0.9 on 100 fresh episodes, for both seeds, after ~300k steps."""
    cfg = PPOConfig(env=name, **SOLVE)
    res = sweep(cfg, 2)
    ev = evaluate(cfg, res.state.params, jax.random.PRNGKey(123), 100, greedy=True)
    success = np.asarray(ev.success).mean(-1)
    assert np.all(success >= 0.9), success


# --------------------------------------------------------------- per-episode statistics ---
class Ticker(Env):
    """Every episode lasts 3 steps; at its end the env reports ``parity`` (the env's total
    step count mod 2) and ``one`` (always 1): per-episode statistics with known values."""

    num_actions = 2
    obs_shape = (1,)
    obs_dtype = jnp.float32
    max_episode_steps = 3
    episode_stats = ("parity", "one")

    def reset(self, key):
        return jnp.int32(0), jnp.zeros(1), jnp.ones(2, bool)

    def step(self, count, action):
        count = count + 1
        done = count % 3 == 0
        stats = jnp.stack([(count % 2).astype(jnp.float32), jnp.float32(1.0)])
        obs = jnp.full(1, (count % 3).astype(jnp.float32))
        return count, EnvStep(obs, jnp.ones(2, bool), jnp.float32(0.0), done, done, stats=stats)


class Silent(Ticker):
    """The same episodes, no statistics."""

    episode_stats = ()

    def step(self, count, action):
        count, out = super().step(count, action)
        return count, out._replace(stats=None)


def test_episode_statistics_are_means_over_the_episodes_that_ended():
    """Against a Python loop: per update (8 steps), the mean of ``parity`` over the episodes
    that ended in it, NaN where none did; and they reach the run directory's files."""
    cfg = PPOConfig(env=Ticker(), conv_channels=(), mlp_widths=(8,), num_envs=2, num_steps=8,
                    minibatch_size=16, update_epochs=1, total_timesteps=16 * 5)  # fmt: skip
    res = sweep(cfg, 2)
    stats = res.metrics.episode_stats
    assert list(stats) == ["one", "parity"] and stats["parity"].shape == (2, 5)  # by name
    for u in range(5):
        ends = [s for s in range(8 * u + 1, 8 * u + 9) if s % 3 == 0]
        expected = np.mean([s % 2 for s in ends]) if ends else np.nan
        np.testing.assert_allclose(np.asarray(stats["parity"])[:, u], expected)
        np.testing.assert_allclose(np.asarray(stats["one"])[:, u], 1.0 if ends else np.nan)
    assert np.asarray(res.metrics.episodes).tolist() == [[2 * 2, 2 * 3, 2 * 3, 2 * 2, 2 * 3]] * 2


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_episode_statistics_reach_the_run_directory(tmp_path):
    cfg = PPOConfig(env=Ticker(), conv_channels=(), mlp_widths=(8,), num_envs=2, num_steps=8,
                    minibatch_size=16, update_epochs=1, total_timesteps=16 * 3)  # fmt: skip
    res = sweep(cfg, 2)
    write_run(tmp_path / "run", res, eval_episodes=0)
    with np.load(tmp_path / "run" / "metrics.npz") as npz:
        parity = np.asarray(res.metrics.episode_stats["parity"])
        np.testing.assert_array_equal(npz["parity"], parity)
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["one", "parity"]
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "| parity | " in summary and "| one | 1.000 |" in summary
    assert (tmp_path / "run" / "episode_stats.png").stat().st_size > 0
    # An env without statistics: no columns, no table, no figure.
    res = sweep(cfg.replace(env=Silent()), 1)
    assert res.metrics.episode_stats == {}
    write_run(tmp_path / "plain", res, eval_episodes=0)
    assert not (tmp_path / "plain" / "episode_stats.png").exists()
    assert "Episode statistics" not in (tmp_path / "plain" / "summary.md").read_text()
    header = (tmp_path / "plain" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[-1] == "skipped_steps"


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_episode_statistics_survive_a_stop_and_resume(tmp_path):
    """A run stopped after one update and resumed from its checkpoint has the statistics of
    the uninterrupted run (the dict rides in the checkpoint's metrics)."""
    cfg = PPOConfig(env=Ticker(), conv_channels=(), mlp_widths=(8,), num_envs=2, num_steps=8,
                    minibatch_size=16, update_epochs=1, total_timesteps=16 * 3)  # fmt: skip
    whole = make_train(cfg)(jax.random.PRNGKey(3))[1]
    _, _, finished = train_with_checkpoints(
        cfg, tmp_path, seed=3, checkpoint_every=1, should_stop=lambda: True
    )
    assert not finished
    _, metrics, finished = train_with_checkpoints(
        cfg, tmp_path, seed=3, checkpoint_every=1, resume=True
    )
    assert finished and list(metrics.episode_stats) == ["one", "parity"]
    assert tree_close(metrics.episode_stats, whole.episode_stats, rtol=0, atol=ULP_ATOL)


class Drawn(Ticker):
    """A Ticker that draws itself: a 4×6 image whose red channel is the step count."""

    can_draw = True

    def frame(self, state):
        image = np.zeros((4, 6, 3), np.uint8)
        image[..., 0] = 40 * int(state)
        return image


@pytest.mark.slow  # over ~6 s: the fast tier stays under 5 minutes
def test_an_own_env_that_draws_itself_gets_a_gif(tmp_path):
    from PIL import Image

    from purejaxppo._distributions import policy_distribution
    from purejaxppo._evaluate import Policy
    from purejaxppo._figures import write_gif
    from purejaxppo._ppo import init_state
    from purejaxppo.envs import can_render

    cfg = PPOConfig(env=Drawn(), conv_channels=(), mlp_widths=(8,))
    assert can_render(cfg) and not can_render(cfg.replace(env=Ticker()))
    env, key = make_env(cfg), jax.random.PRNGKey(0)
    policy = Policy(init_state(cfg, env, key).params, policy_distribution(cfg, env), None)
    assert write_gif(tmp_path / "a.gif", cfg, policy, key) == 3  # steps 0, 1, 2; 3 ends it
    with Image.open(tmp_path / "a.gif") as gif:
        reds = []
        for i in range(gif.n_frames):
            gif.seek(i)
            reds.append(np.asarray(gif.convert("RGB"))[0, 0, 0])
    assert reds == [0, 40, 80] and gif.size == (6, 4)
    small = dict(num_envs=2, num_steps=8, minibatch_size=16, update_epochs=1, total_timesteps=32)
    write_run(tmp_path / "run", sweep(cfg.replace(**small), 1), eval_episodes=0)
    assert (tmp_path / "run" / "agent.gif").stat().st_size > 0  # the run directory's GIF


class Misnamed(Ticker):
    episode_stats = ("parity", "episode_return")


class Miscounted(Ticker):
    episode_stats = ("parity",)


class Unnamed(Ticker):
    episode_stats = ()


@pytest.mark.parametrize(
    "env, says",
    [
        (Misnamed(), "none a Metrics field (got ['episode_return'])"),
        (Miscounted(), "stats must have shape (1,), not (2,)"),
        (Unnamed(), "names no episode_stats"),
    ],
)
def test_own_env_statistics_that_disagree_are_refused_in_one_line(env, says):
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        make_train(PPOConfig(env=env, conv_channels=(), mlp_widths=(8,)))
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------ bad input ---------
@pytest.mark.parametrize(
    "env, needs, says",
    [
        ("navix/Navix-Empty-8x8", needs_navix, "Did you mean ['navix/Navix-Empty-8x8-v0'"),
        ("xminigrid/MiniGrid-Empty-8x8-v0", needs_xminigrid, "['xminigrid/MiniGrid-Empty-8x8'"),
        ("xminigrid/XLand-MiniGrid-R1-9x9", needs_xminigrid, "ruleset benchmarks"),
        ("craftax/Craftax-Classic-v1", needs_craftax, "['craftax/Craftax-Classic-"),
    ],
)
def test_bad_names_are_refused_in_one_line(env, needs, says):
    if needs.args[0]:
        pytest.skip(needs.kwargs["reason"])
    with pytest.raises(ValueError, match="PPOConfig.env=") as info:
        PPOConfig(env=env)
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "module, extra", [(_craftax, "craftax"), (_navix, "navix"), (_xminigrid, "xminigrid")]
)
def test_without_the_extra_the_error_says_how_to_install_it(monkeypatch, module, extra):
    def missing():
        raise ImportError(f"No module named {extra!r}")

    monkeypatch.setattr(module, "registered_names", missing)
    with pytest.raises(ValueError, match=rf"pip install 'purejaxppo\[{extra}\]'") as info:
        PPOConfig(env=f"{extra}/Anything")
    assert "\n" not in str(info.value)
