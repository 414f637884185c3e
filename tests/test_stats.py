"""IQM and bootstrap CIs against direct computations on known data."""

import numpy as np
import pytest
from scipy import stats

from purejaxppo._figures import curve_band
from purejaxppo.stats import bootstrap_ci, iqm


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm(np.arange(1.0, 9.0)) == pytest.approx(np.mean([3, 4, 5, 6]))
    x = np.array([100.0, -50.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # outliers are trimmed
    assert iqm(x) == pytest.approx(np.mean([2, 3, 4, 5]))
    rng = np.random.default_rng(0)
    y = rng.normal(size=40)
    assert iqm(y) == pytest.approx(stats.trim_mean(y, 0.25))  # rliable's definition


def test_bootstrap_ci_matches_a_direct_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.0, size=12)
    low, high = bootstrap_ci(x, np.mean, 0.95, num_resamples=500, seed=3)
    # The same resamples, drawn and reduced one by one.
    draw = np.random.default_rng(3)
    idx = draw.integers(0, x.size, size=(500, x.size))
    means = sorted(np.mean([x[j] for j in row]) for row in idx)
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    # And it agrees with the normal-theory interval on a large sample.
    z = rng.normal(0.0, 1.0, size=2000)
    low, high = bootstrap_ci(z, np.mean, 0.95, num_resamples=2000)
    se = z.std(ddof=1) / np.sqrt(z.size)
    assert low == pytest.approx(z.mean() - 1.96 * se, abs=0.2 * se)
    assert high == pytest.approx(z.mean() + 1.96 * se, abs=0.2 * se)


def test_the_iqm_ci_equals_the_iqm_of_each_resample_one_by_one():
    """`iqm` takes a vectorised path in `bootstrap_ci` (every resample at once): the same
    interval as calling `iqm` on each resample, odd and even seed counts alike (to float
    rounding: numpy's order of summation along an axis is its own choice)."""
    for n in (2, 5, 16, 33):
        x = np.random.default_rng(n).normal(3.0, 2.0, size=n)
        idx = np.random.default_rng(7).integers(0, n, size=(300, n))
        one_by_one = np.array([iqm(x[row]) for row in idx])
        alpha = (1.0 - 0.95) / 2.0  # as bootstrap_ci computes it, to the last bit
        expected = tuple(float(q) for q in np.quantile(one_by_one, [alpha, 1.0 - alpha]))
        got = bootstrap_ci(x, iqm, 0.95, num_resamples=300, seed=7)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_curve_band_skips_nan_updates_and_brackets_the_mean():
    returns = np.array([[0.0, 1.0, np.nan], [1.0, 1.0, 0.5], [0.5, 1.0, 1.0]])
    mean, low, high = curve_band(returns)
    np.testing.assert_allclose(mean, [0.5, 1.0, 0.75])
    assert (low <= mean).all() and (mean <= high).all() and high[1] == low[1] == 1.0


@pytest.mark.parametrize("bad", [np.array([]), np.ones((2, 2))])
def test_bad_inputs_are_refused(bad):
    with pytest.raises(ValueError):
        iqm(bad)
    with pytest.raises(ValueError):
        bootstrap_ci(np.ones(1))


def test_final_scores_average_each_agents_last_updates_that_finished_an_episode():
    from purejaxppo.stats import final_scores

    nan = np.nan
    returns = np.array([[1.0, 2.0, nan, 4.0], [nan, nan, nan, nan], [5.0, nan, 7.0, 9.0]])
    np.testing.assert_array_equal(final_scores(returns, 2), [(2.0 + 4.0) / 2, nan, 8.0])
    assert final_scores(returns[None], 10).shape == (1, 3)
