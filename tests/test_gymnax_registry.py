"""Every gymnax environment by name: the config accepts all of gymnax's registry, the adapter
steps each one as gymnax itself does, and each trains an update for one and for two agents."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ULP_ATOL

from purejaxppo import PPOConfig, sweep
from purejaxppo.envs import GYMNAX_ENVS, make_env

gymnax = pytest.importorskip("gymnax", reason="pip install '.[gymnax]'")

#: MNISTBandit-bsuite downloads MNIST when it is built: no network here.
OFFLINE = [n for n in GYMNAX_ENVS if n != "MNISTBandit-bsuite"]
#: One env per observation rule stays in the fast tier (vector, flattened board, one-hot,
#: image); every env is checked in the slow tier (MinAtar steps compile slowly).
FAST = ("CartPole-v1", "Catch-bsuite", "FrozenLake-misc", "Breakout-MinAtar")
EACH = [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in OFFLINE]


def test_the_list_is_gymnax_registry():
    assert sorted(GYMNAX_ENVS) == sorted(gymnax.registered_envs)


def expected_encoding(space, obs) -> np.ndarray:
    """What the trainer should see of gymnax's ``obs``, from the space alone."""
    kind = type(space).__name__
    if kind == "Discrete":
        return np.eye(int(space.n), dtype=np.float32)[int(obs)]
    obs = np.asarray(obs)
    if obs.ndim == 3:
        return np.transpose(obs, (2, 0, 1))
    return obs.astype(np.float32).ravel()


@pytest.mark.parametrize("name", EACH)
def test_the_adapter_steps_each_env_as_gymnax_does(name):
    env = make_env(PPOConfig(env=name))
    theirs, params = gymnax.make(name)
    their_step = jax.jit(theirs.step_env)  # both compiled: ulp-level differences only
    key = jax.random.PRNGKey(3)
    state, obs, mask = jax.jit(env.reset)(key)
    reset_obs, _ = jax.jit(theirs.reset_env)(jax.random.split(key)[1], params)
    space = theirs.observation_space(params)
    np.testing.assert_array_equal(obs, expected_encoding(space, reset_obs))
    assert obs.shape == env.obs_shape and obs.dtype == env.obs_dtype
    assert mask.shape == (env.num_actions,) and bool(mask.all())

    step = jax.jit(env.step)
    action_space = theirs.action_space(params)
    for i in range(3):
        action = action_space.sample(jax.random.PRNGKey(10 + i))
        inner = state.inner
        state_key = state.key
        state, out = step(state, action)
        _, step_key, _ = jax.random.split(state_key, 3)
        g_obs, _, g_reward, _, _ = their_step(step_key, inner, action, params)
        want = expected_encoding(space, g_obs)
        np.testing.assert_allclose(out.final_obs, want, rtol=1e-6, atol=ULP_ATOL)
        np.testing.assert_allclose(out.reward, g_reward, rtol=1e-6, atol=ULP_ATOL)
        assert out.obs.shape == env.obs_shape and out.obs.dtype == env.obs_dtype


TINY = dict(num_envs=2, num_steps=4, minibatch_size=8, update_epochs=1, total_timesteps=8,
            mlp_widths=(8,), conv_channels=(2,))  # fmt: skip


@pytest.mark.slow  # ~6 s an env (one program), ~12 s for Freeway-MinAtar
@pytest.mark.parametrize("name", OFFLINE)
def test_each_env_trains_an_update_for_two_agents(name):
    # Two agents in one program: the vmapped path every sweep takes (one agent alone is the
    # same program at batch 1; vmapped agents equal solo ones is tested in test_sweep.py).
    result = sweep(PPOConfig(env=name, **TINY), seeds=2)
    assert result.metrics.entropy.shape == (2, 1)
    for field in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        assert np.isfinite(np.asarray(getattr(result.metrics, field))).all(), (name, field)


def test_a_continuous_gymnax_env_gets_a_gaussian_policy_with_its_bounds():
    env = make_env(PPOConfig(env="Reacher-misc"))
    theirs, params = gymnax.make("Reacher-misc")
    space = theirs.action_space(params)
    assert env.action_bounds == (
        tuple(np.broadcast_to(np.asarray(space.low, float), (2,))),
        tuple(np.broadcast_to(np.asarray(space.high, float), (2,))),
    )


def test_minatar_images_are_uint8_and_other_images_float32():
    assert make_env(PPOConfig(env="SpaceInvaders-MinAtar")).obs_dtype == jnp.uint8
    pong = make_env(PPOConfig(env="Pong-misc"))
    assert pong.obs_dtype == jnp.float32 and pong.obs_shape == (3, 30, 40)


def test_an_env_gymnax_cannot_build_is_one_line():
    try:
        make_env(PPOConfig(env="MNISTBandit-bsuite"))
    except ValueError as e:
        assert "\n" not in str(e) and "gymnax could not build it" in str(e)
    else:
        pytest.skip("MNIST was downloaded or cached: the env built")


def test_an_unsupported_space_is_refused_in_one_line(monkeypatch):
    from gymnax.environments import spaces

    from purejaxppo.envs import GymnaxEnv

    box = spaces.Box(0, 1, (2, 2))
    monkeypatch.setattr(type(gymnax.make("CartPole-v1")[0]), "action_space", lambda s, p: box)
    with pytest.raises(ValueError) as e:
        GymnaxEnv("CartPole-v1")
    assert "\n" not in str(e.value)
    assert "action space is Box of shape (2, 2)" in str(e.value)
