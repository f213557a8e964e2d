"""Private LSH-tree clustering: a differentially private k-means peer (benchmark code).

Written from the description of Google's differential-privacy library
(``learning/clustering``, ``private_lsh_clustering``: README and docstrings; after Chang,
Ghazi, Kumar & Manurangsi 2021); no code is taken from it. The steps:

1. **Domain.** A public ball ``B(c, R)``: every row is clipped to it,
   ``x ← c + (x − c)·min(1, R/‖x − c‖)``. ``c`` and ``R`` are public (e.g. the centre
   and half-diagonal of the public box); nothing is estimated from the data.
2. **Prefix tree.** ``L = max_depth`` public random hyperplanes through ``c`` (Gaussian
   normals ``h_1..h_L``, drawn from the seed, independent of the data) give each row
   the SimHash bits ``b_ℓ(x) = [⟨h_ℓ, x − c⟩ > 0]``. A node at level ℓ is a prefix
   ``(b_1..b_ℓ)``; the root (level 0) holds all ``n`` rows and its count is ``n``
   (public). Level by level: a node **branches** when its noisy count is at least
   ``min_branch``; the two children of every branching node get a noisy count
   ``count + N(0, σ_c²)`` (both children, whether empty or not); a child **stays in the
   tree** when its noisy count is at least ``min_node``. A node present in the tree
   without children in it is a **leaf** (not branched, at depth ``L``, or all its
   children dropped). Leaves hold disjoint sets of rows; rows in dropped nodes belong to
   no leaf.
3. **Private coreset.** For each leaf, its noisy sum ``Σ (x − c) + N(0, σ_s² I_d)``;
   the coreset point is ``c + clip_R(noisy sum / noisy count)`` (the count is the one the
   tree already released, as in the library), its weight the noisy count.
4. **Centres.** Weighted k-means++ / Lloyd (scikit-learn ``KMeans``, ``init="k-means++"``)
   on the coreset with ``min(k, leaves)`` centres. The library's final step is this
   non-private k-means on the coreset (its docs describe no further private recentring),
   so none is added here.

**Mechanisms.** Gaussian for the counts and the sums (the library uses a discrete
Laplace for counts; the Gaussian keeps the whole run one zCDP composition).

**Privacy** (replace-one neighbours, ``n`` public). With ``ρ = ρ(ε, δ)`` the zCDP whose
conversion ``ρ + 2·sqrt(ρ·log(1/δ))`` equals ε (:func:`brace.accounting.rho_from_eps_delta`),
split as ``ρ_c = s·ρ`` (counts) and ``ρ_s = (1 − s)·ρ`` (sums), ``s = count_share``:

* Level ℓ ≥ 1 releases the counts of the children of the branching nodes of level ℓ − 1;
  which nodes branch is a function of released counts (and of the public ``n``), so the
  release is adaptive. These nodes are disjoint sets of rows, and replacing one row moves
  it out of at most one of them and into at most one: the count vector moves by at most
  ``√2`` in L2. ``N(0, σ_c² I)`` makes it ``(√2)²/(2σ_c²) = 1/σ_c²``-zCDP. At most ``L``
  levels: ``L/σ_c² = ρ_c`` with ``σ_c = sqrt(L/ρ_c)``.
* The leaves (a function of released counts) hold disjoint rows, each clipped to
  ``‖x − c‖ ≤ R``. Replacing ``x`` by ``x'`` changes the vector of leaf sums by
  ``x' − x`` (same leaf) or ``(−(x − c), x' − c)`` (two leaves): L2 at most ``2R``.
  ``N(0, σ_s² I)`` is ``(2R)²/(2σ_s²) = ρ_s``-zCDP with ``σ_s = 2R/sqrt(2ρ_s)``.
* zCDP composes adaptively by addition (Bun & Steinke 2016, Lemma 2.3):
  ``ρ_c + ρ_s = ρ``-zCDP, hence ``(ε, δ)``-DP (their Prop. 1.3). Steps 3–4 are
  post-processing; the hyperplanes and the k-means seed are data-independent.

**Parameters** (public rules of ``n, d, k, ε, δ, R``; nothing reads the data):

* ``max_depth``: an int (the library's default is 20), or ``"auto"`` (default):
  ``ceil(log2 k) + 3``, clipped to [1, 20] — enough bits to give every one of ``k``
  clusters its own prefix with a few to spare, and fewer noisy levels than 20;
* ``min_node`` (library's rule): ``max(1, min(10·sqrt(d)·σ_s/R, n/(2k)))``: enough rows
  that a leaf average's noise (L2 ≈ ``sqrt(d)·σ_s/count``) is about ``0.1·R``, unless
  that leaves fewer than ``2k`` possible nodes; ``min_branch = 3·min_node``;
* ``count_share``: a number in (0, 1), or ``"auto"`` (default): the smallest share on a
  grid of 99 values with ``4·σ_c <= min_node`` (an empty node passes the threshold with
  probability below ``Φ(−4) ≈ 3e−5``), the rest going to the sums; 0.5 if none on the
  grid qualifies.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["lsh_coreset", "lsh_noise", "lsh_params", "lsh_tree_clustering"]

MAX_LEVELS = 62  # prefix codes are int64


def _check_eps_delta(epsilon: float, delta: float) -> None:
    if not (isinstance(epsilon, int | float | np.floating) and np.isfinite(epsilon)
            and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0; got {epsilon!r}.")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1); got {delta!r}.")


def lsh_noise(epsilon: float, delta: float, *, max_depth: int, radius: float,
              count_share: float) -> dict[str, float]:
    """Noise scales of the LSH tree at total ``(epsilon, delta)`` (module docstring):
    ``{"rho", "rho_count", "rho_sum", "sigma_count", "sigma_sum"}`` with
    ``sigma_count = sqrt(L/ρ_c)`` per node count and ``sigma_sum = 2R/sqrt(2ρ_s)`` per
    coordinate of a leaf sum."""
    from brace.accounting import rho_from_eps_delta

    _check_eps_delta(epsilon, delta)
    if not (isinstance(max_depth, int | np.integer) and 1 <= max_depth <= MAX_LEVELS):
        raise ValueError(f"max_depth must be an integer in [1, {MAX_LEVELS}]; "
                         f"got {max_depth!r}.")
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be finite and > 0; got {radius!r}.")
    if not (0 < count_share < 1):
        raise ValueError(f"count_share must lie in (0, 1); got {count_share!r}.")
    rho = rho_from_eps_delta(float(epsilon), float(delta))
    rho_c, rho_s = count_share * rho, (1.0 - count_share) * rho
    return {"rho": rho, "rho_count": rho_c, "rho_sum": rho_s,
            "sigma_count": math.sqrt(max_depth / rho_c),
            "sigma_sum": 2.0 * radius / math.sqrt(2.0 * rho_s)}


def lsh_params(n: int, d: int, k: int, *, epsilon: float, delta: float, radius: float,
               max_depth: int | str = "auto", count_share: float | str = "auto",
               min_node: float | None = None, min_branch: float | None = None
               ) -> dict[str, Any]:
    """The tree's parameters by the public rules of the module docstring: a dict with
    ``max_depth``, ``count_share``, ``min_node``, ``min_branch`` and :func:`lsh_noise`'s
    entries. Reads only public numbers."""
    if not (isinstance(n, int | np.integer) and n >= 1):
        raise ValueError(f"n must be a positive integer; got {n!r}.")
    if not (isinstance(k, int | np.integer) and k >= 1):
        raise ValueError(f"k must be a positive integer; got {k!r}.")
    if max_depth == "auto":
        L = int(min(20, max(1, math.ceil(math.log2(max(k, 1))) + 3)))
    elif isinstance(max_depth, str):
        raise ValueError(f"max_depth must be an integer or 'auto'; got {max_depth!r}.")
    else:
        L = max_depth  # checked by lsh_noise

    def node_rule(sig_s: float) -> float:
        return max(1.0, min(10.0 * math.sqrt(d) * sig_s / radius, n / (2.0 * k)))

    if count_share == "auto":
        share = 0.5
        for s in np.linspace(0.01, 0.99, 99):
            z = lsh_noise(epsilon, delta, max_depth=L, radius=radius, count_share=float(s))
            m = node_rule(z["sigma_sum"]) if min_node is None else float(min_node)
            if 4.0 * z["sigma_count"] <= m:
                share = float(s)
                break
    elif isinstance(count_share, str):
        raise ValueError(f"count_share must be a number or 'auto'; got {count_share!r}.")
    else:
        share = float(count_share)
    z = lsh_noise(epsilon, delta, max_depth=L, radius=radius, count_share=share)
    m_node = node_rule(z["sigma_sum"]) if min_node is None else float(min_node)
    m_branch = 3.0 * m_node if min_branch is None else float(min_branch)
    if not (np.isfinite(m_node) and m_node > 0):
        raise ValueError(f"min_node must be finite and > 0; got {min_node!r}.")
    if not (np.isfinite(m_branch) and m_branch >= m_node):
        raise ValueError(f"min_branch must be finite and >= min_node; got {min_branch!r}.")
    return {"max_depth": L, "count_share": share, "min_node": m_node,
            "min_branch": m_branch, **z}


def _build_tree(bits: np.ndarray, sigma_c: float, m_node: float, m_branch: float,
                rng: np.random.Generator) -> tuple[np.ndarray, list[dict[str, np.ndarray]],
                                                   np.ndarray, np.ndarray]:
    """The noisy prefix tree over the rows' SimHash ``bits`` ``(n, L)``. Returns
    ``(leaf_of, levels, leaf_depth, leaf_count)``: ``leaf_of[i]`` the leaf of row ``i``
    (−1: none), ``levels`` the released noisy counts per level (``{"codes",
    "counts"}``), and per leaf its depth and noisy count."""
    n, L = bits.shape
    prefix = np.zeros(n, dtype=np.int64)  # the rows' prefix codes at level − 1
    codes = np.zeros(1, dtype=np.int64)  # nodes present at level − 1 (sorted)
    counts = np.array([float(n)])  # the root's count is n (public)
    levels: list[dict[str, np.ndarray]] = []
    leaves: list[tuple[int, np.ndarray, np.ndarray]] = []  # (depth, codes, counts)
    depth = 0
    for level in range(1, L + 1):
        branch = counts >= m_branch
        parents, pcounts = codes[branch], counts[branch]
        if parents.size == 0:
            break
        children = np.empty(2 * parents.size, dtype=np.int64)
        children[0::2] = 2 * parents
        children[1::2] = 2 * parents + 1
        child_prefix = 2 * prefix + bits[:, level - 1]
        # rows under a branching parent: their child code is one of `children`
        pos = np.minimum(np.searchsorted(children, child_prefix), children.size - 1)
        inside = children[pos] == child_prefix
        true = np.bincount(pos[inside], minlength=children.size).astype(np.float64)
        noisy = true + sigma_c * rng.standard_normal(children.size)
        levels.append({"codes": children, "counts": noisy})
        keep = noisy >= m_node
        orphan = ~(keep[0::2] | keep[1::2])  # branched, but no child in the tree
        stop = np.concatenate([codes[~branch], parents[orphan]])
        order = np.argsort(stop)
        leaves.append((level - 1, stop[order],
                       np.concatenate([counts[~branch], pcounts[orphan]])[order]))
        codes, counts = children[keep], noisy[keep]
        prefix = child_prefix
        depth = level
    leaves.append((depth, codes, counts))  # what is left at the last level reached

    # rows -> leaves: a row is in the leaf whose code is its prefix at the leaf's depth
    leaf_of = np.full(n, -1, dtype=np.int64)
    prefix = np.zeros(n, dtype=np.int64)
    first = 0
    by_depth: dict[int, list[tuple[int, np.ndarray]]] = {}
    for dep, cs, _ in leaves:
        by_depth.setdefault(dep, []).append((first, cs))
        first += cs.size
    for dep in range(0, depth + 1):
        if dep:
            prefix = 2 * prefix + bits[:, dep - 1]
        for off, cs in by_depth.get(dep, []):
            if cs.size == 0:
                continue
            pos = np.minimum(np.searchsorted(cs, prefix), cs.size - 1)
            hit = (cs[pos] == prefix) & (leaf_of < 0)
            leaf_of[hit] = off + pos[hit]
    leaf_depth = np.concatenate([np.full(cs.size, dep, dtype=np.int64)
                                 for dep, cs, _ in leaves])
    leaf_count = np.concatenate([ct for _, _, ct in leaves]).astype(np.float64)
    return leaf_of, levels, leaf_depth, leaf_count


def lsh_coreset(X: Any, k: int, *, epsilon: float, delta: float, radius: float,
                centre: Any = None, max_depth: int | str = "auto",
                count_share: float | str = "auto", min_node: float | None = None,
                min_branch: float | None = None, seed: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Steps 1–3: the ``(epsilon, delta)``-DP weighted coreset ``(points, weights,
    info)``; arguments as :func:`lsh_tree_clustering`. ``info`` holds the parameters
    (:func:`lsh_params`), the released noisy counts per level (``levels``), the noisy
    leaf sums (``leaf_sums``, centred at ``centre``), the leaves' depths and the depth
    reached, and ``seed_kmeans`` for the k-means step — released values only."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be a non-empty 2-D array; got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("X must be finite.")
    n, d = X.shape
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be finite and > 0; got {radius!r}.")
    c = np.zeros(d) if centre is None else np.asarray(centre, dtype=np.float64)
    c = np.broadcast_to(c, (d,)) if c.ndim == 0 else c
    if c.shape != (d,) or not np.all(np.isfinite(c)):
        raise ValueError(f"centre must be a finite scalar or a ({d},) array; "
                         f"got shape {np.shape(centre)}.")
    p = lsh_params(n, d, k, epsilon=epsilon, delta=delta, radius=radius,
                   max_depth=max_depth, count_share=count_share, min_node=min_node,
                   min_branch=min_branch)
    L = p["max_depth"]
    g_hash, g_noise, g_km = (np.random.default_rng(s)
                             for s in np.random.SeedSequence(seed).spawn(3))

    # 1. clip to the public ball (centred rows)
    Z = X - c
    norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    Z *= np.minimum(1.0, radius / np.maximum(norms, 1e-300))[:, None]
    # 2. SimHash bits of public hyperplanes, and the noisy tree
    H = g_hash.standard_normal((L, d))
    bits = (Z @ H.T > 0).astype(np.int64)
    leaf_of, levels, depth, wts = _build_tree(bits, p["sigma_count"], p["min_node"],
                                              p["min_branch"], g_noise)
    n_leaves = wts.size
    # 3. noisy leaf sums -> coreset
    from scipy import sparse

    member = np.flatnonzero(leaf_of >= 0)
    M = sparse.csr_matrix((np.ones(member.size), (leaf_of[member], member)),
                          shape=(n_leaves, n))
    S = np.asarray(M @ Z) + p["sigma_sum"] * g_noise.standard_normal((n_leaves, d))
    A = S / np.maximum(wts, 1.0)[:, None]
    an = np.sqrt(np.einsum("ij,ij->i", A, A))
    A *= np.minimum(1.0, radius / np.maximum(an, 1e-300))[:, None]
    info = {**p, "levels": levels, "leaf_sums": S, "leaf_depth": depth,
            "depth_reached": len(levels), "seed_kmeans": int(g_km.integers(2**31 - 1))}
    return A + c, wts, info


def lsh_tree_clustering(X: Any, k: int, *, epsilon: float, delta: float, radius: float,
                        centre: Any = None, max_depth: int | str = "auto",
                        count_share: float | str = "auto", min_node: float | None = None,
                        min_branch: float | None = None, seed: int | None = None,
                        n_init: int = 4, return_info: bool = False) -> Any:
    """Centres ``(k', d)``, ``k' = min(k, leaves)``, of the ``(epsilon, delta)``-DP
    LSH-tree clustering (module docstring: the algorithm, the privacy proof, the rules
    for the defaults).

    ``radius`` and ``centre`` (default: the origin) describe the public ball the rows are
    clipped to. ``seed`` drives the hyperplanes, the noise and k-means++ through three
    independent streams (``numpy.random.SeedSequence(seed).spawn(3)``); ``n_init``
    k-means++ restarts on the coreset. With ``return_info=True`` returns
    ``(centres, info)``: :func:`lsh_coreset`'s ``info`` plus the coreset (``coreset``,
    ``weights``) — released values only.
    """
    if not (isinstance(n_init, int) and n_init >= 1):
        raise ValueError(f"n_init must be a positive integer; got {n_init!r}.")
    P, wts, info = lsh_coreset(X, k, epsilon=epsilon, delta=delta, radius=radius,
                               centre=centre, max_depth=max_depth,
                               count_share=count_share, min_node=min_node,
                               min_branch=min_branch, seed=seed)
    # 4. weighted k-means on the coreset (post-processing)
    from sklearn.cluster import KMeans

    kk = int(min(k, wts.size))
    km = KMeans(n_clusters=kk, init="k-means++", n_init=n_init,
                random_state=info["seed_kmeans"])
    centres = np.asarray(km.fit(P, sample_weight=wts).cluster_centers_, dtype=np.float64)
    if not return_info:
        return centres
    return centres, {**info, "coreset": P, "weights": wts}
