"""The decisions ``{W < e^{−x}}`` of the exact samplers (:mod:`brace.discrete`): the float64
exponential with a *proven* relative error bound ``η = 2⁻⁴⁰`` (:func:`_exp_approx`) and
its bound tables (:func:`_tables`), which decide almost every event from a prefix of
``W``'s bits; the exact decisions against rigorous :mod:`decimal` bounds
(:func:`_exact_below_exp`, :func:`_exact_geometric`) for the rest; the vectorised
``Bernoulli(e^{−x})`` and the geometric part by inversion (:func:`_geometric_table`)."""

from __future__ import annotations

import math
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

from . import _bits
from ._bits import _Lazy

_ETA = 2.0**-40  # proven relative error bound of the float64 e^{-x} (see _exp_approx)
_XMAX = 63.0  # the float path evaluates e^{-x} for 0 ≤ x̃ < 63
_NT = 63 * 256  # table size: e^{-k/256}, 0 ≤ k < 16128 (and k = 16128 as a sentinel)
_DBITS = 16  # bits of W drawn for a Gaussian trial's decision on the fast path



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
    w = _bits._words((n + 1) // 2).view(np.uint32)[:n].astype(np.float64)
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




def _bound_tables() -> dict:
    """The bound tables at the current ``η`` (``_ETA``; a test widens it)."""
    return _tables(_ETA)
