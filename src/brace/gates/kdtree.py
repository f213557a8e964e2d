"""KD-tree gate pass for low-dimensional in-memory banks (docs/scale.md, "Spatial index").

``scipy.spatial.cKDTree`` (a tree over the centres against the bank's tree,
``sparse_distance_matrix``) with the inflated radius ``r(1 + 1e-9) + s``
(``s = 1e-150``) is only a candidate filter: any row with ``direct_sqdist(X_i, c) ≤ fl(r²)``
has exact distance ``≤ r(1 + (d + 3)u)``, far inside the inflated radius whatever the
tree's own rounding (relative ``O(d u)``, ``d ≤ 8``). Candidates whose tree distance is
at most ``r(1 − 1e-9)`` are members by the canonical formula too (see :func:`_members`);
the rest are decided by the direct formula itself, so counts, memberships, pair counts and near
distances equal the brute-force pass exactly; sums are float64 sums over the members in
row order (any order is covered by ``dense.mean_rounding_bound``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .contract import GatePass
from .dense import _ROW_BLOCK, csr_gate_sums, direct_sqdist

_INFLATE = 1.0 + 1e-9
_SLACK = 1e-150
_SURE = 1.0 - 1e-9  # tree distances at or below r·_SURE are members without recomputation
_SURE_MIN, _SURE_MAX = 1e-100, 1e100


DENSE_GATE_COEF = 0.08  # index="auto" falls back to brute force above density 0.08/d
_SAMPLE_ROWS = 512
_SAMPLE_CENTRES = 64


def dense_gates(X: np.ndarray, centres: np.ndarray, radius: float) -> bool:
    """Whether the gates of ``centres`` look dense enough (mean share of the bank above
    ``DENSE_GATE_COEF / d``) that brute-force tiles beat KD-tree candidates.

    Estimated on a fixed stride of about 512 bank rows and 64 centres by the expansion
    ``‖c‖² + ‖x‖² − 2cᵀx`` (deterministic, ``O(512·64·d)``, well under a millisecond).
    It only picks the backend, whose results are identical; measured crossovers
    (1 thread): density ≈ 0.04 at d = 2, ≈ 0.02 at d = 4 (docs/scale.md).
    """
    n, d = X.shape
    rows = np.asarray(X[:: max(1, n // _SAMPLE_ROWS)], dtype=np.float64)
    c = centres[:: max(1, centres.shape[0] // _SAMPLE_CENTRES)]
    d2 = (c * c).sum(1)[:, None] + (rows * rows).sum(1)[None, :] - 2.0 * (c @ rows.T)
    return np.count_nonzero(d2 <= radius * radius) > DENSE_GATE_COEF / d * d2.size


def _tree(st: Any) -> Any:
    tree = st.extra.get("kdtree")
    if tree is None:
        from scipy.spatial import cKDTree

        tree = cKDTree(np.asarray(st.X, dtype=np.float64), balanced_tree=False,
                       compact_nodes=False, copy_data=False)
        st.extra["kdtree"] = tree
    return tree


def _candidates(tree: Any, X: np.ndarray, centres: np.ndarray, radius: float,
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(owner, d²)`` of every row within the inflated radius, ``d²`` by the direct
    formula. In the tree's order: the near distances are sorted per centre afterwards
    (``sensitivity.sorted_segments``), so their order never matters."""
    from scipy.spatial import cKDTree

    res = cKDTree(centres).sparse_distance_matrix(tree, radius * _INFLATE + _SLACK,
                                                  output_type="ndarray")
    owner = res["i"].astype(np.int64)
    idx = res["j"].astype(np.int64)
    d2 = direct_sqdist(np.take(X, idx, axis=0), centres[owner]) if idx.size else np.zeros(0)
    return owner, d2


def _members(tree: Any, X: np.ndarray, centres: np.ndarray, radius: float, r2: float,
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(owner, row)`` of every gate member, sorted by centre then row.

    The tree's own distance ``v`` (``√Σ(x_j − c_j)²`` in float64, relative error
    ``≤ (d + 2)u``) decides the rows with ``v ≤ r(1 − 1e-9)``: their exact distance is
    below ``r(1 − 1e-9 + 4(d+2)u)``, so ``direct_sqdist ≤ r²(1 − 1.9e-9) < fl(r²)`` for
    ``1e-100 ≤ r ≤ 1e100`` (no underflow or overflow can move them). The few others
    within the inflated radius are decided by :func:`direct_sqdist` itself, so membership
    is exactly the canonical one (docs/scale.md, "Spatial index").
    """
    from scipy.spatial import cKDTree

    n = X.shape[0]
    res = cKDTree(centres).sparse_distance_matrix(tree, radius * _INFLATE + _SLACK,
                                                  output_type="ndarray")
    i, j = res["i"], res["j"]
    if _SURE_MIN <= radius <= _SURE_MAX:
        unc = np.flatnonzero(~(res["v"] <= radius * _SURE))
    else:
        unc = np.arange(i.size)
    if unc.size:
        iu, ju = i[unc].astype(np.int64), j[unc].astype(np.int64)
        out = unc[~(direct_sqdist(np.take(X, ju, axis=0), centres[iu]) <= r2)]
        if out.size:
            keep = np.ones(i.size, dtype=bool)
            keep[out] = False
            i, j = i[keep], j[keep]
    wide = np.int64 if centres.shape[0] * n >= 2**31 else np.int32
    key = i.astype(wide) * wide(n) + j.astype(wide)
    key.sort()
    owner, idx = np.divmod(key, wide(n))
    return owner.astype(np.int64), idx.astype(np.int64)


def kdtree_gate_pass(
    st: Any,
    centres: np.ndarray,
    radius: float,
    *,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    near_centres: np.ndarray | None = None,
    near_radius: float | None = None,
    near_tolerance: float = 0.0,
    group_size: int | None = None,
    canonical: bool = False,
) -> GatePass:
    """:func:`brace.gates.dense.gate_pass` with KD-tree candidates; identical statistics
    (with ``canonical``, identical gate sums bit for bit).

    Every centre is handled on its own, so ``group_size`` holds trivially; near
    distances are direct (within any ``near_tolerance``).
    """
    X = st.X
    m, d = centres.shape
    r2 = radius * radius
    tree = _tree(st)
    owner, idx = _members(tree, X, centres, radius, r2)
    counts = np.bincount(owner, minlength=m).astype(np.int64)
    sums = np.zeros((m, d))
    if idx.size:
        if canonical:
            # the canonical sum (docs/privacy-accounting.md §12.1): each fixed row tile's
            # sums by the dense pass's CSR product, the tiles added in order — bit for bit
            # the dense and torch passes' sums. One stable sort by tile: each tile's pairs
            # stay in (centre, row) order.
            tile = idx // _ROW_BLOCK
            order = np.argsort(tile, kind="stable")
            cuts = np.flatnonzero(np.diff(tile[order])) + 1
            for sel in np.split(order, cuts):
                cols, pos = np.unique(idx[sel], return_inverse=True)
                sums += csr_gate_sums(np.bincount(owner[sel], minlength=m), pos,
                                      np.take(X, cols, axis=0).astype(np.float64, copy=False))
        else:
            rows = np.take(X, idx, axis=0).astype(np.float64, copy=False)
            starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
            sums[owner[starts]] = np.add.reduceat(rows, starts, axis=0)
    pair_counts = None
    if pairs is not None:
        bounds = np.r_[0, np.cumsum(counts)]
        a, b = (np.asarray(p, dtype=np.int64) for p in pairs)
        pair_counts = np.zeros(a.size, dtype=np.int64)
        for k in range(a.size):
            ia = idx[bounds[a[k]] : bounds[a[k] + 1]]
            ib = idx[bounds[b[k]] : bounds[b[k] + 1]]
            if ia.size and ib.size:
                pair_counts[k] = np.intersect1d(ia, ib, assume_unique=True).size
    nrow = ndist = None
    if near_centres is not None:
        near_centres = np.asarray(near_centres, dtype=np.int64)
        R = float(near_radius)
        o2, d2n = _candidates(tree, X, centres[near_centres], R)
        dist = np.sqrt(d2n)
        ok = dist <= R
        nrow, ndist = o2[ok], dist[ok]
    return GatePass(counts, sums, pair_counts, nrow, ndist)
