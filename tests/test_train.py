"""The one-program trainer: one compile, one top-level scan, determinism, metric shapes."""

import dataclasses
import re

import jax
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, SMALL, tree_equal

from purejaxppo import Metrics, PPOConfig, make_train

TINY = SMALL  # 3 updates, shared with the other test files (one compile)


@pytest.fixture(scope="module")
def tiny_train():
    return make_train(TINY)


@pytest.fixture(scope="module")
def two_runs(tiny_train):
    traces = tiny_train.num_traces  # the engine is shared by every trainer of TINY's shape
    a = tiny_train(jax.random.PRNGKey(0))
    b = tiny_train(jax.random.PRNGKey(1))
    return a, b, tiny_train.num_traces - traces


def test_compiles_once_for_two_keys(tiny_train, two_runs):
    *_, traces = two_runs
    assert traces <= 1  # 0 if another test compiled TINY's program first
    before = tiny_train.num_traces
    # New hyperparameter values are traced leaves too: no recompile, not even for a new
    # trainer of a config that differs only in them.
    tiny_train(jax.random.PRNGKey(0), TINY.replace(lr=1e-3, gamma=0.9))
    make_train(TINY.replace(lr=1e-3))(jax.random.PRNGKey(2))
    assert tiny_train.num_traces == before


def test_program_is_one_top_level_scan_over_updates():
    cfg = TINY.replace(total_timesteps=TINY.batch_size * 7)
    train = make_train(cfg)
    jaxpr = jax.make_jaxpr(train)(jax.random.PRNGKey(0))
    (call,) = [e for e in jaxpr.eqns if e.primitive.name in ("pjit", "jit")]  # one program
    inner = call.params["jaxpr"].jaxpr
    loops = [e for e in inner.eqns if e.primitive.name in ("scan", "while")]
    # Every update runs in exactly one top-level scan of length num_updates, the program's
    # last loop. Loops before it belong to initialisation (the orthogonal init's Householder
    # reflections); none of them runs an update: no rollout scan stands at the top level.
    updates = [e for e in loops if e.primitive.name == "scan" and e.params["length"] == 7]
    assert len(updates) == 1 and loops[-1] is updates[0]
    rollouts = [e for e in loops if e.params.get("length") == cfg.num_steps]
    assert rollouts == []


def test_metrics_shapes_and_values(two_runs):
    (state, metrics), _, _ = two_runs
    assert isinstance(metrics, Metrics)
    for name, value in metrics.columns().items():
        assert value.shape == (TINY.num_updates,), name
    assert int(state.update) == TINY.num_updates
    assert metrics.episodes.dtype.kind == "i"
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
        assert np.isfinite(np.asarray(getattr(metrics, name))).all(), name
    # Return is NaN exactly where no episode ended: no stale or zero-filled values.
    ret, n = np.asarray(metrics.episode_return), np.asarray(metrics.episodes)
    assert (np.isnan(ret) == (n == 0)).all()
    assert (ret[n > 0] >= 0).all() and (ret[n > 0] <= 1).all()


def test_same_key_same_metrics_different_key_different(tiny_train, two_runs):
    (state_a, metrics_a), (_, metrics_b), _ = two_runs
    state_c, metrics_c = tiny_train(jax.random.PRNGKey(0))
    assert tree_equal(metrics_a, metrics_c)
    assert tree_equal(state_a.params, state_c.params)
    assert not tree_equal(metrics_a, metrics_b)


def test_static_field_mismatch_is_refused(tiny_train):
    with pytest.raises(ValueError, match=r"static fields \['num_envs', 'total_timesteps'\] differ"):
        tiny_train(jax.random.PRNGKey(0), TINY.replace(num_envs=8, total_timesteps=768))


def test_make_train_does_not_mutate_or_accept_dicts():
    with pytest.raises(TypeError, match="expects a PPOConfig"):
        make_train({"lr": 3e-4})
    with pytest.raises(TypeError, match=r"key=0 is not a PRNG key array.*PRNGKey\(seed\)"):
        make_train(TINY)(0)
    cfg = PPOConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_train_composes_with_vmap_and_jit(tiny_train, two_runs):
    keys = jax.numpy.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)])
    # Inside the caller's own jit and vmap at once (one compile for both compositions).
    _, metrics = jax.jit(jax.vmap(tiny_train))(keys)
    assert metrics.episode_return.shape == (2, TINY.num_updates)
    # Each vmapped agent is the agent trained alone with the same key (to rounding: the
    # vmapped program batches the two agents' GEMMs).
    (_, solo_a), (_, solo_b), _ = two_runs
    np.testing.assert_allclose(metrics.entropy[0], solo_a.entropy, **ACROSS_SHAPES)
    np.testing.assert_allclose(metrics.entropy[1], solo_b.entropy, **ACROSS_SHAPES)
    assert not np.allclose(metrics.entropy[0], metrics.entropy[1])


@pytest.mark.subprocess
def test_same_key_same_metrics_across_processes():
    import subprocess
    import sys

    code = (
        "import hashlib, jax, numpy as np\n"
        "from purejaxppo import PPOConfig, make_train\n"
        "cfg = PPOConfig(maze='easy', num_envs=4, num_steps=32, minibatch_size=32,\n"
        "                update_epochs=2, total_timesteps=384)\n"
        "s, m = make_train(cfg)(jax.random.PRNGKey(7))\n"
        "leaves = jax.tree.leaves((m, s.params))\n"
        "print(hashlib.sha256(b''.join(np.asarray(x).tobytes() for x in leaves)).hexdigest())\n"
    )
    digests = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
        ).stdout.strip()
        for _ in range(2)
    ]
    assert len(digests[0]) == 64 and digests[0] == digests[1]


@pytest.mark.parametrize("epochs", [pytest.param(3, marks=pytest.mark.slow), 4])
def test_learn_equals_its_epochs_one_loop_iteration_each(epochs, monkeypatch):
    """`learn` runs its epoch scan two epochs per loop iteration (`_ppo.EPOCH_UNROLL`, a speed
    choice); the update must be the one a plain one-epoch-per-iteration scan gives, odd
    counts too, to float rounding (a different program: XLA fuses it differently, ~1 ulp)."""
    from purejaxppo import _ppo
    from purejaxppo.envs import make_env

    cfg = SMALL.replace(update_epochs=epochs)
    env = make_env(cfg)
    state = jax.jit(lambda k: _ppo.init_state(cfg, env, k))(jax.random.PRNGKey(3))
    _, traj, _ = jax.jit(lambda s: _ppo.collect(cfg, env, s))(state)
    flat = jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), traj)
    adv = jax.random.normal(jax.random.PRNGKey(4), (cfg.batch_size,))

    def learn(s):
        return _ppo.learn(cfg, s, flat, adv, adv + 1.0)

    def unrolls(fn) -> str:  # the scans' unroll parameters, as the jaxpr prints them
        return " ".join(sorted(set(re.findall(r"unroll=\d+", str(jax.make_jaxpr(fn)(state))))))

    unrolled = jax.jit(learn)(state)
    assert unrolls(learn) == "unroll=1 unroll=2"  # the epoch scan's 2, the minibatch scan's 1
    monkeypatch.setattr(_ppo, "EPOCH_UNROLL", 1)
    plain = jax.jit(lambda s: learn(s))(state)  # a new function: traced again, unroll=1
    assert unrolls(lambda s: learn(s)) == "unroll=1"
    for a, b in zip(jax.tree.leaves(unrolled), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_learn_equals_its_unpadded_update(monkeypatch):
    """`learn` pads the flat parameters and Adam's moments to a multiple of
    `_ppo.FLAT_MULTIPLE` (a speed choice: XLA:CPU vectorises the loops then); the update must
    be the one without padding, to float rounding, and the state it returns unpadded."""
    from jax.flatten_util import ravel_pytree

    from purejaxppo import _ppo
    from purejaxppo.envs import make_env

    cfg = SMALL
    env = make_env(cfg)
    state = jax.jit(lambda k: _ppo.init_state(cfg, env, k))(jax.random.PRNGKey(5))
    n = ravel_pytree(state.params)[0].size
    assert n % _ppo.FLAT_MULTIPLE, "the test needs a parameter count the padding changes"
    _, traj, _ = jax.jit(lambda s: _ppo.collect(cfg, env, s))(state)
    flat = jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), traj)
    adv = jax.random.normal(jax.random.PRNGKey(6), (cfg.batch_size,))

    def learn(s):
        return _ppo.learn(cfg, s, flat, adv, adv + 1.0)

    padded = jax.jit(learn)(state)
    monkeypatch.setattr(_ppo, "FLAT_MULTIPLE", 1)
    plain = jax.jit(lambda s: learn(s))(state)  # a new function: traced again, unpadded
    shapes = jax.tree.map(lambda x: x.shape, state.opt_state)
    assert jax.tree.map(lambda x: x.shape, padded[0].opt_state) == shapes
    for a, b in zip(jax.tree.leaves(padded), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
