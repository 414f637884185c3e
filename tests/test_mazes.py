"""Maze layouts: the reference's mazes, user layouts, and every bad-layout error."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig
from purejaxppo.envs import EASY, MEDIUM, make_env, parse_layout
from purejaxppo.envs._layouts import LayoutGenerator


def test_medium_maze_draws_all_nine_combinations_uniformly():
    gen = LayoutGenerator(parse_layout(MEDIUM))
    n = 9000
    states = jax.jit(jax.vmap(gen))(jax.random.split(jax.random.PRNGKey(0), n))
    start = np.stack([states.agent_position.row, states.agent_position.col], -1)
    target = np.stack([states.target_position.row, states.target_position.col], -1)
    pairs = collections.Counter((tuple(s), tuple(t)) for s, t in zip(start, target, strict=True))
    starts = {(0, 0), (9, 0), (0, 9)}
    targets = {(3, 9), (7, 8), (7, 0)}
    assert set(pairs) == {(s, t) for s in starts for t in targets}
    freq = np.array(list(pairs.values())) / n
    # Each is 1/9 ≈ 0.111; binomial sd at n=9000 is 0.0033, so ±0.015 is > 4 sd.
    assert np.all(np.abs(freq - 1 / 9) < 0.015), freq


def test_easy_maze_layout():
    layout = parse_layout(EASY)
    assert layout.shape == (10, 10)
    assert not layout.walls.any()
    assert [tuple(s) for s in layout.starts] == [(0, 0)]
    assert [tuple(t) for t in layout.targets] == [(9, 9)]


def test_medium_maze_matches_the_seed_walls():
    seed_rows = [
        "..#..#.##.",
        "..#..#....",
        ".....##.##",
        "####....#.",
        ".....#..#.",
        "..#.##....",
        "#.#.##.###",
        "..#....#..",
        "###..#.##.",
        ".....#....",
    ]
    walls = np.array([[c == "#" for c in r] for r in seed_rows])
    np.testing.assert_array_equal(parse_layout(MEDIUM).walls, walls)


def test_custom_rectangular_layout_trains_shapes():
    layout = ("S..#....", "...#.##.", "......#G")
    cfg = PPOConfig(maze=layout, num_envs=2, num_steps=8, minibatch_size=16, total_timesteps=16)
    env = make_env(cfg)
    state, obs, mask = env.reset(jax.random.PRNGKey(0))
    assert obs.shape == (3, 3, 8)
    assert int(state.agent_position.row) == 0 and int(state.agent_position.col) == 0
    assert int(state.target_position.row) == 2 and int(state.target_position.col) == 7
    np.testing.assert_array_equal(np.asarray(obs[0]), parse_layout(layout).walls)


@pytest.mark.parametrize(
    "layout, match",
    [
        (("S..", "..", "..G"), r"ragged: row 1 has 2 characters, row 0 has 3"),
        (("...", "...", "..G"), r"no start cell"),
        (("S..", "...", "..."), r"no target cell"),
        (("S.x", "...", "..G"), r"unknown character 'x' at row 0, col 2"),
        (("S.#", "###", "#.G"), r"target \(2, 2\) is unreachable from start \(0, 0\)"),
        ((), r"non-empty tuple of strings"),
    ],
)
def test_bad_layouts_raise_clear_errors(layout, match):
    with pytest.raises(ValueError, match=match):
        parse_layout(layout)
    with pytest.raises(ValueError, match=match):
        PPOConfig(maze=layout)  # refused at construction, before anything compiles


def test_start_on_a_wall_is_refused():
    from purejaxppo.envs import MazeLayout

    walls = np.zeros((3, 3), bool)
    walls[1, 1] = True
    with pytest.raises(ValueError, match=r"start \(1, 1\) is on a wall"):
        MazeLayout(walls=walls, starts=np.array([[1, 1]]), targets=np.array([[2, 2]]))


def test_unknown_maze_name():
    with pytest.raises(ValueError, match="maze='hard' is unknown"):
        PPOConfig(maze="hard")


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_random_maze_uses_jumanjis_generator_any_size():
    cfg = PPOConfig(maze="random", maze_size=(7, 9))
    env = make_env(cfg)
    states, obs, _ = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 4))
    assert obs.shape == (4, 3, 7, 9)
    walls = np.asarray(states.inner.walls)
    assert walls.any() and not (walls == walls[0]).all()  # different random mazes
    states, obs, _ = jax.jit(jax.vmap(make_env(cfg.replace(maze_pool=0)).reset))(
        jax.random.split(jax.random.PRNGKey(0), 4)
    )  # no pool: Jumanji's own state
    assert obs.shape == (4, 3, 7, 9) and not (states.walls == states.walls[0]).all()


# ---- random mazes: the reset pool ----
@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_random_maze_resets_draw_from_the_pool_and_refresh_replaces_one_slot():
    cfg = PPOConfig(maze="random", maze_pool=8)
    env = make_env(cfg)
    state, obs, mask = jax.jit(env.reset)(jax.random.PRNGKey(0))
    pool = np.asarray(state.pool.walls)
    assert pool.shape == (8, 10, 10) and len({p.tobytes() for p in pool}) == 8

    def in_pool(walls, pool):
        return any(np.array_equal(walls, p) for p in pool)

    assert in_pool(np.asarray(state.inner.walls), pool)
    np.testing.assert_array_equal(obs[0], state.inner.walls)  # channel 0 is the walls
    step = jax.jit(env.step)
    seen = 0
    legal = mask
    for _ in range(400):  # first legal move; every reset must come from this env's pool
        state, out = step(state, jnp.argmax(legal))
        legal = out.mask
        if bool(out.done):
            seen += 1
            assert in_pool(np.asarray(state.inner.walls), pool)
    assert seen >= 2  # the time limit (100) forces resets
    refreshed = jax.jit(env.refresh)(state, jax.random.PRNGKey(5))
    changed = [i for i in range(8) if not np.array_equal(refreshed.pool.walls[i], pool[i])]
    assert len(changed) == 1


def test_maze_refresh_replaces_that_many_distinct_slots_with_new_mazes():
    env = make_env(PPOConfig(maze="random", maze_pool=8, maze_refresh=3))
    state, _, _ = jax.jit(env.reset)(jax.random.PRNGKey(0))
    pool = np.asarray(state.pool.walls)
    refresh = jax.jit(env.refresh)
    for k in range(5):
        new = np.asarray(refresh(state, jax.random.PRNGKey(k)).pool.walls)
        changed = [i for i in range(8) if not np.array_equal(new[i], pool[i])]
        assert len(changed) == 3
        # Each replacement is a newly generated maze, not a copy of another slot or of the
        # other replacements (one key reused for all K would give K equal mazes).
        assert not any(np.array_equal(new[i], p) for i in changed for p in pool)
        assert len({new[i].tobytes() for i in changed}) == 3
    for bad in (0, 9, 2.0):
        with pytest.raises(ValueError, match=f"maze_refresh={bad} is invalid"):
            PPOConfig(maze="random", maze_pool=8, maze_refresh=bad)


@pytest.mark.slow
def test_random_maze_trains_with_and_without_the_pool_and_evaluates_on_fresh_mazes():
    from purejaxppo import evaluate, make_train

    small = dict(maze="random", num_envs=4, num_steps=32, minibatch_size=64,
                 update_epochs=1, total_timesteps=256)  # fmt: skip
    for pool in (4, 0):
        state, metrics = make_train(PPOConfig(**small, maze_pool=pool))(jax.random.PRNGKey(1))
        assert np.isfinite(metrics.entropy).all()
    cfg = PPOConfig(**small, maze_pool=4)
    ev = evaluate(cfg, jax.tree.map(lambda x: x[None], state.params), jax.random.PRNGKey(9), 5)
    assert ev.episode_return.shape == (1, 5)
    with pytest.raises(ValueError, match="maze_pool=-1 is invalid"):
        PPOConfig(maze="random", maze_pool=-1)


# ---- the egocentric view ----
def _egocentric_by_hand(walls, agent, target):
    """The obvious version: look up every canvas cell's maze cell, one at a time."""
    h, w = walls.shape
    out = np.zeros((2, 2 * h - 1, 2 * w - 1), np.uint8)
    for i in range(2 * h - 1):
        for j in range(2 * w - 1):
            r, c = agent[0] + i - (h - 1), agent[1] + j - (w - 1)
            inside = 0 <= r < h and 0 <= c < w
            out[0, i, j] = walls[r, c] if inside else 1
            out[1, i, j] = inside and (r, c) == tuple(target)
    return out


def _random_walk(env, steps: int):
    """``(t, state, obs, new_episode)`` before each of ``steps`` random legal moves from a
    reset; ``new_episode``: the move before ended an episode (and the env auto-reset)."""
    state, obs, mask = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    new_episode = False
    for t in range(steps):
        yield t, state, obs, new_episode
        state, out = step(state, jnp.argmax(jax.random.uniform(jax.random.PRNGKey(t), (4,)) * mask))
        obs, mask, new_episode = out.obs, out.mask, bool(out.done)


def _assert_short_training_runs(cfg: PPOConfig):
    from purejaxppo import make_train

    small = dict(num_envs=4, num_steps=32, minibatch_size=64, update_epochs=1,
                 total_timesteps=256, conv_channels=(), mlp_widths=(16,))  # fmt: skip
    _, metrics = make_train(cfg.replace(**small))(jax.random.PRNGKey(1))
    assert np.isfinite(metrics.entropy).all()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_egocentric_view_centres_the_agent_and_trains():
    cfg = PPOConfig(maze="random", maze_size=(6, 8), maze_view="egocentric", maze_pool=4)
    env = make_env(cfg)
    assert env.obs_shape == (2, 11, 15)
    # Resets included: the view follows the agent into new mazes.
    for t, state, obs, _ in _random_walk(env, 30):
        s = state.inner
        agent = (int(s.agent_position.row), int(s.agent_position.col))
        target = (int(s.target_position.row), int(s.target_position.col))
        want = _egocentric_by_hand(np.asarray(s.walls), agent, target)
        np.testing.assert_array_equal(np.asarray(obs), want, err_msg=f"step {t}")
        assert obs[0, 5, 7] == 0  # the agent's own cell, at the centre, is open
    _assert_short_training_runs(cfg)


def test_maze_view_errors_name_the_field():
    with pytest.raises(ValueError, match="maze_view='side' is invalid"):
        PPOConfig(maze="random", maze_view="side")
    with pytest.raises(ValueError, match="maze_view='egocentric' is invalid.*Maze-v0 only"):
        PPOConfig(env="Snake-v1", maze_view="egocentric")


@pytest.mark.slow
# ---- the visited-cells plane ----
@pytest.mark.timeout(300)
@pytest.mark.parametrize("view", ["full", "egocentric"])
def test_visited_plane_holds_this_episodes_cells_and_trains(view):
    cfg = PPOConfig(maze="random", maze_size=(6, 8), maze_view=view, maze_visited=True,
                    maze_pool=4, time_limit=9)  # fmt: skip
    env = make_env(cfg)
    assert env.obs_shape == ((4, 6, 8) if view == "full" else (3, 11, 15))
    seen, resets = set(), 0
    # Several episodes: the time limit (9 steps) ends them.
    for t, state, obs, new_episode in _random_walk(env, 40):
        if new_episode:
            seen, resets = set(), resets + 1
        s = state.inner.inner
        agent = (int(s.agent_position.row), int(s.agent_position.col))
        seen.add(agent)
        # Full view: the cells themselves; egocentric: shifted so that the agent is at (5, 7).
        want = np.zeros(env.obs_shape[1:], np.uint8)
        shift = (0, 0) if view == "full" else (5 - agent[0], 7 - agent[1])
        for r, c in seen:
            want[r + shift[0], c + shift[1]] = 1
        np.testing.assert_array_equal(np.asarray(obs[-1]), want, err_msg=f"step {t}")
    assert resets >= 3
    _assert_short_training_runs(cfg)


def test_maze_visited_errors_name_the_field():
    with pytest.raises(ValueError, match="maze_visited=1 is invalid: use True or False"):
        PPOConfig(maze="random", maze_visited=1)
    with pytest.raises(ValueError, match="maze_visited=True is invalid.*Maze-v0 only"):
        PPOConfig(env="Snake-v1", maze_visited=True)


# ---- the dynamics: ours against Jumanji's own Maze, stepped directly ----
@pytest.mark.parametrize("maze", ["medium", "easy", pytest.param("random", marks=pytest.mark.slow)])
def test_maze_steps_exactly_as_jumanjis_own_env(maze):
    """Our step (its per-env indexing written as comparisons, for the TPU) against Jumanji's
    ``Maze.step`` and ``reset``, batched over envs as training runs them: 300 steps of random
    actions, illegal ones included (a no-op in both), with our auto-reset from the reached
    state's key. Every state field, reward, ending and observation must be equal."""
    import jumanji

    cfg = PPOConfig(maze=maze, maze_pool=0, maze_size=(6, 7) if maze == "random" else (10, 10))
    env = make_env(cfg)
    theirs = jumanji.environments.Maze(generator=env.env.generator, time_limit=env.env.time_limit)
    n = 16
    ours_state, obs, mask = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), n))
    their_state, ts = jax.vmap(theirs.reset)(jax.random.split(jax.random.PRNGKey(1), n))

    def their_step(state, action):
        state, ts = theirs.step(state, action)
        reset_state, reset_ts = theirs.reset(state.key)  # our auto-reset's key
        done = ts.last()
        pick = lambda r, c: jnp.where(done, r, c)  # noqa: E731
        return jax.tree.map(pick, reset_state, state), ts, jax.tree.map(pick, reset_ts, ts)

    ours_step = jax.jit(jax.vmap(env.step))
    their_step = jax.jit(jax.vmap(their_step))
    encode = jax.jit(jax.vmap(env.encode))
    np.testing.assert_array_equal(obs, encode(ts.observation))
    ends = 0
    for t, key in enumerate(jax.random.split(jax.random.PRNGKey(2), 300)):
        action = jax.random.randint(key, (n,), 0, 4)  # often into a wall
        ours_state, out = ours_step(ours_state, action)
        their_state, ts, first = their_step(their_state, action)
        for ours_leaf, their_leaf in zip(
            jax.tree.leaves(ours_state), jax.tree.leaves(their_state), strict=True
        ):
            np.testing.assert_array_equal(ours_leaf, their_leaf, err_msg=f"step {t}")
        np.testing.assert_array_equal(out.reward, ts.reward)
        np.testing.assert_array_equal(out.done, ts.last())
        np.testing.assert_array_equal(out.terminated, ts.last() & (ts.discount == 0))
        np.testing.assert_array_equal(out.mask, first.observation.action_mask)
        np.testing.assert_array_equal(out.obs, encode(first.observation))
        ends += int(np.sum(out.done))
    assert ends > n  # resets happened, at the target or the time limit
