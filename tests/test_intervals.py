"""The experiments' 95% interval of a mean (``brace.experiments._common.mean_ci95``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from brace.experiments._common import mean_ci95


def _t_interval(v):
    v = np.asarray(v, dtype=float)
    half = stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return v.mean() - half, v.mean() + half


def test_skewed_squared_errors_get_no_negative_bound():
    # Mostly tiny errors and a rare mode switch: the t-interval crosses 0.
    v = np.r_[np.full(199, 1e-5), 0.02]
    assert _t_interval(v)[0] < 0  # the case the log-scale interval exists for
    ci = mean_ci95(v)
    assert 0 < ci["lo"] < ci["mean"] < ci["hi"]
    assert ci["mean"] == pytest.approx(v.mean())


def test_log_scale_interval_is_the_t_interval_to_first_order():
    rng = np.random.default_rng(3)
    v = 10.0 + rng.standard_normal(400) ** 2  # se ≪ mean
    lo, hi = _t_interval(v)
    ci = mean_ci95(v)
    assert ci["lo"] == pytest.approx(lo, rel=1e-3) and ci["hi"] == pytest.approx(hi, rel=1e-3)
    # ... and it is the log-scale interval: the mean is the geometric centre.
    assert math.sqrt(ci["lo"] * ci["hi"]) == pytest.approx(ci["mean"], rel=1e-12)


def test_log_scale_interval_covers_the_mean_of_skewed_data():
    rng = np.random.default_rng(11)
    samples = rng.exponential(2.0, size=(2000, 40)) ** 2  # squared: heavy right tail
    true = 2 * 2.0**2  # E[X²] for an exponential with scale 2
    hits = [(c := mean_ci95(s))["lo"] <= true <= c["hi"] for s in samples]
    assert 0.88 <= np.mean(hits) <= 0.97


def test_signed_data_keep_the_t_interval():
    v = np.array([-1.0, 0.5, 2.0, -0.25])
    lo, hi = _t_interval(v)
    ci = mean_ci95(v)
    assert (ci["lo"], ci["hi"]) == pytest.approx((lo, hi))
    assert mean_ci95(np.abs(v), nonnegative=False)["lo"] == pytest.approx(
        _t_interval(np.abs(v))[0])


def test_edge_cases():
    assert mean_ci95(np.zeros(5)) == {"mean": 0.0, "lo": 0.0, "hi": 0.0, "n": 5}
    one = mean_ci95([3.0])
    assert one["mean"] == 3.0 and math.isnan(one["lo"]) and math.isnan(one["hi"])
    with pytest.raises(ValueError, match="nonnegative=True.*-1"):
        mean_ci95([1.0, -1.0], nonnegative=True)
    with pytest.raises(ValueError, match="values"):
        mean_ci95([])
