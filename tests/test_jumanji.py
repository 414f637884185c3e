"""Jumanji envs beyond Maze: encoders, joint and factorised action layouts, training, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_train
from purejaxppo._distributions import entropy, greedy_action, masked_log_probs, sample_action, take
from purejaxppo._networks import PerCellActorCritic
from purejaxppo.envs import JUMANJI_ENVS
from purejaxppo.envs._jumanji import JumanjiEnv, action_layout, flatten_observation, make_jumanji

pytestmark = pytest.mark.timeout(600)

TINY = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 2, minibatch_size=32,
            update_epochs=2, conv_channels=(2,), mlp_widths=(32,))  # fmt: skip


# ---- every supported env trains ----
# One grid env in the fast tier; the rest (and a multi-agent env) in the slow tier.
@pytest.mark.parametrize(
    "name",
    [
        "Snake-v1",
        *[pytest.param(n, marks=pytest.mark.slow) for n in JUMANJI_ENVS if n != "Snake-v1"],
        pytest.param("LevelBasedForaging-v0", marks=pytest.mark.slow),
    ],
)
def test_short_training_is_finite_with_metrics_of_the_right_shapes(name, key):
    # Minesweeper trains its recommended per-cell network; the shared one runs on the rest.
    extra = dict(network="per_cell") if name == "Minesweeper-v0" else {}
    cfg = PPOConfig(env=name, **TINY, **extra)
    train = make_train(cfg)
    state, metrics = train(key)
    for field, value in metrics.columns().items():
        assert value.shape == (cfg.num_updates,), field
    for loss in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
        assert np.all(np.isfinite(getattr(metrics, loss))), loss
    assert int(metrics.skipped_steps.sum()) == 0
    assert state.obs.shape == (cfg.num_envs, *train.env.obs_shape)
    assert state.obs.dtype == train.env.obs_dtype
    assert state.mask.shape == (cfg.num_envs, sum(train.env.action_dims))


# ---- the per-cell policy ----
@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_per_cell_policy_scores_each_cell_from_its_neighbourhood_alike(key):
    """Two 3×3 convs: cell (r, c)'s logit sees exactly the 5×5 square around it, and the
    same square pattern gives the same logit wherever it sits (zero padding aside)."""
    net = PerCellActorCritic((3, 9, 9), 81, (4, 4), (16,), activation="tanh", key=key)
    # Non-zero biases, so that zero padding is not the same as an empty cell.
    board = jax.random.uniform(jax.random.PRNGKey(1), (3, 9, 9))
    logits, value = net(board)
    assert logits.shape == (81,) and value.shape == ()
    grid = logits.reshape(9, 9)
    near, far = board.at[:, 6, 6].add(1.0), board.at[:, 7, 7].add(1.0)
    assert not np.isclose(net(near)[0].reshape(9, 9)[4, 4], grid[4, 4])  # 2 cells away: seen
    np.testing.assert_array_equal(net(far)[0].reshape(9, 9)[4, 4], grid[4, 4])  # 3: unseen
    shifted = jnp.roll(board, 1, axis=2)  # one column right; compare cells whose squares
    moved = net(shifted)[0].reshape(9, 9)  # lie inside the board both times
    np.testing.assert_allclose(moved[2:7, 3:7], grid[2:7, 2:6], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_per_cell_im2col_forward_equals_lax_conv(key):
    """The im2col forward pass against the obvious one: the Conv2d modules' own lax.conv."""
    net = PerCellActorCritic((5, 7, 6), 42, (8, 3), (16,), key=key)
    board = jax.random.normal(jax.random.PRNGKey(1), (5, 7, 6))
    x = board
    for conv in net.convs:
        x = jax.nn.relu(conv(x))  # (C, H, W), padding 1
    want_logits = jnp.einsum("chw,c->hw", x, net.cell_logit.weight[0]).reshape(-1)
    v = x.reshape(-1)
    for lin in net.mlp:
        v = jax.nn.relu(lin(v))
    logits, value = net(board)
    np.testing.assert_allclose(logits, want_logits + net.cell_logit.bias[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, net.value_head(v), rtol=1e-5, atol=1e-5)


def test_per_cell_network_needs_a_cell_action_and_says_so(key):
    with pytest.raises(ValueError, match="network='per_cell' needs a grid observation"):
        make_train(PPOConfig(env="Snake-v1", network="per_cell", **TINY))
    with pytest.raises(ValueError, match="network='per_cell' needs a grid observation"):
        PerCellActorCritic((3, 9, 9), 80, (4,), (16,), key=key)


# ---- action layouts ----
def test_action_layouts_follow_the_mask():
    from jumanji import specs

    disc = specs.DiscreteArray(5)
    multi = specs.MultiDiscreteArray(np.array([4, 10]))
    assert action_layout(disc, (5,)) == ("discrete", (5,), (5,))
    assert action_layout(multi, (4, 10)) == ("joint", (4, 10), (40,))  # Tetris: joint mask
    agents = specs.MultiDiscreteArray(np.array([6, 6, 6]))
    assert action_layout(agents, (3, 6)) == ("factorised", (6, 6, 6), (6, 6, 6))  # per dim
    assert action_layout(agents, None) == ("joint", (6, 6, 6), (216,))  # small, unmasked
    big = specs.MultiDiscreteArray(np.array([21] * 10))
    assert action_layout(big, None).kind == "factorised"  # 21^10 joint actions: too many
    with pytest.raises(ValueError, match="mask has shape"):
        action_layout(multi, (3, 3), "X-v0")
    bounded = specs.BoundedArray((2,), jnp.float32, -1.0, 1.0)
    with pytest.raises(ValueError, match="BoundedArray, not discrete"):
        action_layout(bounded, None, "X-v0")


def test_the_envs_use_the_layouts_the_readme_documents():
    kinds = {n: JumanjiEnv(n).layout.kind for n in ("Minesweeper-v0", "Tetris-v0", "Snake-v1",
                                                     "LevelBasedForaging-v0")}  # fmt: skip
    assert kinds == {"Minesweeper-v0": "joint", "Tetris-v0": "joint", "Snake-v1": "discrete",
                     "LevelBasedForaging-v0": "factorised"}  # fmt: skip


def test_joint_index_decodes_to_the_cell_jumanji_masks(key):
    env = JumanjiEnv("Minesweeper-v0")
    state, _, _ = env.reset(key)
    ts = env.env.step(state.inner, jnp.array([3, 7]))[1]  # reveal (3, 7)
    flat = env.mask(ts.observation)
    for index in range(100):
        row, col = np.asarray(env.env_action(jnp.int32(index)))
        assert (row, col) == divmod(index, 10)
        assert bool(flat[index]) == bool(ts.observation.action_mask[row, col])
    assert not bool(flat[37])  # the revealed cell is no longer legal


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_factorised_policy_is_a_product_of_masked_categoricals(key):
    dims = (3, 5, 2)  # unequal factors exercise the padding
    logits = jax.random.normal(key, (7, 10))
    mask = jax.random.bernoulli(jax.random.fold_in(key, 1), 0.6, (7, 10))
    mask = mask.at[:, [0, 3, 8]].set(True)  # at least one legal action per factor
    lp = masked_log_probs(logits, mask, dims)
    parts, start = [], 0
    for d in dims:  # the obvious reference: one masked softmax per factor
        seg = jnp.where(mask[:, start : start + d], logits[:, start : start + d], -1e9)
        parts.append(jax.nn.log_softmax(seg, axis=-1))
        start += d
    np.testing.assert_allclose(lp, jnp.concatenate(parts, -1), rtol=1e-6)
    actions = sample_action(jax.random.fold_in(key, 2), lp, dims)
    assert actions.shape == (7, 3)
    offsets = np.array([0, 3, 8])
    assert np.all(np.asarray(mask)[np.arange(7)[:, None], offsets + np.asarray(actions)])
    expected = sum(parts[i][np.arange(7), actions[:, i]] for i in range(3))
    np.testing.assert_allclose(take(lp, actions, dims), expected, rtol=1e-6)
    ent = sum(-(jnp.exp(p) * p).sum(-1) for p in parts)
    np.testing.assert_allclose(entropy(lp), ent, rtol=1e-5)
    greedy = greedy_action(lp, dims)
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(greedy[:, i], jnp.argmax(p, -1))


@pytest.mark.slow
def test_factorised_env_samples_only_legal_actions(key):
    cfg = PPOConfig(env="LevelBasedForaging-v0", **TINY)
    train = make_train(cfg)
    from purejaxppo._ppo import collect, init_state

    state = init_state(cfg, train.env, key)
    _, traj, _ = jax.jit(lambda s: collect(cfg, train.env, s))(state)
    assert traj.action.shape == (cfg.num_steps, cfg.num_envs, 2)
    offsets = np.array([0, 6])
    legal = np.take_along_axis(np.asarray(traj.mask), offsets + np.asarray(traj.action), -1)
    assert legal.all()


# ---- encoders ----
@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_encoders_put_each_piece_where_the_env_says(key):
    sweeper = JumanjiEnv("Minesweeper-v0")
    _, obs, _ = sweeper.reset(key)
    assert obs.shape == (10, 10, 10) and np.all(np.asarray(obs).sum(0) == 1)  # one-hot cells
    assert np.all(np.asarray(obs)[0] == 1)  # plane 0 is "unexplored": every cell at the start

    game = JumanjiEnv("Game2048-v1")
    state, obs, _ = game.reset(key)
    board = np.asarray(state.inner.board)
    np.testing.assert_array_equal(np.asarray(obs).argmax(0), board)

    tetris = JumanjiEnv("Tetris-v0")
    state, obs, _ = tetris.reset(key)
    _, ts = tetris.env.reset(jax.random.split(key)[1])
    np.testing.assert_array_equal(np.asarray(obs)[1, :4, :4], ts.observation.tetromino)
    assert np.asarray(obs)[1, 4:].sum() == 0 and np.asarray(obs)[1, :, 4:].sum() == 0

    pac = JumanjiEnv("PacMan-v1")
    state, obs, _ = pac.reset(key)
    s = state.inner
    planes = np.asarray(obs)
    assert planes[3].sum() == 1 and planes[3][int(s.player_locations.x), int(s.player_locations.y)]
    assert planes[1].sum() == int(s.pellets)  # one cell per remaining pellet
    assert planes[4].sum() >= 1 and planes[4].max() == 1  # ghosts, not frightened at the start


def test_flatten_fallback_keeps_every_numeric_leaf_but_the_mask(key):
    env = make_jumanji("Knapsack-v1")
    _, ts = env.reset(key)
    flat = flatten_observation(env, ts.observation)
    o = ts.observation
    expected = np.concatenate([np.ravel(x) for x in (o.weights, o.values, o.packed_items)])
    np.testing.assert_array_equal(flat, expected.astype(np.float32))


# ---- truncation: LevelBasedForaging marks its time limit as a truncation ----
@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_time_limit_cut_is_a_truncation_with_the_pre_reset_observation(key):
    env = JumanjiEnv("LevelBasedForaging-v0", time_limit=3)
    state, obs, _ = jax.jit(env.reset)(key)
    step = jax.jit(env.step)
    outs = []
    for _ in range(3):
        state, out = step(state, jnp.zeros(2, jnp.int32))  # both agents stay put
        outs.append(out)
    assert [bool(o.done) for o in outs] == [False, False, True]
    assert not bool(outs[-1].terminated)  # cut by the limit: bootstrap, do not zero
    # final_obs is the observation reached at the cut, obs the next episode's first one.
    assert float(outs[-1].final_obs[-1]) == 3.0  # the fallback's last feature: step_count
    assert float(outs[-1].obs[-1]) == 0.0


# ---- errors ----
def test_env_needing_a_download_fails_fast_and_clearly_offline(monkeypatch):
    import time

    import purejaxppo.envs._jumanji as pj

    monkeypatch.setattr(pj, "_hub_reachable", lambda timeout=3.0: False)
    t = time.perf_counter()
    with pytest.raises(RuntimeError, match="cannot reach the Hub nor find the file"):
        make_train(PPOConfig(env="Sokoban-v0"))
    assert time.perf_counter() - t < 30  # no retry loop (jumanji's own retries took ~23 s)


def test_continuous_env_and_time_limit_errors_name_the_field():
    with pytest.raises(ValueError, match=r"env='SearchAndRescue-v0'.*BoundedArray"):
        make_train(PPOConfig(env="SearchAndRescue-v0"))
    with pytest.raises(ValueError, match=r"time_limit=50.*takes no time limit"):
        make_train(PPOConfig(env="Game2048-v1", time_limit=50))
