"""Dense associative memories: LSR (log-sum-ReLU / Epanechnikov) and LSE energies.

``docs/spec.md`` §1. A bank ``D = (X_1, …, X_n)`` is an ``(n, d)`` float64 array.

* LSR energy, ``β > 0``, support radius ``r = sqrt(2/β)``::

      E_LSR(z; D) = -(1/β) · log( Σ_i ReLU(1 - (β/2)·‖z - X_i‖²) )

  The sum is zero outside the union of the support balls; there the log gets the floor
  ``LOG_FLOOR`` (the smallest positive float64), so the energy is a finite plateau
  ``-(1/β)·log(LOG_FLOOR)`` instead of ``+inf``.
* Gate (closed ball) ``I(D, y) = {i : ‖X_i - y‖ ≤ r}``.
* Retrieval map ``Φ_D(y)`` = unweighted mean of the gate, or ``y`` when the gate is empty
  (mean shift with the flat kernel; the stationary-point condition of ``E_LSR``).
* LSE energy ``E_LSE(z) = -(1/β) log Σ_i exp(β zᵀX_i)``, update ``z ← softmax(β X z)ᵀ X``.

Distances are computed by matrix products in blocks of bank rows, so memory stays
bounded by ``O(Q · block)`` and never holds a ``Q × n × d`` array. Squared distances
that fall within the floating-point error band of ``r²`` are recomputed directly as
``Σ_j (X_ij - y_j)²``, so gate membership at the radius is decided by the direct formula
(ties exactly at ``r`` are in the gate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validation import (
    check_bank,
    check_output_size,
    check_positive,
    check_queries,
    check_radius_beta,
    check_steps,
)

__all__ = [
    "LSRMemory",
    "LSEMemory",
    "GatePass",
    "gate_pass",
    "direct_sqdist",
    "mean_rounding_bound",
    "LOG_FLOOR",
]

LOG_FLOOR = float(np.finfo(np.float64).tiny)
_EPS = float(np.finfo(np.float64).eps)
_U = _EPS / 2.0  # unit roundoff of float64
_BLOCK_ELEMS = 1 << 21  # entries of one (centres × bank-block) distance tile
_ROW_BLOCK = 2048  # bank rows per tile: fixed, so per-centre sums never depend on batching



def _block_size(n_centres: int, n: int) -> int:
    return max(1, min(n, _BLOCK_ELEMS // max(1, n_centres)))


def direct_sqdist(rows: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The canonical squared distance ``Σ_j fl(X_ij − c_j)²`` (float64), row by row.

    Gate membership is *defined* as ``direct_sqdist(X_i, c) <= fl(r·r)``: a function of
    the row and the centre only, whatever path computed it (``docs/privacy.md``,
    floating point). Its relative error is at most ``(d + 2)·u`` (every term is
    non-negative and each subtraction is exact up to one rounding), independent of the
    magnitude of the coordinates.
    """
    diff = rows - centres
    return (diff * diff).sum(axis=-1)


def mean_rounding_bound(n: int, d: int, radius: float, scale: float) -> float:
    """Bound on ``‖Φ̃_D(c) − Φ_D(c)‖`` for any bank of ``n`` rows and centre ``‖c‖_∞ ≤ scale``.

    ``Φ̃`` is the computed gate mean ``fl(fl(Σ_{i ∈ I} X_i) / m)``. Members lie within
    ``r⁺ = r(1 + 4(d+2)u)`` of ``c``, so ``|X_ij| ≤ scale + r⁺``; a sum of ``m ≤ n`` terms
    in any order errs by ``≤ γ_{n−1}·Σ|X_ij|`` and the division adds one rounding:
    ``|μ̃_j − μ_j| ≤ γ_{n+1}·(scale + r⁺)`` per coordinate, ``γ_k = ku/(1 − ku)``.
    """
    rp = radius * (1.0 + 4.0 * (d + 2) * _U)
    k = (n + 1) * _U
    if not k < 0.5:
        raise ValueError(f"the bank is too large for float64 accounting: n = {n}.")
    return 1.000001 * math.sqrt(d) * k / (1.0 - k) * (scale + rp)


@dataclass(frozen=True)
class GatePass:
    """Statistics of one pass over the bank for ``m`` centres.

    Attributes
    ----------
    counts : (m,) int64 — ``|I(D, c)|`` per centre (membership by :func:`direct_sqdist`).
    sums : (m, d) — ``Σ_{i ∈ I(D, c)} X_i`` (matrix products over fixed row blocks; with
        ``group_size`` the centres of each group are multiplied on their own, so a group's
        sums are bit-identical to a pass over that group alone).
    pair_counts : (p,) int64 or None — ``|I(D, c_a) ∩ I(D, c_b)|`` for requested pairs.
    near_rows, near_dist : int64 / float64 arrays or None — for the requested centres,
        every (centre row, distance) with distance ≤ the requested near radius; each
        distance is within ``near_tolerance`` of the exact one (computed directly where
        the expansion's per-row rounding bound does not guarantee that).
    """

    counts: np.ndarray
    sums: np.ndarray
    pair_counts: np.ndarray | None = None
    near_rows: np.ndarray | None = None
    near_dist: np.ndarray | None = None

    def means(self, centres: np.ndarray) -> np.ndarray:
        """``Φ_D(c)`` for each centre: the gate mean, or the centre when the gate is empty."""
        out = centres.copy()
        nz = self.counts > 0
        out[nz] = self.sums[nz] / self.counts[nz, None]
        return out


def gate_pass(
    bank: np.ndarray,
    bank_sqnorm: np.ndarray,
    centres: np.ndarray,
    radius: float,
    *,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    near_centres: np.ndarray | None = None,
    near_radius: float | None = None,
    near_tolerance: float = 0.0,
    group_size: int | None = None,
) -> GatePass:
    """One blocked pass over validated ``bank`` for the ``(m, d)`` ``centres``.

    Membership is ``direct_sqdist(X_i, c) ≤ fl(r²)``. The expansion
    ``‖c‖² + ‖X_i‖² − 2cᵀX_i`` only decides the rows whose side of ``r²`` is certain: its
    error is below ``8(d+4)ε(‖c‖² + ‖X_i‖²)`` per row, and adding the direct formula's own
    error ``4(d+2)ε r²`` makes "certain" imply agreement with the direct formula; every
    other row is recomputed directly (a tile-wide band ≥ every row's band is used as the
    filter, which changes only how many rows are recomputed, never the result).
    ``pairs = (a, b)`` also returns ``|I(c_a) ∩ I(c_b)|``. ``near_centres`` (indices into
    ``centres``) with ``near_radius`` also returns, for those centres, every distance
    ``≤ near_radius``, each within ``near_tolerance`` of the exact distance (expansion
    where its per-row bound allows, else direct; ``near_tolerance = 0``: always direct).
    ``group_size``: centres are processed in consecutive groups of this size (each group
    in chunks of at most ``_BLOCK_ELEMS / _ROW_BLOCK``), so a group's results do not
    depend on the other groups.
    """
    n, d = bank.shape
    m = centres.shape[0]
    r2 = radius * radius
    csq = np.einsum("ij,ij->i", centres, centres)
    counts = np.zeros(m, dtype=np.int64)
    sums = np.zeros((m, d))
    pair_counts = None if pairs is None else np.zeros(len(pairs[0]), dtype=np.int64)
    near_rows: list[np.ndarray] = []
    near_dist: list[np.ndarray] = []
    if near_centres is not None:
        near_centres = np.asarray(near_centres, dtype=np.int64)
        n_extra = float(near_radius) ** 2 - r2
        near_pos = np.full(m, -1, dtype=np.int64)  # centre index -> position in near_centres
        near_pos[near_centres] = np.arange(near_centres.size)
    c1 = 8.0 * (d + 4) * _EPS
    c2 = 4.0 * (d + 2) * _EPS * r2 + 1e-300
    thr = r2 - csq  # ‖X_i - c‖² ≤ r²  ⟺  ‖X_i‖² - 2cᵀX_i - (r² - ‖c‖²) ≤ 0
    cb = max(1, _BLOCK_ELEMS // _ROW_BLOCK)
    gs = m if group_size is None else max(1, int(group_size))
    chunks = [(g0 + c0, min(g0 + c0 + cb, g0 + gs, m))
              for g0 in range(0, m, gs) for c0 in range(0, min(gs, m - g0), cb)]
    for b0 in range(0, n, _ROW_BLOCK):
        Xb = bank[b0 : b0 + _ROW_BLOCK]
        xsq = bank_sqnorm[b0 : b0 + _ROW_BLOCK]
        xmax = xsq.max(initial=0.0)
        mask = np.empty((m, Xb.shape[0]), dtype=bool)
        for c0, c1_ in chunks:
            C = centres[c0:c1_]
            # e = d2 - r², from the expansion
            e = C @ Xb.T
            e *= -2.0
            e += xsq[None, :]
            e -= thr[c0:c1_, None]
            band = c1 * (csq[c0:c1_] + xmax) + c2  # ≥ the band of every row
            mk = e <= 0.0
            # `~(… > …)` also selects NaN from inf − inf at huge coordinates
            ci, xi = np.nonzero(~(np.abs(e) > band[:, None]))
            if ci.size:
                d2 = direct_sqdist(Xb[xi], C[ci])
                mk[ci, xi] = d2 <= r2
                e[ci, xi] = d2 - r2
            mask[c0:c1_] = mk
            counts[c0:c1_] += mk.sum(axis=1)
            sums[c0:c1_] += mk.astype(np.float64) @ Xb
            if near_centres is not None:
                loc = np.flatnonzero(near_pos[c0:c1_] >= 0)
                if loc.size == 0:
                    continue
                sel = loc + c0
                sub = e[loc]
                rows, cols = np.nonzero(sub <= n_extra + band[loc, None])
                if not rows.size:
                    continue
                nb = c1 * (csq[sel[rows]] + xsq[cols]) + c2  # this row's own bound
                ok = sub[rows, cols] <= n_extra + nb
                rows, cols, nb = rows[ok], cols[ok], nb[ok]
                dist = np.sqrt(np.maximum(sub[rows, cols] + r2, 0.0))
                # the expansion's error in d² is ≤ nb, so in the distance ≤ nb/dist; where
                # that could exceed near_tolerance, recompute directly
                redo = ~(dist * near_tolerance >= nb) if near_tolerance else slice(None)
                dist[redo] = np.sqrt(direct_sqdist(Xb[cols[redo]], C[loc[rows[redo]]]))
                keep = dist <= near_radius
                near_rows.append(near_pos[sel[rows[keep]]])  # index into near_centres
                near_dist.append(dist[keep])
        if pairs is not None:
            pair_counts += (mask[pairs[0]] & mask[pairs[1]]).sum(axis=1)
    if near_centres is not None:
        nrow = np.concatenate(near_rows) if near_rows else np.zeros(0, dtype=np.int64)
        ndist = np.concatenate(near_dist) if near_dist else np.zeros(0)
    else:
        nrow = ndist = None
    return GatePass(counts, sums, pair_counts, nrow, ndist)


class _MemoryBase:
    """Shared validation and caching of the bank (validated at use, cached by identity).

    The validated bank is a private snapshot taken at first use: editing the caller's
    array in place afterwards does not change (or corrupt) the memory. To change the
    bank, assign a new array to ``bank``.
    """

    bank: Any

    def _bank(self) -> tuple[np.ndarray, np.ndarray]:
        cache = getattr(self, "_bank_cache", None)
        if cache is not None and cache[0] is self.bank:
            return cache[1], cache[2]
        X = check_bank(self.bank)
        if np.may_share_memory(X, self.bank):
            # check_bank made no copy: snapshot it, so that in-place edits of the caller's
            # array cannot leave the cached squared norms stale (or slip in NaN/inf).
            X = X.copy()
        sq = np.einsum("ij,ij->i", X, X)
        self._bank_cache = (self.bank, X, sq)
        return X, sq

    @property
    def n_memories(self) -> int:
        return self._bank()[0].shape[0]

    @property
    def dim(self) -> int:
        return self._bank()[0].shape[1]

    def _points(self, y: Any, name: str = "y") -> tuple[np.ndarray, bool]:
        X, _ = self._bank()
        return check_queries(y, X.shape[1], name=name)

    def step(self, y: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def retrieve(self, queries: Any, steps: int) -> np.ndarray:
        """Noiseless retrieval ``z_0 = q``, ``z_t = Φ(z_{t-1})``.

        Returns an array of shape ``(Q, steps + 1, d)`` (``(steps + 1, d)`` for a single
        ``(d,)`` query) holding ``q`` at index 0.
        """
        Y, was_1d = self._points(queries, "queries")
        T = check_steps(steps)
        check_output_size((Y.shape[0], T + 1, Y.shape[1]), "the trajectory")
        out = np.empty((Y.shape[0], T + 1, Y.shape[1]))
        out[:, 0] = Y
        for t in range(1, T + 1):
            out[:, t] = self._step_validated(out[:, t - 1])
        return out[0] if was_1d else out

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


class LSRMemory(_MemoryBase):
    """Log-sum-ReLU (Epanechnikov) dense associative memory (``docs/spec.md`` §1).

    Parameters
    ----------
    bank : array_like, shape (n, d)
        Stored memories. Integer and float inputs are cast to float64; other dtypes,
        non-finite values, an empty bank or a non-2-D array are refused at use.
    beta : float, optional
        Inverse temperature ``β > 0``.
    radius : float, optional
        Support radius ``r > 0``. Exactly one of ``beta`` and ``radius``; ``r = sqrt(2/β)``.

    Examples
    --------
    >>> import numpy as np
    >>> mem = LSRMemory(np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]]), radius=1.5)
    >>> mem.step(np.array([0.2, 0.0])).round(3).tolist()
    [0.5, 0.0]
    """

    def __init__(self, bank: Any, *, beta: float | None = None, radius: float | None = None):
        self.bank = bank
        self.beta = beta
        self.radius = radius

    @property
    def radius_(self) -> float:
        """The validated support radius ``r``."""
        return check_radius_beta(self.beta, self.radius)

    @property
    def beta_(self) -> float:
        """The validated inverse temperature ``β = 2/r²``."""
        if self.beta is not None:
            return check_positive("beta", self.beta)
        return 2.0 / self.radius_**2

    def gate_pass(self, centres: np.ndarray, **kw: Any) -> GatePass:
        """One bank pass for validated ``(m, d)`` float64 centres (see :func:`gate_pass`)."""
        X, sq = self._bank()
        return gate_pass(X, sq, centres, self.radius_, **kw)

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:
        return self.gate_pass(Y).means(Y)

    def step(self, y: Any) -> np.ndarray:
        """The retrieval map ``Φ_D(y)``: mean of the closed-ball gate, or ``y`` if empty."""
        Y, was_1d = self._points(y)
        out = self._step_validated(Y)
        return out[0] if was_1d else out

    def gate(self, y: Any, *, counts: bool = False) -> np.ndarray:
        """Gate ``I(D, y)`` as a boolean ``(Q, n)`` mask, or its sizes ``(Q,)`` if ``counts``.

        The mask form materialises ``Q × n`` booleans; use ``counts=True`` for large banks.
        """
        Y, was_1d = self._points(y)
        if counts:
            c = self.gate_pass(Y).counts
            return c[0] if was_1d else c
        X, sq = self._bank()
        r2 = self.radius_**2
        d2 = self._sqdist(Y, X, sq)
        mask = d2 <= r2
        return mask[0] if was_1d else mask

    @staticmethod
    def _sqdist(Y: np.ndarray, X: np.ndarray, sq: np.ndarray) -> np.ndarray:
        """Full ``(Q, n)`` squared distances; direct formula (used only by small helpers)."""
        out = np.empty((Y.shape[0], X.shape[0]))
        bs = _block_size(1, X.shape[0])
        for i in range(Y.shape[0]):  # loop over queries, vectorised over memories
            for b0 in range(0, X.shape[0], bs):
                out[i, b0 : b0 + bs] = direct_sqdist(X[b0 : b0 + bs], Y[i])
        return out

    def _kernel_sum(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``S(y) = Σ_i ReLU(1 - (β/2)‖y - X_i‖²)``, ``Σ_{i∈I(y)} (y - X_i)`` and counts."""
        X, sq = self._bank()
        beta = self.beta_
        d2 = self._sqdist(Y, X, sq)
        w = np.maximum(1.0 - 0.5 * beta * d2, 0.0)
        S = w.sum(axis=1)
        mask = (d2 <= self.radius_**2).astype(np.float64)
        cnt = mask.sum(axis=1)
        num = cnt[:, None] * Y - mask @ X
        return S, num, cnt

    def energy(self, z: Any) -> np.ndarray | float:
        """``E_LSR(z; D) = -(1/β) log max(Σ_i ReLU(1 - (β/2)‖z - X_i‖²), LOG_FLOOR)``."""
        Z, was_1d = self._points(z, "z")
        S, _, _ = self._kernel_sum(Z)
        e = -np.log(np.maximum(S, LOG_FLOOR)) / self.beta_
        return float(e[0]) if was_1d else e

    def gradient(self, z: Any) -> np.ndarray:
        """``∇E_LSR(z) = Σ_{i ∈ I(D,z)} (z - X_i) / S(z)``.

        On the open support this is the exact gradient; at the kink ``‖z - X_i‖ = r``
        the closed-ball convention of the gate is used (a one-sided derivative), so the
        zeros of the gradient are exactly the fixed points of ``Φ``. Outside every
        support ball the energy is flat and the gradient is 0.
        """
        Z, was_1d = self._points(z, "z")
        S, num, cnt = self._kernel_sum(Z)
        g = np.where(cnt[:, None] > 0, num / np.maximum(S, LOG_FLOOR)[:, None], 0.0)
        return g[0] if was_1d else g


class LSEMemory(_MemoryBase):
    """Log-sum-exp (modern Hopfield) memory, for comparison (``docs/spec.md`` §1).

    ``E_LSE(z) = -(1/β) log Σ_i exp(β zᵀX_i)``; update ``z ← softmax(β X z)ᵀ X``,
    computed with a streaming (blockwise) log-sum-exp, so ``β·‖x‖`` of order 1e3 or
    more does not overflow.
    """

    def __init__(self, bank: Any, *, beta: float):
        self.bank = bank
        self.beta = beta

    @property
    def beta_(self) -> float:
        return check_positive("beta", self.beta)

    def _stream(self, Z: np.ndarray, want_mean: bool) -> tuple[np.ndarray, np.ndarray | None]:
        X, _ = self._bank()
        beta = self.beta_
        m = np.full(Z.shape[0], -np.inf)
        s = np.zeros(Z.shape[0])
        acc = np.zeros_like(Z) if want_mean else None
        bs = _block_size(Z.shape[0], X.shape[0])
        for b0 in range(0, X.shape[0], bs):
            Xb = X[b0 : b0 + bs]
            logits = beta * (Z @ Xb.T)
            if not np.all(np.isfinite(logits)):
                raise ValueError(
                    "beta * z·x overflows float64 in the LSE energy; rescale the bank, "
                    "the queries or beta."
                )
            bm = logits.max(axis=1)
            new_m = np.maximum(m, bm)
            scale = np.exp(m - new_m)
            w = np.exp(logits - new_m[:, None])
            s = s * scale + w.sum(axis=1)
            if want_mean:
                acc = acc * scale[:, None] + w @ Xb
            m = new_m
        lse = m + np.log(s)
        return lse, (acc / s[:, None] if want_mean else None)

    def energy(self, z: Any) -> np.ndarray | float:
        """``E_LSE(z) = -(1/β) logsumexp(β X z)``."""
        Z, was_1d = self._points(z, "z")
        lse, _ = self._stream(Z, False)
        e = -lse / self.beta_
        return float(e[0]) if was_1d else e

    def gradient(self, z: Any) -> np.ndarray:
        """``∇E_LSE(z) = -softmax(β X z)ᵀ X``."""
        Z, was_1d = self._points(z, "z")
        _, mean = self._stream(Z, True)
        return -mean[0] if was_1d else -mean

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:
        return self._stream(Y, True)[1]

    def step(self, y: Any) -> np.ndarray:
        """``softmax(β X y)ᵀ X``."""
        Y, was_1d = self._points(y)
        out = self._step_validated(Y)
        return out[0] if was_1d else out
