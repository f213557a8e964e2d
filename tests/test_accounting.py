"""Tests for brace.accounting: closed forms against numerical integration and dense grids,
γ = 0 against Google's dp_accounting (RDP and PLD), calibration round trips, monotonicity,
reference values of the spec (§4) and input validation."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, stats

from brace import accounting as acc
from brace.accounting import (
    Composed,
    GaussianStep,
    PrivacySpent,
    RdpAccountant,
    SelfComposed,
    SmoothGaussianStep,
    UnsupportedEventError,
    calibrate,
    calibrate_rho,
    compose_zcdp,
    eps_from_rho_delta,
    epsilon_spent,
    gaussian_renyi_divergence,
    gaussian_zcdp,
    max_rdp_order,
    rdp_to_epsilon,
    rho_from_eps_delta,
    smooth_gaussian_rdp,
)
from brace.policy import choose_gamma

FAST = settings(max_examples=25, deadline=None)


# --------------------------------------------------------------------------------------
# Independent slow references (written from the definitions, not from the module)
# --------------------------------------------------------------------------------------


def renyi_1d_quad(alpha: float, u: float, up: float, s: float, sp: float) -> float:
    """D_α(N(u, s²) ‖ N(u', s'²)) = log ∫ p^α p'^{1−α} / (α − 1), by quadrature."""

    def log_integrand(x):
        return alpha * stats.norm.logpdf(x, u, s) + (1 - alpha) * stats.norm.logpdf(x, up, sp)

    # The log-integrand is a concave quadratic: find its peak and curvature numerically,
    # factor the peak out, and integrate over ±40 of its widths.
    c = optimize.minimize_scalar(lambda x: -log_integrand(x), bracket=(u - s, up + sp)).x
    c = optimize.minimize_scalar(lambda x: -log_integrand(x), bracket=(c - 1e-3, c + 1e-3)).x
    peak = log_integrand(c)
    curvature = -(log_integrand(c + 1.0) - 2 * peak + log_integrand(c - 1.0))
    assert curvature > 0
    width = 1.0 / math.sqrt(curvature)
    val, _ = integrate.quad(
        lambda x: math.exp(log_integrand(x) - peak),
        c - 40 * width,
        c + 40 * width,
        epsabs=0.0,
        epsrel=1e-13,
        limit=200,
    )
    return (peak + math.log(val)) / (alpha - 1)


def f_ref(log_v, alpha, rho, dim):
    """The spec §4 objective f_α(v) at v = exp(log_v), straight from the formula (numpy).

    log h is taken as log1p(−(α−1)(v−1)) so that v ≈ 1 loses no digits.
    """
    log_v = np.asarray(log_v, dtype=float)
    v = np.exp(log_v)
    h = alpha - (alpha - 1) * v
    log_h = np.log1p(-(alpha - 1) * np.expm1(log_v))
    return alpha * rho * np.minimum(v, 1) / h - dim / (2 * (alpha - 1)) * (
        log_h + (alpha - 1) * log_v
    )


def conversion_ref(alpha, rdp, delta):
    """Balle et al. 2020 Thm 21, as written in the spec."""
    return rdp + np.log((alpha - 1) / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1)


# --------------------------------------------------------------------------------------
# zCDP
# --------------------------------------------------------------------------------------


@FAST
@given(
    eps=st.floats(1e-3, 1e3),
    log10_delta=st.floats(-12, math.log10(0.5)),
)
def test_rho_eps_round_trip(eps, log10_delta):
    delta = 10.0**log10_delta
    rho = rho_from_eps_delta(eps, delta)
    assert rho > 0
    assert eps_from_rho_delta(rho, delta) == pytest.approx(eps, rel=1e-12)
    assert rho_from_eps_delta(eps_from_rho_delta(rho, delta), delta) == pytest.approx(
        rho, rel=1e-10
    )


def test_zcdp_paper_values():
    # Paper's per-step ρ/T for the spec §4 reference settings.
    assert rho_from_eps_delta(128.0, 1e-5) / 5 == pytest.approx(14.17, rel=1e-3)
    assert rho_from_eps_delta(64.0, 1e-5) / 3 == pytest.approx(9.35, rel=1e-3)


def test_gaussian_zcdp_and_composition():
    assert gaussian_zcdp(2.0, 4.0) == pytest.approx(4.0 / 32.0)
    assert compose_zcdp([0.1, 0.2, 0.3]) == pytest.approx(0.6)
    assert compose_zcdp([]) == 0.0
    # T steps of ρ/T zCDP compose to ρ, which converts back to the target ε.
    rho = rho_from_eps_delta(8.0, 1e-6)
    assert eps_from_rho_delta(compose_zcdp([rho / 7] * 7), 1e-6) == pytest.approx(8.0)
    # zCDP Gaussian = RDP curve αρ.
    assert smooth_gaussian_rdp(3.0, gaussian_zcdp(1.0, 2.0)) == pytest.approx(3.0 / 8.0)


# --------------------------------------------------------------------------------------
# Rényi divergence of two Gaussians: closed form vs numerical integration
# --------------------------------------------------------------------------------------

DIVERGENCE_CASES = [
    # alpha, u, u', s, s'
    (2.0, 0.0, 1.0, 1.0, 1.0),
    (1.5, 0.3, -0.4, 0.8, 1.1),
    (5.0, 0.0, 0.5, 1.05, 1.0),
    (1.05, 2.0, 0.0, 0.5, 0.45),
    (10.0, 0.0, 0.2, 0.3, 0.31),
    (3.0, 1.0, 1.0, 1.2, 1.0),  # variance term only
]


@pytest.mark.parametrize(("alpha", "u", "up", "s", "sp"), DIVERGENCE_CASES)
def test_renyi_divergence_matches_quadrature_1d(alpha, u, up, s, sp):
    closed = gaussian_renyi_divergence(alpha, abs(u - up), s, sp, dim=1)
    assert closed == pytest.approx(renyi_1d_quad(alpha, u, up, s, sp), rel=1e-8)


@pytest.mark.parametrize("dim", [2, 5])
@pytest.mark.parametrize(("alpha", "s", "sp"), [(2.0, 1.0, 0.9), (1.3, 0.7, 0.75)])
def test_renyi_divergence_matches_product_form(dim, alpha, s, sp):
    # N(u, s²I_d) and N(u', s'²I_d) are products of independent coordinates, and Rényi
    # divergence is additive over products: sum the per-coordinate integrals.
    rng = np.random.default_rng(20240611 + dim)
    u = rng.normal(size=dim)
    up = u + rng.normal(scale=0.4, size=dim)
    per_coord = sum(renyi_1d_quad(alpha, u[i], up[i], s, sp) for i in range(dim))
    closed = gaussian_renyi_divergence(alpha, float(np.linalg.norm(u - up)), s, sp, dim=dim)
    assert closed == pytest.approx(per_coord, rel=1e-8)


def test_renyi_divergence_infinite_when_variance_too_large():
    # α − (α−1)v ≤ 0 with v = s²/s'²: the integral diverges.
    assert gaussian_renyi_divergence(3.0, 0.0, 1.3, 1.0) == math.inf  # v = 1.69 ≥ 1.5
    assert math.isfinite(gaussian_renyi_divergence(3.0, 0.0, 1.2, 1.0))  # v = 1.44


# --------------------------------------------------------------------------------------
# One smooth step: exact sup over v
# --------------------------------------------------------------------------------------

SUP_CASES = [
    # alpha, rho, gamma, dim
    (1.5, 13.9, 0.05, 2),
    (1.2, 9.08, 0.05, 10),
    (3.0, 0.5, 0.1, 10),
    (1.05, 0.01, 0.3, 384),
    (10.0, 1.0, 0.01, 100),
    (2.0, 1e-4, 0.2, 1000),
    (1.9, 2.0, 0.25, 1),
]


@pytest.mark.parametrize(("alpha", "rho", "gamma", "dim"), SUP_CASES)
def test_sup_over_v_matches_dense_grid(alpha, rho, gamma, dim):
    exact = smooth_gaussian_rdp(alpha, rho, gamma=gamma, dim=dim)
    # A fine grid over [e^{-2γ}, e^{2γ}], endpoints included.
    log_v = np.linspace(-2 * gamma, 2 * gamma, 200_001)
    grid = float(np.max(f_ref(log_v, alpha, rho, dim)))
    assert grid <= exact * (1 + 1e-12)
    assert grid == pytest.approx(exact, rel=1e-9)
    # Lemma 3 of docs/privacy-accounting.md: the supremum sits at v = e^{2γ}.
    assert exact == pytest.approx(float(f_ref(2 * gamma, alpha, rho, dim)), rel=1e-12)
    # Interior grids (no endpoints) approach it from below.
    interior = np.linspace(-2 * gamma, 2 * gamma, 20_001)[1:-1]
    assert float(np.max(f_ref(interior, alpha, rho, dim))) <= exact


@FAST
@given(
    rho=st.floats(1e-4, 50.0),
    gamma=st.floats(1e-4, 1.0),
    dim=st.integers(1, 500),
    frac=st.floats(0.0, 0.999),
)
def test_sup_over_v_never_below_grid(rho, gamma, dim, frac):
    mpmath = pytest.importorskip("mpmath")
    alpha = 1.0 + 1e-3 + frac * (max_rdp_order(gamma) - 1.0 - 1e-3)
    exact = smooth_gaussian_rdp(alpha, rho, gamma=gamma, dim=dim)
    # The float64 reference rounds at the scale of the terms it cancels (~ d·γ in the
    # variance part; α − (α−1)v loses digits by a factor α/h): allow that much.
    h = alpha - (alpha - 1) * math.exp(2 * gamma)
    scale = alpha * rho / h + dim * gamma
    tol = 1e-14 * (alpha / h) * scale
    grid = float(np.max(f_ref(np.linspace(-2 * gamma, 2 * gamma, 2001), alpha, rho, dim)))
    assert grid <= exact + tol
    assert exact == pytest.approx(grid, rel=1e-9, abs=tol)
    # Lemma 3's closed form at v = e^{2γ}, αρ/h − d log h /(2(α−1)) − dγ, in 40 digits.
    with mpmath.workdps(40):
        a, g = mpmath.mpf(alpha), mpmath.mpf(gamma)
        hm = a - (a - 1) * mpmath.exp(2 * g)
        closed = a * mpmath.mpf(rho) / hm - dim * mpmath.log(hm) / (2 * (a - 1)) - dim * g
    assert exact == pytest.approx(float(closed), rel=1e-11, abs=1e-15 * scale)


def test_step_rdp_matches_divergence_at_worst_pair():
    # The sup is a real divergence: v = e^{2γ} and mean shift = the smaller bound Δ̄'.
    alpha, rho, gamma, dim = 1.7, 3.0, 0.1, 4
    dbar_p = 1.0
    dbar = dbar_p * math.exp(gamma)
    s, sp = dbar / math.sqrt(2 * rho), dbar_p / math.sqrt(2 * rho)
    worst = gaussian_renyi_divergence(alpha, min(dbar, dbar_p), s, sp, dim=dim)
    assert smooth_gaussian_rdp(alpha, rho, gamma=gamma, dim=dim) == pytest.approx(worst)


@pytest.mark.parametrize("dim", [1, 2, 384])
def test_gamma_zero_reduces_to_gaussian(dim):
    alphas = np.array([1.01, 1.5, 2.0, 17.0, 1e6])
    np.testing.assert_array_equal(
        smooth_gaussian_rdp(alphas, 0.7, gamma=0.0, dim=dim), 0.7 * alphas
    )


def test_finite_orders_of_a_smooth_step():
    gamma = 0.05
    a_max = max_rdp_order(gamma)
    assert a_max == pytest.approx(math.exp(2 * gamma) / math.expm1(2 * gamma))
    assert math.isfinite(smooth_gaussian_rdp(a_max * (1 - 1e-9), 1.0, gamma=gamma, dim=2))
    assert smooth_gaussian_rdp(a_max, 1.0, gamma=gamma, dim=2) == math.inf
    assert smooth_gaussian_rdp(2 * a_max, 1.0, gamma=gamma, dim=2) == math.inf
    assert max_rdp_order(0.0) == math.inf


# --------------------------------------------------------------------------------------
# γ = 0 against Google's dp_accounting
# --------------------------------------------------------------------------------------

GAUSSIAN_CASES = [
    # rho per step, T, delta
    (0.5, 4, 1e-5),
    (14.17, 5, 1e-5),
    (0.01, 100, 1e-6),
    (2.0, 1, 1e-3),
]


@pytest.mark.parametrize(("rho", "steps", "delta"), GAUSSIAN_CASES)
def test_gamma_zero_agrees_with_dp_accounting_rdp(rho, steps, delta):
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import rdp_privacy_accountant as google_rdp

    noise_multiplier = 1.0 / math.sqrt(2.0 * rho)  # σ/Δ
    google = google_rdp.RdpAccountant().compose(
        dp_accounting.GaussianDpEvent(noise_multiplier), steps
    )
    g_eps, g_order = google.get_epsilon_and_optimal_order(delta)

    # Our curve on its orders, converted the same way.
    orders = np.asarray(google_rdp.DEFAULT_RDP_ORDERS, dtype=float)
    ours_rdp = RdpAccountant().compose(GaussianStep(rho), steps).rdp(orders)
    eps_on_grid, order_on_grid = rdp_to_epsilon(orders, ours_rdp, delta)
    assert eps_on_grid == pytest.approx(g_eps, rel=1e-10)
    assert order_on_grid == g_order

    # Continuous α can only do better than its grid, and not by much.
    ours = epsilon_spent(rho, steps, delta)
    assert ours <= g_eps + 1e-9
    assert ours >= 0.99 * g_eps
    # SmoothGaussianStep with γ = 0 is the same event.
    smooth = RdpAccountant().compose(SmoothGaussianStep(rho, 0.0, 7), steps).get_epsilon(delta)
    assert smooth == ours


@pytest.mark.parametrize(("rho", "steps", "delta"), [(0.5, 4, 1e-5), (2.0, 1, 1e-3)])
def test_gamma_zero_not_below_pld(rho, steps, delta):
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(1.0 / math.sqrt(2.0 * rho)), steps)
    tight = pld.get_epsilon(delta)
    ours = epsilon_spent(rho, steps, delta)
    # PLD is (near) tight, so any valid bound sits above it; RDP is not far off.
    assert ours >= tight - 1e-3
    assert ours <= 1.25 * tight


@pytest.mark.parametrize(
    ("rho", "steps", "delta", "gamma", "dim"),
    [
        (0.5, 4, 1e-5, 0.0, 1),
        (13.9, 5, 1e-5, 0.05, 2),
        (9.08, 3, 1e-5, 0.05, 10),
        (0.02, 50, 1e-6, 0.01, 384),
        (1.0, 2, 1e-3, 0.3, 3),
    ],
)
def test_continuous_alpha_matches_dense_alpha_grid(rho, steps, delta, gamma, dim):
    accountant = RdpAccountant().compose(SmoothGaussianStep(rho, gamma, dim), steps)
    eps, alpha = accountant.get_epsilon_and_order(delta)
    top = min(max_rdp_order(gamma), 1e7)
    alphas = 1.0 + np.geomspace(1e-4, top - 1.0, 400_001)[:-1]
    dense = conversion_ref(alphas, accountant.rdp(alphas), delta)
    best = float(np.nanmin(dense))
    assert eps <= best + 1e-9
    assert eps >= best - 1e-6 * best
    # The reported order attains the reported ε.
    assert float(conversion_ref(alpha, accountant.rdp(alpha), delta)) == pytest.approx(eps)


# --------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------


def test_reference_calibration_values():
    # Spec §4: δ = 1e-5.
    assert calibrate_rho(128.0, 1e-5, 5, dim=2, gamma=0.05) == pytest.approx(13.89, rel=0.02)
    assert calibrate_rho(64.0, 1e-5, 3, dim=10, gamma=0.05) == pytest.approx(9.08, rel=0.02)


@pytest.mark.parametrize(
    ("eps", "delta", "steps", "dim", "gamma"),
    [
        (128.0, 1e-5, 5, 2, 0.05),
        (64.0, 1e-5, 3, 10, 0.05),
        (1.0, 1e-6, 10, 1, 0.0),
        (16.0, 1e-5, 7, 2, 0.0),
        (8.0, 1e-5, 3, 384, 0.003),
        (0.5, 1e-3, 1, 3, 0.01),
    ],
)
def test_calibrate_then_account_round_trip(eps, delta, steps, dim, gamma):
    rho = calibrate_rho(eps, delta, steps, dim=dim, gamma=gamma)
    spent = epsilon_spent(rho, steps, delta, dim=dim, gamma=gamma)
    assert spent <= eps  # never overspends
    assert spent == pytest.approx(eps, rel=1e-6)  # spends (essentially) all of it
    assert epsilon_spent(rho * (1 + 1e-6), steps, delta, dim=dim, gamma=gamma) > eps


def test_calibrated_rho_rdp_beats_zcdp_rule_at_gamma_zero():
    # The RDP conversion is tighter than ρ + 2 sqrt(ρ log 1/δ).
    rdp_rho = calibrate_rho(64.0, 1e-5, 3)
    assert rdp_rho > rho_from_eps_delta(64.0, 1e-5) / 3


@FAST
@given(
    rho=st.floats(1e-3, 20.0),
    steps=st.integers(1, 20),
    dim=st.integers(1, 50),
    gamma=st.floats(0.0, 0.1),
    log10_delta=st.floats(-10, -2),
)
def test_monotone_in_steps_dim_gamma(rho, steps, dim, gamma, log10_delta):
    delta = 10.0**log10_delta

    def eps(**kw):
        args = {"dim": dim, "gamma": gamma, "steps": steps, "rho": rho} | kw
        return epsilon_spent(
            args["rho"], args["steps"], delta, dim=args["dim"], gamma=args["gamma"]
        )

    base = eps()
    slack = 1e-9 * max(1.0, base)
    assert eps(steps=steps + 1) >= base - slack
    assert eps(dim=dim + 3) >= base - slack
    assert eps(gamma=gamma + 0.01) >= base - slack
    assert eps(rho=rho * 1.1) >= base - slack


def test_gamma_too_large_is_reported():
    with pytest.raises(ValueError, match=r"gamma = 0\.5 is too large for dim = 384"):
        calibrate_rho(1.0, 1e-5, 3, dim=384, gamma=0.5)


def test_choose_gamma_rule():
    eps, delta, steps, dim = 64.0, 1e-5, 3, 10
    gamma = choose_gamma(eps, delta, steps, dim=dim)
    assert gamma > 0
    rho0 = calibrate_rho(eps, delta, steps, dim=dim)
    assert calibrate_rho(eps, delta, steps, dim=dim, gamma=gamma) >= 0.9 * rho0 * (1 - 1e-8)
    assert calibrate_rho(eps, delta, steps, dim=dim, gamma=gamma * 1.001) < 0.9 * rho0
    # Higher dimension forces a smoother bound; fraction 1 forces γ = 0.
    assert choose_gamma(eps, delta, steps, dim=384) < gamma
    assert choose_gamma(eps, delta, steps, dim=dim, fraction=1.0) == 0.0
    assert choose_gamma(eps, delta, steps, dim=dim, fraction=0.5) > gamma


# --------------------------------------------------------------------------------------
# calibrate() and PrivacySpent
# --------------------------------------------------------------------------------------


def test_calibrate_rdp_describes_what_was_spent():
    spent = calibrate(128.0, 1e-5, 5, dim=2, gamma=0.05, mechanism="brace")
    assert spent.accounting == "rdp" and spent.mechanism == "brace"
    assert spent.rho_per_step == calibrate_rho(128.0, 1e-5, 5, dim=2, gamma=0.05)
    assert spent.epsilon_rdp == pytest.approx(128.0, rel=1e-6)
    assert spent.noise_multiplier == pytest.approx(1 / math.sqrt(2 * spent.rho_per_step))
    assert spent.noise_std(0.5) == pytest.approx(0.5 * spent.noise_multiplier)
    assert 1.0 < spent.alpha_opt < max_rdp_order(0.05)
    assert spent.event == SelfComposed(SmoothGaussianStep(spent.rho_per_step, 0.05, 2), 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spent.epsilon = 1.0  # type: ignore[misc]

    d = json.loads(json.dumps(spent.to_dict()))
    for key in (
        "epsilon",
        "delta",
        "steps",
        "dim",
        "gamma",
        "rho_per_step",
        "accounting",
        "mechanism",
        "noise_multiplier",
        "epsilon_rdp",
        "alpha_opt",
    ):
        assert key in d
    assert d["noise_multiplier"] == pytest.approx(spent.noise_multiplier)

    text = str(spent)
    assert text == acc.format_spent(spent)
    for needle in (
        "brace",
        "rdp",
        "rho per step",
        "noise multiplier",
        "RDP-accounted eps",
        "optimal alpha",
        "T = 5",
        "d = 2",
        "0.05",
    ):
        assert needle in text


def test_calibrate_paper_rules():
    eps, delta, steps = 128.0, 1e-5, 5
    # γ = 0: the zCDP rule, s = Δ sqrt(T/(2ρ)).
    plain = calibrate(eps, delta, steps, dim=2, accounting="paper")
    rho = rho_from_eps_delta(eps, delta)
    assert plain.rho_per_step == pytest.approx(rho / steps)
    assert plain.noise_multiplier == pytest.approx(math.sqrt(steps / (2 * rho)))
    assert plain.epsilon_rdp <= eps  # RDP shows the zCDP rule is (a little) conservative
    # γ > 0: one smooth step spends exactly (ε/T, δ/T); basic composition gives (ε, δ).
    smooth = calibrate(eps, delta, steps, dim=2, gamma=0.05, accounting="paper")
    one = epsilon_spent(smooth.rho_per_step, 1, delta / steps, dim=2, gamma=0.05)
    assert one == pytest.approx(eps / steps, rel=1e-6) and one <= eps / steps
    assert smooth.epsilon_rdp <= eps
    assert "paper" in str(smooth)


def test_calibrate_gamma_none_uses_rule():
    spent = calibrate(64.0, 1e-5, 3, dim=10, gamma=None)
    assert spent.gamma == choose_gamma(64.0, 1e-5, 3, dim=10)
    assert spent.rho_per_step >= 0.9 * calibrate_rho(64.0, 1e-5, 3, dim=10) * (1 - 1e-8)
    # The paper's γ > 0 rule spends (ε/T, δ/T) per step: γ is chosen for that budget, so
    # it stays feasible even where the whole-budget γ would not be.
    paper = calibrate(0.5, 1e-5, 5, dim=2, gamma=None, accounting="paper")
    assert paper.gamma == choose_gamma(0.1, 2e-6, 1, dim=2)
    one = epsilon_spent(paper.rho_per_step, 1, 2e-6, dim=2, gamma=paper.gamma)
    assert one == pytest.approx(0.1, rel=1e-6)


def test_paper_rule_reports_infeasible_gamma():
    with pytest.raises(ValueError, match=r"accounting='paper' makes each of the 5 steps"):
        calibrate(0.5, 1e-5, 5, dim=2, gamma=0.05, accounting="paper")


def test_privacy_spent_to_dict_is_json_safe():
    spent = PrivacySpent(1.0, 1e-5, 1, 1, 0.0, 0.5, "rdp")  # epsilon_rdp/alpha_opt unknown
    assert json.loads(json.dumps(spent.to_dict()))["epsilon_rdp"] is None


# --------------------------------------------------------------------------------------
# The accountant
# --------------------------------------------------------------------------------------


def test_accountant_composition_forms_agree():
    step = SmoothGaussianStep(2.0, 0.05, 3)
    a = RdpAccountant().compose(step, count=4)
    b = RdpAccountant().compose(step).compose(step).compose(SelfComposed(step, 2))
    c = RdpAccountant().compose(Composed((step, step, step, step)))
    alphas = np.array([1.1, 2.0, 5.0])
    np.testing.assert_allclose(
        a.rdp(alphas), 4 * smooth_gaussian_rdp(alphas, 2.0, gamma=0.05, dim=3)
    )
    np.testing.assert_allclose(b.rdp(alphas), a.rdp(alphas))
    np.testing.assert_allclose(c.rdp(alphas), a.rdp(alphas))
    assert a.get_epsilon(1e-5) == pytest.approx(epsilon_spent(2.0, 4, 1e-5, dim=3, gamma=0.05))
    assert a.ledger == Composed((SelfComposed(step, 4),))
    assert len(b.ledger.events) == 3
    # Mixed events: RDP adds.
    mixed = RdpAccountant().compose(GaussianStep(1.0)).compose(step)
    assert mixed.rdp(2.0) == pytest.approx(2.0 + smooth_gaussian_rdp(2.0, 2.0, gamma=0.05, dim=3))
    assert mixed.max_order == max_rdp_order(0.05)


def test_empty_accountant_spends_nothing():
    assert RdpAccountant().get_epsilon(1e-5) == 0.0


def test_unsupported_event_is_named():
    @dataclasses.dataclass(frozen=True)
    class LaplaceStep(acc.DpEvent):
        scale: float

    accountant = RdpAccountant()
    bad = Composed((GaussianStep(1.0), LaplaceStep(1.0)))
    assert not accountant.supports(bad)
    assert accountant.supports(Composed((GaussianStep(1.0), SelfComposed(GaussianStep(1.0), 3))))
    with pytest.raises(UnsupportedEventError, match="LaplaceStep"):
        accountant.compose(bad)
    assert accountant.get_epsilon(1e-5) == 0.0  # nothing was half-composed


def test_invalid_event_values_are_echoed():
    with pytest.raises(ValueError, match=r"GaussianStep\.rho must not be NaN"):
        RdpAccountant().compose(GaussianStep(float("nan")))
    with pytest.raises(ValueError, match=r"SmoothGaussianStep\.gamma must be >= 0\. Found -0\.1"):
        RdpAccountant().compose(SmoothGaussianStep(1.0, -0.1, 2))
    with pytest.raises(ValueError, match=r"SmoothGaussianStep\.dim must be >= 1\. Found 0"):
        RdpAccountant().compose(SmoothGaussianStep(1.0, 0.1, 0))
    with pytest.raises(ValueError, match=r"count must be >= 1\. Found 0"):
        RdpAccountant().compose(GaussianStep(1.0), count=0)


# --------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------

NAN = float("nan")


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"epsilon": 0.0}, ValueError, r"epsilon must be > 0\. Found 0\.0"),
        ({"epsilon": -1.0}, ValueError, r"epsilon must be > 0\. Found -1\.0"),
        ({"epsilon": NAN}, ValueError, r"epsilon must not be NaN"),
        ({"epsilon": math.inf}, ValueError, r"epsilon must be finite"),
        ({"delta": 0.0}, ValueError, r"delta must lie in \(0, 1\)\. Found 0\.0"),
        ({"delta": 1.0}, ValueError, r"delta must lie in \(0, 1\)\. Found 1\.0"),
        ({"delta": NAN}, ValueError, r"delta must not be NaN"),
        ({"steps": 0}, ValueError, r"steps must be >= 1\. Found 0"),
        ({"steps": 2.5}, TypeError, r"steps must be an integer\. Found 2\.5"),
        ({"dim": 0}, ValueError, r"dim must be >= 1\. Found 0"),
        ({"gamma": -0.1}, ValueError, r"gamma must be >= 0\. Found -0\.1"),
        ({"gamma": NAN}, ValueError, r"gamma must not be NaN"),
        ({"accounting": "pld"}, ValueError, r"accounting must be one of .*Found 'pld'"),
    ],
)
def test_calibrate_rejects_bad_inputs(kwargs, exc, match):
    args = {"epsilon": 1.0, "delta": 1e-5, "steps": 3, "dim": 2, "gamma": 0.01} | kwargs
    with pytest.raises(exc, match=match):
        calibrate(args.pop("epsilon"), args.pop("delta"), args.pop("steps"), **args)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: calibrate_rho(1.0, 1e-5, 0), r"steps must be >= 1"),
        (lambda: calibrate_rho(1.0, 2.0, 1), r"delta must lie in \(0, 1\)\. Found 2\.0"),
        (lambda: epsilon_spent(0.0, 3, 1e-5), r"rho_per_step must be > 0\. Found 0\.0"),
        (lambda: epsilon_spent(1.0, 3, 1e-5, gamma=-1.0), r"gamma must be >= 0"),
        (lambda: choose_gamma(1.0, 1e-5, 3, dim=2, fraction=1.5), r"fraction must lie in"),
        (lambda: choose_gamma(1.0, 1e-5, 3, dim=2, fraction=0.0), r"fraction must be > 0"),
        (lambda: smooth_gaussian_rdp(1.0, 1.0), r"alpha must be > 1\. Found 1\.0"),
        (lambda: smooth_gaussian_rdp(NAN, 1.0), r"alpha must be > 1\. Found nan"),
        (lambda: rho_from_eps_delta(-2.0, 1e-5), r"epsilon must be > 0\. Found -2\.0"),
        (lambda: gaussian_zcdp(1.0, 0.0), r"sigma must be > 0\. Found 0\.0"),
        (lambda: rdp_to_epsilon([2.0, 3.0], [1.0], 1e-5), r"equal length"),
    ],
)
def test_functions_reject_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------- the gate-size γ rule


def test_gate_factor_closed_form():
    """Δ̄/(2r/m) = max(1, m·e^{-γ(m-1)}) when K ≥ m − 1 (convex in k: endpoints)."""
    from brace.policy import gate_factor

    for g in (0.01, 0.1, 0.5):
        for m in (1, 2, 10, 100):
            got = float(gate_factor(g, [m], 1000)[0])
            assert got == pytest.approx(max(1.0, m * math.exp(-g * (m - 1))), rel=1e-12)


def test_gate_rule_is_public_and_meets_the_oracle_target():
    """ε = 4, T = 2, d = 2 (the issue's first row): within 2× of the oracle noise for every
    gate m ≥ 20·log(1/δ)/ε = 58, where the fraction rule is 40× off at m = 100."""
    from brace.accounting import calibrate_rho
    from brace.policy import choose_gamma_for_gates, gate_factor

    eps, dl, T, d, n = 4.0, 1e-5, 2, 2, 10_000
    g = choose_gamma_for_gates(eps, dl, T, dim=d, n=n)
    assert g == choose_gamma_for_gates(eps, dl, T, dim=d, n=n)  # deterministic, memoised
    rho0 = calibrate_rho(eps, dl, T, dim=d)
    ratio = gate_factor(g, np.array([58, 100, 1000, 10_000]), n) * math.sqrt(
        rho0 / calibrate_rho(eps, dl, T, dim=d, gamma=g))
    assert np.all(ratio <= 2.0), ratio
    g_old = choose_gamma(eps, dl, T, dim=d)
    old = float(gate_factor(g_old, [100], n)[0]) * math.sqrt(
        rho0 / calibrate_rho(eps, dl, T, dim=d, gamma=g_old))
    assert old > 10 * float(ratio[1])
    with pytest.raises(ValueError, match="n must be"):
        choose_gamma_for_gates(eps, dl, T, dim=d, n=0)


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(1e-3, 100.0), log_delta=st.floats(-12.0, -2.0),
       steps=st.integers(1, 30), dim=st.sampled_from([1, 8, 64, 784]),
       gamma=st.sampled_from([0.0, 1e-9, 1e-4, 1e-2]))
def test_calibration_root_search_is_the_largest_feasible(eps, log_delta, steps, dim, gamma):
    """The calibration's root search (Brent on log ρ, stepping back to the feasible side)
    returns a ρ that never overspends and is the largest to a relative 1e-8; the γ rule's
    search returns the largest γ with ρ(γ) ≥ 0.9·ρ(0) to a relative 1e-6."""
    from brace.accounting.calibration import _choose_gamma, _eps_and_order

    delta = 10.0 ** log_delta
    try:
        rho = calibrate_rho(eps, delta, steps, dim=dim, gamma=gamma)
    except ValueError:  # γ too large for (ε, δ, T, d): no ρ works
        assume(False)
    assert epsilon_spent(rho, steps, delta, dim=dim, gamma=gamma) <= eps
    assert epsilon_spent(rho * (1 + 1e-8), steps, delta, dim=dim, gamma=gamma) > eps
    g = _choose_gamma(eps, delta, steps, dim)
    target = 0.9 * calibrate_rho(eps, delta, steps, dim=dim)
    if g > 0.0:
        assert _eps_and_order(target, steps, delta, dim, g)[0] <= eps
    assert _eps_and_order(target, steps, delta, dim, max(g, 1e-12) * (1 + 1e-6))[0] > eps
