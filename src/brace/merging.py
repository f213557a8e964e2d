"""The clusters of a synopsis without public data: its attractors merged by the released
pair counts (``docs/privacy-accounting.md`` §15.2). Post-processing only: every function
here reads released values (attractors, noisy counts, the noisy pair counts and their σ)
and public constants, never the bank.

A synopsis tiles an elongated cluster with several attractors; two tiles of one cluster
are joined by many rows near the bisector between them, two clusters with a valley
between them by few. The pair release (:func:`brace.seeding.pair_histogram`) counts, for
every pair of attractors, the rows whose two nearest attractors are that pair and that
lie in the middle half of the segment between them (position ``t ≥ 1/4`` from their
nearest). The scale is the pair's own: ``t`` is measured in units of the pair's
distance, and the count is compared with the pair's own cells.

**The rule** (:func:`merge_labels`). With ``S_ab`` the noisy pair count, ``σ`` its noise,
``L_ab = max(0, S_ab − zσ)`` its lower bound (``z = 2``), ``m_a`` the noisy counts and
``T_a = Σ_b L_ab`` the bounded boundary mass of ``a``: ``a`` and ``b`` are joined when

* ``L_ab ≥ ratio · max(1, m_a, m_b)`` (``ratio = 0.15``: a thick bridge relative to the
  *larger* cell, so a light cell — background rows — is not joined to a heavy one), and
* ``L_ab ≥ share · max(T_a, T_b)`` (``share = 0.15``: the bridge is a real part of the
  boundary of both), and
* ``L_ab ≥ contrast · max(T_a − L_ab, T_b − L_ab)/(K − 2)`` (``contrast = 5``, for
  ``K > 2`` attractors): the bridge stands out from the mean bridge of ``a`` and of ``b``
  to the other attractors. Where classes overlap without a valley (digits, MNIST: few
  attractors, every pair bridged) no bridge stands out and few are merged; a
  synopsis of few attractors is rarely merged at all. (At 10 this condition also cut
  a round blob tiled by 4 attractors — each tile bridged to 3 others — and the tiles of
  a rod, whose bridges to both neighbours count against each other.)

With more than ``tiles = 64`` attractors (the plan's ``k_cap``: more attractors than
starting centres means the split rounds tiled the clusters finely, as they do at a large
budget), ``ratio`` and ``share`` are multiplied by ``tiles/K``: a finer tiling shares a
tile's boundary among more neighbours, so each bridge is a smaller part of it (without
this, anisotropic clusters at ε = 4 stayed in more pieces than at ε = 1).

The clusters are the connected components of the joins (a chain of tiles, whatever the
noise in their counts, is one component; two heavy clusters are joined only by a thick
bridge between cells of comparable weight).

**Chain joins** (:func:`chain_joins`, given the attractors; added to the joins above).
A thin rod is tiled by a chain of cells, each bridged to its two neighbours by about half
its rows; at ε = 1 the pair noise (``σ ≈ 26``) is a quarter of such a bridge and
``L ≥ ratio·m`` cuts the chain. Where the attractors' **Gabriel graph** (no other
attractor lies in the closed ball whose diameter is the pair's segment: only such pairs
hold the segment's midpoint in their two cells) makes ``a, b`` neighbours, they are also
joined when ``S_ab > z_c·σ`` (``z_c = 2.5``), ``S_ab ≥ ratio_c·max(m_a, m_b)``
(``ratio_c = 0.25``, half a chain's bridge) and ``S_ab ≥ share_c·max(G_a, G_b)``
(``share_c = 0.3``) with ``G_a`` the sum of ``max(S_ab, 0)`` over ``a``'s Gabriel
neighbours: the bridge is a large part of both cells' boundaries, as in a chain or a
sheet, not one of many alike (overlapping classes).

**The second pass** (:func:`attach_labels`, given the attractors). The first pass judges
one pair at a time, and a piece cut off a cluster — a tile bridged to several tiles of
its cluster, each bridge thin — stays apart. The second pass judges components: with
``S_AB`` the sum of the noisy pair counts between components ``A`` and ``B`` over the
pairs that are Gabriel neighbours, ``p_AB`` their number and ``M_A`` the sum of
``A``'s noisy counts (at least 1), the bridge ``L_AB = S_AB − z·σ·√p_AB`` (a sum of
``p_AB`` counts, noise ``σ√p_AB``). Each component's partner ``B*`` is the one of largest
``L_AB`` among the heavier components (larger ``M``; equal: the lower number), its ratio
``ρ_A = max(L_AB*, 0)/M_A`` (0 for the heaviest). ``A`` attaches to ``B*`` when
``ρ_A ≥ τ``, ``τ = max(attach, spread · Q_q(ρ))`` with ``Q_q`` the weighted
``q``-quantile of the first pass's ratios (weights ``M``: the least ``ρ`` below which
components holding a fraction ``q`` of the total weight lie; ``attach = 0.2``,
``spread = 3``, ``q = 0.9``): a piece sends a fifth of its weight across its bridge, and
three times what the bulk of this synopsis's weight sends — where classes overlap
(MNIST) every component sends much and few attach; light pieces, however many, do not
move the quantile. Only the lighter side attaches: a light cell of background rows
attaches to one cluster, and joins a second only if that cluster's own bridge to the
first (the cell's included) is a ratio ``≥ τ`` of its weight; the attachments'
connected components are the new components, and the pass repeats (``τ`` fixed) until
none attaches.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["ATTACH_Q", "ATTACH_RATIO", "ATTACH_SPREAD", "CHAIN_RATIO", "CHAIN_SHARE",
           "CHAIN_Z", "MERGE_CONTRAST", "MERGE_RATIO", "MERGE_SHARE", "MERGE_TILES", "MERGE_Z",
           "attach_labels", "chain_joins", "gabriel_pairs", "kmeans_labels", "merge_labels",
           "pair_matrix"]

MERGE_RATIO = 0.15
MERGE_SHARE = 0.15
MERGE_CONTRAST = 5.0
MERGE_Z = 2.0
MERGE_TILES = 64  # above this many attractors, ratio and share scale by MERGE_TILES/K
ATTACH_RATIO = 0.2  # the second pass: a component attaches when its bridge is >= this
ATTACH_SPREAD = 3.0  # ... of its weight and >= this times the ratio below which the
ATTACH_Q = 0.9  # components holding this fraction of the weight lie
CHAIN_RATIO = 0.25  # a chain join: a Gabriel bridge >= this of the heavier cell,
CHAIN_SHARE = 0.3  # >= this of both cells' Gabriel boundaries,
CHAIN_Z = 2.5  # and above this many σ
_PAIR_BLOCK = 4096  # pairs of attractors per block of the Gabriel graph


def pair_matrix(pairs: Any, k: int) -> np.ndarray:
    """The symmetric ``(k, k)`` matrix of the pair counts given as the upper triangle
    (``triu_indices(k, 1)`` order, :func:`brace.seeding.pair_index`); 0 on the
    diagonal."""
    v = np.asarray(pairs, dtype=np.float64)
    if v.shape != (k * (k - 1) // 2,) or not np.all(np.isfinite(v)):
        raise ValueError(f"pairs must hold k(k-1)/2 = {k * (k - 1) // 2} finite counts "
                         f"for k = {k} attractors; got shape {v.shape}.")
    S = np.zeros((k, k))
    iu = np.triu_indices(k, 1)
    S[iu] = v
    return S + S.T


def _number(comp: np.ndarray) -> np.ndarray:
    first: dict[int, int] = {}  # number the clusters by their first attractor
    return np.array([first.setdefault(int(g), len(first)) for g in comp], dtype=np.int64)


def _counts(counts: Any) -> np.ndarray:
    m = np.asarray(counts, dtype=np.float64)
    if m.ndim != 1 or not np.all(np.isfinite(m)):
        raise ValueError(f"counts must be k finite numbers; got shape {m.shape}.")
    return m


def _check_attach_args(attractors: Any, k: int, sigma: float) -> None:
    A = np.asarray(attractors, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != k or A.shape[1] < 1 or not np.all(np.isfinite(A)):
        raise ValueError(f"attractors must be a finite (k, d) array, d >= 1, for k = {k} "
                         f"counts; got shape {A.shape}.")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0; got {sigma!r}.")


def gabriel_pairs(attractors: Any) -> np.ndarray:
    """``(K, K)`` bool: the Gabriel graph of the attractors — ``a ≠ b`` adjacent when
    every other attractor ``c`` has ``‖c − (a+b)/2‖² > ‖a − b‖²/4`` (post-processing of
    the released attractors)."""
    from scipy.spatial import cKDTree

    A = np.asarray(attractors, dtype=np.float64)
    K = A.shape[0]
    G = np.zeros((K, K), dtype=bool)
    if K < 2:
        return G
    if K == 2:
        G[0, 1] = G[1, 0] = True
        return G
    tree = cKDTree(A)
    I, J = np.triu_indices(K, 1)
    for s in range(0, I.size, _PAIR_BLOCK):  # O(block·d) memory, not O(K²·d)
        i, j = I[s:s + _PAIR_BLOCK], J[s:s + _PAIR_BLOCK]
        mid = 0.5 * (A[i] + A[j])
        half2 = 0.25 * ((A[i] - A[j]) ** 2).sum(axis=1)
        _, nn = tree.query(mid, k=3)  # the nearest attractor other than a and b
        other = np.where((nn[:, 0] != i) & (nn[:, 0] != j), nn[:, 0], -1)
        for col in (1, 2):
            c = nn[:, col]
            other = np.where((other < 0) & (c != i) & (c != j), c, other)
        G[i, j] = ((A[other] - mid) ** 2).sum(axis=1) > half2
    return G | G.T


def attach_labels(attractors: Any, counts: Any, pairs: Any, sigma: float,
                  labels: Any, *, attach: float = ATTACH_RATIO,
                  spread: float = ATTACH_SPREAD, q: float = ATTACH_Q,
                  z: float = MERGE_Z, gabriel: Any = None) -> np.ndarray:
    """``(K,)`` int: the second pass of the module docstring — the components ``labels``
    (the first pass's) joined where a lighter one sends ``ρ ≥ τ`` of its weight across
    its Gabriel bridge to its partner; clusters numbered by their first attractor.
    ``gabriel``: the attractors' :func:`gabriel_pairs`, if already computed.
    Post-processing of released values."""
    from scipy.sparse.csgraph import connected_components

    m = _counts(counts)
    K = m.shape[0]
    _check_attach_args(attractors, K, sigma)
    lab = np.asarray(labels, dtype=np.int64)
    if lab.shape != (K,):
        raise ValueError(f"labels must hold one label per attractor ({K}); got shape "
                         f"{lab.shape}.")
    lab = _number(lab)
    if K < 2:
        return lab
    gab = gabriel_pairs(attractors) if gabriel is None else np.asarray(gabriel, dtype=bool)
    S = np.where(gab, pair_matrix(pairs, K), 0.0)
    P = gab.astype(np.float64)
    tau = None
    for _ in range(K):  # each round that attaches removes a component
        g = int(lab.max()) + 1
        if g < 2:
            break
        H = np.zeros((g, K))
        H[lab, np.arange(K)] = 1.0
        L = H @ S @ H.T - z * float(sigma) * np.sqrt(H @ P @ H.T)
        M = np.maximum(H @ m, 1.0)
        idx = np.arange(g)
        heavier = (M[None, :] > M[:, None]) | ((M[None, :] == M[:, None])
                                               & (idx[None, :] < idx[:, None]))
        E = np.where(heavier, L, -np.inf)
        b = np.argmax(E, axis=1)
        best = E[idx, b]
        rho = np.where(np.isfinite(best), np.maximum(best, 0.0) / M, 0.0)
        if tau is None:  # the bulk of the weight's ratio: fixed after the first pass
            o = np.argsort(rho, kind="stable")
            cw = np.cumsum(M[o]) / M.sum()
            qv = float(rho[o][min(int(np.searchsorted(cw, q)), g - 1)])
            tau = max(float(attach), float(spread) * qv)
        ok = np.flatnonzero(rho >= tau)
        ok = ok[best[ok] > 0.0]
        if ok.size == 0:
            break
        adj = np.zeros((g, g), dtype=bool)
        adj[ok, b[ok]] = True
        _, comp = connected_components(adj, directed=False)
        lab = _number(comp[lab])
    return lab


def merge_labels(counts: Any, pairs: Any, sigma: float, *, ratio: float = MERGE_RATIO,
                 share: float = MERGE_SHARE, contrast: float = MERGE_CONTRAST,
                 z: float = MERGE_Z, tiles: float = MERGE_TILES,
                 attractors: Any = None) -> np.ndarray:
    """``(k,)`` int: the cluster of each attractor by the rule of the module docstring,
    clusters numbered by their first attractor. ``counts`` the noisy counts ``m``,
    ``pairs`` the noisy pair counts (upper triangle), ``sigma`` their noise std; with
    ``K > tiles`` attractors, ``ratio`` and ``share`` are scaled by ``tiles/K``; with
    ``attractors`` (``(k, d)``), the second pass (:func:`attach_labels`) follows.
    Post-processing of released values."""
    from scipy.sparse.csgraph import connected_components

    m = _counts(counts)
    k = m.shape[0]
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0; got {sigma!r}.")
    if k < 2:
        return np.zeros(k, dtype=np.int64)
    L = np.maximum(pair_matrix(pairs, k) - z * float(sigma), 0.0)
    T = L.sum(axis=1)
    big = np.maximum(np.maximum(m[:, None], m[None, :]), 1.0)
    f = min(1.0, float(tiles) / k)  # finer tilings: each bridge a smaller part of a tile
    join = ((L > 0) & (L >= f * ratio * big)
            & (L >= f * share * np.maximum(T[:, None], T[None, :])))
    if k > 2:  # the bridge stands out from the pair's mean bridge to the others
        rest = np.maximum(T[:, None] - L, T[None, :] - L) / (k - 2)
        join &= L >= contrast * rest
    A = None
    if attractors is not None:
        _check_attach_args(attractors, k, sigma)
        A = np.asarray(attractors, dtype=np.float64)
        gab = gabriel_pairs(A)
        join |= chain_joins(A, m, pairs, sigma, gabriel=gab)
    _, comp = connected_components(join, directed=False)
    lab = _number(comp)
    if A is None:
        return lab
    return attach_labels(A, m, pairs, sigma, lab, z=z, gabriel=gab)


def chain_joins(attractors: Any, counts: Any, pairs: Any, sigma: float, *,
                ratio: float = CHAIN_RATIO, share: float = CHAIN_SHARE,
                z: float = CHAIN_Z, gabriel: Any = None) -> np.ndarray:
    """``(K, K)`` bool: the chain joins of the module docstring — Gabriel neighbours
    ``a, b`` with ``S_ab > z·σ``, ``S_ab ≥ ratio·max(m_a, m_b)`` and
    ``S_ab ≥ share·max(G_a, G_b)``, ``G_a = Σ_{b Gabriel} max(S_ab, 0)``, ``m`` at least
    1 as in the first pass (``gabriel``: the attractors' :func:`gabriel_pairs`, if
    already computed). Post-processing of released values."""
    m = _counts(counts)
    K = m.shape[0]
    _check_attach_args(attractors, K, sigma)
    gab = gabriel_pairs(attractors) if gabriel is None else np.asarray(gabriel, dtype=bool)
    S = pair_matrix(pairs, K)
    G = np.where(gab, np.maximum(S, 0.0), 0.0).sum(axis=1)
    big = np.maximum(np.maximum(m[:, None], m[None, :]), 1.0)
    return (gab & (S > z * float(sigma)) & (S >= ratio * big)
            & (S >= share * np.maximum(G[:, None], G[None, :])))


def kmeans_labels(points: Any, weights: Any, k: int, *, restarts: int = 8,
                  iters: int = 100, seed: int = 0) -> np.ndarray:
    """``(K,)`` int: weighted k-means of the attractors to ``min(k, K)`` groups (k-means++
    starts from the public ``seed``, Lloyd's iterations, the lowest weighted inertia of
    ``restarts``); weights ``max(count, 1)``. Post-processing."""
    P = np.asarray(points, dtype=np.float64)
    w = np.maximum(np.asarray(weights, dtype=np.float64), 1.0)
    K = P.shape[0]
    k = min(int(k), K)
    if k >= K:
        return np.arange(K, dtype=np.int64)
    g = np.random.default_rng(seed)
    best, best_lab = np.inf, None
    for _ in range(restarts):
        C = [P[g.choice(K, p=w / w.sum())]]
        d2 = ((P - C[0]) ** 2).sum(1)  # the squared distance to the nearest start so far
        for _ in range(k - 1):
            p = w * d2
            C.append(P[g.choice(K, p=p / p.sum())] if p.sum() > 0 else P[g.integers(K)])
            d2 = np.minimum(d2, ((P - C[-1]) ** 2).sum(1))
        C = np.array(C)
        for _ in range(iters):
            lab = np.argmin(((P[:, None, :] - C[None]) ** 2).sum(2), axis=1)
            ws = np.bincount(lab, weights=w, minlength=k)
            acc = np.zeros_like(C)
            np.add.at(acc, lab, w[:, None] * P)
            new = np.where(ws[:, None] > 0, acc / np.where(ws > 0, ws, 1.0)[:, None], C)
            if np.allclose(new, C):
                break
            C = new
        lab = np.argmin(((P[:, None, :] - C[None]) ** 2).sum(2), axis=1)
        inertia = float(np.sum(w * ((P - C[lab]) ** 2).sum(1)))
        if inertia < best:
            best, best_lab = inertia, lab
    _, out = np.unique(best_lab, return_inverse=True)
    return out.astype(np.int64)
