"""The dense gate pass: blocked matrix-product tiles over the bank (``docs/scale.md``).

Gate membership is ``direct_sqdist(X_i, c) ≤ fl(r²)`` (``docs/spec.md`` §1; the
closed ball ``I(D, c) = {i : ‖X_i − c‖ ≤ r}``). Distances are computed by matrix
products in blocks of bank rows, so memory stays bounded by ``O(Q · block)`` and never
holds a ``Q × n × d`` array. Squared distances that fall within the floating-point error
band of ``r²`` are recomputed directly as ``Σ_j (X_ij − y_j)²``, so gate membership at
the radius is decided by the direct formula (ties exactly at ``r`` are in the gate).
Works on any row-sliceable float32/float64 bank: in-memory arrays, memory maps and one
Dask chunk at a time (:mod:`brace.gates.dask`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .contract import GatePass

__all__ = ["gate_pass", "direct_sqdist", "mean_rounding_bound", "band_coefficients"]

_EPS = float(np.finfo(np.float64).eps)
_U = _EPS / 2.0  # unit roundoff of float64
_EPS32 = float(np.finfo(np.float32).eps)
_BIG32 = 1e30  # squared norms at or above this get an infinite band (always recomputed):
_BIG64 = 1e300  # float32 / float64 tiles
_BLOCK_ELEMS = 1 << 21  # entries of one (centres × bank-block) distance tile
_ROW_BLOCK = 2048  # bank rows per tile: fixed, so per-centre sums never depend on batching
_SPARSE_DENSITY = 0.05  # gate density below which gate sums are a CSR product, not a GEMM


def _block_size(n_centres: int, n: int) -> int:
    return max(1, min(n, _BLOCK_ELEMS // max(1, n_centres)))


def direct_sqdist(rows: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The canonical squared distance ``Σ_j fl(X_ij − c_j)²`` (float64), row by row.

    Gate membership is *defined* as ``direct_sqdist(X_i, c) <= fl(r·r)``: a function of
    the row and the centre only, whatever path computed it (``docs/privacy.md``,
    floating point). Its relative error is at most ``(d + 2)·u`` (every term is
    non-negative and each subtraction is exact up to one rounding), independent of the
    magnitude of the coordinates. A float32 row is first cast to float64 (exactly).
    """
    diff = np.asarray(rows, dtype=np.float64) - centres
    return (diff * diff).sum(axis=-1)


def mean_rounding_bound(n: int, d: int, radius: float, scale: float) -> float:
    """Bound on ``‖Φ̃_D(c) − Φ_D(c)‖`` for any bank of ``n`` rows and centre ``‖c‖_∞ ≤ scale``.

    ``Φ̃`` is the computed gate mean ``fl(fl(Σ_{i ∈ I} X_i) / m)``. Members lie within
    ``r⁺ = r(1 + 4(d+2)u)`` of ``c``, so ``|X_ij| ≤ scale + r⁺``; a sum of ``m ≤ n`` terms
    in any order errs by ``≤ γ_{n−1}·Σ|X_ij|`` and the division adds one rounding:
    ``|μ̃_j − μ_j| ≤ γ_{n+1}·(scale + r⁺)`` per coordinate, ``γ_k = ku/(1 − ku)``.
    Holds for float32 banks too: their rows are cast exactly to float64 and summed in
    float64, in whatever order and grouping (row blocks, chunks, trees) a backend uses
    (docs/scale.md, "Floating point for float32 banks").
    """
    rp = radius * (1.0 + 4.0 * (d + 2) * _U)
    k = (n + 1) * _U
    if not k < 0.5:
        raise ValueError(f"the bank is too large for float64 accounting: n = {n}.")
    return 1.000001 * math.sqrt(d) * k / (1.0 - k) * (scale + rp)


def band_coefficients(dtype: Any, d: int, r2: float) -> tuple[float, float]:
    """``(a, b)``: the expansion's per-row certainty band is ``a·(‖c‖² + ‖X_i‖²) + b``.

    The expansion is one GEMM over ``d + 2`` terms, ``[−2c, 1, ‖c‖² − r²]·[x, ‖x‖², 1]``,
    whose error is ``≤ γ_{d+2}·(2S + r²)`` plus the roundings of its inputs
    (``S = ‖c‖² + ‖X_i‖²``; docs/scale.md, "Floating point for float32 banks").
    float64 tiles: ``a = 8(d+4)ε``, ``b = 4(d+2)ε r²`` (this error plus the direct
    formula's own, ``(d+2)u·2S``). float32 tiles add ``2(d+4)ε₃₂·S + (d+4)ε₃₂·r²``,
    twice the proven first-order bound ``1.01(d+4)ε₃₂·S + 0.51(d+4)ε₃₂·r²`` (valid
    while ``(d+6)ε₃₂ ≤ 2e-3``, see :func:`_tile_dtype`).
    """
    a = 8.0 * (d + 4) * _EPS
    b = 4.0 * (d + 2) * _EPS * r2 + 1e-300
    if np.dtype(dtype) == np.float32:
        a += 2.0 * (d + 4) * _EPS32
        b += 1.0 * (d + 4) * _EPS32 * r2
    return a, b


def _tile_dtype(bank_dtype: np.dtype, d: int, r2: float) -> np.dtype:
    """float32 tiles for float32 banks whose rounding analysis applies (docs/scale.md):
    ``(d + 6)·ε₃₂ ≤ 2e-3`` and ``1e-30 ≤ r² ≤ 1e28``; float64 tiles otherwise."""
    if bank_dtype == np.float32 and (d + 6) * _EPS32 <= 2e-3 and 1e-30 <= r2 <= 1e28:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _nz2(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a C-contiguous 2-D mask (row-major order), via ``flatnonzero``
    (several times faster than 2-D ``nonzero``)."""
    flat = np.flatnonzero(mask)
    return np.divmod(flat, mask.shape[1])


def csr_gate_sums(counts: np.ndarray, cols: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each gate's sum over one row tile as a CSR product: gate ``i``'s ``counts[i]``
    members are ``rows[cols[p_i : p_{i+1}]]`` (``p`` the running counts), in row order,
    added in float64 from zero in that order (``1·x`` is exact). This is the canonical sum
    of a tile (``docs/privacy-accounting.md`` §12.1), the same in the dense and KD-tree
    passes, and the dense pass's sum of a sparse tile (several times faster than the
    float64 GEMM below density ``_SPARSE_DENSITY``, docs/scale.md)."""
    from scipy.sparse import csr_array

    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    A = csr_array((np.ones(cols.size), cols, ptr), shape=(counts.size, rows.shape[0]))
    return A @ rows


def _row_sqnorm(Xb: np.ndarray) -> np.ndarray:
    X64 = np.asarray(Xb, dtype=np.float64)
    return np.einsum("ij,ij->i", X64, X64)


def gate_pass(
    bank: np.ndarray,
    bank_sqnorm: np.ndarray | None,
    centres: np.ndarray,
    radius: float,
    *,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    near_centres: np.ndarray | None = None,
    near_radius: float | None = None,
    near_tolerance: float = 0.0,
    group_size: int | None = None,
    hasher: Any = None,
    after_block: Any = None,
    canonical: bool = False,
) -> GatePass:
    """One blocked pass over a validated float32/float64 ``bank`` for ``(m, d)`` centres.

    Membership is ``direct_sqdist(X_i, c) ≤ fl(r²)``. The expansion
    ``‖c‖² + ‖X_i‖² − 2cᵀX_i``, computed in the bank's dtype (:func:`_tile_dtype`), only
    decides the rows whose side of ``r²`` is certain by their own band
    ``a·(‖c‖² + ‖X_i‖²) + b`` (:func:`band_coefficients`); every other row is recomputed
    directly in float64. Whether a row is recomputed depends only on that row and the
    centre (a tile-wide band is used as a cheap prefilter, then each candidate's own band
    decides). Gate sums are accumulated in float64: a CSR product of the 0/1 mask when the
    gate is sparse (density ≤ ``_SPARSE_DENSITY``), else the dense mask multiplies the
    float64 rows. ``bank_sqnorm`` (float64 ``‖X_i‖²``) may be ``None``: norms are then computed
    per block (memory-mapped and Dask banks).
    ``pairs = (a, b)`` also returns ``|I(c_a) ∩ I(c_b)|``. ``near_centres`` (indices into
    ``centres``) with ``near_radius`` also returns, for those centres, every distance
    ``≤ near_radius``, each within ``near_tolerance`` of the exact distance (expansion
    where its per-row bound allows, else direct; ``near_tolerance = 0``: always direct).
    ``group_size``: centres are processed in consecutive groups of this size (each group
    in chunks of at most ``_BLOCK_ELEMS / _ROW_BLOCK``), so a group's results do not
    depend on the other groups. ``hasher`` (a :class:`brace._fingerprint.BankHasher`)
    is fed every row block in order; ``after_block(b0, b1)`` is called after each block
    (memory-mapped banks release its pages there).
    ``canonical``: every gate sum is the CSR product whatever the density, so that each
    centre's sum is a function of its own members only (the sequential float64 sum of
    its members in row order within each row block, blocks added in order;
    ``docs/privacy-accounting.md`` §12.1). Otherwise the sparse/dense choice per tile
    depends on all the gates of the tile, and the two differ in the last bits.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # huge rows: recomputed directly
        return _gate_pass(bank, bank_sqnorm, centres, radius, pairs, near_centres,
                          near_radius, near_tolerance, group_size, hasher, after_block,
                          canonical)


def _gate_pass(bank, bank_sqnorm, centres, radius, pairs, near_centres, near_radius,
               near_tolerance, group_size, hasher, after_block, canonical) -> GatePass:
    n, d = bank.shape
    m = centres.shape[0]
    r2 = radius * radius
    tdt = _tile_dtype(bank.dtype, d, r2)
    big = _BIG32 if tdt == np.float32 else _BIG64
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
    ca, cb_ = band_coefficients(tdt, d, r2)
    a_c = ca * csq + cb_  # per-centre part of the band
    huge_c = ~(csq < big)  # their band is infinite: always recomputed directly
    a_c[huge_c] = np.inf
    # e = d² − r² = [−2c, 1, −(r² − ‖c‖²)] · [x, ‖x‖², 1]: one GEMM in the tile dtype
    Ca = np.empty((m, d + 2), dtype=tdt)
    Ca[:, :d] = -2.0 * centres
    Ca[:, d] = 1.0
    Ca[:, d + 1] = np.where(huge_c, 0.0, csq - r2)
    cbk = max(1, _BLOCK_ELEMS // _ROW_BLOCK)
    gs = m if group_size is None else max(1, int(group_size))
    chunks = [(g0 + c0, min(g0 + c0 + cbk, g0 + gs, m))
              for g0 in range(0, m, gs) for c0 in range(0, min(gs, m - g0), cbk)]
    Xa = np.empty((min(n, _ROW_BLOCK), d + 2), dtype=tdt)
    Xa[:, d + 1] = 1.0
    for b0 in range(0, n, _ROW_BLOCK):
        Xb = bank[b0 : b0 + _ROW_BLOCK]
        if hasher is not None:
            hasher.update(Xb)
        nb_rows = Xb.shape[0]
        xsq = (_row_sqnorm(Xb) if bank_sqnorm is None
               else bank_sqnorm[b0 : b0 + _ROW_BLOCK])
        b_i = ca * xsq  # per-row part of the band
        huge_x = ~(xsq < big)
        b_i[huge_x] = np.inf
        huge_rows = np.flatnonzero(huge_x)
        Xw = Xa[:nb_rows]
        Xw[:, :d] = Xb
        Xw[:, d] = np.where(huge_x, 0.0, xsq)
        X64 = Xb if Xb.dtype == np.float64 else None  # float64 rows, cast on demand
        bmax = b_i[~huge_x].max(initial=0.0)
        mask = np.empty((m, nb_rows), dtype=bool) if pairs is not None else None
        for c0, c1_ in chunks:
            e = Ca[c0:c1_] @ Xw.T  # e = d² − r² from the expansion
            tband = a_c[c0:c1_] + bmax  # ≥ the band of every finite-band row of the tile
            if tdt == np.float32:
                tband = (tband * (1.0 + 1e-6)).astype(np.float32)
            mk = e <= 0.0
            # prefilter on the tile band; rows/centres with an infinite band (huge norms,
            # where the tile may hold inf or NaN) are added explicitly
            ci, xi = _nz2(np.abs(e) <= tband[:, None])
            hc = np.flatnonzero(huge_c[c0:c1_])
            if huge_rows.size or hc.size:
                k = c1_ - c0
                ci = np.concatenate([ci, np.repeat(np.arange(k), huge_rows.size),
                                     np.repeat(hc, nb_rows)])
                xi = np.concatenate([xi, np.tile(huge_rows, k), np.tile(np.arange(nb_rows),
                                                                         hc.size)])
            if ci.size:
                own = a_c[c0 + ci] + b_i[xi]  # each candidate's own band
                unc = ~(np.abs(e[ci, xi].astype(np.float64)) > own)
                ci, xi = ci[unc], xi[unc]
                if ci.size:
                    d2 = direct_sqdist(Xb[xi], centres[c0 + ci])
                    mk[ci, xi] = d2 <= r2
                    e[ci, xi] = d2 - r2
            if mask is not None:
                mask[c0:c1_] = mk
            cnt = np.count_nonzero(mk, axis=1)
            counts[c0:c1_] += cnt
            tot = int(cnt.sum())
            if tot:
                if X64 is None:
                    X64 = np.asarray(Xb, dtype=np.float64)
                if canonical or tot <= _SPARSE_DENSITY * mk.size:
                    sums[c0:c1_] += csr_gate_sums(cnt, np.flatnonzero(mk) % mk.shape[1],
                                                  X64)
                else:
                    sums[c0:c1_] += mk.astype(np.float64) @ X64
            if near_centres is not None:
                loc = np.flatnonzero(near_pos[c0:c1_] >= 0)
                if loc.size == 0:
                    continue
                sel = loc + c0
                # the clean group fills whole chunks: a view, not a copy
                sub = e[loc[0] : loc[-1] + 1] if loc[-1] - loc[0] + 1 == loc.size else e[loc]
                lim = n_extra + tband[loc].astype(np.float64)
                lim = lim + np.abs(lim) * 1e-6 + 1e-300
                rows_, cols = _nz2(sub <= lim.astype(sub.dtype)[:, None])
                if not rows_.size:
                    continue
                nbd = a_c[sel[rows_]] + b_i[cols]  # this row's own bound
                ev = sub[rows_, cols].astype(np.float64)
                ok = ev <= n_extra + nbd
                rows_, cols, nbd, ev = rows_[ok], cols[ok], nbd[ok], ev[ok]
                dist = np.sqrt(np.maximum(ev + r2, 0.0))
                # the expansion's error in d² is ≤ nbd, so in the distance ≤ nbd/dist;
                # where that could exceed near_tolerance, recompute directly
                redo = ~(dist * near_tolerance >= nbd) if near_tolerance else slice(None)
                dist[redo] = np.sqrt(direct_sqdist(Xb[cols[redo]], centres[sel[rows_[redo]]]))
                keep = dist <= near_radius
                near_rows.append(near_pos[sel[rows_[keep]]])  # index into near_centres
                near_dist.append(dist[keep])
        if pairs is not None:
            pair_counts += (mask[pairs[0]] & mask[pairs[1]]).sum(axis=1)
        if after_block is not None:
            after_block(b0, b0 + nb_rows)
    if near_centres is not None:
        nrow = np.concatenate(near_rows) if near_rows else np.zeros(0, dtype=np.int64)
        ndist = np.concatenate(near_dist) if near_dist else np.zeros(0)
    else:
        nrow = ndist = None
    return GatePass(counts, sums, pair_counts, nrow, ndist)
