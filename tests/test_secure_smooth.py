"""Secure noise at a data-dependent scale: BRACE's smooth release on the public grid
(``docs/privacy-accounting.md`` §13, Theorem 11).

* neighbour smoothness at fixed histories, exactly, of the numbers the sampler uses: the
  rational variances ``σ²(D)``, ``σ²(D')`` of neighbours differ by at most ``e^{2γ}``, and
  the rounded pre-noise points by at most ``min(S, S')`` in grid units;
* an independent slow reference of ``σ²`` in exact rationals;
* Theorem 11 (ii) itself, where it is visible: the discrete Rényi divergence of two
  discrete Gaussians of different variances, summed exactly, is at most the continuous
  one plus the stated excess, and the inflation ``κ`` covers that excess;
* the release: every coordinate on the public grid, which does not depend on the bank.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

import brace
from brace import LSRMemory, certificate
from brace.accounting import gaussian_renyi_divergence
from brace.secure import SMOOTH_INFLATION, sigma2_params
from brace.steps import secure_grid
from test_certificate import _smoothness_instance


def _plan(mem, T, gamma, kappa):
    return brace.plan_release(mem, method="brace", epsilon=4.0, delta=1e-5, steps=T,
                              gamma=gamma, kappa=kappa, release="smooth", noise="secure")


def _sigma2(sens, g, rho, d) -> list[Fraction]:
    t, m, f = sigma2_params(sens, g, rho, d, data_dependent=True)
    return [Fraction(int(a)) * (Fraction(int(b)) + Fraction(int(c), 1 << 30))
            for a, b, c in zip(t, m, f, strict=True)]


def _log_ratio_le(a: Fraction, b: Fraction, bound: float) -> bool:
    """``log(a/b) ≤ bound`` exactly enough (40 significant digits)."""
    with localcontext() as ctx:
        ctx.prec = 40
        return (Decimal(a.numerator) * Decimal(b.denominator)
                / (Decimal(a.denominator) * Decimal(b.numerator))).ln() <= Decimal(bound)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    kappa=st.sampled_from([0.0, 1.0, 10.0]),
    gamma=st.sampled_from([0.02, 0.1]),
    T=st.integers(1, 3),
    offset=st.sampled_from([0.0, 1e6]),
)
def test_secure_variances_are_smooth_at_fixed_histories(seed, kappa, gamma, T, offset):
    """The variances the sampler uses for neighbours ``D ~ D'`` at the same history satisfy
    ``σ²(D)/σ²(D') ≤ e^{2γ}`` exactly (the certificate at rate γ − 2⁻³⁰, then ``√d`` added
    and σ² rounded up), and the integer points differ by at most ``min(S, S')``."""
    X, Xp, r, q, hist = _smoothness_instance(seed, T, offset)
    kw = dict(steps=T, kappa=kappa, gamma=gamma, noise="secure")
    mD, mP = LSRMemory(X, radius=r), LSRMemory(Xp, radius=r)
    cD = certificate(mD, q[None], hist[None], **kw)
    cP = certificate(mP, q[None], hist[None], **kw)
    plan = _plan(mD, T, gamma, kappa)
    assert plan.smoothing_margin == 2.0**-30  # Theorem 11's room for σ²'s rounding
    d = X.shape[1]
    for t in range(T):
        sD, sP = cD.noise_scale[:, t], cP.noise_scale[:, t]
        g = secure_grid(plan, sD)
        assert np.array_equal(g, secure_grid(plan, sP))  # the grid is public
        vD = _sigma2(sD, g, plan.spent.rho_per_step, d)[0]
        vP = _sigma2(sP, g, plan.spent.rho_per_step, d)[0]
        assert _log_ratio_le(vD, vP, 2 * gamma) and _log_ratio_le(vP, vD, 2 * gamma)
        uD = np.rint(cD.pre_noise[:, t] / g[:, None])
        uP = np.rint(cP.pre_noise[:, t] / g[:, None])
        S = min(float(sD[0]), float(sP[0])) / float(g[0]) + math.sqrt(d)
        assert float(np.linalg.norm(uD - uP)) <= S
        assert min(vD, vP) >= 2**40  # σ ≥ 2^20 grid units (Theorem 11's premise)


def test_secure_sigma2_against_a_slow_reference():
    """σ² of the library against a from-scratch computation in exact rationals:
    the smallest ``t·(m + f·2⁻³⁰)`` with ``t = ⌊√⌈σ₀²⌉⌋ + 1`` above
    ``σ₀² = (1 + 2⁻⁴⁰)(Δ/g + √d⁺)²/(2ρ)``."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        d = int(rng.integers(1, 500))
        g = 2.0 ** int(rng.integers(-40, -5))
        sens = float(g * rng.uniform(2**20, 2**40))
        rho = float(rng.uniform(1e-3, 20))
        root = Fraction(math.isqrt(d << 60) + 1, 1 << 30)
        S = Fraction(sens) / Fraction(g) + root
        s0 = (1 + Fraction(1, 2**40)) * S * S / (2 * Fraction(rho))
        t = math.isqrt(math.ceil(s0)) + 1
        M = math.ceil(s0 * (1 << 30) / t)
        want = Fraction(t * M, 1 << 30)
        got = _sigma2(np.array([sens]), np.array([g]), rho, d)[0]
        assert got == want and got >= s0


def _discrete_renyi(alpha: float, mu: int, a: float, b: float) -> float:
    """``D_α(N_Z(μ, a) ‖ N_Z(0, b))`` by exact summation over the support."""
    k = np.arange(-4000, 4001, dtype=np.float64)
    lp = -(k - mu) ** 2 / (2 * a)
    lq = -(k * k) / (2 * b)
    lp -= logsumexp(lp)
    lq -= logsumexp(lq)
    return float(logsumexp(alpha * lp + (1 - alpha) * lq) / (alpha - 1))


def _phi(s: float) -> float:
    return 1.0 + 2.0 * sum(math.exp(-2 * math.pi**2 * j * j * s) for j in range(1, 20))


@pytest.mark.parametrize("a,b", [(1.5, 1.0), (1.0, 1.5), (0.6, 0.5), (3.0, 2.5), (0.4, 0.45)])
@pytest.mark.parametrize("alpha", [1.5, 2.0, 4.0])
@pytest.mark.parametrize("mu", [0, 1, 2])
def test_discrete_against_continuous_renyi_divergence(a, b, alpha, mu):
    """Theorem 11 (ii) at variances small enough for the discreteness to show: the exact
    discrete divergence is at most the continuous one plus the stated excess
    (``log φ(b)``, and ``[log φ(a/h) − log φ(a)]/(α − 1)`` more when ``a < b``)."""
    v = a / b
    h = alpha - (alpha - 1) * v
    if h <= 0:
        pytest.skip("continuous divergence infinite")
    disc = _discrete_renyi(alpha, mu, a, b)
    cont = gaussian_renyi_divergence(alpha, abs(mu), math.sqrt(a), math.sqrt(b), dim=1)
    excess = math.log(_phi(b))
    if v < 1:
        excess += (math.log(_phi(a / h)) - math.log(_phi(a))) / (alpha - 1)
    assert disc <= cont + excess + 1e-9, (disc, cont, excess)


def test_the_inflation_covers_the_discrete_excess():
    """(iii): at the secure scale (σ ≥ 2^20) the excess of (ii) is below 10⁻²⁰⁰⁰ per
    coordinate, while inflating σ² by 1 + κ lowers the continuous bound by at least
    ``ρκe^{−2γ}/(1 + κ)`` — positive for every ρ and γ the library accepts."""
    a = 2.0**40
    alpha = 2.0**30
    # the excess bound 8π²a·e^{−2π²a/α} + log φ(b), in log10
    log10_excess = math.log10(8 * math.pi**2 * a) - 2 * math.pi**2 * (a / alpha) / math.log(10)
    assert log10_excess < -2000
    kappa = float(SMOOTH_INFLATION)
    for rho, gamma in ((1e-300, 100.0), (1e-6, 1e-9), (10.0, 0.5)):
        gain = rho * kappa * math.exp(-2 * gamma) / (1 + kappa)
        assert gain == 0.0 or math.log10(gain) > log10_excess + 1000
        assert math.log10(rho) + math.log10(kappa) - 2 * gamma / math.log(10) > -1000


def test_secure_smooth_release_on_a_public_grid():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 3))
    Xp = X.copy()
    Xp[0] = X[1]
    q = X[:4] + 0.1
    kw = dict(method="brace", epsilon=4.0, delta=1e-5, steps=3, kappa=0.0)
    a = brace.private_retrieve(LSRMemory(X, radius=0.8), q, **kw)
    b = brace.private_retrieve(LSRMemory(Xp, radius=0.8), q, **kw)
    assert a.params["release"] == "smooth" and a.params["noise"] == "secure"
    assert np.array_equal(a.grid, b.grid)  # from the public floor 2r/n, not the data
    k = a.outputs / a.grid[:, :, None]
    assert np.array_equal(k, np.rint(k))
    assert np.all(a.noise_std / a.grid >= 2.0**20)
    dist = np.linalg.norm(a.outputs - q[:, None], axis=2)
    assert np.all(dist <= (np.arange(1, 4) + 1) * 0.8)
    # the certificate the release used is the secure one (rate γ − 2⁻³⁰)
    hist = np.concatenate([q[:, None], a.outputs[:, :-1]], axis=1)
    cert = certificate(LSRMemory(X, radius=0.8), q, hist, steps=3, kappa=0.0,
                       gamma=a.params["gamma"], noise="secure")
    plain = certificate(LSRMemory(X, radius=0.8), q, hist, steps=3, kappa=0.0,
                        gamma=a.params["gamma"])
    assert np.all(cert.noise_scale >= plain.noise_scale)
    assert np.any(cert.noise_scale > plain.noise_scale)  # the slower rate does act
    assert np.all(cert.noise_scale <= plain.noise_scale * (1 + 1e-5))


def test_certificate_follows_the_release_it_certifies():
    """``certificate(..., result=res)`` takes the noise mode (and the counts) of the
    release: a secure release's Δ̄_t bit for bit, where the plain default differs; a
    mode or a parameter that differs from the release's is refused."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3))
    mem = LSRMemory(X, radius=0.8)
    q = X[:4] + 0.1
    kw = dict(method="brace", epsilon=4.0, delta=1e-5, steps=3, kappa=0.0)
    res = brace.private_retrieve(mem, q, release="smooth", **kw)
    assert res.params["noise"] == "secure"
    hist = np.concatenate([q[:, None], res.outputs[:, :-1]], axis=1)
    free = dict(steps=3, kappa=0.0, gamma=res.params["gamma"])
    cert = certificate(mem, q, hist, result=res, **free)
    np.testing.assert_array_equal(cert.noise_scale, res.smooth_sensitivity)
    plain = certificate(mem, q, hist, **free)  # no result: plain, another rate
    assert np.any(plain.noise_scale != res.smooth_sensitivity)
    with_budget = certificate(mem, q, hist, result=res, release="smooth", **kw)
    np.testing.assert_array_equal(with_budget.noise_scale, res.smooth_sensitivity)
    with pytest.raises(ValueError, match="noise='plain' differs from the certified"):
        certificate(mem, q, hist, result=res, noise="plain", **free)
    with pytest.raises(ValueError, match="gamma=.* differs from the certified"):
        certificate(mem, q, hist, result=res, steps=3, kappa=0.0, gamma=0.5)
    with pytest.raises(ValueError, match="steps=2 differs from the certified"):
        certificate(mem, q, hist, result=res, steps=2, kappa=0.0, gamma=res.params["gamma"])
    with pytest.raises(TypeError, match="result must be the PrivateRetrievalResult"):
        certificate(mem, q, hist, result=res.params, **free)
    # a count release: its released counts follow the result too
    cnt = brace.private_retrieve(mem, q, release="count", **kw)
    hc = np.concatenate([q[:, None], cnt.outputs[:, :-1]], axis=1)
    cc = certificate(mem, q, hc, result=cnt, release="count", **kw)
    np.testing.assert_array_equal(
        cc.noise_scale, certificate(mem, q, hc, release="count", noise="secure",
                                    released_counts=cnt.released_counts, **kw).noise_scale)
