"""Many queries, one budget: local against global accounting (``docs/privacy-accounting.md`` §12).

Three workloads, each a bank and a stream of distinct queries (bit for bit: no free
repeats), answered by ``brace.PrivateMemory`` with the same per-query noise throughout:
BRACE's default release (``method="brace"``, default κ and release mode), T = 3,
(ε_q, δ_q) = (1, 1e-9) per query.

* **mnist**: the MNIST test split (``$BRACE_MNIST_DIR``, default
  ``../shared/data/mnist`` beside the repository), pixels in [0, 1]. A seeded permutation
  gives 1,000 images for a PCA to 32 dimensions, 8,000 for the bank and 1,000 held-out
  images for the queries. A query is a held-out image with Gaussian noise (σ = 0.3) and
  30 % of its pixels masked to 0, clipped to [0, 1], then the same PCA: each query is a
  fresh corruption, so 10,000 queries are distinct.
* **clusters**: 50 well-separated Gaussian clusters in d = 16 (centres N(0, 10² I), unit
  spread), n = 10,000; a query is a random cluster's centre plus N(0, I).
* **mixture**: the paper's 2-D mixture (``brace.datasets``, paper §6.1; n = 256,
  r = 0.8 as in ``brace.experiments.synthetic``); a query is a random memory plus
  N(0, 0.35² I) (that experiment's query rule).

Radius (mnist and clusters): the median, over 256 pilot queries drawn like the
workload's, of the distance to the 50th nearest bank row, so a gate at a query holds
about 50 memories. This is a public choice made *from the data*, fine for a benchmark
(a deployment would fix r without looking at the bank).

For each workload and accounting (global, local), two runs over the same queries and the
same noise seeds (so the histories agree until a refusal):

1. **Total ε**: a budget of (1e9, 1e-5), which never refuses here; ``pm.spent`` (ε at
   δ = 1e-5 of the worst pair of neighbouring banks) after Q queries, Q on a log grid up
   to ``--max-queries``. The spend does not depend on the budget; the budget's filter
   orders (α ≈ 1.02–1.05 for ε = 1e9) only decide admission, which never binds.
2. **Within the budget (8, 1e-5)** (filter orders α ≈ 3.4–7.2): the same calls until the
   first refusal; a refused call is retried one query at a time, and the run stops at
   the first refused query (or at ``--max-queries``). A workload of Q queries is
   answered up to ``min(Q, answered)``.

Calls hold ``--batch`` queries (default 100; calls end at the grid's points). The
admission reserves each query's ball of radius (T + 1)·r·(1 + margin) for the whole
call, so a call is admitted only if all its queries fit.

δ_q = 1e-9, not 1e-7: the default release here is the count release, which spends
δ_q/10 per query directly; at δ_q = 1e-7 global accounting takes 1,000 queries to a
direct δ of 1e-5 (ε = ∞ at δ = 1e-5) and its filter refuses from the 500th query on
(``--query-delta 1e-7`` reproduces this).

    python benchmarks/bench_workload.py [--quick] [--threads 1] [--out PATH] [--figure PNG]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

import brace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MNIST_DEFAULT = REPO.parent / "shared" / "data" / "mnist"
WORKLOADS = ("mnist", "clusters", "mixture")
SPEND_BUDGET = (1e9, 1e-5)
BUDGET = (8.0, 1e-5)
GRID = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)


@dataclass(frozen=True)
class Config:
    epsilon: float = 1.0  # per query
    delta: float = 1e-9  # per query
    steps: int = 3
    batch: int = 100
    gate: int = 50  # memories in a median gate at a query (mnist, clusters)
    seed: int = 0


@dataclass(frozen=True)
class Workload:
    name: str
    bank: np.ndarray
    queries: np.ndarray  # (max_queries, d), in the order they are asked
    radius: float
    info: dict


# ------------------------------------------------------------------------- workloads


def mnist_workload(m: int, cfg: Config, rng: np.random.Generator,
                   data_dir: Path) -> Workload:
    from brace.experiments.mnist_data import load_mnist_test

    images, _ = load_mnist_test(data_dir)
    pix = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0
    perm = rng.permutation(pix.shape[0])
    fit, bank, held = perm[:1000], perm[1000:9000], perm[9000:10_000]
    mean = pix[fit].mean(axis=0)
    _, s, vt = np.linalg.svd(pix[fit] - mean, full_matrices=False)
    comps = vt[:32]

    def corrupt(k: int) -> np.ndarray:
        x = pix[held[rng.integers(0, held.size, size=k)]]
        x = x + 0.3 * rng.standard_normal(x.shape)
        x[rng.random(x.shape) < 0.3] = 0.0
        return (np.clip(x, 0.0, 1.0) - mean) @ comps.T

    X = (pix[bank] - mean) @ comps.T
    r, g = _bench.pilot_radius(X, corrupt(256), cfg.gate)
    info = {"source": str(data_dir), "pca_fit_images": 1000, "bank_images": 8000,
            "query_images": 1000, "pca_dim": 32,
            "pca_explained": float((s[:32] ** 2).sum() / (s ** 2).sum()),
            "noise_sigma": 0.3, "masked_share": 0.3, "median_gate_pilot": g,
            "radius_rule": "median distance of 256 pilot queries to the 50th nearest row"}
    return Workload("mnist", X, corrupt(m), r, info)


def clusters_workload(m: int, cfg: Config, rng: np.random.Generator,
                      k: int = 200) -> Workload:
    d, n, scale = 16, 20_000, 30.0
    C = rng.normal(scale=scale, size=(k, d))
    X = C[rng.integers(0, k, size=n)] + rng.normal(size=(n, d))

    def ask(j: int) -> np.ndarray:
        return C[rng.integers(0, k, size=j)] + rng.normal(size=(j, d))

    dc = np.sqrt(((C[:, None] - C[None]) ** 2).sum(-1))
    r, g = _bench.pilot_radius(X, ask(256), cfg.gate)
    info = {"clusters": k, "d": d, "n": n, "centre_scale": scale, "spread": 1.0,
            "min_centre_distance": float(dc[np.triu_indices(k, 1)].min()),
            "median_gate_pilot": g,
            "radius_rule": "median distance of 256 pilot queries to the 50th nearest row"}
    return Workload("clusters", X, ask(m), r, info)


def mixture_workload(m: int, cfg: Config, rng: np.random.Generator) -> Workload:
    from brace.datasets import PAPER_MIXTURE, sample_mixture
    from brace.experiments.synthetic import SyntheticConfig

    sc = SyntheticConfig()
    X = sample_mixture(sc.n, spec=PAPER_MIXTURE, seed=rng)
    q = X[rng.integers(0, sc.n, size=m)] + rng.normal(0.0, sc.query_spread, (m, 2))
    g = brace.LSRMemory(X, radius=sc.radius).gate(q[:256], counts=True)
    info = {"n": sc.n, "d": 2, "mixture": PAPER_MIXTURE.to_dict(),
            "query_spread": sc.query_spread, "median_gate_pilot": float(np.median(g)),
            "radius_rule": "paper §6.1 (brace.experiments.synthetic)"}
    return Workload("mixture", X, q, sc.radius, info)


# ------------------------------------------------------------------------- runs


def schedule(total: int, batch: int) -> list[tuple[int, int]]:
    """Calls ``[s, e)`` of at most ``batch`` queries that end at every grid point."""
    cuts = sorted({*range(batch, total, batch), *(g for g in GRID if g < total), total})
    out, s = [], 0
    for e in cuts:
        out.append((s, e))
        s = e
    return out


def _seed(cfg: Config, w: int, s: int, e: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([cfg.seed, w, s, e])



def _orders(pm: Any) -> list[float]:
    """The Rényi orders of the budget's filter."""
    from brace.accounting.filter import ORDERS

    return [float(a) for a in ORDERS[list(pm.filter.orders)]]

def spend_run(W: Workload, wi: int, accounting: str, total: int, cfg: Config,
              log: Any) -> dict:
    """Total ε at δ = 1e-5 after each grid point (a budget that refuses nothing but a
    direct δ past its share; such a refusal ends the run and is recorded)."""
    pm = brace.PrivateMemory(W.bank, radius=W.radius, budget=SPEND_BUDGET,
                             accounting=accounting)
    t0 = time.perf_counter()
    points, release, refusal = [], None, None
    for s, e in schedule(total, cfg.batch):
        try:
            res = pm.retrieve(W.queries[s:e], steps=cfg.steps, epsilon=cfg.epsilon,
                              delta=cfg.delta, seed=_seed(cfg, wi, s, e))
        except brace.BudgetExceededError as exc:
            refusal = {"call": [s, e], "reason": exc.reason, "spent": exc.spent}
            log(f"    {W.name} {accounting} spend: call [{s}, {e}) refused ({exc.reason})")
            break
        release = res.params["release"]
        if e in GRID or e == total:
            points.append({"queries": e, "spent": pm.spent,
                           "seconds": time.perf_counter() - t0})
            log(f"    {W.name} {accounting} spend: Q={e} eps={points[-1]['spent']:.4g} "
                f"({points[-1]['seconds']:.0f} s)")
    return {"points": points, "refusal": refusal, "seconds": time.perf_counter() - t0,
            "release": release,
            "filter_orders": _orders(pm)}


def budget_run(W: Workload, wi: int, accounting: str, total: int, cfg: Config,
               log: Any) -> dict:
    """Queries answered within ``BUDGET`` before the first refused query (a refused call
    is split into one-query calls; the run goes on while they are all admitted)."""
    pm = brace.PrivateMemory(W.bank, radius=W.radius, budget=BUDGET, accounting=accounting)
    t0 = time.perf_counter()
    done, refusal, singles, first = 0, None, 0, None
    kw = dict(steps=cfg.steps, epsilon=cfg.epsilon, delta=cfg.delta)
    for s, e in schedule(total, cfg.batch):
        try:
            pm.retrieve(W.queries[s:e], seed=_seed(cfg, wi, s, e), **kw)
            done = e
            continue
        except brace.BudgetExceededError:
            pass
        if not singles:
            first = s
            log(f"    {W.name} {accounting} budget: first refused call [{s}, {e}); one "
                "query at a time from here")
        singles += 1
        for i in range(s, e):  # one query at a time, to the first refusal
            try:
                pm.retrieve(W.queries[i:i + 1], seed=_seed(cfg, wi, i, i), **kw)
                done = i + 1
            except brace.BudgetExceededError as exc:
                refusal = {"at_query": i, "reason": exc.reason, "spent": exc.spent,
                           "requested_total": exc.requested_total}
                break
        if refusal is not None:
            break
    out = {"answered": done, "capped": refusal is None, "refusal": refusal,
           "first_refused_call_at": first, "calls_split": singles,
           "spent": pm.spent, "filter_usage": pm.filter_usage,
           "filter_orders": _orders(pm),
           "seconds": time.perf_counter() - t0}
    log(f"    {W.name} {accounting} budget {BUDGET}: answered {done}"
        f"{' (cap)' if refusal is None else ''}, spent {out['spent']:.4g} "
        f"({out['seconds']:.0f} s)")
    return out


# ------------------------------------------------------------------------- output


def _cell(points: list[dict], Q: int) -> float | None:
    return next((p["spent"] for p in points if p["queries"] == Q), None)


def table(results: dict) -> str:
    rows = []
    for name, res in results.items():
        bg, bl = res["global"]["budget"], res["local"]["budget"]
        shown = [Q for Q in (10, 100, 1000, 10_000) if Q <= res["max_queries"]]
        shown += [res["max_local"]] if res["max_local"] not in shown else []
        for Q in sorted(shown):
            g = _cell(res["global"]["spend"]["points"], Q)
            loc = _cell(res["local"]["spend"]["points"], Q)
            fg = "∞ (refused)" if g is None else f"{g:.4g}"
            fl = "—" if loc is None else f"{loc:.4g}"
            ratio = "—" if g is None or loc is None else f"{g / loc:.2f}×"
            ng = min(Q, bg["answered"])
            if Q > res["max_local"] and bl["capped"]:
                nl_s, r_s = f"≥ {bl['answered']}", f"≥ {bl['answered'] / ng:.1f}×"
            else:
                nl = min(Q, bl["answered"])
                nl_s, r_s = str(nl), (f"{nl / ng:.1f}×" if ng else "∞")
            rows.append((name, Q, fg, fl, ratio, ng, nl_s, r_s))
    return _bench.markdown(("workload", "Q", "total ε, global", "total ε, local",
                            "global / local", "answered within (8, 1e-5), global", "local",
                            "local / global"), rows)


def figure(results: dict, path: Path, cfg: Config) -> None:
    from brace.experiments._common import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6),
                             squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items(), strict=True):
        for acc, style in (("global", dict(color="C3", marker="s")),
                           ("local", dict(color="C0", marker="o"))):
            pts = res[acc]["spend"]["points"]
            b = res[acc]["budget"]
            ans = f"{'≥ ' if b['capped'] else ''}{b['answered']}"
            ax.plot([p["queries"] for p in pts], [p["spent"] for p in pts], **style,
                    ms=4, label=f"{acc}: {ans} queries within ε = {BUDGET[0]:g}")
        ax.axhline(BUDGET[0], color="0.5", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{name} (n = {res['n']}, d = {res['d']}, r = {res['radius']:.3g})",
                     fontsize=9)
        ax.set_xlabel("queries Q")
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel("total ε at δ = 1e-5 (worst pair)")
    fig.suptitle(f"BRACE, default release, T = {cfg.steps}, (ε, δ) = ({cfg.epsilon:g}, "
                 f"{cfg.delta:g}) per query; dashed: the budget's ε", fontsize=9)
    save_figure(fig, path)


def _per_workload(p: argparse.ArgumentParser, vals: list[int] | None, names: list[str],
                  base: dict[str, int], what: str) -> dict[str, int]:
    out = dict(base)
    if vals:
        if len(vals) not in (1, len(names)):
            p.error(f"{what} takes one value or one per workload")
        out.update(zip(names, vals * (len(names) if len(vals) == 1 else 1), strict=True))
    if min(out[w] for w in names) < 1:
        p.error(f"{what} must be >= 1")
    return out


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(
        __doc__, quick="up to 1,000 queries on mnist, 500 on clusters, 200 on mixture")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--max-queries", type=int, nargs="+", metavar="Q",
                   help="largest Q, global accounting (one value or one per workload)")
    p.add_argument("--max-local", type=int, nargs="+", metavar="Q",
                   help="largest Q, local accounting (default: as --max-queries, but 2,000 "
                   "on mnist and mixture in the full run)")
    p.add_argument("--clusters", type=int, default=200, help="clusters of 'clusters'")
    p.add_argument("--batch", type=int, default=Config.batch, help="queries per call")
    p.add_argument("--query-epsilon", type=float, default=Config.epsilon)
    p.add_argument("--query-delta", type=float, default=Config.delta)
    p.add_argument("--steps", type=int, default=Config.steps)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--data-dir", help="MNIST directory (default $BRACE_MNIST_DIR, else "
                   f"{MNIST_DEFAULT})")
    p.add_argument("--figure", metavar="PNG", help="total ε vs Q, one panel per workload")
    a = p.parse_args(argv)
    if a.batch < 1 or a.clusters < 2:
        p.error("--batch must be >= 1 and --clusters >= 2")
    cfg = Config(a.query_epsilon, a.query_delta, a.steps, a.batch, Config.gate, a.seed)
    if a.quick:
        base = {"mnist": 1000, "clusters": 500, "mixture": 200}
        base_local = dict(base)
    else:
        base = dict.fromkeys(WORKLOADS, 10_000)
        base_local = {"mnist": 2000, "clusters": 10_000, "mixture": 2000}
    glob = _per_workload(p, a.max_queries, a.workloads, base, "--max-queries")
    if a.max_queries and not a.max_local:
        base_local = {w: min(base_local[w], glob[w]) for w in WORKLOADS}
    loc = _per_workload(p, a.max_local, a.workloads, base_local, "--max-local")
    data_dir = Path(a.data_dir or os.environ.get("BRACE_MNIST_DIR") or MNIST_DEFAULT)

    log = _bench.Log()
    started = _bench.now()
    t_all = time.perf_counter()
    results: dict[str, Any] = {}
    for wi, name in enumerate(WORKLOADS):
        if name not in a.workloads:
            continue
        m = max(glob[name], loc[name])
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, wi]))
        t0 = time.perf_counter()
        if name == "mnist":
            W = mnist_workload(m, cfg, rng, data_dir)
        elif name == "clusters":
            W = clusters_workload(m, cfg, rng, a.clusters)
        else:
            W = mixture_workload(m, cfg, rng)
        log(f"  {name}: n={W.bank.shape[0]}, d={W.bank.shape[1]}, r={W.radius:.4g}, "
            f"median gate {W.info['median_gate_pilot']:.0f} ({time.perf_counter() - t0:.1f} s)")
        res = {"n": int(W.bank.shape[0]), "d": int(W.bank.shape[1]), "radius": W.radius,
               "max_queries": glob[name], "max_local": loc[name], "info": W.info}
        for acc, total in (("global", glob[name]), ("local", loc[name])):
            res[acc] = {"spend": spend_run(W, wi, acc, total, cfg, log),
                        "budget": budget_run(W, wi, acc, total, cfg, log)}
        results[name] = res
    wall = time.perf_counter() - t_all
    print(f"BRACE default release, T = {cfg.steps}, (eps, delta) = ({cfg.epsilon:g}, "
          f"{cfg.delta:g}) per query, calls of <= {cfg.batch} queries; total eps at delta = "
          f"1e-5 (budget {SPEND_BUDGET}); answered within {BUDGET}; threads: "
          f"{threads_info()}; {wall:.0f} s")
    print(table(results))
    _bench.save_json(a.json, {
        "benchmark": "bench_workload", "started": started, "wall_s": wall,
        "config": {**asdict(cfg), "method": "brace", "release": "default",
                   "spend_budget": list(SPEND_BUDGET), "budget": list(BUDGET),
                   "grid": list(GRID), "quick": a.quick, "clusters": a.clusters,
                   "max_queries": {w: glob[w] for w in a.workloads},
                   "max_local": {w: loc[w] for w in a.workloads}},
        **_bench.environment(), "results": results,
    })
    if a.figure:
        figure(results, Path(a.figure), cfg)
        print(f"wrote {a.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
