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

**Public-data settings** (``settings``; ``docs/experiments.md`` §6.1). ``"split"`` is
the setting above (a public split of the same population). The others run on the data
sets with a public domain (:data:`~brace.experiments.real_data.DOMAINS`: digits and raw
MNIST, ``mnist784``), with the same bank and query pool; only what counts as public
changes:

* ``"none"``: no public data at all. ``synopsis_private`` is the synopsis without seeds
  (``pm.snapshot(bounds=domain)``, ``docs/privacy-accounting.md`` §15); per-query
  methods take their radius from the private scale of a synopsis without seeds at
  ``(ε/5, δ/2)`` and spend ``(4ε/5, δ/2)`` on the queries; ``public_only`` is the query
  itself (nothing is released and nothing public is known); no public-seeded synopsis.
* ``"sample"``: the first :data:`SAMPLE_SIZE` (50) rows of the seed pool;
* ``"shifted"``: the seed-pool rows of the classes below :data:`SHIFT_CLASSES` (0–4): a
  public set from another class mix, half the classes missing.

In ``"sample"`` and ``"shifted"`` the public rows are the memory of ``public_only`` (at
the gate size of :data:`GATES` that scores best on the queries themselves: an oracle
choice in the floor's favour), the
k-means centres of the public-seeded ``synopsis`` (two per public class, at most half
the rows) and the source of the radii (:func:`~brace.experiments.real_data.public_radius`
on the public rows alone); ``T = 1`` (:data:`NEW_SETTING_STEPS`) in the three new
settings. ``synopsis_private`` does not read public data in any setting.

When nothing is affordable (``ε_q = 0``) no release is made and the completion is the
query itself (counted in ``refused``). A cell with ``Q`` below ``min_scored`` scores
``ceil(min_scored / Q)`` independent workloads, each with its own fresh budget, so that
the accuracy of ``Q = 1`` rests on more than one query. Each of the ``R`` repetitions
draws its own queries, corruption and noise.

Outputs (atomic, in ``--out``): ``results.jsonl`` (one line per (dataset, Q, ε, method)
cell with its R repetitions, the config and versions; a rerun skips cells already there),
``summary.json``, ``table.txt`` (markdown), ``accuracy.png``, ``mse.png`` and, when a
setting other than ``"split"`` ran, ``settings.png``.
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
from .real_data import DOMAINS, NAMES, RealData, corrupt, load_real, public_radius

__all__ = ["RealConfig", "QUICK", "METHODS", "SETTINGS", "run_real", "format_table"]

_FORMAT = "brace-real/1"
HORIZONS = (1, 3)  # T tried on public data (when RealConfig.steps is None)
GATES = (4.0, 8.0, 16.0, 32.0)  # gate sizes tried on public data (target_gate None)

#: Methods in table order; the last two are not private releases.
METHODS = ("brace_global", "brace_local", "global_noise", "synopsis", "synopsis_private",
           "synopsis_private_pca", "noiseless", "public_only")
#: Public-data settings (module docstring); "split" is the original setting.
SETTINGS = ("split", "none", "sample", "shifted")
SAMPLE_SIZE = 50  # rows of the "sample" setting's public data
SHIFT_CLASSES = 5  # the "shifted" setting's public rows are of the classes below this
NEW_SETTING_STEPS = 1  # T of the per-query methods in the settings other than "split"
NONE_SCALE_SHARE = 0.2  # "none": share of ε (and half of δ) spent on the private radius
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
    "synopsis_private": "synopsis, no public data",
    "synopsis_private_pca": "synopsis, no public data, private PCA",
    "noiseless": "noiseless (NOT private)",
    "public_only": "public seeds only",
}
_DS_CODE = {name: i + 1 for i, name in enumerate(NAMES)}
#: the noise's entropy per method (fixed: a method added later draws its own)
_METHOD_CODE = {"brace_global": 1, "brace_local": 2, "global_noise": 3, "synopsis": 4,
                "synopsis_private": 5, "noiseless": 6, "public_only": 7,
                "synopsis_private_pca": 8}
_PRIVATE_SYNOPSES = ("synopsis_private", "synopsis_private_pca")
_SETTING_CODE = {s_: i for i, s_ in enumerate(SETTINGS)}  # "split": 0 (no extra entropy)
_DEFAULT_DATASETS = ("breast_cancer", "digits", "mnist16", "mnist64")
_DEFAULT_METHODS = ("brace_global", "brace_local", "global_noise", "synopsis", "noiseless",
                    "public_only")


@dataclass(frozen=True)
class RealConfig:
    """Settings of the real-data completion experiment (module docstring).

    ``noise`` is in units of the data set's public ``feature_scale``; ``mask`` is the
    fraction of features set to 0. ``seed`` drives the queries, corruption and noise
    (one :class:`numpy.random.SeedSequence` per cell and repetition, so a resumed run
    draws what an uninterrupted one would); ``split_seed`` the bank/public split.
    """

    datasets: tuple[str, ...] = _DEFAULT_DATASETS
    workloads: tuple[int, ...] = (1, 10, 100, 1000)
    epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    methods: tuple[str, ...] = _DEFAULT_METHODS
    settings: tuple[str, ...] = ("split",)
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
        _nonempty_unique("settings", self.settings)
        for st_ in self.settings:
            if st_ not in SETTINGS:
                raise ValueError(f"settings: unknown setting {st_!r}; expected some of "
                                 f"{', '.join(SETTINGS)}.")
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
    for k in ("datasets", "workloads", "epsilons", "methods", "settings", "quick"):
        d.pop(k)
    blob = json.dumps({"format": _FORMAT, "config": d}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _key(rec: dict) -> tuple:
    e = rec["epsilon_total"]
    return (rec["dataset"], rec.get("setting", "split"), int(rec["n_queries"]),
            None if e is None else float(e), rec["method"])


def _has_eps(method: str) -> bool:
    return method not in ("noiseless", "public_only")


def _applies(ds: str, setting: str, method: str) -> bool:
    """Whether a (data set, setting, method) cell exists: the settings other than
    "split" need a public domain; "none" has no public seeds and no public radius for the
    noiseless ceiling."""
    if setting != "split" and ds not in DOMAINS:
        return False
    if method in _PRIVATE_SYNOPSES and ds not in DOMAINS:
        return False
    return not (setting == "none" and method in ("synopsis", "noiseless"))


def _grid(cfg: RealConfig, datasets: tuple[str, ...]) -> list[tuple]:
    keys = []
    for ds in datasets:
        for st_ in cfg.settings:
            for Q in cfg.workloads:
                for m in cfg.methods:
                    if not _applies(ds, st_, m):
                        continue
                    if _has_eps(m):
                        keys += [(ds, st_, int(Q), float(e), m) for e in cfg.epsilons]
                    else:
                        keys.append((ds, st_, int(Q), None, m))
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
    seed_labels: np.ndarray
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
        seeds=np.asarray(data.public[seeds]),
        seed_labels=np.asarray(data.public_labels[seeds]),
        pool=np.asarray(data.public[pool_idx]),
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
class _Public:
    """What one setting makes public (module docstring): rows (None: nothing), the
    per-query radius and horizon, the synopsis's seeds and cell radius, the memory of
    ``public_only``."""

    setting: str
    rows: np.ndarray | None
    radius: float | None
    steps: int
    centres: np.ndarray | None
    cell_radius: float | None
    public_mem: LSRMemory | None


def _public(cfg: RealConfig, prep: _Prepared, setting: str) -> _Public:
    """The public side of ``setting`` for a prepared data set."""
    if setting == "split":
        return _Public("split", prep.seeds, prep.radius, prep.steps, prep.centres,
                       prep.cell_radius, prep.public_mem)
    T = NEW_SETTING_STEPS
    if setting == "none":
        return _Public("none", None, None, T, None, None, None)
    S, lab = prep.seeds, prep.seed_labels
    if setting == "sample":
        P, PL = S[:SAMPLE_SIZE], lab[:SAMPLE_SIZE]
    else:  # "shifted": another class mix, half the classes missing
        keep = lab < SHIFT_CLASSES
        P, PL = S[keep], lab[keep]
    data, n = prep.data, prep.data.bank.shape[0]
    rng = np.random.default_rng(_ss(cfg.split_seed, _DS_CODE[data.name], 8,
                                    _SETTING_CODE[setting]))
    probe = corrupt(P, noise=cfg.noise * data.feature_scale, mask=cfg.mask, rng=rng)
    tg = 32.0 if cfg.target_gate is None else cfg.target_gate
    r = public_radius(P, n_bank=n, target_gate=tg, queries=probe)
    r_pub = public_radius(P, n_bank=P.shape[0], target_gate=min(tg, P.shape[0] - 1),
                          queries=probe)
    from sklearn.cluster import KMeans

    k = min(2 * int(np.unique(PL).size), P.shape[0] // 2)
    centres = KMeans(k, n_init=4, random_state=cfg.split_seed).fit(P).cluster_centers_
    return _Public(setting, P, r, T, np.asarray(centres, dtype=np.float64),
                   public_radius(P, n_bank=n, target_gate=32.0),
                   LSRMemory(P, radius=r_pub))


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


def _per_query(cfg, prep, pub: _Public, qs: _Queries, Q, eps_total, method, rep,
               scale_cache) -> dict:
    rel, acct = PER_QUERY[method]
    q_all = qs.q[rep]
    y = np.empty_like(q_all)
    eps_used, spent, refused = [], [], 0
    eps_global = None
    code = _SETTING_CODE[pub.setting]
    extra = () if code == 0 else (code,)  # "split" draws what it always drew
    budget, radius, info = (eps_total, cfg.delta), pub.radius, {}
    if pub.setting == "none":  # the radius is a private choice, paid from the budget
        s_ = _scale(cfg, prep, eps_total, rep, scale_cache)
        radius = s_["radius"]
        budget = ((1.0 - NONE_SCALE_SHARE) * eps_total, cfg.delta / 2)
        info = {"radius": radius, "scale_epsilon": s_["spent"]}
    mem = prep.mem if pub.setting == "split" else LSRMemory(prep.data.bank, radius=radius)
    for w in range(qs.W):
        q = q_all[w * Q:(w + 1) * Q]
        pm = PrivateMemory(mem, budget=budget, accounting=acct)
        if acct == "global" and eps_global is not None:
            eps_q = eps_global  # a fresh global budget prices Q queries wherever they are
        elif acct == "global" and rel == "brace" and pub.setting != "split":
            # the global price of a brace release, directly (recommend prices "brace")
            eps_q = float(pm.recommend(Q, steps=pub.steps).per_query_epsilon) * (1 - 2e-3)
            eps_global = eps_q
        else:
            eps_q = float(pm.affordable_epsilon(q, steps=pub.steps, method=rel))
            eps_global = eps_q if acct == "global" else None
        eps_used.append(eps_q)
        if eps_q > 0:
            seed = _ss(cfg.seed, _DS_CODE[prep.data.name], Q, _milli(eps_total), rep,
                       _METHOD_CODE[method], w, *extra)
            y[w * Q:(w + 1) * Q] = pm.retrieve(q, steps=pub.steps, epsilon=eps_q,
                                               method=rel, seed=seed).final
        else:
            y[w * Q:(w + 1) * Q] = q  # nothing released: the (public) query itself
            refused += Q
        spent.append(float(pm.spent) + info.get("scale_epsilon", 0.0))
    return {"y": y, "epsilon_per_query": float(np.mean(eps_used)),
            "epsilon_spent": float(np.mean(spent)), "refused": refused,
            "accounting": acct, "release_method": rel, **info}


def _scale(cfg, prep, eps_total, rep, cache) -> dict:
    """Setting "none": the per-query radius, the private scale of a synopsis without
    seeds at ``(NONE_SCALE_SHARE·ε, δ/2)`` (one draw per (ε, repetition), reused by the
    workloads of that repetition: each workload's budget pays for its own draw)."""
    key = ("scale", prep.data.name, float(eps_total), rep)
    if key not in cache:
        lo, hi = DOMAINS[prep.data.name]
        pm = PrivateMemory(prep.data.bank, radius=1.0,
                           budget=(NONE_SCALE_SHARE * eps_total, cfg.delta / 2),
                           accounting="global")
        seed = _ss(cfg.seed, _DS_CODE[prep.data.name], 0, _milli(eps_total), rep, 99)
        syn = pm.snapshot(bounds=(lo, hi), seed=seed)
        cache[key] = {"radius": float(syn.params["scale"]), "spent": float(pm.spent)}
    return cache[key]


def _synopsis(cfg, prep, pub: _Public, eps_total, rep, cache, private=False,
              project=None) -> dict:
    setting = ("any" if project is None else "any-pca") if private else pub.setting
    key = (prep.data.name, setting, float(eps_total), rep)
    if key not in cache:
        t0 = time.perf_counter()
        pm = PrivateMemory(prep.mem, budget=(eps_total, cfg.delta), accounting="global")
        code = 0 if private else _SETTING_CODE[pub.setting]
        name = ("synopsis" if not private else "synopsis_private" if project is None
                else "synopsis_private_pca")
        seed = _ss(cfg.seed, _DS_CODE[prep.data.name], 0, _milli(eps_total), rep,
                   _METHOD_CODE[name], *(() if code == 0 else (code,)))
        if private:  # no public data: seeds found inside the public domain
            syn = pm.snapshot(bounds=DOMAINS[prep.data.name], epsilon=None, seed=seed,
                              project=project)
        else:
            # cell rounds from the public centres (no trajectories), cells of the clean
            # public radius, a centre without enough noisy mass kept where it is
            syn = pm.snapshot(pub.centres, epsilon=None, seed=seed,
                              cell_radius=pub.cell_radius,
                              merge_radius=pub.cell_radius / 2, keep_seeds=True)
        cache[key] = {"syn": syn, "spent": float(pm.spent),
                      "build_s": time.perf_counter() - t0,
                      "n_attractors": int(np.asarray(syn.attractors).shape[0]),
                      "k": (syn.params["project"]["k"] if project is not None else None)}
    return cache[key]


def _best_floor(prep, pub: _Public, q: np.ndarray, labels: np.ndarray
                ) -> tuple[np.ndarray, float]:
    """The public-only completion over the setting's public rows at the gate size (of
    :data:`GATES`) that scores best on the queries themselves: an oracle choice in the
    floor's favour (so a private method that beats it beats any gate size)."""
    P = pub.rows
    best: tuple[float, np.ndarray | None, float] = (-1.0, None, 0.0)
    for tg in GATES:
        r = public_radius(P, n_bank=P.shape[0], target_gate=min(tg, P.shape[0] - 1),
                          queries=q)
        y = LSRMemory(P, radius=r).retrieve(q, pub.steps)[:, -1]
        a = float(np.mean(_nearest_labels(y, prep.data.bank, prep.data.bank_labels)
                          == labels))
        if a > best[0]:
            best = (a, y, tg)
    return best[1], best[2]


def _cell(cfg, prep, pub: _Public, qs: _Queries, Q, eps, method, syn_cache,
          common) -> dict:
    t0 = time.perf_counter()
    accs, mses, extra = [], [], {}
    per_rep: list[dict] = []
    for rep in range(cfg.repetitions):
        q, labels, z = qs.q[rep], qs.labels[rep], qs.z[rep]
        info: dict[str, Any] = {}
        if method == "noiseless":
            y = z if pub.setting == "split" else LSRMemory(
                prep.data.bank, radius=pub.radius).retrieve(q, pub.steps)[:, -1]
            info["query_accuracy"] = _score(prep, q, labels, z)[0]
        elif method == "public_only":
            if pub.public_mem is None:
                y = q  # "none": nothing public, nothing released: the query itself
            elif pub.setting == "split":
                y = pub.public_mem.retrieve(q, pub.steps)[:, -1]
            else:  # the floor at its best gate size on these very queries (favours it)
                y, info["floor_gate"] = _best_floor(prep, pub, q, labels)
        elif method in ("synopsis", *_PRIVATE_SYNOPSES):
            s_ = _synopsis(cfg, prep, pub, eps, rep, syn_cache,
                           private=method in _PRIVATE_SYNOPSES,
                           project="auto" if method == "synopsis_private_pca" else None)
            y = np.asarray(s_["syn"].complete(q))
            info = {"epsilon_spent": s_["spent"], "build_s": s_["build_s"],
                    "n_attractors": s_["n_attractors"]}
            if s_["k"] is not None:
                info["projected_dim"] = s_["k"]
        else:
            r = _per_query(cfg, prep, pub, qs, Q, eps, method, rep, syn_cache)
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
    elif method in ("synopsis", *_PRIVATE_SYNOPSES):
        extra = {"epsilon_per_query": None,
                 "epsilon_spent": float(np.mean([p["epsilon_spent"] for p in per_rep])),
                 "n_attractors": float(np.mean([p["n_attractors"] for p in per_rep])),
                 "accounting": "global"}
        if method == "synopsis_private_pca":
            extra["projected_dim"] = float(np.mean([p["projected_dim"] for p in per_rep]))
        if method == "synopsis":
            extra.update(n_seeds=int(pub.centres.shape[0]), cell_radius=pub.cell_radius)
    elif method == "noiseless":
        extra = {"query_accuracy": _stats([p["query_accuracy"] for p in per_rep])}
    return {
        **common,
        "dataset": prep.data.name, "setting": pub.setting, "n_queries": int(Q),
        "epsilon_total": eps, "method": method, "label": LABELS[method],
        "private": method not in ("noiseless", "public_only"),
        "workloads_scored": qs.W, "queries_scored": qs.W * int(Q),
        "radius": pub.radius, "steps": pub.steps, "target_gate": prep.target_gate,
        "n_public": None if pub.rows is None else int(pub.rows.shape[0]),
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
            pubs: dict[str, _Public] = {}
            for Q in cfg.workloads:
                cells = [k for k in todo if k[0] == name and k[2] == int(Q)]
                if not cells:
                    continue
                if name not in prepared:
                    prepared[name] = _prepare(cfg, loaded[name])
                prep = prepared[name]
                qs = _queries(cfg, prep, int(Q))
                for _, setting, _, eps, method in cells:
                    if setting not in pubs:
                        pubs[setting] = _public(cfg, prep, setting)
                    rec = _cell(cfg, prep, pubs[setting], qs, int(Q), eps, method,
                                syn_cache, common)
                    append_jsonl(results_path, [rec])  # atomic: a finished cell survives
                    n_new += 1
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(data=name, setting=setting, Q=Q, eps=eps,
                                        method=method)
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
    _settings_figure(cfg, summary, out_dir)
    atomic_write_text(out_dir / "table.txt", text + "\n")
    write_json(out_dir / "summary.json", summary)
    print(f"wrote {out_dir}/results.jsonl ({len(records)} cells, {n_new} new), "
          "summary.json, table.txt, accuracy.png, mse.png")
    return summary


def _cells_summary(records: list[dict]) -> list[dict]:
    keep = ("dataset", "setting", "n_queries", "epsilon_total", "method", "label",
            "private", "accuracy", "mse", "epsilon_per_query", "epsilon_spent",
            "refused_fraction", "queries_scored", "wall_time_s", "query_accuracy",
            "n_attractors", "n_public", "projected_dim")
    out = [{k: r[k] for k in keep if k in r} for r in records]
    for c, r in zip(out, records, strict=True):
        c.setdefault("setting", "split")
        c["accuracy_sd"] = float(np.std([p["accuracy"] for p in r["repetitions"]]))
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(out, key=lambda c: (NAMES.index(c["dataset"]), SETTINGS.index(
        c["setting"]), c["n_queries"], order[c["method"]], c["epsilon_total"] or 0.0))


# --------------------------------------------------------------------------- table


def format_table(summary: dict, cfg: RealConfig) -> str:
    """Markdown: accuracy (MSE) per (dataset, Q, method) row and ε_total column."""
    every = summary["cells"]
    cells = [c for c in every if c.get("setting", "split") == "split"]
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
    other = [c for c in every if c.get("setting", "split") != "split"]
    if other:
        lines += ["", settings_table(other, eps), "", beats_floor_table(every, eps)]
    return "\n".join(lines)


def settings_table(cells: list[dict], eps: list[float]) -> str:
    """Markdown: label accuracy ± its sd over repetitions, per (data set, setting, Q,
    method) row and ε_total column (the settings other than "split")."""
    idx = {(c["dataset"], c["setting"], c["n_queries"], c["epsilon_total"], c["method"]): c
           for c in cells}
    lines = ["Public-data settings (none / sample of 50 rows / shifted: classes 0-4 "
             "only): label accuracy ± sd over repetitions",
             "",
             "| data | setting | Q | method | " + " | ".join(f"ε={e:g}" for e in eps) + " |",
             "|---|---|---:|---|" + "---:|" * len(eps)]
    keys = sorted({(c["dataset"], c["setting"], c["n_queries"]) for c in cells},
                  key=lambda k: (NAMES.index(k[0]), SETTINGS.index(k[1]), k[2]))
    for ds, st_, Q in keys:
        for m in METHODS:
            if _has_eps(m):
                row = [idx.get((ds, st_, Q, e, m)) for e in eps]
            else:
                row = [idx.get((ds, st_, Q, None, m))] * len(eps)
            if not any(row):
                continue
            txt = ["" if c is None else f"{c['accuracy']['mean']:.3f} ± "
                   f"{c.get('accuracy_sd', 0.0):.3f}" for c in row]
            label = "releases nothing (the query)" if (m, st_) == ("public_only", "none") \
                else LABELS[m]
            lines.append(f"| {ds} | {st_} | {Q} | {label} | " + " | ".join(txt) + " |")
    return "\n".join(lines)


def beats_floor(priv: dict, floor: dict) -> bool:
    """The private method beats the public-only floor by more than its run-to-run
    spread: the difference of the means exceeds the larger of the two standard
    deviations over repetitions."""
    gap = priv["accuracy"]["mean"] - floor["accuracy"]["mean"]
    return gap > max(priv.get("accuracy_sd", 0.0), floor.get("accuracy_sd", 0.0))


def beats_floor_table(cells: list[dict], eps: list[float]) -> str:
    """Per data set and setting with public data: in how many (Q, ε ≥ 1) cells each
    synopsis beats ``public_only`` by more than the spread (:func:`beats_floor`)."""
    idx = {(c["dataset"], c.get("setting", "split"), c["n_queries"], c["epsilon_total"],
            c["method"]): c for c in cells}
    lines = ["Private beats public-only (ε ≥ 1): cells where the synopsis's mean accuracy "
             "exceeds public_only's by more than the larger sd over repetitions",
             "", "| data | setting | synopsis, no public data | synopsis, no public data, "
             "private PCA | synopsis, public seeds |",
             "|---|---|---:|---:|---:|"]
    groups = sorted({(c["dataset"], c.get("setting", "split")) for c in cells
                     if c.get("setting", "split") != "none"},
                    key=lambda k: (NAMES.index(k[0]), SETTINGS.index(k[1])))
    for ds, st_ in groups:
        out = []
        for m in ("synopsis_private", "synopsis_private_pca", "synopsis"):
            won = tot = 0
            for (d_, s_, Q, e, m_), c in idx.items():
                if (d_, s_, m_) != (ds, st_, m) or e is None or e < 1.0:
                    continue
                fl = idx.get((ds, st_, Q, None, "public_only"))
                if fl is None:
                    continue
                tot += 1
                won += beats_floor(c, fl)
            out.append(f"{won}/{tot}" if tot else "—")
        lines.append(f"| {ds} | {st_} | " + " | ".join(out) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures

_COLOR = {"brace_global": "tab:blue", "brace_local": "tab:purple",
          "global_noise": "tab:green", "synopsis": "tab:orange",
          "synopsis_private": "tab:red", "synopsis_private_pca": "tab:brown"}


def _figures(cfg: RealConfig, summary: dict, out_dir: Path) -> None:
    """``accuracy.png`` and ``mse.png``: against ε_total (log x), one panel per data set,
    one line per (method, Q) (the synopsis once, at the largest Q: its cost does not
    depend on Q); noiseless dashed, public-only dotted."""
    plt = pyplot()
    cells = [c for c in summary["cells"] if c.get("setting", "split") == "split"]
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
            for m in ("brace_global", "brace_local", "global_noise", "synopsis",
                      *_PRIVATE_SYNOPSES):
                for Q in (Qs if not m.startswith("synopsis") else Qs[-1:]):
                    pts = sorted((c["epsilon_total"], c[field]["mean"]) for c in mine
                                 if c["method"] == m and c["n_queries"] == Q)
                    if not pts:
                        continue
                    x, y = zip(*pts, strict=True)
                    lab = (f"{LABELS[m]}, Q={Q}" if not m.startswith("synopsis")
                           else f"{LABELS[m]} (any Q)")
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


def _settings_figure(cfg: RealConfig, summary: dict, out_dir: Path) -> None:
    """``settings.png`` (when a setting other than "split" ran): label accuracy against
    ε_total, one row of panels per data set, one panel per setting; the two synopses,
    per-query BRACE at the largest Q, and public_only (dotted; in "none": the query)."""
    cells = summary["cells"]
    keys = sorted({(c["dataset"], c["setting"]) for c in cells},
                  key=lambda k: (NAMES.index(k[0]), SETTINGS.index(k[1])))
    if not any(st_ != "split" for _, st_ in keys):
        return
    plt = pyplot()
    names = sorted({k[0] for k in keys}, key=NAMES.index)
    sets = [st_ for st_ in SETTINGS if any(k[1] == st_ for k in keys)]
    fig, axes = plt.subplots(len(names), len(sets), figsize=(3.4 * len(sets),
                                                             2.9 * len(names)),
                             squeeze=False, sharey="row")
    for i, ds in enumerate(names):
        for j, st_ in enumerate(sets):
            ax = axes[i, j]
            mine = [c for c in cells if c["dataset"] == ds and c["setting"] == st_]
            Qmax = max((c["n_queries"] for c in mine), default=None)
            for m in (*_PRIVATE_SYNOPSES, "synopsis", "brace_global"):
                pts = sorted((c["epsilon_total"], c["accuracy"]["mean"]) for c in mine
                             if c["method"] == m and c["n_queries"] == Qmax)
                if pts:
                    x, y = zip(*pts, strict=True)
                    lab = LABELS[m] + (f", Q={Qmax}" if m == "brace_global" else "")
                    ax.plot(x, y, color=_COLOR[m], marker="o", ms=3, lw=1.3, label=lab)
            fl = [c["accuracy"]["mean"] for c in mine if c["method"] == "public_only"]
            if fl:
                ax.axhline(float(np.mean(fl)), color="k", ls=":", lw=1.2,
                           label="public only" if st_ != "none" else "the query itself")
            ax.set_xscale("log")
            ax.minorticks_off()
            ticks = sorted(float(e) for e in cfg.epsilons)
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{e:g}" for e in ticks], fontsize=7)
            ax.set_title(f"{ds}, {st_}", fontsize=9)
            ax.grid(True, alpha=0.3)
            if i == len(names) - 1:
                ax.set_xlabel(f"total ε (δ = {cfg.delta:g})")
            if j == 0:
                ax.set_ylabel("label accuracy")
            ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    save_figure(fig, out_dir / "settings.png")
