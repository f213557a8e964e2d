"""Real data against differentially private peers: every method on the same splits and seeds.

Data: :func:`brace.experiments.real_data.load_real` (a private bank and a disjoint public
split per seed; preprocessing constants from public data only). The public split is cut
into a **seed pool** (its first ``min(256, m // 2)`` rows: the queries of the clustering
retrievals) and a **query pool** (the rest). The seed pool's k-means centres (2 per
class; public computation on public rows) are the **public centres**: the seeds of the
synopsis and of DP-GRAMS, and the no-release floor.
Everything below runs under one total budget ``(ε, δ = 1e-5)`` per bank; the pure-ε peer
(diffprivlib) gets the same ε and δ = 0.

Methods (``docs/privacy-accounting.md`` for BRACE's accounting):

* ``diffprivlib``: ``diffprivlib.models.KMeans`` (ε-DP, public bounds: the box of the
  data's public range, see ``_public_box``), k = the number of classes (public: 10 for
  digits, 2 for breast cancer); a query is completed by its nearest centre;
* ``dp_grams``: DP-GRAMS (``peers_dp.dp_grams``; Bhattacharjee & Auddy,
  arXiv:2607.29675) from the public centres; a query is completed by its nearest mode.
  Bandwidth and batch rate are chosen on the PUBLIC split (used as a stand-in bank, with
  its public labels: best mean ARI over a small grid at the same ε);
* ``brace_global`` / ``brace_local``: per-query BRACE (default release),
  ``PrivateMemory(bank, radius=r, budget=(ε, δ), accounting=...)`` at
  ``ε_q = pm.affordable_epsilon(queries, steps=T)`` (the largest per-query ε at which the
  whole batch fits the budget), one ``pm.retrieve``;
* ``global_noise``: the same with ``method="global"`` (the fixed-sensitivity baseline),
  global accounting;
* ``synopsis``: ``pm.snapshot(centres, epsilon=None, cell_radius=r_cl,
  keep_seeds=True)`` (cell rounds from the public centres, the whole budget, once; cells
  of the clustering radius; a centre without enough noisy mass stays where it is),
  queries answered by ``syn.complete(q, how="nearest")`` or ``how="lsr"`` (free
  post-processing); ``synopsis_box``: the same from as many seeds uniform in the public
  box (the high-d limit: most such seeds see empty gates);
* ``noiseless`` (NOT private): LSR retrieval over the bank, the ceiling;
  ``kmeans`` (NOT private, clustering only): scikit-learn k-means with the same k;
  ``public_seeds`` and ``identity`` (completion): no release at all, the public centres
  / the query as its own completion: the floors that a release must beat to have read
  anything useful from the bank.

**Clustering view (digits).** Every bank memory is assigned to its nearest released
centre / attractor (evaluation only) and scored by ARI and NMI against the digit labels
(``sklearn.metrics``), at total ε ∈ {0.25, 1}, over ``--seeds`` seeds (a seed fixes the
split and all noise). Per-query methods retrieve from the seed pool (Q = its size) and
merge their endpoints by leader clustering at r/2 (``peers_dp.merge_points``,
post-processing); the radius is sized on the clean public split (``public_radius``, 32
bank memories per gate), T = 3. Wall time: one fit (the release; accounting included).

**Completion.** A workload of ``Q = 1000`` queries at total ε = 1 on digits and breast
cancer (and MNIST PCA-16/64 when ``$BRACE_MNIST_DIR`` is set): a query is a query-pool
record (drawn with replacement) with Gaussian noise of std ``0.5 × feature_scale`` and
25 % of its features set to 0 (``corrupt``), the setting of ``brace experiment real``;
radius sized for corrupted queries (``public_radius(..., queries=probe)``), T = 3.
Scores per seed: label accuracy (the label of the bank memory nearest to the completed
record against the query record's label) and the MSE ``‖y − z_T‖²/d`` to the noiseless
completion ``z_T``; mean ± 95 % CI over seeds (``mean_ci95``).

**Without public data** (``--no-public``; ``docs/benchmarks.md``, "Without public
data"): the synopsis that finds its own seeds (``brace.private_synopsis(bank,
epsilon=ε, delta=δ, bounds=domain)``, ``docs/privacy-accounting.md`` §15) on banks with
nothing public but their domain — sklearn digits (all 1,797 rows, raw pixels in
``[0, 16]^64``), the MNIST test split (all 10,000 rows, raw pixels / 255 in
``[0, 1]^784``) and :func:`brace.datasets.sample_clusters` (n = 100,000, k = 100,
d = 64 and 128, ``[-1, 1]^d``). Scores as ``benchmarks/bench_peers_nopublic.py`` (the
peers' benchmark, branch ``peers``): ARI and NMI of every bank row grouped by its nearest
attractor; on MNIST, ``Q = 1,000`` corrupted bank rows (noise of std ``0.5/√12`` per
pixel, a quarter of the pixels set to 0) completed by the nearest attractor, scored by
the label of the bank row nearest to the completion with the query's own source row
excluded; ``identity`` is the query itself. When that module can be imported (from this
directory or ``--peers-dir``), the peers run on the same banks, seeds and protocol
(``--peers``; its ``run_bank``), else the synopsis runs alone with the same loaders.
The synopsis is the default call (its setting by the public rule, ``project="choose"``);
``--np-project auto`` runs it with a private subspace first (``project="auto"``,
``docs/privacy-accounting.md`` §15.1), ``--np-project none`` in the full space.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_real.py [--quick] [--json out.json]
        [--seeds 20] [--completion-seeds 10] [--threads 1]
    OMP_NUM_THREADS=2 python benchmarks/bench_real.py --no-public [--np-seeds 5]
        [--np-datasets digits mnist synthetic synthetic128] [--peers lsh_tree ...]
        [--peers-dir DIR] [--np-project {choose,auto,none}] [--json out.json]

Without diffprivlib (``pip install 'brace-dam[peers]'``) its rows are skipped with a note.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import nearest, threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402
import peers_dp  # noqa: E402

import brace  # noqa: E402
from brace.experiments.real_data import corrupt, load_real, public_radius  # noqa: E402

DELTA = 1e-5
STEPS = 3
QUERIES = 1000
NOISE, MASK = 0.5, 0.25  # as brace.experiments.real
TARGET_GATE = 32.0
N_SEEDS = 256
CLUSTER_EPS = (0.25, 1.0)
COMPLETION_EPS = 1.0
BRACE_METHODS = ("brace_global", "brace_local", "global_noise", "synopsis", "synopsis_box")
PEERS = ("diffprivlib", "dp_grams")
GATES = (4.0, 8.0, 16.0, 32.0)  # completion: gate sizes tried on public data
HORIZONS = (1, 3)  # completion: horizons tried on public data
GRAMS_H = (0.1, 0.2, 0.3, 0.4)  # bandwidth grid, in units of the clustering radius
LABEL = {
    "diffprivlib": "diffprivlib k-means (δ = 0)",
    "dp_grams": "DP-GRAMS",
    "brace_global": "BRACE per-query, global acct.",
    "brace_local": "BRACE per-query, local acct.",
    "global_noise": "global noise (baseline)",
    "synopsis": "synopsis, public seeds",
    "synopsis_lsr": "synopsis, public seeds, LSR completion",
    "synopsis_box": "synopsis, box seeds",
    "noiseless": "noiseless LSR (NOT private)",
    "kmeans": "k-means (NOT private)",
    "identity": "the query itself (no release)",
    "public_seeds": "public centres only (no release, ε = 0)",
}
NOT_PRIVATE = ("noiseless", "kmeans", "public_seeds")


def have_diffprivlib() -> bool:
    try:
        import diffprivlib  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------- helpers


def _public_box(data: Any) -> tuple[np.ndarray, np.ndarray]:
    """The public box for diffprivlib's bounds and the box seeds: digits' pixels lie in
    [0, 1] by construction; otherwise the public split's range, widened by 10 % per side."""
    d = data.dim
    if data.name == "digits":
        return np.zeros(d), np.ones(d)
    lo, hi = data.public.min(axis=0), data.public.max(axis=0)
    pad = 0.1 * np.maximum(hi - lo, 1e-9)
    return lo - pad, hi + pad


@dataclass(frozen=True)
class Setup:
    name: str
    data: Any
    seeds: np.ndarray  # public seed pool
    centres: np.ndarray  # public k-means centres of the seed pool (2 per class)
    pool: np.ndarray  # public query pool
    pool_labels: np.ndarray
    box: tuple[np.ndarray, np.ndarray]
    n_classes: int


def setup(name: str, seed: int) -> Setup:
    data = load_real(name, seed=seed)
    m = data.public.shape[0]
    S = min(N_SEEDS, m // 2)
    k = int(np.unique(np.concatenate([data.bank_labels, data.public_labels])).size)
    from sklearn.cluster import KMeans

    C = KMeans(2 * k, n_init=4, random_state=seed).fit(data.public[:S]).cluster_centers_
    return Setup(name, data, data.public[:S], C, data.public[S:], data.public_labels[S:],
                 _public_box(data), k)


def select_grams(st: Setup, r: float, eps: float, reps: int = 2) -> dict[str, float]:
    """DP-GRAMS's bandwidth (× r) and batch rate chosen on the PUBLIC split: the public
    rows stand in for the bank (half of them as seeds), scored by ARI against the public
    labels at the same ε; best mean over ``reps`` noise draws."""
    from sklearn.metrics import adjusted_rand_score

    P, y = st.data.public, st.data.public_labels
    best: tuple[float, float, float | None] = (-np.inf, GRAMS_H[0], None)
    for hm in GRAMS_H:
        for q in (None, 1.0):  # the paper's 1/log n, full batch
            ari = []
            for s in range(reps):
                M = peers_dp.dp_grams(P, epsilon=eps, delta=DELTA, bandwidth=hm * r,
                                      init=st.centres, sample_rate=q, seed=10_000 + s)
                ari.append(adjusted_rand_score(y, nearest(P, M)))
            if np.mean(ari) > best[0]:
                best = (float(np.mean(ari)), hm, q)
    return {"public_ari": best[0], "h_over_r": best[1],
            "sample_rate": -1.0 if best[2] is None else best[2]}


def select_completion(st: Setup, rng: np.random.Generator) -> dict[str, float]:
    """Horizon T and gate size for the completion, chosen on PUBLIC data: the seed pool
    stands in for the bank, corrupted query-pool records for the queries, and the
    noiseless LSR completion is scored by label accuracy (public labels)."""
    fs = st.data.feature_scale
    S = st.seeds.shape[0]
    seed_labels = st.data.public_labels[:S]
    q = corrupt(st.pool, noise=NOISE * fs, mask=MASK, rng=rng)
    best = (-np.inf, 0, 0.0, 0.0)
    for tg in GATES:
        r = public_radius(st.seeds, n_bank=S, target_gate=min(tg, S - 1), queries=q)
        mem = brace.LSRMemory(st.seeds, radius=r)
        for T in HORIZONS:
            z = mem.retrieve(q, T)[:, -1]
            acc = float(np.mean(seed_labels[nearest(z, st.seeds)] == st.pool_labels))
            if acc > best[0] + 1e-12:
                best = (acc, T, tg, r)
    return {"public_accuracy": best[0], "steps": best[1], "target_gate": best[2]}


# ------------------------------------------------------------------------- releases


def release(method: str, st: Setup, queries: np.ndarray, r: float, eps: float, seed: int,
            grams: dict[str, float] | None = None, r_cluster: float | None = None,
            steps: int = STEPS, merge_radius: float | None = None
            ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Fit one method under total ``(eps, DELTA)``; returns ``(completions, info)`` where
    ``completions`` maps a row name to the ``(Q, d)`` completed queries and ``info`` holds
    ``centres`` (for the clustering view), the fit's wall time and method notes."""
    X = st.data.bank
    info: dict[str, Any] = {}
    t0 = time.perf_counter()
    out: dict[str, np.ndarray] = {}
    if method == "diffprivlib":
        C = peers_dp.diffprivlib_kmeans(X, st.n_classes, epsilon=eps, bounds=st.box, seed=seed)
        info["fit_s"] = time.perf_counter() - t0
        out[method] = C[nearest(queries, C)]
        info["centres"] = C
    elif method == "dp_grams":
        assert grams is not None and r_cluster is not None
        q = grams["sample_rate"]
        M = peers_dp.dp_grams(X, epsilon=eps, delta=DELTA,
                              bandwidth=grams["h_over_r"] * r_cluster, init=st.centres,
                              sample_rate=None if q < 0 else q, seed=seed)
        info["fit_s"] = time.perf_counter() - t0
        out[method] = M[nearest(queries, M)]
        info["centres"] = M
    elif method in ("brace_global", "brace_local", "global_noise"):
        acc = "local" if method == "brace_local" else "global"
        rel = "global" if method == "global_noise" else "brace"
        pm = brace.PrivateMemory(X, radius=r, budget=(eps, DELTA), accounting=acc)
        eps_q = float(pm.affordable_epsilon(queries, steps=steps, method=rel))
        if eps_q > 0:
            y = pm.retrieve(queries, steps=steps, epsilon=eps_q, method=rel, seed=seed).final
        else:  # nothing affordable: no release, the query is its own completion
            y = queries.copy()
        info["fit_s"] = time.perf_counter() - t0
        info["eps_q"] = eps_q
        info["spent"] = float(pm.spent)
        out[method] = np.asarray(y, dtype=np.float64)
        info["centres"] = peers_dp.merge_points(out[method], r / 2)
    elif method in ("synopsis", "synopsis_box"):
        pm = brace.PrivateMemory(X, radius=r, budget=(eps, DELTA), accounting="global")
        # cell rounds from the public centres (the default: no trajectories), cells of
        # the clustering radius (public), merged at r/2
        rc = r if r_cluster is None else r_cluster
        if method == "synopsis":
            syn = pm.snapshot(st.centres, epsilon=None, seed=seed, cell_radius=rc,
                              merge_radius=rc / 2, keep_seeds=True)
        else:
            syn = pm.snapshot(st.centres.shape[0], bounds=st.box, epsilon=None, seed=seed,
                              public_seed=seed, cell_radius=rc, merge_radius=rc / 2)
        info["fit_s"] = time.perf_counter() - t0
        info["spent"] = float(pm.spent)
        info["k"] = int(syn.attractors.shape[0])
        out[method] = np.asarray(syn.complete(queries, how="nearest"))
        if method == "synopsis":
            out["synopsis_lsr"] = np.asarray(syn.complete(queries, how="lsr"))
        info["centres"] = np.asarray(syn.attractors)
    elif method == "noiseless":
        y = brace.LSRMemory(X, radius=r).retrieve(queries, steps)[:, -1]
        info["fit_s"] = time.perf_counter() - t0
        out[method] = y
        info["centres"] = peers_dp.merge_points(y, r / 2)
    elif method == "public_seeds":  # no release: the public centres themselves
        info["fit_s"] = time.perf_counter() - t0
        out[method] = st.centres[nearest(queries, st.centres)]
        info["centres"] = st.centres
    elif method == "kmeans":
        from sklearn.cluster import KMeans

        C = KMeans(st.n_classes, n_init=10, random_state=seed).fit(X).cluster_centers_
        info["fit_s"] = time.perf_counter() - t0
        out[method] = C[nearest(queries, C)]
        info["centres"] = C
    else:  # pragma: no cover
        raise ValueError(method)
    return out, info


# ------------------------------------------------------------------------- the two views


def clustering(methods: tuple[str, ...], seeds: int, log: Any) -> dict[str, Any]:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    rows: dict[str, dict[str, list[float]]] = {}
    params: dict[str, Any] = {}
    for eps in CLUSTER_EPS:
        for s in range(seeds):
            st = setup("digits", s)
            X, y = st.data.bank, st.data.bank_labels
            r = public_radius(st.data.public, n_bank=X.shape[0], target_gate=TARGET_GATE)
            grams = select_grams(st, r, eps)  # per split: its own public data only
            params.setdefault(f"dp_grams@{eps:g}", []).append(grams)
            for meth in methods:
                if meth in NOT_PRIVATE and eps != CLUSTER_EPS[0]:
                    continue  # ε-free: once
                _, info = release(meth, st, st.seeds, r, eps, s, grams, r,
                                  merge_radius=r / 2)
                lab = nearest(X, info["centres"])
                rec = rows.setdefault(f"{meth}@{eps:g}", {"ari": [], "nmi": [], "fit_s": [],
                                                          "k": []})
                rec["ari"].append(float(adjusted_rand_score(y, lab)))
                rec["nmi"].append(float(normalized_mutual_info_score(y, lab)))
                rec["fit_s"].append(float(info["fit_s"]))
                rec["k"].append(int(info["centres"].shape[0]))
            log(f"clustering ε={eps:g} seed {s} done")
    summary = {key: {m: _bench.ci95(v) for m, v in rec.items()} for key, rec in rows.items()}
    return {"raw": rows, "summary": summary, "params": params}


def completion(datasets: tuple[str, ...], methods: tuple[str, ...], seeds: int,
               log: Any) -> dict[str, Any]:
    rows: dict[str, dict[str, list[float]]] = {}
    params: dict[str, Any] = {}
    eps = COMPLETION_EPS
    for name in datasets:
        for s in range(seeds):
            st = setup(name, s)
            X, fs = st.data.bank, st.data.feature_scale
            g = np.random.default_rng([s, 7])
            # parameters per split, from its own public data only
            sel = select_completion(st, np.random.default_rng([s, 99]))
            T, tg = int(sel["steps"]), float(sel["target_gate"])
            probe = corrupt(st.data.public, noise=NOISE * fs, mask=MASK, rng=g)
            r = public_radius(st.data.public, n_bank=X.shape[0], target_gate=tg,
                              queries=probe)
            r_cl = public_radius(st.data.public, n_bank=X.shape[0], target_gate=TARGET_GATE)
            grams = select_grams(st, r_cl, eps)
            params.setdefault(name, []).append({**sel, "radius": r, "radius_clustering": r_cl,
                                                "dp_grams": grams})
            idx = g.integers(0, st.pool.shape[0], QUERIES)
            q = corrupt(st.pool[idx], noise=NOISE * fs, mask=MASK, rng=g)
            truth = st.pool_labels[idx]
            z = brace.LSRMemory(X, radius=r).retrieve(q, T)[:, -1]
            rec = rows.setdefault(f"{name}/identity", {"accuracy": [], "mse": [], "fit_s": []})
            rec["accuracy"].append(float(np.mean(st.data.bank_labels[nearest(q, X)] == truth)))
            rec["mse"].append(float(np.mean(np.sum((q - z) ** 2, axis=1)) / X.shape[1]))
            rec["fit_s"].append(0.0)
            for meth in methods:
                if meth == "kmeans":
                    continue
                comps, info = release(meth, st, q, r, eps, s, grams, r_cl,
                                      steps=T)
                for row, y in comps.items():
                    acc = float(np.mean(st.data.bank_labels[nearest(y, X)] == truth))
                    mse = float(np.mean(np.sum((y - z) ** 2, axis=1)) / X.shape[1])
                    rec = rows.setdefault(f"{name}/{row}", {"accuracy": [], "mse": [],
                                                           "fit_s": []})
                    rec["accuracy"].append(acc)
                    rec["mse"].append(mse)
                    rec["fit_s"].append(float(info["fit_s"]))
                    if "eps_q" in info:
                        rec.setdefault("eps_q", []).append(info["eps_q"])
            log(f"completion {name} seed {s} done")
    summary = {key: {m: _bench.ci95(v) for m, v in rec.items()} for key, rec in rows.items()}
    return {"raw": rows, "summary": summary, "params": params}


# ------------------------------------------------------------------------- tables


def clustering_table(res: dict[str, Any], methods: tuple[str, ...]) -> str:
    rows = []
    for eps in CLUSTER_EPS:
        for m in methods:
            key = f"{m}@{eps:g}" if m not in NOT_PRIVATE else f"{m}@{CLUSTER_EPS[0]:g}"
            if key not in res["summary"] or (m in NOT_PRIVATE and eps != CLUSTER_EPS[0]):
                continue
            s = res["summary"][key]
            rows.append((LABEL[m], "—" if m in NOT_PRIVATE else f"{eps:g}",
                         _bench.fmt_ci(s["ari"]), _bench.fmt_ci(s["nmi"]),
                         f"{s['k']['mean']:.1f}", f"{s['fit_s']['mean']:.3f}"))
    return _bench.markdown(("method", "total ε", "ARI", "NMI", "centres", "fit (s)"), rows)


def completion_table(res: dict[str, Any]) -> str:
    rows = []
    for key, s in res["summary"].items():
        name, row = key.split("/")
        rows.append((name, LABEL[row], _bench.fmt_ci(s["accuracy"]), _bench.fmt_ci(s["mse"], 4),
                     f"{s['eps_q']['mean']:.4f}" if "eps_q" in s else "—",
                     f"{s['fit_s']['mean']:.3f}"))
    return _bench.markdown(("data set", "method", "accuracy", "MSE to noiseless", "ε_q",
                            "fit (s)"), rows)


# ------------------------------------------------------------------------- no public data

NP_EPS = {"digits": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0), "mnist": (1.0, 2.0, 4.0, 8.0),
          "synthetic": (1.0, 4.0), "synthetic128": (1.0, 4.0)}
NP_QUERIES = 1000
NP_PROJECT: list[str | None] = ["choose"]  # --np-project: the synopsis's `project`


def m_synopsis(bank: Any, dom: Any, eps: float, delta: float, seed: int) -> Any:
    """The synopsis without public data: a public box, nothing else (the default call;
    ``--np-project auto``: a private subspace first; ``none``: the full space)."""
    return brace.private_synopsis(bank.X, epsilon=eps, delta=delta,
                                  bounds=(dom.lo, dom.hi), seed=seed,
                                  project=NP_PROJECT[0])


def _peers_module(peers_dir: str | None) -> Any:
    if peers_dir:  # its own helpers (peers_dp, peers_lsh) first
        sys.path.insert(0, os.path.abspath(peers_dir))
        for mod in ("peers_dp", "peers_lsh", "bench_peers_nopublic"):
            sys.modules.pop(mod, None)
    try:
        import bench_peers_nopublic as bp
    except ImportError:
        return None
    return bp


@dataclass(frozen=True, eq=False)
class _NPBank:
    X: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True, eq=False)
class _NPDomain:
    lo: np.ndarray
    hi: np.ndarray


def _np_bank(name: str, seed: int) -> tuple[_NPBank, _NPDomain]:
    """The banks of ``bench_peers_nopublic.load_bank`` (same rows, same domains)."""
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return (_NPBank(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64)),
                _NPDomain(np.zeros(64), np.full(64, 16.0)))
    if name == "mnist":
        from brace.experiments.mnist_data import load_mnist_test

        images, labels = load_mnist_test(None)
        X = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0
        return _NPBank(X, labels.astype(np.int64)), _NPDomain(np.zeros(784), np.ones(784))
    d = 128 if name == "synthetic128" else 64
    from brace.datasets import sample_clusters

    X, y = sample_clusters(100_000, d, 100, seed=np.random.SeedSequence([seed, 2024]))
    return _NPBank(X, y), _NPDomain(np.full(d, -1.0), np.full(d, 1.0))


def _np_completion(bank: _NPBank, dom: _NPDomain, seed: int, syn: Any) -> tuple[float, float]:
    """MNIST completion (the peers' protocol): accuracy of the synopsis and of the query
    itself, the source row excluded."""
    g = np.random.default_rng([seed, 4242])
    src = g.integers(0, bank.X.shape[0], NP_QUERIES)
    d = bank.X.shape[1]
    q = bank.X[src] + NOISE * float(np.mean(dom.hi - dom.lo)) / np.sqrt(12.0) \
        * g.standard_normal((NP_QUERIES, d))
    cols = np.argsort(g.random((NP_QUERIES, d)), axis=1)[:, :int(round(MASK * d))]
    q[np.arange(NP_QUERIES)[:, None], cols] = 0.0
    xx = np.einsum("ij,ij->i", bank.X, bank.X)

    def acc(Z: np.ndarray) -> float:
        out = np.empty(Z.shape[0], dtype=np.int64)
        for lo in range(0, Z.shape[0], 256):
            D = xx[None, :] - 2.0 * Z[lo:lo + 256] @ bank.X.T
            D[np.arange(D.shape[0]), src[lo:lo + 256]] = np.inf  # the source row
            out[lo:lo + 256] = np.argmin(D, axis=1)
        return float(np.mean(bank.labels[out] == bank.labels[src]))

    return acc(np.asarray(syn.complete(q))), acc(q)


def no_public(datasets: tuple[str, ...], seeds: int, peers: tuple[str, ...],
              peers_dir: str | None, quick: bool, log: Any) -> dict[str, Any]:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    bp = _peers_module(peers_dir) if peers else None
    out: dict[str, Any] = {"peers_module": None if bp is None else bp.__file__}
    if peers and bp is None:
        log("note: benchmarks/bench_peers_nopublic.py not importable: synopsis only")
    for name in datasets:
        eps_list = (1.0, 4.0) if quick else NP_EPS[name]
        if bp is not None and name in ("digits", "mnist", "synthetic"):
            methods = {"synopsis": m_synopsis, **{m: bp.METHODS[m] for m in peers
                                                  if m in bp.METHODS}}
            bp.INFO["synopsis"] = ("synopsis, no public data (BRACE)", "dp")
            out[name] = bp.run_bank(name, methods, eps_list, seeds, log,
                                    completion=name == "mnist")
            continue
        raw: dict[str, dict[str, list[float]]] = {}
        for s in range(seeds):
            bank, dom = _np_bank(name, s)
            for eps in eps_list:
                t0 = time.perf_counter()
                syn = m_synopsis(bank, dom, eps, DELTA, s)
                fit = time.perf_counter() - t0
                lab = syn.assign(bank.X)
                rec = raw.setdefault(f"synopsis@{eps:g}", {})
                for k_, v in (("ari", adjusted_rand_score(bank.labels, lab)),
                              ("nmi", normalized_mutual_info_score(bank.labels, lab)),
                              ("k", syn.n_attractors), ("fit_s", fit)):
                    rec.setdefault(k_, []).append(float(v))
                if name == "mnist":
                    a, a_id = _np_completion(bank, dom, s, syn)
                    rec.setdefault("accuracy", []).append(a)
                    raw.setdefault("identity", {}).setdefault("accuracy", []).append(a_id)
            log(f"no public data: {name} seed {s} done")
        out[name] = {"raw": raw, "summary": {m: {k_: _bench.ci95(v) for k_, v in r.items()}
                                             for m, r in raw.items()}}
    return out


def no_public_table(res: dict[str, Any], bp: Any = None) -> str:
    """The rows of :func:`no_public`; with the peers module ``bp``, each method by its
    label and privacy kind (``dp``, ``not_dp`` — NOT private — ``uncharged`` …)."""
    rows = []
    for name, r in res.items():
        if not isinstance(r, dict) or "summary" not in r:
            continue
        for key, s in r["summary"].items():
            meth, _, eps = key.partition("@")
            cells = [_bench.fmt_ci(s[k_]) if k_ in s else "—" for k_ in ("ari", "nmi")]
            cells.append(f"{s['k']['mean']:.1f}" if "k" in s else "—")
            cells.append(_bench.fmt_ci(s["accuracy"]) if "accuracy" in s else "—")
            cells.append(f"{s['fit_s']['mean']:.2f}" if "fit_s" in s else "—")
            known = bp is not None and meth in bp.INFO  # the synopsis and the query
            label, kind = ((bp.label_of(meth), bp.kind_of(meth)) if known  # are not peers
                           else (meth, {"synopsis": "dp", "identity": "no_release"}.get(
                               meth, "?")))
            if kind in ("not_dp", "uncharged") and "NOT" not in label:
                label += " — NOT DP"
            rows.append((name, label, kind, eps or "—", *cells))
    return _bench.markdown(("data", "method", "kind", "total ε", "ARI", "NMI", "attractors",
                            "completion acc.", "fit (s)"), rows, "lllrrrrrr")


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick="a few seeds (smoke run)")
    p.add_argument("--seeds", type=int, default=None, help="clustering seeds (default 20)")
    p.add_argument("--completion-seeds", type=int, default=None,
                   help="completion seeds (default 10)")
    p.add_argument("--skip", nargs="*", default=(), help="methods to leave out")
    p.add_argument("--no-public", action="store_true",
                   help="only the section without public data (module docstring)")
    p.add_argument("--np-datasets", nargs="+", default=None,
                   choices=("digits", "mnist", "synthetic", "synthetic128"))
    p.add_argument("--np-seeds", type=int, default=None, help="seeds (default 5; quick 1)")
    p.add_argument("--peers", nargs="*", default=("lsh_tree", "diffprivlib", "dp_grams_box",
                                                  "dp_grams_private_seeds_uncharged",
                                                  "kmeans", "floor_centre"),
                   help="methods of bench_peers_nopublic.METHODS to run beside it")
    p.add_argument("--peers-dir", default=None,
                   help="a directory holding bench_peers_nopublic.py (default: this one)")
    p.add_argument("--np-project", default="choose", choices=("choose", "auto", "none"),
                   help="the synopsis without public data: its default setting "
                   "(choose), a private subspace (auto) or the full space (none)")
    a = p.parse_args(argv)
    NP_PROJECT[0] = None if a.np_project == "none" else a.np_project
    if a.no_public:
        log_np = _bench.Log()
        names = tuple(a.np_datasets or (("digits", "synthetic") if a.quick else
                                        ("digits", "mnist", "synthetic", "synthetic128")))
        if "mnist" in names and not os.environ.get("BRACE_MNIST_DIR"):
            names = tuple(n for n in names if n != "mnist")
            print("note: $BRACE_MNIST_DIR not set: mnist skipped", file=sys.stderr)
        peers = tuple(m for m in a.peers if not (m == "diffprivlib" and not have_diffprivlib()))
        res = no_public(names, a.np_seeds or (1 if a.quick else 5), peers, a.peers_dir,
                        a.quick, log_np)
        print("\nWithout public data (mean ± 95% CI over seeds):\n")
        print(no_public_table(res, _peers_module(a.peers_dir) if peers else None))
        print(f"threads: {threads_info()}; wall {log_np.elapsed:.0f} s")
        _bench.save_json(a.json, {"benchmark": "bench_real --no-public", "no_public": res,
                                  **_bench.environment(), "wall_s": log_np.elapsed})
        return 0
    seeds = a.seeds or (3 if a.quick else 20)
    cseeds = a.completion_seeds or (2 if a.quick else 10)
    notes = []
    peers = list(PEERS)
    if not have_diffprivlib():
        peers.remove("diffprivlib")
        notes.append("diffprivlib not installed (pip install 'brace-dam[peers]'): "
                     "its rows are skipped")
        print("note:", notes[-1], file=sys.stderr)
    methods = tuple(m for m in (*peers, *BRACE_METHODS, "public_seeds", "noiseless", "kmeans")
                    if m not in a.skip)
    datasets = ["digits", "breast_cancer"]
    if os.environ.get("BRACE_MNIST_DIR") and not a.quick:
        datasets += ["mnist16", "mnist64"]
    log = _bench.Log()
    cl = clustering(methods, seeds, log)
    co = completion(tuple(datasets), methods, cseeds, log)
    t1 = clustering_table(cl, methods)
    t2 = completion_table(co)
    print(f"\nClustering on digits (bank {1397}, ARI/NMI mean ± 95% CI over {seeds} seeds; "
          f"δ = {DELTA:g}, T = {STEPS}):\n")
    print(t1)
    print(f"\nCompletion, Q = {QUERIES} queries at total ε = {COMPLETION_EPS:g} "
          f"(mean ± 95% CI over {cseeds} seeds):\n")
    print(t2)
    print(f"\nparameters chosen on public data: {json.dumps(cl['params'])} "
          f"{json.dumps(co['params'])}")
    print(f"threads: {threads_info()}; wall {log.elapsed:.0f} s")
    _bench.save_json(a.json, {"benchmark": "bench_real", "clustering": cl, "completion": co,
                              "notes": notes, "seeds": seeds, "completion_seeds": cseeds,
                              **_bench.environment(), "wall_s": log.elapsed})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
