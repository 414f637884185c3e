"""Brax environments (``env="brax/<name>"``): names, options, endings, a smoke run.

Everything but the missing-extra message needs ``pip install -e ".[brax]"`` and is skipped,
saying so, without it (CI's README install does not include the extra).
"""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo import PPOConfig

HAS_BRAX = importlib.util.find_spec("brax") is not None
needs_brax = pytest.mark.skipif(not HAS_BRAX, reason="needs the brax extra: pip install .[brax]")

PENDULUM = dict(
    env="brax/inverted_pendulum", network="separate", conv_channels=(), mlp_widths=(32, 32),
    activation="tanh", num_envs=4, num_steps=16, minibatch_size=32, update_epochs=1,
    total_timesteps=4 * 16 * 2,
)  # fmt: skip


def test_without_the_extra_the_error_says_how_to_install_it(monkeypatch):
    from purejaxppo.envs import _brax

    def missing():
        raise ImportError("No module named 'brax'")

    monkeypatch.setattr(_brax, "brax_names", missing)
    with pytest.raises(ValueError, match=r"pip install 'purejaxppo\[brax\]'"):
        PPOConfig(**PENDULUM)


@needs_brax
@pytest.mark.parametrize(
    "changes, message",
    [
        ({"env": "brax/inverted_pendulm"}, r"no such Brax environment. Did you mean \['brax/inv"),
        ({"brax_backend": "warp"}, "brax_backend='warp' is invalid: use one of"),
        ({"env": "CartPole-v1", "brax_backend": "spring"}, "it applies to brax/ envs"),
    ],
)
def test_bad_brax_options_are_one_line_at_construction(changes, message):
    with pytest.raises(ValueError, match=message):
        PPOConfig(**{**PENDULUM, **changes})


@needs_brax
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_time_limit_truncates_and_resets_to_the_first_state():
    from purejaxppo.envs import make_env

    env = make_env(PPOConfig(**PENDULUM, time_limit=3))
    assert env.action_bounds == ((-1.0,), (1.0,)) and env.obs_shape == (4,)
    state, obs, _ = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    for _ in range(3):
        state, out = step(state, jnp.zeros(1))
    assert bool(out.done) and not bool(out.terminated)  # a cut at the limit, not an ending
    np.testing.assert_array_equal(out.obs, obs)  # back to the state it was reset to
    assert not np.array_equal(out.final_obs, obs)  # the observation reached, for bootstrapping
    assert int(state.t) == 0


@needs_brax
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_brax_run_is_finite_normalised_and_drawn(tmp_path):
    from PIL import Image

    from purejaxppo import sweep
    from purejaxppo.rundir import write_run

    res = sweep(PPOConfig(**PENDULUM, time_limit=20), seeds=1)
    state, metrics = jax.tree.map(lambda x: x[0], (res.state, res.metrics))
    assert state.obs_norm is not None and state.reward_norm is not None
    for name in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        assert np.isfinite(np.asarray(getattr(metrics, name))).all(), name
    assert int(metrics.skipped_steps.sum()) == 0
    write_run(tmp_path, res, eval_episodes=0)  # agent.gif by Brax's MuJoCo renderer
    with Image.open(tmp_path / "agent.gif") as gif:
        assert gif.n_frames > 1 and gif.size == (320, 240)
        gif.seek(gif.n_frames // 2)
        assert np.asarray(gif.convert("L")).std() > 1  # a picture, not a blank frame


@needs_brax
def test_from_purejaxrl_maps_a_brax_env_name_and_backend():
    d = {
        "LR": 3e-4, "NUM_ENVS": 2048, "NUM_STEPS": 10, "TOTAL_TIMESTEPS": 2048 * 10 * 100,
        "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 32, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
        "CLIP_EPS": 0.2, "ENT_COEF": 0.0, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
        "ACTIVATION": "tanh", "ENV_NAME": "hopper", "ANNEAL_LR": False, "NORMALIZE_ENV": True,
        "BACKEND": "spring",
    }  # fmt: skip
    cfg = PPOConfig.from_purejaxrl(d)
    assert cfg.env == "brax/hopper" and cfg.brax_backend == "spring"
    assert cfg.mlp_widths == (256, 256) and cfg.normalize_obs and cfg.normalize_reward
