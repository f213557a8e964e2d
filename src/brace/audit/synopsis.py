"""The audit report's synopsis rows: one cell round (``docs/privacy-accounting.md`` §14,
Lemma 9) run by the library's own release, :func:`brace.synopsis.release_cell_round`,
one Voronoi round of a synopsis without seeds (§15, Lemma 11) run by
:func:`brace.seeding.release_voronoi_round` (:func:`voronoi_row`), and the second-moment
release of a projected snapshot (§15.1, Lemma 14) run by
:func:`brace.projection.release_moments` (:func:`moments_row`), and the pair release of
§15.2 (Lemma 16) run by :func:`brace.seeding.release_pairs` (:func:`pairs_row`).

Pair: the report's d = 2 bank and its public query ``q`` as the only centre (a public
seed); the memory of ``q``'s one-memory gate, near its boundary, is replaced by the point
diametrically opposite on the gate's sphere — the same cell, the largest change of the
offset sum (about ``2r``, the bound of Lemma 9). Statistic: the exact log-likelihood
ratio of the released vector, linear in it (the release is Gaussian with a public
``σ``); a threshold chosen on pilot runs, fresh runs counted, Clopper–Pearson bounds
(Bonferroni over the two error rates), ``ε_lb`` against the round's claimed ε.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..accounting import calibrate_rho
from ..seeding import parse_domain, release_voronoi_round, voronoi_stats, voronoi_unit
from ..synopsis import cell_sums, release_cell_round
from .stats import certify_thresholds, max_certifiable_epsilon

__all__ = ["moments_row", "pairs_row", "synopsis_row", "voronoi_row"]


def synopsis_row(X: np.ndarray, q: np.ndarray, *, epsilon: float, delta: float,
                 radius: float, n_runs: int, alpha: float, seed: int) -> dict[str, Any]:
    """The report row of a cell round calibrated to ``epsilon`` at ``delta``."""
    t0 = time.perf_counter()
    C = np.asarray(q, dtype=np.float64).reshape(1, -1)
    dist = np.linalg.norm(X - C[0], axis=1)
    row = int(np.flatnonzero(dist <= radius)[0])
    Xp = X.copy()
    Xp[row] = C[0] - (X[row] - C[0]) * (radius / dist[row])  # opposite, on the sphere
    rho = calibrate_rho(epsilon, delta, 1)  # one GaussianStep spending (ε, δ) by RDP
    claim = float(epsilon)

    def means(bank: np.ndarray) -> np.ndarray:
        cnt, sums, unit = cell_sums(bank, C, radius)
        return np.concatenate([sums * unit, radius * cnt[:, None]], axis=1).ravel()

    _, sigma = release_cell_round(X, C, radius, rho, np.random.default_rng(0))
    w = (means(Xp) - means(X)) / sigma**2  # the log-likelihood ratio is w·V + const

    def stats(bank: np.ndarray, n: int, s: int) -> np.ndarray:
        rng = np.random.default_rng([seed, s])
        out = np.empty(n)
        for i in range(0, n, 10_000):  # the library's release, in batches of runs
            m = min(10_000, n - i)
            reps = [release_cell_round(bank, C, radius, rho, rng)[0].ravel()
                    for _ in range(m)]
            out[i:i + m] = np.asarray(reps) @ w
        return out

    return _certified_row(
        stats, X, Xp, n_runs=n_runs, alpha=alpha, delta=delta, claim=claim, t0=t0,
        label="synopsis cell round (Gaussian over disjoint cells)",
        config={"pair": "cell", "epsilon": epsilon, "rho": rho, "radius": radius},
        pair={"kind": "opposite", "centre": [float(v) for v in C[0]],
              "gate_q": [int((dist <= radius).sum()),
                         int((np.linalg.norm(Xp - C[0], axis=1) <= radius).sum())],
              "row": row, "old": X[row].tolist(), "new": Xp[row].tolist()},
        sigma=sigma)


def voronoi_row(X: np.ndarray, q: np.ndarray, *, epsilon: float, delta: float,
                radius: float, n_runs: int, alpha: float, seed: int) -> dict[str, Any]:
    """The report row of a Voronoi round (a synopsis without seeds) calibrated to
    ``epsilon`` at ``delta``: the public query ``q`` is the only centre, so every row of
    the bank is in its cell; the clip is ``radius``; the domain is a public ball around
    ``q`` holding the bank. Pair: the row farthest from ``q`` (its offset clipped to
    ``radius``) replaced by its mirror image through ``q`` — the same cell, the clipped
    offset reversed: the largest change of the offset sum (``2·radius``, Lemma 11).
    Statistic and certification as :func:`synopsis_row`."""
    t0 = time.perf_counter()
    C = np.asarray(q, dtype=np.float64).reshape(1, -1)
    dist = np.linalg.norm(X - C[0], axis=1)
    row = int(np.argmax(dist))
    Xp = X.copy()
    Xp[row] = C[0] - (X[row] - C[0]) * max(1.0, radius / max(dist[row], 1e-300))
    domain = parse_domain(None, (C[0], 4.0 * (float(dist.max()) + radius)), C.shape[1])
    rho = calibrate_rho(epsilon, delta, 1)
    claim = float(epsilon)
    n = X.shape[0]

    def means(bank: np.ndarray) -> np.ndarray:
        unit = voronoi_unit(radius, n, rho)
        cnt, sums = voronoi_stats(bank, C, radius, unit, domain)
        return np.concatenate([sums * unit, radius * cnt[:, None]], axis=1).ravel()

    _, sigma, _ = release_voronoi_round(X, C, radius, rho, domain, "plain",
                                        np.random.default_rng(0))
    w = (means(Xp) - means(X)) / sigma**2

    def stats(bank: np.ndarray, m_runs: int, s: int) -> np.ndarray:
        rng = np.random.default_rng([seed, 100 + s])
        out = np.empty(m_runs)
        for i in range(0, m_runs, 10_000):
            m = min(10_000, m_runs - i)
            reps = [release_voronoi_round(bank, C, radius, rho, domain, "plain", rng)[0]
                    .ravel() for _ in range(m)]
            out[i:i + m] = np.asarray(reps) @ w
        return out

    return _certified_row(
        stats, X, Xp, n_runs=n_runs, alpha=alpha, delta=delta, claim=claim, t0=t0,
        label="synopsis Voronoi round (no public seeds)",
        config={"pair": "voronoi", "epsilon": epsilon, "rho": rho, "radius": radius},
        pair={"kind": "mirror", "centre": [float(v) for v in C[0]], "gate_q": [n, n],
              "row": row, "old": X[row].tolist(), "new": Xp[row].tolist()},
        sigma=sigma)


def pairs_row(X: np.ndarray, q: np.ndarray, *, epsilon: float, delta: float,
              radius: float, n_runs: int, alpha: float, seed: int) -> dict[str, Any]:
    """The report row of a pair release (§15.2, Lemma 16) calibrated to ``epsilon`` at
    ``delta``: three public centres ``q``, ``q + r·e₁``, ``q + r·e₂``, the domain a
    public ball around ``q`` holding the bank. Pair: a row placed near the bisector of
    the first two centres (it counts for the pair {0, 1}) replaced by its mirror near
    the bisector of the first and the third (it counts for {0, 2}): one unit out of one
    entry and into another, the largest change (``√2``). Certification as
    :func:`synopsis_row`."""
    from ..seeding import pair_histogram, release_pairs

    t0 = time.perf_counter()
    c = np.asarray(q, dtype=np.float64).reshape(-1)
    d = c.shape[0]
    e1, e2 = np.eye(d)[0], np.eye(d)[1]
    C = np.stack([c, c + radius * e1, c + radius * e2])
    X = X.copy()
    X[0] = c + radius * (0.45 * e1 + 0.1 * e2)  # nearest c0, then c1, t = 0.45
    Xp = X.copy()
    Xp[0] = c + radius * (0.1 * e1 + 0.45 * e2)  # nearest c0, then c2, t = 0.45
    dist = np.linalg.norm(X - c, axis=1)
    domain = parse_domain(None, (c, 4.0 * (float(dist.max()) + radius)), d)
    rho = calibrate_rho(epsilon, delta, 1)
    claim = float(epsilon)

    def means(bank: np.ndarray) -> np.ndarray:
        return pair_histogram(bank, C, domain).astype(np.float64)

    _, sigma = release_pairs(X, C, rho, domain, "plain", np.random.default_rng(0))
    w = (means(Xp) - means(X)) / sigma**2

    def stats(bank: np.ndarray, m_runs: int, s: int) -> np.ndarray:
        rng = np.random.default_rng([seed, 300 + s])
        reps = [release_pairs(bank, C, rho, domain, "plain", rng)[0] for _ in range(m_runs)]
        return np.asarray(reps) @ w

    return _certified_row(
        stats, X, Xp, n_runs=n_runs, alpha=alpha, delta=delta, claim=claim, t0=t0,
        label="synopsis pair release (no public seeds)",
        config={"pair": "pairs", "epsilon": epsilon, "rho": rho, "radius": radius},
        pair={"kind": "bisector-swap", "centre": [float(v) for v in c],
              "gate_q": [int(X.shape[0])] * 2, "row": 0, "old": X[0].tolist(),
              "new": Xp[0].tolist()},
        sigma=sigma)


def _certified_row(stats: Any, X: np.ndarray, Xp: np.ndarray, *, n_runs: int,
                   alpha: float, delta: float, claim: float, t0: float, label: str,
                   config: dict[str, Any], pair: dict[str, Any], sigma: float
                   ) -> dict[str, Any]:
    """A threshold on the statistic chosen on pilot runs of both banks, fresh runs
    counted, Clopper–Pearson bounds (Bonferroni over the two error rates): the row."""
    pilot = max(1_000, n_runs // 4)
    s0, s1 = stats(X, pilot, 1), stats(Xp, pilot, 2)
    grid = np.quantile(np.concatenate([s0, s1]), np.linspace(0.02, 0.98, 49))
    best = certify_thresholds(s0, s1, grid, delta=delta, alpha=alpha, n_bounds=2)
    tau = float(grid[int(np.argmax(best["epsilon_lb"]))])
    f0, f1 = stats(X, n_runs, 3), stats(Xp, n_runs, 4)
    cert = certify_thresholds(f0, f1, [tau], delta=delta, alpha=alpha, n_bounds=2)
    eps_lb = float(cert["epsilon_lb"][0])
    cap = max_certifiable_epsilon(n_runs, alpha, 2, delta)
    return {
        "label": label, "config": config,
        "claimed_epsilon": claim, "charged_epsilon": claim, "delta": delta,
        "epsilon_lb": eps_lb, "exceeds_claim": eps_lb > claim,
        "verdict": "VIOLATION" if eps_lb > claim else "pass",
        "max_certifiable_epsilon": cap, "underpowered": False, "runs_needed": None,
        "pair": pair, "n_runs_per_side": int(n_runs), "n_pilot_per_side": int(pilot),
        "threshold": tau, "sigma": sigma, "alpha": alpha,
        "d": int(X.shape[1]), "n": int(X.shape[0]), "steps": 1,
        "wall_time_s": time.perf_counter() - t0,
    }


def moments_row(X: np.ndarray, q: np.ndarray, *, epsilon: float, delta: float,
                radius: float, n_runs: int, alpha: float, seed: int) -> dict[str, Any]:
    """The report row of a second-moment release (a projected snapshot, §15.1)
    calibrated to ``epsilon`` at ``delta``: the public query ``q`` is the mean the
    offsets are taken from, the clip is ``radius``, the domain a public ball around ``q``
    holding the bank. Pair: the row farthest from ``q`` (its offset clipped to
    ``radius``) replaced by that offset turned a right angle in the first two
    coordinates — ``uuᵀ`` becomes ``u'u'ᵀ`` with ``u' ⊥ u`` of the same norm: the
    largest change (``½‖Δ‖_F² = ‖u‖⁴``, Lemma 14). The release is Gaussian with public
    variances per entry, so the log-likelihood ratio is linear in it; certification as
    :func:`synopsis_row`."""
    from .. import projection as pj

    t0 = time.perf_counter()
    c = np.asarray(q, dtype=np.float64).reshape(-1)
    dist = np.linalg.norm(X - c, axis=1)
    row = int(np.argmax(dist))
    off = (X[row] - c) * max(1.0, radius / max(dist[row], 1e-300))
    turned = off.copy()
    turned[0], turned[1] = -off[1], off[0]
    Xp = X.copy()
    Xp[row] = c + turned
    domain = parse_domain(None, (c, 4.0 * (float(dist.max()) + radius)), c.shape[0])
    rho = calibrate_rho(epsilon, delta, 1)
    claim = float(epsilon)
    n, d = X.shape
    iu = np.triu_indices(d, 1)

    def entries(S: np.ndarray) -> np.ndarray:
        return np.concatenate([S[iu], np.diagonal(S)])

    bits = pj.moments_bits(n, rho)
    g2 = (radius * 2.0 ** -bits) ** 2

    def means(bank: np.ndarray) -> np.ndarray:
        return entries(pj.moments_stat(bank, domain, c, radius, bits).astype(np.float64))

    _, info = pj.release_moments(X, domain, c, radius, rho, "plain",
                                 np.random.default_rng(0), n)
    var = np.concatenate([np.full(iu[0].size, info["sigma"] ** 2),
                          np.full(d, info["sigma_diag"] ** 2)])
    w = (means(Xp) - means(X)) / var  # grid units

    def stats(bank: np.ndarray, m_runs: int, s: int) -> np.ndarray:
        rng = np.random.default_rng([seed, 200 + s])
        out = np.empty(m_runs)
        for i in range(0, m_runs, 10_000):
            m = min(10_000, m_runs - i)
            reps = [entries(pj.release_moments(bank, domain, c, radius, rho, "plain",
                                               rng, n)[0]) / g2 for _ in range(m)]
            out[i:i + m] = np.asarray(reps) @ w
        return out

    return _certified_row(
        stats, X, Xp, n_runs=n_runs, alpha=alpha, delta=delta, claim=claim, t0=t0,
        label="synopsis second moments (private subspace)",
        config={"pair": "moments", "epsilon": epsilon, "rho": rho, "radius": radius},
        pair={"kind": "turned", "centre": [float(v) for v in c], "gate_q": [n, n],
              "row": row, "old": X[row].tolist(), "new": Xp[row].tolist()},
        sigma=info["sigma"])
