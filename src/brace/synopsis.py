"""A one-shot private synopsis of the memory: attractors with noisy counts.

:meth:`brace.PrivateMemory.snapshot` runs private retrieval from *public* seeds, charges
the budget once, and returns a :class:`Synopsis`; every later query is answered from it
by post-processing, at no further cost (``docs/privacy-accounting.md`` §14,
``docs/spec.md`` §8). This module holds the parts that need no budget: the public seeds,
the merge of the released endpoints, the per-row histogram and the :class:`Synopsis`.

The synopsis of released endpoints ``Y_s`` (one per seed ``s``):

1. The public seeds and the released endpoints, merged at ``merge_radius``
   (:func:`first_centres`), are round 1's centres ``c_j``.
2. *Cell rounds* (private releases): each bank row ``x`` joins the cell of the nearest
   centre ``c_j`` among those with ``‖x − c_j‖ ≤ r`` (none: no cell). One Gaussian
   release gives, for every cell, the sum of its rows' offsets ``x − c_j`` (rounded to
   a public grid) and ``r`` times its count. Replacing one row changes this stacked
   vector by at most ``2a ≈ 2r`` in L2, however many cells there are (the cells are
   disjoint): :func:`cell_sensitivity`. The next centre is
   ``c_j + clip_r(sum_j / count_j)`` for each cell whose noisy count reaches
   ``min_count`` (the others are dropped); centres within ``merge_radius`` of a heavier
   one are then merged into it (leader clustering, count-weighted): post-processing,
   :func:`next_centres`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from ._exact import noisy_integers
from ._io import strict_json
from ._validation import (
    MAX_RADIUS,
    MIN_RADIUS,
    check_bounds,
    check_delta,
    check_nonnegative,
    check_positive,
    check_queries,
    check_steps,
)
from .mechanisms import SEED_WITHHELD
from .secure import SECURE_SEED_REASON, check_noise

__all__ = [
    "CELL_RADIUS_RANGE",
    "CELL_SHARE",
    "MAX_SEEDS",
    "Synopsis",
    "cell_sensitivity",
    "cell_sums",
    "check_cell_radius",
    "cell_unit",
    "default_min_count",
    "first_centres",
    "merge_centres",
    "next_centres",
    "public_seeds",
    "release_cell_round",
    "snapshot_noise",
]

CELL_SHARE = 0.8  # default share of a snapshot's zCDP budget spent on the cell rounds
MAX_SEEDS = 1 << 14
#: the stated range of a cell radius ``r_c`` (public, checked before admission): ``r_c²``
#: is normal, so a row whose computed ``fl(d²)`` is at most ``r_c²`` lies within
#: ``r_c(1 + 1e-8)`` of its centre (no far row counted for an underflowed distance), and
#: ``n·r_c`` stays finite (``docs/privacy-accounting.md`` §14, Lemma 9)
CELL_RADIUS_RANGE = (MIN_RADIUS, MAX_RADIUS)  # the support radius's range


def check_cell_radius(radius: Any, name: str = "cell_radius") -> float:
    """A cell radius: a finite number in :data:`CELL_RADIUS_RANGE` ``[2^-400, 2^400]``."""
    r = check_positive(name, radius)
    if not CELL_RADIUS_RANGE[0] <= r <= CELL_RADIUS_RANGE[1]:
        raise ValueError(f"{name} must be in [2^-400, 2^400] (about [3.9e-121, 2.6e120]) "
                         f"so that no squared distance of a cell round can underflow; got "
                         f"{radius!r}.")
    return r
_TILE = 1 << 22  # entries of one (rows × cells × d) difference block of the histogram


def public_seeds(seeds: Any, dim: int, radius: float, *, bounds: Any = None,
                 public_seed: int = 0) -> np.ndarray:
    """The public seeds ``(S, d)`` of a snapshot: an array of public points as given; an
    int ``S``: ``S`` points uniform in the public box ``bounds = (lo, hi)`` (scalars or
    ``(d,)``), drawn from ``public_seed`` (public, so the seeds may be published);
    ``"grid"`` (``d ≤ 3``): the grid of spacing ``r`` over the box. Nothing here reads
    the bank."""
    if isinstance(seeds, str):
        if seeds != "grid":
            raise ValueError(f"seeds must be an array of public points, an int or 'grid'; "
                             f"got {seeds!r}.")
        if dim > 3:
            raise ValueError(f"seeds='grid' is for d <= 3 (a grid of spacing r in d = {dim} "
                             "is too large); pass public points or an int with bounds.")
        lo, hi = _box(bounds, dim)
        axes = [np.arange(lo[i], hi[i] + 0.5 * radius, radius) for i in range(dim)]
        size = math.prod(len(a) for a in axes)
        if size > MAX_SEEDS:
            raise ValueError(f"the grid of spacing r = {radius:g} over the box has {size} "
                             f"points, more than {MAX_SEEDS}; use a smaller box or an int.")
        return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, dim)
    if isinstance(seeds, int | np.integer) and not isinstance(seeds, bool):
        s = int(seeds)
        if not 1 <= s <= MAX_SEEDS:
            raise ValueError(f"seeds (a count) must be in [1, {MAX_SEEDS}]; got {s}.")
        lo, hi = _box(bounds, dim)
        return np.random.default_rng(public_seed).uniform(lo, hi, size=(s, dim))
    if bounds is not None:
        raise ValueError("bounds= is for seeds given as a count or 'grid'.")
    pts, _ = check_queries(seeds, dim, name="seeds")
    if pts.shape[0] > MAX_SEEDS:
        raise ValueError(f"at most {MAX_SEEDS} seeds; got {pts.shape[0]}.")
    return pts


def _box(bounds: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    if bounds is None:
        raise ValueError("seeds given as a count or 'grid' need bounds=(lo, hi): a public "
                         "box (scalars or arrays of length d).")
    return check_bounds(bounds, dim)


def snapshot_noise(noise: Any, seed: Any) -> str:
    """The noise of a snapshot's releases: ``"auto"`` (the default) is ``"secure"`` — the
    exact discrete Gaussian from the operating system (:mod:`brace.discrete`) — when no
    ``seed`` is given and ``"plain"`` (numpy, reproducible) when one is; ``"secure"`` with a
    seed is refused (:data:`brace.secure.SECURE_SEED_REASON`). An unknown mode is refused
    as by every call (:func:`brace.secure.check_noise`: ``TypeError`` for a
    non-string)."""
    noise = check_noise(noise)
    if noise == "auto":
        return "secure" if seed is None else "plain"
    if noise == "secure" and seed is not None:
        raise ValueError(f"seed must be None with noise='secure': {SECURE_SEED_REASON}")
    return noise


def release_cell_round(bank: Any, centres: np.ndarray, radius: float, rho: float,
                       rng: np.random.Generator | None, noise: str = "plain"
                       ) -> tuple[np.ndarray, float]:
    """One cell round (``docs/privacy-accounting.md`` §14, Lemma 9): ``(released, σ)``,
    ``released`` ``(k, d + 1)`` every cell's offset sum and ``radius`` × its count with
    noise of std ``σ = cell_sensitivity/sqrt(2ρ)``: ``ρ``-zCDP whatever ``k``.
    ``noise="plain"``: ``N(0, σ²)`` from ``rng``; ``"secure"``: the exact discrete Gaussian
    in grid units (σ² rounded up; the grid capped so that σ stays in the exact sampler's
    range, :func:`cell_unit`), every bit from the operating system."""
    C = np.asarray(centres, dtype=np.float64)
    cap = float(rho) if noise == "secure" else None
    cnt, sums, unit = cell_sums(bank, C, radius, rho=cap)
    sens = cell_sensitivity(radius, unit, C.shape[1])
    # the exact statistic in grid units (integers below 2^53: exact in float64; r is
    # 2^b units); the noise is added there, and the product by the unit after it is
    # post-processing
    per = int(round(float(radius) / unit))
    stacked = np.concatenate([sums, cnt[:, None] * per], axis=1)
    if noise == "secure":
        noisy, sigma_u = noisy_integers(stacked, sens / unit, rho, noise, None)
        return noisy * unit, sigma_u * unit
    sigma = sens / math.sqrt(2.0 * float(rho))
    noisy = stacked.astype(np.float64) + (sigma / unit) * rng.standard_normal(stacked.shape)
    return noisy * unit, sigma


def merge_centres(points: np.ndarray, weights: np.ndarray, merge_radius: float
                  ) -> np.ndarray:
    """Leader clustering (post-processing): visiting the points by decreasing weight
    (lowest index first on a tie), an unassigned point becomes a leader and takes every
    unassigned point within ``merge_radius`` of it. Unlike single linkage it never chains
    a row of close points into one group. Returns each point's group ``(k,)``, groups
    numbered in the order their leaders were visited."""
    P = np.asarray(points, dtype=np.float64)
    order = np.lexsort((np.arange(P.shape[0]), -np.asarray(weights, dtype=np.float64)))
    tree = cKDTree(P)
    labels = np.full(P.shape[0], -1, dtype=np.int64)
    g = 0
    for i in order:
        if labels[i] >= 0:
            continue
        near = np.asarray(tree.query_ball_point(P[i], merge_radius), dtype=np.int64)
        near = near[labels[near] < 0]
        labels[near] = g
        labels[i] = g
        g += 1
    return labels


def first_centres(points: np.ndarray, merge_radius: float) -> np.ndarray:
    """Round 1's centres (post-processing of public seeds and released endpoints): the
    points merged by :func:`merge_centres` at ``merge_radius``, densest first (a point's
    weight is how many points lie within ``merge_radius`` of it); each group's centre is
    its mean. Fewer, fuller cells: a cell's noise does not shrink with its size, so many
    seeds that split one cluster's rows would each fall below the count threshold."""
    P = np.unique(np.asarray(points, dtype=np.float64), axis=0)
    tree = cKDTree(P)
    dens = tree.query_ball_point(P, merge_radius, return_length=True)
    labels = merge_centres(P, dens, merge_radius)
    g = int(labels.max()) + 1
    out = np.zeros((g, P.shape[1]))
    np.add.at(out, labels, P)
    return out / np.bincount(labels, minlength=g)[:, None]


def cell_unit(radius: float, n: int, rho: float | None = None) -> float:
    """The public grid of a cell sum: ``r·2^-b``, ``b = min(30, 51 − ⌈log2(n + 1)⌉)``, so
    that a sum of ``n`` rounded offsets (each at most ``2^b + 1`` units) stays below
    ``2^53`` units: exact in int64 and in float64. With ``rho`` (secure noise) also
    ``b ≤ 27 + ⌊log2 sqrt(2ρ)⌋``, so that the noise's σ stays below ``2^28`` units (the
    exact sampler's range). Also a Voronoi round's grid, ``clip`` for ``radius``, always
    with ``rho`` (:data:`brace.seeding.voronoi_unit`, §15)."""
    b = min(30, 51 - math.ceil(math.log2(n + 1)))
    if rho is not None:
        b = max(1, min(b, 27 + math.floor(math.log2(math.sqrt(2.0 * float(rho))))))
    return math.ldexp(float(radius), -b)


def cell_sensitivity(radius: float, unit: float, dim: int) -> float:
    """L2 sensitivity ``2a`` of one cell round's release (every cell's rounded offset
    sum and ``r`` times its count, stacked), ``a = r(1 + 2e-8) + unit·sqrt(d)/2`` the
    largest norm of one row's rounded offset (``docs/privacy-accounting.md`` §14); also
    a Voronoi round's, ``clip`` for ``radius`` (§15, Lemma 11:
    :data:`brace.seeding.voronoi_sensitivity`)."""
    a = float(radius) * (1.0 + 2e-8) + unit * math.sqrt(dim) / 2.0
    return 2.0 * a * (1.0 + 1e-12)


def cell_sums(bank: Any, centres: np.ndarray, radius: float, rho: float | None = None
              ) -> tuple[np.ndarray, np.ndarray, float]:
    """The exact cell statistics of a synopsis round: ``(counts (k,) int64, sums (k, d)
    int64 in units of ``unit``, unit)``. ``bank`` is an array or an
    :class:`~brace.LSRMemory` (read by its verified row blocks, so memory-mapped, Dask
    and torch banks work). Row ``x``
    belongs to the cell of its nearest centre among those with ``‖x − c_j‖ ≤ radius``
    (none: no cell); ``sums[j]`` is the sum over cell ``j`` of ``x − c_j`` rounded to
    the public grid ``unit`` (:func:`cell_unit`), in grid units, added exactly in
    integers (no sum depends on the order of the rows); every sum is below ``2^53``
    units, so it converts to float64 exactly.

    A row's cell and rounded offset are computed from that row and the public centres
    only — squared distances summed coordinate by coordinate, row by row, never by a
    matrix product whose blocking may depend on other rows — so each is a fixed
    function of the row (``docs/privacy-accounting.md`` §14). A counted row lies within
    ``radius·(1 + 1e-8)`` of its centre."""
    C = np.asarray(centres, dtype=np.float64)
    k, d = C.shape
    r2 = check_cell_radius(radius, "radius") ** 2  # public; normal (Lemma 9)
    if hasattr(bank, "_blocks"):  # a memory: its verified row blocks (any backend)
        n, blocks = bank.n_memories, (Xb for _, Xb in bank._blocks())
    else:
        n, blocks = bank.shape[0], (bank,)
    unit = cell_unit(radius, n, rho)
    counts = np.zeros(k, dtype=np.int64)
    sums = np.zeros((k, d), dtype=np.int64)
    step = max(1, _TILE // max(1, k * d))
    tiles = (np.asarray(B[i:i + step], dtype=np.float64)
             for B in blocks for i in range(0, B.shape[0], step))
    for X in tiles:
        with np.errstate(over="ignore", invalid="ignore"):
            diff = X[:, None, :] - C[None, :, :]
            d2 = (diff * diff).sum(axis=2)
        if not np.all(np.isfinite(d2)):
            raise ValueError("a squared distance between a bank row and a centre is not "
                             "finite: the bank or the centres are out of the float64 range.")
        d2 = np.where(d2 <= r2, d2, np.inf)
        j = np.argmin(d2, axis=1)
        rows = np.flatnonzero(np.isfinite(d2[np.arange(X.shape[0]), j]))
        if rows.size:
            off = np.rint(diff[rows, j[rows]] / unit).astype(np.int64)  # |off| <= 2^b + 1
            np.add.at(sums, j[rows], off)
            counts += np.bincount(j[rows], minlength=k)
    return counts, sums, unit


def next_centres(centres: np.ndarray, released: np.ndarray, radius: float,
                 merge_radius: float, min_count: float, noise_std: float = 0.0,
                 keep_unmoved: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Post-processing of one cell round's release ``(k, d + 1)`` (noisy offset sums,
    ``r`` × noisy count): cells with noisy count below ``min_count`` are dropped (the
    largest is kept); each other centre moves by ``clip_r(sum / count)``, the step first
    shrunk towards 0 by the positive-part James–Stein factor
    ``max(0, 1 − d(σ/count)²/‖step‖²)`` when the sums' noise std ``noise_std = σ`` is
    given (the step's noise is ``σ/count`` per coordinate); with ``keep_unmoved`` the
    cells below ``min_count`` are kept where they are instead of dropped; moved centres
    within ``merge_radius`` of a heavier one are merged into it (leader clustering,
    :func:`merge_centres`; count-weighted mean, counts added). Returns the new centres
    and their noisy counts."""
    r = float(radius)
    m = released[:, -1] / r
    keep = m >= min_count  # prune first: merging empty cells would chain them together
    keep[int(np.argmax(m))] = True
    step = released[:, :-1] / np.maximum(m, 1.0)[:, None]
    if keep_unmoved:  # the others stay where they are (no step), counted as released
        step[~keep] = 0.0
        keep[:] = True
    m, step = m[keep], step[keep]
    if noise_std > 0.0:  # positive-part James-Stein shrinkage of the noisy step
        d = step.shape[1]
        ss = np.sum(step * step, axis=1, keepdims=True)
        noise = d * (noise_std / np.maximum(m, 1.0))[:, None] ** 2
        step = step * np.maximum(0.0, 1.0 - noise / np.maximum(ss, 1e-300))
    norm = np.linalg.norm(step, axis=1, keepdims=True)
    with np.errstate(over="ignore"):  # r/tiny → inf → the factor 1
        moved = centres[keep] + step * np.minimum(1.0, r / np.maximum(norm, 1e-300))
    labels = merge_centres(moved, m, merge_radius)
    g = int(labels.max()) + 1
    w = np.maximum(m, 1e-3)  # merge weights (an unmoved cell's noisy count may be < 0)
    out = np.zeros((g, moved.shape[1]))
    np.add.at(out, labels, moved * w[:, None])
    wsum = np.zeros(g)
    np.add.at(wsum, labels, w)
    cnt = np.zeros(g)
    np.add.at(cnt, labels, m)
    return out / wsum[:, None], cnt


def default_min_count(count_std: float, cells: int) -> float:
    """The default noisy-count threshold: ``count_std·sqrt(2·log(4k))`` for ``k`` cells
    (an empty cell passes with probability below about ``1/(4k)``)."""
    return count_std * math.sqrt(2.0 * math.log(4.0 * max(cells, 1)))


def _check_projection(pr: Any, d: int) -> None:
    """The checks of a saved synopsis's ``params["project"]`` (a snapshot with
    ``project``, ``docs/privacy-accounting.md`` §15.1): ``k`` with ``1 ≤ k < d``, a
    finite ``(k, d)`` basis with orthonormal rows (within ``10⁻⁶``: the released
    eigenvectors on the grid ``2^-30``), a finite mean of length ``d``, a clip ``> 0``
    and ``k`` noisy eigenvalues."""
    bad = "not a saved synopsis: params['project']"
    if not isinstance(pr, dict):
        raise ValueError(f"{bad} must be an object.")
    k = pr.get("k")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < d:
        raise ValueError(f"{bad}['k'] must be an int with 1 <= k < d = {d}; got {k!r}.")
    try:
        B = np.asarray(pr.get("basis"), dtype=np.float64)
        mean = np.asarray(pr.get("mean"), dtype=np.float64)
        ev = np.asarray(pr.get("eigenvalues"), dtype=np.float64)
        clip = float(pr.get("clip"))
    except (TypeError, ValueError):
        raise ValueError(f"{bad}: basis, mean, eigenvalues and clip must be numbers.") \
            from None
    if B.shape != (k, d) or not np.all(np.isfinite(B)):
        raise ValueError(f"{bad}['basis'] must be a finite ({k}, {d}) array; got shape "
                         f"{B.shape}.")
    if not np.allclose(B @ B.T, np.eye(k), rtol=0.0, atol=1e-6):
        raise ValueError(f"{bad}['basis'] must have orthonormal rows (the released "
                         "eigenvectors).")
    if mean.shape != (d,) or not np.all(np.isfinite(mean)):
        raise ValueError(f"{bad}['mean'] must be {d} finite numbers.")
    if ev.shape != (k,) or not np.all(np.isfinite(ev)):
        raise ValueError(f"{bad}['eigenvalues'] must be {k} finite numbers.")
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"{bad}['clip'] must be finite and > 0; got {clip!r}.")


def _check_pairs(params: dict[str, Any], k: int) -> None:
    """The checks of a saved synopsis's pair release (``docs/privacy-accounting.md``
    §15.2): ``k(k − 1)/2`` finite noisy counts, one per pair of attractors, and a finite
    ``pairs_sigma ≥ 0``."""
    bad = "not a saved synopsis: params['pairs']"
    try:
        v = np.asarray(params["pairs"], dtype=np.float64)
        sigma = float(params.get("pairs_sigma"))
    except (TypeError, ValueError):
        raise ValueError(f"{bad} and params['pairs_sigma'] must be numbers.") from None
    if v.shape != (k * (k - 1) // 2,) or not np.all(np.isfinite(v)):
        raise ValueError(f"{bad} must hold k(k-1)/2 = {k * (k - 1) // 2} finite counts for "
                         f"k = {k} attractors; got shape {v.shape}.")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"not a saved synopsis: params['pairs_sigma'] must be finite and "
                         f">= 0; got {sigma!r}.")


@dataclasses.dataclass(frozen=True)
class Synopsis:
    """A private synopsis of an LSR memory (:meth:`brace.PrivateMemory.snapshot`).

    Everything here is released (public): answering from it is post-processing and
    costs nothing (``docs/privacy-accounting.md`` §14).

    Attributes
    ----------
    attractors : (k, d) the kept attractors (the last cell round's centres, merged).
    counts : (k,) int64 their noisy memory counts (the last round's, rounded, at
        least 0).
    radius : the memory's support radius ``r``.
    seeds : (S, d) the public seeds; ``endpoints`` (S, d) their released endpoints
        ``Y_T``. Both ``(0, d)`` for a synopsis whose seeds were found privately
        (``params["seeding"] == "private"``: ``params`` then holds the public
        ``domain``, the private ``scale`` and the plan, ``docs/privacy-accounting.md``
        §15).
    epsilon, delta : what the snapshot alone costs, ε at ``delta`` (its seeds' steps and
        its cell rounds composed); ``seed_epsilon``, ``seed_delta``: the per-seed target
        of the retrieval; ``cell_rho``: the zCDP parameter of each cell round.
    params : the release's public parameters (method, release, steps, merge_radius,
        min_count, accounting of the bank, ``noise`` — ``"secure"`` or ``"plain"`` — and
        ``seed`` only when the caller passed one, …).
    """

    attractors: np.ndarray
    counts: np.ndarray
    radius: float
    seeds: np.ndarray
    endpoints: np.ndarray
    epsilon: float
    delta: float
    seed_epsilon: float
    seed_delta: float
    cell_rho: float
    params: dict[str, Any]
    # clusters() computed once per k (post-processing of released values; not a field of
    # the release: not printed, compared or saved)
    _memo: dict[Any, Any] = dataclasses.field(default_factory=dict, init=False,
                                              repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("attractors", "counts", "seeds", "endpoints"):
            a = np.array(getattr(self, name))
            a.setflags(write=False)
            object.__setattr__(self, name, a)

    @property
    def n_attractors(self) -> int:
        return int(self.attractors.shape[0])

    def assign(self, points: Any) -> np.ndarray:
        """``(n,)`` int: the index of the nearest attractor of each point (lowest on a
        tie). Post-processing."""
        p, _ = check_queries(points, self.attractors.shape[1], name="points")
        return cKDTree(self.attractors).query(p)[1].astype(np.int64)

    def clusters(self, k: int | None = None) -> np.ndarray:
        """``(K,)`` int: the cluster of each attractor (post-processing: free).

        Without ``k``: the attractors merged by the released pair counts
        (``params["pairs"]``, a synopsis without public data:
        ``docs/privacy-accounting.md`` §15.2, :func:`brace.merging.merge_labels`: the
        pair-by-pair joins and the chain joins, then the second pass, both over the
        Gabriel graph of the attractors); a
        synopsis without them (public seeds, or saved before §15.2) keeps each attractor
        its own cluster. With ``k`` (the number of clusters, if you know it): weighted
        k-means of the attractors to ``min(k, K)`` groups
        (:func:`brace.merging.kmeans_labels`). Computed once per ``k`` and reused by
        :meth:`cluster` (recomputed if ``params["pairs"]`` was changed since); each call
        returns its own copy."""
        from .merging import kmeans_labels, merge_labels

        K = self.n_attractors
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
                raise ValueError(f"k must be an int >= 1 (the number of clusters); got "
                                 f"{k!r}.")
            k = int(k)
        pairs = self.params.get("pairs")
        sigma = self.params.get("pairs_sigma")
        # computed once per k; ``params`` is a dict, so the memo holds the pair counts
        # it was computed from and is recomputed if they were changed since
        try:
            key = (None if pairs is None else np.asarray(pairs, dtype=np.float64).tobytes(),
                   None if sigma is None else float(sigma))
        except (TypeError, ValueError):
            key = None  # not numbers: merge_labels below names the error
        hit = self._memo.get(k)
        if key is not None and hit is not None and hit[0] == key:
            return hit[1].copy()
        if k is not None:
            labels = kmeans_labels(self.attractors, self.counts, k)
        elif pairs is None:
            labels = np.arange(K, dtype=np.int64)
        elif sigma is None:
            raise ValueError("params holds 'pairs' but no 'pairs_sigma' (their noise std): "
                             "not a synopsis written by snapshot().")
        else:
            labels = merge_labels(self.counts, pairs, float(sigma),
                                  attractors=self.attractors)
        if key is not None:
            self._memo[k] = (key, labels.copy())
        return labels

    def cluster(self, points: Any, k: int | None = None) -> np.ndarray:
        """``(n,)`` int: the cluster (:meth:`clusters`) of each point's nearest attractor.
        Post-processing."""
        return self.clusters(k)[self.assign(points)]

    def complete(self, queries: Any, *, how: str = "nearest", steps: int | None = None
                 ) -> np.ndarray:
        """Complete queries from the synopsis alone (post-processing: free).

        ``how="nearest"``: the nearest attractor. ``how="lsr"``: noiseless LSR retrieval
        (``docs/spec.md`` §1) over the attractors with the memory's radius, ``steps``
        steps (default: the snapshot's); a query with no attractor within ``r`` stays
        where it is. Returns ``(Q, d)`` float64.
        """
        q, single = check_queries(queries, self.attractors.shape[1], name="queries")
        if how == "nearest":
            out = self.attractors[self.assign(q)]
        elif how == "lsr":
            from .memory import LSRMemory

            T = check_steps(max(1, self.params["steps"]) if steps is None else steps)
            out = LSRMemory(self.attractors, radius=self.radius).retrieve(q, T)
            out = np.asarray(out)[:, -1] if out.ndim == 3 else np.asarray(out)
        else:
            raise ValueError(f"how must be 'nearest' or 'lsr'; got {how!r}.")
        return out[0] if single else out

    def to_dict(self, *, include_seed: bool = False) -> dict[str, Any]:
        """JSON-able dict of every field. ``params["seed"]`` regenerates the noise, so it
        is secret and withheld unless ``include_seed=True`` (as for a release,
        :data:`brace.mechanisms.SEED_WITHHELD`); everything else is public."""
        params = dict(self.params)
        if not include_seed and params.get("seed") is not None:
            params["seed"] = None
            params["seed_null_reason"] = SEED_WITHHELD
        return {
            "attractors": self.attractors.tolist(), "counts": self.counts.tolist(),
            "radius": self.radius, "seeds": self.seeds.tolist(),
            "endpoints": self.endpoints.tolist(),
            "epsilon": self.epsilon, "delta": self.delta,
            "seed_epsilon": self.seed_epsilon, "seed_delta": self.seed_delta,
            "cell_rho": self.cell_rho, "params": params,
        }

    def to_json(self, *, include_seed: bool = False) -> str:
        return json.dumps(strict_json(self.to_dict(include_seed=include_seed)),
                          allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Synopsis:
        """Rebuild a synopsis saved with :meth:`to_dict` (post-processing: free). Every
        field is checked, and a ``ValueError`` names the first that could not have been
        written by :meth:`PrivateMemory.snapshot` (a cost ε ≤ 0 or δ ∉ (0, 1), arrays
        of another dimension, counts that are not integers, negative noisy counts where
        every kept cell passed a threshold ≥ 0, …)."""
        if not isinstance(data, dict):
            raise ValueError(f"not a saved synopsis: expected a JSON object; got "
                             f"{type(data).__name__}.")
        missing = [k for k in ("attractors", "counts", "radius", "seeds", "endpoints",
                               "epsilon", "delta", "seed_epsilon", "seed_delta",
                               "cell_rho", "params") if k not in data]
        if missing:
            raise ValueError(f"not a saved synopsis: missing field(s) {missing}.")

        def field(name: str, check: Any) -> Any:
            try:
                return check(data[name])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"not a saved synopsis: field {name!r}: {exc}") from None

        def array(value: Any) -> np.ndarray:
            a = np.asarray(value, dtype=np.float64)
            if not np.all(np.isfinite(a)):
                raise ValueError("must hold finite numbers.")
            return a

        att = field("attractors", array)
        if att.ndim != 2 or att.shape[0] < 1 or att.shape[1] < 1:
            raise ValueError("not a saved synopsis: attractors must be a finite (k, d) "
                             f"array with k >= 1; got shape {att.shape}.")
        k, d = att.shape
        params = data["params"]
        if not isinstance(params, dict):
            raise ValueError("not a saved synopsis: field 'params' must be an object.")
        if params.get("noise", "plain") not in ("plain", "secure"):
            raise ValueError("not a saved synopsis: params['noise'] must be 'plain' or "
                             f"'secure'; got {params.get('noise')!r}.")
        counts = field("counts", array)
        if counts.shape != (k,) or not np.all(counts == np.rint(counts)):
            raise ValueError(f"not a saved synopsis: counts must be {k} integers, one per "
                             f"attractor; got shape {counts.shape}.")
        if np.any(counts < 0) and k > 1 and params.get("keep_seeds") is not True:
            raise ValueError(
                "not a saved synopsis: counts must be >= 0: every kept cell passed a "
                "noisy-count threshold >= 0 (only a synopsis made with keep_seeds=True, or "
                "of one attractor, may hold a negative noisy count).")
        pts = {}
        for name in ("seeds", "endpoints"):
            a = field(name, array)
            if a.size == 0:
                a = a.reshape(0, d)
            if a.ndim != 2 or a.shape[1] != d:
                raise ValueError(f"not a saved synopsis: {name} must be an (S, {d}) array "
                                 f"(the attractors' dimension); got shape {a.shape}.")
            pts[name] = a
        if pts["endpoints"].shape[0] not in (0, pts["seeds"].shape[0]):
            raise ValueError("not a saved synopsis: endpoints must be empty or one per "
                             "seed.")
        if params.get("project") is not None:
            _check_projection(params["project"], d)
        if params.get("pairs") is not None:  # the pair release (§15.2)
            _check_pairs(params, k)
        return cls(
            att, counts.astype(np.int64),
            field("radius", lambda v: check_positive("radius", v)),
            pts["seeds"], pts["endpoints"],
            field("epsilon", lambda v: check_positive("epsilon", v)),
            field("delta", lambda v: check_delta(v)),
            field("seed_epsilon", lambda v: check_nonnegative("seed_epsilon", v)),
            field("seed_delta", lambda v: 0.0 if v == 0 else check_delta(v, "seed_delta")),
            field("cell_rho", lambda v: check_positive("cell_rho", v)),
            dict(params))

    @classmethod
    def from_json(cls, text: str) -> Synopsis:
        """:meth:`from_dict` of a JSON text (strict: no NaN or ∞)."""
        if not isinstance(text, str | bytes | bytearray):
            raise TypeError(f"from_json takes the JSON text; got {type(text).__name__}.")

        def constant(name: str) -> Any:
            raise ValueError(f"the non-standard number {name}")

        try:
            data = json.loads(text, parse_constant=constant)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            raise ValueError(f"not a saved synopsis: not valid JSON ({exc}).") from None
        return cls.from_dict(data)

    def summary(self) -> str:
        p = self.params
        noise = p.get("noise", "plain")
        if p.get("seeding") == "private":
            dom = p.get("domain", {})
            pr = p.get("project")
            lines = [
                f"Synopsis: {self.n_attractors} attractors, seeds found privately in a "
                f"public {dom.get('kind', '?')} (d = {self.attractors.shape[1]}, "
                f"r = {self.radius:g}; no public data)",
                *([] if pr is None else [
                    f"  subspace         : k = {pr.get('k')} directions (the private "
                    "second moments' top eigenvectors, clip "
                    f"{pr.get('clip', float('nan')):.4g} around the private mean); "
                    "the rounds below ran in it"]),
                f"  cost             : eps = {self.epsilon:.4g} at delta = {self.delta:g} "
                + ("" if pr is None else "(a centre and a radii release in the full "
                   "space, the second moments, then in the subspace ")
                + ("(" if pr is None else "")
                + f"a centre release, {p.get('rounds')} radii releases and "
                f"{p.get('rounds')} Voronoi rounds at rho = {self.cell_rho:.4g} each; "
                f"{noise} noise)",
                f"  cells            : {p.get('k0')} to start; private scale "
                f"{p.get('scale', float('nan')):.4g} (median distance to the nearest "
                f"centre), merged at {p.get('merge_radius', float('nan')):.4g}, noisy "
                f"count < {p.get('min_count', float('nan')):.3g} dropped",
                "  noisy counts     : " + np.array2string(self.counts, threshold=12),
                *([] if p.get("pairs") is None else [
                    f"  clusters         : {int(np.unique(self.clusters()).size)} (the "
                    "attractors joined by the released pair counts: clusters(), "
                    "cluster(points, k=None))"]),
                "  later queries    : free (post-processing: complete(), assign())",
            ]
            return "\n".join(lines)
        lines = [
            f"Synopsis: {self.n_attractors} attractors from {self.seeds.shape[0]} public "
            f"seeds (d = {self.attractors.shape[1]}, r = {self.radius:g})",
            f"  cost             : eps = {self.epsilon:.4g} at delta = {self.delta:g} "
            f"(seeds: {p.get('method')}/{p.get('release')} at ({self.seed_epsilon:.4g}, "
            f"{self.seed_delta:.3g}) each, {p.get('steps')} steps; {p.get('rounds')} cell "
            f"rounds at rho = {self.cell_rho:.4g} each; {noise} noise)",
            f"  cells            : {p.get('groups')} in round 1 (seeds and endpoints); after each "
            f"round merged at {p.get('merge_radius'):.4g} and those with noisy count < "
            f"{p.get('min_count'):.3g} dropped",
            "  noisy counts     : " + np.array2string(self.counts, threshold=12),
            "  later queries    : free (post-processing: complete(), assign())",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return (f"Synopsis(k={self.n_attractors}, d={self.attractors.shape[1]}, "
                f"epsilon={self.epsilon:.4g}, delta={self.delta:g})")
