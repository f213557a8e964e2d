"""The two-sided geometric (discrete Laplace) ``P(z) ∝ exp(−ε|z|)`` on the integers, exactly,
for the rational ``ε`` a float is: vectorised as ``|Z| = A + L·B`` for ``2⁻⁴⁵ ≤ ε ≤ 2^50``,
else CKS 2020 Algorithm 2 in Python integers; every decision exact (:mod:`._exp`), every
bit from the operating system (:mod:`._bits`)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from . import _bits, _exp
from ._bits import _Lazy, _randbelow, _randbits
from ._exp import _bernoulli_exp_exact, _exact_below_exp, _exact_geometric

_EPS_MIN = Fraction(1, 1 << 45)  # the geometric's vectorised path: ε ≥ 2^-45 ...
_EPS_MAX = 1 << 50  # ... and ε ≤ 2^50


def _geometric_trials(n: int, ef: float, L: int, nA: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``n`` trials of ``|Z| = A + L·B``: ``A`` uniform on ``[0, 2^{n_A})``, rejected when
    ``A ≥ L``, kept with probability ``e^{−εA}``; ``B = max{b : W_b < e^{−εLb}}``
    (``P(B = b) ∝ e^{−εLb}``), so ``P(|Z| = k) ∝ e^{−εk}``; a sign, ``−0`` rejected. Floats:
    ``x̃ = fl(ε̃·A)`` and ``fl(ε̃·(L·b))`` (``L·b`` exact; ``ε̃ = fl(ε)``): ``|x̃ − x| ≤
    2.0001u·x``."""
    w1 = _bits._words(n)
    w2 = _bits._words(n)
    wb = (w1 >> np.uint64(11)).astype(np.float64)  # 53 bits of W_b
    neg = (w1 & np.uint64(1)).astype(bool)
    wa = (w2 & np.uint64(0xFFFFFFFF)).astype(np.float64)  # 32 bits of W_a
    if nA <= 32:
        A = (w2 >> np.uint64(64 - nA)).astype(np.int64) if nA else np.zeros(n, np.int64)
    else:
        A = (_bits._words(n) >> np.uint64(64 - nA)).astype(np.int64)
    inrange = A < L
    lam = ef * L
    bmax = int(_exp._XMAX / lam) + 2
    bh = np.floor(-np.log((wb + 0.5) * 2.0**-53) / lam)
    np.minimum(bh, bmax, out=bh)
    b = bh.astype(np.int64)
    lo0, _ = _exp._exp_bounds(ef * (b * L).astype(np.float64), 2.0**53)
    _, hi1 = _exp._exp_bounds(ef * ((b + 1) * L).astype(np.float64), 2.0**53)
    okb = (wb + 1.0 <= lo0) & (wb >= hi1)
    lo, hi = _exp._exp_bounds(ef * A.astype(np.float64), 2.0**32)
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
