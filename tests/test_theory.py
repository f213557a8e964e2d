"""Theory checks (issue 8): the (2T+1)r path bound, the activation bound, the banks, and
the quick ``brace experiment theory`` run producing every figure and table."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brace import LSRMemory, NotPrivateWarning, private_retrieve
from brace.datasets import PAPER_MIXTURE, sample_mixture
from brace.experiments import theory
from brace.experiments.theory import (
    TheoryConfig,
    activation_check,
    cluster_bank,
    embedded_mixture,
    path_bound_check,
    quick_config,
    run_theory,
)
from brace.experiments.theory import activation as theory_activation

EPSILONS = (0.01, 128.0, 1e4)  # tiny, the paper's, huge


def _bank_and_queries(d: int, n: int = 40, Q: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sample_mixture(n, spec=embedded_mixture(d, off_plane_std=0.1), seed=rng)
    q = X[rng.integers(0, n, Q)].copy()
    q[:, :2] += rng.normal(0, 0.35, (Q, 2))
    return LSRMemory(X, radius=0.8), q


def _run(mem, q, method, eps, *, T=4, kappa=0.0, proj=True, seed=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return private_retrieve(mem, q, method=method, epsilon=eps, delta=1e-5, steps=T,
                                kappa=kappa, output_projection=proj, seed=seed)


# ------------------------------------------------------------------ (2T+1) r path bound


@pytest.mark.parametrize("d", [2, 512])
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("method", ["brace", "global", "endpoint", "naive"])
def test_path_bound_holds_on_every_step(d, eps, method):
    mem, q = _bank_and_queries(d, seed=d)
    T = 4
    res = _run(mem, q, method, eps, T=T, seed=int(eps) + d)
    chk = path_bound_check(res, mem.retrieve(q, T))
    assert chk.violations == 0 and chk.step_violations == 0
    assert chk.max_ratio <= 1.0 + 1e-9
    assert chk.bound == pytest.approx((2 * T + 1) * 0.8)
    assert chk.dist.shape == (len(q), 1 if method == "endpoint" else T)


def test_path_bound_check_is_not_vacuous():
    """Without the projection a tiny ε throws releases far beyond (2T+1)r: detected."""
    mem, q = _bank_and_queries(512)
    res = _run(mem, q, "global", 0.01, proj=False)
    chk = path_bound_check(res, mem.retrieve(q, 4))
    assert chk.violations == len(q) and chk.max_ratio > 10


# ------------------------------------------------------------------ activation bound


@pytest.mark.parametrize("d", [2, 512])
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("proj", [True, False])
def test_activation_bound_holds_on_every_step(d, eps, proj):
    mem, q = _bank_and_queries(d, seed=3 + d)
    T = 4
    for kappa in (0.0, 0.01, 1.0, (2 * T + 1) ** 2 / T):
        res = _run(mem, q, "brace", eps, T=T, kappa=kappa, proj=proj, seed=7)
        chk = activation_check(mem, q, res)
        assert chk.violations == 0, (kappa, chk.to_dict())
        assert chk.lhs.shape == (len(q), T)
        # the certificate's Q_t equals an independent recomputation Π(a_t + H_t R_t)
        assert chk.pre_noise_mismatch <= 1e-12
        # and the Δ̄_t it recomputes along the released history is the one used
        assert chk.scale_mismatch <= 1e-12
        if proj and kappa >= (2 * T + 1) ** 2 / T:
            assert not chk.activated.any()  # spec §5 corollary: never activates
        # the ‖Y_{t−1} − z_{t−1}‖² term is only ever needed on activated, projected steps
        assert not (chk.needs_history & ~(chk.activated & chk.projected)).any()


def test_activation_bound_needs_the_history_term_somewhere():
    """At d = 512 and κ = 0 the pre-noise projection binds, and only the
    ``‖Y_{t−1} − z_{t−1}‖²`` term covers those steps (the check exercises both terms)."""
    mem, q = _bank_and_queries(512, seed=11)
    res = _run(mem, q, "brace", 128.0, kappa=0.0)
    chk = activation_check(mem, q, res)
    assert chk.violations == 0
    assert chk.needs_history.any()
    assert (chk.lhs[chk.needs_history] > 0).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 25),
    d=st.integers(1, 6),
    radius=st.floats(0.2, 2.0),
    kappa=st.sampled_from([0.0, 1e-3, 0.3, 2.0, 50.0, math.inf]),
    eps=st.sampled_from([0.05, 4.0, 300.0]),
    proj=st.booleans(),
    duplicates=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_activation_bound_random_banks(n, d, radius, kappa, eps, proj, duplicates, seed):
    """Random, duplicated and boundary-heavy banks: the bound holds on every step."""
    rng = np.random.default_rng(seed)
    X = rng.normal(0, radius, (n, d))
    q = rng.normal(0, radius, (4, d))
    if duplicates:
        X[: n // 2] = X[0]
    # put some memories exactly on the query's gate boundary
    u = rng.normal(size=(min(n, 3), d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    X[-len(u):] = q[0] + radius * u
    mem = LSRMemory(X, radius=radius)
    res = _run(mem, q, "brace", eps, T=3, kappa=kappa, proj=proj, seed=seed)
    chk = activation_check(mem, q, res)
    assert chk.violations == 0
    assert chk.pre_noise_mismatch <= 1e-9 * radius


def test_activation_check_detects_a_wrong_pre_noise_point(monkeypatch):
    """A certificate that returned a point 2r away from Q_t would be caught."""
    mem, q = _bank_and_queries(2)
    res = _run(mem, q, "brace", 128.0, kappa=0.01)
    real = theory_activation.certificate

    def shifted(*a, **kw):
        c = real(*a, **kw)
        return dataclasses.replace(c, pre_noise=c.pre_noise + 1.6)

    monkeypatch.setattr(theory_activation, "certificate", shifted)
    chk = activation_check(mem, q, res)
    assert chk.violations > 0 and chk.pre_noise_mismatch > 1.0


def test_activation_check_refuses_baselines():
    mem, q = _bank_and_queries(2)
    with pytest.raises(ValueError, match="BRACE result"):
        activation_check(mem, q, _run(mem, q, "global", 1.0))


# ------------------------------------------------------------------ banks


def test_embedded_mixture_keeps_the_plane_and_the_off_plane_variance():
    spec = embedded_mixture(66, off_plane_std=0.2)
    w, mu, sd = spec.arrays()
    _, mu0, sd0 = PAPER_MIXTURE.arrays()
    assert mu.shape == (3, 66) and np.array_equal(mu[:, :2], mu0)
    assert np.array_equal(sd[:, :2], sd0) and np.allclose(sd[:, 2:], 0.2 / 8)
    X = sample_mixture(4000, spec=spec, seed=0)
    assert (X[:, 2:] ** 2).sum(1).mean() == pytest.approx(0.04, rel=0.03)
    with pytest.raises(ValueError, match="dim"):
        embedded_mixture(1)


@pytest.mark.parametrize(("n", "m"), [(100, 4), (1000, 32), (50, 50), (10, 0)])
def test_cluster_bank_gate_holds_exactly_m(n, m):
    X, c = cluster_bank(n, m, radius=0.8, seed=n)
    assert X.shape == (n, 2)
    d = np.linalg.norm(X - c, axis=1)
    assert (d <= 0.4 + 1e-12).sum() == m and (d[d > 0.4] >= 16 * 0.8 - 1e-9).all()
    q = c + np.array([[0.08, 0.0], [0.0, -0.05]])
    assert LSRMemory(X, radius=0.8).gate(q, counts=True).tolist() == [m, m]
    with pytest.raises(ValueError, match="in_gate"):
        cluster_bank(5, 6, radius=1.0)


def test_root_n_effective_count_and_noise_recomputation():
    """Item 4 at small size: m̂_1 = m exactly (γ = 0.5), ξ from the certificate equals
    the drawn innovation times the noise std, and the returned √n scaling."""
    cfg = quick_config(root_n_sizes=(100, 400), root_n_alphas=(0.5,), root_n_replications=30)
    out, raw = theory.run_root_n(cfg, 0)
    for row in out["rows"]:
        # m̂ = 2r/Δ̄: the public floating-point slack (~1e-9 r) moves it by ~1e-8 relative
        assert row["m_hat_mean_per_step"][0] == pytest.approx(row["m_in_gate"], rel=1e-6)
        assert row["gate_size_mean_per_step"][0] == row["m_in_gate"]
        assert row["xi_recomputation_mismatch"] <= 1e-9
        assert raw[f"alpha0.5_n{row['n']}"].shape == (30,)
        # predicted and measured sd agree within sampling error (30 draws × 2 coords)
        assert row["sd_sqrt_n_xi_per_step"][0] == pytest.approx(
            row["sd_predicted_per_step"][0], rel=0.35)


# ------------------------------------------------------------------ config and CLI


@pytest.mark.parametrize(("field", "value", "match"), [
    ("dims", (), "dims"),
    ("dims", (1,), "dims"),
    ("root_n_alphas", (1.2,), "root_n_alphas"),
    ("replications", 1, "replications"),
    ("accounting", "basic", "accounting"),
    ("epsilon", -1.0, "epsilon"),
    ("activation_kappas", (-0.5,), "kappa grid"),
])
def test_config_validation_names_the_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TheoryConfig(), **{field: value}).validate()


def test_run_theory_refuses_unknown_items(tmp_path):
    with pytest.raises(ValueError, match="items"):
        run_theory(quick_config(), tmp_path / "x", items=("dimension", "nope"))
    assert not (tmp_path / "x").exists()


def test_quick_run_is_reproducible():
    cfg = quick_config(dims=(2,), horizons=(2,), activation_dims=(2,), root_n_sizes=(100,),
                       replications=4, cost_replications=4, root_n_replications=4)
    a = run_theory(cfg, None, items=("dimension", "root_n"), progress=False)
    b = run_theory(cfg, None, items=("root_n", "dimension"), progress=False)
    for item in ("dimension", "root_n"):
        a["items"][item].pop("wall_time_s")
        b["items"][item].pop("wall_time_s")
        assert a["items"][item] == b["items"][item]
