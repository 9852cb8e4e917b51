"""The statistics E3's paired comparison rests on: resamples paired by model seed, and the
interval of resamples some of which leave a scheme too few fitted seeds."""

import math

import numpy as np

from lengthgen.analysis import stats


def test_paired_means_draw_the_same_seeds_for_every_scheme():
    """Scheme b equals scheme a on every seed: paired resamples give equal means in every draw
    (unpaired ones, drawn apart, would differ), so their difference has no spread."""
    acc = np.array([[0.2, 0.2], [0.5, 0.5], [0.9, 0.9], [0.4, 0.4]])
    draws = stats.paired_seed_means(acc, np.full(acc.shape, 10**9), 2000, seed=1, min_units=1)
    assert draws.shape == (2000, 2)
    assert np.abs(draws[:, 0] - draws[:, 1]).max() < 1e-3
    assert draws[:, 0].std() > 0.05  # the seeds' spread is there


def test_a_scheme_takes_only_its_fitted_seeds_and_too_few_make_the_draw_undefined():
    nan = math.nan
    acc = np.array([[1.0, nan], [1.0, 0.5], [1.0, 0.5], [1.0, nan]])
    draws = stats.paired_seed_means(acc, np.full(acc.shape, 10**9), 4000, seed=2, min_units=2)
    assert np.allclose(draws[:, 0], 1.0)
    b = draws[:, 1]
    assert np.allclose(b[~np.isnan(b)], 0.5, atol=1e-3)
    # b is undefined where fewer than 2 of the 4 drawn seeds are seeds 1 or 2: P = (1/2)^4 + 4 (1/2)^4
    assert abs(np.isnan(b).mean() - 5 / 16) < 0.03


def test_undefined_draws_count_against_each_verdict_and_too_many_leave_it_open():
    d = np.linspace(0.6, 1.0, 1000)
    assert stats.interval_with_undefined(d) == stats.percentile_ci(d)
    some = d.copy()
    some[:10] = np.nan  # 1%: the interval widens outward but stays bounded
    lo, hi = stats.interval_with_undefined(some)
    assert lo < stats.percentile_ci(d[10:])[0] and hi >= stats.percentile_ci(d[10:])[1]
    assert stats.interval_verdict(lo, hi, 0.5, ">=") == stats.PASS
    many = d.copy()
    many[:30] = np.nan  # 3% > 2.5%: no verdict either way
    assert all(math.isnan(x) for x in stats.interval_with_undefined(many))
    assert stats.interval_verdict(*stats.interval_with_undefined(many), 0.5, ">=") == stats.INCONCLUSIVE
