"""PPO, top to bottom: optimiser → init → rollout → GAE → loss → minibatch epochs → one update.

This module is the algorithm alone, for one agent. `update_step` is the body of the
training scan; the engine (`_engine`) runs it for one agent (`make_train`) or many
(`sweep`). Each stage is a plain function, so benchmarks can drive the same pieces from a
Python loop (the reference design) for comparison.

Where we differ from the reference implementation (docs/design.md):
  * one masked policy for rollout and loss, masked with a finite -1e9 (seed defect 1);
  * the value head is a scalar per example, so the value loss never broadcasts (defect 2);
  * entropy is the batch mean of the per-state entropy (defect 4);
  * minibatches gather rows of one stored batch through a permutation, and observations stay
    uint8 (defect 5): on CPU nothing is copied per epoch; on accelerators one permuted copy
    of the batch, packed into uint32 rows, per epoch (`_backend`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ._backend import by_platform, matmul_precision
from ._config import PPOConfig
from ._distributions import Categorical, Distribution, policy_distribution
from ._networks import AbstractActorCritic, is_recurrent, make_network
from ._normalize import RewardScaler, RunningStats, wanted
from ._packing import pack_rows, unpack_rows
from ._permute import permute_rows
from .envs import Env


class Transition(NamedTuple):
    """One env step of one env, as stored in the rollout buffer."""

    obs: Array  # as the network saw it (normalised, with ``normalize_obs``)
    mask: Bool[Array, "*batch A"]
    # An index, k indices (factorised policies) or k floats (continuous: the Gaussian's
    # sample, before clipping to the env's bounds)
    action: Int[Array, "*batch"] | Int[Array, "*batch k"] | Float[Array, "*batch k"]
    log_prob: Float[Array, "*batch"]
    value: Float[Array, "*batch"]
    reward: Float[Array, "*batch"]  # as learned from (scaled, with ``normalize_reward``)
    terminated: Bool[Array, "*batch"]
    done: Bool[Array, "*batch"]
    # The observation reached before any auto-reset, for envs that can truncate (valued after
    # the rollout, see `bootstrap_values`); None otherwise.
    final_obs: Array | None = None
    # Recurrent networks on envs that can truncate: the hidden state after this step, before
    # any reset, from which ``final_obs`` is valued. None otherwise.
    final_hidden: Float[Array, "*batch H"] | None = None
    # Recurrent networks learning from sequences shorter than the rollout
    # (``sequence_length``): the hidden state this step started from, where a sequence that
    # starts here is re-run from. None otherwise.
    hidden: Float[Array, "*batch H"] | None = None


class RunnerState(eqx.Module):
    """Everything the outer scan carries from one update to the next."""

    params: AbstractActorCritic
    opt_state: optax.OptState  # Adam state of the *flattened* params (see `learn`)
    env_state: Any  # the env's own state, batched over num_envs
    obs: Array  # (num_envs, *obs_shape), compact dtype
    mask: Bool[Array, "N A"]
    episode_return: Float[Array, " N"]  # running sums of the unfinished episodes
    episode_length: Int[Array, " N"]
    key: PRNGKeyArray
    update: Int[Array, ""]
    obs_norm: RunningStats | None = None  # with ``normalize_obs``: ``obs`` is normalised
    reward_norm: RewardScaler | None = None  # with ``normalize_reward``
    # Recurrent networks: each env's hidden state, the network's memory of its episode so far
    # (reset to the initial one when an episode ends). None for feedforward networks.
    hidden: Float[Array, "N H"] | None = None


class Metrics(NamedTuple):
    """One value per update (leading axis ``num_updates`` after `train`).

    Every field is an array of shape ``(*batch)`` except ``episode_stats``, a dict of such
    arrays by name (empty for envs that report none). `columns` gives all series as one flat
    dict; prefer it to ``_asdict()`` in code that expects only arrays.
    """

    # Mean over the episodes that ended in this update; NaN if none did (never a stale value).
    episode_return: Float[Array, "*batch"]
    episode_length: Float[Array, "*batch"]  # likewise
    episodes: Int[Array, "*batch"]  # how many episodes ended in this update
    policy_loss: Float[Array, "*batch"]
    value_loss: Float[Array, "*batch"]
    entropy: Float[Array, "*batch"]
    approx_kl: Float[Array, "*batch"]
    clip_frac: Float[Array, "*batch"]
    explained_variance: Float[Array, "*batch"]
    grad_norm: Float[Array, "*batch"]  # before clipping
    skipped_steps: Int[Array, "*batch"]  # minibatch steps skipped for a non-finite loss/gradient
    # The env's per-episode statistics (`Env.episode_stats`: e.g. Craftax's achievements),
    # each the mean over the episodes that ended in this update, as ``episode_return`` (NaN
    # if none did). A dict, not a stacked array, so that an env without statistics adds no
    # leaf: checkpoints written before this field existed still load, and every other
    # field keeps its shape. JAX returns it sorted by name.
    episode_stats: dict[str, Float[Array, "*batch"]] = {}  # never mutated

    def columns(self) -> dict[str, Array]:
        """Every per-update series by name, all arrays: the fields, then each episode
        statistic under its own name (what metrics.csv/.npz and TensorBoard write)."""
        out = {f: getattr(self, f) for f in self._fields if f != "episode_stats"}
        return {**out, **self.episode_stats}


def healthy(metrics: Metrics, divergence_grad_norm: float | None = None) -> Bool[Array, "*batch"]:
    """Per update: no minibatch step skipped, finite losses, entropy and gradient norm, and
    (given ``divergence_grad_norm``) a gradient norm at most that. The one test of an agent's
    health, used by the progress line, a sweep's ``diverged`` and PBT's fitness."""
    ok = jnp.asarray(metrics.skipped_steps) == 0
    for x in (metrics.policy_loss, metrics.value_loss, metrics.entropy, metrics.grad_norm):
        ok &= jnp.isfinite(jnp.asarray(x))
    if divergence_grad_norm is not None:
        ok &= jnp.asarray(metrics.grad_norm) <= divergence_grad_norm
    return ok


class LossInfo(NamedTuple):
    policy_loss: Float[Array, ""]
    value_loss: Float[Array, ""]
    entropy: Float[Array, ""]
    approx_kl: Float[Array, ""]
    clip_frac: Float[Array, ""]
    grad_norm: Float[Array, ""]
    skipped: Float[Array, ""]


# ---------------------------------------------------------------------------- optimiser ---
def make_optimizer(cfg: PPOConfig) -> optax.GradientTransformation:
    """Adam(lr, eps), optionally with global-norm clipping and linear LR annealing.

    Built inside the traced program, so lr, eps and the clip norm can be traced (vmapped).
    """
    lr: Any = cfg.lr
    if cfg.anneal_lr:
        steps_per_update = cfg.update_epochs * cfg.num_minibatches

        def lr(
            count,
        ):  # PureJaxRL's schedule: constant within an update, 0 after the last.
            return cfg.lr * (1.0 - (count // steps_per_update) / cfg.num_updates)

    tx = optax.adam(lr, eps=cfg.adam_eps)
    if cfg.max_grad_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), tx)
    return tx


# ---------------------------------------------------------------------------------- init ---
def init_state(cfg: PPOConfig, env: Env, key: PRNGKeyArray) -> RunnerState:
    key, net_key, env_key = jax.random.split(key, 3)
    params = make_network(cfg, env.obs_shape, policy_distribution(cfg, env), net_key)
    env_state, obs, mask = jax.vmap(env.reset)(jax.random.split(env_key, cfg.num_envs))
    obs_norm = reward_norm = None
    if wanted(cfg.normalize_obs, env):  # the first observations count, as in PureJaxRL
        obs_norm = RunningStats.init(env.obs_shape).update(obs)
        obs = obs_norm.normalize(obs)
    if wanted(cfg.normalize_reward, env):
        reward_norm = RewardScaler.init(cfg.num_envs)
    hidden = None
    if is_recurrent(params):
        hidden = jnp.broadcast_to(params.initial_hidden(), (cfg.num_envs, cfg.hidden_size))
    return RunnerState(
        params=params,
        opt_state=make_optimizer(cfg).init(ravel_pytree(params)[0]),
        env_state=env_state,
        obs=obs,
        mask=mask,
        episode_return=jnp.zeros(cfg.num_envs, jnp.float32),
        episode_length=jnp.zeros(cfg.num_envs, jnp.int32),
        key=key,
        update=jnp.zeros((), jnp.int32),
        obs_norm=obs_norm,
        reward_norm=reward_norm,
        hidden=hidden,
    )


# ------------------------------------------------------------------------------- rollout ---
class EpisodeSums(NamedTuple):
    returns: Float[Array, ""]
    lengths: Float[Array, ""]
    count: Float[Array, ""]
    stats: Float[Array, " K"]  # the env's per-episode statistics (`Env.episode_stats`)


def collect(cfg: PPOConfig, env: Env, state: RunnerState):
    """Step all envs ``num_steps`` times with the current policy.

    Returns the new state, the (num_steps, num_envs) transitions, and sums over the episodes
    that ended (kept in the carry, so nothing per-step escapes the update).

    A recurrent network steps each env's hidden state along, and resets it to the initial
    one after the step that ends an episode, so the next episode starts with no memory. With
    sequences shorter than the rollout, each step also stores the hidden state it started
    from (`Transition.hidden`), where `sequences` re-runs them from.
    """
    net = state.params
    dist = policy_distribution(cfg, env)  # masked categoricals, or a Gaussian
    cut = state.hidden is not None and sequence_length(cfg) < cfg.num_steps

    def step(carry, key):
        s, sums = carry
        if s.hidden is None:
            hidden = None
            out_params, value = jax.vmap(net)(s.obs)
        else:
            hidden, (out_params, value) = jax.vmap(net.step)(s.hidden, s.obs)
        p = dist.params(out_params, s.mask)
        action = dist.sample(key, p)
        # The env gets the action clipped (or squashed) into its bounds; the buffer keeps the
        # sample itself, so the stored log-prob is the one the loss recomputes.
        with jax.named_scope("env_step"):
            env_state, out = jax.vmap(env.step)(s.env_state, dist.env_action(action))
        ep_ret = s.episode_return + out.reward  # raw rewards: metrics never see the scaling
        ep_len = s.episode_length + 1
        sums = EpisodeSums(
            returns=sums.returns + jnp.sum(jnp.where(out.done, ep_ret, 0.0)),
            lengths=sums.lengths + jnp.sum(jnp.where(out.done, ep_len, 0)),
            count=sums.count + jnp.sum(out.done),
            stats=sums.stats
            if out.stats is None
            else sums.stats + jnp.sum(jnp.where(out.done[:, None], out.stats, 0.0), axis=0),
        )
        reward, reward_norm = out.reward, s.reward_norm
        if reward_norm is not None:
            reward_norm, reward = reward_norm.scale(out.reward, out.done, cfg.gamma)
        next_obs, final_obs, obs_norm = out.obs, out.final_obs, s.obs_norm
        if obs_norm is not None:  # the new observations count first, then all are normalised
            obs_norm = obs_norm.update(out.obs)
            next_obs = obs_norm.normalize(out.obs)
            final_obs = None if final_obs is None else obs_norm.normalize(final_obs)
        # Without ``bootstrap_truncation`` a time limit ends the return like a termination,
        # so no final observation needs valuing.
        truncates = env.can_truncate and cfg.bootstrap_truncation
        terminated = out.terminated if cfg.bootstrap_truncation else out.done
        transition = Transition(
            s.obs, s.mask, action, dist.log_prob(p, action), value, reward,
            terminated, out.done, final_obs if truncates else None,
            hidden if truncates else None, s.hidden if cut else None,
        )  # fmt: skip
        if hidden is not None:  # the next episode starts with no memory
            hidden = jnp.where(out.done[:, None], net.initial_hidden(), hidden)
        s = dataclasses.replace(
            s,
            env_state=env_state,
            obs=next_obs,
            mask=out.mask,
            episode_return=jnp.where(out.done, 0.0, ep_ret),
            episode_length=jnp.where(out.done, 0, ep_len),
            obs_norm=obs_norm,
            reward_norm=reward_norm,
            hidden=hidden,
        )
        return (s, sums), transition

    key, rollout_key = jax.random.split(state.key)
    zero = jnp.zeros((), jnp.float32)
    (state, sums), traj = jax.lax.scan(
        step,
        (state, EpisodeSums(zero, zero, zero, jnp.zeros(len(env.episode_stats), jnp.float32))),
        jax.random.split(rollout_key, cfg.num_steps),
    )
    return dataclasses.replace(state, key=key), traj, sums


# ----------------------------------------------------------------------------------- GAE ---
def gae(
    rewards: Float[Array, "T N"],
    values: Float[Array, "T N"],
    next_values: Float[Array, "T N"],
    terminated: Bool[Array, "T N"],
    done: Bool[Array, "T N"],
    gamma: Float[Array, ""] | float,
    lam: Float[Array, ""] | float,
) -> tuple[Float[Array, "T N"], Float[Array, "T N"]]:
    """Generalised advantage estimation as a reverse scan; returns (advantages, targets).

    ``next_values[t]`` is V of the state reached at step t *before* any reset. ``terminated``
    stops bootstrapping (a real ending); ``done`` stops the advantage from flowing back across
    an episode boundary (any ending, a time-limit truncation included).
    """

    def back(carry, x):
        r, v, nv, term, d = x
        delta = r + gamma * nv * (1.0 - term) - v
        adv = delta + gamma * lam * (1.0 - d) * carry
        return adv, adv

    xs = (
        rewards,
        values,
        next_values,
        terminated.astype(values.dtype),
        done.astype(values.dtype),
    )
    _, adv = jax.lax.scan(back, jnp.zeros_like(values[0]), xs, reverse=True)
    return adv, adv + values


# ------------------------------------------------------------------------------ the loss ---
def ppo_loss(
    net: AbstractActorCritic,
    cfg: PPOConfig,
    mb: Transition,
    adv,
    target,
    dist: Distribution | None = None,
    hidden: Float[Array, "M H"] | None = None,
):
    """The clipped PPO loss of one minibatch; ``dist`` defaults to the network's categorical.

    Feedforward: ``mb`` holds M transitions. Recurrent: ``mb`` holds M env sequences,
    (L, M, ...), and ``hidden`` the hidden states they start from (`sequences`); the network
    re-runs each sequence from there with the rollout's resets (`forward`).
    """
    dist = Categorical(net.action_dims) if dist is None else dist
    out, value = forward(net, mb, hidden)  # value: a scalar head, so no (M, M) broadcast
    p = dist.params(out, mb.mask)  # the same masking as in `collect`
    log_ratio = dist.log_prob(p, mb.action) - mb.log_prob
    ratio = jnp.exp(log_ratio)
    if cfg.normalize_advantages:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * adv)
    policy_loss = -surrogate.mean()
    value_err = jnp.square(value - target)
    if cfg.clip_value:
        clipped = mb.value + jnp.clip(value - mb.value, -cfg.clip_eps, cfg.clip_eps)
        value_err = jnp.maximum(value_err, jnp.square(clipped - target))
    value_loss = value_err.mean()
    ent = dist.entropy(p).mean()  # mean over states of the per-state entropy (defect 4)
    total = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * ent
    info = LossInfo(
        policy_loss=policy_loss,
        value_loss=value_loss,
        entropy=ent,
        approx_kl=jnp.mean(ratio - 1.0 - log_ratio),
        clip_frac=jnp.mean(jnp.abs(ratio - 1.0) > cfg.clip_eps),
        grad_norm=jnp.zeros(()),
        skipped=jnp.zeros(()),
    )
    return total, info


def forward(net: AbstractActorCritic, mb: Transition, hidden: Array | None = None):
    """The network's (outputs, values) for a minibatch's observations, shaped like them.

    Recurrent networks unroll each env's sequence (axis 1 of ``mb``) from ``hidden``,
    resetting where the rollout did, so on unchanged parameters this reproduces the
    rollout's outputs (up to float rounding of different batch shapes; tested).
    """
    if hidden is None:
        return jax.vmap(net)(mb.obs)
    return jax.vmap(net.unroll, in_axes=(0, 1, 1), out_axes=1)(hidden, mb.obs, mb.done)


# ------------------------------------------------------------------ epochs + minibatches ---
def shuffle(key: PRNGKeyArray, n: int) -> Int[Array, " n"]:
    """A uniformly random permutation of ``arange(n)``, by sorting random keys.

    `jax.random.permutation` sorts float keys with an index payload, which XLA:CPU does much
    more slowly than one sort of plain uint32 (docs/benchmarks.md). So the index is packed
    into the low bits of a random uint32 and only that is sorted. Keys that share their random
    high bits fall back to index order (with 8192 rows, 19 random bits: ~64 tied pairs per
    shuffle, each still a valid permutation).
    """
    bits = max(1, (n - 1).bit_length())
    if bits > 24:  # keep at least 8 random bits per key
        return jax.random.permutation(key, n)
    low = jnp.uint32((1 << bits) - 1)
    packed = (jax.random.bits(key, (n,), jnp.uint32) & ~low) | jnp.arange(n, dtype=jnp.uint32)
    return (jnp.sort(packed) & low).astype(jnp.int32)


#: Inside `learn`, the flat parameter vector (and Adam's moments) is zero-padded to a multiple
#: of this many floats. XLA:CPU's loop emitter vectorises an elementwise loop well only when its
#: length is a multiple of the vector width: for PureJaxRL's 256-256 continuous networks
#: (134,147 parameters) Adam's step took 2.5× as long unpadded (docs/benchmarks.md). The
#: padding has zero gradients, so Adam keeps it at zero; the state between updates is unpadded.
FLAT_MULTIPLE = 128

#: Epochs per iteration of `learn`'s epoch loop. The same update either way, to float
#: rounding (XLA fuses the two programs differently, ~1 ulp; tests/test_train.py). Two
#: let XLA:CPU schedule a small agent's update better (measured in docs/benchmarks.md).
EPOCH_UNROLL = 2


def learn(
    cfg: PPOConfig,
    state: RunnerState,
    batch: Transition,
    adv,
    target,
    dist: Distribution | None = None,
    hidden: Float[Array, "N H"] | None = None,
):
    """``update_epochs`` passes of minibatch SGD over one batch.

    Feedforward (``hidden`` None): ``batch`` is flat, (num_envs·num_steps, ...), and each
    minibatch is a random set of its rows. Recurrent: ``batch`` is (L, S, ...), S sequences
    of L steps (`sequences`), and each minibatch a random set of sequences (sequences are
    shuffled, never time steps, as in PureJaxRL's ``ppo_rnn.py``), with ``hidden`` the
    hidden states they start from.

    How minibatches are cut is the backend's choice (`_backend`): on CPU each field's rows
    are gathered per minibatch; on an accelerator every field of a row is packed into one
    word row (`_packing`), the packed rows are permuted once per epoch and minibatches are
    consecutive slices. Same permutation, same rows, same update either way.
    """
    tx = make_optimizer(cfg)
    # The optimiser sees all parameters as one flat vector: Adam, the clip and the gradient
    # norm then run as a few fused kernels instead of a few per weight array. On XLA:CPU each
    # kernel launch costs microseconds, which at this network size is most of the update.
    unpadded = ravel_pytree(state.params)[0]
    n = unpadded.size
    padded = -(-n // FLAT_MULTIPLE) * FLAT_MULTIPLE
    # Raveled with the padding as one more leaf, so the gradient is one concatenation.
    tail = jnp.zeros(padded - n, unpadded.dtype)
    flat_params, unravel = ravel_pytree((state.params, tail))

    def pad(x):  # Adam's moments; not its step count
        return jnp.pad(x, (0, padded - n)) if x.shape == (n,) else x

    def unpad(x):
        return x[:n] if x.shape == (padded,) else x

    def flat_loss(flat, mb, adv, target, mb_hidden):
        return ppo_loss(unravel(flat)[0], cfg, mb, adv, target, dist, mb_hidden)

    grad_fn = jax.value_and_grad(flat_loss, has_aux=True)

    def step(carry, mb):
        """One minibatch's gradient step; ``mb`` is (transitions, adv, target, hidden)."""
        params, opt_state = carry
        with jax.named_scope("loss_and_grad"):
            (loss, info), grads = grad_fn(params, *mb)
        with jax.named_scope("optimizer"):
            updates, new_opt_state = tx.update(grads, opt_state, params)
        # A non-finite loss or gradient skips the step: the agent keeps its last finite
        # parameters and optimiser state instead of turning into NaN, and the skip is counted
        # (metrics.skipped_steps), so a diverging agent is visible and stays inert.
        finite = jnp.isfinite(loss) & jnp.all(jnp.isfinite(grads))
        params = jnp.where(finite, params + updates, params)
        opt_state = jax.tree.map(lambda n, o: jnp.where(finite, n, o), new_opt_state, opt_state)
        info = info._replace(grad_norm=jnp.linalg.norm(grads), skipped=1.0 - finite)
        return (params, opt_state), info

    # Rows are transitions (axis 0 of the flat batch) or sequences (axis 1 of (L, S, ...)).
    axis = 0 if hidden is None else 1
    rows = batch.value.shape[axis]
    data = (batch, adv, target)

    def gathered(carry, keys):  # CPU: each field's rows, per minibatch
        def epoch(carry, key):
            with jax.named_scope("shuffle"):
                perm = shuffle(key, rows)

            def minibatch(carry, idx):
                # Just this minibatch's rows: the batch itself is never copied (defect 5).
                with jax.named_scope("gather"):
                    mb = jax.tree.map(lambda x: x[idx] if axis == 0 else x[:, idx], data)
                    mb_hidden = None if hidden is None else hidden[idx]
                return step(carry, (*mb, mb_hidden))

            return jax.lax.scan(minibatch, carry, perm.reshape(cfg.num_minibatches, -1))

        return jax.lax.scan(epoch, carry, keys, unroll=EPOCH_UNROLL)

    def packed(carry, keys):  # accelerators: packed rows, permuted once per epoch
        rows_first = jax.tree.map(lambda x: jnp.moveaxis(x, axis, 0), (batch, adv, target))
        words, layout = pack_rows((*rows_first, hidden))

        def epoch(carry, key):
            with jax.named_scope("shuffle"):
                # whole rows, once per epoch (on a TPU by a kernel: `_permute`)
                shuffled = permute_rows(words, shuffle(key, rows))

            size = rows // cfg.num_minibatches

            def minibatch(carry, i):
                with jax.named_scope("gather"):
                    # Sliced where it lies: scanning over a (minibatches, size, words) reshape
                    # makes vmap move the agents' axis behind the scanned one, a copy of every
                    # row per epoch (docs/experiments/tpu-figures.md, "Minibatches sliced").
                    mb_words = jax.lax.dynamic_slice_in_dim(shuffled, i * size, size)
                    *fields, mb_hidden = unpack_rows(mb_words, layout)
                    fields = jax.tree.map(lambda x: jnp.moveaxis(x, 0, axis), tuple(fields))
                return step(carry, (*fields, mb_hidden))

            return jax.lax.scan(minibatch, carry, jnp.arange(cfg.num_minibatches))

        return jax.lax.scan(epoch, carry, keys)

    key, epoch_key = jax.random.split(state.key)
    carry = (flat_params, jax.tree.map(pad, state.opt_state))
    epoch_keys = jax.random.split(epoch_key, cfg.update_epochs)
    (flat_params, opt_state), info = by_platform(gathered, packed, carry, epoch_keys)
    opt_state = jax.tree.map(unpad, opt_state)
    state = dataclasses.replace(state, params=unravel(flat_params)[0], opt_state=opt_state, key=key)
    skipped = jnp.sum(info.skipped).astype(jnp.int32)
    return state, jax.tree.map(jnp.mean, info)._replace(skipped=skipped)


# ------------------------------------------------------------- recurrent sequences ---
def sequence_length(cfg: PPOConfig) -> int:
    """Steps per sequence a recurrent loss re-runs: ``sequence_length``, or the rollout's."""
    return cfg.num_steps if cfg.sequence_length is None else cfg.sequence_length


def sequences(
    cfg: PPOConfig,
    traj: Transition,
    adv: Float[Array, "T N"],
    target: Float[Array, "T N"],
    hidden: Float[Array, "N H"],
) -> tuple[Transition, Float[Array, "L S"], Float[Array, "L S"], Float[Array, "S H"]]:
    """The rollout, (T, N, ...), as S = N·T/L sequences of L = `sequence_length` steps,
    (L, S, ...), with the hidden state each starts from.

    Sequence ``k·N + n`` is env n's steps ``k·L … (k+1)·L − 1``; it starts from the hidden
    state the rollout stored at its first step (`Transition.hidden`; for whole rollouts,
    ``hidden``, the envs' states at the rollout's start). So on the rollout's parameters every
    sequence reproduces the rollout's outputs (ratio 1), however it is cut. Why cut: a
    minibatch's loss scans L GRU steps one after another, and XLA:CPU pays per step.
    """
    length = sequence_length(cfg)
    if length == cfg.num_steps:
        return traj._replace(hidden=None), adv, target, hidden
    k = cfg.num_steps // length

    def cut(x):
        x = x.reshape(k, length, *x.shape[1:]).swapaxes(0, 1)
        return x.reshape(length, k * x.shape[2], *x.shape[3:])

    starts = traj.hidden[::length].reshape(-1, traj.hidden.shape[-1])
    seqs, adv, target = jax.tree.map(cut, (traj._replace(hidden=None), adv, target))
    return seqs, adv, target, starts


# --------------------------------------------------------------------------- one update ---
def bootstrap_values(traj: Transition, state: RunnerState) -> Float[Array, "T N"]:
    """V(s_{t+1}) for GAE: the value of the state each step reached, before any reset.

    Envs that can truncate store the pre-reset observations during the rollout
    (``traj.final_obs``), so a cut at a time limit bootstraps from the true final observation.
    They are valued here, all T·N at once with the rollout's parameters: one batched pass
    instead of one small pass per step inside the rollout scan, where XLA:CPU's per-kernel
    overhead dominated (docs/benchmarks.md). The price is memory: the rollout keeps a second
    copy of its observations.

    Otherwise (Maze: every ending is a termination, whose bootstrap term is zeroed anyway) it
    is the next step's stored value and, for the last step, the value of the current
    observations.

    A recurrent network values an observation with the hidden state it would have met it
    with: ``final_obs`` with the step's hidden state before any reset (``final_hidden``),
    the current observations with the current hidden states.
    """
    net = state.params
    if traj.final_obs is not None:
        t, n = traj.value.shape
        final = traj.final_obs.reshape(t * n, *traj.final_obs.shape[2:])
        hidden = None if traj.final_hidden is None else traj.final_hidden.reshape(t * n, -1)
        return _values(net, final, hidden).reshape(t, n)
    last_value = _values(net, state.obs, state.hidden)
    return jnp.concatenate([traj.value[1:], last_value[None]], axis=0)


def _values(net: AbstractActorCritic, obs: Array, hidden: Array | None) -> Float[Array, " B"]:
    if hidden is None:
        return jax.vmap(net)(obs)[1]
    return jax.vmap(net.step)(hidden, obs)[1][1]


def update_step(cfg: PPOConfig, env: Env, state: RunnerState) -> tuple[RunnerState, Metrics]:
    """Collect a rollout, compute GAE targets, learn, and reduce metrics to scalars, with
    matrix products at ``cfg.matmul_precision``."""
    with matmul_precision(cfg.matmul_precision):
        return _update_step(cfg, env, state)


def _update_step(cfg: PPOConfig, env: Env, state: RunnerState) -> tuple[RunnerState, Metrics]:
    if env.has_refresh:  # e.g. one new maze per env per update for the reset pools
        key, refresh_key = jax.random.split(state.key)
        with jax.named_scope("refresh"):
            env_state = jax.vmap(env.refresh)(
                state.env_state, jax.random.split(refresh_key, cfg.num_envs)
            )
        state = dataclasses.replace(state, env_state=env_state, key=key)
    hidden = state.hidden  # recurrent: where the loss re-runs each env's sequence from
    # The named scopes label each phase's ops in a profile (docs/benchmarks.md, "On a TPU").
    with jax.named_scope("rollout"):
        state, traj, sums = collect(cfg, env, state)
    with jax.named_scope("gae"):
        next_values = bootstrap_values(traj, state)
        adv, target = gae(
            traj.reward,
            traj.value,
            next_values,
            traj.terminated,
            traj.done,
            cfg.gamma,
            cfg.gae_lambda,
        )
    traj = traj._replace(final_obs=None, final_hidden=None)  # valued above
    dist = policy_distribution(cfg, env)
    with jax.named_scope("learn"):
        if hidden is None:  # minibatches of transitions
            flat = jax.tree.map(lambda x: x.reshape(cfg.batch_size, *x.shape[2:]), traj)
            state, info = learn(cfg, state, flat, adv.reshape(-1), target.reshape(-1), dist)
        else:  # minibatches of env sequences
            seqs, seq_adv, seq_target, starts = sequences(cfg, traj, adv, target, hidden)
            state, info = learn(cfg, state, seqs, seq_adv, seq_target, dist, starts)
    explained = 1.0 - jnp.var(target - traj.value) / jnp.var(target)
    count = sums.count
    metrics = Metrics(
        episode_return=jnp.where(count > 0, sums.returns / jnp.maximum(count, 1), jnp.nan),
        episode_length=jnp.where(count > 0, sums.lengths / jnp.maximum(count, 1), jnp.nan),
        episodes=count.astype(jnp.int32),
        policy_loss=info.policy_loss,
        value_loss=info.value_loss,
        entropy=info.entropy,
        approx_kl=info.approx_kl,
        clip_frac=info.clip_frac,
        explained_variance=explained,
        grad_norm=info.grad_norm,
        skipped_steps=info.skipped,
        episode_stats={
            name: jnp.where(count > 0, sums.stats[i] / jnp.maximum(count, 1), jnp.nan)
            for i, name in enumerate(env.episode_stats)
        },
    )
    return dataclasses.replace(state, update=state.update + 1), metrics
