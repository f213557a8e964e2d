"""The empirical privacy audit (brace.audit): statistics, density model, power, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from brace import LSRMemory, certificate, private_retrieve
from brace.audit import (
    AuditConfig,
    audit,
    candidate_pairs,
    certify_thresholds,
    clopper_pearson_upper,
    epsilon_lower_bound,
    error_counts,
    format_report,
    log_likelihood_ratio,
    report_bank,
)
from brace.audit.density import _log_density, _sample, _setup
from brace.audit.pairs import _replaced
from brace.mechanisms import global_sensitivity

pytestmark = pytest.mark.filterwarnings("ignore::brace.NotPrivateWarning")


@pytest.fixture(scope="module")
def bank1():
    """The report's d = 1 bank: a query whose gate holds one memory near the boundary."""
    return report_bank(24, 1, 0.5, 8)


@pytest.fixture(scope="module")
def bank2():
    return report_bank(40, 2, 0.5, 9)


# ------------------------------------------------------------------ Clopper–Pearson, ε_lb


def test_clopper_pearson_hand_computed_cases():
    a = 0.05
    # k = 0: the bound solves (1 - p)^n = α
    assert clopper_pearson_upper(0, 10, a) == pytest.approx(1 - a ** (1 / 10), rel=1e-12)
    assert float(clopper_pearson_upper(0, 10, a)) == pytest.approx(0.2588655, abs=1e-7)
    # k = n - 1: the bound solves p^n = 1 - α
    assert clopper_pearson_upper(9, 10, a) == pytest.approx((1 - a) ** (1 / 10), rel=1e-12)
    # k = n: no information, the bound is 1
    assert clopper_pearson_upper(10, 10, a) == 1.0
    # vectorised
    out = clopper_pearson_upper(np.array([0, 10]), np.array([10, 10]), a)
    np.testing.assert_allclose(out, [1 - a ** 0.1, 1.0])


@pytest.mark.parametrize("n", [1, 7, 50, 1000])
def test_clopper_pearson_matches_scipy(n):
    """One-sided level α = upper end of scipy's exact two-sided interval at 1 - 2α."""
    a = 0.025
    ks = np.unique(np.linspace(0, n, 12).astype(int))
    ours = clopper_pearson_upper(ks, n, a)
    for k, u in zip(ks, ours, strict=True):
        ref = stats.binomtest(int(k), n).proportion_ci(1 - 2 * a, method="exact").high
        assert u == pytest.approx(ref, rel=1e-10, abs=1e-14)
        if k < n:
            assert u == pytest.approx(stats.beta.ppf(1 - a, k + 1, n - k), rel=1e-12)


@pytest.mark.parametrize("p", [1e-3, 0.05, 0.3, 0.77])
def test_clopper_pearson_exact_coverage(p):
    """P_p(U(K, n) < p) ≤ α, computed exactly over the binomial law."""
    n, a = 200, 0.05
    k = np.arange(n + 1)
    miss = clopper_pearson_upper(k, n, a) < p
    assert stats.binom.pmf(k, n, p)[miss].sum() <= a + 1e-12


def test_epsilon_lower_bound_hand_computed():
    assert float(epsilon_lower_bound(0.01, 0.5, 0.0)) == pytest.approx(math.log(50))
    assert float(epsilon_lower_bound(0.5, 0.01, 0.0)) == pytest.approx(math.log(50))
    assert float(epsilon_lower_bound(0.01, 0.5, 0.1)) == pytest.approx(math.log(0.4 / 0.01))
    assert float(epsilon_lower_bound(0.5, 0.5, 0.0)) == 0.0  # a coin flip certifies nothing
    assert float(epsilon_lower_bound(0.2, 0.9, 0.0)) == 0.0  # both logs negative
    assert float(epsilon_lower_bound(0.3, 1.0, 0.0)) == pytest.approx(0.0)
    # numerator ≤ 0 contributes nothing; exact zero rate with positive numerator: inf
    assert float(epsilon_lower_bound(0.0, 0.5, 0.0)) == math.inf
    assert float(epsilon_lower_bound(0.0, 1.0, 0.0)) == 0.0  # 0/0 and ln(1/1)
    np.testing.assert_allclose(
        epsilon_lower_bound([0.01, 0.5], [0.5, 0.01], 0.0), [math.log(50)] * 2
    )
    with pytest.raises(ValueError, match="delta"):
        epsilon_lower_bound(0.1, 0.1, 1.0)
    with pytest.raises(ValueError, match="rates"):
        epsilon_lower_bound(1.2, 0.1, 0.0)


def test_error_counts_and_certify_by_hand():
    s0 = np.array([0.0, 1.0, 2.0, 3.0])
    s1 = np.array([2.0, 3.0, 4.0, 5.0])
    fp, fn = error_counts(s0, s1, [2.5, -1.0, 3.0])
    assert fp.tolist() == [1, 4, 0]  # #{S_D > τ}
    assert fn.tolist() == [1, 0, 2]  # #{S_D' ≤ τ} (ties count as "D")
    res = certify_thresholds(s0, s1, [2.5], delta=1e-5, alpha=0.1, n_bounds=2)
    u = stats.beta.ppf(1 - 0.05, 2, 3)  # k = 1 of n = 4 at level α / n_bounds
    assert res["fpr_upper"][0] == pytest.approx(u)
    assert res["fnr_upper"][0] == pytest.approx(u)
    want = max(0.0, math.log((1 - 1e-5 - u) / u))
    assert res["epsilon_lb"][0] == pytest.approx(want)


def test_statistics_validation():
    with pytest.raises(ValueError, match="alpha"):
        clopper_pearson_upper(1, 10, 1.0)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson_upper(11, 10, 0.05)
    with pytest.raises(ValueError, match="NaN"):
        certify_thresholds([np.nan], [1.0], [0.0], delta=1e-5, alpha=0.05, n_bounds=2)
    with pytest.raises(ValueError, match="n_bounds"):
        certify_thresholds([0.0], [1.0], [0.0], delta=1e-5, alpha=0.05, n_bounds=0)


# ------------------------------------------------------------------ the density model


CONFIGS = [
    dict(method="brace", kappa=0.0),
    dict(method="brace", kappa=128.0),
    dict(method="global"),
    dict(method="naive"),
    dict(method="endpoint"),
    dict(method="brace", kappa=0.0, noise_scale_factor=0.5),
]


@pytest.mark.parametrize("kw", CONFIGS, ids=lambda k: "-".join(map(str, k.values())))
def test_log_density_is_the_samplers_density(bank2, kw):
    """log p_D(Y) from the certificate along the observed prefix equals the Gaussian log
    density of the very innovations the mechanism drew: Σ_t −‖ξ_t‖²/2 − d·log s_t."""
    X, q = bank2
    cfg = AuditConfig(epsilon=4.0, steps=3, radius=0.5, **kw).validated()
    setup = _setup(cfg, q[None])
    rng = np.random.default_rng(3)
    R = setup.releases
    xi = rng.standard_normal((500, R, 2))
    mem = LSRMemory(X, radius=0.5)
    res = private_retrieve(
        mem, np.repeat(q[None], 500, 0), method=cfg.method, epsilon=4.0, delta=1e-5,
        steps=3, kappa=cfg.kappa, output_projection=False,
        _innovations=cfg.noise_scale_factor * xi,
        gamma=setup.spent.gamma if cfg.method == "brace" else None,
    )
    got = _log_density(mem, setup, res.outputs)
    std = cfg.noise_scale_factor * res.noise_std
    want = (-0.5 * (xi**2).sum(-1) - 2 * np.log(std)).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


def test_llr_matches_closed_form_global_one_step(bank1):
    """Global, T = 1: S(Y) = (‖Y − μ‖² − ‖Y − μ'‖²)/(2s²) with μ, μ' the gate means at q."""
    X, q = bank1
    r = 0.5
    dist = np.abs(X[:, 0] - q[0])
    j = int(np.flatnonzero(dist <= r)[0])
    Xp = X.copy()
    Xp[j] = q - 0.9 * r
    cfg = AuditConfig(method="global", epsilon=1.0, steps=1, radius=r)
    Y = np.linspace(-5, 5, 41).reshape(-1, 1, 1)
    # 2r plus the public floating-point slack (docs/privacy.md §8)
    s = float(global_sensitivity(len(X), r, 1, q[None])[0])
    assert s == pytest.approx(2 * r, rel=1e-8)
    s /= math.sqrt(2 * _setup(cfg.validated(), q[None]).spent.rho_per_step)
    mu = X[np.abs(X[:, 0] - q[0]) <= r, 0].mean()
    mu_p = Xp[np.abs(Xp[:, 0] - q[0]) <= r, 0].mean()
    want = ((Y[:, 0, 0] - mu) ** 2 - (Y[:, 0, 0] - mu_p) ** 2) / (2 * s * s)
    got = log_likelihood_ratio(X, Xp, q, Y, cfg)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw", [
    # BRACE, κ = 0, T = 3: a pair that changes both the mean and the noise scale
    dict(method="brace", epsilon=4.0, steps=3, batch_size=5000),
    # the count release: the noisy counts enter the likelihood ratio too
    dict(method="brace", release="count", epsilon=8.0, steps=2),
], ids=["smooth-kappa0", "count"])
def test_llr_change_of_measure_identity(bank2, kw):
    """E_D[e^S] = 1 and E_{D'}[e^{-S}] = 1 for the exact likelihood ratio, at a pair that
    changes the gate count at q."""
    X, q = bank2
    cfg = AuditConfig(radius=0.5, **kw)
    pairs = candidate_pairs(X, q, cfg, rng=0)
    pair = next(p for p in pairs if p.kind == "boundary-in" and p.centre == "q")
    Xp = _replaced(X, pair)
    setup = _setup(cfg.validated(), q[None])
    n = 20_000
    for B, sign in ((X, 1.0), (Xp, -1.0)):
        Y = _sample(LSRMemory(B, radius=0.5), setup, n, np.random.default_rng(11))
        w = np.exp(sign * log_likelihood_ratio(X, Xp, q, Y, cfg))
        assert abs(w.mean() - 1.0) < 5 * w.std() / math.sqrt(n) + 1e-3
        assert w.std() > 1e-3  # the pair is not trivial


# ------------------------------------------------------------------ pairs


def test_candidate_pairs_are_neighbours_of_every_kind(bank1):
    X, q = bank1
    cfg = AuditConfig(method="brace", epsilon=1.0, steps=2, radius=0.5)
    pairs = candidate_pairs(X, q, cfg, released=q[None] + 0.3, rng=1)
    kinds = {p.kind for p in pairs}
    assert {"boundary-out", "boundary-in", "antipodal", "duplicate", "far",
            "smooth-bound"} <= kinds
    for p in pairs:
        Xp = _replaced(X, p)
        assert (np.any(Xp != X, axis=1)).sum() == 1  # exactly one replaced row
        assert np.array_equal(X[p.row], np.array(p.old_value))
    assert any(p.gate_q == (1, 2) for p in pairs)  # naive's noise scale jumps 2r -> r
    assert any(p.gate_q == (1, 0) for p in pairs)
    assert len({(p.row, p.new_value) for p in pairs}) == len(pairs)


# ------------------------------------------------------------------ power and validity


@pytest.mark.slow
@pytest.mark.parametrize("method", ["global", "brace"])
def test_broken_mechanism_is_caught_and_real_one_passes(bank1, method):
    """Noise std halved at claimed ε = 1: the audit certifies ε_lb ≥ 1. The real
    mechanism, same bank, same seeds: ε_lb ≤ 1. (BRACE at T = 1 has R_1 = 0, so κ does
    not change the release; κ = ∞ skips the clean-trajectory bound and keeps this fast.
    Measured ε_lb over seeds 0–4 at 200k runs: global 1.30–1.35, BRACE 1.22–1.28.)"""
    X, q = bank1
    base = AuditConfig(method=method, epsilon=1.0, steps=1, radius=0.5, kappa=math.inf,
                       n_runs=200_000, n_pilot=50_000, n_screen=500, seed=2024,
                       batch_size=50_000)
    broken = audit(X, q, AuditConfig(**{**base.__dict__, "noise_scale_factor": 0.5}))
    assert broken.epsilon_lb >= 1.0, str(broken)
    assert broken.verdict == "caught"
    assert broken.pair.kind == "antipodal"  # the full-sensitivity move was found
    real = audit(X, q, base)
    assert real.epsilon_lb <= 1.0, str(real)
    assert real.verdict == "pass"
    assert 0.0 < real.epsilon_lb  # the audit is not vacuous


def test_naive_baseline_is_caught(bank2):
    """Gate count 1 ↔ 2 at q: the naive noise scale jumps from 2r to r, which leaks far
    more than the claimed ε (the variance terms of the likelihood ratio see it)."""
    X, q = bank2
    res = audit(X, q, AuditConfig(method="naive", epsilon=1.0, steps=2, radius=0.5,
                                  n_runs=20_000, n_screen=300, seed=5))
    assert res.epsilon_lb > 1.0, str(res)
    assert res.verdict == "caught"
    assert res.label == "naive (NOT DP)"
    assert sorted(res.pair.gate_q) == [1, 2] or res.pair.kind in ("smooth-bound", "far")


def test_identical_distributions_certify_nothing(bank1):
    """A replacement that no gate can ever reach leaves the release law unchanged:
    S ≡ 0, every test is a coin flip, ε_lb = 0."""
    X, q = bank1
    far = int(np.argmax(np.abs(X[:, 0] - q[0])))
    cfg = AuditConfig(method="brace", epsilon=1.0, steps=2, radius=0.5, n_runs=2000,
                      n_pilot=500, seed=0)
    Xf = X.copy()
    Xf[far] = 1e6  # move a row far away first, then replace it by another far value
    res = audit(Xf, q, cfg, replacement=(far, [2e6]))
    assert res.epsilon_lb == 0.0
    assert res.pair.kind == "given"
    b = res.best
    assert np.all((b.false_positives == 2000) | (b.false_positives == 0))


def test_user_statistic_and_given_pair(bank1):
    X, q = bank1
    j = int(np.flatnonzero(np.abs(X[:, 0] - q[0]) <= 0.5)[0])
    new = q - np.sign(X[j] - q) * 0.5

    def first_coordinate(Y):
        return Y[:, 0, 0] * np.sign(new[0] - X[j, 0])

    cfg = AuditConfig(method="global", epsilon=1.0, steps=1, radius=0.5, n_runs=40_000,
                      noise_scale_factor=0.5, seed=1)
    res = audit(X, q, cfg, replacement=(j, new), statistic=first_coordinate)
    assert res.statistic == "first_coordinate"
    assert res.n_screen == 0 and res.n_candidates == 1
    assert res.epsilon_lb > 0.3
    with pytest.raises(ValueError, match="one value per run"):
        audit(X, q, cfg, replacement=(j, new), statistic=lambda Y: Y[:1, 0, 0])
    with pytest.raises(ValueError, match="NaN"):
        audit(X, q, cfg, replacement=(j, new), statistic=lambda Y: Y[:, 0, 0] * np.nan)


def test_result_is_deterministic_and_serialisable(bank1):
    X, q = bank1
    cfg = AuditConfig(method="endpoint", epsilon=4.0, steps=2, radius=0.5, n_runs=3000,
                      n_screen=100, seed=9)
    a, b = audit(X, q, cfg), audit(X, q, cfg)
    da, db = a.to_dict(), b.to_dict()
    da.pop("wall_time_s"), db.pop("wall_time_s")
    assert da == db
    text = json.dumps(da, allow_nan=False)
    back = json.loads(text)
    assert back["n_runs_per_side"] == 3000
    assert back["seeds"]["seed"] == 9
    assert back["pair"]["description"].startswith(f"row {a.pair.row}")
    assert len(back["certified"][0]["thresholds"]) == 4
    assert back["n_bounds"] == 8
    assert "epsilon_lb" in str(a) and "pair" in str(a)
    c = audit(X, q, AuditConfig(**{**cfg.__dict__, "seed": 10}))
    assert c.to_dict()["certified"] != da["certified"]


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        (dict(method="laplace"), ValueError, "method"),
        (dict(epsilon=0.0), ValueError, "epsilon"),
        (dict(delta=1.0), ValueError, "delta"),
        (dict(steps=0), ValueError, "steps"),
        (dict(radius=-1.0), ValueError, "radius"),
        (dict(kappa=-1.0), ValueError, "kappa"),
        (dict(method="brace", gamma=0.0), ValueError, "gamma"),
        (dict(noise_scale_factor=0.0), ValueError, "noise_scale_factor"),
        (dict(n_runs=5), ValueError, "n_runs"),
        (dict(n_certify=4, n_finalists=3), ValueError, "n_certify"),
        (dict(alpha=1.0), ValueError, "alpha"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(seed=1.5), TypeError, "seed"),
        (dict(accounting="zcdp"), ValueError, "accounting"),
    ],
)
def test_config_validation(bank1, kw, exc, match):
    X, q = bank1
    with pytest.raises(exc, match=match):
        audit(X, q, AuditConfig(**kw))


def test_input_validation(bank1):
    X, q = bank1
    cfg = AuditConfig(n_runs=20, n_screen=10)
    with pytest.raises(ValueError, match="single query"):
        audit(X, np.stack([q, q]), cfg)
    with pytest.raises(ValueError, match="dimension mismatch"):
        audit(X, np.array([0.0, 1.0]), cfg)
    with pytest.raises(ValueError, match="row must be < n"):
        audit(X, q, cfg, replacement=(len(X), [0.0]))
    with pytest.raises(ValueError, match="non-finite"):
        audit(X, q, cfg, replacement=(0, [np.inf]))
    with pytest.raises(TypeError, match="pair"):
        audit(X, q, cfg, replacement=3)
    with pytest.raises(TypeError, match="callable"):
        audit(X, q, cfg, statistic="llr")
    with pytest.raises(ValueError, match="non-finite"):
        audit(np.array([[np.nan]]), np.array([0.0]), cfg)


# ------------------------------------------------------------------ CLI




# ---------------------------------------------------------------- a broken certificate


def _old_step1_rule(monkeypatch):
    """Re-create the step-1 rule before 0.1.1 (advisory BRACE-2026-01): the walk bound with
    the thin τ-shell around the public query counted in W and no k term."""
    from brace import memory as memory_mod
    from brace import sensitivity as S

    ctx = {}
    real_gate_pass = memory_mod.LSRMemory.gate_pass

    def gate_pass(self, centres, **kw):
        X, _ = self._bank()
        r, tau = self.radius_, S.TAU_REL * self.radius_
        d = np.sqrt(((X[None] - centres[:, None]) ** 2).sum(-1))
        ctx["shell_in"] = ((d > r - tau) & (d <= r)).sum(1)
        ctx["shell"] = ((d > r - tau) & (d <= r + tau)).sum(1)
        return real_gate_pass(self, centres, **kw)

    real_advance = S.CleanTrajectoryBound.advance

    def advance(self, *, clean_counts=None, segments=None):
        if self.s != 0:
            return real_advance(self, clean_counts=clean_counts, segments=segments)
        self.s = 1
        Q = self.n_queries
        r = self.num.r
        k = np.arange(self.K + 1)[None, :]
        L = (np.asarray(clean_counts) - ctx["shell_in"][Q:])[:, None]
        W = ctx["shell"][Q:, None]
        nc = L - k - 1
        A = np.where(nc >= 1, np.minimum(2 * r, 2 * r * (W + 1) / np.maximum(nc + 1, 1)), 2 * r)
        self.A = self.num.up(A + self.slack(1)[:, None])
        return self.A

    monkeypatch.setattr(memory_mod.LSRMemory, "gate_pass", gate_pass)
    monkeypatch.setattr(S.CleanTrajectoryBound, "advance", advance)


def _boundary_bank():
    return np.concatenate([np.linspace(-0.5, 0.5, 200), [5.0]])[:, None], np.zeros(1)


@pytest.mark.slow
def test_broken_certificate_is_caught_and_the_fixed_one_passes(monkeypatch):
    """Report row: BRACE (κ = 0, T = 1) with the old step-1 certificate. The pair finder's
    scale-ratio search finds the far row moved onto the gate boundary (noise scale ×2),
    and the audit certifies ε_lb above the claimed ε; the fixed certificate passes."""
    X, q = _boundary_bank()
    # γ = 0.03 (public, feasible at ε = 1): the smooth max sits at k = 0 on this bank,
    # so a doubled G(0) doubles the noise scale
    cfg = AuditConfig(method="brace", epsilon=1.0, steps=1, radius=1.0, kappa=0.0,
                      gamma=0.03, n_runs=20_000, n_pilot=5_000, n_screen=300, seed=11,
                      batch_size=20_000)
    fixed = audit(X, q, cfg)
    assert fixed.verdict == "pass", str(fixed)
    with monkeypatch.context() as m:
        _old_step1_rule(m)
        pairs = candidate_pairs(X, q, cfg, rng=0)
        sr = [p for p in pairs if p.kind == "scale-ratio"]
        assert sr and abs(sr[0].new_value[0]) == 1.0  # a row moved onto the boundary
        scale = [certificate(LSRMemory(B, radius=1.0), q[None], q[None, None], steps=1,
                             kappa=0.0, gamma=0.03).noise_scale[0, 0]
                 for B in (X, _replaced(X, sr[0]))]
        assert scale[1] / scale[0] > 1.9  # the broken smoothness the search looks for
        broken = audit(X, q, cfg)
    assert broken.verdict == "VIOLATION", str(broken)
    assert broken.epsilon_lb > cfg.epsilon
    row = format_report({
        "config": {"delta": cfg.delta, "alpha": cfg.alpha, "radius": cfg.radius},
        "rows": [{**broken.to_dict(), "d": 1, "n": len(X), "steps": 1,
                  "label": "brace (kappa=0), old step-1 certificate (BROKEN on purpose)"}],
        "private_mechanisms_pass": False, "naive_and_broken_caught": True, "passed": False,
        "wall_time_s": 0.0,
    })
    assert "VIOLATION" in row and "BROKEN on purpose" in row
