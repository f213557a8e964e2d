"""The default release rule (``docs/privacy-accounting.md`` §10): a public choice between
the smooth and the count release, each capped at ``AUTO_GLOBAL_RATIO`` × global noise."""

from __future__ import annotations

import math

import pytest

from brace.accounting import RdpAccountant, calibrate_count, calibrate_rho
from brace.policy import AUTO_GLOBAL_RATIO, choose_gamma, choose_release, gate_factor

GRID = [(0.5, 3, 384), (1.0, 1, 2), (4.0, 2, 2), (8.0, 5, 64), (64.0, 3, 2), (128.0, 5, 2),
        (128.0, 5, 384)]


@pytest.mark.parametrize("eps, T, d", GRID)
def test_chosen_mode_never_exceeds_the_global_cap(eps, T, d):
    c = choose_release(eps, 1e-5, T, dim=d, n=5000)
    rho0 = calibrate_rho(eps, 1e-5, T, dim=d)
    if c.release == "smooth":
        rho = calibrate_rho(eps, 1e-5, T, dim=d, gamma=c.gamma)
        assert c.gamma > 0 and c.count_share is None
    else:
        sp = calibrate_count(eps, 1e-5, T, dim=d, count_share=c.count_share,
                             proposal_delta=c.proposal_delta)
        rho = sp.rho_per_step
        # the calibration spends (and never exceeds) the target
        spent = RdpAccountant().compose(sp.event).get_epsilon(1e-5)
        assert spent <= eps * (1 + 1e-9)
        assert sp.delta_count == pytest.approx(c.proposal_delta * 1e-5 / T)
    ratio = math.sqrt(rho0 / rho)
    assert ratio == pytest.approx(c.global_ratio, rel=1e-12)
    assert 1.0 < ratio <= AUTO_GLOBAL_RATIO * (1 - 1e-7)
    # the cap binds: the chosen mode uses (nearly) all the room it is given
    assert ratio > AUTO_GLOBAL_RATIO * 0.999


def test_choice_is_the_better_predicted_mode():
    for eps, T, d in GRID:
        c = choose_release(eps, 1e-5, T, dim=d, n=5000)
        assert set(c.predicted) <= {"smooth", "count"} and c.release in c.predicted
        assert c.predicted[c.release] == min(c.predicted.values())
        assert "never above 1.05x global" in c.rule


def test_low_dimension_large_epsilon_keeps_the_certificate():
    # the paper's synthetic setting: the smooth release with the largest admissible γ
    c = choose_release(128.0, 1e-5, 5, dim=2, n=256)
    assert c.release == "smooth"
    assert c.gamma == pytest.approx(choose_gamma(128.0, 1e-5, 5, dim=2,
                                                 fraction=1 / (1.05 * (1 - 1e-6)) ** 2))
    # high dimension, small ε: the dimension-free count release
    c = choose_release(1.0, 1e-5, 3, dim=384, n=20000)
    assert c.release == "count" and 0 < c.count_share <= 0.5


def test_smooth_candidate_is_within_the_cap_of_the_constrained_minimax():
    # gate_factor decreases in γ: the largest admissible γ is within AUTO_GLOBAL_RATIO of any
    # smaller γ's worst ratio over gates (the argument of §10)
    eps, T, d, n = 4.0, 3, 64, 2000
    g_max = choose_gamma(eps, 1e-5, T, dim=d, fraction=1 / 1.05**2)
    ms = list(range(58, n, 97))
    rho0 = calibrate_rho(eps, 1e-5, T, dim=d)
    j_max = max(gate_factor(g_max, ms, n) * math.sqrt(rho0 / calibrate_rho(eps, 1e-5, T, dim=d,
                                                                         gamma=g_max)))
    for g in (g_max / 2, g_max / 5, g_max / 20):
        j = max(gate_factor(g, ms, n) * math.sqrt(rho0 / calibrate_rho(eps, 1e-5, T, dim=d,
                                                                       gamma=g)))
        assert j_max <= 1.05 * j


def test_proposal_delta_default_is_half():
    a = calibrate_count(4.0, 1e-5, 3, dim=2)
    b = calibrate_count(4.0, 1e-5, 3, dim=2, proposal_delta=0.5)
    assert a == b and a.delta_count == pytest.approx(1e-5 / 6)
    c = calibrate_count(4.0, 1e-5, 3, dim=2, proposal_delta=0.1)
    assert c.delta_count == pytest.approx(1e-6 / 3) and c.rho_per_step > a.rho_per_step


@pytest.mark.parametrize("kw, msg", [
    ({"max_global_ratio": 0.99}, "max_global_ratio must be > 1"),
    ({"max_global_ratio": 1.0}, "max_global_ratio must be > 1"),
    ({"max_global_ratio": 1.0 + 1e-9}, "no release mode stays within"),
    ({"max_global_ratio": -1.0}, "max_global_ratio"),
    ({"n": 0}, "n"),
])
def test_choose_release_rejects_bad_arguments(kw, msg):
    args = {"dim": 2, "n": 100} | kw
    with pytest.raises(ValueError, match=msg):
        choose_release(4.0, 1e-5, 3, **args)


@pytest.mark.parametrize("f", [0.0, 1.0, -0.1, math.nan])
def test_calibrate_count_rejects_bad_proposal_delta(f):
    with pytest.raises(ValueError, match="proposal_delta"):
        calibrate_count(4.0, 1e-5, 3, dim=2, proposal_delta=f)


def test_allow_count_false_leaves_the_smooth_release():
    a = choose_release(1.0, 1e-5, 3, dim=384, n=20000)
    b = choose_release(1.0, 1e-5, 3, dim=384, n=20000, allow_count=False)
    assert a.release == "count" and b.release == "smooth" and set(b.predicted) == {"smooth"}
    assert b.predicted["smooth"] == a.predicted["smooth"]
    with pytest.raises(TypeError, match="allow_count"):
        choose_release(1.0, 1e-5, 3, dim=2, n=100, allow_count=1)
