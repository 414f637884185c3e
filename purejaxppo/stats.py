"""Statistics over seeds: each seed's final score, the interquartile mean, and
percentile-bootstrap confidence intervals (public: ``from purejaxppo.stats import iqm``).

Following rliable (Agarwal et al., 2021): the IQM is the mean of the middle 50 % of the
scores (``scipy.stats.trim_mean(x, 0.25)``, as rliable computes it), and confidence intervals
are percentile bootstrap intervals over seeds. Tested against direct computations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from jaxtyping import Float


def iqm(scores: Float[np.ndarray, " n"]) -> float:
    """Interquartile mean: the mean after dropping the lowest and highest 25 % of scores."""
    scores = np.asarray(scores, np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"iqm: need a non-empty 1-D array of scores, got shape {scores.shape}.")
    from scipy import stats  # here, not at import: scipy.stats alone costs ~0.4 s to import

    return float(stats.trim_mean(scores, 0.25))


def bootstrap_ci(
    scores: Float[np.ndarray, " n"],
    statistic: Callable[[np.ndarray], float] = iqm,
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` over the seeds in ``scores``.

    Draws ``num_resamples`` resamples (with replacement) of the seeds, computes the statistic
    on each, and returns the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles.
    Deterministic for a given ``seed``.
    """
    scores = np.asarray(scores, np.float64)
    if scores.ndim != 1 or scores.size < 2:
        raise ValueError(f"bootstrap_ci: need at least 2 scores, got shape {scores.shape}.")
    if not 0 < confidence < 1:
        raise ValueError(f"bootstrap_ci(confidence={confidence}): need 0 < confidence < 1.")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, scores.size, size=(num_resamples, scores.size))
    if statistic is iqm:  # every resample at once: the same values to rounding, ~1,000× faster
        from scipy import stats

        stats_ = stats.trim_mean(scores[index], 0.25, axis=1)
    else:
        stats_ = np.array([statistic(scores[i]) for i in index])
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(stats_, alpha)), float(np.quantile(stats_, 1.0 - alpha))


def final_scores(returns: Float[np.ndarray, "*agents U"], last: int = 10) -> np.ndarray:
    """Per agent: the mean return over its last ``last`` updates that finished an episode
    (NaN for an agent that never finished one): the "final return" of every summary."""
    returns = np.asarray(returns)
    out = np.full(returns.shape[:-1], np.nan)
    for index in np.ndindex(*returns.shape[:-1]):
        r = returns[index]
        r = r[np.isfinite(r)][-last:]
        if r.size:
            out[index] = r.mean()
    return out
