"""Running observation normalisation and reward scaling, per agent, inside the program.

The same forms as PureJaxRL's ``NormalizeVecObservation`` and ``NormalizeVecReward``:

* `RunningStats`: the mean and variance of everything seen so far, updated with each batch
  by the parallel (Chan et al.) form, from a prior of mean 0, variance 1, count 1e-4.
  Observations are normalised as ``(x - mean) / sqrt(var + 1e-8)``.
* `RewardScaler`: a running discounted return per env, ``G ← G·γ·(1 - done) + r``, whose
  variance (a `RunningStats` over all envs and steps) scales rewards: ``r / sqrt(var + 1e-8)``.

Both live in each agent's `RunnerState`, so they are vmapped, sharded, checkpointed and
resumed with everything else, and one agent's statistics never see another agent's data.
Metrics always report the raw episode return. A trained agent's observation statistics are
frozen with its parameters (`Policy`, ``params.eqx``) so evaluation sees what training saw.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

EPS = 1e-8


class RunningStats(eqx.Module):
    """Mean and variance of every sample seen (leading batch axis), per feature."""

    mean: Float[Array, "*shape"]
    var: Float[Array, "*shape"]
    count: Float[Array, ""]

    @classmethod
    def init(cls, shape: tuple[int, ...]) -> RunningStats:
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.float32(1e-4))

    def update(self, batch: Array) -> RunningStats:
        """Fold in a batch of samples (the parallel form of Welford's algorithm)."""
        batch = batch.astype(jnp.float32)
        n = jnp.float32(batch.shape[0])
        batch_mean, batch_var = batch.mean(0), batch.var(0)
        delta = batch_mean - self.mean
        total = self.count + n
        mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        return RunningStats(mean, m2 / total, total)

    def normalize(self, x: Array) -> Float[Array, "*shape"]:
        return (x.astype(jnp.float32) - self.mean) / jnp.sqrt(self.var + EPS)


class RewardScaler(eqx.Module):
    """Scales rewards by the running standard deviation of each env's discounted return."""

    returns: Float[Array, " N"]
    stats: RunningStats

    @classmethod
    def init(cls, num_envs: int) -> RewardScaler:
        return cls(jnp.zeros(num_envs, jnp.float32), RunningStats.init(()))

    def scale(
        self, reward: Float[Array, " N"], done: Bool[Array, " N"], gamma
    ) -> tuple[RewardScaler, Float[Array, " N"]]:
        """One step of every env: update the return estimate, then scale the rewards."""
        returns = self.returns * gamma * (1.0 - done.astype(jnp.float32)) + reward
        stats = self.stats.update(returns)
        return RewardScaler(returns, stats), reward / jnp.sqrt(stats.var + EPS)


def wanted(flag: bool | None, env) -> bool:
    """A normalisation switch: ``None`` means on for continuous actions, off otherwise."""
    if flag is None:
        return getattr(env, "action_bounds", None) is not None
    return bool(flag)
