"""How much of the budget the filter's fixed orders charge above the reported (tight)
conversion, for the current order set and candidates (``docs/privacy-accounting.md``
§12, "Which orders").

A history is admitted by a filter ``(G, Δ)`` iff ``Σδ ≤ Δ`` and some ``α ∈ G`` has
``Σε(α) ≤ B_α`` (global accounting, as ``PrivateMemory(accounting="global")``; local
accounting charges a subset of the same steps to the worst pair). For each workload the
script admits the calls one by one, spends what is left on a snapshot (Gaussian, the
largest total ρ the filter admits, in closed form), and reports the *overcharge*
``ε / ε_tight − 1``: ``ε_tight`` is the conversion the library reports (§5, the best
order of the 64-order grid at the whole δ) of the admitted history. ``[k]``: only ``k``
of the calls were admitted.

Workloads (δ = 10⁻⁵, per-query δ = δ/100, one query of 3 steps per call on a public
shape n = 10⁴, d = 16, r = 0.5): a snapshot alone; ``N`` ∈ {1, 10, 100} retrievals at
``ε/(2√N)`` each (default release, or the count release) then a snapshot; one smooth
retrieval at the largest ε admitted with γ forced (γ from 0.002 to 0.05, d = 2 and 16: a
curve that is infinite above ``α_max(γ)``, where few orders may miss it; rows where every
candidate refuses are left out).

    python benchmarks/bench_filter_orders.py            # about two minutes
"""

from __future__ import annotations

import math

import numpy as np

from brace.accounting import rho_from_eps_delta
from brace.accounting.filter import ORDERS, FilterSpec, K, convert, event_weights
from brace.footprints import reserved_steps
from brace.plan import plan_release

DELTA = 1e-5
SHAPE, RADIUS = (10_000, 16), 0.5
EPSILONS = (0.25, 1.0, 4.0, 16.0)


def nearest(eps: float, n: int, share: float = 0.5) -> FilterSpec:
    """The earlier default (n = 4): the n orders nearest 1 + sqrt(log(1/δ)/ρ(ε, δ))."""
    x = math.sqrt(-math.log(DELTA) / rho_from_eps_delta(eps, DELTA))
    dist = np.abs(np.log(ORDERS - 1.0) - math.log(x))
    idx = tuple(sorted(int(i) for i in np.argsort(dist, kind="stable")[:n]))
    return FilterSpec(eps, DELTA, idx, share * DELTA)


def capacity(eps: float, n: int, share: float = 0.5) -> FilterSpec:
    """The n orders that admit the largest Gaussian ρ at their own thresholds
    (δ_G = (δ − Δ)/n): the largest B_α/α."""
    a = ORDERS
    dg = (1.0 - share) * DELTA / n
    b = eps + math.log1p(-share * DELTA) - np.log((a - 1) / a) \
        + (math.log(dg) + np.log(a)) / (a - 1)
    idx = tuple(sorted(int(i) for i in np.argsort(-b / a, kind="stable")[:n]))
    return FilterSpec(eps, DELTA, idx, share * DELTA)


CANDIDATES = {
    "nearest 4 (earlier)": lambda e: nearest(e, 4),
    "capacity 1": lambda e: capacity(e, 1),
    "capacity 2": lambda e: capacity(e, 2),
    "capacity 3": lambda e: capacity(e, 3),
    "capacity 4": lambda e: capacity(e, 4),
    "capacity 8": lambda e: capacity(e, 8),
    "capacity 2, Δ=δ/4": lambda e: capacity(e, 2, 0.25),
}


def call_weight(eps_q: float, release: str | None, gamma: float | None = None,
                shape: tuple[int, int] = SHAPE):
    """A call's weights at its reserved steps (global accounting), None if not plannable."""
    try:
        plan = plan_release(shape, radius=RADIUS, method="brace", epsilon=eps_q,
                            delta=DELTA / 100, steps=3, queries=1, release=release,
                            gamma=gamma, seeded=True)
    except ValueError:
        return None
    n = len(reserved_steps(plan, np.zeros((1, shape[1]))))
    return event_weights(plan.spent.step_event) * n


def snapshot_rest(f: FilterSpec, w: np.ndarray) -> np.ndarray:
    """The history with a Gaussian snapshot of the largest total ρ the filter admits."""
    a = ORDERS[list(f.orders)]
    rho = max(0.0, float(np.max((f.thresholds - w[list(f.orders)]) / a)))
    return w + event_weights_gauss(rho)


def event_weights_gauss(rho: float) -> np.ndarray:
    out = np.zeros(K + 1)
    out[:K] = ORDERS * rho
    return out


def sequence(f: FilterSpec, eps: float, n_calls: int, release: str | None):
    w, ok = np.zeros(K + 1), 0
    cw = call_weight(eps / (2 * math.sqrt(n_calls)), release) if n_calls else None
    for _ in range(n_calls):
        if not f.admits((w + cw) * (1 + 1e-9)):
            break
        w, ok = w + cw, ok + 1
    return convert(snapshot_rest(f, w), DELTA), ok


def forced_gamma(f: FilterSpec, eps: float, gamma: float, d: int) -> float:
    """The tight ε of one smooth call at the largest per-query ε admitted (scan, then
    bisection): 0 if none is admitted."""
    grid = np.geomspace(1e-3, 4 * eps, 120)
    okay = [e for e in grid if (w := call_weight(e, "smooth", gamma, (SHAPE[0], d))) is not None
            and f.admits(w * (1 + 1e-9))]
    if not okay:
        return 0.0
    lo = max(okay)
    hi = grid[min(np.searchsorted(grid, lo) + 1, grid.size - 1)]
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        w = call_weight(mid, "smooth", gamma, (SHAPE[0], d))
        lo, hi = (mid, hi) if w is not None and f.admits(w * (1 + 1e-9)) else (lo, mid)
    return convert(call_weight(lo, "smooth", gamma, (SHAPE[0], d)), DELTA)


def main() -> None:
    names = list(CANDIDATES)
    print("overcharge eps/eps_tight - 1 (delta = 1e-5); columns:", " | ".join(names))
    for eps in EPSILONS:
        specs = {k: c(eps) for k, c in CANDIDATES.items()}
        print(f"\neps = {eps}: orders", {k: [round(float(ORDERS[i]), 2) for i in s.orders]
                                         for k, s in specs.items()})
        rows = [("snapshot alone", 0, None)] + [
            (f"{n} x {rel or 'default'} + snapshot", n, rel)
            for rel in (None, "count") for n in (1, 10, 100)]
        for label, n, rel in rows:
            cells = []
            for k in names:
                tight, ok = sequence(specs[k], eps, n, rel)
                cells.append(f"{eps / tight - 1:6.3f}" + ("" if ok == n else f"[{ok}]"))
            print(f"  {label:28s}", " ".join(cells), flush=True)
        for d in (2, 16):
            for g in (0.002, 0.005, 0.01, 0.02, 0.05):
                cells = []
                for k in names:
                    t = forced_gamma(specs[k], eps, g, d)
                    cells.append(f"{eps / t - 1:6.3f}" if t > 0 else "  refused")
                if any(c != "  refused" for c in cells):
                    print(f"  {f'smooth, d={d}, gamma={g}':28s}", " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
