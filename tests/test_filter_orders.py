"""The budget filter's default orders (``docs/privacy-accounting.md`` §12, "Which
orders"): the two grid orders that admit the largest Gaussian composition; a ledger keeps
the orders it was created with."""

from __future__ import annotations

import math

import numpy as np
import pytest

import brace
from brace import PrivateMemory
from brace.accounting import GaussianStep, rho_from_eps_delta
from brace.accounting.calibration import one_shot_filter
from brace.accounting.filter import ORDERS, FilterSpec, K, convert, event_weights

DELTA = 1e-5
EPSILONS = (0.25, 1.0, 4.0, 16.0)


def _old_rule(eps: float, delta: float) -> FilterSpec:
    """The earlier default: the 4 orders nearest 1 + sqrt(log(1/δ)/ρ(ε, δ))."""
    x = math.sqrt(-math.log(delta) / rho_from_eps_delta(eps, delta))
    dist = np.abs(np.log(ORDERS - 1.0) - math.log(x))
    return FilterSpec(eps, delta, tuple(sorted(int(i) for i in np.argsort(dist)[:4])),
                      0.5 * delta)


def _largest_gaussian(f: FilterSpec) -> float:
    return float(np.max(f.thresholds / ORDERS[list(f.orders)]))


@pytest.mark.parametrize("eps", (*EPSILONS, 1e-3, 300.0))
def test_default_orders_admit_the_largest_gaussian(eps):
    f = FilterSpec.for_budget(eps, DELTA)
    assert len(f.orders) == 2 and f.delta_direct == DELTA / 2
    assert f.orders[1] == f.orders[0] + 1
    # no other pair of grid orders (same δ share each) admits a larger composition
    every = FilterSpec(eps, DELTA, tuple(range(K)), DELTA / 2)
    cap = (every.thresholds + math.log(K / 2) / (ORDERS - 1.0)) / ORDERS  # δ_G at |G|=2
    assert _largest_gaussian(f) == pytest.approx(float(np.max(cap)), rel=1e-12)
    assert set(f.orders) == set(np.argsort(-cap, kind="stable")[:2].tolist())
    # and the one-order, Δ = 0 instance is the standalone synopsis's filter
    assert FilterSpec.for_budget(eps, DELTA, n_orders=1, delta_direct=0.0) == \
        one_shot_filter(eps, DELTA)


@pytest.mark.parametrize("eps", EPSILONS)
def test_default_orders_charge_a_single_release_less_than_before(eps):
    """A snapshot alone: the tight ε of the largest admitted Gaussian, new against old
    (docs: overcharge 14.6/11.6/9.3/7.5 % before, 9.3/7.6/6.6/4.9 % now)."""
    new, old = FilterSpec.for_budget(eps, DELTA), _old_rule(eps, DELTA)
    t_new = convert(event_weights(GaussianStep(_largest_gaussian(new))), DELTA)
    t_old = convert(event_weights(GaussianStep(_largest_gaussian(old))), DELTA)
    assert t_old < t_new <= eps
    assert eps / t_new - 1 <= 0.1


def test_for_budget_validates():
    with pytest.raises(ValueError, match="n_orders"):
        FilterSpec.for_budget(1.0, DELTA, n_orders=0)
    with pytest.raises(ValueError, match="delta_direct"):
        FilterSpec.for_budget(1.0, DELTA, delta_direct=DELTA)


def test_a_ledger_keeps_the_orders_it_was_created_with(tmp_path, monkeypatch):
    """A ledger written with the old default (4 orders) reopens with them: its filter,
    spend and refusals are unchanged; a new ledger gets the new default."""
    X = np.random.default_rng(0).normal(size=(80, 2))
    path = tmp_path / "old.db"
    old = _old_rule(1.0, DELTA)
    with monkeypatch.context() as m:  # as the earlier default created it
        m.setattr(FilterSpec, "for_budget", classmethod(lambda cls, e, d: _old_rule(e, d)))
        with PrivateMemory(X, radius=0.5, budget=(1.0, DELTA), ledger=path, create=True,
                           accounting="global") as pm:
            pm.retrieve(X[:2], steps=2, epsilon=0.3, seed=0)
            usage = pm.filter_usage
    assert brace.budget.inspect_ledger(path).filter["orders"] == list(old.orders)
    with PrivateMemory(X, radius=0.5, budget=(1.0, DELTA), ledger=path,
                       accounting="global") as pm:
        assert pm.filter == old != FilterSpec.for_budget(1.0, DELTA)
        assert pm.filter_usage == pytest.approx(usage, rel=1e-12)
        syn = pm.snapshot(bounds=(-3, 3), seed=0)  # the rest, as the old filter admits
        assert pm.filter_usage <= 1.0
        assert pm.filter_usage == pytest.approx(1.0, rel=1e-3)
        assert syn.epsilon > 0
    new_path = tmp_path / "new.db"
    with PrivateMemory(X, radius=0.5, budget=(1.0, DELTA), ledger=new_path, create=True,
                       accounting="global") as pm:
        assert pm.filter == FilterSpec.for_budget(1.0, DELTA)
    with PrivateMemory(X, radius=0.5, budget=(1.0, DELTA), ledger=new_path,
                       accounting="global") as pm:
        assert pm.filter == FilterSpec.for_budget(1.0, DELTA)


@pytest.mark.parametrize("eps", (0.5, 2.0, 8.0))
def test_a_snapshot_that_spends_the_rest_leaves_no_scrap(eps):
    """The search for what fits lands on the filter's boundary to the rounding level, so
    the next snapshot is refused rather than admitted at a scrap (ρ ~ 10⁻⁶ of the first:
    before, Brent's tolerance left 10⁻⁵ of the filter at some budgets)."""
    X = np.random.default_rng(1).uniform(-1, 1, size=(200, 3))
    pm = PrivateMemory(X, radius=0.3, budget=(eps, DELTA), accounting="global")
    pm.snapshot(bounds=(-1, 1), seed=0, rounds=3)
    assert 1.0 - 1e-12 <= pm.filter_usage <= 1.0
    with pytest.raises(brace.BudgetExceededError, match="Nothing was released or spent"):
        pm.snapshot(bounds=(-1, 1), seed=1)
    pm2 = PrivateMemory(X, radius=0.3, budget=(eps, DELTA), accounting="global")
    pm2.snapshot(X[:4], seed=0)  # from public seeds, cell rounds only
    assert 1.0 - 1e-12 <= pm2.filter_usage <= 1.0
    with pytest.raises(brace.BudgetExceededError, match="Nothing was released or spent"):
        pm2.snapshot(X[:4], seed=1)
