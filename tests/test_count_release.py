"""The count release (``docs/privacy-accounting.md`` §9): noisy gate count → public
sensitivity → fixed Gaussian. Accounting, the proposal's failure probability, validity on
the good event, the noise scale as post-processing of the released counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace import LSRMemory, private_retrieve
from brace.accounting import (
    CountedGaussianStep,
    GaussianStep,
    RdpAccountant,
    calibrate_count,
    calibrate_rho,
)
from brace.sensitivity import Numerics, cap_units, fixed_centre_units


@pytest.mark.parametrize("eps, T", [(0.5, 3), (1.0, 3), (4.0, 2), (8.0, 5), (128.0, 5)])
def test_calibration_spends_the_target_and_is_dimension_free(eps, T):
    a = calibrate_count(eps, 1e-5, T, dim=2)
    b = calibrate_count(eps, 1e-5, T, dim=384)
    assert a.rho_per_step == b.rho_per_step and a.count_margin == b.count_margin
    spent = RdpAccountant().compose(a.event).get_epsilon(1e-5)
    assert spent <= eps * (1 + 1e-9)
    assert spent == pytest.approx(eps, rel=1e-6)
    # the Gaussian part costs ~5-10 % of std against a γ = 0 release of the whole budget
    assert 1.0 < math.sqrt(calibrate_rho(eps, 1e-5, T, dim=2) / a.rho_per_step) < 1.15
    assert a.delta_count == pytest.approx(1e-5 / (2 * T))


def test_accountant_charges_the_failure_probability():
    step = CountedGaussianStep(0.3, 0.2, 1e-6)
    acc = RdpAccountant().compose(step, 4)
    # outside the failure events: zCDP 4·(ρ + (ε_c + log(1/(1-δ_c)))²/2), δ − 4δ_c, + log term
    rho = 4 * (0.3 + 0.5 * (0.2 - math.log1p(-1e-6)) ** 2)
    ref = RdpAccountant().compose(GaussianStep(rho))
    want = ref.get_epsilon(1e-5 - 4e-6) - math.log1p(-4e-6)
    assert acc.get_epsilon(1e-5) == pytest.approx(want, rel=1e-12)
    assert acc.get_epsilon(4e-6) == math.inf  # δ no larger than the failure probability


def test_margin_bounds_the_failure_probability():
    for eps, T in [(1.0, 3), (8.0, 5), (128.0, 5)]:
        s = calibrate_count(eps, 1e-5, T, dim=2)
        p = math.exp(-s.eps_count)
        # two-sided geometric: P(Z >= t) = p^t / (1 + p)
        assert p ** s.count_margin / (1 + p) <= s.delta_count
        assert p ** (s.count_margin - 1) / (1 + p) > s.delta_count  # the smallest such


def _cluster(m, d, n, seed):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(m, d))
    inner = u / np.linalg.norm(u, axis=1, keepdims=True) * (0.25 * rng.random((m, 1)))
    far = 10 + rng.uniform(0, 20, (n - m, d))
    return np.concatenate([inner, far])


def test_validity_on_the_good_event():
    """Whenever the proposal m̃ − margin ≤ max(m(D), m(D')), every replacement moves the
    pre-noise point by at most the proposed b."""
    rng = np.random.default_rng(1)
    r, d = 0.5, 2
    for m in (3, 10, 40):
        X = _cluster(m, d, 80, int(rng.integers(1 << 30)))
        y = np.zeros((1, d))
        num = Numerics(len(X), d, r, 1)
        sig = num.slack(np.zeros(1))
        base = LSRMemory(X, radius=r).step(y)
        mD = int(LSRMemory(X, radius=r).gate(y, counts=True)[0])
        for j in rng.choice(len(X), 12, replace=False):
            for v in (rng.uniform(-r, r, d), np.array([r, 0.0]), np.array([30.0, 30.0])):
                Xp = X.copy()
                Xp[j] = v
                mP = int(LSRMemory(Xp, radius=r).gate(y, counts=True)[0])
                moved = np.linalg.norm(LSRMemory(Xp, radius=r).step(y) - base)
                for m_prop in range(1, max(mD, mP) + 1):
                    b = np.minimum(fixed_centre_units(np.array([m_prop]), 0, num, sig)[:, 0],
                                   cap_units(num, sig))
                    assert moved <= num.value(b)[0]


def test_noise_scale_is_post_processing_of_the_released_counts():
    X = _cluster(200, 3, 2000, 0)
    mem = LSRMemory(X, radius=0.5)
    res = private_retrieve(mem, np.zeros((6, 3)), method="brace", epsilon=2.0, delta=1e-5,
                           steps=3, seed=4, release="count")
    s = res.privacy
    assert res.released_counts.shape == (6, 3) and s.release == "count"
    assert "released_counts" in res.to_dict()
    num = Numerics(len(X), 3, 0.5, 3)
    Y = np.concatenate([np.zeros((6, 1, 3)), res.outputs[:, :-1]], axis=1)
    for t in range(3):
        sig = num.slack(np.abs(Y[:, t]).max(axis=1))
        m_prop = np.maximum(res.released_counts[:, t] - s.count_margin, 1)
        b = np.minimum(fixed_centre_units(m_prop, 0, num, sig)[:, 0], cap_units(num, sig))
        np.testing.assert_array_equal(res.noise_std[:, t], num.value(b) * s.noise_multiplier)
    again = private_retrieve(mem, np.zeros((6, 3)), method="brace", epsilon=2.0, delta=1e-5,
                             steps=3, seed=4, release="count")
    np.testing.assert_array_equal(again.outputs, res.outputs)


@pytest.mark.parametrize("kw, match", [
    (dict(release="ptr"), "release must be"),
    (dict(release="auto", method="global"), "BRACE choice"),
    (dict(release="count", method="global"), "BRACE release"),
    (dict(release="count", accounting="paper"), "BRACE release"),
])
def test_bad_release_arguments(kw, match):
    X = _cluster(20, 2, 40, 0)
    args = dict(method="brace", epsilon=2.0, delta=1e-5, steps=2, seed=0) | kw
    with pytest.raises(ValueError, match=match):
        private_retrieve(LSRMemory(X, radius=0.5), np.zeros((1, 2)), **args)


def test_auto_release_picks_from_public_values_only():
    """release='auto' compares the predicted noise/oracle ratios of the two modes
    (public ε, δ, T, d, n): at d = 384, ε = 1 the count release wins by far."""
    from brace.policy import predicted_noise_ratio

    w_s, worst_s, g = predicted_noise_ratio("smooth", 1.0, 1e-5, 3, dim=384, n=2000)
    w_c, worst_c, _ = predicted_noise_ratio("count", 1.0, 1e-5, 3, dim=384, n=2000)
    assert w_c < w_s and g > 0 and worst_s >= w_s and worst_c >= w_c
    X = _cluster(300, 384, 2000, 0)
    res = private_retrieve(LSRMemory(X, radius=0.5), np.zeros((2, 384)), method="brace",
                           epsilon=1.0, delta=1e-5, steps=3, seed=0, release="auto")
    assert res.params["release"] == "count" and res.params["release_rule"].startswith("auto")
    other = private_retrieve(LSRMemory(_cluster(20, 384, 2000, 1), radius=0.5),
                             np.zeros((2, 384)), method="brace", epsilon=1.0, delta=1e-5,
                             steps=3, seed=0, release="auto")
    assert other.params["release_rule"] == res.params["release_rule"]  # not the data
    with pytest.raises(ValueError, match="release must be"):
        predicted_noise_ratio("ptr", 1.0, 1e-5, 3, dim=2, n=100)
