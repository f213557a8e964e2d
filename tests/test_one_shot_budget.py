"""``brace.private_synopsis`` spends the ε asked for (``docs/privacy-accounting.md`` §14,
"One call alone"): the one-order filter of a call of Gaussian releases priced before the
bank is read, and the calibration behind it, checked against closed forms and against
Google's dp-accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace import PrivateMemory, private_synopsis
from brace.accounting import GaussianStep
from brace.accounting.calibration import calibrate_one_shot, one_shot_filter
from brace.accounting.filter import ORDERS, FilterSpec, convert, event_weights

DELTA = 1e-5
EPSILONS = (0.25, 1.0, 4.0, 16.0)


def _bank(n: int = 600, d: int = 3) -> np.ndarray:
    rng = np.random.default_rng(0)
    c = rng.uniform(-0.6, 0.6, size=(4, d))
    return np.clip(c[rng.integers(0, 4, n)] + 0.05 * rng.normal(size=(n, d)), -1, 1)


def _spent_by_events(syn) -> float:
    """The conversion of the releases the synopsis's plan made (its params)."""
    from brace.seeding import SeedingPlan

    p = syn.params
    plan = SeedingPlan.make(p["rho"], 600, 3, p["rounds"], c_min=p["c_min"])
    return convert(sum(event_weights(GaussianStep(x)) for x in plan.events()), DELTA)


@pytest.mark.parametrize("eps", EPSILONS)
def test_private_synopsis_spends_the_epsilon_asked_for(eps):
    syn = private_synopsis(_bank(), epsilon=eps, delta=DELTA, bounds=(-1, 1), seed=0)
    assert 0.98 * eps <= syn.epsilon <= eps
    # the search lands within its relative tolerance (1e-5 on ρ) of the calibrated ρ
    rho, _ = calibrate_one_shot(eps, DELTA)
    assert rho * (1 - 1e-4) <= syn.params["rho"] <= rho
    # the reported spend is the conversion of what was released
    assert syn.epsilon == pytest.approx(_spent_by_events(syn), rel=1e-12)


@pytest.mark.parametrize("eps", (1.0, 4.0))
def test_private_synopsis_from_public_seeds_spends_the_epsilon_asked_for(eps):
    X = _bank()
    syn = private_synopsis(X, radius=0.3, epsilon=eps, delta=DELTA, seeds=X[:5] + 0.01,
                           seed=0)
    assert 0.98 * eps <= syn.epsilon <= eps
    # R rounds of rho_cell: the total is the calibrated one
    rho, _ = calibrate_one_shot(eps, DELTA)
    assert rho * (1 - 1e-4) <= syn.params["rounds"] * syn.cell_rho <= rho * (1 + 1e-12)


def test_the_budget_filter_of_a_memory_is_unchanged():
    """Only the standalone function uses the one-order filter: a PrivateMemory's snapshot
    stays within its budget filter (which keeps a share of δ for its later calls)."""
    pm = PrivateMemory(_bank(), radius=0.3, budget=(1.0, DELTA), accounting="global")
    assert pm.filter == FilterSpec.for_budget(1.0, DELTA)
    syn = pm.snapshot(bounds=(-1, 1), seed=0)
    assert syn.epsilon < private_synopsis(_bank(), epsilon=1.0, delta=DELTA,
                                          bounds=(-1, 1), seed=0).epsilon
    assert pm.filter_usage <= 1.0


@pytest.mark.parametrize("eps", (*EPSILONS, 1e-3, 300.0))
def test_calibration_is_the_largest_rho_and_its_order_the_closed_form(eps):
    rho, i = calibrate_one_shot(eps, DELTA)
    assert convert(event_weights(GaussianStep(rho)), DELTA) <= eps
    assert convert(event_weights(GaussianStep(rho * (1 + 1e-8))), DELTA) > eps
    # closed form: at order a the Gaussian converts to eps iff a*rho <= B_a (δ whole)
    a = ORDERS
    b = eps - np.log((a - 1) / a) + (math.log(DELTA) + np.log(a)) / (a - 1)
    assert rho == pytest.approx(float(np.max(b / a)), rel=1e-8)
    assert i == int(np.argmax(b / a))
    f = one_shot_filter(eps, DELTA)
    assert f.orders == (i,) and f.delta_direct == 0.0
    assert f.thresholds[0] / ORDERS[i] == pytest.approx(rho, rel=1e-8)
    assert f.admits(event_weights(GaussianStep(rho * (1 - 1e-8))))
    assert not f.admits(event_weights(GaussianStep(rho * (1 + 1e-6))))


@pytest.mark.parametrize("eps", EPSILONS)
def test_reported_epsilon_agrees_with_dp_accounting(eps):
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting import rdp
    from dp_accounting.pld import privacy_loss_distribution as pld

    from brace.seeding import SeedingPlan

    syn = private_synopsis(_bank(), epsilon=eps, delta=DELTA, bounds=(-1, 1), seed=0)
    p = syn.params
    rhos = SeedingPlan.make(p["rho"], 600, 3, p["rounds"], c_min=p["c_min"]).events()
    # a Gaussian of sensitivity 1 and std s is 1/(2 s²)-zCDP: s = 1/sqrt(2ρ)
    events = [dpa.GaussianDpEvent(1.0 / math.sqrt(2.0 * r)) for r in rhos]
    same = rdp.RdpAccountant(orders=[float(a) for a in ORDERS])
    for e in events:
        same.compose(e)
    assert same.get_epsilon(DELTA) == pytest.approx(syn.epsilon, rel=1e-9)
    # dp-accounting's own orders: the same conversion on another grid, within 2 %
    default = rdp.RdpAccountant()
    for e in events:
        default.compose(e)
    assert default.get_epsilon(DELTA) == pytest.approx(syn.epsilon, rel=0.02)
    # the exact (ε, δ) of the composed Gaussian (PLD) is below the RDP conversion
    tight = pld.from_gaussian_mechanism(1.0 / math.sqrt(2.0 * sum(rhos)))
    assert tight.get_epsilon_for_delta(DELTA) <= syn.epsilon


def test_calibration_validates_its_arguments():
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_one_shot(-1.0, DELTA)
    with pytest.raises(ValueError, match="delta"):
        one_shot_filter(1.0, 2.0)


def test_the_default_setting_is_the_public_rule_of_recommend():
    """``project="choose"`` (the default): the setting is ``synopsis_space`` at the
    call's total ρ and the bank's shape for d > 32 — the subspace for few rows in high
    dimension — the full space for d ≤ 32, and never depends on the rows."""
    from brace.budget.advice import synopsis_space

    hi_d = _bank(n=600, d=40)
    for eps in (1.0, 4.0):
        want = synopsis_space(calibrate_one_shot(eps, DELTA)[0], 600, 40)[1]
        assert want == "auto"  # 600 rows in d = 40: the full space is too coarse
        for X in (hi_d, -hi_d[::-1]):  # two banks of one shape: one choice
            syn = private_synopsis(X, epsilon=eps, delta=DELTA, bounds=(-1, 1), seed=0)
            assert syn.params["project"]["rule"] == "auto"
            assert syn.epsilon <= eps
        full = private_synopsis(hi_d, epsilon=eps, delta=DELTA, bounds=(-1, 1), seed=0,
                                project=None)  # asked for: the full space
        assert "project" not in full.params
    low = private_synopsis(_bank(), epsilon=1.0, delta=DELTA, bounds=(-1, 1), seed=0)
    assert "project" not in low.params  # d = 3: the full space
