"""The discrete Gaussian ``N_Z(0, σ²)`` on the integers, exactly, for a rational
``σ² = t·(m + m_frac·2⁻³⁰)`` (Canonne, Kamath & Steinke 2020, "CKS", Algorithm 3),
vectorised; every random decision is an event ``{W < e^{−x}}`` decided exactly
(:mod:`._exp`) from the operating system's bits (:mod:`._bits`)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from . import _bits, _exp
from ._bits import _Lazy
from ._exp import _DBITS, _NT, _exact_below_exp, _exact_geometric, _geometric_table
from .scale import _MAX_M, _MAX_T, FRAC_BITS, _check_sigma2

_VBITS = 32  # bits of W drawn for the geometric part V
_CHUNK = 1 << 14  # elements per vectorised block (keeps the working set in cache)


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
    tab = _exp._bound_tables()
    w = _bits._words(n)
    nU, sh = P["nU"], P["sh"]
    wv = w.view(np.uint32)[0::2].astype(np.float64)
    w16 = w.view(np.uint16)
    wd = w16[2::4].astype(np.float64)
    top = w16[3::4]
    sgn = (top & np.uint16(1)).astype(np.int64)  # 1: negative
    if np.ndim(nU) == 0:
        if nU > 15:
            U = (_bits._words(n) >> np.uint64(64 - nU)).astype(np.int64)
        elif nU:
            U = (top >> np.uint16(16 - nU)).astype(np.int64)
        else:
            U = np.zeros(n, np.int64)
    else:
        U = ((top >> np.uint16(1)) >> (15 - np.minimum(nU, 15)).astype(np.uint16)
             ).astype(np.int64)
        big = nU > 15
        if big.any():
            w2 = _bits._words(n) >> (64 - np.maximum(nU, 16)).astype(np.uint64)
            U = np.where(big, w2.astype(np.int64), U)
    v, okv = _geometric_table(wv, P["inv_lam"], sh)
    vbits = None
    if not okv.all():  # ≈ 4·10⁻⁶ of the trials: 21 more bits of W_v, verified again
        k = np.flatnonzero(~okv)
        e = (_bits._words(k.size) >> np.uint64(43)).astype(np.float64)
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
        e = _bits._words((k.size + 1) // 2).view(np.uint32)[:k.size].astype(np.float64)
        wk = wd[k] * 2.0**32 + e  # exact: < 2^48
        lo, hi = _exp._exp_bounds(x[k], 2.0**(_DBITS + 32))
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
