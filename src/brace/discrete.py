"""Exact sampling on the integers from the operating system's randomness, and its privacy.

Secure mode (``noise="secure"``, ``docs/privacy-accounting.md`` §13) draws its noise here:

* :func:`sample_discrete_gaussian` — the discrete Gaussian ``N_Z(0, σ²)``,
  ``P(z) ∝ exp(−z²/(2σ²))`` on the integers, for a rational ``σ² = t·(m + m_frac·2⁻³⁰)``
  (Canonne, Kamath & Steinke 2020, "CKS", Algorithm 3);
* :func:`sample_two_sided_geometric` — ``P(z) ∝ exp(−ε|z|)`` on the integers for the
  rational ``ε`` a float is.

**Exactness.** Every random decision is an event ``{W < e^{−x}}`` for a uniform real
``W ∈ [0, 1)`` of which only a prefix of bits has been drawn, and an exact rational
``x ≥ 0``. The fast path (numpy, vectorised) evaluates ``e^{−x}`` in float64 with a
*proven* relative error bound ``η = 2⁻⁴⁰`` (:func:`_exp_approx`: a correctly rounded
table of ``e^{−k/256}`` times a degree-5 Taylor polynomial; every rounding counted in
its docstring) and decides only where the prefix's whole interval lies below ``lo`` or
above ``hi`` (``lo ≤ e^{−x} ≤ hi``): there the event is certain. Undecided elements get
more bits of the *same* ``W`` (vectorised: the discrete Gaussian's ≈ 0.3 % get 32 more),
and what is still undecided — about ``2⁻³⁸`` of the trials — is decided in Python against
rigorous :mod:`decimal` bounds of ``e^{−x}`` at increasing precision
(:func:`_exact_below_exp`). The output is therefore a deterministic function of exact
uniform variables, the function CKS's proofs are about; floating point only decides
which path computes it.

**Randomness.** Every random bit comes from :func:`os.urandom` through :func:`_words`
(the kernel's CSPRNG): no seed, no generator state; numpy's generators are never used.

The privacy of the discrete Gaussian (:func:`discrete_gaussian_rdp`): for integer vectors
``μ, ν`` with ``‖μ − ν‖₂ ≤ Δ``, ``D_α(μ + N_Z(0, σ²)^d ‖ ν + N_Z(0, σ²)^d) ≤ αΔ²/(2σ²)``
for every ``α > 1`` (CKS 2020, Prop. 5 and Thm 15): it is ``Δ²/(2σ²)``-zCDP, the same as
the continuous Gaussian of the same σ.
"""

from __future__ import annotations

import math
import os
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_CEILING,
    ROUND_FLOOR,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
)
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "MAX_SIGMA2",
    "discrete_gaussian_params",
    "discrete_gaussian_pmf",
    "discrete_gaussian_rdp",
    "discrete_gaussian_scale",
    "discrete_gaussian_zcdp",
    "sample_discrete_gaussian",
    "sample_two_sided_geometric",
    "two_sided_geometric_pmf",
]

MAX_SIGMA2 = 1 << 104  # σ² must stay below this (σ < 2^52): the fast path's proven range
FRAC_BITS = 30  # σ² = t·(m + m_frac·2^-30)
_MAX_T = 1 << 53  # t below this: exact in float64
_MAX_M = 1 << 62  # m below this
_ETA = 2.0**-40  # proven relative error bound of the float64 e^{-x} (see _exp_approx)
_XMAX = 63.0  # the float path evaluates e^{-x} for 0 ≤ x̃ < 63
_NT = 63 * 256  # table size: e^{-k/256}, 0 ≤ k < 16128 (and k = 16128 as a sentinel)
_DBITS = 16  # bits of W drawn for a Gaussian trial's decision on the fast path
_VBITS = 32  # bits of W drawn for the geometric part V
_CHUNK = 1 << 14  # elements per vectorised block (keeps the working set in cache)
_EPS_MIN = Fraction(1, 1 << 45)  # the geometric's vectorised path: ε ≥ 2^-45 ...
_EPS_MAX = 1 << 50  # ... and ε ≤ 2^50


# --- random bits ------------------------------------------------------------------------

def _words(n: int) -> np.ndarray:
    """``n`` uniform 64-bit words from the operating system's CSPRNG: the only source of
    randomness in this module."""
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def _randbits(k: int) -> int:
    """A uniform integer in ``[0, 2^k)`` (Python int)."""
    if k <= 0:
        return 0
    w = _words((k + 63) // 64)
    r = 0
    for x in w.tolist():
        r = (r << 64) | x
    return r >> (64 * w.size - k)


def _randbelow(n: int) -> int:
    """A uniform integer in ``[0, n)``, ``n ≥ 1``, by rejection (acceptance > 1/2)."""
    k = (n - 1).bit_length()
    while True:
        r = _randbits(k)
        if r < n:
            return r


# --- the float64 exponential and its proven error -----------------------------------------

_TABLE: np.ndarray | None = None
_K_TAB = 200  # fixed-point bits of the table's exact computation


def _table() -> np.ndarray:
    """``T[k] ≈ e^{−k/256}`` for ``0 ≤ k ≤ 16128`` with ``|T[k] − e^{−k/256}| ≤
    (u + 2⁻⁹⁴)·e^{−k/256}`` (``u = 2⁻⁵³``), computed once.

    ``E = round(e^{−1/256}·2^200)`` from :mod:`decimal` at 100 digits (``exp`` is correctly
    rounded; ``|E − e^{−1/256}2^200| ≤ 1``); ``D_0 = 2^200``, ``D_k = ⌊D_{k−1}E/2^200⌋``.
    With ``d_k = D_k/2^200``: ``|d_k − e^{−k/256}| ≤ |d_{k−1} − e^{−(k−1)/256}|·e + 2·2⁻²⁰⁰``
    (``e = E/2^200 < 1``), so ``|d_k − e^{−k/256}| ≤ 2k·2⁻²⁰⁰ ≤ 2⁻¹⁸⁵ ≤ 2⁻⁹⁴·e^{−k/256}``
    (``e^{−63} > 2⁻⁹¹``); ``T[k] = D_k / 2^200`` is Python's correctly rounded integer
    division, within ``u·d_k`` of ``d_k``.
    """
    global _TABLE
    if _TABLE is None:
        ctx = Context(prec=100, rounding=ROUND_HALF_EVEN, Emin=MIN_EMIN, Emax=MAX_EMAX)
        step = ctx.exp(ctx.divide(Decimal(-1), Decimal(256)))
        E = int(ctx.multiply(step, Decimal(1 << _K_TAB)).to_integral_value(ROUND_HALF_EVEN))
        one = 1 << _K_TAB
        D = one
        vals = []
        for _ in range(_NT + 1):
            vals.append(D / one)
            D = (D * E) >> _K_TAB
        _TABLE = np.array(vals, dtype=np.float64)
    return _TABLE


# Taylor coefficients of e^{−g/256} in g ∈ [0, 1): a_k = (−1)^k / (256^k k!), each a
# correctly rounded float (a_0, a_1, a_2 exact; a_3..a_5 within a relative u).
_A5 = -1.0 / (120.0 * 2.0**40)
_A4 = 1.0 / (24.0 * 2.0**32)
_A3 = -1.0 / (6.0 * 2.0**24)
_A2 = 2.0**-17
_A1 = -(2.0**-8)


def _exp_approx(x: np.ndarray) -> np.ndarray:
    """``p̃ ≈ e^{−x}`` for floats ``0 ≤ x < 63``, with ``|p̃ − e^{−x}| ≤ 13u·e^{−x} <
    2^{−49.3}·e^{−x}`` (``u = 2⁻⁵³``; the tests check ``2⁻⁴⁴`` against 60-digit decimals).

    ``y = 256x`` (exact: a power of two), ``J = ⌊y⌋`` (exact), ``g = y − J ∈ [0, 1)``
    (exact: ``g = y`` when ``J = 0``, Sterbenz's lemma when ``J ≥ 1``, as ``J ≤ y < J + 1
    ≤ 2J``), ``f = g/256 ∈ [0, 2⁻⁸)``; ``e^{−x} = e^{−J/256}·e^{−f}``.
    ``p̃ = fl(T[J]·h)`` with ``h`` Horner's evaluation of ``Σ_{k≤5} a_k g^k``:

    * table: relative error ``≤ u + 2⁻⁹⁴`` (:func:`_table`);
    * truncation: ``|e^{−f} − Σ_{k≤5}(−f)^k/k!| ≤ f⁶/720 < 2^{−57.4}·e^{−f}``;
    * coefficients: ``Σ_{k≥3} |â_k − a_k| g^k ≤ u·f³/6·1.01 < 2⁻⁷⁹``;
    * Horner, 10 correctly rounded operations: ``|ĥ − P(g)| ≤ γ₁₀·Σ|a_k|g^k ≤
      10.001u·e^{f} ≤ 10.08u·e^{−f}`` (Higham, Thm 5.1; ``e^{2f} ≤ e^{1/128}``);
    * the product: one more rounding, ``u``.

    In all ``(1 + u + 2⁻⁹⁴)(1 + 10.08u + 2^{−57.4} + 2⁻⁷⁹)(1 + u) − 1 ≤ 12.1u + 2^{−57.4}
    ≤ 13u``. Fused multiply–add would only remove roundings; numpy uses none here.
    """
    T = _table()
    y = x * 256.0
    jf = np.floor(y)
    g = y - jf
    h = g * _A5
    h += _A4
    h *= g
    h += _A3
    h *= g
    h += _A2
    h *= g
    h += _A1
    h *= g
    h += 1.0
    h *= T[jf.astype(np.intp)]
    return h


def _exp_bounds(x: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Floats ``lo ≤ scale·e^{−x} ≤ hi`` for each element, given ``x̃ ≥ 0`` with
    ``|x̃ − x| ≤ C·u·(x + 1)``, ``C ≤ 16`` (each caller proves its ``C``; ``scale`` a power
    of two).

    **Lemma (η).** If ``x̃ < 63`` then ``x < 63.0001`` and ``|x̃ − x| ≤ 16·64.0001u < 2⁻⁴²·⁹⁹``,
    so ``e^{−x̃} = e^{−x}(1 + θ)``, ``|θ| ≤ 2^{−42.99}``; with :func:`_exp_approx`,
    ``|p̃ − e^{−x}| ≤ ((1 + 2^{−49.3})(1 + 2^{−42.99}) − 1)·e^{−x} < 2^{−42.9}·e^{−x} ≤
    η·e^{−x}``, ``η = 2⁻⁴⁰`` (a margin of 7). Then ``lo = fl(p̃·(1 − 2η)) ≤ p̃(1 − 2η)(1 + u)
    ≤ p̃/(1 + η) ≤ e^{−x}`` and ``hi = fl(p̃·(1 + 2η)) ≥ p̃(1 + 2η)(1 − u) ≥ p̃/(1 − η) ≥
    e^{−x}`` (``1 ± 2η`` are exact floats; the scaling by a power of two is exact).
    If ``x̃ ≥ 63`` then ``x ≥ (63 − Cu)/(1 + Cu) > 62``: ``lo = 0``, ``hi = fl(T[62·256](1 +
    2η)) ≥ e^{−62} ≥ e^{−x}`` (:func:`_hi_top`; the undecided elements are then those with
    ``W`` below about ``e^{−62}``). A larger ``η`` (a test forcing the exact path) keeps every
    bound valid.
    """
    eta = _ETA
    fast = x < _XMAX
    allfast = bool(fast.all())  # (_XMAX: 63; a test lowers it to force the x̃ ≥ _XMAX path)
    xs = x if allfast else np.where(fast, x, 0.0)
    p = _exp_approx(xs)
    lo = p * ((1.0 - 2.0 * eta) * scale)
    hi = p
    hi *= (1.0 + 2.0 * eta) * scale
    if not allfast:
        lo[~fast] = 0.0
        hi[~fast] = _hi_top(scale, _XMAX)
    return lo, hi


def _hi_top(scale: float, xmax: float = _XMAX) -> float:
    """An upper bound of ``scale·e^{−(xmax − 1)}``, so of every ``scale·e^{−x}`` with
    ``x ≥ xmax − 1`` (``xmax`` an integer in ``[1, 63]``)."""
    return float(_table()[(int(xmax) - 1) * 256] * (1.0 + 2.0 * _ETA)) * scale


_TABS: dict = {}


def _tables(eta: float) -> dict:
    """Bound tables for the fast paths (computed once per ``η``), each entry from
    :func:`_exp_bounds`'s formulas at an exact table point ``x = k/256`` (so ``p̃ = T[k]``):

    * ``lov[k] ≤ 2^32·e^{−k/256} ≤ hiv1[k − 1]`` for the inversion of ``V``
      (``lov[0] = 2^32`` exactly; ``lov[16128] = 0`` and ``hiv1[16128] = 0``: sentinels
      that fail the verification);
    * ``lod1[J] ≤ 2^16·e^{−x} ≤ hid[J]`` for every ``x`` within ``2^{−42.99}`` of
      ``[J/256, (J + 1)/256]`` (``J ≤ 16127``): ``lod1[J] = fl(T[J+1](1 − 2η))·2^16 ≤
      2^16 e^{−(J+1)/256}(1 + u + 2⁻⁹⁴)(1 − 2η)(1 + u) ≤ 2^16 e^{−(J+1)/256 − 2^{−42.99}}``,
      and ``hid[J]`` likewise; ``J = 16128`` stands for every ``x̃ ≥ 63`` (``x > 62``):
      ``lod1 = 0``, ``hid ≥ 2^16 e^{−62}``.
    """
    if eta not in _TABS:
        T = _table()
        lo = T * (1.0 - 2.0 * eta)
        hi = T * (1.0 + 2.0 * eta)
        lov = lo * 2.0**32
        lov[0] = 2.0**32
        lov[_NT] = 0.0
        hiv1 = np.append(hi[1:] * 2.0**32, 0.0)
        lod1 = np.append(lo[1:] * 2.0**_DBITS, 0.0)
        hid = hi * 2.0**_DBITS
        hid[_NT] = _hi_top(2.0**_DBITS, 63)
        _TABS.clear()
        # w + 1 ≤ lo ⟺ w < ⌊lo⌋ for integers w: the floors spare an addition
        _TABS[eta] = {"lov": lov, "hiv1": hiv1, "lod1": lod1, "hid": hid,
                      "flov": np.floor(lov), "flod1": np.floor(lod1)}
    return _TABS[eta]


# --- exact decisions (Python; the rare undecided elements) --------------------------------

class _Lazy:
    """A uniform real ``W ∈ [0, 1)`` of which the first ``bits`` bits ``num`` are drawn:
    ``W ∈ [num·2^{−bits}, (num + 1)·2^{−bits})``; :meth:`extend` draws 64 more bits (all
    from :func:`_words`)."""

    __slots__ = ("bits", "num")

    def __init__(self, num: int = 0, bits: int = 0):
        self.num = int(num)
        self.bits = int(bits)

    def extend(self) -> None:
        self.num = (self.num << 64) | int(_words(1)[0])
        self.bits += 64


_CTX: dict = {}


def _contexts(prec: int) -> tuple[Context, Context, Context]:
    if prec not in _CTX:
        kw = dict(prec=prec, Emin=MIN_EMIN, Emax=MAX_EMAX)
        _CTX[prec] = (Context(rounding=ROUND_HALF_EVEN, **kw),
                      Context(rounding=ROUND_FLOOR, **kw),
                      Context(rounding=ROUND_CEILING, **kw))
    return _CTX[prec]


def _exp_bounds_exact(x: Fraction, prec: int) -> tuple[Fraction, Fraction]:
    """Rationals ``L ≤ e^{−x} ≤ H`` for a rational ``0 < x``, from :mod:`decimal` at
    ``prec`` digits: ``a ≤ −x ≤ b`` by dividing ``−num`` (exact) by ``den`` rounded down
    and up (every operation through an explicit context: Decimal's unary minus would
    round to the thread's precision); ``exp`` is correctly rounded (Python's
    documentation), so a result ``E`` is within half an ulp, ``≤ ½·10^{1−prec}·|E|``, of the
    exact value; we use a whole ``tol = 10^{1−prec}``: ``e^{−x} ≥ e^a ≥ E₁(1 − tol)``,
    ``e^{−x} ≤ e^b ≤ E₂(1 + tol)``."""
    ctx, down, up = _contexts(prec)
    num, den = Decimal(-x.numerator), Decimal(x.denominator)
    e1 = ctx.exp(down.divide(num, den))
    e2 = ctx.exp(up.divide(num, den))
    tol = Fraction(1, 10 ** (prec - 1))
    return Fraction(e1) * (1 - tol), Fraction(e2) * (1 + tol)


def _exact_below_exp(w: _Lazy, x: Fraction) -> bool:
    """Decide ``W < e^{−x}`` exactly (``x ≥ 0`` rational), drawing more bits of ``W`` as
    needed. With ``W ∈ [A, B)``, ``A = num·2^{−bits}``, ``B = A + 2^{−bits}``: ``B ≤ L``
    proves ``W < e^{−x}``; ``A ≥ H`` proves ``W ≥ e^{−x}``; and when ``x ≥ bits ≥ 1`` and
    ``num > 0``, ``A ≥ 2^{−bits} > e^{−bits} ≥ e^{−x}``. Otherwise 64 more bits; the
    bounds tighten with the precision, so this ends with probability 1 (``W = e^{−x}``
    has probability 0) — in practice at the first or second look."""
    if x <= 0:
        return True
    while True:
        num, bits = w.num, w.bits
        if bits and x >= bits:
            if num > 0:
                return False
        elif bits:
            prec = 20 + (bits * 31) // 100 + len(str(x.numerator // x.denominator))
            lo, hi = _exp_bounds_exact(x, prec)
            scale = 1 << bits
            if (num + 1) <= lo * scale:
                return True
            if num >= hi * scale:
                return False
        w.extend()


def _exact_geometric(w: _Lazy, lam: Fraction) -> int:
    """``max{v ≥ 0 : W < e^{−λv}}`` exactly (``λ > 0`` rational). Invariant: ``W < e^{−λ·lo}``
    (true at ``lo = 0``) and ``W ≥ e^{−λ·hi}``; from a float guess, gallop up to find
    ``hi``, then bisect to ``hi = lo + 1``. Every comparison is :func:`_exact_below_exp` on
    the same ``W``, so the answer is exact; ``O(log V)`` comparisons."""
    mid = (2 * w.num + 1) / (1 << (w.bits + 1))  # correctly rounded; may underflow to 0
    guess = int(min(-math.log(mid) / float(lam), 1e6)) if mid > 0 else 0
    lo, hi = 0, None
    if guess > 0:
        if _exact_below_exp(w, lam * guess):
            lo = guess
        else:
            hi = guess
    if hi is None:
        step = 1
        while _exact_below_exp(w, lam * (lo + step)):
            lo += step
            step *= 2
        hi = lo + step
    while hi - lo > 1:
        m = (lo + hi) // 2
        if _exact_below_exp(w, lam * m):
            lo = m
        else:
            hi = m
    return lo


def _bernoulli_exp_exact(x: Fraction) -> bool:
    """``Bernoulli(exp(−x))`` for a rational ``x ≥ 0``, exactly (fresh bits)."""
    return _exact_below_exp(_Lazy(), Fraction(x))


# --- the vectorised Bernoulli(exp(−x)) -------------------------------------------------------

def _bernoulli_exp_vec(xt: np.ndarray, exact) -> np.ndarray:
    """``Bernoulli(exp(−x_i))`` for each element: ``xt`` a float approximation with
    ``|x̃ − x| ≤ C·u·(x + 1)``, ``C ≤ 16``; ``exact(i)`` the exact rational ``x_i``, asked
    only for undecided elements. ``W = (w + W')·2⁻³²`` with ``w`` a 32-bit half of a word:
    accept surely when ``(w + 1)·2⁻³² ≤ lo``, reject surely when ``w·2⁻³² ≥ hi``; else
    (probability ``≤ 2⁻³² + 4η``) :func:`_exact_below_exp` continues with the same ``W``."""
    xt = np.asarray(xt, dtype=np.float64).ravel()
    n = xt.size
    w = _words((n + 1) // 2).view(np.uint32)[:n].astype(np.float64)
    lo, hi = _exp_bounds(xt, 2.0**32)
    acc = w + 1.0 <= lo
    und = ~acc & (w < hi)
    for i in np.flatnonzero(und).tolist():
        acc[i] = _exact_below_exp(_Lazy(int(w[i]), 32), exact(i))
    return acc


# --- the geometric part, by inversion ---------------------------------------------------------

def _geometric_table(wv: np.ndarray, inv_lam: Any, sh: Any, w53: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``V = max{v : W < e^{−v·2^sh/256}}`` for ``W = (wv + W')·2⁻³²`` (``wv`` 32-bit
    integers as floats): a float estimate ``v̂ = ⌊−ln(W_mid)·inv_lam⌋`` (``inv_lam =
    256/2^sh``; its accuracy does not matter), verified exactly against the table bounds:
    ``(wv + 1)·2⁻³² ≤ lo(v̂)`` proves ``W < e^{−λv̂}``, ``wv·2⁻³² ≥ hi(v̂ + 1)`` proves
    ``W ≥ e^{−λ(v̂+1)}``. Returns ``(v̂, verified)``; unverified elements (a boundary of
    the 2⁻³² grid cell within the ``4η`` bands, probability ``≈ 10⁻⁶``, or ``v̂·2^sh ≥
    16128``) go to :func:`_exact_geometric`. With ``w53`` (a 53-bit prefix ``W ∈
    [w53, w53 + 1)·2⁻⁵³``; ``wv`` is then only used for the estimate) the same verification
    runs at ``2⁻⁵³`` (the bounds scaled by ``2^21``, exactly)."""
    tab = _tables(_ETA)
    if w53 is not None:
        if np.ndim(sh) == 0 and sh == 0:
            v = np.minimum(np.floor(-np.log((w53 + 0.5) * 2.0**-53) * inv_lam), _NT
                           ).astype(np.int64)
            k0, k1 = v, v + 1
        else:
            v = np.minimum(np.floor(-np.log((w53 + 0.5) * 2.0**-53) * inv_lam), _NT >> sh
                           ).astype(np.int64)
            k0 = v << sh
            k1 = np.minimum(k0 + (np.int64(1) << sh), _NT)
        ok = w53 + 1.0 <= tab["lov"][k0] * 2.0**21
        ok &= w53 >= tab["hiv1"][k1 - 1] * 2.0**21
        return v, ok
    lw = wv + 0.5
    lw *= 2.0**-32
    np.log(lw, out=lw)
    lw *= -inv_lam  # ≥ 0, about (a −0 or tiny negative truncates to 0)
    np.minimum(lw, _NT >> sh, out=lw)
    v = lw.astype(np.int64)  # truncation = floor
    if np.ndim(sh) == 0 and sh == 0:
        ok = wv < tab["flov"][v]
        ok &= wv >= tab["hiv1"][v]
        return v, ok
    k0 = v << sh
    k1 = np.minimum(k0 + (np.int64(1) << sh), _NT)
    ok = wv < tab["flov"][k0]
    ok &= wv >= tab["hiv1"][k1 - 1]
    return v, ok


# --- the discrete Gaussian ---------------------------------------------------------------------

def _int_param(a: np.ndarray, name: str) -> np.ndarray:
    if a.dtype.kind == "O" and all(isinstance(v, int) for v in a.ravel().tolist()):
        raise ValueError(f"{name} is beyond the sampler's range (sigma^2 < 2^104).")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array; got dtype {a.dtype}.")
    if a.dtype.kind == "u" and a.size and int(a.max()) >= 1 << 63:
        raise ValueError(f"{name} is beyond the sampler's range (sigma^2 < 2^104).")
    return a.astype(np.int64, copy=False)


class _GaussParams:
    """The float parameters of the fast path, per element (arrays) or shared (size 1):
    ``σ̃² = fl(fl(t)·fl(fl(m) + m_frac·2⁻³⁰))`` (``= σ²(1 + θ)``, ``|θ| ≤ 3.0001u``: ``t``
    and ``m_frac·2⁻³⁰`` are exact, ``fl(m)`` is within a relative ``u``, then two
    roundings), the proposal scale ``τ = 2^j`` — of the two powers of two around
    ``σ̃ = fl(√σ̃²)``, the one with the better acceptance (``∝ (σ/τ)e^{−σ²/(2τ²)}``), or
    ``τ = 1`` when ``σ̃ < 1`` — so that ``σ̃/τ ≤ 1.3595`` and ``σ/τ < 1.36``; ``μ̃ = σ̃²/τ =
    μ(1 + θ)`` and ``S = 2σ̃² = 2σ²(1 + θ)`` (exact scalings)."""

    def __init__(self, t: np.ndarray, m: np.ndarray, f: np.ndarray):
        s2 = t.astype(np.float64) * (m.astype(np.float64) + f.astype(np.float64) * 2.0**-30)
        sig = np.sqrt(s2)
        e = np.frexp(sig)[1].astype(np.int64) - 1  # τ0 = 2^e ≤ σ̃ < 2^(e+1)
        # acceptance ∝ (σ/τ)·exp(−σ²/(2τ²)): τ0 is better iff σ̃/τ0 ≤ sqrt((8/3) ln 2)
        up = np.ldexp(sig, -e) > math.sqrt(8.0 / 3.0 * math.log(2.0))
        j = np.maximum(e + up, 0)
        self.j = j
        self.scale_u = np.ldexp(1.0, -j)  # 2^-j
        self.mu = np.ldexp(s2, -j)  # μ̃ = σ̃²/τ, exact scaling
        self.S = 2.0 * s2
        self.nU = np.maximum(j - 8, 0)  # bits of U; B = 2^nU
        self.sh = np.maximum(8 - j, 0)  # table step 2^sh; λ = B/τ = 2^(sh-8)
        self.inv_lam = np.ldexp(1.0, 8 - self.sh)
        self._uniform = bool(j.min() == j.max())

    _SCALE_KEYS = ("j", "scale_u", "nU", "sh", "inv_lam")  # functions of j alone

    def row(self, g: int) -> dict:
        """The parameters of group ``g`` (scalars)."""
        return {k: v[g] for k, v in self.__dict__.items() if k[0] != "_"}

    def take(self, g: np.ndarray) -> dict:
        """Per-element parameters for the group ids ``g``; those of ``j`` stay scalars
        when every group has the same ``j`` (as in a secure release: σ ∈ [2^20, 2^21))."""
        return {k: v[0] if self._uniform and k in self._SCALE_KEYS else v[g]
                for k, v in self.__dict__.items() if k[0] != "_"}


def _gauss_trials(n: int, P: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``n`` independent trials of the Gaussian sampler (fast path). A trial uses one
    64-bit word, read as the fields ``w_v`` (its bytes 0–3), ``w_d`` (bytes 4–5), and
    bytes 6–7: the sign (bit 0) and ``u15`` (bits 1–15); a second word gives ``U`` when
    ``n_U > 15`` (``τ > 2^23``):

    * ``U`` uniform on ``[0, B)``, ``B = 2^{n_U}`` (raw bits);
    * ``V = max{v : W_v < e^{−λv}}``, ``λ = B/τ``: ``P(V = v) ∝ e^{−vB/τ}``
      (:func:`_geometric_table`);
    * ``X = U + B·V`` (so ``P(X = x) ∝ e^{−x/τ}`` once ``U`` is kept with probability
      ``e^{−U/τ}``), a sign, ``−0`` rejected: CKS Algorithm 2;
    * accepted iff ``W_d < exp(−x)``, ``x = U/τ + (X − μ)²/(2σ²)``, ``μ = σ²/τ``: the
      discrete Laplace's ``U``-acceptance and CKS Algorithm 3's acceptance in one event.

    The decision: stage 1 brackets ``e^{−x}`` by the table at the ends of ``x̃``'s cell
    (:func:`_tables`, two look-ups); stage 2 (the ≈ 0.3 % left) draws 32 more bits of
    ``W_d`` and uses :func:`_exp_bounds`. Returns ``(success, Y, undecided, raw)``;
    undecided trials (``V`` unverified, ≈ 10⁻⁶, or ``W_d`` within ``4η`` of ``e^{−x}``)
    are finished by :func:`_gauss_trial_exact` on the same bits.

    **The error of x̃** (``C`` of :func:`_exp_bounds`). With ``c = X − μ``, ``x₂ =
    c²/(2σ²)`` and :class:`_GaussParams`: ``c̃ = fl(fl(X) − μ̃) = (c + Xδ₀ − μθ)(1 + δ₁)``,
    ``|δ₀|, |δ₁| ≤ u`` (``δ₀ = 0`` while ``X ≤ 2^53``), ``X ≤ |c| + μ``, so ``e_c = |c̃ − c| ≤
    2.0001u|c| + 4.0002uμ``. ``x̃₂ = fl(fl(c̃²)/S) = κ·c̃²/(2σ²)``, ``|κ − 1| ≤ 5.0003u``, and
    ``|c̃² − c²|/(2σ²) ≤ (e_c|c| + e_c²/2)/σ² ≤ 4.0002u·x₂ + 4.0002u|c|/τ + 2⁻¹⁰⁰`` (``μ/σ² =
    1/τ``) with ``|c|/τ = √(2x₂)·σ/τ ≤ 1.9234√x₂ ≤ 0.9617(x₂ + 1)``: ``|x̃₂ − x₂| ≤
    12.85u(x₂ + 1)``. ``U/τ`` is exact (``< 2⁻⁸``) and the sum rounds once: ``|x̃ − x| ≤
    13.9u(x + 1)``, ``C = 14 ≤ 16``. And ``x̃ ≥ 0``.
    """
    tab = _tables(_ETA)
    w = _words(n)
    nU, sh = P["nU"], P["sh"]
    wv = w.view(np.uint32)[0::2].astype(np.float64)
    w16 = w.view(np.uint16)
    wd = w16[2::4].astype(np.float64)
    top = w16[3::4]
    sgn = (top & np.uint16(1)).astype(np.int64)  # 1: negative
    if np.ndim(nU) == 0:
        if nU > 15:
            U = (_words(n) >> np.uint64(64 - nU)).astype(np.int64)
        elif nU:
            U = (top >> np.uint16(16 - nU)).astype(np.int64)
        else:
            U = np.zeros(n, np.int64)
    else:
        U = ((top >> np.uint16(1)) >> (15 - np.minimum(nU, 15)).astype(np.uint16)
             ).astype(np.int64)
        big = nU > 15
        if big.any():
            w2 = _words(n) >> (64 - np.maximum(nU, 16)).astype(np.uint64)
            U = np.where(big, w2.astype(np.int64), U)
    v, okv = _geometric_table(wv, P["inv_lam"], sh)
    vbits = None
    if not okv.all():  # ≈ 4·10⁻⁶ of the trials: 21 more bits of W_v, verified again
        k = np.flatnonzero(~okv)
        e = (_words(k.size) >> np.uint64(43)).astype(np.float64)
        wk = wv[k] * 2.0**21 + e  # exact: < 2^53
        il, shk = P["inv_lam"], sh
        if np.ndim(sh):
            il, shk = il[k], sh[k]
        vk, okk = _geometric_table(wk * 2.0**-21, il, shk, wk)
        wv[k] = wk
        v[k] = vk
        okv[k] = okk
        vbits = np.full(n, _VBITS, dtype=np.int64)
        vbits[k] = 53
    X = v << nU
    X += U
    # x̃ = fl(fl(fl(fl(X) − μ̃)²)/S) + U·2^-j): |x̃ − x| ≤ 13.9u(x + 1) (docstring)
    x = X.astype(np.float64)
    x -= P["mu"]
    x *= x
    x /= P["S"]
    x += U.astype(np.float64) * P["scale_u"]
    y = x * 256.0
    np.minimum(y, _NT, out=y)
    J = y.astype(np.intp)  # ⌊256x̃⌋ (x̃ ≥ 0), or 16128 for every x̃ ≥ 63
    acc = wd < tab["flod1"][J]
    amb = wd < tab["hid"][J]
    amb &= ~acc
    k = np.flatnonzero(amb)
    dbits = None
    if k.size:  # stage 2: 32 more bits of W_d, and the polynomial
        e = _words((k.size + 1) // 2).view(np.uint32)[:k.size].astype(np.float64)
        wk = wd[k] * 2.0**32 + e  # exact: < 2^48
        lo, hi = _exp_bounds(x[k], 2.0**(_DBITS + 32))
        a2 = wk + 1.0 <= lo
        acc[k] = a2
        amb[k] = ~a2 & (wk < hi)
        wd[k] = wk
        dbits = np.full(n, _DBITS, dtype=np.int64)
        dbits[k] = _DBITS + 32
    und = amb
    if not X.all():  # −0: the trial fails
        zero = (sgn == 1) & (X == 0)
        und &= ~zero
        acc &= ~zero
    if not okv.all():
        und |= ~okv
        acc &= okv
    Y = X ^ -sgn  # two's complement: −X = (X ^ −1) + 1
    Y += sgn
    return acc, Y, und, {"U": U, "neg": sgn, "wv": wv, "wd": wd, "v": v, "okv": okv,
                         "dbits": dbits, "vbits": vbits}


def _gauss_trial_exact(U: int, neg: bool, wv: int, vbits: int, wd: int, dbits: int,
                       v: int | None, sigma2: Fraction, j: int) -> tuple[bool, int]:
    """One trial of :func:`_gauss_trials` decided exactly, from its drawn bits: ``V`` from
    its 32-bit prefix unless the fast path verified it, the acceptance from its 16-bit
    prefix, both continued with fresh bits of the same uniforms."""
    tau = 1 << j
    B = 1 << max(j - 8, 0)
    if v is None:
        v = _exact_geometric(_Lazy(wv, vbits), Fraction(B, tau))
    X = U + B * v
    if neg and X == 0:
        return False, 0
    mu = sigma2 / tau
    x = Fraction(U, tau) + (X - mu) ** 2 / (2 * sigma2)
    return _exact_below_exp(_Lazy(wd, dbits), x), (-X if neg else X)


def sample_discrete_gaussian(t: Any, m: Any, m_frac: Any = 0) -> np.ndarray:
    """Exact discrete Gaussian draws ``N_Z(0, σ²)``, ``σ² = t·(m + m_frac·2⁻³⁰)``, one per
    element of the broadcast of the integer arrays ``t ≥ 1``, ``m ≥ 0`` and
    ``0 ≤ m_frac < 2^30`` (``σ² > 0``; ``t < 2^53``, ``m < 2^62``, ``σ² < 2^104``).

    ``P(z) ∝ exp(−z²/(2σ²))`` on the integers, exactly. CKS 2020, Algorithm 3: a discrete
    Laplace proposal ``Y`` of scale ``τ``, accepted with probability
    ``exp(−(|Y| − σ²/τ)²/(2σ²))``; ``P(y)·accept(y) ∝ exp(−y²/(2σ²))`` for every ``τ > 0``.
    The proposal scale is the power of two ``τ`` near σ with the better acceptance
    (0.68–0.76), whatever ``t`` is: ``t`` only states σ² (:func:`discrete_gaussian_scale`).
    Vectorised (:func:`_gauss_trials`); each trial is decided exactly (module docstring).
    """
    t0, m0, f0 = (_int_param(np.asarray(a), name)
                  for a, name in ((t, "t"), (m, "m"), (m_frac, "m_frac")))
    shape = np.broadcast_shapes(t0.shape, m0.shape, f0.shape)
    n = math.prod(shape)
    if n == 0:
        return np.empty(shape, dtype=np.int64)
    if not int(t0.min()) >= 1:
        raise ValueError("t must be >= 1.")
    if not int(t0.max()) < _MAX_T:
        raise ValueError("t must be below 2^53 (sigma^2 < 2^104).")
    if not int(m0.min()) >= 0:
        raise ValueError("m must be >= 0.")
    if not int(m0.max()) < _MAX_M:
        raise ValueError("m must be below 2^62 (sigma^2 < 2^104).")
    if not (int(f0.min()) >= 0 and int(f0.max()) < 1 << FRAC_BITS):
        raise ValueError("m_frac must be in [0, 2^30).")
    # the distinct (t, m, m_frac), found on the compact layout (the axes along which
    # every input is broadcast dropped): one parameter set per group, not per element
    nd = len(shape)
    arrs = [a.reshape((1,) * (nd - a.ndim) + a.shape) for a in (t0, m0, f0)]
    free = [all(a.shape[ax] == 1 or a.strides[ax] == 0 for a in arrs) for ax in range(nd)]
    sl = tuple(slice(0, 1) if fr else slice(None) for fr in free)
    comp = [np.broadcast_to(a, shape)[sl] for a in arrs]
    cshape = comp[0].shape
    cols = [c.ravel() for c in comp]
    if all(c.min() == c.max() for c in cols):
        tt, mm, ff = (c[:1] for c in cols)
        inv = np.zeros(cols[0].size, dtype=np.intp)
    else:
        order = np.lexsort(cols[::-1])
        srt = [c[order] for c in cols]
        new = np.ones(order.size, dtype=bool)
        new[1:] = (srt[0][1:] != srt[0][:-1]) | (srt[1][1:] != srt[1][:-1]) | (
            srt[2][1:] != srt[2][:-1])
        tt, mm, ff = (c[new] for c in srt)
        inv = np.empty(order.size, dtype=np.intp)
        inv[order] = np.cumsum(new) - 1
    if np.any((mm == 0) & (ff == 0)):
        raise ValueError("sigma^2 = t*(m + m_frac*2^-30) must be > 0.")
    _check_sigma2(tt, mm, ff)
    params = _GaussParams(tt, mm, ff)
    K = tt.size

    def sigma2(g: int) -> Fraction:
        return Fraction(int(tt[g]) * ((int(mm[g]) << FRAC_BITS) | int(ff[g])), 1 << FRAC_BITS)

    def run(size: int, P: dict, gids: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        acc, Y, und, raw = _gauss_trials(size, P)
        for k in np.flatnonzero(und).tolist():
            g = gids if isinstance(gids, int) else int(gids[k])
            acc[k], Y[k] = _gauss_trial_exact(
                int(raw["U"][k]), bool(raw["neg"][k]), int(raw["wv"][k]),
                _VBITS if raw["vbits"] is None else int(raw["vbits"][k]), int(raw["wd"][k]),
                _DBITS if raw["dbits"] is None else int(raw["dbits"][k]),
                int(raw["v"][k]) if raw["okv"][k] else None, sigma2(g), int(params.j[g]))
        return acc, Y

    def stream(count: int, g: int) -> np.ndarray:
        """``count`` draws of group ``g``: i.i.d. trials, the successes in order."""
        res = np.empty(count, dtype=np.int64)
        P = params.row(g)
        filled = 0
        while filled < count:
            size = min(_CHUNK, int((count - filled) * 1.5) + 64)
            acc, Y = run(size, P, g)
            got = Y[np.flatnonzero(acc)][:count - filled]
            res[filled:filled + got.size] = got
            filled += got.size
        return res

    if K == 1:
        return stream(n, 0).reshape(shape)
    gid = np.broadcast_to(inv.reshape(cshape), shape).ravel()
    out = np.empty(n, dtype=np.int64)
    if n >= K * 4096:  # few, large groups: each streamed
        for g in range(K):
            pos = np.flatnonzero(gid == g)
            out[pos] = stream(pos.size, g)
        return out.reshape(shape)
    fails = []
    for s in range(0, n, _CHUNK):  # the first round: one trial per element
        g = gid[s:s + _CHUNK]
        acc, Y = run(g.size, params.take(g), g)
        k = np.flatnonzero(acc)
        out[s + k] = Y[k]
        fails.append(s + np.flatnonzero(~acc))
    todo = np.concatenate(fails)
    while todo.size:  # trials per element and round until one succeeds: the first success
        rep = min(16, max(1, 2048 // todo.size))  # the last few: several trials each
        fails = []
        for s in range(0, todo.size, _CHUNK // rep):
            idx = todo[s:s + _CHUNK // rep]
            g = gid[np.repeat(idx, rep)] if rep > 1 else gid[idx]
            acc, Y = run(g.size, params.take(g), g)
            if rep > 1:
                acc2 = acc.reshape(idx.size, rep)
                first = acc2.argmax(axis=1)
                acc = acc2[np.arange(idx.size), first]
                Y = Y.reshape(idx.size, rep)[np.arange(idx.size), first]
            k = np.flatnonzero(acc)
            out[idx[k]] = Y[k]
            fails.append(idx[np.flatnonzero(~acc)])
        todo = np.concatenate(fails)
    return out.reshape(shape)


def _check_sigma2(tt: np.ndarray, mm: np.ndarray, ff: np.ndarray) -> None:
    """``σ² = t·(m + m_frac·2⁻³⁰) < 2^104`` exactly (floats decide all but the elements
    within a relative ``2⁻⁴⁰`` of the limit, which Python integers decide)."""
    s2 = tt.astype(np.float64) * (mm.astype(np.float64) + ff.astype(np.float64) * 2.0**-30)
    near = np.flatnonzero(s2 >= 2.0**104 * (1 - 2.0**-40))
    for i in near.tolist():
        if int(tt[i]) * ((int(mm[i]) << FRAC_BITS) | int(ff[i])) >= MAX_SIGMA2 << FRAC_BITS:
            raise ValueError(f"sigma^2 = t*(m + m_frac*2^-30) must be below 2^104; got "
                             f"{float(s2[i]):.6g}.")


def discrete_gaussian_params(sigma2: Fraction | int | float) -> tuple[int, int]:
    """Integers ``(t, m)`` with ``t·m ≥ σ²`` and ``t = ⌊sqrt(⌈σ²⌉)⌋ + 1 > σ``: the
    sampler's ``σ'² = t·m`` exceeds ``σ²`` by less than ``t`` (relative ``< 1/σ + 1/σ²``),
    and rounding σ² up only adds noise. ``σ'²`` must be below ``MAX_SIGMA2 = 2^104``."""
    t, m, m_frac = discrete_gaussian_scale(sigma2)
    m += m_frac > 0  # ⌈σ²/t⌉ = ⌈⌈σ²·2^30/t⌉/2^30⌉
    if t * m >= MAX_SIGMA2:
        raise ValueError(f"sigma^2 = {float(Fraction(sigma2)):.3g} is too large for the exact "
                         "sampler (below 2^104).")
    return t, m


def discrete_gaussian_scale(sigma2: Fraction | int | float) -> tuple[int, int, int]:
    """``(t, m, m_frac)``: the smallest ``σ'² = t·(m + m_frac·2⁻³⁰) ≥ σ²`` with
    ``t = ⌊sqrt(⌈σ²⌉)⌋ + 1`` (integers, ``0 ≤ m_frac < 2^30``), for
    :func:`sample_discrete_gaussian` ``(t, m, m_frac)``.

    ``σ'² − σ² < t·2⁻³⁰`` exactly, so the relative excess is below ``2⁻³⁰·t/σ²``; as
    ``t ≤ σ + 1 + 1/(2σ)``, that is below ``2⁻³⁰(1/σ + 1/σ² + 1/(2σ³))`` — at most
    ``2^{−28.7}/σ`` for ``σ ≥ 1``. Refused unless ``σ² > 0`` and ``σ'² < 2^104``.
    """
    s2 = Fraction(sigma2)
    if not s2 > 0:
        raise ValueError(f"sigma^2 must be > 0; got {sigma2!r}.")
    t = math.isqrt(math.ceil(s2)) + 1
    M = math.ceil(s2 * (1 << FRAC_BITS) / t)
    if t * M >= MAX_SIGMA2 << FRAC_BITS:
        raise ValueError(f"sigma^2 = {float(s2):.3g} is too large for the exact sampler "
                         "(below 2^104).")
    return t, M >> FRAC_BITS, M & ((1 << FRAC_BITS) - 1)


# --- the two-sided geometric ------------------------------------------------------------------

def _geometric_trials(n: int, ef: float, L: int, nA: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``n`` trials of ``|Z| = A + L·B``: ``A`` uniform on ``[0, 2^{n_A})``, rejected when
    ``A ≥ L``, kept with probability ``e^{−εA}``; ``B = max{b : W_b < e^{−εLb}}``
    (``P(B = b) ∝ e^{−εLb}``), so ``P(|Z| = k) ∝ e^{−εk}``; a sign, ``−0`` rejected. Floats:
    ``x̃ = fl(ε̃·A)`` and ``fl(ε̃·(L·b))`` (``L·b`` exact; ``ε̃ = fl(ε)``): ``|x̃ − x| ≤
    2.0001u·x``."""
    w1 = _words(n)
    w2 = _words(n)
    wb = (w1 >> np.uint64(11)).astype(np.float64)  # 53 bits of W_b
    neg = (w1 & np.uint64(1)).astype(bool)
    wa = (w2 & np.uint64(0xFFFFFFFF)).astype(np.float64)  # 32 bits of W_a
    if nA <= 32:
        A = (w2 >> np.uint64(64 - nA)).astype(np.int64) if nA else np.zeros(n, np.int64)
    else:
        A = (_words(n) >> np.uint64(64 - nA)).astype(np.int64)
    inrange = A < L
    lam = ef * L
    bmax = int(_XMAX / lam) + 2
    bh = np.floor(-np.log((wb + 0.5) * 2.0**-53) / lam)
    np.minimum(bh, bmax, out=bh)
    b = bh.astype(np.int64)
    lo0, _ = _exp_bounds(ef * (b * L).astype(np.float64), 2.0**53)
    _, hi1 = _exp_bounds(ef * ((b + 1) * L).astype(np.float64), 2.0**53)
    okb = (wb + 1.0 <= lo0) & (wb >= hi1)
    lo, hi = _exp_bounds(ef * A.astype(np.float64), 2.0**32)
    acc = wa + 1.0 <= lo
    Z = A + L * b
    zero = neg & (Z == 0)
    und = inrange & (~okb | (~acc & (wa < hi) & ~zero))
    acc &= okb & inrange & ~zero
    Y = np.where(neg, -Z, Z)
    return acc, Y, und, {"A": A, "neg": neg, "wb": wb, "wa": wa, "b": b, "okb": okb}


def _geometric_trial_exact(A: int, neg: bool, wb: int, wa: int, b: int | None,
                           eps: Fraction, L: int) -> tuple[bool, int]:
    if b is None:
        b = _exact_geometric(_Lazy(wb, 53), eps * L)
    Z = A + L * b
    if neg and Z == 0:
        return False, 0
    return _exact_below_exp(_Lazy(wa, 32), eps * A), (-Z if neg else Z)


def _discrete_laplace_scalar(s: int, t: int) -> int:
    """``P(z) ∝ exp(−|z|·s/t)`` on the integers (CKS 2020, Algorithm 2), in Python
    integers: for ``ε = s/t`` outside the vectorised range."""
    while True:
        u = _randbelow(t)
        if not _bernoulli_exp_exact(Fraction(u, t)):
            continue
        v = 0
        while _bernoulli_exp_exact(Fraction(1)):
            v += 1
        y = (u + t * v) // s
        if _randbits(1):
            if y == 0:
                continue
            return -y
        return y


def sample_two_sided_geometric(epsilon: float | Fraction, size: int | tuple[int, ...]
                               ) -> np.ndarray:
    """Exact two-sided geometric (discrete Laplace) draws, ``P(z) ∝ exp(−ε|z|)``.

    ``epsilon`` is taken as the exact rational it is (a float is a dyadic rational), so
    the law is exactly the one the count release's proof (``docs/privacy-accounting.md``
    §9) uses with ``p = exp(−ε)``. Vectorised for ``2⁻⁴⁵ ≤ ε ≤ 2^50`` as
    ``|Z| = A + L·B``, ``L = ⌈1/ε⌉`` (:func:`_geometric_trials`), else CKS 2020
    Algorithm 2 in Python integers; every bit from the operating system. Returns an int64
    array of shape ``size``.
    """
    try:
        eps = Fraction(epsilon)
    except (OverflowError, ValueError, TypeError):
        eps = Fraction(0)
    if not eps > 0:
        raise ValueError(f"epsilon must be a finite number > 0; got {epsilon!r}.")
    shape = (size,) if isinstance(size, int) else tuple(size)
    n = int(np.prod(shape, dtype=np.int64))
    if not (_EPS_MIN <= eps <= _EPS_MAX):
        s, t = eps.numerator, eps.denominator
        return np.array([_discrete_laplace_scalar(s, t) for _ in range(n)],
                        dtype=np.int64).reshape(shape)
    L = max(math.ceil(1 / eps), 1)
    nA = (L - 1).bit_length()
    ef = float(eps)
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        acc, Y, und, raw = _geometric_trials(todo.size, ef, L, nA)
        for k in np.flatnonzero(und).tolist():
            acc[k], Y[k] = _geometric_trial_exact(
                int(raw["A"][k]), bool(raw["neg"][k]), int(raw["wb"][k]), int(raw["wa"][k]),
                int(raw["b"][k]) if raw["okb"][k] else None, eps, L)
        out[todo[acc]] = Y[acc]
        todo = todo[~acc]
    return out.reshape(shape)


# --- the laws and their privacy -------------------------------------------------------------

def _theta(sigma2: float, kmax: int) -> float:
    k = np.arange(-kmax, kmax + 1, dtype=np.float64)
    return float(np.exp(-k * k / (2.0 * sigma2)).sum())


def discrete_gaussian_pmf(k: Any, sigma2: float) -> np.ndarray:
    """``P(Z = k)`` for ``Z ~ N_Z(0, σ²)`` (float64; the normaliser summed to ``±40σ``)."""
    s2 = float(sigma2)
    kk = np.asarray(k, dtype=np.float64)
    kmax = int(math.ceil(40.0 * math.sqrt(s2))) + 1
    return np.exp(-kk * kk / (2.0 * s2)) / _theta(s2, kmax)


def two_sided_geometric_pmf(k: Any, epsilon: float) -> np.ndarray:
    """``P(Z = k) = tanh(ε/2)·exp(−ε|k|)`` (``(1 − p)/(1 + p)·p^|k|``, ``p = e^{−ε}``)."""
    kk = np.abs(np.asarray(k, dtype=np.float64))
    return math.tanh(epsilon / 2.0) * np.exp(-epsilon * kk)


def discrete_gaussian_zcdp(sensitivity: float, sigma2: float) -> float:
    """ρ of adding ``N_Z(0, σ²)^d`` to an integer-valued query of L2 sensitivity ``Δ``:
    ``Δ²/(2σ²)`` (CKS 2020, Thm 15)."""
    s2 = float(sigma2)
    if not s2 > 0:
        raise ValueError(f"sigma2 must be > 0; got {sigma2!r}.")
    return float(sensitivity) ** 2 / (2.0 * s2)


def discrete_gaussian_rdp(alpha: Any, sensitivity: float, sigma2: float) -> np.ndarray:
    """RDP bound ``α·Δ²/(2σ²)`` of the discrete Gaussian mechanism at orders ``α > 1``
    (CKS 2020, Prop. 5 per coordinate; additive over independent coordinates, and the
    bound is increasing in each squared shift, so ``Σ_j (μ_j − ν_j)² ≤ Δ²`` gives it)."""
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(~(a > 1.0)):
        raise ValueError("alpha must be > 1.")
    return a * discrete_gaussian_zcdp(sensitivity, sigma2)
