"""The JAX env suites by name: Craftax (``craftax/<name>``), Navix (``navix/<name>``) and
XLand-MiniGrid (``xminigrid/<name>``).

Each adapter is checked against its library's own env stepped directly (observations,
rewards, terminations against truncations, resets), then trained: one update of 2 agents in
the fast tier, and Empty-8x8 solved (greedy success >= 0.9 on fresh episodes) in the slow
one. Without a suite's extra its tests are skipped, saying which; the refusal of its names
is tested either way.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ULP_ATOL, needs_craftax, needs_navix, needs_xminigrid, tree_close

from purejaxppo import PPOConfig, evaluate, sweep
from purejaxppo.envs import _craftax, _navix, _xminigrid, make_env

pytestmark = pytest.mark.timeout(600)


def _actions(forward: int, left: int, right: int) -> np.ndarray:
    """A policy that reaches the goal of an empty room now and then: mostly forward, some
    turns (the suites number their actions differently)."""
    return np.random.default_rng(0).choice([forward, left, right], size=400, p=[0.6, 0.2, 0.2])


def _moveaxis(obs):
    return np.moveaxis(np.asarray(obs), -1, 0)


# ------------------------------------------------------------------ against the library ---
@needs_navix
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


# ---------------------------------------------------------------------- training -----------
SMALL = dict(
    conv_channels=(), mlp_widths=(32,), num_envs=4, num_steps=16, minibatch_size=32,
    update_epochs=1, total_timesteps=64,
)  # fmt: skip
SUITE_ENVS = [
    pytest.param("craftax/Craftax-Classic-Symbolic-v1", marks=needs_craftax),
    pytest.param("navix/Navix-DoorKey-5x5-v0", marks=needs_navix),
    pytest.param("xminigrid/MiniGrid-DoorKey-5x5", marks=needs_xminigrid),
]


@pytest.mark.parametrize("name", SUITE_ENVS)
def test_one_update_of_two_agents(name):
    cfg = PPOConfig(env=name, **SMALL)
    res = sweep(cfg, 2)
    assert res.metrics.policy_loss.shape[:2] == (2, 1)
    for x in (res.metrics.policy_loss, res.metrics.value_loss, res.metrics.entropy):
        assert np.all(np.isfinite(np.asarray(x)))
    assert int(np.asarray(res.metrics.skipped_steps).sum()) == 0
    env = make_env(cfg)
    if not name.startswith("craftax/"):
        assert env.obs_dtype == jnp.uint8 and len(env.obs_shape) == 3  # a grid, kept compact


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


# ------------------------------------------------------------------------ bad input ---------
@pytest.mark.parametrize(
    "env, needs, says",
    [
        ("navix/Navix-Empty-8x8", needs_navix, "Did you mean ['navix/Navix-Empty-8x8-v0'"),
        ("xminigrid/MiniGrid-Empty-8x8-v0", needs_xminigrid, "['xminigrid/MiniGrid-Empty-8x8'"),
        ("xminigrid/XLand-MiniGrid-R1-9x9", needs_xminigrid, "ruleset benchmark"),
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
