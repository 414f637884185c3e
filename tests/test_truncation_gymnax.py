"""Time-limit truncation, the gymnax adapter, and PureJaxRL-compatible configs."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import needs_gymnax

from purejaxppo import PPOConfig, make_train
from purejaxppo._ppo import RunnerState, bootstrap_values, collect, gae
from purejaxppo.envs import Env, EnvStep

pytestmark = pytest.mark.timeout(600)


# ---- truncation, by hand: no gymnax needed ----
class Counter(Env):
    """obs = [t]; reward 1 per step; truncated (never terminated) when t reaches 2."""

    num_actions = 1
    obs_shape = (1,)
    obs_dtype = jnp.float32
    max_episode_steps = 2
    can_truncate = True

    def reset(self, key):
        return jnp.int32(0), jnp.zeros(1), jnp.ones(1, bool)

    def step(self, t, action):
        t = t + 1
        done = t == 2
        final = t.astype(jnp.float32)[None]
        return jnp.where(done, 0, t), EnvStep(
            obs=jnp.where(done, 0.0, final), mask=jnp.ones(1, bool), reward=jnp.float32(1.0),
            terminated=jnp.bool_(False), done=done, final_obs=final,
        )  # fmt: skip


class ValueIsObs(eqx.Module):
    """V(obs) = obs[0]; a single action."""

    def __call__(self, obs):
        return jnp.zeros(1), obs[0]


def counter_state() -> RunnerState:
    """One Counter env at t = 0, valued by `ValueIsObs`."""
    return RunnerState(
        params=ValueIsObs(), opt_state=None, env_state=jnp.zeros(1, jnp.int32),
        obs=jnp.zeros((1, 1)), mask=jnp.ones((1, 1), bool),
        episode_return=jnp.zeros(1), episode_length=jnp.zeros(1, jnp.int32),
        key=jax.random.PRNGKey(0), update=jnp.int32(0),
    )  # fmt: skip


def test_truncation_bootstraps_from_the_true_final_observation():
    cfg = PPOConfig(num_envs=1, num_steps=4, minibatch_size=4, total_timesteps=4,
                    gamma=0.5, gae_lambda=1.0)  # fmt: skip
    env = Counter()
    state = counter_state()
    state, traj, _ = collect(cfg, env, state)
    # Steps reach t = 1, 2 (cut), 1, 2 (cut): V before reset = 1, 2, 1, 2; V(s_t) = 0, 1, 0, 1.
    np.testing.assert_array_equal(traj.value[:, 0], [0, 1, 0, 1])
    next_values = bootstrap_values(traj, state)
    np.testing.assert_array_equal(next_values[:, 0], [1, 2, 1, 2])
    adv, _ = gae(traj.reward, traj.value, next_values, traj.terminated, traj.done, 0.5, 1.0)
    # delta = 1 + 0.5 V(s') - V(s) = 1.5, 1.0, 1.5, 1.0; advantages stop at each cut:
    # A = 1.5 + 0.5 * 1.0, 1.0, 1.5 + 0.5 * 1.0, 1.0.
    np.testing.assert_allclose(adv[:, 0], [2.0, 1.0, 2.0, 1.0])
    # Treating the cut as a real ending (the bug we avoid) gives delta_1 = 1 - 1 = 0.
    wrong, _ = gae(traj.reward, traj.value, next_values, traj.done, traj.done, 0.5, 1.0)
    np.testing.assert_allclose(wrong[:, 0], [1.5, 0.0, 1.5, 0.0])


def test_without_bootstrap_truncation_a_cut_ends_the_return_like_a_termination():
    """``bootstrap_truncation=False``: PureJaxRL's time limit, the ending the test above avoids
    by default, computed by hand: delta = 1 + 0.5 V(s') - V(s) at t = 0, 2; 1 - V(s) = 0 at
    the cuts (t = 1, 3), and the advantages stop there."""
    cfg = PPOConfig(num_envs=1, num_steps=4, minibatch_size=4, total_timesteps=4, gamma=0.5,
                    gae_lambda=1.0, bootstrap_truncation=False)  # fmt: skip
    state = counter_state()
    state, traj, _ = collect(cfg, Counter(), state)
    np.testing.assert_array_equal(traj.terminated[:, 0], [False, True, False, True])
    assert traj.final_obs is None  # nothing to value: the cut is not bootstrapped
    next_values = bootstrap_values(traj, state)
    adv, target = gae(traj.reward, traj.value, next_values, traj.terminated, traj.done, 0.5, 1.0)
    np.testing.assert_allclose(adv[:, 0], [1.5, 0.0, 1.5, 0.0])
    np.testing.assert_allclose(target[:, 0], [1.5, 1.0, 1.5, 1.0])  # the step's own reward


# ---- PureJaxRL configs ----
CARTPOLE = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
    "DEBUG": True,
}  # fmt: skip  (PureJaxRL's ppo.py CartPole config)


def test_from_purejaxrl_translates_every_key():
    with pytest.warns(UserWarning, match="976 updates = 499712 steps will run"):
        cfg = PPOConfig.from_purejaxrl(CARTPOLE)
    assert (cfg.env, cfg.num_envs, cfg.num_steps, cfg.update_epochs) == ("CartPole-v1", 4, 128, 4)
    assert cfg.minibatch_size == 128 and cfg.num_updates == 976
    assert cfg.lr == 2.5e-4 and cfg.max_grad_norm == 0.5 and cfg.vf_coef == 0.25  # 0.5 * 0.5
    assert cfg.network == "separate" and cfg.activation == "tanh" and cfg.mlp_widths == (64, 64)
    assert cfg.normalize_advantages and cfg.clip_value and cfg.anneal_lr and cfg.adam_eps == 1e-5
    with pytest.raises(ValueError, match=r"unknown keys \['LEARNING_RATE'\]"):
        PPOConfig.from_purejaxrl({**CARTPOLE, "LEARNING_RATE": 1e-3})
    with pytest.raises(ValueError, match=r"missing keys \['LR'\]"):
        PPOConfig.from_purejaxrl({k: v for k, v in CARTPOLE.items() if k != "LR"})
    with pytest.raises(ValueError, match="activation='gelu' is invalid"):
        PPOConfig.from_purejaxrl({**CARTPOLE, "ACTIVATION": "gelu", "TOTAL_TIMESTEPS": 512 * 976})


# ---- gymnax (the test environment installs the optional extra) ----


@needs_gymnax
@pytest.mark.parametrize(
    "env",
    [
        "CartPole-v1",
        pytest.param("Acrobot-v1", marks=pytest.mark.slow),
        pytest.param("Breakout-MinAtar", marks=pytest.mark.slow),
    ],
)
def test_gymnax_envs_train(env):
    cfg = PPOConfig(env=env, num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2,
                    total_timesteps=256, conv_channels=(4,), mlp_widths=(32,))  # fmt: skip
    state, metrics = make_train(cfg)(jax.random.PRNGKey(0))
    assert metrics.entropy.shape == (2,)
    for name in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        assert np.isfinite(getattr(metrics, name)).all(), name
    assert int(metrics.skipped_steps.sum()) == 0


@needs_gymnax
def test_gymnax_truncation_is_not_a_termination():
    cfg = PPOConfig(env="CartPole-v1", time_limit=5, num_envs=2, num_steps=16,
                    minibatch_size=32, update_epochs=1, total_timesteps=32)  # fmt: skip
    from purejaxppo._ppo import init_state
    from purejaxppo.envs import make_env

    env = make_env(cfg)
    state = init_state(cfg.traced(), env, jax.random.PRNGKey(1))
    _, traj, _ = collect(cfg.traced(), env, state)
    cut = np.asarray(traj.done & ~traj.terminated)
    assert cut.any()  # 5-step episodes: CartPole rarely falls that fast, so most are cuts
    # At a cut the bootstrap value is V(final obs), not V(the reset obs stored next).
    nv = np.asarray(bootstrap_values(traj, state))
    v_next = np.asarray(jnp.concatenate([traj.value[1:], traj.value[-1:]]))
    assert not np.allclose(nv[:-1][cut[:-1]], v_next[:-1][cut[:-1]])


@needs_gymnax
@pytest.mark.slow
def test_purejaxrl_cartpole_config_reaches_475():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cfg = PPOConfig.from_purejaxrl(CARTPOLE)
    _, metrics = make_train(cfg)(jax.random.PRNGKey(0))
    ret = np.asarray(metrics.episode_return)
    assert np.nanmean(ret[-20:]) >= 475, ret[-20:]
