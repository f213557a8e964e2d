"""Differentially private clustering peers with NO public data, at equal privacy.

Every method sees only the private bank and public constants: the data's public domain
(a box, and the ball around its centre through its corners), the bank size ``n`` and the
number of classes ``k`` (public). No public split, no data-derived bounds, no public
seeds. Budget: total ``(ε, δ = 1e-5)`` per release; the pure-ε peer (diffprivlib) gets
the same ε and δ = 0.

Banks (:func:`load_bank`):

* ``digits``: scikit-learn's digits, all 1,797 rows, raw pixels, public domain
  ``[0, 16]^64`` (centre 8, ball radius 64); ε ∈ {0.25, 0.5, 1, 2, 4, 8};
* ``mnist``: the MNIST test split, all 10,000 rows, raw 784-d pixels / 255, public
  domain ``[0, 1]^784`` (centre 0.5, radius 14), no projection (needs
  ``$BRACE_MNIST_DIR``); ε ∈ {1, 4};
* ``synthetic``: :func:`brace.datasets.sample_clusters` with n = 100,000, d = 64,
  k = 100 (Zipf sizes, Student-t with 3 degrees of freedom, spread 0.15), public
  domain ``[-1, 1]^64`` (radius 8); a new bank per seed; ε ∈ {1, 4}.

Methods (:data:`METHODS`, ``fn(bank, domain, epsilon, delta, seed) -> centres``; a
release may also return an object with ``centres`` or ``attractors`` and an optional
``complete(queries)``; :data:`INFO` holds each one's label and kind):

* ``lsh_tree``: private LSH-tree clustering (``peers_lsh``; after Google's
  ``private_lsh_clustering``), ``(ε, δ)``-DP, depth and thresholds by public rules;
  ``lsh_tree_depth20``: the same at the library's default depth 20;
* ``diffprivlib``: ``diffprivlib.models.KMeans``, ε-DP (δ = 0), bounds = the public box;
* ``dp_grams_box``: DP-GRAMS (``peers_dp.dp_grams``) from ``10k`` starting points
  uniform in the public box (public seed), bandwidth ``h = 0.1·R`` (a public rule:
  ``R`` the domain radius), the paper's iterations and batch;
* ``dp_grams_private_seeds_uncharged``: the paper's own start, ``min(⌈0.1 n⌉, 10k)``
  **private rows** as starting points, same bandwidth; the starts are NOT charged, so this
  row is **not DP** (an optimistic reading of the peer);
* with ``--grams-grid`` (the full run on digits and MNIST): both DP-GRAMS variants also at
  ``h/R`` ∈ :data:`GRAMS_GRID`, and a row ``…_best_h``: the grid value with the best mean
  ARI **chosen on the bank's own labels** (not a private selection; favours the peer);
* ceilings, NOT private: ``kmeans`` (scikit-learn, the true k, 3 restarts) and, on the
  synthetic bank, ``true_centres`` (the generator's centres);
* floors, no release: ``floor_centre`` (one centre at the domain centre) and
  ``floor_random`` (k centres uniform in the public box, public seed).

Scores: every bank row is assigned to its nearest released centre (evaluation only):
ARI and NMI against the labels. On MNIST also completion: ``Q = 1,000`` corrupted
queries, each a bank row plus Gaussian noise of std ``0.5·(1/√12)`` (half the public
per-pixel std of the uniform law on [0, 1]) with 25 % of its pixels set to 0, completed
by the nearest released centre; accuracy = the label of the bank row nearest to the
completion (the query's own source row excluded) against the source row's label;
``identity`` (the query itself) is the reference without any release. Mean ± 95 % CI
over seeds (``brace.experiments._common.mean_ci95``); a seed fixes all noise (and the
synthetic bank).

Usage::

    BRACE_MNIST_DIR=... python benchmarks/bench_peers_nopublic.py [--quick] [--seeds 5]
        [--json out.json] [--datasets digits mnist synthetic] [--grams-grid]
        [--skip METHOD ...] [--threads 2]

To add a method: ``METHODS["name"] = fn`` and ``INFO["name"] = (label, kind)`` with kind
one of ``"dp"``, ``"dp_pure"``, ``"not_dp"``, ``"uncharged"``, ``"no_release"``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_retrieve import _apply_thread_limit, threads_info  # noqa: E402

if __name__ == "__main__":
    _apply_thread_limit(sys.argv[1:])

import numpy as np  # noqa: E402
import peers_dp  # noqa: E402
import peers_lsh  # noqa: E402

from brace._io import write_json  # noqa: E402
from brace._meta import versions  # noqa: E402
from brace.datasets import ClusterSpec, sample_clusters  # noqa: E402
from brace.experiments._common import mean_ci95  # noqa: E402

DELTA = 1e-5
EPS = {"digits": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0), "mnist": (1.0, 4.0), "synthetic": (1.0, 4.0)}
QUICK_EPS = {"digits": (0.25, 1.0, 4.0), "mnist": (1.0,), "synthetic": (1.0, 4.0)}
SYNTH = {"n": 100_000, "d": 64, "k": 100}
QUICK_SYNTH = {"n": 10_000, "d": 64, "k": 100}
QUICK_MNIST_ROWS = 2000
GRAMS_H = 0.1  # DP-GRAMS bandwidth / domain radius (the public rule)
GRAMS_GRID = (0.05, 0.1, 0.2, 0.3)
GRAMS_SHARE = 0.1  # the paper's share of private rows as starting points
QUERIES = 1000
NOISE, MASK = 0.5, 0.25


# ------------------------------------------------------------------------- banks


@dataclass(frozen=True, eq=False)
class Domain:
    """What is public about a bank: its box ``[lo, hi]`` (per coordinate), the number of
    classes ``k``, and a note on where the box comes from. The ball used by the LSH tree
    is centred at the box's centre with the half-diagonal as radius."""

    name: str
    lo: np.ndarray
    hi: np.ndarray
    k: int
    note: str = ""

    @property
    def d(self) -> int:
        return int(self.lo.size)

    @property
    def centre(self) -> np.ndarray:
        return 0.5 * (self.lo + self.hi)

    @property
    def radius(self) -> float:
        return float(0.5 * np.linalg.norm(self.hi - self.lo))

    def describe(self) -> dict[str, Any]:
        lo, hi = np.unique(self.lo), np.unique(self.hi)
        return {"name": self.name, "d": self.d, "k": self.k, "radius": self.radius,
                "lo": lo.tolist() if lo.size > 1 else float(lo[0]),
                "hi": hi.tolist() if hi.size > 1 else float(hi[0]), "note": self.note}


@dataclass(frozen=True, eq=False)
class Bank:
    X: np.ndarray
    labels: np.ndarray
    true_centres: np.ndarray | None = None
    spec: dict[str, Any] = field(default_factory=dict)


def load_bank(name: str, seed: int, synth: dict[str, int] | None = None,
              mnist_rows: int | None = None) -> tuple[Bank, Domain]:
    """The private bank and its public domain (module docstring); ``mnist_rows``: the
    first rows of the MNIST test split only (the quick run)."""
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        d = X.shape[1]
        dom = Domain("digits", np.zeros(d), np.full(d, 16.0), 10,
                     "4-bit pixels: [0, 16] by construction")
        return Bank(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)), dom
    if name == "mnist":
        from brace.experiments.mnist_data import load_mnist_test

        images, labels = load_mnist_test(None)
        images, labels = images[:mnist_rows], labels[:mnist_rows]
        X = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0
        d = X.shape[1]
        dom = Domain("mnist", np.zeros(d), np.ones(d), 10,
                     "8-bit pixels / 255: [0, 1] by construction; raw 784-d")
        return Bank(X, labels.astype(np.int64)), dom
    if name == "synthetic":
        cfg = dict(SYNTH if synth is None else synth)
        spec = ClusterSpec(**cfg)
        X, y, C = sample_clusters(spec.n, spec.d, spec.k,
                                  seed=np.random.SeedSequence([seed, 2024]),
                                  return_centres=True)
        dom = Domain("synthetic", np.full(spec.d, spec.bounds[0]),
                     np.full(spec.d, spec.bounds[1]), spec.k,
                     "the generator's box [-1, 1]^d (rows clipped into it)")
        return Bank(X, y, C, spec.to_dict()), dom
    raise ValueError(f"unknown bank {name!r}")


# ------------------------------------------------------------------------- methods

Method = Callable[[Bank, Domain, float, float, int], Any]


def m_lsh_tree(bank: Bank, dom: Domain, eps: float, delta: float, seed: int,
               max_depth: int | str = "auto") -> np.ndarray:
    return peers_lsh.lsh_tree_clustering(bank.X, dom.k, epsilon=eps, delta=delta,
                                         radius=dom.radius, centre=dom.centre,
                                         max_depth=max_depth, seed=seed)


def m_lsh_tree_depth20(bank: Bank, dom: Domain, eps: float, delta: float,
                       seed: int) -> np.ndarray:
    return m_lsh_tree(bank, dom, eps, delta, seed, max_depth=20)


def m_diffprivlib(bank: Bank, dom: Domain, eps: float, delta: float,
                  seed: int) -> np.ndarray:
    del delta  # pure ε-DP: δ = 0
    return peers_dp.diffprivlib_kmeans(bank.X, dom.k, epsilon=eps, bounds=(dom.lo, dom.hi),
                                       seed=seed)


def _grams(bank: Bank, dom: Domain, eps: float, delta: float, seed: int, init: str,
           h_over_r: float) -> np.ndarray:
    n = bank.X.shape[0]
    S = 10 * dom.k if init == "box" else min(math.ceil(GRAMS_SHARE * n), 10 * dom.k)
    return peers_dp.dp_grams(bank.X, epsilon=eps, delta=delta,
                             bandwidth=h_over_r * dom.radius, n_inits=S, init=init,
                             bounds=(dom.lo, dom.hi), seed=seed, init_seed=10_000 + seed)


def m_dp_grams_box(bank: Bank, dom: Domain, eps: float, delta: float, seed: int,
                   h_over_r: float = GRAMS_H) -> np.ndarray:
    return _grams(bank, dom, eps, delta, seed, "box", h_over_r)


def m_dp_grams_rows(bank: Bank, dom: Domain, eps: float, delta: float, seed: int,
                    h_over_r: float = GRAMS_H) -> np.ndarray:
    return _grams(bank, dom, eps, delta, seed, "rows", h_over_r)


def m_kmeans(bank: Bank, dom: Domain, eps: float, delta: float, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    return KMeans(dom.k, n_init=3, random_state=seed).fit(bank.X).cluster_centers_


def m_true_centres(bank: Bank, dom: Domain, eps: float, delta: float,
                   seed: int) -> np.ndarray:
    if bank.true_centres is None:
        raise LookupError("this bank has no generator centres")
    return bank.true_centres


def m_floor_centre(bank: Bank, dom: Domain, eps: float, delta: float,
                   seed: int) -> np.ndarray:
    return dom.centre[None, :].copy()


def m_floor_random(bank: Bank, dom: Domain, eps: float, delta: float,
                   seed: int) -> np.ndarray:
    g = np.random.default_rng([seed, 31337])
    return dom.lo + (dom.hi - dom.lo) * g.random((dom.k, dom.d))


METHODS: dict[str, Method] = {
    "lsh_tree": m_lsh_tree,
    "lsh_tree_depth20": m_lsh_tree_depth20,
    "diffprivlib": m_diffprivlib,
    "dp_grams_box": m_dp_grams_box,
    "dp_grams_private_seeds_uncharged": m_dp_grams_rows,
    "kmeans": m_kmeans,
    "true_centres": m_true_centres,
    "floor_centre": m_floor_centre,
    "floor_random": m_floor_random,
}

#: name -> (label, kind); kinds: "dp" ((ε, δ)-DP), "dp_pure" (ε-DP, δ = 0), "not_dp"
#: (reads the bank without privacy: ceilings), "uncharged" (part of it is not charged:
#: NOT DP), "no_release" (reads nothing of the bank).
INFO: dict[str, tuple[str, str]] = {
    "lsh_tree": ("LSH-tree clustering (Google-style), auto depth", "dp"),
    "lsh_tree_depth20": ("LSH-tree clustering, depth 20 (library default)", "dp"),
    "diffprivlib": ("diffprivlib k-means (δ = 0)", "dp_pure"),
    "dp_grams_box": ("DP-GRAMS, box starts", "dp"),
    "dp_grams_private_seeds_uncharged": (
        "DP-GRAMS, private-row starts UNCHARGED (NOT DP)", "uncharged"),
    "kmeans": ("k-means, true k (NOT private)", "not_dp"),
    "true_centres": ("generator's centres (NOT private)", "not_dp"),
    "floor_centre": ("one centre at the domain centre (no release)", "no_release"),
    "floor_random": ("k random public centres (no release)", "no_release"),
}
EPS_FREE = ("not_dp", "no_release")


def _grid_methods() -> dict[str, tuple[Method, str, str]]:
    out = {}
    for h in GRAMS_GRID:
        for base, fn, kind in (("dp_grams_box", m_dp_grams_box, "dp"),
                               ("dp_grams_private_seeds_uncharged", m_dp_grams_rows,
                                "uncharged")):
            name = f"{base}@h={h:g}R"

            def f(bank, dom, eps, delta, seed, _fn=fn, _h=h):
                return _fn(bank, dom, eps, delta, seed, h_over_r=_h)

            out[name] = (f, f"{INFO[base][0]}, h = {h:g} R", kind)
    return out


def _info(name: str) -> tuple[str, str]:
    """``(label, kind)`` of a row. A ``…_best_h`` row (its bandwidth chosen on the bank's
    labels) is an oracle selection: NOT DP whatever its base. An unknown name is an
    error, never silently "dp"."""
    if "_best_h@" in name:
        base = name.split("_best_h@")[0]
        return f"{INFO[base][0]}, h chosen on the bank's labels (oracle, NOT DP)", "not_dp"
    if name not in INFO:
        raise KeyError(f"method {name!r} has no INFO entry (label, kind): add one.")
    return INFO[name]


def kind_of(name: str) -> str:
    return _info(name)[1]


def label_of(name: str) -> str:
    return _info(name)[0]


# ------------------------------------------------------------------------- scoring


def nearest(points: np.ndarray, centres: np.ndarray, block: int = 4096) -> np.ndarray:
    """Index of the nearest centre of each point (blocked)."""
    C = np.asarray(centres, dtype=np.float64)
    cc = np.einsum("ij,ij->i", C, C)
    out = np.empty(points.shape[0], dtype=np.int64)
    for lo in range(0, points.shape[0], block):
        P = np.asarray(points[lo:lo + block], dtype=np.float64)
        out[lo:lo + block] = np.argmin(cc[None, :] - 2.0 * P @ C.T, axis=1)
    return out


def _centres_of(release: Any) -> np.ndarray:
    if isinstance(release, np.ndarray):
        return release
    for attr in ("centres", "attractors"):
        if hasattr(release, attr):
            return np.asarray(getattr(release, attr), dtype=np.float64)
    raise TypeError(f"a release must be an array of centres or have .centres/.attractors; "
                    f"got {type(release).__name__}")


def _complete(release: Any, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(completions, which)``: the completed queries and, when the release is a set of
    centres (completion by the nearest centre), the index of each query's centre."""
    if hasattr(release, "complete"):
        return np.asarray(release.complete(queries), dtype=np.float64), None
    C = _centres_of(release)
    which = nearest(queries, C)
    return C[which], which


@dataclass(frozen=True, eq=False)
class Workload:
    """Corrupted queries for the completion view: ``source`` rows of the bank."""

    queries: np.ndarray
    source: np.ndarray


def make_workload(bank: Bank, dom: Domain, seed: int) -> Workload:
    g = np.random.default_rng([seed, 4242])
    src = g.integers(0, bank.X.shape[0], QUERIES)
    std = NOISE * float(np.mean(dom.hi - dom.lo)) / math.sqrt(12.0)
    q = bank.X[src] + std * g.standard_normal((QUERIES, dom.d))
    k = int(round(MASK * dom.d))
    cols = np.argsort(g.random((QUERIES, dom.d)), axis=1)[:, :k]
    q[np.arange(QUERIES)[:, None], cols] = 0.0
    return Workload(q, src)


def _two_nearest_rows(X: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """``(m, 2)``: the two bank rows nearest to each point of ``Z``."""
    xx = np.einsum("ij,ij->i", X, X)
    out = np.empty((Z.shape[0], 2), dtype=np.int64)
    for lo in range(0, Z.shape[0], 256):
        D = xx[None, :] - 2.0 * Z[lo:lo + 256] @ X.T
        two = np.argpartition(D, 1, axis=1)[:, :2]
        first = np.take_along_axis(D, two, axis=1)
        out[lo:lo + 256] = np.take_along_axis(two, np.argsort(first, axis=1), axis=1)
    return out


def completion_accuracy(bank: Bank, wl: Workload, completed: np.ndarray,
                        which: np.ndarray | None = None) -> float:
    """Label of the bank row nearest to each completion, the query's source row excluded,
    against the source row's label. ``which``: the completions are ``centres[which]``
    for the distinct rows of ``completed`` (computed once per centre)."""
    if which is None:
        pts, idx = completed, np.arange(completed.shape[0])
    else:
        _, first, idx = np.unique(which, return_index=True, return_inverse=True)
        pts = completed[first]
    two = _two_nearest_rows(bank.X, pts)[idx]
    nn = np.where(two[:, 0] == wl.source, two[:, 1], two[:, 0])
    return float(np.mean(bank.labels[nn] == bank.labels[wl.source]))


def score(bank: Bank, centres: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    lab = nearest(bank.X, centres)
    return {"ari": float(adjusted_rand_score(bank.labels, lab)),
            "nmi": float(normalized_mutual_info_score(bank.labels, lab)),
            "k": int(centres.shape[0])}


# ------------------------------------------------------------------------- runs


def run_bank(name: str, methods: dict[str, Method], eps_list: tuple[float, ...],
             seeds: int, log: Callable[[str], None], synth: dict[str, int] | None = None,
             completion: bool = False, mnist_rows: int | None = None) -> dict[str, Any]:
    raw: dict[str, dict[str, list[float]]] = {}
    domain_info: dict[str, Any] = {}
    spec: list[dict[str, Any]] = []
    for s in range(seeds):
        bank, dom = load_bank(name, s, synth, mnist_rows)
        domain_info = dom.describe()
        if bank.spec:
            spec.append(bank.spec)
        wl = make_workload(bank, dom, s) if completion else None
        if wl is not None:
            rec = raw.setdefault("identity", {})
            rec.setdefault("accuracy", []).append(completion_accuracy(bank, wl, wl.queries))
        for meth, fn in methods.items():
            free = kind_of(meth) in EPS_FREE
            if meth == "true_centres" and bank.true_centres is None:
                continue
            for eps in (eps_list[:1] if free else eps_list):
                t0 = time.perf_counter()
                rel = fn(bank, dom, eps, DELTA, s)
                fit = time.perf_counter() - t0
                C = _centres_of(rel)
                rec = raw.setdefault(meth if free else f"{meth}@{eps:g}", {})
                for key, v in {**score(bank, C), "fit_s": fit}.items():
                    rec.setdefault(key, []).append(v)
                if wl is not None:
                    acc = completion_accuracy(bank, wl, *_complete(rel, wl.queries))
                    rec.setdefault("accuracy", []).append(acc)
        log(f"{name} seed {s} done")
    summary = {key: {m: _summ(v) for m, v in rec.items()} for key, rec in raw.items()}
    return {"raw": raw, "summary": summary, "domain": domain_info, "eps": list(eps_list),
            "seeds": seeds, "bank_spec": spec[:1],
            "n": int(bank.X.shape[0]), "d": int(bank.X.shape[1])}


def _summ(v: list[float]) -> dict[str, float]:
    s = mean_ci95(v, nonnegative=False)
    return {"mean": s["mean"], "lo": s["lo"], "hi": s["hi"], "n": s["n"]}


def add_best_h(res: dict[str, Any]) -> dict[str, Any]:
    """``…_best_h@ε``: per ε, the grid row with the best mean ARI (chosen on the bank's
    labels: an oracle selection, not private)."""
    best: dict[str, Any] = {}
    for base in ("dp_grams_box", "dp_grams_private_seeds_uncharged"):
        for eps in res["eps"]:
            cands = [(s["ari"]["mean"], key) for key, s in res["summary"].items()
                     if key.startswith(f"{base}@h=") and key.endswith(f"@{eps:g}")]
            if cands:
                _, key = max(cands)
                best[f"{base}_best_h@{eps:g}"] = {**res["summary"][key], "chosen": key}
    res["summary"].update(best)
    return res


# ------------------------------------------------------------------------- tables


def _fmt(s: dict[str, float], digits: int = 3) -> str:
    if not np.isfinite(s["lo"]):
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ± {(s['hi'] - s['lo']) / 2:.{digits}f}"


def _row_names(res: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for key in res["summary"]:
        base = key.split("@")[0]
        if base not in names and base != "identity" and "@h=" not in key:
            names.append(base)
    return names


def ari_table(res: dict[str, Any], metric: str = "ari") -> str:
    eps = res["eps"]
    head = "| method | " + " | ".join(f"ε = {e:g}" for e in eps) + " |"
    lines = [head, "|---|" + "---|" * len(eps)]
    for m in _row_names(res):
        label = label_of(m.replace("_best_h", "")) + (
            ", best h on the bank's labels (oracle)" if m.endswith("_best_h") else "")
        if kind_of(m) in EPS_FREE:
            cell = _fmt(res["summary"][m][metric])
            lines.append(f"| {label} | " + " | ".join([cell] + ["″"] * (len(eps) - 1)) + " |")
            continue
        cells = []
        for e in eps:
            s = res["summary"].get(f"{m}@{e:g}")
            cells.append("—" if s is None else _fmt(s[metric]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2 seeds, fewer ε, 2,000 MNIST rows, n = 1e4 synthetic")
    p.add_argument("--seeds", type=int, default=None, help="seeds (default 5; quick 2)")
    p.add_argument("--datasets", nargs="*", default=None,
                   help="digits mnist synthetic (default: all; mnist needs $BRACE_MNIST_DIR)")
    p.add_argument("--grams-grid", action="store_true",
                   help="DP-GRAMS over the bandwidth grid on digits and MNIST (oracle rows)")
    p.add_argument("--skip", nargs="*", default=(), help="methods to leave out")
    p.add_argument("--json", default=None, help="write the results here (atomic)")
    p.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads")
    a = p.parse_args(argv)
    seeds = a.seeds or (2 if a.quick else 5)
    eps_by = QUICK_EPS if a.quick else EPS
    synth = QUICK_SYNTH if a.quick else SYNTH
    datasets = a.datasets or ["digits", "mnist", "synthetic"]
    notes: list[str] = []
    if "mnist" in datasets and not os.environ.get("BRACE_MNIST_DIR"):
        datasets = [x for x in datasets if x != "mnist"]
        notes.append("$BRACE_MNIST_DIR not set: MNIST skipped")
    methods = {k: v for k, v in METHODS.items() if k not in a.skip}
    why = peers_dp.diffprivlib_unavailable()
    if why is not None:
        methods.pop("diffprivlib", None)
        notes.append(f"{why}: skipped")
    for note in notes:
        print("note:", note, file=sys.stderr)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    results: dict[str, Any] = {}
    for name in datasets:
        ms = dict(methods)
        if a.grams_grid and name in ("digits", "mnist"):
            for gname, (fn, label, kind) in _grid_methods().items():
                ms[gname] = fn
                INFO[gname] = (label, kind)
        res = run_bank(name, ms, eps_by[name], seeds, log,
                       synth=synth if name == "synthetic" else None,
                       completion=(name == "mnist"),
                       mnist_rows=QUICK_MNIST_ROWS if a.quick else None)
        results[name] = add_best_h(res) if a.grams_grid else res
        print(f"\n{name} (n = {res['n']}, d = {res['d']}, k = {res['domain']['k']}; "
              f"ARI, mean ± 95% CI over {seeds} seeds; δ = {DELTA:g}):\n")
        print(ari_table(results[name]))
        print(f"\n{name}: NMI\n")
        print(ari_table(results[name], "nmi"))
        if name == "mnist":
            print("\nmnist: completion accuracy (identity = the query itself: "
                  f"{_fmt(res['summary']['identity']['accuracy'])})\n")
            print(ari_table(results[name], "accuracy"))
        print(f"\n{name}: fit seconds\n")
        print(ari_table(results[name], "fit_s"))
    wall = time.perf_counter() - t0
    print(f"\nthreads: {threads_info()}; wall {wall:.0f} s")
    if a.json:
        from importlib import metadata as md

        extra = {}
        for dist in ("scikit-learn", "diffprivlib", "dp-accounting"):
            try:
                extra[dist] = md.version(dist)
            except md.PackageNotFoundError:
                extra[dist] = None
        config = {"delta": DELTA, "eps": {k: list(eps_by[k]) for k in datasets},
                  "seeds": seeds, "quick": a.quick, "synthetic": synth,
                  "mnist_rows": QUICK_MNIST_ROWS if a.quick else None,
                  "synthetic_spec": asdict(ClusterSpec(**synth)),
                  "grams": {"h_over_r": GRAMS_H, "grid": list(GRAMS_GRID) if a.grams_grid
                            else None, "share": GRAMS_SHARE, "box_starts": "10k"},
                  "queries": QUERIES, "noise": NOISE, "mask": MASK,
                  "methods": {m: {"label": label_of(m), "kind": kind_of(m)}
                              for m in methods}}
        write_json(a.json, {"results": results, "config": config, "notes": notes,
                            "threads": threads_info(), "versions": {**versions(), **extra},
                            "wall_s": wall})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
