"""The exact samplers of ``brace.discrete`` (``docs/privacy-accounting.md`` §13).

* the premise of the proofs: the float64 ``e^{−x}`` is within ``2⁻⁴⁴`` (relative) of
  60-digit decimals on a dense sweep of ``[0, 63)`` (the proof gives ``2^{−49.3}`` and uses
  ``η = 2⁻⁴⁰``), the exact decimal bounds bracket ``e^{−x}``, the fast sure decisions
  agree with the exact ones;
* ``Bernoulli(exp(−x))`` against its probability (binomial tests), with every decision
  forced to the exact Python path, and the ``x̃ ≥ 63`` path forced;
* the discrete Gaussian and the two-sided geometric against their pmfs (chi-square and
  exact binomial tail tests, false-alarm rate 1e-6 each), shared and per-element
  parameters, ``m_frac ≠ 0``, with a large share of the trials forced to the exact path;
* inputs refused with clear errors; every bit from ``_words``.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from brace import discrete as D
from brace.discrete import _bits, _exp

ALARM = 1e-6  # false-alarm rate of every statistical test in this file


def _exp60(x: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return (-Decimal(x)).exp()


def _rel_err(x: np.ndarray) -> np.ndarray:
    p = _exp._exp_approx(np.asarray(x, dtype=np.float64))
    with localcontext() as ctx:
        ctx.prec = 60
        return np.array([float(abs(Decimal(pi) / _exp60(xi) - 1))
                         for pi, xi in zip(p, x, strict=True)])


def _pvalue(count: int, n: int, p: float) -> float:
    return float(stats.binomtest(count, n, p).pvalue)


# --- the float64 exponential: the premise of the proof -------------------------------------

def test_exp_approx_error_bound_on_a_dense_sweep():
    rng = np.random.default_rng(0)
    k = np.concatenate([np.arange(0, 512), rng.choice(np.arange(512, _exp._NT), 1500,
                                                      replace=False)])
    b = k / 256.0  # the table's cell boundaries, and one ulp either side
    xs = np.concatenate([
        b, np.nextafter(b, np.inf), np.nextafter(b[1:], 0.0),
        rng.uniform(0.0, 63.0, 4000), rng.uniform(0.0, 2.0**-8, 500),
        [5e-324, 1e-300, 2.0**-60, 1e-12, np.nextafter(63.0, 0.0), np.nextafter(2.0**-8, 0)],
    ])
    assert xs.min() >= 0 and xs.max() < 63
    err = _rel_err(xs)
    assert err.max() <= 2.0**-44, (err.max(), xs[err.argmax()])
    assert err.max() <= 2.0**-49  # what the proof gives (13u < 2^-49.3), with room


@settings(max_examples=300, deadline=None)
@given(st.floats(0.0, 63.0, exclude_max=True))
def test_exp_approx_error_bound_anywhere(x):
    assert _rel_err(np.array([x]))[0] <= 2.0**-44


def test_table_is_within_an_ulp():
    T = _exp._table()
    k = np.arange(0, _exp._NT + 1, 97)
    with localcontext() as ctx:
        ctx.prec = 60
        err = [abs(Decimal(float(T[i])) / (-(Decimal(int(i)) / 256)).exp() - 1) for i in k]
    assert float(max(err)) <= 2.0**-53 * (1 + 2.0**-40)
    assert T[0] == 1.0


@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**9), max_value=200), st.integers(12, 60))
def test_exact_bounds_bracket_the_exponential(x, prec):
    lo, hi = _exp._exp_bounds_exact(x, prec)
    with localcontext() as ctx:
        ctx.prec = prec + 40
        e = (-(Decimal(x.numerator) / Decimal(x.denominator))).exp()
    assert lo <= Fraction(e) * (1 + Fraction(1, 10**(prec + 30)))
    assert hi >= Fraction(e) * (1 - Fraction(1, 10**(prec + 30)))
    assert hi - lo <= 3 * Fraction(1, 10 ** (prec - 1)) * Fraction(e) + Fraction(e) * x * (
        Fraction(2, 10 ** (prec - 1)))


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 80.0), st.integers(0, 2**32 - 1))
def test_sure_decisions_agree_with_the_exact_decision(x, w):
    """Where the float bounds decide ``W < e^{−x}`` for ``W ∈ [w, w + 1)·2⁻³²``, the exact
    decision (any further bits) agrees; where they do not, the exact one decides."""
    lo, hi = _exp._exp_bounds(np.array([x]), 2.0**32)
    exact = _exp._exact_below_exp(_bits._Lazy(w, 32), Fraction(x))
    if w + 1 <= lo[0]:
        assert exact
    if w >= hi[0]:
        assert not exact
    assert lo[0] <= hi[0]


# --- Bernoulli(exp(−x)) ------------------------------------------------------------------------

def _bern(x: float, n: int) -> np.ndarray:
    return _exp._bernoulli_exp_vec(np.full(n, x), lambda i: Fraction(x))


@pytest.mark.parametrize("x", [0.0, 1e-12, 0.5, 1.0, 10.0, 62.0, 63.0, 100.0])
def test_bernoulli_exp(x):
    n = 1_000_000
    b = _bern(x, n)
    p = math.exp(-x)
    if x == 0:
        assert b.all()
    elif p * n < 1e-9 or (1 - p) * n < 1e-6:  # astronomically unlikely either way
        assert b.sum() == (n if p > 0.5 else 0)
    else:
        assert _pvalue(int(b.sum()), n, p) > ALARM


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(5, 2), Fraction(7)])
def test_bernoulli_exp_all_decisions_exact(x, monkeypatch):
    """Every decision forced to the exact path (the float bounds made useless), starting
    from the fast path's 32-bit prefix and from no bits at all."""
    n = 8000
    monkeypatch.setattr(_exp, "_exp_bounds",
                        lambda x, s: (np.zeros(x.size), np.full(x.size, 2 * s)))
    b = _bern(float(x), n) if x.denominator != 3 else _exp._bernoulli_exp_vec(
        np.full(n, float(x)), lambda i: x)
    assert _pvalue(int(b.sum()), n, math.exp(-x)) > ALARM
    c = np.array([_exp._bernoulli_exp_exact(x) for _ in range(2000)])
    assert _pvalue(int(c.sum()), c.size, math.exp(-x)) > ALARM


@pytest.mark.parametrize("x", [2.5, 4.0, 70.0])
def test_bernoulli_exp_beyond_the_float_range(x, monkeypatch):
    """The path for ``x̃ ≥ _XMAX`` (63: ``lo = 0``, ``hi ≥ e^{−62}``, the rest exact),
    forced by lowering ``_XMAX`` to 2."""
    monkeypatch.setattr(_exp, "_XMAX", 2.0)
    n = 20_000
    b = _bern(x, n)
    p = math.exp(-x)
    if p * n < 1e-9:
        assert not b.any()
    else:
        assert _pvalue(int(b.sum()), n, p) > ALARM


def test_exact_geometric_from_any_prefix():
    """``max{v : W < e^{−λv}}`` from prefixes of 0 to 53 bits, for λ = 1/256 and 3/2."""
    rng = np.random.default_rng(1)
    for lam in (Fraction(1, 256), Fraction(3, 2)):
        n = 2000
        v = []
        for _ in range(n):
            bits = int(rng.integers(0, 54))
            num = int(_bits._randbits(bits))
            v.append(_exp._exact_geometric(_bits._Lazy(num, bits), lam))
        v = np.array(v)
        for k in (1, 3) if lam > 1 else (100, 400):
            assert _pvalue(int(np.sum(v >= k)), n, math.exp(-float(lam) * k)) > ALARM


# --- the discrete Gaussian -----------------------------------------------------------------------

def _cells(n: int, pmf, top: int = 10_000) -> int:
    p = pmf(np.arange(top + 1))
    tail = np.cumsum(p[::-1])[::-1]
    k = np.arange(top)
    return int(k[n * np.minimum(p[:-1], tail[1:]) >= 10].max())


def _chi2_pmf(z: np.ndarray, s2: float) -> float:
    pmf = lambda k: D.discrete_gaussian_pmf(k, s2)  # noqa: E731
    lim = _cells(z.size, pmf)
    obs = np.bincount(np.clip(z, -lim - 1, lim + 1) + lim + 1, minlength=2 * lim + 3)
    expect = pmf(np.arange(-lim, lim + 1))
    tail = 1.0 - expect.sum()
    expect = np.concatenate([[tail / 2], expect, [tail / 2]]) * z.size
    assert expect.min() >= 5
    return float(stats.chisquare(obs, expect).pvalue)


def _chi2_quantiles(z: np.ndarray, s2: float) -> float:
    """Quantile cells of the Gaussian: for σ ≳ 2^10 the discrete law's cell probabilities
    equal the continuous ones up to ~1/σ (and e^{−2π²σ²})."""
    s = math.sqrt(s2)
    edges = np.concatenate([[-np.inf], stats.norm.ppf(np.linspace(0.01, 0.99, 40)) * s,
                            [-4.5 * s, 4.5 * s], [np.inf]])
    edges = np.unique(np.sort(edges))
    obs = np.histogram(z.astype(np.float64), edges)[0]
    return float(stats.chisquare(obs, np.diff(stats.norm.cdf(edges / s)) * z.size).pvalue)


def _tails(z: np.ndarray, s2: float) -> None:
    """Exact binomial tests of ``|Z| ≥ 3σ, 4σ``: the pmf summed (σ < 100), or the Gaussian
    tail with a continuity correction (σ ≥ 2^20: equal up to ~1/σ², far below the test's
    resolution)."""
    s = math.sqrt(s2)
    pmf = lambda k: D.discrete_gaussian_pmf(k, s2)  # noqa: E731
    for k in (3, 4):
        c = math.ceil(k * s)
        if s < 100:
            prob = 2 * pmf(np.arange(c, c + 5000)).sum()
        else:
            prob = 2 * stats.norm.sf((c - 0.5) / s)
        assert _pvalue(int(np.sum(np.abs(z) >= c)), z.size, prob) > ALARM


def _sigma2(t: int, m: int, f: int) -> float:
    return float(Fraction(t * ((m << 30) | f), 1 << 30))


@pytest.mark.parametrize("s2", [0.3, 2, 15, 1000.7])
def test_discrete_gaussian_small_sigma(s2):
    t, m, f = D.discrete_gaussian_scale(s2)
    n = 400_000
    z = D.sample_discrete_gaussian(t, np.full(n, m), f)
    assert _chi2_pmf(z, _sigma2(t, m, f)) > ALARM
    if s2 >= 2:
        _tails(z, _sigma2(t, m, f))


@pytest.mark.parametrize("s2", [2.0**40, 2.0**40 * 1.7 + 0.37, 2.0**60 * 1.3, 2.0**100])
def test_discrete_gaussian_large_sigma(s2):
    """σ ≈ 2^20 (one word per trial), 2^30 and 2^50 (``U`` from a second word), with
    ``m_frac ≠ 0``."""
    t, m, f = D.discrete_gaussian_scale(s2)
    n = 300_000
    z = D.sample_discrete_gaussian(np.full(n, t), m, f)
    s2x = _sigma2(t, m, f)
    assert _chi2_quantiles(z, s2x) > ALARM
    _tails(z, s2x)


def test_discrete_gaussian_per_element_parameters():
    """Rows of different σ² in one call (the secure release's layout: t (Q, 1), m (Q, d))."""
    rows = [D.discrete_gaussian_scale(s) for s in (3.3, 2.0**40 + 5, 2.0**34 * 1.9)]
    t = np.array([r[0] for r in rows])[:, None]
    m = np.broadcast_to(np.array([r[1] for r in rows])[:, None], (3, 150_000))
    f = np.array([r[2] for r in rows])[:, None]
    z = D.sample_discrete_gaussian(t, m, f)
    assert z.shape == (3, 150_000)
    s2 = [_sigma2(*r) for r in rows]
    assert _chi2_pmf(z[0], s2[0]) > ALARM
    assert _chi2_quantiles(z[1], s2[1]) > ALARM
    assert _chi2_quantiles(z[2], s2[2]) > ALARM


def test_discrete_gaussian_many_groups_of_different_scales():
    """One σ² per row, 390 distinct ones in three families (σ ≈ 6.3, 2^20, 2^30: proposal
    scales 2^2, 2^20, 2^30, U from the word or from a second word): the per-element path
    (one trial per element and round, parameters gathered per element)."""
    rows, d = 390, 600
    base = np.array([40.0, 2.0**40, 2.0**60])[np.arange(rows) % 3]
    scales = [D.discrete_gaussian_scale(b * (1 + r * 1e-7)) for r, b in enumerate(base)]
    t, m, f = (np.array([s[i] for s in scales])[:, None] for i in range(3))
    z = D.sample_discrete_gaussian(t, np.broadcast_to(m, (rows, d)), f)
    fam = np.arange(rows) % 3
    assert _chi2_pmf(z[fam == 0].ravel(), 40.0) > ALARM  # σ² within 4e-5 of 40
    assert _chi2_quantiles(z[fam == 1].ravel(), 2.0**40) > ALARM
    assert _chi2_quantiles(z[fam == 2].ravel(), 2.0**60) > ALARM


def test_discrete_gaussian_with_the_exact_path_forced(monkeypatch):
    """η widened to 2⁻⁵: about a third of the trials (the geometric part and the
    acceptance) are finished in Python; the law, including its conditioning on the
    drawn prefixes, is unchanged — per element and shared, small and large σ."""
    monkeypatch.setattr(_exp, "_ETA", 2.0**-5)
    n = 20_000
    t, m, f = D.discrete_gaussian_scale(7.7)
    z = D.sample_discrete_gaussian(np.full(n, t), np.array([m, m]).repeat(n // 2), f)
    assert _chi2_pmf(z, _sigma2(t, m, f)) > ALARM
    t, m, f = D.discrete_gaussian_scale(60.0)  # λ = 1/8: V's bands overlap, all exact
    z = D.sample_discrete_gaussian(t, np.full(2000, m), f)
    assert _chi2_pmf(z, _sigma2(t, m, f)) > ALARM


def test_discrete_gaussian_scale_and_params():
    for s2 in (Fraction(1, 7), Fraction(2), 15.2, 2.0**40 + 0.5, Fraction(10**30, 3)):
        t, m, f = D.discrete_gaussian_scale(s2)
        assert t == math.isqrt(math.ceil(Fraction(s2))) + 1
        s2p = Fraction(t * ((m << 30) | f), 1 << 30)
        assert 0 <= s2p - Fraction(s2) < Fraction(t, 1 << 30)
        assert 0 <= f < 1 << 30
        tt, mm = D.discrete_gaussian_params(s2)
        assert tt == t and tt * mm >= Fraction(s2) > tt * (mm - 1)
    for bad in (0, -1.0, 2.0**104):
        with pytest.raises(ValueError):
            D.discrete_gaussian_scale(bad)
        with pytest.raises(ValueError):
            D.discrete_gaussian_params(bad)
    t, m, f = D.discrete_gaussian_scale(2.0**103)
    assert D.sample_discrete_gaussian(t, m, f).shape == ()


@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**6), max_value=Fraction(2**100)))
def test_discrete_gaussian_scale_is_the_smallest_above(s2):
    t, m, f = D.discrete_gaussian_scale(s2)
    M = (m << 30) | f
    assert Fraction(t * M, 1 << 30) >= s2 > Fraction(t * (M - 1), 1 << 30)
    if s2 >= 1:
        sigma = math.sqrt(s2)
        excess = float((Fraction(t * M, 1 << 30) - s2) / s2)
        assert excess <= 2.0**-30 * (1 / sigma + 1 / sigma**2 + 1 / (2 * sigma**3)) * 1.0001


def test_bad_inputs_are_refused():
    S = D.sample_discrete_gaussian
    cases = [
        ((np.array([2.0]), 1), TypeError, "integer"),
        ((np.array([True]), 1), TypeError, "integer"),
        ((0, 1), ValueError, "t must be >= 1"),
        ((2, -1), ValueError, "m must be >= 0"),
        ((2, 1, -1), ValueError, "m_frac"),
        ((2, 1, 1 << 30), ValueError, "m_frac"),
        ((2, 0, 0), ValueError, "> 0"),
        ((1 << 53, 1), ValueError, "t must be below 2\\^53"),
        ((1, 1 << 62), ValueError, "m must be below 2\\^62"),
        ((1 << 52, 1 << 52), ValueError, "below 2\\^104"),
        ((2, 2**70), ValueError, "beyond"),
        ((np.array([2], np.uint64), np.array([2**63], np.uint64)), ValueError, "beyond"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            S(*args)
    assert S(3, 0, 1).shape == () and S(np.zeros((0, 3), np.int64) + 2, 1).shape == (0, 3)
    assert S(1 << 52, (1 << 52) - 1).shape == ()  # just below the limit


# --- the two-sided geometric ---------------------------------------------------------------------

def _geo_quantiles(z: np.ndarray, eps: Fraction) -> float:
    """Cells of |Z| from the exact tail ``P(|Z| ≥ k) = 2e^{−εk}/(1 + e^{−ε})`` (k ≥ 1), and
    the sign."""
    e = float(eps)
    q = math.exp(-e)
    ks = np.unique(np.ceil(-np.log(np.linspace(0.97, 0.01, 30)) / e).astype(np.int64))
    ks = ks[ks >= 1]
    tail = 2 * np.exp(-e * ks) / (1 + q)
    probs = -np.diff(np.concatenate([[1.0], tail, [0.0]]))
    a = np.abs(z)
    obs = np.bincount(np.searchsorted(ks, a, side="right"), minlength=probs.size)
    p1 = float(stats.chisquare(obs, probs * z.size).pvalue)
    p2 = _pvalue(int(np.sum(z > 0)), int(np.sum(z != 0)), 0.5)
    return min(p1, p2)


@pytest.mark.parametrize("eps", [2.0**-12 * 1.3, 0.05, 0.7, 3.0, 50.0])
def test_two_sided_geometric(eps):
    n = 300_000
    z = D.sample_two_sided_geometric(eps, n)
    if eps > 10:
        assert not z.any()  # P(Z ≠ 0) < 4e-22
        return
    if eps > 0.5:
        pmf = lambda k: D.two_sided_geometric_pmf(k, eps)  # noqa: E731
        lim = _cells(n, pmf, 1000)
        obs = np.bincount(np.clip(z, -lim - 1, lim + 1) + lim + 1, minlength=2 * lim + 3)
        expect = pmf(np.arange(-lim, lim + 1))
        tail = 1 - expect.sum()
        expect = np.concatenate([[tail / 2], expect, [tail / 2]]) * n
        assert float(stats.chisquare(obs, expect).pvalue) > ALARM
    assert _geo_quantiles(z, Fraction(eps)) > ALARM


def test_two_sided_geometric_exact_paths(monkeypatch):
    """ε outside the vectorised range (CKS Algorithm 2 in Python integers), and the
    vectorised path with η widened so that many decisions are exact."""
    eps = 2.0**-50 * 1.3
    z = D.sample_two_sided_geometric(eps, 150)
    assert _geo_quantiles(z, Fraction(eps)) > ALARM
    assert not D.sample_two_sided_geometric(2.0**60, 50).any()
    monkeypatch.setattr(_exp, "_ETA", 2.0**-4)
    z = D.sample_two_sided_geometric(Fraction(1, 3), 10_000)
    assert _geo_quantiles(z, Fraction(1, 3)) > ALARM


# --- randomness -------------------------------------------------------------------------------

def test_every_bit_comes_from_words(monkeypatch):
    """With ``_words`` replaced by a deterministic stream, both samplers — the exact
    fallbacks included (η widened) — repeat exactly: no other source of randomness."""
    counter = {"n": 0, "single": 0}

    def fake_words(n):
        counter["n"] += 1
        counter["single"] += n == 1  # the exact path extends a uniform by one word
        return np.random.PCG64(counter["n"]).random_raw(n).astype(np.uint64)

    monkeypatch.setattr(_bits, "_words", fake_words)
    monkeypatch.setattr(_exp, "_ETA", 2.0**-5)
    runs = []
    for _ in range(2):
        counter["n"] = 0
        runs.append((D.sample_discrete_gaussian(np.array([3, 4, 2**20])[:, None],
                                                np.array([[2], [7], [2**20]]) * np.ones(
                                                    (1, 500), np.int64)),
                     D.sample_two_sided_geometric(0.3, 500),
                     D.sample_two_sided_geometric(2.0**-50, 5)))
    for a, b in zip(*runs, strict=True):
        assert np.array_equal(a, b)
    assert counter["single"] > 10  # the exact path drew its own words, from _words
