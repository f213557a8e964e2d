"""Under-powered audit rows: the largest certifiable epsilon and the runs it needs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace import DEFAULT_KAPPA
from brace.audit import (
    AuditConfig,
    clopper_pearson_upper,
    epsilon_lower_bound,
    max_certifiable_epsilon,
)
from brace.audit.stats import _runs_to_certify


@pytest.mark.parametrize("n", [10, 60, 5000, 100_000])
def test_max_certifiable_epsilon_is_the_zero_error_bound(n):
    u = 1.0 - (0.05 / 40) ** (1.0 / n)  # Clopper-Pearson, 0 errors, level alpha/n_bounds
    want = math.log((1 - 1e-5 - u) / u)
    assert max_certifiable_epsilon(n, 0.05, 40, 1e-5) == pytest.approx(want, rel=1e-9)
    # no outcome of n runs certifies more
    k = np.arange(0, 5)
    cp = clopper_pearson_upper(k, n, 0.05 / 40)
    assert epsilon_lower_bound(cp[:, None], cp[None, :], 1e-5).max() <= want * (1 + 1e-12)


@pytest.mark.parametrize(("p_fp", "p_fn", "eps"), [(0.0, 0.0, 4.0), (0.002, 0.5, 4.0),
                                                  (0.01, 0.3, 1.0), (0.0, 0.9, 1.0)])
def test_runs_to_certify_is_sufficient_and_nearly_minimal(p_fp, p_fn, eps):
    n = _runs_to_certify(p_fp, p_fn, eps, 0.05, 40, 1e-5)
    a = 0.05 / 40

    def certified(m):
        cp = clopper_pearson_upper([math.ceil(p_fp * m), math.ceil(p_fn * m)], m, a)
        return float(epsilon_lower_bound(cp[0], cp[1], 1e-5))

    assert certified(n) > eps
    assert certified(int(n * 0.98) - 1) <= eps or n <= 2
    if p_fp == p_fn == 0.0:
        assert max_certifiable_epsilon(n, 0.05, 40, 1e-5) > eps


def test_rates_that_do_not_exceed_the_claim_need_no_runs():
    assert _runs_to_certify(0.3, 0.3, 1.0, 0.05, 40, 1e-5) is None


def test_audit_default_kappa_is_the_library_default():
    assert AuditConfig().kappa == DEFAULT_KAPPA
