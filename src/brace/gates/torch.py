"""Torch banks: the gate pass on the tensor's own device (docs/scale.md, "Torch banks").

``LSRMemory`` accepts a ``torch.Tensor`` of shape ``(n, d)``, dtype float32 or float64,
on any device. The bank stays there: distance tiles, gate masks, counts and float64 sums
are computed on the device, and only ``O(m·d)`` results (plus the near-boundary
distances) come back to the host as numpy arrays. The pass is
:func:`brace.gates.dense.gate_pass` step for step:

* the tiles are the same expansion ``[−2c, 1, ‖c‖² − r²]·[x, ‖x‖², 1]`` in the same
  tile dtype (:func:`.dense._tile_dtype`), built from the same host-rounded centres, and
  a row is decided by the tile only where its own band (:func:`.dense.band_coefficients`)
  makes the side of ``r²`` certain. The band bounds the error of any summation order,
  with or without fused multiply–add, so cuBLAS's or MKL's order does not matter; float32
  tiles are computed with full float32 products (TF32 and other reduced-precision
  float32 products are switched off for the pass, :func:`_exact_float32`);
* every other row is decided by the canonical formula :func:`.dense.direct_sqdist`.
  On the device it is evaluated in numpy's own order (:func:`direct_sqdist_torch`, the
  pairwise summation of ``numpy.add.reduce``); where that value lies within
  ``4γ_d·r²`` of ``fl(r²)`` — where two summation orders could disagree — the row is
  copied to the host and decided by :func:`.dense.direct_sqdist` itself. Counts,
  memberships and pair counts therefore equal the numpy pass exactly, whatever torch's
  arithmetic does;
* gate sums follow the same fixed row tiles of ``_ROW_BLOCK`` rows and the same choice
  per tile (sparse or dense by the density of the tile, always sparse with
  ``canonical``). A sparse tile's sum is the sequential float64 sum of each gate's
  members in row order, started from zero, as the CSR product of the numpy pass; tiles
  are added in order. So canonical sums are bit-identical to the numpy pass, and a gate's
  sum depends on its own members only. Dense tiles are a float64 mask product (exact
  products ``1·x``; the order is covered by :func:`.dense.mean_rounding_bound`);
* near-boundary distances are taken from the tile where its per-row bound allows, else
  computed directly (:func:`direct_sqdist_torch`), each within ``near_tolerance``; the
  square roots are taken on the host by numpy (torch's float64 ``sqrt`` on the CPU is
  not correctly rounded in torch 2.13: about 1 % of values are one ulp off).

Several row tiles are processed per device call (a *super-block*); results do not depend
on that batching. Within a chunk of centres, the distance tile and a dense tile's float64
mask product are computed over slices of centres whose working copies stay within a
fortieth of the bank's bytes (``_SLICE_SHARE``, at least ``_MIN_SLICE`` centres). Counts,
memberships and canonical sums do not depend on the slices (the band holds for any
product order; a dense tile's row of the product is one centre's), and near distances
come in the same order (by centre, then row). Validation (finiteness, float64 squared
norms on the device) and the fingerprint read the bank in row blocks; the fingerprint
hashes each block on the host (one block copied at a time, never the whole bank).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from .._fingerprint import BankHasher, host_array, row_block
from .contract import MAX_COORD, GatePass, _BankState, _check_shape, _mutated, range_error
from .dense import (
    _BIG32,
    _BIG64,
    _BLOCK_ELEMS,
    _ROW_BLOCK,
    _SPARSE_DENSITY,
    _U,
    _tile_dtype,
    band_coefficients,
    direct_sqdist,
)

__all__ = ["validate_torch", "verify_torch", "torch_blocks", "torch_gate_pass",
           "direct_sqdist_torch"]

_TILE_ELEMS_CPU = 1 << 22  # entries of one (centres × super-block) tile on the CPU
_TILE_ELEMS_GPU = 1 << 26  # ... on an accelerator
_EXTRA_SHARE = 0.05  # a pass's working copies stay below this share of the bank's bytes
_PW_BLOCK = 128  # numpy's pairwise-summation block (PW_BLOCKSIZE)
_SLICE_SHARE = 0.025  # a slice of centres' working copies stay below this share of the bank
_MIN_SLICE = 16  # fewest centres per slice of a tile or of a dense tile's product


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - a tensor implies torch is installed
        raise ImportError("a torch bank needs torch: pip install 'brace-dam[mnist]'.") from exc
    return torch


def _np_dtype(torch_dtype: Any) -> np.dtype:
    return np.dtype(str(torch_dtype).removeprefix("torch."))


def validate_torch(bank: Any) -> _BankState:
    """Validate a torch bank on its device: dtype, shape, finiteness, float64 squared
    norms (kept on the device) and the SHA-256 fingerprint (hashed block by block)."""
    torch = _torch()
    if bank.layout != torch.strided:
        raise TypeError(f"a torch bank must be a dense tensor; got layout {bank.layout}. "
                        "Convert it with bank.to_dense().")
    if bank.dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"a torch bank must have dtype torch.float32 or torch.float64; got {bank.dtype}. "
            "The memory does not copy a torch bank: convert it on its device first "
            "(bank.to(torch.float32))."
        )
    if bank.device.type == "meta":
        raise ValueError("a torch bank on the 'meta' device holds no data (only a shape): "
                         "materialise it on a real device (cpu, cuda, …) first.")
    _check_shape(tuple(bank.shape))
    X = bank.detach()  # no autograd graph; shares the storage
    n, d = (int(s) for s in X.shape)
    dt = _np_dtype(X.dtype)
    h = BankHasher((n, d), dt)
    sq = torch.empty(n, dtype=torch.float64, device=X.device)
    bad = torch.zeros((), dtype=torch.int64, device=X.device)
    step = _validation_rows(n, d, dt.itemsize)
    lim = MAX_COORD[dt]  # as contract.count_out_of_range, on the device
    for b0 in range(0, n, step):
        Xb = X[b0 : b0 + step]
        ok = torch.isfinite(Xb) if math.isinf(lim) else Xb.abs() <= lim  # NaN: not ok
        bad += (~ok).sum()
        del ok
        h.update(host_array(Xb))
        X64 = Xb.to(torch.float64)
        X64 = X64.mul_(X64) if X64 is not Xb else X64 * X64  # never write to the bank
        sq[b0 : b0 + Xb.shape[0]] = X64.sum(dim=1)
    nbad = int(bad)
    if nbad:
        raise range_error(nbad, dt)
    return _BankState(bank, X, None, "torch", h.hexdigest(), None,
                      {"unchecked": True, "sq": sq, "dtype": dt})


def _validation_rows(n: int, d: int, itemsize: int) -> int:
    """Rows per validation block: its working copies (the range mask and ``|x|``, the
    float64 squares: ``(itemsize + 10)·d`` bytes a row) stay within ``_EXTRA_SHARE`` of
    the bank's bytes, in whole ``_ROW_BLOCK`` tiles (at least one), and within the
    streaming block of :func:`row_block`. Each row's squared norm is the same float64
    sum whatever the block (a reduction along the row)."""
    per_row = (itemsize + 10) * d
    cap = int(_EXTRA_SHARE * n * d * itemsize // per_row) // _ROW_BLOCK * _ROW_BLOCK
    return max(1, min(row_block(d, itemsize), max(_ROW_BLOCK, cap)))


def _digest(st: _BankState) -> str:
    X = st.X
    n, d = X.shape
    h = BankHasher((n, d), st.extra["dtype"])
    step = row_block(d, st.extra["dtype"].itemsize)
    for b0 in range(0, n, step):
        h.update(host_array(X[b0 : b0 + step]))
    return h.hexdigest()


def verify_torch(st: _BankState) -> None:
    """Re-hash the bank (block by block on the host); raise if it changed."""
    if _digest(st) != st.digest:
        raise _mutated("fingerprint mismatch")


def torch_blocks(st: _BankState, step: int | None = None):
    """``(offset, numpy block)``: the bank copied to the host one row block at a time
    (for the host-side computations: energies, gradients, gate masks, UQ sums)."""
    n, d = st.X.shape
    step = step or row_block(d, st.extra["dtype"].itemsize)
    for b0 in range(0, n, step):
        yield b0, host_array(st.X[b0 : b0 + step])


@contextlib.contextmanager
def _exact_float32(torch: Any, device: Any, threads: int | None):
    """Full float32 products for the pass (no TF32 or bfloat16 inner products: the band of
    :func:`.dense.band_coefficients` assumes float32 rounding), and ``threads`` intra-op
    threads on the CPU; both restored afterwards."""
    prec = torch.get_float32_matmul_precision()
    nthr = torch.get_num_threads()
    if prec != "highest":
        torch.set_float32_matmul_precision("highest")
    if threads is not None and device.type == "cpu" and nthr != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if prec != "highest":
            torch.set_float32_matmul_precision(prec)
        if torch.get_num_threads() != nthr:
            torch.set_num_threads(nthr)


def _pairwise(t: Any, lo: int, n: int) -> Any:
    """``Σ_j t[:, lo + j]`` for ``j < n`` in the order of numpy's pairwise summation
    (``numpy/_core/src/umath/loops_utils.h.src``), vectorised over rows: a row's value
    depends on that row only."""
    if n < 8:
        res = t[:, lo].clone()
        for i in range(1, n):
            res += t[:, lo + i]
        return res
    if n <= _PW_BLOCK:
        r = t[:, lo : lo + 8].clone()
        i = 8
        while i < n - n % 8:
            r += t[:, lo + i : lo + i + 8]
            i += 8
        res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5])
                                                             + (r[:, 6] + r[:, 7]))
        for j in range(i, n):
            res += t[:, lo + j]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(t, lo, n2) + _pairwise(t, lo + n2, n - n2)


def direct_sqdist_torch(rows64: Any, centres64: Any) -> Any:
    """:func:`.dense.direct_sqdist` on the device: ``Σ_j fl(x_j − c_j)²`` in float64,
    summed in numpy's pairwise order (bit-identical to the numpy formula as long as
    numpy keeps that order; membership never relies on it, see :func:`_members`)."""
    diff = rows64 - centres64
    t = diff * diff
    return _pairwise(t, 0, t.shape[1])


def _members(torch: Any, Xs: Any, rows: Any, C64: Any, cidx: Any, centres: np.ndarray,
             r2: float) -> Any:
    """The canonical squared distances of ``(row, centre)`` pairs, with ``d2 <= r2``
    exactly as :func:`.dense.direct_sqdist` decides.

    Two summations of the same ``d`` non-negative terms in any orders differ by at most
    ``2γ_d`` times their sum, so a device value ``v`` outside ``r²(1 ± 4γ_d)`` is on the
    same side of ``r²`` as numpy's; the others (ties within a few ulps of the radius) are
    recomputed on the host by :func:`.dense.direct_sqdist`.
    """
    d = Xs.shape[1]
    v = direct_sqdist_torch(Xs[rows].to(torch.float64), C64[cidx])
    k = d * _U
    margin = r2 * (4.0 * k / (1.0 - k)) + 1e-300  # the floor covers an underflowed product
    tie = ~((v > r2 + margin) | (v < r2 - margin))
    if bool(tie.any()):
        ti = torch.nonzero(tie).flatten()
        host_rows = host_array(Xs[rows[ti]])
        w = direct_sqdist(host_rows, centres[cidx[ti].cpu().numpy()])
        v[ti] = torch.from_numpy(w).to(v.device)
    return v


def _sparse_sums(torch: Any, mk: Any, tc: Any, use: np.ndarray, X64: Any) -> Any:
    """Per ``(centre, tile)`` the sequential float64 sum of the members in row order,
    from zero (the CSR product of the numpy pass), for the tiles flagged in ``use``;
    ``(k, B, d)``. Groups are processed longest first, so step ``s`` adds the ``s``-th
    member of every group that has one."""
    k = mk.shape[0]
    B = tc.shape[1]
    d = X64.shape[1]
    use_t = torch.from_numpy(use).to(mk.device)
    ci, xi = torch.nonzero(mk, as_tuple=True)  # row-major: by centre, then row
    tile = torch.div(xi, _ROW_BLOCK, rounding_mode="floor")
    keep = use_t[tile]
    ci, xi, tile = ci[keep], xi[keep], tile[keep]
    gcnt = torch.where(use_t[None, :], tc, 0).flatten()
    start = torch.cumsum(gcnt, 0) - gcnt
    key = ci * B + tile
    rank = torch.arange(key.numel(), device=mk.device) - start[key]
    order = torch.argsort(gcnt, descending=True, stable=True)
    pos = torch.empty_like(order)
    pos[order] = torch.arange(order.numel(), device=mk.device)
    sc = gcnt[order].cpu().numpy()
    n_act = int(np.count_nonzero(sc))
    K = int(sc[0]) if n_act else 0
    P = torch.zeros((k * B, d), dtype=torch.float64, device=mk.device)
    if not K:
        return P.view(k, B, d)
    # step s reads only groups with more than s members: no padding entry is ever read
    pad = torch.zeros((n_act, K), dtype=torch.int64, device=mk.device)
    pad[pos[key], rank] = xi
    acc = torch.zeros((n_act, d), dtype=torch.float64, device=mk.device)
    # groups with more than s members: a prefix of the groups sorted by count
    active = np.searchsorted(-sc[:n_act], -np.arange(K), side="left")
    for s in range(K):
        a = int(active[s])
        acc[:a] += X64[pad[:a, s]]
    P[order[:n_act]] = acc
    return P.view(k, B, d)


def torch_gate_pass(
    st: _BankState,
    centres: np.ndarray,
    radius: float,
    *,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    near_centres: np.ndarray | None = None,
    near_radius: float | None = None,
    near_tolerance: float = 0.0,
    group_size: int | None = None,
    hasher: Any = None,
    canonical: bool = False,
    threads: int | None = None,
) -> GatePass:
    """:func:`brace.gates.dense.gate_pass` over a torch bank on its device (module doc).

    ``centres`` are float64 numpy; the result is a numpy :class:`GatePass`. ``hasher``
    is fed every row block (copied to the host) in order; ``threads`` sets torch's
    intra-op threads during the pass on a CPU bank.
    """
    torch = _torch()
    with _exact_float32(torch, st.X.device, threads), torch.no_grad():
        return _pass(torch, st, centres, radius, pairs, near_centres, near_radius,
                     near_tolerance, group_size, hasher, canonical)


def _pass(torch, st, centres, radius, pairs, near_centres, near_radius, near_tolerance,
          group_size, hasher, canonical) -> GatePass:
    X = st.X
    dev = X.device
    n, d = (int(s) for s in X.shape)
    m = centres.shape[0]
    r2 = radius * radius
    tdt_np = _tile_dtype(st.extra["dtype"], d, r2)
    tdt = torch.float32 if tdt_np == np.float32 else torch.float64
    big = _BIG32 if tdt_np == np.float32 else _BIG64
    sq = st.extra["sq"]
    with np.errstate(over="ignore", invalid="ignore"):
        csq = np.einsum("ij,ij->i", centres, centres)
        ca, cb_ = band_coefficients(tdt_np, d, r2)
        a_c = ca * csq + cb_
        huge_c = ~(csq < big)
        a_c[huge_c] = np.inf
        Ca = np.empty((m, d + 2), dtype=tdt_np)
        Ca[:, :d] = -2.0 * centres
        Ca[:, d] = 1.0
        Ca[:, d + 1] = np.where(huge_c, 0.0, csq - r2)
    Ca_t = torch.from_numpy(Ca).to(dev)
    C64 = torch.from_numpy(np.ascontiguousarray(centres, dtype=np.float64)).to(dev)
    a_c_t = torch.from_numpy(a_c).to(dev)
    huge_c_t = torch.from_numpy(huge_c).to(dev)
    counts = torch.zeros(m, dtype=torch.int64, device=dev)
    sums = torch.zeros((m, d), dtype=torch.float64, device=dev)
    pair_counts = None
    if pairs is not None:
        pa = torch.from_numpy(np.asarray(pairs[0], dtype=np.int64)).to(dev)
        pb = torch.from_numpy(np.asarray(pairs[1], dtype=np.int64)).to(dev)
        pair_counts = torch.zeros(pa.numel(), dtype=torch.int64, device=dev)
    near_rows: list[Any] = []
    near_dist: list[Any] = []
    if near_centres is not None:
        near_centres = np.asarray(near_centres, dtype=np.int64)
        n_extra = float(near_radius) ** 2 - r2
        near_pos = np.full(m, -1, dtype=np.int64)
        near_pos[near_centres] = np.arange(near_centres.size)
    cbk = max(1, _BLOCK_ELEMS // _ROW_BLOCK)
    gs = m if group_size is None else max(1, int(group_size))
    chunks = [(g0 + c0, min(g0 + c0 + cbk, g0 + gs, m))
              for g0 in range(0, m, gs) for c0 in range(0, min(gs, m - g0), cbk)]
    kmax = max(c1 - c0 for c0, c1 in chunks)
    budget = _TILE_ELEMS_CPU if dev.type == "cpu" else _TILE_ELEMS_GPU
    rows_per = _ROW_BLOCK * max(1, budget // (kmax * _ROW_BLOCK))
    # and a super-block's working copies (the augmented tile, a float64 cast, the masks)
    # stay within _EXTRA_SHARE of the bank's own bytes, so few centres never mean one
    # bank-sized tile (a multiple of _ROW_BLOCK rows: the sums are unchanged)
    per_row = (d + 2) * (4 if tdt == torch.float32 else 8) + 8 * d + 10 * kmax
    bank_bytes = n * d * X.element_size()
    cap = int(_EXTRA_SHARE * bank_bytes // per_row) // _ROW_BLOCK * _ROW_BLOCK
    rows_per = min(rows_per, max(_ROW_BLOCK, cap))
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=dev)

    def near_part(e: Any, tband: Any, c0: int, c1_: int, Xs: Any, X64: Any, b_i: Any) -> Any:
        """The near distances of the chunk's near centres (appended to ``near_rows`` and
        ``near_dist``); returns the super-block's float64 rows if it had to cast them."""
        loc = np.flatnonzero(near_pos[c0:c1_] >= 0)
        if loc.size == 0:
            return X64
        loc_t = torch.from_numpy(loc).to(dev)
        sel_t = loc_t + c0
        # the clean group fills whole chunks: a view, not a copy
        sub = e[loc[0] : loc[-1] + 1] if loc[-1] - loc[0] + 1 == loc.size else e[loc_t]
        lim = n_extra + tband[loc_t].to(torch.float64)
        lim = lim + lim.abs() * 1e-6 + 1e-300
        rows_, cols = torch.nonzero(sub <= lim.to(sub.dtype)[:, None], as_tuple=True)
        if not rows_.numel():
            return X64
        nbd = a_c_t[sel_t[rows_]] + b_i[cols]
        ev = sub[rows_, cols].to(torch.float64)
        ok = ev <= n_extra + nbd
        rows_, cols, nbd, ev = rows_[ok], cols[ok], nbd[ok], ev[ok]
        # square roots on the host: torch's CPU sqrt is not correctly rounded
        nbd_h, ev_h = nbd.cpu().numpy(), ev.cpu().numpy()
        dist = np.sqrt(np.maximum(ev_h + r2, 0.0))
        redo = (np.flatnonzero(~(dist * near_tolerance >= nbd_h)) if near_tolerance
                else np.arange(dist.size))
        if redo.size:
            if X64 is None:
                X64 = Xs.to(torch.float64)
            rt = torch.from_numpy(redo).to(dev)
            dist[redo] = np.sqrt(direct_sqdist_torch(
                X64[cols[rt]], C64[sel_t[rows_[rt]]]).cpu().numpy())
        keep = dist <= near_radius
        near_rows.append(near_pos[sel_t[rows_].cpu().numpy()[keep]])
        near_dist.append(dist[keep])
        return X64

    tbytes = 4 if tdt == torch.float32 else 8
    # centres per slice of a tile (its values and three masks: tbytes + 3 bytes a pair) and
    # per float64 mask of a dense tile's product: within _SLICE_SHARE of the bank's bytes
    cslice = max(_MIN_SLICE, int(_SLICE_SHARE * bank_bytes // (rows_per * (tbytes + 3))))
    dslice = max(_MIN_SLICE, int(_SLICE_SHARE * bank_bytes // (_ROW_BLOCK * 8)))

    def tile_slice(mk: Any, c0: int, c1_: int, Xs: Any, Xw: Any, X64: Any, b_i: Any,
                   bmax: Any, any_huge_x: bool, huge_x: Any) -> Any:
        """Membership of centres ``c0:c1_`` (written into ``mk``) and their near
        distances; returns the super-block's float64 rows if it had to cast them."""
        e = Ca_t[c0:c1_] @ Xw.T
        tband = a_c_t[c0:c1_] + bmax
        if tdt == torch.float32:
            tband = (tband * (1.0 + 1e-6)).to(torch.float32)
        torch.le(e, 0.0, out=mk)
        tb = tband[:, None]
        cand = (e <= tb) & (e >= -tb)  # |e| <= tband, without a copy of |e|
        hc = huge_c[c0:c1_]
        if any_huge_x:
            cand[:, huge_x] = True
        if hc.any():
            cand[huge_c_t[c0:c1_]] = True
        ci, xi = torch.nonzero(cand, as_tuple=True)
        del cand
        if ci.numel():
            own = a_c_t[c0 + ci] + b_i[xi]
            unc = ~(e[ci, xi].to(torch.float64).abs() > own)
            ci, xi = ci[unc], xi[unc]
            if ci.numel():
                d2 = _members(torch, Xs, xi, C64, c0 + ci, centres, r2)
                mk[ci, xi] = d2 <= r2
                e[ci, xi] = (d2 - r2).to(tdt)
        if near_centres is not None:
            X64 = near_part(e, tband, c0, c1_, Xs, X64, b_i)
        return X64

    for s0 in range(0, n, rows_per):
        Xs = X[s0 : s0 + rows_per]
        ns = int(Xs.shape[0])
        if hasher is not None:
            for h0 in range(0, ns, _ROW_BLOCK):
                hasher.update(host_array(Xs[h0 : h0 + _ROW_BLOCK]))
        tiles = [(j0, min(j0 + _ROW_BLOCK, ns)) for j0 in range(0, ns, _ROW_BLOCK)]
        xsq = sq[s0 : s0 + ns]
        huge_x = ~(xsq < big)
        b_i = torch.where(huge_x, inf, ca * xsq)
        any_huge_x = bool(huge_x.any())
        Xw = torch.empty((ns, d + 2), dtype=tdt, device=dev)
        Xw[:, :d] = Xs
        Xw[:, d] = torch.where(huge_x, 0.0, xsq)
        Xw[:, d + 1] = 1.0
        X64 = Xs if Xs.dtype == torch.float64 else None  # cast on demand
        bmax = torch.where(huge_x, 0.0, b_i).max()
        mask = torch.empty((m, ns), dtype=torch.bool, device=dev) if pairs is not None \
            else None
        for c0, c1_ in chunks:
            mk = torch.empty((c1_ - c0, ns), dtype=torch.bool, device=dev)
            # the tile in slices of centres (each centre's rows and values do not depend
            # on the slice; near distances come in the same order: by centre, then row)
            for a0 in range(c0, c1_, cslice):
                a1 = min(a0 + cslice, c1_)
                X64 = tile_slice(mk[a0 - c0 : a1 - c0], a0, a1, Xs, Xw, X64, b_i, bmax,
                                 any_huge_x, huge_x)
            if c1_ == chunks[-1][1]:
                del Xw  # the last chunk's tiles are done: freed before its sums
            if mask is not None:
                mask[c0:c1_] = mk
            tc = _tile_counts(torch, mk)
            counts[c0:c1_] += tc.sum(dim=1)
            tot = tc.sum(dim=0).cpu().numpy()
            if tot.any() and X64 is None:
                X64 = Xs.to(torch.float64)
            _add_sums(torch, sums[c0:c1_], mk, tc, tot, X64, tiles, canonical, dslice)
        if mask is not None:
            pair_counts += (mask[pa] & mask[pb]).sum(dim=1)
    nrow = ndist = None
    if near_centres is not None:
        nrow = np.concatenate(near_rows) if near_rows else np.zeros(0, dtype=np.int64)
        ndist = np.concatenate(near_dist) if near_dist else np.zeros(0)
    return GatePass(counts.cpu().numpy(), sums.cpu().numpy(),
                    None if pair_counts is None else pair_counts.cpu().numpy(), nrow, ndist)


_COUNT_ELEMS = 1 << 17  # mask entries per counting slice (torch's sum casts to int64)


def _tile_counts(torch: Any, mk: Any) -> Any:
    """``(k, B)`` members per centre and row tile of ``_ROW_BLOCK`` rows, counted over
    slices of centres: the sum's int64 cast never exceeds ``8·_COUNT_ELEMS`` bytes."""
    k, ns = mk.shape
    full = ns // _ROW_BLOCK
    m8 = mk.view(torch.uint8)
    out = torch.empty((k, full + (full * _ROW_BLOCK < ns)), dtype=torch.int64,
                      device=mk.device)
    step = max(1, _COUNT_ELEMS // max(1, ns))
    for a in range(0, k, step):
        sl = m8[a : a + step]
        if full:
            out[a : a + step, :full] = sl[:, : full * _ROW_BLOCK].view(
                -1, full, _ROW_BLOCK).sum(dim=2, dtype=torch.int64)
        if full * _ROW_BLOCK < ns:
            out[a : a + step, full] = sl[:, full * _ROW_BLOCK :].sum(dim=1, dtype=torch.int64)
    return out


def _add_sums(torch: Any, out: Any, mk: Any, tc: Any, tot: np.ndarray, X64: Any,
              tiles: list[tuple[int, int]], canonical: bool, dslice: int) -> None:
    """``out += Σ_{members} X_i`` tile by tile in row order, as the numpy pass: a sparse
    tile (density ≤ ``_SPARSE_DENSITY``, or any tile with ``canonical``) by the
    sequential member sum, a dense tile by a float64 mask product over slices of
    ``dslice`` centres (each centre's row of the product on its own). ``tc``: members per
    centre and tile; ``tot``: members per tile (host)."""
    k = mk.shape[0]
    size = np.array([k * (j1 - j0) for j0, j1 in tiles])
    sparse = (tot > 0) & (canonical | (tot <= _SPARSE_DENSITY * size))
    P = _sparse_sums(torch, mk, tc, sparse, X64) if sparse.any() else None
    for j, (j0, j1) in enumerate(tiles):
        if not tot[j]:
            continue
        if sparse[j]:
            out += P[:, j]
        else:
            for a in range(0, k, dslice):
                out[a : a + dslice] += mk[a : a + dslice, j0:j1].to(torch.float64) @ X64[j0:j1]
