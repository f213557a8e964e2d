"""When does a private release pay? Completion accuracy against the bank size ``n`` on a
synthetic high-dimensional bank, at a fixed budget, for the synopsis without public
data, per-query retrieval and the public floor (``docs/benchmarks.md``, "When private
pays"; ``docs/guide.md``, "Which one should I use?").

Data: :func:`brace.datasets.sample_clusters` (``d = 64``, ``k = 100`` clusters of Zipf
sizes, Student-t spread of df 3, rows clipped into the public box ``[-1, 1]^d``). For a
seed, one draw of ``n + Q + 50`` rows (the centres are drawn first, so every ``n`` shares
them): the first ``n`` are the bank, the next ``Q = 1000`` the query records, the last
50 the public sample of the floor. A query is its record plus Gaussian noise of std
``2 × spread`` per coordinate with a quarter of the coordinates set to 0 (the box's
centre). Accuracy: the completion is at most half as far from the query's true centre
as the query is — it moved towards the right attractor; the query as is scores 0
(evaluation only: the generator's centres).

Methods under one total budget ``(ε, δ = 1e-5)``:

* ``synopsis``: ``brace.private_synopsis(bank, epsilon=ε, delta=δ, bounds=(-1, 1))``
  (no public data; ``docs/privacy-accounting.md`` §15), every query completed by its
  nearest attractor (free);
* ``per_query``: per-query BRACE under global accounting, the ``Q`` queries (``T = 2``)
  sharing ``(ε, δ)`` (``pm.recommend``'s global price). Its radius is an *oracle*: the
  multiple (1, 1.5, 2, 3 or 4) of the population's median distance of a row to its own
  centre whose noiseless LSR completion scores best on these queries over a separate
  draw of 20,000 rows (a population property no rule on 50 public rows recovers; it
  favours per-query retrieval);
* ``per_query_q10``: the same for a workload of 10 queries (10 workloads of the first
  100 queries, each with its own fresh budget);
* ``public_floor`` (no release, ε = 0): the better of the nearest public row and
  noiseless LSR over the 50 public rows (radius: 4 public rows per gate);
* ``identity`` (no release): the query as its own completion;
* ``noiseless`` (NOT private): LSR over the bank at the per-query (oracle) radius.

Usage::

    OMP_NUM_THREADS=2 python benchmarks/bench_private_n.py [--quick] [--eps 1]
        [--n 1000 3000 ...] [--seeds 2] [--json out.json] [--figure out.png]
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import nearest, threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

import brace  # noqa: E402
from brace.datasets import sample_clusters  # noqa: E402
from brace.experiments.real_data import public_radius  # noqa: E402

D, K, Q, PUBLIC, DELTA, STEPS = 64, 100, 1000, 50, 1e-5, 2
SPREAD = 0.15
NS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
METHODS = ("synopsis", "per_query", "per_query_q10", "public_floor", "identity",
           "noiseless")
LABEL = {"synopsis": "synopsis, no public data", "per_query": "per-query BRACE, Q = 1000",
         "per_query_q10": "per-query BRACE, Q = 10",
         "public_floor": "public floor (50 rows, ε = 0)", "identity": "query as is",
         "noiseless": "noiseless LSR (NOT private)"}


def hit(Y: np.ndarray, C: np.ndarray, truth: np.ndarray, q: np.ndarray) -> float:
    """Share of completions at most half as far from their query's true centre as the
    query."""
    c = C[truth]
    return float(np.mean(np.linalg.norm(Y - c, axis=1) <= 0.5 * np.linalg.norm(q - c, axis=1)))


def corrupt(R: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    q = R + 2.0 * SPREAD * rng.standard_normal(R.shape)
    cols = np.argsort(rng.random(R.shape), axis=1)[:, : R.shape[1] // 4]
    q[np.arange(R.shape[0])[:, None], cols] = 0.0
    return q


def per_query(X: np.ndarray, q: np.ndarray, scale: float, eps: float, seed: int
              ) -> tuple[np.ndarray, dict]:
    pm = brace.PrivateMemory(X, radius=scale, budget=(eps, DELTA), accounting="global")
    e = pm.recommend(q.shape[0], steps=STEPS).per_query_epsilon * (1 - 2e-3)
    y = q if e <= 0 else pm.retrieve(q, steps=STEPS, epsilon=e, seed=seed).final
    return np.asarray(y), {"radius": scale, "eps_q": e, "spent": pm.spent}


def oracle_radius(seed: int, q: np.ndarray, truth: np.ndarray) -> float:
    """The oracle radius of per-query retrieval (module docstring)."""
    X, y, C = sample_clusters(20_000, D, K, seed=seed, return_centres=True)
    med = float(np.median(np.linalg.norm(X - C[y], axis=1)))
    best = (-1.0, med)
    for f in (1.0, 1.5, 2.0, 3.0, 4.0):
        z = brace.LSRMemory(X, radius=f * med).retrieve(q, STEPS)[:, -1]
        a = hit(z, C, truth, q)
        if a > best[0]:
            best = (a, f * med)
    return best[1]


def run(ns: tuple[int, ...], eps: float, seeds: int, log: Any) -> dict:
    rows: dict[str, dict[str, list[float]]] = {}
    oracles: dict[int, float] = {}
    for n in ns:
        for s in range(seeds if n <= 100_000 else 1):
            X_all, y_all, C = sample_clusters(n + Q + PUBLIC, D, K, seed=s,
                                              return_centres=True)
            X, qr, P = X_all[:n], X_all[n:n + Q], X_all[n + Q:]
            truth = y_all[n:n + Q]
            q = corrupt(qr, np.random.default_rng([s, 1]))
            out: dict[str, np.ndarray] = {"identity": q}
            info: dict[str, Any] = {}
            t0 = time.perf_counter()
            syn = brace.private_synopsis(X, epsilon=eps, delta=DELTA, bounds=(-1, 1), seed=s)
            out["synopsis"] = syn.complete(q)
            info["synopsis_s"] = time.perf_counter() - t0
            info["k"] = syn.n_attractors
            from sklearn.metrics import adjusted_rand_score

            info["ari"] = adjusted_rand_score(y_all[:n], syn.assign(X))
            if s not in oracles:  # tuned once per seed, outside the timing
                oracles[s] = oracle_radius(s, q, truth)
            oracle = oracles[s]
            t0 = time.perf_counter()
            out["per_query"], pq = per_query(X, q, oracle, eps, s)
            y10 = [per_query(X, q[i:i + 10], oracle, eps, s + 1000 * i)[0]
                   for i in range(0, 100, 10)]
            info["per_query_s"] = time.perf_counter() - t0
            info.update(pq)
            r_pub = public_radius(P, n_bank=PUBLIC, target_gate=4.0)
            lsr_pub = brace.LSRMemory(P, radius=r_pub).retrieve(q, STEPS)[:, -1]
            a_near = hit(P[nearest(q, P)], C, truth, q)
            a_lsr = hit(lsr_pub, C, truth, q)
            out["noiseless"] = brace.LSRMemory(X, radius=pq["radius"]).retrieve(q, STEPS)[:, -1]
            for m, y in out.items():
                rows.setdefault(f"{n}/{m}", {"accuracy": []})["accuracy"].append(
                    hit(y, C, truth, q))
            rows.setdefault(f"{n}/per_query_q10", {"accuracy": []})["accuracy"].append(
                hit(np.concatenate(y10), C, truth[:100], q[:100]))
            rows.setdefault(f"{n}/public_floor", {"accuracy": []})["accuracy"].append(
                max(a_near, a_lsr))
            for k_, v in info.items():
                rows.setdefault(f"{n}/info", {}).setdefault(k_, []).append(float(v))
            log(f"n={n} seed {s}: " + ", ".join(
                f"{m} {rows[f'{n}/{m}']['accuracy'][-1]:.3f}" for m in METHODS)
                + f" (synopsis {info['synopsis_s']:.0f} s, k={info['k']}, ARI {info['ari']:.3f}; "
                f"per-query "
                f"{info['per_query_s']:.0f} s, r={pq['radius']:.3g}, eps_q={pq['eps_q']:.3g})")
    summary = {}
    for key, rec in rows.items():
        summary[key] = {m: _bench.ci95(v) for m, v in rec.items()}
    return {"raw": rows, "summary": summary}


def pays_at(res: dict, ns: tuple[int, ...], method: str) -> int | None:
    """The smallest n from which the method's mean accuracy stays above the public
    floor's by more than the run-to-run spread: the difference of the means exceeds the
    larger of the two standard deviations over seeds (0 for one seed)."""
    ok = []
    for n in ns:
        a = np.asarray(res["raw"][f"{n}/{method}"]["accuracy"])
        f = np.asarray(res["raw"][f"{n}/public_floor"]["accuracy"])
        ok.append(a.mean() - f.mean() > max(a.std(), f.std()))
    for i in range(len(ns)):
        if all(ok[i:]):
            return ns[i]
    return None


def table(res: dict, ns: tuple[int, ...]) -> str:
    rows = []
    for n in ns:
        cells = []
        for m in METHODS:
            v = np.asarray(res["raw"][f"{n}/{m}"]["accuracy"])
            sd = f" ± {v.std():.3f}" if v.size > 1 else ""
            cells.append(f"{v.mean():.3f}{sd}")
        k = res["summary"][f"{n}/info"]["k"]["mean"]
        ari = res["summary"][f"{n}/info"]["ari"]["mean"]
        rows.append((f"{n:,}", *cells, f"{k:.0f}", f"{ari:.3f}"))
    return _bench.markdown(("n", *(LABEL[m] for m in METHODS), "attractors", "synopsis ARI"),
                           rows, "r" * (len(METHODS) + 3))


def figure(res: dict, ns: tuple[int, ...], eps: float, path: str) -> None:
    from brace.experiments._common import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    style = {"synopsis": ("tab:orange", "-", "o"), "per_query": ("tab:blue", "-", "s"),
             "per_query_q10": ("tab:cyan", "-", "^"),
             "public_floor": ("k", ":", None), "identity": ("0.5", "--", None),
             "noiseless": ("k", "--", None)}
    for m in METHODS:
        c, ls, mk = style[m]
        y = [res["summary"][f"{n}/{m}"]["accuracy"]["mean"] for n in ns]
        ax.plot(ns, y, color=c, ls=ls, marker=mk, ms=4, lw=1.4, label=LABEL[m])
    ax.set_xscale("log")
    ax.set_xlabel("bank size n")
    ax.set_ylabel("completion accuracy")
    ax.set_title(f"synthetic, d = {D}, {K} clusters, total ε = {eps:g} (δ = {DELTA:g})",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__)
    p.add_argument("--eps", type=float, default=1.0)
    p.add_argument("--n", type=int, nargs="+", default=None)
    p.add_argument("--seeds", type=int, default=2, help="seeds for n <= 1e5 (one above)")
    p.add_argument("--figure", default=None)
    p.add_argument("--from-json", default=None,
                   help="tabulate (and draw) a saved run instead of running")
    a = p.parse_args(argv)
    ns = tuple(a.n) if a.n else ((1_000, 10_000) if a.quick else NS)
    seeds = 1 if a.quick else a.seeds
    log = _bench.Log()
    if a.from_json:
        import json

        with open(a.from_json, encoding="utf-8") as fh:
            res = json.load(fh)
        ns, a.eps, seeds = tuple(res["ns"]), res["epsilon"], res["seeds"]
    else:
        res = run(ns, a.eps, seeds, log)
    print(f"\nCompletion accuracy against n (total ε = {a.eps:g}, δ = {DELTA:g}; mean ± "
          f"sd over {seeds} seeds for n <= 1e5, one seed above):\n")
    print(table(res, ns))
    pays = {m: pays_at(res, ns, m) for m in ("synopsis", "per_query", "per_query_q10")}
    print(f"\nprivate pays (above the public floor from this n on): {pays}")
    print(f"threads: {threads_info()}; wall {log.elapsed:.0f} s")
    if a.figure:
        figure(res, ns, a.eps, a.figure)
    if not a.from_json:
        _bench.save_json(a.json, {"benchmark": "bench_private_n", **res, "ns": list(ns),
                                  "epsilon": a.eps, "seeds": seeds, "pays_at": pays,
                                  **_bench.environment(), "wall_s": log.elapsed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
