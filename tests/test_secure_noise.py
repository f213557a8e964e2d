"""Secure mode (``noise="secure"``, ``docs/privacy-accounting.md`` §13, ``docs/deploying.md``).

* the release: every coordinate a grid point, inside the projection ball, no seed, no
  numpy randomness, the plain default untouched, refusals with reasons;
* the exact samplers against their probability mass functions (chi-square and exact tail
  tests, each with false-alarm rate 1e-6), including the Python-integer fallbacks;
* the privacy statement: the grid's sensitivity bound, the calibration of σ², the discrete
  Gaussian's Rényi divergence and dp-accounting's PLD;
* a floating-point distinguisher at coordinates of magnitude 1e6.
"""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import brace
from brace import discrete as D
from brace import secure as S
from brace.cli import main
from brace.discrete import _bits, _exp

ALARM = 1e-6  # false-alarm rate of every statistical test in this file


@pytest.fixture(scope="module")
def mem():
    rng = np.random.default_rng(3)
    X = rng.uniform(-2.0, 2.0, (400, 3))
    return brace.LSRMemory(X, radius=0.9), X


def _on_grid(res) -> bool:
    k = res.outputs / res.grid[:, :, None]
    return bool(np.all(k == np.rint(k)) and np.all(np.abs(k) < 2.0**52))


def _is_power_of_two(g: np.ndarray) -> bool:
    m, _ = np.frexp(g)
    return bool(np.all(m == 0.5))


# --- the release ----------------------------------------------------------------------------

@pytest.mark.parametrize("method,kw", [
    ("brace", {}), ("brace", {"release": "count", "kappa": 0.0}),
    ("global", {}), ("global", {"accounting": "paper"}), ("endpoint", {}),
    ("brace", {"output_projection": False, "kappa": math.inf}),
    ("global", {"output_projection": False}),
])
def test_released_values_lie_on_the_grid(mem, method, kw):
    m, X = mem
    q = X[:6] + 0.05
    res = brace.private_retrieve(m, q, method=method, epsilon=2.0, delta=1e-5, steps=3,
                                 noise="secure", **kw)
    assert res.is_private and res.params["noise"] == "secure"
    assert res.grid.shape == res.outputs.shape[:2] and _is_power_of_two(res.grid)
    assert _on_grid(res)
    # the grid is small against the noise (2^20..2^21 units per std) and against r
    ratio = res.noise_std / res.grid
    assert np.all(ratio >= 2.0**20) and np.all(ratio < 2.0**21 * 1.01)
    assert np.all(res.grid * math.sqrt(3) <= m.radius_ / 16)
    if kw.get("output_projection", True):
        t = np.arange(1, res.outputs.shape[1] + 1) if method != "endpoint" else np.array([3])
        dist = np.linalg.norm(res.outputs - q[:, None], axis=2)
        assert np.all(dist <= (t + 1) * m.radius_)
    if res.released_counts is not None:
        assert res.released_counts.dtype == np.int64
    assert res.params["seed"] is None and "CSPRNG" in res.params["seed_null_reason"]


def test_noise_std_and_accounting_match_plain(mem):
    m, X = mem
    q = X[:4]
    sec = brace.private_retrieve(m, q, method="global", epsilon=1.0, delta=1e-5, steps=2,
                                 noise="secure")
    pl = brace.private_retrieve(m, q, method="global", epsilon=1.0, delta=1e-5, steps=2,
                                seed=0)
    assert sec.privacy.to_dict() == pl.privacy.to_dict()  # the same accounted event
    # σ exceeds the plain std only by the grid's sensitivity inflation √d·g and rounding
    rel = sec.noise_std[:, 0] / pl.noise_std[:, 0] - 1.0
    assert np.all(rel >= 0) and np.all(rel < 1e-4)


def test_secure_is_the_default_without_a_seed_and_refusals(mem):
    """``noise="auto"``: secure without a seed (every method and release, the smooth one
    included), plain with one; the plan, the accounting and the release mode are those of
    plain noise."""
    m, X = mem
    q = X[:2]
    kw = dict(epsilon=4.0, delta=1e-5, steps=2)
    for extra in ({"method": "brace"}, {"method": "brace", "kappa": 0.0},
                  {"method": "brace", "release": "smooth", "gamma": 0.05},
                  {"method": "brace", "accounting": "paper"},
                  {"method": "brace", "release": "count", "kappa": 0.0},
                  {"method": "global"}, {"method": "endpoint"},
                  {"method": "brace", "kappa": 128.0, "output_projection": False}):
        res = brace.private_retrieve(m, q, **kw, **extra)
        assert res.params["noise"] == "secure" and "no seed" in res.params["noise_rule"]
        assert _on_grid(res) and res.params["seed"] is None
        plain = brace.private_retrieve(m, q, seed=4, **kw, **extra)
        assert plain.params["noise"] == "plain" and plain.grid is None
        assert plain.params["release"] == res.params["release"]
        assert plain.privacy.to_dict() == res.privacy.to_dict()
        plan = brace.plan_release(m, queries=2, **kw, **extra)
        assert plan.noise == "secure" and plan.spent.to_dict() == res.privacy.to_dict()
    with pytest.warns(brace.NotPrivateWarning):  # naive: secure noise, still NOT DP
        nv = brace.private_retrieve(m, q, method="naive", **kw)
    assert nv.params["noise"] == "secure" and not nv.is_private and _on_grid(nv)
    refusals = [
        (dict(method="global", seed=3, noise="secure"), "CSPRNG"),
        (dict(method="global", _innovations=np.zeros((2, 2, 3)), noise="secure"),
         "standard normal"),
        (dict(method="global", noise="Secure"), "'auto', 'plain' or 'secure'"),
        # Theorem 11's public conditions
        (dict(method="brace", gamma=1e-10, noise="secure"), "gamma >= 1e-09"),
    ]
    for extra, match in refusals:
        with pytest.raises(ValueError, match=match):
            brace.private_retrieve(m, q, **{**kw, **extra})
    with pytest.raises(TypeError, match="sampling mode"):
        brace.private_retrieve(m, q, method="global", epsilon=1, delta=1e-5, steps=1,
                               noise=np.zeros(3))
    with pytest.raises(ValueError, match="n <= 2\\^30"):
        brace.plan_release((2**30 + 1, 3), radius=1.0, method="brace", noise="secure",
                           gamma=0.05, **kw)
    assert brace.plan_release((2**30 + 1, 3), radius=1.0, method="brace", noise="secure",
                              release="count", **kw).noise == "secure"


def test_a_seed_keeps_plain_noise_unchanged(mem):
    m, X = mem
    q = X[:5] + 0.1
    for method in ("brace", "global", "endpoint"):
        a = brace.private_retrieve(m, q, method=method, epsilon=2.0, delta=1e-5, steps=3,
                                   seed=11)
        b = brace.private_retrieve(m, q, method=method, epsilon=2.0, delta=1e-5, steps=3,
                                   seed=11, noise="plain")
        assert np.array_equal(a.outputs, b.outputs) and a.grid is None and b.grid is None
        assert a.params["noise"] == b.params["noise"] == "plain"
        assert "seed was given" in a.params["noise_rule"] and b.params["noise_rule"] == "given"
        # plain outputs are not grid points: the plain noise is a float
        assert not np.all(a.outputs * 2.0**20 == np.rint(a.outputs * 2.0**20))


def test_every_random_bit_comes_from_the_os_source(mem, monkeypatch):
    m, X = mem
    q = X[:3]

    def no_numpy(*a, **k):
        raise AssertionError("secure mode touched numpy's random module")

    monkeypatch.setattr(np.random, "default_rng", no_numpy)
    monkeypatch.setattr(np.random, "SeedSequence", no_numpy)
    monkeypatch.setattr(np.random, "Generator", no_numpy)
    counter = {"n": 0}
    real = _bits._words

    def fake_words(n):  # a deterministic stand-in for os.urandom: same stream, same release
        counter["n"] += n
        return np.random.PCG64(counter["n"]).random_raw(n).astype(np.uint64)

    kw = dict(method="brace", epsilon=2.0, delta=1e-5, steps=2, noise="secure")
    monkeypatch.setattr(_bits, "_words", fake_words)
    a = brace.private_retrieve(m, q, **kw)
    counter["n"] = 0
    b = brace.private_retrieve(m, q, **kw)
    assert np.array_equal(a.outputs, b.outputs)
    assert np.array_equal(a.released_counts, b.released_counts)
    monkeypatch.setattr(_bits, "_words", real)
    c = brace.private_retrieve(m, q, **kw)
    assert not np.array_equal(a.outputs, c.outputs)


def test_private_memory_and_save_load(mem, tmp_path):
    m, X = mem
    q = X[:3]
    pm = brace.PrivateMemory(X, radius=m.radius_, budget=(50.0, 1e-4))
    with pytest.raises(ValueError, match="CSPRNG"):
        pm.retrieve(q, steps=2, epsilon=2.0, seed=1, noise="secure")
    assert pm.spent == 0.0
    res = pm.retrieve(q, steps=2, epsilon=2.0, noise="secure")
    assert res.params["noise"] == "secure" and _on_grid(res)
    spent = pm.spent
    plain = pm.retrieve(q, steps=2, epsilon=2.0, seed=1)  # not a repeat of the secure call
    assert pm.spent > spent and not np.array_equal(plain.outputs, res.outputs)
    again = pm.retrieve(q, steps=2, epsilon=2.0, noise="secure")  # a repeat: free
    assert np.array_equal(again.outputs, res.outputs)
    assert np.array_equal(again.grid, res.grid)
    for suffix in (".npz", ".json"):
        brace.save_result(res, tmp_path / f"r{suffix}")
        back = brace.load_result(tmp_path / f"r{suffix}")
        assert np.array_equal(back.grid, res.grid) and _on_grid(back)


def test_secure_repeat_from_the_ledger_keeps_its_grid(mem, tmp_path):
    m, X = mem
    q = X[:3]
    path = tmp_path / "l.db"
    with brace.PrivateMemory(X, radius=m.radius_, budget=(50.0, 1e-4), ledger=path,
                             create=True) as pm:
        res = pm.retrieve(q, steps=2, epsilon=2.0, noise="secure")
    with brace.PrivateMemory(X, radius=m.radius_, budget=(50.0, 1e-4), ledger=path) as pm:
        spent = pm.spent
        again = pm.retrieve(q, steps=2, epsilon=2.0, noise="secure")  # from the ledger
        assert pm.spent == spent
    assert np.array_equal(again.outputs, res.outputs)
    assert again.grid is not None and np.array_equal(again.grid, res.grid)
    assert _on_grid(again)


def test_cli_retrieve_secure(tmp_path, capsys):
    rng = np.random.default_rng(0)
    bank, queries = tmp_path / "bank.npy", tmp_path / "q.npy"
    np.save(bank, rng.normal(size=(300, 2)))
    np.save(queries, rng.normal(size=(3, 2)) * 0.3)
    base = ["retrieve", "--bank", str(bank), "--queries", str(queries), "--radius", "0.8",
            "--steps", "2", "--epsilon", "4"]
    out = tmp_path / "r.npz"
    assert main([*base, "--out", str(out)]) == 0  # no seed: secure
    res = brace.load_result(out)
    assert res.params["noise"] == "secure" and _on_grid(res)
    assert main([*base, "--seed", "1", "--out", str(out), "--overwrite"]) == 0
    assert brace.load_result(out).params["noise"] == "plain"
    assert main([*base, "--noise", "secure", "--seed", "1", "--out", str(out),
                 "--overwrite"]) == 2
    assert "--seed is refused with --noise secure" in capsys.readouterr().err
    assert main([*base, "--noise", "secure", "--release-mode", "smooth", "--out",
                 str(tmp_path / "s.npz")]) == 0
    assert brace.load_result(tmp_path / "s.npz").params["release"] == "smooth"
    # uq: a secure release (the smooth one at this epsilon), its simulated privacy part
    # re-run with the same secure plan
    assert main(["uq", "--bank", str(bank), "--queries", str(queries), "--radius", "0.8",
                 "--steps", "2", "--epsilon", "256", "--noise", "secure", "--seed", "3",
                 "--privacy", "simulate", "--n-sim", "20"]) == 0


# --- the grid's privacy ---------------------------------------------------------------------

def test_grid_rounding_sensitivity_bound_is_tight():
    """‖round(p/g) − round(p'/g)‖ ≤ ‖p − p'‖/g + √d, approached by points that straddle
    the rounding midpoints in every coordinate."""
    rng = np.random.default_rng(5)
    d, g = 7, 2.0**-10
    p = rng.normal(size=(20000, d)) * 3
    step = rng.normal(size=(20000, d))
    step *= (rng.uniform(0, 0.01, 20000) / np.linalg.norm(step, axis=1))[:, None]
    u, v = np.rint(p / g), np.rint((p + step) / g)
    bound = np.linalg.norm(step, axis=1) / g + math.sqrt(d)
    assert np.all(np.linalg.norm(u - v, axis=1) <= bound)
    mid = (np.arange(d) + 0.5) * g  # just below / above a midpoint in every coordinate
    a, b = np.rint((mid - g * 1e-6) / g), np.rint((mid + g * 1e-6) / g)
    assert np.linalg.norm(a - b) == pytest.approx(math.sqrt(d))


@pytest.mark.parametrize("sens,rho,d", [(1.0, 0.02, 3), (0.37, 3.1, 384), (2.0, 1e-6, 64)])
@pytest.mark.parametrize("data_dependent", [False, True])
def test_sigma2_covers_the_inflated_sensitivity_exactly(sens, rho, d, data_dependent):
    """σ² ≥ (1 + κ)(Δ/g + √d)²/(2ρ) exactly (κ = 2^-40 for a data-dependent scale, 0
    otherwise), and not by more than a relative 2^-29/σ."""
    g = S.grid_unit(np.array([sens / math.sqrt(2 * rho)]), 1.0, d)
    t, mm, f = S.sigma2_params(np.array([sens]), g, rho, d, data_dependent=data_dependent)
    s2 = Fraction(int(t[0])) * (Fraction(int(mm[0])) + Fraction(int(f[0]), 1 << 30))
    dg = Fraction(sens) / Fraction(float(g[0])) + Fraction(math.isqrt(d << 60) + 1, 1 << 30)
    assert dg >= Fraction(sens / g[0]) + Fraction(math.sqrt(d)) - Fraction(1, 1 << 29)
    kappa = S.SMOOTH_INFLATION if data_dependent else 0
    target = (1 + kappa) * dg * dg / (2 * Fraction(rho))
    assert s2 >= target  # the step is ≤ ρ-zCDP (ρ/(1+κ) for Theorem 11)
    sigma = math.sqrt(s2)
    assert s2 / target - 1 <= Fraction(2**-29) / Fraction(sigma) + Fraction(1, 2**52)
    assert sigma >= 2.0**20 or d == 384  # the grid keeps the std ≥ 2^20 units (or √d·g ≤ r/16)
    pre = np.zeros((2, d))
    y, std = S.secure_gaussian(pre, np.array([sens, sens]), rho, np.repeat(g, 2),
                               data_dependent=data_dependent)
    assert std[0] == pytest.approx(sigma * g[0])
    assert np.all(y / g[0] == np.rint(y / g[0]))


def test_secure_range_is_decided_from_public_values():
    """A call whose points could reach 2^61 grid units is refused before the bank is
    read, from the queries and public bounds (never after a step was drawn)."""
    with pytest.raises(ValueError, match="2\\^61 grid units"):
        S.check_grid_range(np.array([1e15]), np.array([2.0**-50]))
    S.check_grid_range(np.array([1e3]), np.array([2.0**-20]))
    with pytest.raises(ValueError, match="positive noise scale"):
        S.grid_unit(np.array([0.0]), 1.0, 2)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 2))
    m = brace.LSRMemory(X, radius=1.0)

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("the bank was read")

    far = np.array([[3e9, 0.0]])  # inside the certificate's range, beyond the grid's
    kw = dict(method="brace", release="smooth", gamma=0.1, epsilon=100.0, delta=1e-5,
              steps=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(brace.LSRMemory, "gate_pass", boom)
        with pytest.raises(ValueError, match="2\\^61 grid units"):
            brace.private_retrieve(m, far, **kw)
    # the same call with a seed (plain noise) is within the certificate's range
    assert brace.private_retrieve(m, far, seed=1, **kw).outputs.shape == (1, 2, 2)


@pytest.mark.parametrize("projection", [True, False])
def test_secure_projection_radius_is_floored_at_zero(projection):
    """A safety radius (or ball) smaller than the grid's g·√d clamps onto the query
    itself, never through it to the other side (a negative radius reflected it)."""
    from types import SimpleNamespace

    from brace.steps import _project_step

    q = np.array([[4.0, -2.0]])
    w = SimpleNamespace(plan=SimpleNamespace(output_projection=projection), q=q)
    y = np.array([[40.0, 7.0]])
    g = np.array([1.0])
    np.testing.assert_array_equal(_project_step(w, y, g, np.array([0.0])), q)
    np.testing.assert_array_equal(_project_step(w, y, g, 1.0), q)  # 1 < g·√2
    far = _project_step(w, y, g, np.array([10.0]))  # inside B̄(q, 10), on the grid
    assert np.linalg.norm(far - q) <= 10.0 and np.all(far == np.rint(far))


def test_discrete_gaussian_renyi_divergence_is_bounded_by_the_statement():
    """D_α(N_Z(μ,σ²) ‖ N_Z(ν,σ²)) ≤ αΔ²/(2σ²) for integer shifts (CKS 2020, Prop. 5),
    summed exactly over the support; and close to it."""
    from scipy.special import logsumexp

    for s2 in (0.3, 2.0, 25.0):
        k = np.arange(-400, 401, dtype=np.float64)
        log_norm = logsumexp(-k * k / (2 * s2))
        logp = -k * k / (2 * s2) - log_norm
        for shift in (1, 2, 5):
            logq = -(k - shift) ** 2 / (2 * s2) - log_norm
            for a in (1.5, 2.0, 8.0, 32.0):
                div = logsumexp(a * logp + (1 - a) * logq) / (a - 1)
                bound = float(D.discrete_gaussian_rdp(a, shift, s2))
                assert div <= bound * (1 + 1e-9)
                if s2 >= 2.0:
                    assert div >= 0.99 * bound
    with pytest.raises(ValueError):
        D.discrete_gaussian_rdp(1.0, 1, 2.0)
    with pytest.raises(ValueError):
        D.discrete_gaussian_zcdp(1, 0.0)


def test_accounting_against_dp_accounting_pld():
    """The (ε, δ) that brace's RDP accounting gives one discrete Gaussian step (its zCDP
    curve, converted) is never below dp-accounting's (tight) PLD of the discrete Gaussian
    with the same integer sensitivity and σ; and the count's two-sided geometric with
    parameter ε_c is ε_c-DP in dp-accounting too."""
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pld

    from brace.accounting import RdpAccountant, SelfComposed
    from brace.accounting.events import _step_event as step_event

    for sens, sigma, steps in ((1, 3.0, 1), (3, 10.0, 2)):
        rho = D.discrete_gaussian_zcdp(sens, sigma * sigma)
        for delta in (1e-5,):
            ours = RdpAccountant().compose(SelfComposed(step_event(rho, 0.0, 1), steps)
                                           ).get_epsilon(delta)
            dist = pld.from_discrete_gaussian_mechanism(sigma, sensitivity=sens)
            tight = dist.self_compose(steps).get_epsilon_for_delta(delta)
            assert tight <= ours
            cont = pld.from_gaussian_mechanism(sigma, sensitivity=sens).self_compose(steps)
            assert tight == pytest.approx(cont.get_epsilon_for_delta(delta), rel=0.05)
    for eps_c in (0.05, 0.7, 3.0):
        lap = pld.from_discrete_laplace_mechanism(eps_c, sensitivity=1)
        assert lap.get_epsilon_for_delta(0.0) == pytest.approx(eps_c, rel=1e-3)


# --- the exact samplers ---------------------------------------------------------------------

def _cells(n: int, pmf, top: int = 10_000) -> int:
    """The largest ``k`` whose cell and upper tail ``P(Z > k)`` each expect at least 10
    of ``n`` draws (both decrease in ``k``)."""
    p = pmf(np.arange(top + 1))
    tail = np.cumsum(p[::-1])[::-1]  # tail[j] = P(j ≤ Z ≤ top)
    k = np.arange(top)
    return int(k[n * np.minimum(p[:-1], tail[1:]) >= 10].max())


def _chi2_pvalue(draws: np.ndarray, pmf, lo: int, hi: int) -> float:
    """Chi-square goodness of fit on the cells lo..hi plus the two tail cells."""
    obs = np.bincount(np.clip(draws, lo - 1, hi + 1) - (lo - 1), minlength=hi - lo + 3)
    p = pmf(np.arange(lo, hi + 1))
    left, right = pmf(np.arange(lo - 5000, lo)).sum(), pmf(np.arange(hi + 1, hi + 5001)).sum()
    expect = np.concatenate([[left], p, [right]])
    expect *= draws.size / expect.sum()
    assert expect.min() >= 5  # the chi-square approximation holds in every cell
    return float(stats.chisquare(obs, expect).pvalue)


def _tail_pvalue(count: int, n: int, prob: float) -> float:
    return float(stats.binomtest(count, n, prob).pvalue)


@pytest.mark.parametrize("t,m,n", [(2, 1, 1_000_000), (5, 3, 500_000)])
def test_discrete_gaussian_matches_its_pmf(t, m, n):
    z = D.sample_discrete_gaussian(np.full(n, t), m)
    s2 = t * m
    pmf = lambda k: D.discrete_gaussian_pmf(k, s2)  # noqa: E731
    lim = _cells(n, pmf)  # cells out to about 3.9σ; beyond, one tail cell each side
    assert lim >= 3.5 * math.sqrt(s2)
    assert _chi2_pvalue(z, pmf, -lim, lim) > ALARM
    for k in (3, 4):  # the tails |Z| ≥ kσ, exactly
        c = math.ceil(k * math.sqrt(s2))
        prob = 2 * pmf(np.arange(c, c + 5000)).sum()
        assert _tail_pvalue(int(np.sum(np.abs(z) >= c)), n, prob) > ALARM


def test_discrete_gaussian_at_the_secure_scale():
    """σ ≈ 2^20 (the secure grid's): quantile cells of the Gaussian (the discrete law's
    cell probabilities equal the continuous ones up to ~e^{-2π²σ²} and 1/σ), tails too."""
    t, m = D.discrete_gaussian_params(2**40 + 12345)
    n = 300_000
    z = D.sample_discrete_gaussian(np.full(n, t), m).astype(np.float64)
    s = math.sqrt(t * m)
    edges = np.concatenate([[-np.inf], stats.norm.ppf(np.linspace(0.01, 0.99, 30)) * s,
                            [-4.5 * s, 4.5 * s], [np.inf]])
    edges = np.unique(np.sort(edges))
    obs = np.histogram(z, edges)[0]
    expect = np.diff(stats.norm.cdf(edges / s)) * n
    assert float(stats.chisquare(obs, expect).pvalue) > ALARM
    assert np.all(z == np.rint(z))


@pytest.mark.parametrize("eps,n", [(0.05, 1_000_000), (0.7, 300_000), (3.0, 300_000)])
def test_two_sided_geometric_matches_its_pmf(eps, n):
    z = D.sample_two_sided_geometric(eps, n)
    pmf = lambda k: D.two_sided_geometric_pmf(k, eps)  # noqa: E731
    lim = _cells(n, pmf, 100_000)
    assert _chi2_pvalue(z, pmf, -lim, lim) > ALARM
    c = lim + 1 + int(2 / eps)  # a deeper tail, exactly
    prob = 2 * pmf(np.arange(c, c + 200_000)).sum()
    assert _tail_pvalue(int(np.sum(np.abs(z) >= c)), n, prob) > ALARM


def test_two_sided_geometric_python_path_and_bad_input():
    """ε with a denominator beyond 2^62 (ε < 2^-10) takes exact Python integers."""
    eps = 2.0**-14 * 1.3
    assert Fraction(eps).denominator > 1 << 62
    z = D.sample_two_sided_geometric(eps, 4000)
    p = math.exp(-eps)
    var = 2 * p / (1 - p) ** 2
    # the variance of 4000 draws: within 6 standard errors (kurtosis 6 for this law)
    assert abs(z.var() / var - 1) < 6 * math.sqrt(5 / 4000)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError):
            D.sample_two_sided_geometric(bad, 3)


def test_fallback_paths_keep_the_law(monkeypatch):
    """The exact Python fallbacks forced on a large share of the decisions (the float
    error bound η widened to 2⁻⁵, so about a third of the trials are finished in Python
    with :mod:`decimal` bounds): the law is unchanged (``test_discrete_sampler.py`` has
    more)."""
    monkeypatch.setattr(_exp, "_ETA", 2.0**-5)
    n = 20_000
    z = D.sample_discrete_gaussian(np.full(n, 3), 2)
    pmf = lambda k: D.discrete_gaussian_pmf(k, 6)  # noqa: E731
    lim = _cells(n, pmf)
    assert _chi2_pvalue(z, pmf, -lim, lim) > ALARM
    g = D.sample_two_sided_geometric(0.75, n)
    pmf = lambda k: D.two_sided_geometric_pmf(k, 0.75)  # noqa: E731
    lim = _cells(n, pmf)
    assert _chi2_pvalue(g, pmf, -lim, lim) > ALARM


def test_discrete_sampler_refusals():
    with pytest.raises(ValueError, match="below 2\\^104"):
        D.sample_discrete_gaussian(np.array([1 << 52]), np.array([1 << 53]))
    with pytest.raises(TypeError):
        D.sample_discrete_gaussian(np.array([2.0]), 1)
    with pytest.raises(ValueError):
        D.discrete_gaussian_params(0)


# --- an attack: the low bits of a released coordinate -----------------------------------------

def _low_bits(y: np.ndarray, k: int = 4) -> np.ndarray:
    """The k lowest mantissa bits of each float (the representability statistic)."""
    mant, _ = np.frexp(np.abs(y))
    return (mant * 2.0**53).astype(np.int64) & ((1 << k) - 1)


def _advantage_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Homogeneity test of the low-bit histograms of two banks' releases."""
    ha = np.bincount(_low_bits(a).ravel(), minlength=16)
    hb = np.bincount(_low_bits(b).ravel(), minlength=16)
    keep = (ha + hb) > 0
    if keep.sum() < 2:
        return 1.0
    return float(stats.chi2_contingency(np.stack([ha[keep], hb[keep]]))[1])


def test_float_distinguisher_at_magnitude_1e6():
    """Two neighbouring banks at coordinates ≈ 1e6 whose gate means at the public query
    differ by 4e-9 (between ulp(1e6) = 2^-33 and 2^-23):

    * positive control — noise with coarse representable values (a float32 sample, the
      textbook Mironov setting): the low mantissa bits of ``a + n`` reveal ``a`` mod the
      noise's granularity, and the statistic separates the banks completely;
    * plain mode (numpy float64): the noise is finer than ulp(1e6), so ``fl(a + n)`` rounds
      a smooth density to ulp(1e6) and the low bits carry no usable information — the
      same statistic finds no difference (the plain sampler is not attackable this way at
      this magnitude);
    * secure mode: both pre-noise points round to the same grid point, so the two banks'
      releases have one law; the statistic finds nothing and every coordinate is a grid
      point.
    """
    rng = np.random.default_rng(8)
    off = 1e6
    X = off + rng.uniform(-1.0, 1.0, (40, 2))
    q = np.full((1, 2), off)
    r = 0.6
    inside = np.flatnonzero(np.linalg.norm(X - q, axis=1) < 0.5 * r)
    Xp = X.copy()
    m_gate = int(np.sum(np.linalg.norm(X - q, axis=1) <= r))
    Xp[inside[0]] += 4e-9 * m_gate  # the gate mean moves by 4e-9 per coordinate
    mD, mDp = brace.LSRMemory(X, radius=r), brace.LSRMemory(Xp, radius=r)
    aD, aDp = mD.gate_pass(q).means(q)[0], mDp.gate_pass(q).means(q)[0]
    assert 0 < abs(aD[0] - aDp[0]) < 1e-8 and np.all(np.abs(aD - off) < 1)
    n = 20_000
    Q = np.repeat(q, n, axis=0)
    kw = dict(method="global", epsilon=4.0, delta=1e-5, steps=1, output_projection=False)

    # positive control: float32 noise of std s (granularity ≈ 2^-23 s ≫ ulp(1e6))
    s = 2.0
    n32 = rng.standard_normal((2, n, 2), dtype=np.float32).astype(np.float64) * s
    ctrl_d, ctrl_p = aD + n32[0], aDp + n32[1]
    assert _advantage_pvalue(ctrl_d, ctrl_p) < ALARM

    # plain mode
    pd = brace.private_retrieve(mD, Q, seed=1, **kw).outputs[:, 0]
    pp = brace.private_retrieve(mDp, Q, seed=2, **kw).outputs[:, 0]
    assert _advantage_pvalue(pd, pp) > ALARM

    # secure mode: the same rounded point, one law
    sd = brace.private_retrieve(mD, Q, noise="secure", **kw)
    sp = brace.private_retrieve(mDp, Q, noise="secure", **kw)
    g = sd.grid[0, 0]
    assert np.all(sd.grid == g) and np.all(sp.grid == g)
    assert np.array_equal(np.rint(aD / g), np.rint(aDp / g))
    assert _on_grid(sd) and _on_grid(sp)
    assert _advantage_pvalue(sd.outputs[:, 0], sp.outputs[:, 0]) > ALARM


# --- the audit ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(method="global", steps=2),
    dict(method="brace", release="count", steps=2, epsilon=8.0),
    dict(method="endpoint", steps=2),
    dict(method="global", steps=1, grid_factor=2**10),
], ids=["global", "count", "endpoint", "coarse-grid"])
def test_secure_llr_change_of_measure_identity(kw):
    """The exact discrete likelihood ratio of a secure release: E_D[e^S] = 1 and
    E_{D'}[e^{-S}] = 1 at a pair that moves the gate mean (and count) at q."""
    from brace.audit import AuditConfig, candidate_pairs, log_likelihood_ratio
    from brace.audit.density import _sample, _setup
    from brace.audit.pairs import _replaced
    from brace.audit.report import report_bank

    X, q = report_bank(24, 1, 0.5, 8)
    cfg = AuditConfig(radius=0.5, noise="secure", **{"epsilon": 2.0, **kw})
    pair = next(p for p in candidate_pairs(X, q, cfg, rng=0) if p.kind == "antipodal")
    Xp = _replaced(X, pair)
    setup = _setup(cfg.validated(), q[None])
    n = 4000
    for B, sign in ((X, 1.0), (Xp, -1.0)):
        Y = _sample(brace.LSRMemory(B, radius=0.5), setup, n, np.random.default_rng(1))
        w = np.exp(sign * log_likelihood_ratio(X, Xp, q, Y, cfg))
        assert abs(w.mean() - 1.0) < 6 * w.std() / math.sqrt(n) + 1e-3
        assert w.std() > 1e-3


def test_audit_secure_passes_and_a_coarser_grid_is_caught(monkeypatch):
    from brace.audit import AuditConfig, audit
    report_mod = importlib.import_module("brace.audit.report")
    from brace.audit.report import SECURE_BROKEN_GRID, ReportConfig, report_bank, report_cases

    X, q = report_bank(24, 1, 0.5, 8)
    base = dict(method="global", noise="secure", epsilon=1.0, steps=1, radius=0.5,
                n_runs=10_000, n_screen=100, max_candidates=8, n_finalists=2, seed=1)
    broken = audit(X, q, AuditConfig(**base, grid_factor=SECURE_BROKEN_GRID))
    assert broken.verdict == "caught" and broken.epsilon_lb > 3.0, str(broken)
    real = audit(X, q, AuditConfig(**base))
    assert real.verdict == "pass" and real.epsilon_lb <= 1.0, str(real)
    monkeypatch.setattr(report_mod, "choose_gamma_for_gates", lambda *a, **k: 0.1)  # fast
    labels = [cfg.label for _, cfg in report_cases(ReportConfig())]
    assert "brace (count release) [secure]" in labels
    assert "global [secure], grid x2^23 (BROKEN on purpose)" in labels
    assert "brace (kappa=0) [secure]" in labels  # the smooth release, correction on
    smooth = audit(X, q, AuditConfig(method="brace", noise="secure", kappa=0.0, epsilon=1.0,
                                     steps=2, radius=0.5, n_runs=4_000, n_screen=100,
                                     max_candidates=8, n_finalists=2, seed=2))
    assert smooth.verdict == "pass" and smooth.epsilon_lb <= 1.0, str(smooth)
    for bad, match in ((dict(noise="secure", method="naive"), "NOT differentially"),
                       (dict(noise="secure", method="global", noise_scale_factor=0.5),
                        "grid_factor"),
                       (dict(grid_factor=4), "noise='secure'"),
                       (dict(noise="secure", method="global", grid_factor=0), ">= 1"),
                       (dict(noise="loud"), "'plain' or 'secure'")):
        with pytest.raises(ValueError, match=match):
            AuditConfig(**bad).validated()
