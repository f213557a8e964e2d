"""Completion on real data under a total budget: per-query BRACE, global noise, synopsis.

``brace experiment real``.

Data (:mod:`brace.experiments.real_data`): breast cancer (d = 30), digits (d = 64) and,
when the MNIST test split is found, MNIST PCA-16 and PCA-64. Each is split into a
private bank and a disjoint public split; preprocessing constants, the horizon ``T`` and
the support radius come from the public split only: ``T ∈ {1, 3}`` and the gate size
(4, 8, 16 or 32 bank memories per gate, :func:`~brace.experiments.real_data.public_radius`
sized for corrupted queries) are those whose noiseless completion is most accurate on
public data (the seed pool standing in for the bank), unless ``steps`` /
``target_gate`` fix them.

Task: completion. The public split is divided into a **query pool** and a **seed pool**
(``min(n_seeds, m // 2)`` records: the memory of the public-only baseline, and the rows
whose k-means centres, two per class, seed the synopsis). A query is a query-pool record
drawn with replacement, corrupted by :func:`~brace.experiments.real_data.corrupt`
(Gaussian noise of std ``noise × feature_scale``, then a fraction ``mask`` of the
features set to 0). Per query:

* **accuracy**: the label of the bank memory nearest to the completed record equals the
  query record's label (evaluation only; no release reads labels);
* **MSE**: ``‖y − z_T‖² / d``, ``z_T`` the noiseless LSR completion of the same query
  (``LSRMemory(bank, radius=r).retrieve(q, T)``).

Workload: ``Q`` queries answered from one bank under a total budget ``(ε_total, δ)``.
Methods (``docs/privacy-accounting.md``):

* ``brace_global`` / ``brace_local``: ``PrivateMemory(bank, radius=r, budget=(ε_total,
  δ), accounting="global" / "local")``; ``ε_q = pm.affordable_epsilon(queries, steps=T)``;
  one batch ``pm.retrieve(queries, steps=T, epsilon=ε_q)`` (default release);
* ``global_noise``: the same with ``method="global"`` under global accounting;
* ``synopsis``: ``pm.snapshot(centres, epsilon=None, cell_radius=r_c, keep_seeds=True)``
  (cell rounds from the public centres, cells of the clean public radius ``r_c``: 32
  memories per gate) spends the whole budget once; every query is then answered by
  ``syn.complete`` (nearest attractor; post-processing, its cost does not depend on
  ``Q``);
* ``noiseless``: the ceiling (NOT private);
* ``public_only``: noiseless LSR over the seed pool alone (ε = 0; its radius is sized by
  the same rule for the seed pool's size): what public data give without the bank.

When nothing is affordable (``ε_q = 0``) no release is made and the completion is the
query itself (counted in ``refused``). A cell with ``Q`` below ``min_scored`` scores
``ceil(min_scored / Q)`` independent workloads, each with its own fresh budget, so that
the accuracy of ``Q = 1`` rests on more than one query. Each of the ``R`` repetitions
draws its own queries, corruption and noise.

Outputs (atomic, in ``--out``): ``results.jsonl`` (one line per (dataset, Q, ε, method)
cell with its R repetitions, the config and versions; a rerun skips cells already there),
``summary.json``, ``table.txt`` (markdown), ``accuracy.png``, ``mse.png``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import LSRMemory, PrivateMemory
from .._io import atomic_write_text, write_json
from .._validation import (
    check_delta,
    check_int_at_least,
    check_nonnegative,
    check_positive,
)
from ._common import (
    append_jsonl,
    mean_ci95,
    metadata,
    pyplot,
    read_jsonl,
    read_resumable,
    save_figure,
)
from .real_data import NAMES, RealData, corrupt, load_real, public_radius

__all__ = ["RealConfig", "QUICK", "METHODS", "run_real", "format_table"]

_FORMAT = "brace-real/1"
HORIZONS = (1, 3)  # T tried on public data (when RealConfig.steps is None)
GATES = (4.0, 8.0, 16.0, 32.0)  # gate sizes tried on public data (target_gate None)

#: Methods in table order; the last two are not private releases.
METHODS = ("brace_global", "brace_local", "global_noise", "synopsis", "noiseless",
           "public_only")
PER_QUERY = {  # method -> (release method, accounting)
    "brace_global": ("brace", "global"),
    "brace_local": ("brace", "local"),
    "global_noise": ("global", "global"),
}
LABELS = {
    "brace_global": "BRACE, global acct.",
    "brace_local": "BRACE, local acct.",
    "global_noise": "global noise",
    "synopsis": "synopsis",
    "noiseless": "noiseless (NOT private)",
    "public_only": "public seeds only",
}
_DS_CODE = {name: i + 1 for i, name in enumerate(NAMES)}
_METHOD_CODE = {m: i + 1 for i, m in enumerate(METHODS)}


@dataclass(frozen=True)
class RealConfig:
    """Settings of the real-data completion experiment (module docstring).

    ``noise`` is in units of the data set's public ``feature_scale``; ``mask`` is the
    fraction of features set to 0. ``seed`` drives the queries, corruption and noise
    (one :class:`numpy.random.SeedSequence` per cell and repetition, so a resumed run
    draws what an uninterrupted one would); ``split_seed`` the bank/public split.
    """

    datasets: tuple[str, ...] = NAMES
    workloads: tuple[int, ...] = (1, 10, 100, 1000)
    epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    methods: tuple[str, ...] = METHODS
    delta: float = 1e-5
    steps: int | None = None
    repetitions: int = 3
    min_scored: int = 100
    noise: float = 0.5
    mask: float = 0.25
    target_gate: float | None = None
    n_seeds: int = 256
    seed: int = 0
    split_seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _nonempty_unique("datasets", self.datasets)
        for name in self.datasets:
            if name not in NAMES:
                raise ValueError(f"datasets: unknown data set {name!r}; expected some of "
                                 f"{', '.join(NAMES)}.")
        _nonempty_unique("workloads", self.workloads)
        for q in self.workloads:
            check_int_at_least("workloads", q, 1)
        _nonempty_unique("epsilons", self.epsilons)
        for e in self.epsilons:
            check_positive("epsilons", e)
        _nonempty_unique("methods", self.methods)
        for m in self.methods:
            if m not in METHODS:
                raise ValueError(f"methods: unknown method {m!r}; expected some of "
                                 f"{', '.join(METHODS)}.")
        check_delta(self.delta)
        if self.steps is not None:
            check_int_at_least("steps", self.steps, 1)
        check_int_at_least("repetitions", self.repetitions, 1)
        check_int_at_least("min_scored", self.min_scored, 1)
        check_nonnegative("noise", self.noise)
        if not 0 <= check_nonnegative("mask", self.mask) < 1:
            raise ValueError(f"mask is a fraction of the features, in [0, 1); got "
                             f"{self.mask!r}.")
        if self.target_gate is not None and not (
                math.isfinite(check_positive("target_gate", self.target_gate))
                and self.target_gate >= 1):
            raise ValueError(f"target_gate must be a finite number >= 1; got "
                             f"{self.target_gate!r}.")
        check_int_at_least("n_seeds", self.n_seeds, 1)
        check_int_at_least("seed", self.seed, 0)
        check_int_at_least("split_seed", self.split_seed, 0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _nonempty_unique(name: str, values: Any) -> None:
    if not isinstance(values, tuple) or not values:
        raise ValueError(f"{name} must be a non-empty tuple; got {values!r}.")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} holds duplicates: {values!r}.")


#: ``--quick``: Q ∈ {10, 100}, ε_total ∈ {1, 8}, R = 1, 20 scored queries per cell.
QUICK = RealConfig(workloads=(10, 100), epsilons=(1.0, 8.0), repetitions=1, min_scored=20,
                   quick=True)


# --------------------------------------------------------------------------- helpers


def _run_hash(cfg: RealConfig) -> str:
    """Hash of everything that changes a cell's numbers (not the grid or the method list)."""
    d = cfg.to_dict()
    for k in ("datasets", "workloads", "epsilons", "methods", "quick"):
        d.pop(k)
    blob = json.dumps({"format": _FORMAT, "config": d}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _key(rec: dict) -> tuple:
    e = rec["epsilon_total"]
    return (rec["dataset"], int(rec["n_queries"]), None if e is None else float(e),
            rec["method"])


def _has_eps(method: str) -> bool:
    return method not in ("noiseless", "public_only")


def _grid(cfg: RealConfig, datasets: tuple[str, ...]) -> list[tuple]:
    keys = []
    for ds in datasets:
        for Q in cfg.workloads:
            for m in cfg.methods:
                if _has_eps(m):
                    keys += [(ds, int(Q), float(e), m) for e in cfg.epsilons]
                else:
                    keys.append((ds, int(Q), None, m))
    return keys


def _ss(*entropy: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(x) for x in entropy])


def _milli(eps: float | None) -> int:
    return 0 if eps is None else int(round(eps * 1000))


def _nearest_labels(points: np.ndarray, bank: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Label of the bank memory nearest to each point (evaluation only)."""
    bb = (bank * bank).sum(1)
    out = np.empty(points.shape[0], dtype=np.int64)
    for lo in range(0, points.shape[0], 512):
        P = points[lo:lo + 512]
        d2 = bb[None, :] - 2.0 * P @ bank.T
        out[lo:lo + 512] = labels[np.argmin(d2, axis=1)]
    return out


def _stats(values: list[float]) -> dict[str, float]:
    ci = mean_ci95(np.asarray(values, dtype=np.float64), nonnegative=False)
    return {"mean": ci["mean"], "lo": ci["lo"], "hi": ci["hi"]}


# --------------------------------------------------------------------------- per data set


@dataclass
class _Prepared:
    data: RealData
    radius: float
    radius_public: float
    steps: int
    target_gate: float
    public_accuracy: float  # the selection's score on public data
    centres: np.ndarray  # public k-means centres of the seed pool: the synopsis's seeds
    cell_radius: float  # the synopsis's cells: 32 memories per gate on clean public data
    seeds: np.ndarray
    pool: np.ndarray
    pool_labels: np.ndarray
    mem: LSRMemory
    public_mem: LSRMemory


def _prepare(cfg: RealConfig, data: RealData) -> _Prepared:
    """Seed/query pools and radii, all from the public split."""
    m = data.public.shape[0]
    rng = np.random.default_rng(_ss(cfg.split_seed, _DS_CODE[data.name], 7))
    perm = rng.permutation(m)
    n_seeds = min(cfg.n_seeds, m // 2)
    seeds, pool_idx = perm[:n_seeds], perm[n_seeds:]
    probe = corrupt(data.public, noise=cfg.noise * data.feature_scale, mask=cfg.mask,
                    rng=rng)
    n = data.bank.shape[0]
    T, tg, score = _select(cfg, data, seeds, pool_idx, rng)
    r = public_radius(data.public, n_bank=n, target_gate=tg, queries=probe)
    r_pub = public_radius(data.public, n_bank=n_seeds, target_gate=tg, queries=probe)
    from sklearn.cluster import KMeans

    k = 2 * int(np.unique(data.public_labels).size)
    centres = KMeans(min(k, n_seeds), n_init=4, random_state=cfg.split_seed).fit(
        data.public[seeds]).cluster_centers_
    return _Prepared(
        data=data, radius=r, radius_public=r_pub, steps=T, target_gate=tg,
        public_accuracy=score, centres=np.asarray(centres, dtype=np.float64),
        cell_radius=public_radius(data.public, n_bank=n, target_gate=32.0),
        seeds=np.asarray(data.public[seeds]), pool=np.asarray(data.public[pool_idx]),
        pool_labels=np.asarray(data.public_labels[pool_idx]),
        mem=LSRMemory(data.bank, radius=r),
        public_mem=LSRMemory(np.asarray(data.public[seeds]), radius=r_pub),
    )


def _select(cfg: RealConfig, data: RealData, seeds: np.ndarray, pool: np.ndarray,
            rng: np.random.Generator) -> tuple[int, float, float]:
    """``(T, target_gate, score)``: the configured values, or, where None, the pair of
    :data:`HORIZONS` × :data:`GATES` whose noiseless completion is most accurate on PUBLIC
    data (the seed pool standing in for the bank, corrupted query-pool records for the
    queries, public labels)."""
    horizons = HORIZONS if cfg.steps is None else (cfg.steps,)
    gates = GATES if cfg.target_gate is None else (cfg.target_gate,)
    S = data.public[seeds]
    q = corrupt(data.public[pool], noise=cfg.noise * data.feature_scale, mask=cfg.mask,
                rng=rng)
    truth = data.public_labels[pool]
    best = (-1.0, horizons[0], gates[0])
    for tg in gates:
        r = public_radius(S, n_bank=S.shape[0], target_gate=min(tg, S.shape[0] - 1),
                          queries=q)
        mem = LSRMemory(S, radius=r)
        for T in horizons:
            z = mem.retrieve(q, T)[:, -1]
            acc = float(np.mean(_nearest_labels(z, S, data.public_labels[seeds]) == truth))
            if acc > best[0] + 1e-12:
                best = (acc, T, tg)
    return int(best[1]), float(best[2]), float(best[0])


@dataclass
class _Queries:
    """The R repetitions of one (dataset, Q): per repetition, W workloads of Q queries."""

    q: list[np.ndarray]        # per rep: (W*Q, d) corrupted queries
    labels: list[np.ndarray]   # per rep: (W*Q,) true labels
    z: list[np.ndarray]        # per rep: (W*Q, d) noiseless completions
    W: int


def _queries(cfg: RealConfig, prep: _Prepared, Q: int) -> _Queries:
    W = max(1, math.ceil(cfg.min_scored / Q))
    qs, ls, zs = [], [], []
    for rep in range(cfg.repetitions):
        g = np.random.default_rng(_ss(cfg.seed, _DS_CODE[prep.data.name], Q, rep, 1))
        idx = g.integers(0, prep.pool.shape[0], size=W * Q)
        q = corrupt(prep.pool[idx], noise=cfg.noise * prep.data.feature_scale,
                    mask=cfg.mask, rng=g)
        qs.append(q)
        ls.append(prep.pool_labels[idx])
        zs.append(prep.mem.retrieve(q, prep.steps)[:, -1])
    return _Queries(q=qs, labels=ls, z=zs, W=W)


def _score(prep: _Prepared, y: np.ndarray, labels: np.ndarray, z: np.ndarray
           ) -> tuple[float, float]:
    acc = float(np.mean(_nearest_labels(y, prep.data.bank, prep.data.bank_labels) == labels))
    mse = float(np.mean((y - z) ** 2))
    return acc, mse


# --------------------------------------------------------------------------- methods


def _per_query(cfg, prep, qs: _Queries, Q, eps_total, method, rep) -> dict:
    rel, acct = PER_QUERY[method]
    q_all = qs.q[rep]
    y = np.empty_like(q_all)
    eps_used, spent, refused = [], [], 0
    eps_global = None
    for w in range(qs.W):
        q = q_all[w * Q:(w + 1) * Q]
        pm = PrivateMemory(prep.mem, budget=(eps_total, cfg.delta), accounting=acct)
        if acct == "global" and eps_global is not None:
            eps_q = eps_global  # a fresh global budget prices Q queries wherever they are
        else:
            eps_q = float(pm.affordable_epsilon(q, steps=prep.steps, method=rel))
            eps_global = eps_q if acct == "global" else None
        eps_used.append(eps_q)
        if eps_q > 0:
            seed = _ss(cfg.seed, _DS_CODE[prep.data.name], Q, _milli(eps_total), rep,
                       _METHOD_CODE[method], w)
            y[w * Q:(w + 1) * Q] = pm.retrieve(q, steps=prep.steps, epsilon=eps_q,
                                               method=rel, seed=seed).final
        else:
            y[w * Q:(w + 1) * Q] = q  # nothing released: the (public) query itself
            refused += Q
        spent.append(float(pm.spent))
    return {"y": y, "epsilon_per_query": float(np.mean(eps_used)),
            "epsilon_spent": float(np.mean(spent)), "refused": refused,
            "accounting": acct, "release_method": rel}


def _synopsis(cfg, prep, eps_total, rep, cache) -> dict:
    key = (prep.data.name, float(eps_total), rep)
    if key not in cache:
        t0 = time.perf_counter()
        pm = PrivateMemory(prep.mem, budget=(eps_total, cfg.delta), accounting="global")
        seed = _ss(cfg.seed, _DS_CODE[prep.data.name], 0, _milli(eps_total), rep,
                   _METHOD_CODE["synopsis"])
        # cell rounds from the public centres (no trajectories), cells of the clean
        # public radius, a centre without enough noisy mass kept where it is
        syn = pm.snapshot(prep.centres, epsilon=None, seed=seed,
                          cell_radius=prep.cell_radius,
                          merge_radius=prep.cell_radius / 2, keep_seeds=True)
        cache[key] = {"syn": syn, "spent": float(pm.spent),
                      "build_s": time.perf_counter() - t0,
                      "n_attractors": int(np.asarray(syn.attractors).shape[0])}
    return cache[key]


def _cell(cfg, prep, qs: _Queries, Q, eps, method, syn_cache, common) -> dict:
    t0 = time.perf_counter()
    accs, mses, extra = [], [], {}
    per_rep: list[dict] = []
    for rep in range(cfg.repetitions):
        q, labels, z = qs.q[rep], qs.labels[rep], qs.z[rep]
        info: dict[str, Any] = {}
        if method == "noiseless":
            y = z
            info["query_accuracy"] = _score(prep, q, labels, z)[0]
        elif method == "public_only":
            y = prep.public_mem.retrieve(q, prep.steps)[:, -1]
        elif method == "synopsis":
            s = _synopsis(cfg, prep, eps, rep, syn_cache)
            y = np.asarray(s["syn"].complete(q))
            info = {"epsilon_spent": s["spent"], "build_s": s["build_s"],
                    "n_attractors": s["n_attractors"]}
        else:
            r = _per_query(cfg, prep, qs, Q, eps, method, rep)
            y = r.pop("y")
            info = r
        acc, mse = _score(prep, y, labels, z)
        accs.append(acc)
        mses.append(mse)
        per_rep.append({"accuracy": acc, "mse": mse, **info})
    if method in PER_QUERY:
        extra = {
            "epsilon_per_query": float(np.mean([p["epsilon_per_query"] for p in per_rep])),
            "epsilon_spent": float(np.mean([p["epsilon_spent"] for p in per_rep])),
            "refused_fraction": float(np.sum([p["refused"] for p in per_rep])
                                      / (cfg.repetitions * qs.W * Q)),
            "accounting": PER_QUERY[method][1],
            "release_method": PER_QUERY[method][0],
        }
    elif method == "synopsis":
        extra = {"epsilon_per_query": None,
                 "epsilon_spent": float(np.mean([p["epsilon_spent"] for p in per_rep])),
                 "n_attractors": float(np.mean([p["n_attractors"] for p in per_rep])),
                 "accounting": "global", "n_seeds": int(prep.centres.shape[0]),
                 "cell_radius": prep.cell_radius}
    elif method == "noiseless":
        extra = {"query_accuracy": _stats([p["query_accuracy"] for p in per_rep])}
    return {
        **common,
        "dataset": prep.data.name, "n_queries": int(Q), "epsilon_total": eps,
        "method": method, "label": LABELS[method],
        "private": method not in ("noiseless", "public_only"),
        "workloads_scored": qs.W, "queries_scored": qs.W * int(Q),
        "radius": prep.radius, "steps": prep.steps, "target_gate": prep.target_gate,
        "public_selection_accuracy": prep.public_accuracy, "delta": cfg.delta,
        "accuracy": _stats(accs), "mse": _stats(mses), **extra,
        "repetitions": per_rep, "wall_time_s": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------- the run


def _sklearn_version() -> str | None:
    from importlib import metadata as md

    try:
        return md.version("scikit-learn")
    except md.PackageNotFoundError:  # pragma: no cover
        return None


def run_real(
    cfg: RealConfig = RealConfig(),
    out_dir: str | Path = "runs/real",
    *,
    data_dir: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Run (or resume) the grid; write results, table and figures to ``out_dir``.

    Returns the summary dict (also ``summary.json``). Cells already in
    ``out_dir/results.jsonl`` with the same run hash are not recomputed; a file written
    by another configuration is an error. MNIST data sets are skipped, with a one-line
    note, when the MNIST files are not found.
    """
    if not isinstance(cfg, RealConfig):
        raise TypeError(f"cfg must be a RealConfig; got {type(cfg).__name__}.")
    t_start = time.perf_counter()
    run_hash = _run_hash(cfg)
    out_dir = Path(out_dir)
    results_path = out_dir / "results.jsonl"
    existing = read_resumable(results_path, run_hash)
    done = {_key(r) for r in existing}

    loaded: dict[str, RealData] = {}
    skipped: dict[str, str] = {}
    for name in cfg.datasets:
        try:
            loaded[name] = load_real(name, seed=_ss(cfg.split_seed, _DS_CODE[name]),
                                     data_dir=data_dir)
        except FileNotFoundError as exc:
            skipped[name] = str(exc)
            print(f"note: {name} skipped: the MNIST test split was not found (pass "
                  "--data-dir DIR or set BRACE_MNIST_DIR)", file=sys.stderr)
    if not loaded:
        raise FileNotFoundError("no data set could be loaded: " + "; ".join(
            f"{k}: {v}" for k, v in skipped.items()))
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = metadata(cfg)
    meta["versions"]["scikit-learn"] = _sklearn_version()
    common = {"run_hash": run_hash, "config": meta["config"], "versions": meta["versions"]}

    grid = _grid(cfg, tuple(loaded))
    todo = [k for k in grid if k not in done]
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc="real data", unit="cell", file=sys.stderr)
    n_new = 0
    prepared: dict[str, _Prepared] = {}
    try:
        for name in loaded:
            syn_cache: dict = {}
            for Q in cfg.workloads:
                cells = [k for k in todo if k[0] == name and k[1] == int(Q)]
                if not cells:
                    continue
                if name not in prepared:
                    prepared[name] = _prepare(cfg, loaded[name])
                prep = prepared[name]
                qs = _queries(cfg, prep, int(Q))
                for _, _, eps, method in cells:
                    rec = _cell(cfg, prep, qs, int(Q), eps, method, syn_cache, common)
                    append_jsonl(results_path, [rec])  # atomic: a finished cell survives
                    n_new += 1
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(data=name, Q=Q, eps=eps, method=method)
    finally:
        if bar is not None:
            bar.close()

    keys = set(grid)
    records = [r for r in read_jsonl(results_path) if _key(r) in keys]
    datasets = {}
    for name, data in loaded.items():
        prep = prepared.get(name) or _prepare(cfg, data)
        datasets[name] = {**data.describe(), "radius": prep.radius,
                          "radius_public_only": prep.radius_public,
                          "n_seeds": int(prep.seeds.shape[0]),
                          "n_query_pool": int(prep.pool.shape[0])}
    summary = {
        **meta,
        "run_hash": run_hash,
        "datasets": datasets,
        "skipped": skipped,
        "cells": _cells_summary(records),
        "cells_total": len(grid),
        "cells_computed_this_run": n_new,
        "wall_time_s_this_run": time.perf_counter() - t_start,
        "note": ("accuracy: label of the bank memory nearest to the completion equals the "
                 "query record's label; MSE: per coordinate, to the noiseless completion. "
                 "noiseless and public_only are not private releases."),
    }
    text = format_table(summary, cfg)
    print(text)
    _figures(cfg, summary, out_dir)
    atomic_write_text(out_dir / "table.txt", text + "\n")
    write_json(out_dir / "summary.json", summary)
    print(f"wrote {out_dir}/results.jsonl ({len(records)} cells, {n_new} new), "
          "summary.json, table.txt, accuracy.png, mse.png")
    return summary


def _cells_summary(records: list[dict]) -> list[dict]:
    keep = ("dataset", "n_queries", "epsilon_total", "method", "label", "private",
            "accuracy", "mse", "epsilon_per_query", "epsilon_spent", "refused_fraction",
            "queries_scored", "wall_time_s", "query_accuracy", "n_attractors")
    out = [{k: r[k] for k in keep if k in r} for r in records]
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(out, key=lambda c: (NAMES.index(c["dataset"]), c["n_queries"],
                                      order[c["method"]], c["epsilon_total"] or 0.0))


# --------------------------------------------------------------------------- table


def format_table(summary: dict, cfg: RealConfig) -> str:
    """Markdown: accuracy (MSE) per (dataset, Q, method) row and ε_total column."""
    cells = summary["cells"]
    eps = sorted(float(e) for e in cfg.epsilons)
    idx = {(c["dataset"], c["n_queries"], c["epsilon_total"], c["method"]): c
           for c in cells}
    lines = [
        "Completion on real data: label accuracy (per-coordinate MSE to the noiseless "
        f"completion); δ = {cfg.delta:g}, T and gate size chosen on public data per data "
        f"set (see results), R = {cfg.repetitions}, noise = {cfg.noise:g}·scale, "
        f"mask = {cfg.mask:g}",
        "",
        "| data | Q | method | " + " | ".join(f"ε={e:g}" for e in eps) + " |",
        "|---|---:|---|" + "---:|" * len(eps),
    ]
    for ds in summary["datasets"]:
        for Q in sorted({c["n_queries"] for c in cells if c["dataset"] == ds}):
            for m in METHODS:
                row = []
                if _has_eps(m):
                    for e in eps:
                        c = idx.get((ds, Q, e, m))
                        row.append("" if c is None else
                                   f"{c['accuracy']['mean']:.3f} ({c['mse']['mean']:.2g})")
                else:
                    c = idx.get((ds, Q, None, m))
                    if c is None:
                        continue
                    row = [f"{c['accuracy']['mean']:.3f}"] * len(eps)
                    if m == "noiseless":
                        row[0] += f" (query as is: {c['query_accuracy']['mean']:.3f})"
                if any(row):
                    lines.append(f"| {ds} | {Q} | {LABELS[m]} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append("ε used per query (per-query methods): mean over repetitions")
    lines.append("")
    lines.append("| data | Q | method | " + " | ".join(f"ε={e:g}" for e in eps) + " |")
    lines.append("|---|---:|---|" + "---:|" * len(eps))
    for ds in summary["datasets"]:
        for Q in sorted({c["n_queries"] for c in cells if c["dataset"] == ds}):
            for m in PER_QUERY:
                row = []
                for e in eps:
                    c = idx.get((ds, Q, e, m))
                    row.append("" if c is None else f"{c['epsilon_per_query']:.3g}")
                if any(row):
                    lines.append(f"| {ds} | {Q} | {LABELS[m]} | " + " | ".join(row) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures

_COLOR = {"brace_global": "tab:blue", "brace_local": "tab:purple",
          "global_noise": "tab:green", "synopsis": "tab:orange"}


def _figures(cfg: RealConfig, summary: dict, out_dir: Path) -> None:
    """``accuracy.png`` and ``mse.png``: against ε_total (log x), one panel per data set,
    one line per (method, Q) (the synopsis once, at the largest Q: its cost does not
    depend on Q); noiseless dashed, public-only dotted."""
    plt = pyplot()
    cells = summary["cells"]
    names = list(summary["datasets"])
    Qs = sorted({c["n_queries"] for c in cells})
    alphas = {Q: 0.35 + 0.65 * (i + 1) / len(Qs) for i, Q in enumerate(Qs)}
    markers = dict(zip(Qs, "os^Dv<>p", strict=False))
    for field, fname, ylabel in (("accuracy", "accuracy.png", "label accuracy"),
                                 ("mse", "mse.png", "MSE to noiseless completion")):
        fig, axes = plt.subplots(1, len(names), figsize=(4.3 * len(names), 3.6),
                                 squeeze=False)
        for ax, ds in zip(axes[0], names, strict=True):
            mine = [c for c in cells if c["dataset"] == ds]
            for m in ("brace_global", "brace_local", "global_noise", "synopsis"):
                for Q in (Qs if m != "synopsis" else Qs[-1:]):
                    pts = sorted((c["epsilon_total"], c[field]["mean"]) for c in mine
                                 if c["method"] == m and c["n_queries"] == Q)
                    if not pts:
                        continue
                    x, y = zip(*pts, strict=True)
                    lab = f"{LABELS[m]}, Q={Q}" if m != "synopsis" else "synopsis (any Q)"
                    ax.plot(x, y, color=_COLOR[m], alpha=alphas[Q], marker=markers[Q],
                            ms=3.5, lw=1.3, label=lab)
            if field == "accuracy":
                for m, ls in (("noiseless", "--"), ("public_only", ":")):
                    vals = [c[field]["mean"] for c in mine if c["method"] == m]
                    if vals:
                        ax.axhline(float(np.mean(vals)), color="k", ls=ls, lw=1.2,
                                   label=LABELS[m])
            ax.set_xscale("log")
            if field == "mse":
                ax.set_yscale("log")
            ax.set_title(ds, fontsize=10)
            ax.set_xlabel(f"total ε (δ = {cfg.delta:g})")
            ax.grid(True, which="major", alpha=0.3)
        axes[0, 0].set_ylabel(ylabel)
        h, lab = axes[0, 0].get_legend_handles_labels()
        if lab:
            fig.legend(h, lab, loc="upper center", ncol=min(6, len(lab)), fontsize=7,
                       bbox_to_anchor=(0.5, 1.0 + 0.03 * math.ceil(len(lab) / 6)))
        fig.tight_layout()
        save_figure(fig, out_dir / fname)
