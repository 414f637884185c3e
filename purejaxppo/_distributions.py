"""The policy's action distribution: masked categoricals, or a diagonal Gaussian.

The network outputs a flat vector of ``param_size`` numbers per observation; a distribution
turns it into what the rollout, the loss, evaluation and `Policy` need, so those are written
once for every action space:

    p = dist.params(net_output, mask)      # categorical: masked log-probs; Gaussian: mean|log-std
    a = dist.sample(key, p)                # what the buffer stores and the ratio scores
    dist.log_prob(p, a), dist.entropy(p), dist.mode(p)
    env.step(state, dist.env_action(a))    # clipped (or squashed) into the env's bounds

`policy_distribution(cfg, env)` picks one from the env's action space.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

_LOG_2PI = math.log(2 * math.pi)

# Forbidden actions get this logit, in the rollout *and* in the loss. It is finite on purpose:
# with -inf, the entropy term p·log p becomes 0·(-inf) = NaN. The reference filled 1.0 in the loss
# (defect 1), so the loss scored a different policy from the one that acted.
MASKED_LOGIT = -1e9


# ---- the policy distribution -----------------------------------------------------------
# ``dims`` describes the action: ``(A,)`` (or None) is one categorical over A actions, also
# used for a multi-discrete action whose mask is *joint* (the env flattens it); ``(d1, ..., dk)``
# is k independent ("factorised") categoricals whose logits and masks are concatenated, and
# whose action is a vector of k indices. Entropy needs no ``dims``: the sum of -p·log p over
# all concatenated entries is the sum of the factors' entropies.


def masked_log_probs(
    logits: Float[Array, "*B A"], mask: Bool[Array, "*B A"], dims: tuple[int, ...] | None = None
) -> Float[Array, "*B A"]:
    """Log-probabilities over legal actions (forbidden ones ≈ -1e9), per factor of ``dims``."""
    x = jnp.where(mask, logits, MASKED_LOGIT)
    if _single(dims):
        return jax.nn.log_softmax(x, axis=-1)
    if len(set(dims)) == 1:  # equal factors: one reshape, one kernel
        k, d = len(dims), dims[0]
        return jax.nn.log_softmax(x.reshape(*x.shape[:-1], k, d), axis=-1).reshape(x.shape)
    parts = jnp.split(x, np.cumsum(dims)[:-1].tolist(), axis=-1)
    return jnp.concatenate([jax.nn.log_softmax(p, axis=-1) for p in parts], axis=-1)


def sample_action(
    key: PRNGKeyArray, log_probs: Float[Array, "*B A"], dims: tuple[int, ...] | None = None
) -> Int[Array, "*B"] | Int[Array, "*B k"]:
    """Sample from the masked policy; a forbidden action can never win (≈ -1e9).

    Returns ``(*B,)`` indices for one categorical, ``(*B, k)`` for k factors.
    """
    if _single(dims):
        return jax.random.categorical(key, log_probs, axis=-1)
    return jax.random.categorical(key, _factor_view(log_probs, dims), axis=-1)


def greedy_action(
    log_probs: Float[Array, "*B A"], dims: tuple[int, ...] | None = None
) -> Int[Array, "*B"] | Int[Array, "*B k"]:
    """The most probable legal action (per factor)."""
    if _single(dims):
        return jnp.argmax(log_probs, axis=-1)
    return jnp.argmax(_factor_view(log_probs, dims), axis=-1)


def entropy(log_probs: Float[Array, "*B A"]) -> Float[Array, "*B"]:
    """Per-state entropy. Forbidden actions contribute exp(-1e9)·(-1e9) = 0, never NaN."""
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def take(
    log_probs: Float[Array, "*B A"],
    action: Int[Array, "*B"] | Int[Array, "*B k"],
    dims: tuple[int, ...] | None = None,
) -> Float[Array, "*B"]:
    """log π(action): for k factors, the sum of the factors' log-probabilities.

    Selected by comparing with an iota and summing, not by indexing: the same value (the
    other terms are exact zeros), but under `vmap` over agents an indexed read is a batched
    gather, which XLA:TPU runs as a slow custom fusion, and whose gradient is a scatter-add
    (docs/benchmarks.md, "On a TPU").
    """
    view = log_probs if _single(dims) else _factor_view(log_probs, dims)
    hit = jnp.arange(view.shape[-1], dtype=jnp.int32) == action[..., None]
    picked = jnp.sum(jnp.where(hit, view, 0.0), axis=-1)
    return picked if _single(dims) else picked.sum(-1)


def _single(dims) -> bool:
    return dims is None or len(dims) == 1


def _factor_view(x: Float[Array, "*B A"], dims: tuple[int, ...]) -> Float[Array, "*B k D"]:
    """(*B, sum(dims)) → (*B, k, max(dims)); short factors padded with MASKED_LOGIT."""
    k, d = len(dims), max(dims)
    if len(set(dims)) == 1:
        return x.reshape(*x.shape[:-1], k, d)
    parts = jnp.split(x, np.cumsum(dims)[:-1].tolist(), axis=-1)
    pad = [(0, 0)] * (x.ndim - 1)
    return jnp.stack(
        [jnp.pad(p, [*pad, (0, d - p.shape[-1])], constant_values=MASKED_LOGIT) for p in parts],
        axis=-2,
    )


class Categorical(eqx.Module):
    """One categorical, or factorised categoricals (``dims``), masked by the env's legal
    actions (see `masked_log_probs`): the discrete policy of every Jumanji and gymnax env."""

    dims: tuple[int, ...] = eqx.field(static=True)

    @property
    def param_size(self) -> int:
        return sum(self.dims)

    def params(self, out: Float[Array, "*B P"], mask: Bool[Array, "*B A"]) -> Array:
        return masked_log_probs(out, mask, self.dims)

    def sample(self, key: PRNGKeyArray, p: Array) -> Array:
        return sample_action(key, p, self.dims)

    def log_prob(self, p: Array, action: Array) -> Float[Array, "*B"]:
        return take(p, action, self.dims)

    def entropy(self, p: Array) -> Float[Array, "*B"]:
        return entropy(p)

    def mode(self, p: Array) -> Array:
        return greedy_action(p, self.dims)

    def env_action(self, action: Array) -> Array:
        return action


class DiagGaussian(eqx.Module):
    """A diagonal Gaussian over ``size`` action dimensions; ``params`` is ``mean | log_std``.

    Unsquashed (the PureJaxRL / CleanRL default), the sample ``a`` is what the buffer stores
    and the log-prob and PPO ratio score; the env receives ``clip(a, low, high)``. Clipping
    happens outside the distribution, so it never changes a stored log-prob.

    Squashed (``squash=True``, bounded actions only): the buffer stores the Gaussian sample
    ``u`` and the env receives ``low + (tanh(u) + 1)/2 · (high - low)``; the log-prob is that
    of the squashed action, ``log N(u) - Σ log(dâ/du)`` with ``dâ/du = (1 - tanh²u)(high -
    low)/2`` (the change-of-variables term), computed stably as ``2(log 2 - u - softplus(-2u))``
    for ``log(1 - tanh²u)``. The squashed distribution's entropy has no closed form; the loss
    uses the base Gaussian's (a common surrogate; say so where it matters).
    """

    size: int = eqx.field(static=True)
    low: tuple[float, ...] = eqx.field(static=True)
    high: tuple[float, ...] = eqx.field(static=True)
    squash: bool = eqx.field(static=True, default=False)

    @property
    def param_size(self) -> int:
        return 2 * self.size

    def params(self, out: Float[Array, "*B P"], mask: Array | None = None) -> Array:
        del mask  # every continuous action is legal
        return out

    def _split(self, p: Array) -> tuple[Array, Array]:
        return p[..., : self.size], p[..., self.size :]

    def sample(self, key: PRNGKeyArray, p: Array) -> Float[Array, "*B k"]:
        mean, log_std = self._split(p)
        return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)

    def log_prob(self, p: Array, action: Array) -> Float[Array, "*B"]:
        mean, log_std = self._split(p)
        z = (action - mean) * jnp.exp(-log_std)
        logp = jnp.sum(-0.5 * z * z - log_std - 0.5 * _LOG_2PI, axis=-1)
        if self.squash:
            log_det = 2.0 * (math.log(2.0) - action - jax.nn.softplus(-2.0 * action))
            logp = logp - jnp.sum(log_det + jnp.log(self._half_range()), axis=-1)
        return logp

    def entropy(self, p: Array) -> Float[Array, "*B"]:
        _, log_std = self._split(p)
        return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self, p: Array) -> Float[Array, "*B k"]:
        return self._split(p)[0]

    def env_action(self, action: Array) -> Array:
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        if self.squash:
            return low + (jnp.tanh(action) + 1.0) * self._half_range()
        return jnp.clip(action, low, high)

    def _half_range(self) -> Array:
        return (jnp.asarray(self.high) - jnp.asarray(self.low)) / 2.0


Distribution = Categorical | DiagGaussian


def policy_distribution(cfg, env) -> Distribution:
    """The distribution for ``env``'s action space under ``cfg`` (Gaussian for continuous
    envs: `Env.action_bounds` is set; masked categoricals otherwise)."""
    bounds = getattr(env, "action_bounds", None)
    if bounds is None:
        for name in ("squash_actions", "state_dependent_std"):
            if getattr(cfg, name):
                raise ValueError(
                    f"PPOConfig.{name}=True is invalid: it applies to continuous actions, and "
                    f"env={cfg.env!r} has discrete ones; drop it."
                )
        return Categorical(tuple(env.action_dims))
    low, high = bounds
    if cfg.squash_actions and not all(math.isfinite(b) for b in (*low, *high)):
        raise ValueError(
            f"PPOConfig.squash_actions=True is invalid: env={cfg.env!r} has unbounded actions "
            "(tanh squashing maps into finite bounds); use squash_actions=False."
        )
    return DiagGaussian(len(low), tuple(low), tuple(high), bool(cfg.squash_actions))
