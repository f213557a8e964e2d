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
  ``Σ ε_t(α) ≤ B_α``, where ``B_α`` converts to ``ε`` at ``δ_α = (δ − Δ)/|G|``.
  By the Rényi filter at each fixed order (Feldman & Zrnic 2021, Thm 3.1, with
  predictable per-pair costs), a union over the orders of ``G`` (as in Lécuyer 2021) and
  step-by-step conditioning for the ``δ_t`` (Whitehouse et al. 2023's approximate-zCDP
  filter), the whole adaptive history is ``(ε, δ)``-DP.
* The worst pair is bounded from above (:class:`FootprintIndex`): a point in footprint
  ``i`` lies only in footprints that meet ``i``, so the pair ``(x ∈ i, x' ∈ j)`` costs at
  most the weight of the footprints meeting ``i`` or ``j``; the maximum over pairs is
  searched exactly among the most crowded footprints and bounded for the rest, and it
  never exceeds the global total.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .._validation import check_delta, check_epsilon
from .accountant import RdpAccountant
from .events import DpEvent
from .primitives import rho_from_eps_delta

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
_MAX_PAIRS = 2048  # pair unions evaluated before the search falls back to its bound


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
    def for_budget(cls, epsilon: float, delta: float, *, n_orders: int = 4,
                   delta_direct: float | None = None) -> FilterSpec:
        """The default filter of a budget: the ``n_orders`` orders of :data:`ORDERS`
        nearest (in ``log(α − 1)``) to the order at which a Gaussian composition that
        spends exactly the budget converts best, ``1 + sqrt(log(1/δ)/ρ)``, and
        ``Δ = δ/2``. A public function of the budget."""
        eps = check_epsilon(epsilon, "budget epsilon")
        dl = check_delta(delta, "budget delta")
        rho = rho_from_eps_delta(eps, dl)
        x_star = math.sqrt(-math.log(dl) / rho)
        dist = np.abs(np.log(ORDERS - 1.0) - math.log(x_star))
        idx = tuple(sorted(int(i) for i in np.argsort(dist, kind="stable")[:n_orders]))
        dd = 0.5 * dl if delta_direct is None else float(delta_direct)
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
        a = ORDERS[list(self.orders)]
        x = a - 1.0
        d_a = (self.delta - self.delta_direct) / len(self.orders)
        e = self.epsilon + math.log1p(-self.delta_direct)
        return e - np.log(x / a) + (math.log(d_a) + np.log(a)) / x

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


def _meets(ca: np.ndarray, ra: np.ndarray, cb: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """``(len(a), len(b))`` bool: whether closed balls may intersect, decided
    conservatively: ``‖c_a − c_b‖ ≤ ρ_a + ρ_b`` up to an upper bound on the rounding of
    the computed squared distance (a pair in doubt counts as meeting)."""
    d = ca.shape[1]
    na = np.einsum("ij,ij->i", ca, ca)
    nb = np.einsum("ij,ij->i", cb, cb)
    d2 = na[:, None] + nb[None, :] - 2.0 * (ca @ cb.T)
    band = 8.0 * (d + 4) * np.finfo(np.float64).eps * (na[:, None] + nb[None, :]) + 1e-300
    s = ra[:, None] + rb[None, :]
    with np.errstate(invalid="ignore", over="ignore"):
        lim = s * s * (1.0 + 1e-12)
    return (d2 - band <= lim) | ~np.isfinite(s)


class FootprintIndex:
    """Footprints (balls with weights) and, for each, ``U_i``: the total weight of the
    footprints that meet it (itself included). Maintained incrementally.

    Not thread-safe; the caller serialises access.
    """

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self.centres = np.empty((0, self.dim))
        self.radii = np.empty(0)
        self.weights = np.empty((0, K + 1))
        self.U = np.empty((0, K + 1))
        self.total = np.zeros(K + 1)
        self._nbr: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.radii.shape[0])

    # ------------------------------------------------------------------------------
    def _neighbours_of_balls(self, c: np.ndarray, r: np.ndarray,
                             upto: int | None = None) -> list[np.ndarray]:
        m = len(self) if upto is None else upto
        out: list[np.ndarray] = []
        step = max(1, (1 << 22) // max(1, m))
        for s in range(0, c.shape[0], step):
            hit = _meets(c[s:s + step], r[s:s + step], self.centres[:m], self.radii[:m])
            out.extend(np.flatnonzero(row) for row in hit)
        return out

    def neighbours(self, i: int) -> np.ndarray:
        """Indices of the footprints that meet footprint ``i`` (itself included)."""
        got = self._nbr.get(i)
        if got is None:
            got = self._neighbours_of_balls(self.centres[i:i + 1], self.radii[i:i + 1])[0]
            self._nbr[i] = got
        return got

    def add(self, centres: np.ndarray, radii: np.ndarray, weights: np.ndarray, *,
            local: bool = True) -> None:
        """Append footprints and update every ``U`` they change (``local=False``: only
        the total, for global accounting)."""
        c = np.asarray(centres, dtype=np.float64).reshape(-1, self.dim)
        r = np.asarray(radii, dtype=np.float64).reshape(-1)
        w = np.asarray(weights, dtype=np.float64).reshape(-1, K + 1)
        if c.shape[0] == 0:
            return
        m0 = len(self)
        self.centres = np.concatenate([self.centres, c])
        self.radii = np.concatenate([self.radii, r])
        self.weights = np.concatenate([self.weights, w])
        self.U = np.concatenate([self.U, np.zeros_like(w)])
        self.total = self.total + w.sum(axis=0)
        if not local:
            return
        for j, nb in enumerate(self._neighbours_of_balls(c, r, upto=m0 + c.shape[0])):
            i = m0 + j
            nb_old = nb[nb < i]  # each unordered pair once, from its later member
            self.U[i] += self.weights[i] + self.weights[nb_old].sum(axis=0)
            self.U[nb_old] += self.weights[i]
            for k in nb_old:
                cached = self._nbr.get(int(k))
                if cached is not None:
                    self._nbr[int(k)] = np.append(cached, i)

    # ------------------------------------------------------------------------------
    def point_cost(self, points: np.ndarray) -> np.ndarray:
        """``(k, K + 1)``: the weight charged to a row at each point — the sum over the
        footprints that contain it (a point in doubt counts as contained)."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, self.dim)
        if len(self) == 0:
            return np.zeros((p.shape[0], K + 1))
        hit = _meets(p, np.zeros(p.shape[0]), self.centres, self.radii)
        w = np.where(np.isfinite(self.weights), self.weights, 0.0)
        out = hit.astype(np.float64) @ w
        inf_cols = ~np.isfinite(self.weights)
        if np.any(inf_cols):
            out = np.where(hit.astype(np.int64) @ inf_cols.astype(np.int64) > 0, np.inf, out)
        return out

    def worst_pair(self, extra: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]] = (),
                   cols: Iterable[int] | None = None) -> np.ndarray:
        """``(K + 1,)`` upper bound, per order, on the weight of the footprints that hold
        ``x`` or ``x'``, over every pair of points; ``extra`` footprints (reserved balls of
        a call being priced) are included without being stored. Only the columns
        ``cols`` are searched (the others are set to the global total, also a bound)."""
        extras = list(extra)
        if extras:
            probe = FootprintIndex(self.dim)
            probe.centres, probe.radii = self.centres, self.radii
            probe.weights, probe.U, probe.total = self.weights, self.U.copy(), self.total
            probe._nbr = {k: v for k, v in self._nbr.items()}
            for c, r, w in extras:
                probe.add(c, r, w)
            return probe._worst(cols)
        return self._worst(cols)

    def _worst(self, cols: Iterable[int] | None = None) -> np.ndarray:
        m = len(self)
        out = self.total.copy()
        if m == 0:
            return np.zeros(K + 1)
        unions: dict[tuple[int, int], np.ndarray] = {}

        def union(a: int, b: int) -> np.ndarray:
            key = (a, b) if a < b else (b, a)
            got = unions.get(key)
            if got is None:
                idx = np.union1d(self.neighbours(a), self.neighbours(b))
                got = self.weights[idx].sum(axis=0)
                unions[key] = got
            return got

        for col in range(K + 1) if cols is None else cols:
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
            for a in range(k):
                if ut[a] + ut[0] <= best:
                    break
                for b in range(a + 1, k):
                    if ut[a] + ut[b] <= best:
                        break
                    if evals >= _MAX_PAIRS:  # bounds every pair not yet evaluated
                        stop = ut[a] + ut[min(a + 1, k - 1)]
                        break
                    best = max(best, float(union(int(top[a]), int(top[b]))[col]))
                    evals += 1
                if stop:
                    break
            out[col] = min(max(best, stop, rest if k < m else 0.0), self.total[col])
        return out
