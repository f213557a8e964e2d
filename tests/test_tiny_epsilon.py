"""Tiny ε against δ (issue 21): the count release needs ``ε > log(1/(1 − fδ))`` and a
positive count budget ``ε_c`` (``docs/privacy-accounting.md`` §9). Below that the default
release falls back to the smooth one, and an explicit count release says which
constraint fails, naming ε and δ."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace import LSRMemory, load_result, plan_release, private_retrieve
from brace.accounting import RdpAccountant, calibrate_count
from brace.cli import main
from brace.policy import choose_release, predicted_noise_ratio

# (ε, δ, T): ε below the proposals' share of δ (the first two, issue 21), and one where
# ε clears it but the count budget ε_c of every admissible share is not positive.
TINY = [(1e-6, 1e-5, 3), (0.05, 0.9, 3), (2.8240200192730733, 0.5, 1)]


def re_float(x: float) -> str:
    """``x`` as the error message prints it (``:.6g``), escaped for a regex."""
    return f"{x:.6g}".replace(".", r"\.").replace("+", r"\+")


@pytest.fixture(scope="module")
def mem():
    rng = np.random.default_rng(0)
    return LSRMemory(rng.normal(size=(200, 2)), radius=0.8)


@pytest.mark.parametrize("eps, delta, T", TINY)
def test_auto_release_with_tiny_epsilon_falls_back_to_smooth(mem, eps, delta, T):
    choice = choose_release(eps, delta, T, dim=2, n=200)
    assert choice.release == "smooth" and "count" not in choice.predicted
    assert choice.gamma > 0.0
    for release in ("auto", None):  # None: the default, auto
        res = private_retrieve(mem, np.zeros(2), method="brace", epsilon=eps, delta=delta,
                               steps=T, release=release, seed=0)
        assert res.privacy.release == "smooth" and res.privacy.gamma == choice.gamma
        assert np.all(np.isfinite(res.outputs))
        spent = RdpAccountant().compose(res.privacy.event).get_epsilon(delta)
        assert spent <= eps * (1 + 1e-9)
    assert plan_release(mem, method="brace", epsilon=eps, delta=delta, steps=T).release \
        == "smooth"


@pytest.mark.parametrize("eps, delta", [(1e-6, 1e-5), (0.05, 0.9)])
def test_count_release_below_the_proposal_floor_names_the_constraint(mem, eps, delta):
    floor = re_float(-math.log1p(-0.5 * delta))
    match = (rf"count release cannot be calibrated at epsilon = {eps}, delta = {delta}:.*"
             rf"= {floor} of epsilon, so it needs epsilon > log\(1/\(1 - proposal_delta\*delta\)\)")
    with pytest.raises(ValueError, match=match):
        calibrate_count(eps, delta, 3, dim=2)
    with pytest.raises(ValueError, match=match):
        private_retrieve(mem, np.zeros(2), method="brace", epsilon=eps, delta=delta, steps=3,
                         release="count", seed=0)
    with pytest.raises(ValueError, match="count release cannot be calibrated"):
        predicted_noise_ratio("count", eps, delta, 3, dim=2, n=200)


def test_count_release_without_a_positive_count_budget_names_the_constraint():
    # ε = 5.1e-6 clears the floor log(1/(1 − δ/2)) ≈ 5e-6, but the count's share of
    # ρ_s buys ε_c = sqrt(2·0.09·ρ_s) − log(1/(1 − δ_c)) < 0
    with pytest.raises(ValueError, match=r"epsilon = 5\.1e-06, delta = 1e-05, T = 1: .*"
                                         r"eps_count = .* but it must be > 0"):
        calibrate_count(5.1e-6, 1e-5, 1, dim=2)


@pytest.mark.parametrize("eps, delta", [(1e-5, 1e-5), (1e-6, 1e-9), (1.0, 0.9)])
def test_count_release_just_above_the_floor_still_works(eps, delta):
    sp = calibrate_count(eps, delta, 3, dim=2)
    assert sp.eps_count > 0.0 and sp.rho_per_step > 0.0
    assert RdpAccountant().compose(sp.event).get_epsilon(delta) <= eps * (1 + 1e-9)


@pytest.mark.parametrize("eps", [1e-6, 1e-4, 0.05])
@pytest.mark.parametrize("delta", [1e-12, 0.5, 0.999])
def test_default_release_works_over_extreme_budgets(eps, delta):
    assert choose_release(eps, delta, 3, dim=2, n=500).release in ("smooth", "count")


def _retrieve_args(tmp_path, *extra):
    rng = np.random.default_rng(0)
    bank, queries = tmp_path / "bank.npy", tmp_path / "q.npy"
    np.save(bank, rng.normal(size=(300, 2)))
    np.save(queries, rng.normal(size=(2, 2)) * 0.3)
    return ["retrieve", "--bank", str(bank), "--queries", str(queries), "--radius", "0.8",
            "--steps", "3", "--epsilon", "1e-6", "--seed", "1", *extra]


def test_cli_retrieve_with_tiny_epsilon(tmp_path, capsys):
    out = tmp_path / "r.npz"
    assert main(_retrieve_args(tmp_path, "--out", str(out))) == 0  # δ = 1e-5, the default
    res = load_result(out)
    assert res.params["release"] == "smooth" and res.params["release_rule"].startswith("auto")
    assert res.privacy.epsilon == 1e-6
    code = main(_retrieve_args(tmp_path, "--release-mode", "count",
                               "--out", str(tmp_path / "c.npz")))
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "c.npz").exists()
    assert "count release cannot be calibrated at epsilon = 1e-06, delta = 1e-05" in err
    assert "Traceback" not in err
