"""Recurrent policies (network="gru"): the GRU cell, hidden-state resets, sequence
minibatches, truncation bootstraps, checkpoints, sweeps, `Policy`, and the local maze view."""

import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import ACROSS_SHAPES, ULP_ATOL, cli, needs_gymnax, tree_close, tree_equal

from purejaxppo import (
    Policy,
    PPOConfig,
    _ppo,
    evaluate,
    load_policy,
    make_train,
    sweep,
    train_with_checkpoints,
)
from purejaxppo._axes import index_of
from purejaxppo._distributions import greedy_action, masked_log_probs, policy_distribution
from purejaxppo._networks import GRUActorCritic, make_network
from purejaxppo.envs import Env, EnvStep, make_env
from purejaxppo.evaluation import policy_of
from purejaxppo.rundir import write_run

pytestmark = pytest.mark.timeout(600)

# A small recurrent config on the partially observed maze: 3 updates, 2 env sequences of 32
# steps per minibatch.
LOCAL = PPOConfig(
    maze="random", maze_view="local", maze_pool=8, network="gru", hidden_size=16,
    num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, total_timesteps=384,
)  # fmt: skip


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ------------------------------------------------------------------------- the network ---
def test_gru_step_matches_the_gru_equations():
    # On the CPU device: a TPU's float32 sigmoid and tanh are ~3e-5 off float64 (seen on a
    # v5e, 2026-12-07), which is the chip's arithmetic; this checks the cell's equations.
    with jax.default_device(jax.devices("cpu")[0]):
        _check_gru_step_against_its_equations()


def _check_gru_step_against_its_equations():
    net = GRUActorCritic((6,), 3, (), (8,), hidden_size=5, key=jax.random.PRNGKey(0))
    obs = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (6,)), np.float64)
    h = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (5,)), np.float64)
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    x = np.maximum(f(net.mlp[0].weight) @ obs + f(net.mlp[0].bias), 0)  # the encoder
    w_i, w_h = np.split(f(net.cell.weight_ih), 3), np.split(f(net.cell.weight_hh), 3)
    b = np.split(f(net.cell.bias), 3)
    r = _sigmoid(w_i[0] @ x + b[0] + w_h[0] @ h)  # reset gate
    z = _sigmoid(w_i[1] @ x + b[1] + w_h[1] @ h)  # update gate
    n = np.tanh(w_i[2] @ x + b[2] + r * (w_h[2] @ h + f(net.cell.bias_n)))
    expected = (1 - z) * n + z * h
    new, (logits, value) = net.step(jnp.asarray(h, jnp.float32), jnp.asarray(obs, jnp.float32))
    np.testing.assert_allclose(new, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        logits, f(net.policy_head.weight) @ expected + f(net.policy_head.bias), atol=1e-6
    )
    np.testing.assert_allclose(
        value, f(net.value_head.weight) @ expected + f(net.value_head.bias), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(TypeError, match="recurrent"):
        net(jnp.zeros(6))  # no silent memoryless call


def test_head_init_gain_scales_the_heads_hidden_layers_only(capsys):
    """``head_init_gain``: the heads' hidden layers are orthogonal at that gain (every singular
    value equals it), drawn from the same keys; the default is 2.0 (``ppo_rnn.py``'s); nothing
    else changes. A bad gain, or one given to another
    network, is one line naming the field."""
    key = jax.random.PRNGKey(0)

    def make(**kw):
        shape = dict(hidden_size=5, head_widths=(7, 7), key=key)
        return GRUActorCritic((6,), 3, (), (8,), **shape, **kw)

    plain, root2, two = make(), make(head_init_gain=2**0.5), make(head_init_gain=2.0)
    assert tree_equal(plain, two)
    for layer in (*two.policy_mlp, *two.value_mlp):
        np.testing.assert_allclose(
            np.linalg.svd(np.asarray(layer.weight), compute_uv=False), 2.0, rtol=1e-5
        )
    for a, b in zip(two.policy_mlp, root2.policy_mlp, strict=True):
        np.testing.assert_allclose(
            np.asarray(a.weight), np.asarray(b.weight) * 2**0.5, rtol=1e-5, atol=1e-6
        )
    assert tree_equal(
        (two.cell, two.mlp, two.policy_head), (root2.cell, root2.mlp, root2.policy_head)
    )
    gru = PPOConfig(env="CartPole-v1", network="gru", head_widths=(8,), conv_channels=())
    for bad in (0.0, -1.0, float("nan"), "2"):
        with pytest.raises(ValueError, match="head_init_gain") as e:
            gru.replace(head_init_gain=bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="head_init_gain.*network='gru' only"):
        PPOConfig(head_init_gain=1.5)
    with pytest.raises(ValueError, match="head_init_gain.*give head_widths"):
        gru.replace(head_widths=(), head_init_gain=1.0)
    assert gru.replace(head_widths=()).head_init_gain == 2.0  # the default needs no widths
    code, _, err = cli(capsys, "train", "--head-init-gain", "0")
    assert code == 2 and "--head-init-gain 0.0 is invalid" in err


def test_gru_init_flax_draws_flax_grucells_initialisation_and_computes_its_gates(capsys):
    """``gru_init="flax"``: biases zero, each gate's recurrent block orthogonal, each gate's
    input block a normal truncated at ±2 std with variance 1/fan_in (flax's lecun_normal);
    the torso and heads as with "equinox" (equinox's own cell); "flax" is the default. The cell then
    computes what flax's own ``GRUCell`` computes with the same weights. A bad name, or the
    option on another network, is one line naming the field."""
    key = jax.random.PRNGKey(0)
    d, h = 64, 32

    def make(**kw):
        return GRUActorCritic((6,), 3, (), (d,), hidden_size=h, head_widths=(8,), key=key, **kw)

    plain, eqx_init, flax_init = make(), make(gru_init="equinox"), make(gru_init="flax")
    assert tree_equal(plain, flax_init)
    assert tree_equal(  # only the cell differs between the two initialisations
        (flax_init.mlp, flax_init.policy_mlp, flax_init.value_mlp, flax_init.value_head),
        (eqx_init.mlp, eqx_init.policy_mlp, eqx_init.value_mlp, eqx_init.value_head),
    )
    assert tree_equal(flax_init.policy_head, eqx_init.policy_head)
    c = flax_init.cell
    assert not np.asarray(c.bias).any() and not np.asarray(c.bias_n).any()
    for g in range(3):
        w_hh = np.asarray(c.weight_hh[g * h : (g + 1) * h])
        np.testing.assert_allclose(w_hh @ w_hh.T, np.eye(h), atol=1e-5)
    w_ih = np.asarray(c.weight_ih)
    assert w_ih.shape == (3 * h, d)
    bound = 2 / 0.87962566103423978 / d**0.5  # the truncation, in units of the weights
    assert np.abs(w_ih).max() <= bound * (1 + 1e-6)
    assert abs(w_ih.std() * d**0.5 - 1.0) < 0.05  # 6,144 draws: std of the std ~1 %
    assert abs(w_ih.mean()) < 0.01
    assert not tree_equal(flax_init.cell, eqx_init.cell)

    nn = pytest.importorskip("flax.linen")  # gymnax's dependency: there with the dev extra
    x = jax.random.normal(jax.random.PRNGKey(1), (d,))
    hid = jax.random.normal(jax.random.PRNGKey(2), (h,))
    c = eqx.tree_at(lambda c: (c.bias, c.bias_n), c, (jnp.arange(3 * h) / 50.0, -jnp.ones(h)))
    wi, wh, b = (np.split(np.asarray(a), 3) for a in (c.weight_ih, c.weight_hh, c.bias))
    params = {
        **{f"i{g}": {"kernel": wi[n].T, "bias": b[n]} for n, g in enumerate("rzn")},
        **{f"h{g}": {"kernel": wh[n].T} for n, g in enumerate("rz")},
        "hn": {"kernel": wh[2].T, "bias": np.asarray(c.bias_n)},
    }
    theirs, _ = nn.GRUCell(features=h).apply({"params": params}, hid, x)
    np.testing.assert_allclose(c(x, hid), theirs, rtol=1e-5, atol=1e-6)

    gru = PPOConfig(env="CartPole-v1", network="gru", conv_channels=())
    with pytest.raises(ValueError, match="gru_init.*one of") as e:
        gru.replace(gru_init="torch")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="gru_init.*network='gru' only"):
        PPOConfig(gru_init="equinox")
    code, _, err = cli(capsys, "train", "--gru-init", "torch")
    assert code == 2 and "--gru-init 'torch' is invalid" in err


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_head_widths_put_an_mlp_of_its_own_in_each_head():
    """``head_widths=(7,)``: each head is Linear-relu-Linear on the new hidden state (as in
    PureJaxRL's ppo_rnn.py); ``()`` keeps linear heads and the parameters' leaves as before."""
    key = jax.random.PRNGKey(0)
    plain = GRUActorCritic((6,), 3, (), (8,), hidden_size=5, key=key)
    net = GRUActorCritic((6,), 3, (), (8,), hidden_size=5, head_widths=(7,), key=key)
    assert [leaf.shape for leaf in jax.tree.leaves(net.policy_mlp)] == [(7, 5), (7,)]
    assert net.policy_head.weight.shape == (3, 7) and net.value_head.weight.shape == (1, 7)
    # The plain network's leaves are exactly those it had before heads could have layers.
    assert [leaf.shape for leaf in jax.tree.leaves(plain)] == [
        (8, 6), (8,),  # the encoder
        (15, 8), (15, 5), (15,), (5,),  # the cell
        (1, 5), (1,), (3, 5), (3,),  # the value and policy heads
    ]  # fmt: skip
    assert tree_equal(plain.cell, net.cell) and tree_equal(plain.mlp, net.mlp)
    obs = jax.random.normal(jax.random.PRNGKey(1), (6,))
    h = jax.random.normal(jax.random.PRNGKey(2), (5,))
    new, (logits, value) = net.step(h, obs)
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    p = np.maximum(f(net.policy_mlp[0].weight) @ f(new) + f(net.policy_mlp[0].bias), 0)
    v = np.maximum(f(net.value_mlp[0].weight) @ f(new) + f(net.value_mlp[0].bias), 0)
    np.testing.assert_allclose(
        logits, f(net.policy_head.weight) @ p + f(net.policy_head.bias), atol=1e-6
    )
    np.testing.assert_allclose(
        value, f(net.value_head.weight) @ v + f(net.value_head.bias), rtol=1e-5, atol=1e-6
    )
    assert not np.allclose(f(net.policy_mlp[0].weight), f(net.value_mlp[0].weight))
    # The config's field reaches the network.
    cfg = LOCAL.replace(head_widths=(12, 6))
    built = make_network(cfg, (5, 5, 3), 4, key)
    assert [lin.weight.shape for lin in built.value_mlp] == [(12, 16), (6, 12)]


@pytest.mark.parametrize("gru_init", ["flax", "equinox"])
def test_step_is_equinox_gru_cell_then_the_heads(gru_init):
    """`step` splits the cell into input gates and the recurrent update (so `unroll` can batch
    a sequence's input products); it must give what `eqx.nn.GRUCell` itself gives."""
    net = GRUActorCritic(
        (3,), 2, (), (4,), hidden_size=6, gru_init=gru_init, key=jax.random.PRNGKey(0)
    )
    obs = jax.random.normal(jax.random.PRNGKey(1), (3,))
    h = jax.random.normal(jax.random.PRNGKey(2), (6,))
    if gru_init == "equinox":  # nonzero biases: both bias terms are exercised
        assert float(jnp.abs(net.cell.bias_n).min()) > 0 < float(jnp.abs(net.cell.bias).min())
    expected_h = net.cell(net.encode(obs), h)
    new_h, (out, value) = net.step(h, obs)
    np.testing.assert_allclose(new_h, expected_h, atol=ULP_ATOL)
    ref_out, ref_value = net.heads(expected_h)
    np.testing.assert_allclose(out, ref_out, atol=ULP_ATOL)
    np.testing.assert_allclose(value, ref_value, atol=ULP_ATOL)


@pytest.mark.parametrize("gru_init", ["flax", "equinox"])  # equinox's: nonzero biases
def test_unroll_equals_a_python_loop_of_steps_with_resets(gru_init):
    """`unroll` (input gates batched before the loop, `GRU_UNROLL` steps per iteration; 9
    steps, so an odd remainder) equals `step` called step by step."""
    net = GRUActorCritic(
        (3,), 2, (), (4,), hidden_size=6, gru_init=gru_init, key=jax.random.PRNGKey(0)
    )
    obs = jax.random.normal(jax.random.PRNGKey(1), (9, 3))
    done = jnp.array([0, 0, 1, 0, 0, 0, 1, 1, 0], bool)
    h0 = jax.random.normal(jax.random.PRNGKey(2), (6,))
    outs, values = net.unroll(h0, obs, done)
    h, ref_out, ref_val = h0, [], []
    for t in range(9):
        h, (o, v) = net.step(h, obs[t])
        ref_out.append(o)
        ref_val.append(v)
        if done[t]:
            h = net.initial_hidden()
    np.testing.assert_allclose(outs, np.stack(ref_out), atol=ULP_ATOL)
    np.testing.assert_allclose(values, np.stack(ref_val), atol=ULP_ATOL)


# ---------------------------------------------------------------- hidden state resets ---
class Periodic(Env):
    """Env i's episodes last ``lengths[i]`` steps; obs = [step in episode, a fixed feature].

    The observations of an episode's first step are all alike, so only the hidden state
    tells a first step from a later one: a missed reset shows in the values.
    """

    num_actions = 2
    obs_shape = (2,)
    obs_dtype = jnp.float32
    max_episode_steps = 10

    def __init__(self, lengths):
        self.lengths = jnp.asarray(lengths, jnp.int32)

    def reset(self, key):
        return (jnp.int32(0), jnp.int32(0)), jnp.array([0.0, 1.0]), jnp.ones(2, bool)

    def step(self, state, action):
        t, i = state
        t = t + 1
        done = t == self.lengths[i]
        t = jnp.where(done, 0, t)
        obs = jnp.stack([t.astype(jnp.float32), 1.0])
        return (t, i), EnvStep(obs, jnp.ones(2, bool), jnp.float32(0.0), done, done)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_hidden_state_resets_where_episodes_end():
    cfg = PPOConfig(
        env="CartPole-v1",
        network="gru",
        hidden_size=8,
        mlp_widths=(8,),
        conv_channels=(),
        num_envs=2,
        num_steps=12,
        minibatch_size=12,
        total_timesteps=24,
    )  # fmt: skip (env= only names the config; Periodic runs)
    env = Periodic([3, 5])
    state = _ppo.init_state(cfg.traced(), env, jax.random.PRNGKey(0))
    # Env i gets its own episode length through its state.
    state = eqx.tree_at(lambda s: s.env_state, state, (jnp.zeros(2, jnp.int32), jnp.arange(2)))
    end, traj, _ = _ppo.collect(cfg.traced(), env, state)
    net = state.params
    np.testing.assert_array_equal(
        np.flatnonzero(traj.done[:, 0]), [2, 5, 8, 11]
    )  # episodes end where the env says
    np.testing.assert_array_equal(np.flatnonzero(traj.done[:, 1]), [4, 9])

    def reference(reset: bool):
        """Each env alone, step by step, resetting its memory after each episode's end."""
        values, hidden = np.zeros((12, 2)), []
        for i, length in enumerate([3, 5]):
            h = net.initial_hidden()
            for t in range(12):
                obs = jnp.array([t % length, 1.0])
                h, (_, v) = net.step(h, obs)
                values[t, i] = v
                if reset and (t + 1) % length == 0:
                    h = net.initial_hidden()
            hidden.append(h)
        return values, np.stack(hidden)

    values, hidden = reference(reset=True)
    np.testing.assert_allclose(traj.value, values, atol=ULP_ATOL)
    np.testing.assert_allclose(end.hidden, hidden, atol=ULP_ATOL)
    # The check can fail: without resets the values after the first episode end differ.
    unreset, _ = reference(reset=False)
    assert np.abs(unreset[3:, 0] - traj.value[3:, 0]).max() > 1e-3


# ------------------------------------------------------------------- the loss ratio ---
@pytest.mark.parametrize("cfg", [
    pytest.param(LOCAL, marks=pytest.mark.slow),  # every ending a termination
    pytest.param(PPOConfig(env="MemoryChain-bsuite", network="gru", hidden_size=16,
                           conv_channels=(), num_envs=4, num_steps=22, minibatch_size=44,
                           total_timesteps=88, time_limit=4), marks=needs_gymnax),
], ids=["maze-local", "memorychain-truncating"])  # fmt: skip
def test_loss_recomputes_the_rollouts_log_probs_and_values(cfg):
    """On the first minibatch (parameters as in the rollout), the ratio is 1."""
    env = make_env(cfg)
    dist = policy_distribution(cfg, env)
    state = _ppo.init_state(cfg.traced(), env, jax.random.PRNGKey(0))
    # A mid-run start: the rollout begins with hidden states in flight, not the initial ones.
    state, _, _ = _ppo.collect(cfg.traced(), env, state)
    hidden = state.hidden
    _, traj, _ = _ppo.collect(cfg.traced(), env, state)
    assert traj.done.any() and jnp.abs(hidden).max() > 0
    envs = jax.random.permutation(jax.random.PRNGKey(1), cfg.num_envs)[:2]  # one minibatch
    mb = jax.tree.map(lambda x: x[:, envs], traj._replace(final_obs=None, final_hidden=None))
    out, value = _ppo.forward(state.params, mb, hidden[envs])
    log_ratio = dist.log_prob(dist.params(out, mb.mask), mb.action) - mb.log_prob
    assert float(jnp.abs(log_ratio).max()) < 1e-5
    np.testing.assert_allclose(value, mb.value, atol=1e-5)
    adv = jax.random.normal(jax.random.PRNGKey(2), mb.value.shape)
    _, info = _ppo.ppo_loss(state.params, cfg.traced(), mb, adv, adv, dist, hidden[envs])
    assert abs(float(info.approx_kl)) < 1e-6 and float(info.clip_frac) == 0.0
    # And it can fail: from the initial hidden state instead, the ratio is not 1.
    wrong, _ = _ppo.forward(state.params, mb, jnp.zeros_like(hidden[envs]))
    assert (
        float(jnp.abs(dist.log_prob(dist.params(wrong, mb.mask), mb.action) - mb.log_prob).max())
        > 1e-4
    )


CUT = LOCAL.replace(sequence_length=8, minibatch_size=32)  # 4 sequences of 8 per minibatch


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_sequences_are_the_rollout_cut_into_pieces():
    """`sequences` against a Python loop: sequence k·N + n is env n's steps k·L … k·L+L−1,
    starting from the hidden state stored at its first step."""
    env = make_env(CUT)
    state = _ppo.init_state(CUT.traced(), env, jax.random.PRNGKey(0))
    hidden = state.hidden
    _, traj, _ = _ppo.collect(CUT.traced(), env, state)
    assert traj.hidden.shape == (32, 4, 16)  # stored per step, only when cut
    adv = jax.random.normal(jax.random.PRNGKey(1), traj.value.shape)
    seqs, seq_adv, _, starts = _ppo.sequences(CUT, traj, adv, -adv, hidden)
    assert seqs.hidden is None and seqs.obs.shape[:2] == (8, 16) and starts.shape == (16, 16)
    for k in range(4):
        for n in range(4):
            s = k * 4 + n
            np.testing.assert_array_equal(seqs.obs[:, s], traj.obs[8 * k : 8 * k + 8, n])
            np.testing.assert_array_equal(seqs.done[:, s], traj.done[8 * k : 8 * k + 8, n])
            np.testing.assert_array_equal(seq_adv[:, s], adv[8 * k : 8 * k + 8, n])
            np.testing.assert_array_equal(starts[s], traj.hidden[8 * k, n])
    np.testing.assert_array_equal(traj.hidden[0], hidden)  # the first piece: the carry
    # Whole rollouts store nothing more and are passed through as they are.
    _, whole, _ = _ppo.collect(LOCAL.traced(), env, state)
    assert whole.hidden is None
    assert _ppo.sequences(LOCAL, whole, adv, adv, hidden)[3] is hidden


def test_cut_sequences_recompute_the_rollouts_log_probs_and_values():
    """Ratio 1 for every piece, each re-run from its stored hidden state; and the check
    can fail: from the initial hidden state, the pieces that start mid-episode differ."""
    env = make_env(CUT)
    dist = policy_distribution(CUT, env)
    state = _ppo.init_state(CUT.traced(), env, jax.random.PRNGKey(0))
    state, _, _ = _ppo.collect(CUT.traced(), env, state)  # memory in flight at the start
    hidden = state.hidden
    _, traj, _ = _ppo.collect(CUT.traced(), env, state)
    adv = jax.random.normal(jax.random.PRNGKey(2), traj.value.shape)
    seqs, seq_adv, seq_target, starts = _ppo.sequences(CUT, traj, adv, adv, hidden)
    out, value = _ppo.forward(state.params, seqs, starts)
    log_ratio = dist.log_prob(dist.params(out, seqs.mask), seqs.action) - seqs.log_prob
    assert float(jnp.abs(log_ratio).max()) < 1e-5
    np.testing.assert_allclose(value, seqs.value, atol=1e-5)
    _, info = _ppo.ppo_loss(state.params, CUT.traced(), seqs, seq_adv, seq_target, dist, starts)
    assert abs(float(info.approx_kl)) < 1e-6 and float(info.clip_frac) == 0.0
    wrong, _ = _ppo.forward(state.params, seqs, jnp.zeros_like(starts))
    wrong_ratio = dist.log_prob(dist.params(wrong, seqs.mask), seqs.action) - seqs.log_prob
    assert float(jnp.abs(wrong_ratio).max()) > 1e-4


@pytest.mark.slow  # over ~10 s: the fast tier stays under 5 minutes
def test_a_sequence_as_long_as_the_rollout_is_the_whole_rollout():
    """``sequence_length=num_steps`` is today's whole-rollout program, bit for bit."""
    key = jax.random.PRNGKey(3)
    assert tree_equal(make_train(LOCAL.replace(sequence_length=32))(key), make_train(LOCAL)(key))


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_cut_sequences_train_through_the_engine_as_alone():
    """A swept agent with cut sequences equals its solo run, and resumes exactly."""
    res = sweep(CUT, seeds=2)
    solo_state, solo_metrics = make_train(CUT)(jax.random.PRNGKey(1))
    assert tree_close(res.agent(seed=1).state.params, solo_state.params, **ACROSS_SHAPES)
    assert tree_close(res.agent(seed=1).metrics, solo_metrics, **ACROSS_SHAPES)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_truncation_bootstraps_with_the_hidden_state_of_that_step():
    """MemoryChain cut at 3 steps (its episodes need 6): every ending is a truncation."""
    cfg = PPOConfig(env="MemoryChain-bsuite", network="gru", hidden_size=16, conv_channels=(),
                    num_envs=2, num_steps=9, minibatch_size=18, total_timesteps=18,
                    time_limit=3)  # fmt: skip
    env = make_env(cfg)
    state = _ppo.init_state(cfg.traced(), env, jax.random.PRNGKey(0))
    end, traj, _ = _ppo.collect(cfg.traced(), env, state)
    assert traj.done.sum() == 6 and not traj.terminated.any()
    next_values = _ppo.bootstrap_values(traj, end)
    net = state.params
    for i in range(2):  # by hand: env i's memory along the rollout
        h = net.initial_hidden()
        for t in range(9):
            h, _ = net.step(h, traj.obs[t, i])
            _, (_, v_final) = net.step(h, traj.final_obs[t, i])  # V(s_{t+1}) before any reset
            np.testing.assert_allclose(next_values[t, i], v_final, atol=ULP_ATOL)
            if traj.done[t, i]:
                # The check can fail: with the reset memory the value differs.
                _, (_, v_reset) = net.step(net.initial_hidden(), traj.final_obs[t, i])
                assert abs(float(v_reset - v_final)) > 1e-4
                h = net.initial_hidden()


# ------------------------------------------------------------- the engine, unchanged ---
@pytest.fixture(scope="module")
def uninterrupted():
    return make_train(LOCAL)(jax.random.PRNGKey(3))


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_checkpoint_and_resume_with_hidden_states_in_flight(tmp_path, uninterrupted):
    state, _, finished = train_with_checkpoints(
        LOCAL, tmp_path, seed=3, checkpoint_every=1, should_stop=lambda: True
    )
    assert not finished and jnp.abs(state.hidden).max() > 0  # memory in flight at the stop
    state, metrics, finished = train_with_checkpoints(
        LOCAL, tmp_path, seed=3, checkpoint_every=1, resume=True
    )
    ref_state, ref_metrics = uninterrupted
    assert finished
    assert tree_equal(state, ref_state)  # parameters, optimiser, envs and hidden states
    assert tree_equal(metrics, ref_metrics)


LRS = [3e-4, 1e-3]


@pytest.fixture(scope="module")
def swept():
    return sweep(LOCAL, seeds=2, lr=LRS)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_a_swept_gru_agent_equals_its_solo_run(swept):
    for seed in range(2):
        for lr in LRS:
            solo_state, solo_metrics = make_train(LOCAL)(
                jax.random.PRNGKey(seed), LOCAL.replace(lr=lr)
            )
            agent = swept.agent(seed=seed, lr=lr)
            assert tree_close(agent.state.params, solo_state.params, **ACROSS_SHAPES)
            assert tree_close(agent.state.hidden, solo_state.hidden, **ACROSS_SHAPES)
            assert tree_close(agent.metrics, solo_metrics, **ACROSS_SHAPES)


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_recurrent_policy_carries_its_memory_and_serves_evaluation(tmp_path, swept):
    write_run(tmp_path / "run", swept, eval_episodes=4, gif=False)
    policy = load_policy(tmp_path / "run", seed=1, lr=LRS[1])
    assert policy.recurrent
    env = make_env(LOCAL)
    _, obs, mask = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 3))
    with pytest.raises(TypeError, match="recurrent"):
        policy(obs, mask)
    hidden = policy.initial_hidden((3,))
    assert hidden.shape == (3, 16)
    action, new = policy.step(hidden, obs, mask)
    net = policy.network
    expected = jax.vmap(net.step)(hidden, obs)
    np.testing.assert_array_equal(new, expected[0])
    # The same ops on the same shapes as inside `step`: exact on any CPU.
    np.testing.assert_array_equal(action, greedy_action(masked_log_probs(expected[1][0], mask)))
    reset = policy.reset(new, jnp.array([True, False, True]))
    np.testing.assert_array_equal(reset[0], 0.0)
    np.testing.assert_array_equal(reset[1], new[1])
    # `evaluate` plays with the memory: as a Python loop of the network's steps over the same
    # episodes (evaluate's keys: reset keys from the first half of a split). Greedy actions
    # are discrete, and the two are different programs (float results may differ by a few
    # ulps), so the policy head is scaled up 100× to make every decision's margin large, and
    # the loop asserts each margin is far above float rounding before comparing.
    agent = index_of(swept.axes, dict(seed=1, lr=LRS[1]))
    sharp = eqx.tree_at(lambda n: n.policy_head.weight, swept.state.params,
                        replace_fn=lambda w: w * 100.0)  # fmt: skip
    key = jax.random.PRNGKey(5)
    ev = evaluate(LOCAL, sharp, key, 4)  # the shapes write_run compiled
    net = policy_of(sharp, agent).network
    state, obs, mask = jax.vmap(env.reset)(jax.random.split(jax.random.split(key)[0], 4))
    hidden, alive = jnp.zeros((4, 16)), np.ones(4, bool)
    ret, length, margins = np.zeros(4), np.zeros(4, int), []

    @jax.jit
    def act(hidden, obs, mask):
        hidden, (logits, _) = jax.vmap(net.step)(hidden, obs)
        top2 = jax.lax.top_k(jnp.where(mask, logits, -1e9), 2)[0]
        return jnp.argmax(jnp.where(mask, logits, -1e9), -1), hidden, top2[:, 0] - top2[:, 1]

    for _ in range(env.max_episode_steps):
        action, hidden, margin = act(hidden, obs, mask)
        margins.append(np.where(alive, margin, np.inf))
        state, out = jax.vmap(env.step)(state, action)
        ret += np.where(alive, out.reward, 0.0)
        length += alive
        alive &= ~np.asarray(out.done)
        hidden = jnp.where(out.done[:, None], 0.0, hidden)
        obs, mask = out.obs, out.mask
    assert np.min(margins) > 1e-3  # ~1e4× the rounding of these logits: no flip possible
    np.testing.assert_allclose(ev.episode_return[agent], ret)
    np.testing.assert_array_equal(ev.episode_length[agent], length)
    from purejaxppo._figures import write_gif

    assert write_gif(tmp_path / "a.gif", LOCAL, policy, key, max_frames=4) <= 4
    # A feedforward policy's memory is empty, and step == call.
    ff = policy_of(make_network(LOCAL.replace(network="shared", hidden_size=128),
                                env.obs_shape, (4,), jax.random.PRNGKey(0)))  # fmt: skip
    assert not ff.recurrent and ff.initial_hidden((3,)).shape == (3, 0)
    np.testing.assert_array_equal(ff.step(ff.initial_hidden((3,)), obs[:3], mask[:3])[0],
                                  ff(obs[:3], mask[:3]))  # fmt: skip


@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_gru_serves_continuous_actions():
    pytest.importorskip("gymnax")
    cfg = PPOConfig(env="Pendulum-v1", network="gru", hidden_size=16, conv_channels=(),
                    mlp_widths=(16,), num_envs=2, num_steps=16, minibatch_size=16,
                    total_timesteps=64)  # fmt: skip
    state, metrics = make_train(cfg)(jax.random.PRNGKey(0))
    assert state.params.log_std is not None and state.hidden.shape == (2, 16)
    assert np.isfinite(metrics.policy_loss).all() and (metrics.skipped_steps == 0).all()
    policy = Policy(state.params, policy_distribution(cfg, make_env(cfg)), state.obs_norm)
    action, _ = policy.step(policy.initial_hidden(), jnp.zeros(3), jnp.ones(1, bool))
    assert action.shape == (1,) and -2 <= float(action[0]) <= 2


# ------------------------------------------------------------------- the local view ---
@pytest.mark.slow  # a longer check: the slow tier keeps the fast one under 5 min
def test_local_view_is_the_centre_of_the_egocentric_view():
    base = PPOConfig(maze="medium", maze_visited=True)
    ego = make_env(base.replace(maze_view="egocentric"))
    keys = jax.random.split(jax.random.PRNGKey(0), 20)
    for k in (3, 5, 7):
        local = make_env(base.replace(maze_view="local", maze_window=k))
        assert local.obs_shape == (3, k, k)
        c, r = ego.obs_shape[1] // 2, k // 2
        s_ego, o_ego, _ = jax.vmap(ego.reset)(keys)
        s_loc, o_loc, _ = jax.vmap(local.reset)(keys)
        for t in range(4):  # the same mazes and moves in both views
            np.testing.assert_array_equal(o_loc, o_ego[:, :, c - r : c + r + 1, c - r : c + r + 1])
            actions = jax.random.randint(jax.random.PRNGKey(t), (20,), 0, 4)
            s_ego, out = jax.vmap(ego.step)(s_ego, actions)
            o_ego = out.obs
            s_loc, out = jax.vmap(local.step)(s_loc, actions)
            o_loc = out.obs


def test_local_view_hides_a_far_target_and_shows_walls_outside():
    env = make_env(PPOConfig(maze=("S.........", "..........", "........G."), maze_view="local",
                             maze_window=3))  # fmt: skip
    _, obs, _ = env.reset(jax.random.PRNGKey(0))
    assert obs.shape == (2, 3, 3)
    assert int(obs[1].sum()) == 0  # the target is 8 columns away: unseen
    np.testing.assert_array_equal(obs[0, 0], [1, 1, 1])  # above the top row: wall
    np.testing.assert_array_equal(obs[0, :, 0], [1, 1, 1])  # left of the first column: wall


# --------------------------------------------------------------------------- bad input ---
@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(network="gru", hidden_size=0), "hidden_size"),
        (dict(network="shared", hidden_size=64), "hidden_size"),
        (dict(network="gru", minibatch_size=1024, num_steps=256, num_envs=16), None),  # fine
        (
            dict(
                network="gru",
                minibatch_size=128,
                num_steps=256,
                num_envs=16,
                total_timesteps=4096 * 2,
            ),
            "minibatch_size",
        ),  # fmt: skip
        (dict(network="gru", head_widths=(0,)), "head_widths"),
        (dict(network="gru", head_widths=128), "head_widths"),
        (dict(network="shared", head_widths=(64,)), "head_widths"),
        (dict(network="gru", head_widths=(64, 32)), None),  # fine
        (dict(network="gru", sequence_length=3), "sequence_length"),  # 128 steps
        (dict(network="gru", sequence_length=0), "sequence_length"),
        (dict(network="shared", sequence_length=16), "sequence_length"),
        (dict(network="gru", sequence_length=16, minibatch_size=1024), None),  # fine
        (
            dict(
                network="gru",
                sequence_length=64,
                minibatch_size=32,
                num_steps=256,
                num_envs=16,
                total_timesteps=4096 * 2,
            ),
            "minibatch_size",
        ),  # fmt: skip
        (dict(maze_view="local", maze_window=4), "maze_window"),
        (dict(maze_view="local", maze_window=1), "maze_window"),
        (dict(maze_window=3), "maze_window"),
        (dict(memory_length=10), "memory_length"),
        (dict(env="MemoryChain-bsuite", conv_channels=(), memory_length=0), "memory_length"),
    ],
)
def test_bad_recurrent_options_are_refused_in_one_line(changes, field):
    if field is None:
        PPOConfig(**changes)
        return
    with pytest.raises(ValueError, match=f"PPOConfig.{field}=") as info:
        PPOConfig(**changes)
    assert "\n" not in str(info.value)
    if field == "minibatch_size":  # the fix names a size that works
        size = 64 if changes.get("sequence_length") else 256
        assert f"e.g. {size}" in str(info.value)
        PPOConfig(**{**changes, "minibatch_size": size})


@pytest.mark.subprocess
def test_cli_refuses_a_minibatch_of_partial_sequences_before_compiling(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "purejaxppo", "train", "--network", "gru", "--num-steps", "256",
         "--minibatch-size", "128", "--total-timesteps", "8192", "--run-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "--minibatch-size 128" in out.stderr and "multiple of num_steps" in out.stderr
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------------- the memory test ---
@pytest.mark.slow
def test_gru_solves_memory_chain_where_feedforward_is_at_chance():
    """MemoryChain: the context bit is shown at the first step only, and the answer asked
    for at the last, so a memoryless policy is at chance (expected return 0, max 1)."""
    common = dict(env="MemoryChain-bsuite", memory_length=5, conv_channels=(), mlp_widths=(64,),
                  num_envs=64, num_steps=32, minibatch_size=512, update_epochs=4, lr=1e-3,
                  total_timesteps=204_800)  # fmt: skip
    key = jax.random.PRNGKey(7)
    gru = PPOConfig(network="gru", hidden_size=64, **common)
    for cfg in (gru, gru.replace(sequence_length=8)):  # whole rollouts; pieces of 8 steps
        res = sweep(cfg, seeds=4)
        returns = evaluate(cfg, res.state.params, key, 1000).episode_return.mean(-1)
        assert (returns >= 0.9).all(), (cfg.sequence_length, returns)
    ff = PPOConfig(network="shared", **common)
    res = sweep(ff, seeds=4)
    returns = evaluate(ff, res.state.params, key, 1000).episode_return.mean(-1)
    assert (jnp.abs(returns) <= 0.15).all(), returns
