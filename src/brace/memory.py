"""Dense associative memories: LSR (log-sum-ReLU / Epanechnikov) and LSE energies.

``docs/spec.md`` §1. A bank ``D = (X_1, …, X_n)`` is an ``(n, d)`` float32 or float64
array (an in-memory array, a ``numpy.memmap`` or a row-chunked ``dask.array.Array``;
docs/scale.md), used in place without a copy. Centres, outputs and sums are float64.

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
(ties exactly at ``r`` are in the gate). In low dimension a KD-tree proposes the
candidates instead (``index=``); the decision is the same direct formula.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._fingerprint import BankHasher, row_block
from ._validation import (
    check_int_at_least,
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
    "BankMutatedError",
    "band_coefficients",
    "BANK_DTYPES",
    "pins_bank",
]

LOG_FLOOR = float(np.finfo(np.float64).tiny)
_EPS = float(np.finfo(np.float64).eps)
_U = _EPS / 2.0  # unit roundoff of float64
_EPS32 = float(np.finfo(np.float32).eps)
_BIG32 = 1e30  # squared norms at or above this get an infinite band (always recomputed):
_BIG64 = 1e300  # float32 / float64 tiles
_BLOCK_ELEMS = 1 << 21  # entries of one (centres × bank-block) distance tile
_ROW_BLOCK = 2048  # bank rows per tile: fixed, so per-centre sums never depend on batching
_SPARSE_DENSITY = 0.05  # gate density below which gate sums are a CSR product, not a GEMM
BANK_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_DEDUPE = True  # LSRMemory.gate_pass passes bit-identical centres once (benchmarks turn it off)


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


@dataclass(frozen=True)
class GatePass:
    """Statistics of one pass over the bank for ``m`` centres.

    Attributes
    ----------
    counts : (m,) int64 — ``|I(D, c)|`` per centre (membership by :func:`direct_sqdist`).
    sums : (m, d) float64 — ``Σ_{i ∈ I(D, c)} X_i``, accumulated in float64 (CSR
        or dense mask products over fixed row blocks; with ``group_size`` the centres of
        each group are processed on their own, so a group's sums are bit-identical to a
        pass over that group alone).
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


def _nz2(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a C-contiguous 2-D mask (row-major order), via ``flatnonzero``
    (several times faster than 2-D ``nonzero``)."""
    flat = np.flatnonzero(mask)
    return np.divmod(flat, mask.shape[1])


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inv)``: indices of the first occurrence of each distinct row of ``a``
    (byte-wise, in order of appearance) and, for every row, its position in ``first``."""
    v = np.ascontiguousarray(a).view(np.dtype((np.void, a.dtype.itemsize * a.shape[1])))
    _, first, inv = np.unique(v.ravel(), return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[inv.ravel()]


def _csr_sum(mk: np.ndarray, cnt: np.ndarray, tot: int, X64: np.ndarray) -> np.ndarray:
    """``mk @ X64`` for a sparse 0/1 mask as a CSR product: each centre's gate rows are
    added in float64 in row order (1·x is exact), several times faster than the dense
    float64 GEMM below density ``_SPARSE_DENSITY`` (docs/scale.md)."""
    from scipy.sparse import csr_array

    ptr = np.zeros(mk.shape[0] + 1, dtype=np.int64)
    np.cumsum(cnt, out=ptr[1:])
    idx = np.flatnonzero(mk) % mk.shape[1]
    A = csr_array((np.ones(tot), idx, ptr), shape=mk.shape)
    return A @ X64


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
    """
    with np.errstate(over="ignore", invalid="ignore"):  # huge rows: recomputed directly
        return _gate_pass(bank, bank_sqnorm, centres, radius, pairs, near_centres,
                          near_radius, near_tolerance, group_size, hasher, after_block)


def _gate_pass(bank, bank_sqnorm, centres, radius, pairs, near_centres, near_radius,
               near_tolerance, group_size, hasher, after_block) -> GatePass:
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
                if tot <= _SPARSE_DENSITY * mk.size:
                    sums[c0:c1_] += _csr_sum(mk, cnt, tot, X64)
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


class BankMutatedError(RuntimeError):
    """The bank changed after the memory validated it (docs/scale.md, "No copies")."""


def _is_dask(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")


def _check_shape(shape: tuple[int, ...], name: str = "bank") -> None:
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d); got shape {shape}.")
    if shape[0] == 0:
        raise ValueError(f"{name} is empty: it must hold at least one memory (n >= 1).")
    if shape[1] == 0:
        raise ValueError(f"{name} has dimension d = 0; need d >= 1.")


@dataclass
class _BankState:
    """A validated bank: the caller's array (read-only view, never copied when float32 or
    float64), its cached float64 squared norms (in-memory banks only) and fingerprint."""

    source: Any
    X: Any
    sq: np.ndarray | None
    kind: str  # "memory" | "mmap" | "dask"
    digest: str
    release: Any = None  # mmap: callback dropping a processed block's pages
    extra: dict | None = None  # backend caches (KD-tree, Dask chunk digests)


def _mmap_release(X: np.ndarray) -> Any:
    """``after_block`` for a C-contiguous ``numpy.memmap``: drop the block's pages from
    this process's resident set (they are re-read from the file when needed)."""
    import mmap as _mmap

    mm = getattr(X, "_mmap", None)
    # only shared mappings: dropping the pages of a private ("c") map would lose edits
    if mm is None or not hasattr(mm, "madvise") or not X.flags.c_contiguous \
            or getattr(X, "mode", None) not in ("r", "r+"):
        return None
    try:
        probe = np.frombuffer(mm, dtype=np.uint8)
        base = probe.ctypes.data
        del probe
    except (TypeError, ValueError, BufferError):  # pragma: no cover - platform specific
        return None
    page = _mmap.PAGESIZE
    row = X.strides[0]
    start0 = X.ctypes.data - base

    def release(b0: int, b1: int) -> None:
        lo = (start0 + b0 * row) // page * page
        hi = start0 + b1 * row
        try:
            mm.madvise(_mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):  # pragma: no cover - best effort
            pass

    return release


def _validate_numpy(bank: Any) -> _BankState:
    arr = bank if isinstance(bank, np.ndarray) else np.asarray(bank)
    if arr.dtype == bool:
        raise TypeError("bank must hold real numbers; got a boolean array.")
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"bank must hold real numbers (integer or float); got dtype {arr.dtype}.")
    _check_shape(arr.shape)
    kind = "mmap" if isinstance(arr, np.memmap) else "memory"
    if arr.dtype not in BANK_DTYPES:
        # integers and other float widths: one float64 conversion, owned by the memory
        arr = np.asarray(arr, dtype=np.float64, order="C")
        kind = "memory"
    X = arr.view()
    X.flags.writeable = False
    n, d = X.shape
    h = BankHasher((n, d), X.dtype)
    sq = np.empty(n) if kind == "memory" else None
    step = row_block(d, X.dtype.itemsize)
    release = _mmap_release(X) if kind == "mmap" else None
    bad = 0
    for b0 in range(0, n, step):
        Xb = X[b0 : b0 + step]
        bad += int(Xb.size - np.count_nonzero(np.isfinite(Xb)))
        h.update(Xb)
        if sq is not None:
            sq[b0 : b0 + Xb.shape[0]] = _row_sqnorm(Xb)
        if release is not None:
            release(b0, b0 + Xb.shape[0])
    if bad:
        raise ValueError(f"bank contains {bad} non-finite value(s) (NaN or inf); every value "
                         "must be finite (drop or impute those rows).")
    return _BankState(bank, X, sq, kind, h.hexdigest(), release, {"unchecked": True})


def _validate(bank: Any) -> _BankState:
    if _is_dask(bank):
        from ._dask import validate_dask

        return validate_dask(bank)
    return _validate_numpy(bank)


def _mutated(what: str) -> BankMutatedError:
    return BankMutatedError(
        f"the bank was modified after this memory validated it ({what}); the memory does "
        "not copy the bank, so it must not change while in use. Assign the new array to "
        "`bank` (mem.bank = new_bank) to use new contents."
    )


class _MemoryBase:
    """Shared validation and caching of the bank (validated at use, cached by identity).

    The bank is not copied (float32 and float64 arrays, memory maps and Dask arrays are
    used in place; docs/scale.md, "No copies"): the memory keeps a read-only view and a
    SHA-256 fingerprint, and every pass re-hashes the rows it reads; a bank edited in
    place after validation raises :class:`BankMutatedError` instead of being used. To
    change the bank, assign a new array to ``bank``. Inside :meth:`_pinned` (every
    public call) the bank is verified once at entry and once at exit instead.
    """

    bank: Any

    def _pin(self) -> _BankState | None:
        """The state pinned by this thread's enclosing :meth:`_pinned` scope, if any."""
        pins = getattr(self, "_pins", None)
        got = None if pins is None else pins.get(threading.get_ident())
        return None if got is None else got[0]

    def _is_pinned(self, st: _BankState) -> bool:
        """Passes on ``st`` may skip their own hashing (verified at the scope's exit)."""
        return st.kind != "dask" and self._pin() is st

    @contextlib.contextmanager
    def _pinned(self):
        """One public call's scope: the bank is verified at entry and at exit, and the
        passes inside skip their per-pass hashing (docs/scale.md, "No copies").

        A mutation during the call raises :class:`BankMutatedError` at exit, so the
        call's result is never returned. Scopes nest (only the outermost verifies) and
        are per thread. Dask banks keep their per-pass chunk digests (computed on the
        workers while they read the chunks), so their scope adds no check.
        """
        tid = threading.get_ident()
        pins = self.__dict__.setdefault("_pins", {})
        if tid in pins:
            st, depth = pins[tid]
            pins[tid] = (st, depth + 1)
            try:
                yield st
            finally:
                pins[tid] = (st, depth)
            return
        st = self._state()
        # the first scope after validation skips the entry hash: validation just computed
        # the digest, and the exit check compares against it
        if st.kind != "dask" and not st.extra.pop("unchecked", False):
            self._verify(st)
        pins[tid] = (st, 1)
        try:
            yield st
        finally:
            del pins[tid]
        if st.kind != "dask":
            self._verify(st)  # reached only when the body did not raise
        if st.source is not self.bank:
            raise _mutated("`bank` was reassigned during the call")

    def _state(self) -> _BankState:
        st = getattr(self, "_bank_cache", None)
        if st is None or st.source is not self.bank:
            st = _validate(self.bank)
            self._bank_cache = st
        return st

    def _verify(self, st: _BankState) -> None:
        """Re-hash the whole bank (passes that do not read every row, such as the KD-tree
        pass and the public ``_bank()`` accessor); a no-op inside a pinned scope."""
        if self._is_pinned(st):
            return
        if st.kind == "dask":
            from ._dask import verify_dask

            verify_dask(st)
            return
        h = BankHasher(st.X.shape, st.X.dtype)
        step = row_block(st.X.shape[1], st.X.dtype.itemsize)
        for b0 in range(0, st.X.shape[0], step):
            h.update(st.X[b0 : b0 + step])
            if st.release is not None:
                st.release(b0, min(b0 + step, st.X.shape[0]))
        if h.hexdigest() != st.digest:
            raise _mutated("fingerprint mismatch")

    def _bank(self) -> tuple[Any, np.ndarray | None]:
        """The validated bank (read-only, float32 or float64; a ``numpy.memmap`` or a
        ``dask.array.Array`` as given) and its float64 squared norms (``None`` for memory
        maps and Dask banks). Verifies the fingerprint."""
        st = self._state()
        self._verify(st)
        return st.X, st.sq

    @property
    def n_memories(self) -> int:
        return int(self._state().X.shape[0])

    @property
    def dim(self) -> int:
        return int(self._state().X.shape[1])

    def _points(self, y: Any, name: str = "y") -> tuple[np.ndarray, bool]:
        return check_queries(y, self.dim, name=name)

    def _blocks(self, step: int | None = None):
        """Yield ``(b0, block)`` numpy row blocks of the verified bank."""
        st = self._state()
        X = st.X
        n, d = X.shape
        if st.kind == "dask":
            from ._dask import iter_blocks

            yield from iter_blocks(st)
            return
        self._verify(st)
        step = step or row_block(d, X.dtype.itemsize)
        for b0 in range(0, n, step):
            yield b0, X[b0 : b0 + step]

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
        with self._pinned():
            for t in range(1, T + 1):
                out[:, t] = self._step_validated(out[:, t - 1])
        return out[0] if was_1d else out

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


_CONTROLLER: Any = None


def _blas_threads(threads: int | None) -> Any:
    """A context limiting BLAS to ``threads`` threads (threadpoolctl); ``None``: as is."""
    global _CONTROLLER
    if threads is None:
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=threads, user_api="blas")


def _check_threads(threads: Any) -> int | None:
    if threads is None:
        return None
    return check_int_at_least("threads", threads, 1)


INDEXES = ("auto", "brute", "kdtree")
KDTREE_MAX_DIM = 8  # index="auto" uses the KD-tree for in-memory banks with d ≤ this
KDTREE_MIN_ROWS = 4096  # ... and at least this many rows


def pins_bank(func: Any) -> Any:
    """Decorator: run a public call inside its memory's :meth:`_MemoryBase._pinned` scope.

    The memory is the first argument that is a memory, or whose ``_memory`` attribute is
    one (``PrivateMemory``); without one the call runs as is.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for a in (*args, *kwargs.values()):
            mem = a if isinstance(a, _MemoryBase) else getattr(a, "_memory", None)
            if isinstance(mem, _MemoryBase):
                with mem._pinned():
                    return func(*args, **kwargs)
        return func(*args, **kwargs)

    return wrapper


class LSRMemory(_MemoryBase):
    """Log-sum-ReLU (Epanechnikov) dense associative memory (``docs/spec.md`` §1).

    Parameters
    ----------
    bank : array_like, numpy.memmap or dask.array.Array, shape (n, d)
        Stored memories. float32 and float64 arrays are used in place, without a copy
        (read-only view plus fingerprint; editing the array afterwards is detected and
        refused, docs/scale.md); memory maps (``np.load(path, mmap_mode="r")``) are read
        block by block; a Dask array chunked by rows runs each pass as a map-reduce on
        the active scheduler. Other integer and float dtypes are cast to float64 once;
        other dtypes, non-finite values, an empty bank or a non-2-D array are refused.
    beta : float, optional
        Inverse temperature ``β > 0``.
    radius : float, optional
        Support radius ``r > 0``. Exactly one of ``beta`` and ``radius``; ``r = sqrt(2/β)``.
    index : {"auto", "brute", "kdtree"}, default "auto"
        How gate candidates are found. ``"kdtree"``: a ``scipy.spatial.cKDTree`` over the
        bank (built once, a float64 copy of the bank) proposes candidates within
        ``r(1 + 1e-9)``; ``"brute"``: blocked distance tiles. ``"auto"`` takes the tree for
        in-memory banks with ``d ≤ 8`` and ``n ≥ 4096``, pass by pass unless the gates
        look dense (a sampled share of the bank above ``0.08/d`` per gate, where brute
        force is faster). Results are identical either way (membership is always the
        direct formula); the choice only changes the run time.
    threads : int or None, default 1
        BLAS threads during a pass (threadpoolctl). One thread measured fastest on the
        2-core development machine (docs/benchmarks.md); ``None`` leaves BLAS as is.

    Examples
    --------
    >>> import numpy as np
    >>> mem = LSRMemory(np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]]), radius=1.5)
    >>> mem.step(np.array([0.2, 0.0])).round(3).tolist()
    [0.5, 0.0]
    """

    def __init__(
        self,
        bank: Any,
        *,
        beta: float | None = None,
        radius: float | None = None,
        index: str = "auto",
        threads: int | None = 1,
    ):
        self.bank = bank
        self.beta = beta
        self.radius = radius
        self.index = index
        self.threads = threads

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

    def _index(self, st: _BankState) -> str:
        if self.index not in INDEXES:
            raise ValueError(f"index must be one of {INDEXES}; got {self.index!r}.")
        n, d = st.X.shape
        if self.index == "kdtree":
            if st.kind != "memory":
                raise ValueError(
                    f"index='kdtree' needs an in-memory bank; this bank is a {st.kind} bank "
                    "(a tree would load it whole). Use index='brute' or 'auto'."
                )
            return "kdtree"
        if self.index == "auto" and st.kind == "memory" and d <= KDTREE_MAX_DIM \
                and n >= KDTREE_MIN_ROWS:
            return "kdtree"
        return "brute"

    def gate_pass(self, centres: np.ndarray, **kw: Any) -> GatePass:
        """One bank pass for validated ``(m, d)`` float64 centres (see :func:`gate_pass`).

        The backend follows the bank and ``index``; every backend gives the same counts,
        memberships, pair counts and near-boundary rows (docs/scale.md). Without ``kw``,
        bit-identical centres (converged states) are passed once and their statistics
        shared (:func:`_distinct_rows`); membership is a function of the row and the
        centre, so counts are unchanged.
        """
        if not kw and _DEDUPE and centres.shape[0] > 1:
            first, inv = _distinct_rows(centres)
            if first.size < centres.shape[0]:
                gp = self.gate_pass(centres[first])
                return GatePass(gp.counts[inv], gp.sums[inv])
        st = self._state()
        r = self.radius_
        index = self._index(st)
        threads = _check_threads(self.threads)
        with _blas_threads(threads):
            if st.kind == "dask":
                from ._dask import dask_gate_pass

                return dask_gate_pass(st, centres, r, threads=threads, **kw)
            if index == "kdtree" and self.index == "auto":
                from ._spatial import dense_gates

                if dense_gates(st.X, centres, r):
                    index = "brute"
            if index == "kdtree":
                from ._spatial import kdtree_gate_pass

                self._verify(st)
                return kdtree_gate_pass(st, centres, r, **kw)
            h = None if self._is_pinned(st) else BankHasher(st.X.shape, st.X.dtype)
            gp = gate_pass(st.X, st.sq, centres, r, hasher=h, after_block=st.release, **kw)
            if h is not None and h.hexdigest() != st.digest:
                raise _mutated("fingerprint mismatch")
            return gp

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
        r2 = self.radius_**2
        mask = np.empty((Y.shape[0], self.n_memories), dtype=bool)
        for b0, Xb in self._blocks():
            for i in range(Y.shape[0]):
                mask[i, b0 : b0 + Xb.shape[0]] = direct_sqdist(Xb, Y[i]) <= r2
        return mask[0] if was_1d else mask

    def _kernel_sum(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``S(y) = Σ_i ReLU(1 - (β/2)‖y - X_i‖²)``, ``Σ_{i∈I(y)} (y - X_i)`` and counts."""
        beta = self.beta_
        r2 = self.radius_**2
        S = np.zeros(Y.shape[0])
        cnt = np.zeros(Y.shape[0])
        msum = np.zeros_like(Y)
        for _, Xb in self._blocks(row_block(self.dim, 8)):
            X64 = np.asarray(Xb, dtype=np.float64)
            for i in range(Y.shape[0]):  # loop over queries, vectorised over memories
                d2 = direct_sqdist(X64, Y[i])
                S[i] += np.maximum(1.0 - 0.5 * beta * d2, 0.0).sum()
                mk = d2 <= r2
                cnt[i] += mk.sum()
                msum[i] += X64[mk].sum(axis=0)
        num = cnt[:, None] * Y - msum
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
    more does not overflow. The bank is handled as for :class:`LSRMemory` (no copy).
    """

    def __init__(self, bank: Any, *, beta: float):
        self.bank = bank
        self.beta = beta

    @property
    def beta_(self) -> float:
        return check_positive("beta", self.beta)

    def _stream(self, Z: np.ndarray, want_mean: bool) -> tuple[np.ndarray, np.ndarray | None]:
        beta = self.beta_
        m = np.full(Z.shape[0], -np.inf)
        s = np.zeros(Z.shape[0])
        acc = np.zeros_like(Z) if want_mean else None
        step = min(_block_size(Z.shape[0], self.n_memories), row_block(self.dim, 8))
        for _, Xr in self._blocks(step):
            Xb = np.asarray(Xr, dtype=np.float64)
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
