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
    runs_needed,
)


@pytest.mark.parametrize("n", [10, 60, 5000, 100_000])
def test_max_certifiable_epsilon_is_the_zero_error_bound(n):
    u = 1.0 - (0.05 / 40) ** (1.0 / n)  # Clopper-Pearson, 0 errors, level alpha/n_bounds
    want = math.log((1 - 1e-5 - u) / u)
    assert max_certifiable_epsilon(n, 0.05, 40, 1e-5) == pytest.approx(want, rel=1e-9)
    # no outcome of n runs certifies more
    k = np.arange(0, 5)
    cp = clopper_pearson_upper(k, n, 0.05 / 40)
    assert epsilon_lower_bound(cp[:, None], cp[None, :], 1e-5).max() <= want * (1 + 1e-12)


@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0])
def test_runs_needed_is_the_smallest_sufficient_count(eps):
    n = runs_needed(eps, 0.05, 40, 1e-5)
    assert max_certifiable_epsilon(n, 0.05, 40, 1e-5) > eps
    assert max_certifiable_epsilon(n - 1, 0.05, 40, 1e-5) <= eps


def test_audit_default_kappa_is_the_library_default():
    assert AuditConfig().kappa == DEFAULT_KAPPA
