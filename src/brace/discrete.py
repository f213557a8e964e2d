"""Exact sampling on the integers from the operating system's randomness, and its privacy.

Secure mode (``noise="secure"``, ``docs/privacy-accounting.md`` §13) draws its noise here:

* :func:`sample_discrete_gaussian` — the discrete Gaussian ``N_Z(0, σ²)``,
  ``P(z) ∝ exp(−z²/(2σ²))`` on the integers, for a rational ``σ² = t·m`` (Canonne, Kamath
  & Steinke 2020, Algorithm 3), vectorised with numpy int64 arithmetic;
* :func:`sample_two_sided_geometric` — ``P(z) ∝ exp(−ε|z|)`` on the integers for a rational
  ``ε`` (their Algorithm 2, the discrete Laplace), in exact Python integer arithmetic.

Both use their Algorithm 1, ``Bernoulli(exp(−γ))`` for a rational ``γ``, built from
Bernoulli trials of rational probability, each decided by an exact comparison of a uniform
integer (rejection sampling from random bits) — no floating point anywhere. **Every random
bit comes from** :func:`os.urandom` (the kernel's CSPRNG; :mod:`secrets` uses the same
source): there is no seed and no generator state to learn. The vectorised sampler is
exact as well: a trial whose exact arithmetic would leave 63 bits is decided in Python
integers (:func:`_bernoulli_exp_scalar`).

The privacy of the discrete Gaussian (:func:`discrete_gaussian_rdp`): for integer vectors
``μ, ν`` with ``‖μ − ν‖₂ ≤ Δ``, ``D_α(μ + N_Z(0, σ²)^d ‖ ν + N_Z(0, σ²)^d) ≤ αΔ²/(2σ²)``
for every ``α > 1`` (Canonne, Kamath & Steinke 2020, Prop. 5 and Thm 15): it is
``Δ²/(2σ²)``-zCDP, the same as the continuous Gaussian of the same σ.
"""

from __future__ import annotations

import math
import os
import secrets
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

MAX_SIGMA2 = 1 << 60  # σ² = t·m must stay below this (2σ² and t·K fit in 62 bits)
_SQ_LIMIT = 1 << 31  # |c| below this: c² fits in int64; above, Python integers decide
_LIM62 = np.int64(1 << 62)


# --- random bits ------------------------------------------------------------------------

def _words(n: int) -> np.ndarray:
    """``n`` uniform 64-bit words from the operating system's CSPRNG."""
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def _uniform_below(n: np.ndarray) -> np.ndarray:
    """A uniform integer in ``[0, n_i)`` for each ``1 ≤ n_i ≤ 2^62``: a random word ``w`` is
    kept when ``w ≥ 2^64 mod n_i`` (the kept range's length is a multiple of ``n_i``, so
    ``w mod n_i`` is uniform; a word is rejected with probability ``< n_i/2^64 ≤ 1/4``)."""
    n = np.asarray(n, dtype=np.int64).astype(np.uint64)
    low = (np.uint64(0) - n) % n  # 2^64 mod n
    out = np.empty(n.shape, dtype=np.int64)
    todo = np.arange(n.size)
    while todo.size:
        w = _words(todo.size)
        nt = n[todo]
        ok = w >= low[todo]
        if ok.all():
            out[todo] = (w % nt).astype(np.int64)
            break
        out[todo[ok]] = (w[ok] % nt[ok]).astype(np.int64)
        todo = todo[~ok]
    return out


def _bernoulli(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``Bernoulli(num/den)`` for integers ``0 ≤ num ≤ den ≤ 2^62``."""
    return _uniform_below(den) < num


def _bernoulli_exp_le1(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``Bernoulli(exp(−γ))`` for ``γ = num/den ∈ [0, 1]`` (CKS 2020, Algorithm 1):
    ``K ← 1``; while ``Bernoulli(γ/K)``: ``K ← K + 1``; return ``K`` odd. The trial
    ``Bernoulli(γ/K)`` is one comparison ``uniform[0, den·K) < num`` while ``den·K`` fits
    in 62 bits, else ``Bernoulli(γ) ∧ Bernoulli(1/K)`` (independent, same probability)."""
    num = np.asarray(num, dtype=np.int64)
    den = np.asarray(den, dtype=np.int64)
    K = np.ones(num.shape, dtype=np.int64)
    alive = np.flatnonzero(num > 0)
    while alive.size:
        k, a, b = K[alive], num[alive], den[alive]
        fits = k <= _LIM62 // b
        if fits.all():
            go = _uniform_below(b * k) < a
        else:
            go = _bernoulli(a, b) & (_uniform_below(k) == 0)
            go[fits] = _uniform_below(b[fits] * k[fits]) < a[fits]
        K[alive[go]] += 1
        alive = alive[go]
    return (K & 1) == 1


def _bernoulli_exp(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``Bernoulli(exp(−γ))`` for ``γ = num/den ≥ 0`` (int64, ``den ≤ 2^62``): ``⌊γ⌋``
    trials of ``Bernoulli(exp(−1))`` must all succeed, then ``Bernoulli(exp(−frac γ))``."""
    num = np.asarray(num, dtype=np.int64)
    den = np.asarray(den, dtype=np.int64)
    whole = num // den
    frac = num - whole * den
    ok = np.ones(num.shape, dtype=bool)
    done = np.zeros(num.shape, dtype=np.int64)
    idx = np.flatnonzero(whole > 0)
    while idx.size:
        b = _bernoulli_exp_le1(np.ones(idx.size, np.int64), np.ones(idx.size, np.int64))
        ok[idx[~b]] = False
        done[idx] += 1
        idx = idx[b & (done[idx] < whole[idx])]
    idx = np.flatnonzero(ok)
    ok[idx] = _bernoulli_exp_le1(frac[idx], den[idx])
    return ok


# --- exact scalar versions (Python integers) ---------------------------------------------

def _bernoulli_scalar(p: Fraction) -> bool:
    return secrets.randbelow(p.denominator) < p.numerator


def _bernoulli_exp_scalar(gamma: Fraction) -> bool:
    """``Bernoulli(exp(−γ))`` for a rational ``γ ≥ 0`` (CKS 2020, Algorithm 1)."""
    while gamma > 1:
        if not _bernoulli_exp_scalar(Fraction(1)):
            return False
        gamma -= 1
    k = 1
    while _bernoulli_scalar(gamma / k):
        k += 1
    return k % 2 == 1


def _discrete_laplace_scalar(s: int, t: int) -> int:
    """``P(z) ∝ exp(−|z|·s/t)`` on the integers (CKS 2020, Algorithm 2)."""
    while True:
        u = secrets.randbelow(t)
        if not _bernoulli_exp_scalar(Fraction(u, t)):
            continue
        v = 0
        while _bernoulli_exp_scalar(Fraction(1)):
            v += 1
        y = (u + t * v) // s
        if secrets.randbits(1):
            if y == 0:
                continue
            return -y
        return y


# --- the samplers -------------------------------------------------------------------------

def sample_two_sided_geometric(epsilon: float | Fraction, size: int | tuple[int, ...]
                               ) -> np.ndarray:
    """Exact two-sided geometric (discrete Laplace) draws, ``P(z) ∝ exp(−ε|z|)``.

    ``epsilon`` is taken as the exact rational ``s/t`` it is (a float is a dyadic
    rational), so the law is exactly the one the count release's proof
    (``docs/privacy-accounting.md`` §9) uses with ``p = exp(−ε)``. CKS 2020, Algorithm 2:
    vectorised while ``s, t ≤ 2^62`` (every float ``ε ≥ 2^-10``), else in Python integers;
    every bit from the operating system. Returns an int64 array of shape ``size``.
    """
    try:
        eps = Fraction(epsilon)
    except (OverflowError, ValueError, TypeError):
        eps = Fraction(0)
    if not eps > 0:
        raise ValueError(f"epsilon must be a finite number > 0; got {epsilon!r}.")
    shape = (size,) if isinstance(size, int) else tuple(size)
    n = int(np.prod(shape, dtype=np.int64))
    s, t = eps.numerator, eps.denominator
    if s <= 1 << 62 and t <= 1 << 62:
        return _discrete_laplace(np.full(n, t, dtype=np.int64),
                                 np.full(n, s, dtype=np.int64)).reshape(shape)
    return np.array([_discrete_laplace_scalar(s, t) for _ in range(n)],
                    dtype=np.int64).reshape(shape)


def _runs_exp1(n: int) -> np.ndarray:
    """``n`` draws of the number of successes before the first failure of independent
    ``Bernoulli(exp(−1))`` trials (``P(V ≥ v) = e^{−v}``). Each trial is Algorithm 1 with
    ``γ = 1`` (``K`` grows while ``Bernoulli(1/K)``; success iff ``K`` is odd), run as one
    state machine, one uniform draw per element and round (``Bernoulli(1/1)`` needs none)."""
    v = np.zeros(n, dtype=np.int64)
    K = np.full(n, 2, dtype=np.int64)
    alive = np.arange(n)
    while alive.size:
        k = K[alive]
        go = _uniform_below(k) == 0
        K[alive[go]] += 1
        ended = alive[~go]
        success = (K[ended] & 1) == 1
        v[ended[success]] += 1
        K[ended[success]] = 2
        alive = np.concatenate([alive[go], ended[success]])
    return v


def _discrete_laplace(t: np.ndarray, s: np.ndarray | None = None) -> np.ndarray:
    """``P(z) ∝ exp(−|z|·s_i/t_i)`` per element (CKS 2020, Algorithm 2; ``s = 1`` if None),
    for integers ``1 ≤ s, t ≤ 2^62``: ``U`` uniform on ``[0, t)`` kept with probability
    ``exp(−U/t)``, ``V`` the run of ``Bernoulli(exp(−1))`` successes, ``X = U + tV``
    (geometric, parameter ``1 − e^{−1/t}``), ``Y = ⌊X/s⌋``, a random sign, ``−0`` rejected.
    ``X`` is formed in Python integers where ``tV`` would pass 62 bits."""
    out = np.empty(t.shape, dtype=np.int64)
    todo = np.arange(t.size)
    while todo.size:
        tt = t[todo]
        u = _uniform_below(tt)
        keep = _bernoulli_exp_le1(u, tt)
        v = np.zeros(todo.size, dtype=np.int64)
        v[keep] = _runs_exp1(int(keep.sum()))
        big = v > (_LIM62 - tt) // tt
        x = u + tt * np.where(big, 0, v)
        y = x if s is None else x // s[todo]
        for j in np.flatnonzero(big):  # P(V > 2^62/t − 1) = e^{−(2^62/t − 1)}
            yj = (int(u[j]) + int(tt[j]) * int(v[j])) // (1 if s is None else int(s[todo[j]]))
            if yj >= 1 << 62:  # pragma: no cover - probability below e^{-2^31}
                raise OverflowError("discrete Laplace draw beyond 2^62")
            y[j] = yj
        neg = (_words(todo.size) & np.uint64(1)).astype(bool)
        keep &= ~(neg & (y == 0))
        out[todo[keep]] = np.where(neg, -y, y)[keep]
        todo = todo[~keep]
    return out


def discrete_gaussian_scale(sigma2: Fraction | int | float) -> tuple[int, int, int]:
    """``(t, m, m_frac)``: the smallest ``σ'² = t·(m + m_frac·2⁻³⁰) ≥ σ²`` with
    ``t = ⌊sqrt(⌈σ²⌉)⌋ + 1`` (integers, ``0 ≤ m_frac < 2^30``)."""
    s2 = Fraction(sigma2)
    if not s2 > 0:
        raise ValueError(f"sigma^2 must be > 0; got {sigma2!r}.")
    t = math.isqrt(math.ceil(s2)) + 1
    M = math.ceil(s2 * (1 << 30) / t)
    return t, M >> 30, M & ((1 << 30) - 1)


def sample_discrete_gaussian(t: Any, m: Any, m_frac: Any = 0) -> np.ndarray:
    """Exact discrete Gaussian draws ``N_Z(0, σ²)``, ``σ² = t·m``, one per element of the
    broadcast of the integer arrays ``t ≥ 1`` and ``m ≥ 1`` (``t·m < 2^60``).

    CKS 2020, Algorithm 3, with the proposal's scale ``t`` given: draw ``Y`` with
    ``P(y) ∝ exp(−|y|/t)``, accept with probability ``exp(−(|Y| − σ²/t)²/(2σ²))``;
    ``P(y)·accept(y) ∝ exp(−y²/(2σ²))`` for every ``t > 0`` (``t = ⌊σ⌋ + 1`` makes it
    efficient, :func:`discrete_gaussian_params`). With ``σ²/t = m`` an integer, the
    exponent is ``c²/(2tm)`` with the integer ``c = |Y| − m``: exact in int64 while
    ``|c| < 2^31``, in Python integers beyond (probability below ``e^{−8}`` per draw).
    """
    if np.any(np.asarray(m_frac) != 0):
        return _sample_fractional(t, m, m_frac)
    t_arr, m_arr = np.broadcast_arrays(np.asarray(t), np.asarray(m))
    for name, a in (("t", t_arr), ("m", m_arr)):
        if a.dtype.kind not in "iu":
            raise TypeError(f"{name} must be an integer array; got dtype {a.dtype}.")
        if a.size and not int(a.min()) >= 1:
            raise ValueError(f"{name} must be >= 1.")
    tt = t_arr.astype(np.int64).ravel()
    mm = m_arr.astype(np.int64).ravel()
    if tt.size and not np.all(tt <= MAX_SIGMA2 // mm):
        raise ValueError(f"sigma^2 = t*m must be below 2^60; got up to "
                         f"{int((tt.astype(object) * mm.astype(object)).max())}.")
    out = np.empty(tt.size, dtype=np.int64)
    todo = np.arange(tt.size)
    while todo.size:
        t_i, m_i = tt[todo], mm[todo]
        y = _discrete_laplace(t_i)
        c = np.abs(y) - m_i
        small = np.abs(c) < _SQ_LIMIT
        acc = np.zeros(todo.size, dtype=bool)
        idx = np.flatnonzero(small)
        acc[idx] = _bernoulli_exp(c[idx] * c[idx], 2 * t_i[idx] * m_i[idx])
        for j in np.flatnonzero(~small):
            acc[j] = _bernoulli_exp_scalar(
                Fraction(int(c[j]) ** 2, 2 * int(t_i[j]) * int(m_i[j])))
        out[todo[acc]] = y[acc]
        todo = todo[~acc]
    return out.reshape(t_arr.shape)


def _sample_fractional(t: Any, m: Any, m_frac: Any) -> np.ndarray:
    """Algorithm 3 for ``σ² = t·(m + m_frac·2⁻³⁰)``: the exact acceptance exponent
    ``(|Y|·2^30 − M)²/(2^31·t·M)``, ``M = m·2^30 + m_frac``, in Python integers."""
    t_arr, m_arr, f_arr = np.broadcast_arrays(np.asarray(t), np.asarray(m), np.asarray(m_frac))
    tt = t_arr.astype(np.int64).ravel()
    MM = [int(a) * (1 << 30) + int(b) for a, b in zip(m_arr.ravel(), f_arr.ravel(), strict=True)]
    out = np.empty(tt.size, dtype=np.int64)
    todo = np.arange(tt.size)
    while todo.size:
        y = _discrete_laplace(tt[todo])
        acc = np.zeros(todo.size, dtype=bool)
        for j, i in enumerate(todo):
            c = abs(int(y[j])) * (1 << 30) - MM[i]
            acc[j] = _bernoulli_exp_scalar(Fraction(c * c, (1 << 31) * int(tt[i]) * MM[i]))
        out[todo[acc]] = y[acc]
        todo = todo[~acc]
    return out.reshape(t_arr.shape)


def discrete_gaussian_params(sigma2: Fraction | int | float) -> tuple[int, int]:
    """Integers ``(t, m)`` with ``t·m ≥ σ²`` and ``t = ⌊sqrt(⌈σ²⌉)⌋ + 1 > σ``: the
    sampler's ``σ'² = t·m`` exceeds ``σ²`` by less than ``t`` (relative ``< 1/σ + 1/σ²``),
    and rounding σ² up only adds noise."""
    s2 = Fraction(sigma2)
    if not s2 > 0:
        raise ValueError(f"sigma^2 must be > 0; got {sigma2!r}.")
    t = math.isqrt(math.ceil(s2)) + 1
    m = math.ceil(s2 / t)
    if t * m >= MAX_SIGMA2:
        raise ValueError(f"sigma^2 = {float(s2):.3g} is too large for the exact sampler "
                         "(at most 2^60).")
    return t, m


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
