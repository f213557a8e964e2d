"""A privacy filter over a fully adaptive sequence of releases, global or local.

``docs/privacy-accounting.md`` §12 states and proves what this module enforces. In brief:

* Every released step ``t`` carries an RDP curve ``ε_t(α)`` (its event, at the orders
  :data:`ORDERS`) and a direct failure probability ``δ_t`` (the count release's proposal,
  0 otherwise): its *weight* ``w_t = (ε_t(α_1), …, ε_t(α_K), δ_t)``
  (:func:`event_weights`).
* For neighbouring banks that replace a row ``x`` by ``x'``, step ``t`` costs ``w_t`` if
  its public footprint holds ``x`` or ``x'`` and nothing otherwise
  (:mod:`brace.footprints`, above this package). *Global* accounting charges every
  step to every pair.
* The filter (:class:`FilterSpec`) admits a call only if, with the call's reserved
  weights added, the worst pair of neighbours satisfies: ``Σδ_t ≤ Δ`` and, for at least
  one order ``α`` of a **fixed** set ``G`` chosen when the budget is created,
  ``Σ ε_t(α) ≤ B_α``, where ``B_α`` converts to ``ε`` at ``δ_α = (δ − Δ)/|G|``
  (by default the two orders of the grid that admit the largest Gaussian composition).
  By the Rényi filter at each fixed order (Feldman & Zrnic 2021, Thm 3.1, with
  predictable per-pair costs), a union over the orders of ``G`` (as in Lécuyer 2021) and
  step-by-step conditioning for the ``δ_t`` (Whitehouse et al. 2023's approximate-zCDP
  filter), the whole adaptive history is ``(ε, δ)``-DP.
* The worst pair is bounded from above (:class:`FootprintIndex`): a point in footprint
  ``i`` lies only in footprints that meet ``i``, so the pair ``(x ∈ i, x' ∈ j)`` costs at
  most the weight of the footprints meeting ``i`` or ``j``; the maximum over pairs is
  searched exactly among the most crowded footprints and bounded for the rest, and it
  never exceeds the global total. Where more than :data:`_MAX_MEETS` pairs of balls
  would meet (e.g. 100,000 reserved balls that all overlap), added balls are taken to
  meet every footprint instead of listing the pairs: each ``U`` stays an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from .._validation import check_budget
from .accountant import RdpAccountant
from .events import DpEvent

__all__ = [
    "ORDERS",
    "FilterSpec",
    "FootprintIndex",
    "event_weights",
    "convert",
]

#: The Rényi orders at which every weight is kept (α − 1 log-spaced over [0.02, 5000]).
ORDERS = 1.0 + np.geomspace(0.02, 5000.0, 64)
K = ORDERS.size  # weights are (K + 1,): the RDP at each order, then the direct δ
_MAX_TOP = 64  # footprints examined exactly by the worst-pair search, per order
_TREE_MAX_DIM = 16  # bulk neighbour queries use KD-trees up to this d, blocked GEMMs above
# every weight sum is a float64 sum of at most 10^7 terms: a relative 1e-9 covers its
# rounding, so the reported sums bound the exact ones
ROUNDING = 1.0 + 1e-9
_MAX_PAIRS = 256  # pair unions evaluated before the search falls back to its bound
#: meeting pairs listed at most when footprints are added; beyond, the new balls are taken
#: to meet every footprint (their U is the total: a bound, as every U must be)
_MAX_MEETS = 1 << 23


def event_weights(event: DpEvent) -> np.ndarray:
    """``(K + 1,)``: the event's RDP at :data:`ORDERS` (``+∞`` where not finite), then
    its direct failure probability (the count release's proposals)."""
    a = RdpAccountant().compose(event)
    out = np.empty(K + 1)
    out[:K] = a.rdp(ORDERS)
    out[K] = a._delta_extra
    if a._non_private:
        out[:] = math.inf
    return out


def convert(weights: np.ndarray, delta: float) -> float:
    """ε at ``delta`` of a composed weight vector: the conversion of
    ``docs/privacy-accounting.md`` §5 minimised over :data:`ORDERS`, with the direct δ
    part charged as in §9 (converted at ``δ − δ_E``, ``log(1/(1 − δ_E))`` added).
    Exactly 0 for an empty composition."""
    w = np.asarray(weights, dtype=np.float64)
    rdp, de = w[:K], float(w[K])
    if not np.any(rdp > 0.0) and de == 0.0:
        return 0.0
    if not delta > de:
        return math.inf
    dl = delta - de
    x = ORDERS - 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log(x / ORDERS) - (math.log(dl) + np.log(ORDERS)) / x
    eps = np.where(np.isnan(eps), np.inf, eps)
    return max(0.0, float(np.min(eps)) - math.log1p(-de))


@dataclass(frozen=True)
class FilterSpec:
    """The filter of a budget ``(epsilon, delta)``: the fixed order set ``orders``
    (indices into :data:`ORDERS`) and the direct-δ cap ``delta_direct`` (``Δ``).

    The guarantee of everything it admits is ``(epsilon, delta)``-DP
    (``docs/privacy-accounting.md`` §12).
    """

    epsilon: float
    delta: float
    orders: tuple[int, ...]
    delta_direct: float

    @classmethod
    def for_budget(cls, epsilon: float, delta: float, *, n_orders: int = 2,
                   delta_direct: float | None = None) -> FilterSpec:
        """The default filter of a budget: ``Δ = δ/2`` and the ``n_orders`` orders of
        :data:`ORDERS` that admit the largest Gaussian composition at their own
        thresholds — a total ``ρ`` passes at ``α`` iff ``αρ ≤ B_α``, so the orders with
        the largest ``B_α/α`` at ``δ_α = (δ − Δ)/n_orders`` (adjacent: ``B_α/α`` is
        unimodal on the grid). A public function of the budget
        (``docs/privacy-accounting.md`` §12, "Which orders"; a ledger keeps the orders it
        was created with: the earlier default was the 4 orders nearest
        ``1 + sqrt(log(1/δ)/ρ(ε, δ))``)."""
        eps, dl = check_budget((epsilon, delta))
        if isinstance(n_orders, bool) or not isinstance(n_orders, int | np.integer) \
                or not 1 <= n_orders <= K:
            raise ValueError(f"n_orders must be an int in [1, {K}]; got {n_orders!r}.")
        dd = 0.5 * dl if delta_direct is None else float(delta_direct)
        if not 0.0 <= dd < dl:
            raise ValueError(f"delta_direct must be in [0, delta); got {delta_direct!r} with "
                             f"delta = {dl}.")
        cap = _thresholds(ORDERS, eps, (dl - dd) / int(n_orders), dd) / ORDERS
        idx = tuple(sorted(int(i) for i in np.argsort(-cap, kind="stable")[:int(n_orders)]))
        return cls(eps, dl, idx, dd)

    def __post_init__(self) -> None:
        if not self.orders or any(not 0 <= i < K for i in self.orders):
            raise ValueError(f"filter orders must be indices into ORDERS; got {self.orders}.")
        if not 0.0 <= self.delta_direct < self.delta:
            raise ValueError(
                f"delta_direct must be in [0, delta); got {self.delta_direct} with delta = "
                f"{self.delta}.")

    @property
    def thresholds(self) -> np.ndarray:
        """``B_α`` for the orders of ``G``: the largest RDP that converts to ``ε`` at
        ``δ_α = (δ − Δ)/|G|`` after the direct part's ``log(1/(1 − Δ))``."""
        return _thresholds(ORDERS[list(self.orders)], self.epsilon,
                           (self.delta - self.delta_direct) / len(self.orders),
                           self.delta_direct)

    def admits(self, worst: np.ndarray) -> bool:
        """Whether a worst-pair weight vector (``(K + 1,)``) passes the filter."""
        w = np.asarray(worst, dtype=np.float64)
        if not w[K] <= self.delta_direct:
            return False
        return bool(np.any(w[list(self.orders)] <= self.thresholds))

    def usage(self, worst: np.ndarray) -> float:
        """How much of the filter a worst-pair weight uses: ``min_α Σε(α)/B_α`` over
        ``G`` (and the δ part's share); ≤ 1 iff admitted (0 when nothing is spent)."""
        w = np.asarray(worst, dtype=np.float64)
        b = self.thresholds
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(b > 0, w[list(self.orders)] / b, np.inf)
        rd = w[K] / self.delta_direct if self.delta_direct > 0 else (
            0.0 if w[K] == 0 else math.inf)
        return float(max(np.min(r), rd))

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta,
                "orders": [float(ORDERS[i]) for i in self.orders],
                "order_indices": list(self.orders), "delta_direct": self.delta_direct}


def _thresholds(a: np.ndarray, epsilon: float, delta_order: float,
                delta_direct: float) -> np.ndarray:
    """``B_α`` at orders ``a``: the RDP that converts to ``ε − log(1/(1 − Δ))`` at
    ``delta_order`` (``docs/privacy-accounting.md`` §5)."""
    x = a - 1.0
    e = epsilon + math.log1p(-delta_direct)
    return e - np.log(x / a) + (math.log(delta_order) + np.log(a)) / x


def _meets(ca: np.ndarray, ra: np.ndarray, cb: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """``(len(a), len(b))`` bool: whether closed balls may intersect, decided
    conservatively: ``‖c_a − c_b‖ ≤ ρ_a + ρ_b`` up to an upper bound on the rounding of
    the computed squared distance (a pair in doubt counts as meeting)."""
    d = ca.shape[1]
    eps8 = 8.0 * (d + 4) * np.finfo(np.float64).eps
    with np.errstate(invalid="ignore", over="ignore"):  # an overflow meets (below)
        na = np.einsum("ij,ij->i", ca, ca)
        nb = np.einsum("ij,ij->i", cb, cb)
        d2 = ca @ cb.T
        d2 *= -2.0
        d2 += na[:, None]
        d2 += nb[None, :]
        smax = float(np.max(ra, initial=0.0)) + float(np.max(rb, initial=0.0))
        lim = smax * smax * (1.0 + 1e-12) + eps8 * (float(np.max(na, initial=0.0))
                                                    + float(np.max(nb, initial=0.0)))
    if not np.isfinite(lim):  # an infinite ball: decide every pair exactly below
        cand = np.ones(d2.shape, dtype=bool)
    else:
        cand = ~(d2 > lim)  # a necessary condition, cheap (NaN, an overflow: in doubt)
    i, j = np.nonzero(cand)
    out = np.zeros(d2.shape, dtype=bool)
    if i.size:
        band = eps8 * (na[i] + nb[j]) + 1e-300
        sij = ra[i] + rb[j]
        with np.errstate(invalid="ignore", over="ignore"):
            ok = ~(d2[i, j] - band > sij * sij * (1.0 + 1e-12)) | ~np.isfinite(sij)
        out[i[ok], j[ok]] = True
    return out


class FootprintIndex:
    """Footprints (balls with weights) and, for each, ``U_i``: the total weight of the
    footprints that meet it (itself included). Maintained incrementally.

    Not thread-safe; the caller serialises access.
    """

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self._n = 0
        self._c = np.empty((0, self.dim))
        self._r = np.empty(0)
        self._w = np.empty((0, K + 1))
        self._u = np.empty((0, K + 1))
        self.total = np.zeros(K + 1)
        self._nbr: dict[int, np.ndarray] = {}  # neighbour lists asked for, kept current
        self._cached = np.zeros(0, dtype=bool)

    centres = property(lambda self: self._c[: self._n])
    radii = property(lambda self: self._r[: self._n])
    weights = property(lambda self: self._w[: self._n])
    U = property(lambda self: self._u[: self._n])

    def __len__(self) -> int:
        return self._n

    def _grow(self, extra: int) -> None:
        need = self._n + extra
        if need <= self._r.shape[0]:
            return
        cap = max(need, 2 * self._r.shape[0], 64)

        def grow(a: np.ndarray) -> np.ndarray:
            out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
            out[: self._n] = a[: self._n]
            return out

        self._c, self._r, self._w, self._u = map(grow, (self._c, self._r, self._w, self._u))
        self._cached = grow(self._cached)

    # ------------------------------------------------------------------------------
    def _adjacency(self, c: np.ndarray, r: np.ndarray, upto: int,
                   limit: int | None = None) -> sparse.csr_array | None:
        """``(len(c), upto)`` 0/1 CSR: which of the first ``upto`` footprints each ball
        meets (:func:`_meets`, conservative). None, with ``limit``, where more than
        ``limit`` pairs meet (on the tree path first estimated from every ``k/1024``-th
        ball, then counted as blocks are listed; public footprints only) or, on the
        blocked path, more than ``limit·64`` pairs would be tested."""
        m = upto
        k = c.shape[0]
        if m == 0 or k == 0:
            return sparse.csr_array((k, m))
        C, Rr = self._c[:m], self._r[:m]
        fin_old = np.isfinite(Rr)
        if self.dim <= _TREE_MAX_DIM and k >= 64 and k * m > (1 << 22) and np.all(np.isfinite(r)) \
                and np.any(fin_old):
            from scipy.spatial import cKDTree  # bulk: pairs from two trees

            old_idx = np.flatnonzero(fin_old)
            reach = (float(r.max()) + float(Rr[old_idx].max())) * (1 + 1e-9) + 1e-300
            t_old = cKDTree(C[old_idx])
            if limit is not None:  # pairs within reach, from every s-th new ball, times s
                s = max(1, k // 1024)
                est = int(cKDTree(c[::s]).count_neighbors(t_old, reach)) * s
                if est + k * (m - old_idx.size) > limit:
                    return None
            # listed block by block, the cap counted as they come (the sample's estimate
            # above may miss balls that meet much)
            blk = k if limit is None else max(1, limit // max(1, old_idx.size))
            found, ii, jj, vv = k * (m - old_idx.size), [], [], []
            for b0 in range(0, k, blk):
                res = cKDTree(c[b0:b0 + blk]).sparse_distance_matrix(
                    t_old, reach, output_type="ndarray")
                found += res.size
                if limit is not None and found > limit:
                    return None
                ii.append(res["i"].astype(np.int64) + b0)
                jj.append(old_idx[res["j"].astype(np.int64)])
                vv.append(res["v"])
            i, j, v = np.concatenate(ii), np.concatenate(jj), np.concatenate(vv)
            # the tree's distance errs by a relative O(d·u): a margin of 1e-9 keeps every
            # pair in doubt (the answer must not miss a meeting pair)
            keep = v <= (r[i] + Rr[j]) * (1 + 1e-9) + 1e-300
            rows, cols = [i[keep]], [j[keep]]
            inf_old = np.flatnonzero(~fin_old)  # infinite balls meet everything
            if inf_old.size:
                rows.append(np.repeat(np.arange(k), inf_old.size))
                cols.append(np.tile(inf_old, k))
            # a pair at distance exactly 0 is not stored by sparse_distance_matrix
            zero = _same_rows(c, C)
            rows.append(zero[0])
            cols.append(zero[1])
            rows, cols = np.concatenate(rows), np.concatenate(cols)
        else:
            if limit is not None and k * m > 64 * limit:
                return None
            out_r, out_c = [], []
            step = max(1, (1 << 22) // max(1, m))
            found = 0
            for s0 in range(0, k, step):
                hit = _meets(c[s0:s0 + step], r[s0:s0 + step], C, Rr)
                i, j = np.nonzero(hit)
                out_r.append(i + s0)
                out_c.append(j)
                found += i.size
                if limit is not None and found > limit:
                    return None
            rows, cols = np.concatenate(out_r), np.concatenate(out_c)
        a = sparse.csr_array((np.ones(rows.size), (rows, cols)), shape=(k, m))
        a.sum_duplicates()
        a.data[:] = 1.0
        return a

    def neighbours(self, i: int) -> np.ndarray:
        """Indices of the footprints that meet footprint ``i`` (itself included)."""
        got = self._nbr.get(i)
        if got is None:
            a = self._adjacency(self._c[i:i + 1], self._r[i:i + 1], self._n)
            got = np.sort(a.indices.astype(np.int64))
            self._nbr[i] = got
            self._cached[i] = True
        return got

    def add(self, centres: np.ndarray, radii: np.ndarray, weights: np.ndarray, *,
            local: bool = True, undo: list | None = None) -> None:
        """Append footprints and update every ``U`` they change (``local=False``: only
        the total, for global accounting). ``undo``: a list that receives ``(rows, U)``,
        the stored ``U`` rows before this call changed them (a probe restores them)."""
        c = np.asarray(centres, dtype=np.float64).reshape(-1, self.dim)
        r = np.asarray(radii, dtype=np.float64).reshape(-1)
        w = np.asarray(weights, dtype=np.float64).reshape(-1, K + 1)
        b = c.shape[0]
        if b == 0:
            return
        m0 = self._n
        self._grow(b)
        self._c[m0:m0 + b], self._r[m0:m0 + b], self._w[m0:m0 + b] = c, r, w
        self._n = m0 + b
        self.total = self.total + w.sum(axis=0)
        if not local:
            return
        a = self._adjacency(c, r, m0 + b, _MAX_MEETS)  # new × (old + new), itself included
        if a is None:  # too many pairs meet to list them: every new ball is taken to meet
            # every footprint, an upper bound of each U (the worst-pair search reads U
            # only as a bound); neighbour lists are recomputed exactly when asked
            if undo is not None:
                undo.append((np.arange(m0), self._u[:m0].copy()))
            self._u[m0:m0 + b] = self.total
            self._u[:m0] += w.sum(axis=0)
            self._nbr.clear()
            self._cached[:] = False
            return
        wf = np.where(np.isfinite(self._w[: m0 + b]), self._w[: m0 + b], 0.0)
        winf = ~np.isfinite(self._w[: m0 + b])
        self._u[m0:m0 + b] = a @ wf
        if np.any(winf):
            self._u[m0:m0 + b] = np.where((a @ winf.astype(np.float64)) > 0, np.inf,
                                          self._u[m0:m0 + b])
        old = a[:, :m0].tocsc()
        if m0 and old.nnz:
            touched = np.flatnonzero(np.diff(old.indptr))  # old footprints met
            if undo is not None:
                undo.append((touched, self._u[touched].copy()))
            sub = old[:, touched].T.tocsr()  # touched old × new
            self._u[touched] += sub @ np.where(np.isfinite(w), w, 0.0)
            if not np.all(np.isfinite(w)):
                hit = (sub @ (~np.isfinite(w)).astype(np.float64)) > 0
                self._u[touched] = np.where(hit, np.inf, self._u[touched])
            cached = touched[self._cached[touched]]
            if cached.size:
                lil = old[:, cached].T.tocsr()
                for pos, k in enumerate(cached):
                    extra = lil.indices[lil.indptr[pos]:lil.indptr[pos + 1]] + m0
                    self._nbr[int(k)] = np.concatenate([self._nbr[int(k)], np.sort(extra)])

    # ------------------------------------------------------------------------------
    def point_cost(self, points: np.ndarray) -> np.ndarray:
        """``(k, K + 1)``: the weight charged to a row at each point — the sum over the
        footprints that contain it (a point in doubt counts as contained)."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, self.dim)
        if self._n == 0:
            return np.zeros((p.shape[0], K + 1))
        hit = self._adjacency(p, np.zeros(p.shape[0]), self._n)
        W = self.weights
        out = hit @ np.where(np.isfinite(W), W, 0.0)
        inf_cols = ~np.isfinite(W)
        if np.any(inf_cols):
            out = np.where((hit @ inf_cols.astype(np.float64)) > 0, np.inf, out)
        return np.asarray(out) * ROUNDING

    def worst_pair(self, extra: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]] = (),
                   cols: Iterable[int] | None = None) -> np.ndarray:
        """``(K + 1,)`` upper bound, per order, on the weight of the footprints that hold
        ``x`` or ``x'``, over every pair of points; ``extra`` footprints (reserved balls of
        a call being priced) are included without being stored. Only the columns
        ``cols`` are searched (the others are set to the global total, also a bound)."""
        extras = list(extra)
        if not extras:
            return self._worst(cols)
        # a probe: the new balls appended past the end, then forgotten (the arrays keep
        # their capacity; U, the total and the neighbour lists are restored)
        n0, total0 = self._n, self.total.copy()
        c = np.concatenate([np.asarray(e[0], dtype=np.float64).reshape(-1, self.dim)
                            for e in extras])
        r = np.concatenate([np.asarray(e[1], dtype=np.float64).reshape(-1) for e in extras])
        w = np.concatenate([np.asarray(e[2], dtype=np.float64).reshape(-1, K + 1)
                            for e in extras])
        undo: list = []  # the stored U rows the probe changed, as they were
        try:
            self.add(c, r, w, undo=undo)
            return self._worst(cols)
        finally:  # the state before; the stored footprints' neighbour lists computed
            # meanwhile are kept without the probe balls (sorted lists: theirs are the
            # indices >= n0), as each pair's meeting is decided on its own (_meets)
            for rows, u in undo:
                self._u[rows] = u
            self._cached[: self._n] = False
            self._nbr = {i: v[: np.searchsorted(v, n0)] for i, v in self._nbr.items()
                         if i < n0}
            if self._nbr:
                self._cached[np.fromiter(self._nbr, dtype=np.int64)] = True
            self._n, self.total = n0, total0

    def _worst(self, cols: Iterable[int] | None = None) -> np.ndarray:
        """The worst-pair bound of :meth:`worst_pair` for the stored footprints. Per
        order: the ``k = min(m, 64)`` footprints of largest ``U``, their pairs in order
        while a pair's bound ``U_a + U_b`` exceeds the best union found (a best at the
        total ends the search: the answer is capped there), every other pair bounded by
        ``U_(1) + U_(k+1)``; after :data:`_MAX_PAIRS` unions the rest is bounded."""
        m = self._n
        out = self.total.copy()  # a bound for the columns not searched
        if m == 0:
            return np.zeros(K + 1)
        unions: dict[tuple[int, int], np.ndarray] = {}
        columns = list(range(K + 1) if cols is None else cols)
        W = self.weights[:, columns]
        where = {c: i for i, c in enumerate(columns)}
        masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

        def union(a: int, b: int) -> np.ndarray:
            """Weight of the footprints meeting a or b: W(N(a)) + W(N(b) \\ N(a))."""
            key = (a, b) if a < b else (b, a)
            got = unions.get(key)
            if got is None:
                if a not in masks:  # N(a) as a mask, and W(N(a))
                    mk = np.zeros(m, dtype=bool)
                    mk[self.neighbours(a)] = True
                    masks[a] = (mk, W[self.neighbours(a)].sum(axis=0))
                mk, wa = masks[a]
                nb = self.neighbours(b)
                got = wa + W[nb[~mk[nb]]].sum(axis=0)
                unions[key] = got
            return got

        for col in columns:
            u = self.U[:, col]
            if not np.all(np.isfinite(u)):
                out[col] = math.inf
                continue
            k = min(m, _MAX_TOP)
            top = np.argpartition(-u, k - 1)[:k] if k < m else np.arange(m)
            top = top[np.argsort(-u[top], kind="stable")]
            ut = u[top]
            best = ut[0]
            rest = ut[0] + (float(np.partition(u, m - k - 1)[m - k - 1]) if k < m else 0.0)
            stop = 0.0
            evals = 0
            cap = float(self.total[col])  # the answer's cap: a best there ends the search
            for a in range(k):
                if ut[a] + ut[0] <= best or best >= cap:
                    break
                for b in range(a + 1, k):
                    if ut[a] + ut[b] <= best or best >= cap:
                        break
                    if evals >= _MAX_PAIRS:  # bounds every pair not yet evaluated
                        stop = ut[a] + ut[min(a + 1, k - 1)]
                        break
                    best = max(best, float(union(int(top[a]), int(top[b]))[where[col]]))
                    evals += 1
                if stop:
                    break
            out[col] = min(max(best, stop, rest if k < m else 0.0), self.total[col])
        return out * ROUNDING

    def global_weights(self) -> np.ndarray:
        """The weights charged to every pair under global accounting: the total."""
        return self.total * ROUNDING


def _same_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)`` with ``a[i] == b[j]`` bit for bit (distance exactly 0)."""
    va = np.ascontiguousarray(a).view(np.dtype((np.void, a.dtype.itemsize * a.shape[1])))
    vb = np.ascontiguousarray(b).view(np.dtype((np.void, b.dtype.itemsize * b.shape[1])))
    va, vb = va.ravel(), vb.ravel()
    order = np.argsort(vb, kind="stable")
    lo = np.searchsorted(vb[order], va, side="left")
    hi = np.searchsorted(vb[order], va, side="right")
    cnt = hi - lo
    i = np.repeat(np.arange(va.size), cnt)
    j = order[np.concatenate([np.arange(s0, s1) for s0, s1 in zip(lo, hi, strict=True)])
               if cnt.sum() else np.zeros(0, dtype=np.int64)]
    return i, j.astype(np.int64)
