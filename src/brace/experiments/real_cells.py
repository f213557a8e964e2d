"""One cell of the real-data experiment (:mod:`brace.experiments.real`): the public
preparation of a data set (pools, radii, horizon and gate size chosen on public data),
the public data of each setting, the corrupted queries, and each method's releases and
scores."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import LSRMemory, PrivateMemory
from ._common import (
    mean_ci95,
)
from .real_config import (
    _DS_CODE,
    _METHOD_CODE,
    _PRIVATE_SYNOPSES,
    _SETTING_CODE,
    GATES,
    HORIZONS,
    LABELS,
    NEW_SETTING_STEPS,
    NONE_SCALE_SHARE,
    PER_QUERY,
    SAMPLE_SIZE,
    SHIFT_CLASSES,
    RealConfig,
    _milli,
    _ss,
)
from .real_data import DOMAINS, RealData, corrupt, public_radius


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
