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
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ._networks import entropy, greedy_action, masked_log_probs, sample_action, take

_LOG_2PI = math.log(2 * math.pi)


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
