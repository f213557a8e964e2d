"""Candidate neighbouring banks: boundary flips, duplicates, smooth-bound movers, outliers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import check_bank, check_int_at_least, check_rng
from ..mechanisms import certificate
from ..memory import LSRMemory
from .config import AuditConfig, _single_query
from .density import _setup
from .result import Pair

__all__ = ["candidate_pairs"]

_REL_BOUNDARY = 1e-6  # relative offset of "just inside/outside the boundary" candidates


def candidate_pairs(
    bank: Any,
    query: Any,
    config: AuditConfig,
    *,
    released: Any = None,
    rng: Any = None,
) -> list[Pair]:
    """Replacements worth auditing (``config.max_candidates`` at most, deduplicated).

    Around each centre — ``q``, the clean states ``z_1..z_{T-1}`` (and ``z_T`` for the
    endpoint method) and the released states in ``released`` (array (k, d)):

    * ``boundary-out``: a gate member moved just outside the boundary (distance
      ``r(1 + 1e-6)``, same direction) — the gate count drops by one;
    * ``boundary-in``: the nearest non-member moved just inside — the count grows;
    * ``antipodal``: a member moved to the opposite side of the ball — the largest
      shift of the gate mean at a fixed count;
    * ``duplicate``: the farthest row replaced by a copy of the nearest member;
    * ``far``: the nearest member sent ``10³ r`` away, and ``(2T + 3) r`` away.

    Plus ``smooth-bound``: from random replacements inside ``B̄(q, (T+1) r)``, those that
    change the noise scale (``Δ̄_t`` for BRACE) or the pre-noise point the most along
    the clean history, measured by the symmetric KL divergence of the step Gaussians;
    and (BRACE) ``scale-ratio``: the replacements that maximise the noise-scale ratio
    ``max_t |log Δ̄_t(D')/Δ̄_t(D)|`` along the clean history, searched over rows moved
    exactly onto (and within 1e-15 of) the gate radius around ``q`` and each clean state —
    the pairs that break a certificate's smoothness (``docs/privacy.md`` §1).
    """
    cfg = config.validated()
    X = check_bank(bank)
    q = _single_query(query, X.shape[1])[0]
    gen = check_rng(rng)
    r = cfg.radius
    T = cfg.steps
    mem = LSRMemory(X, radius=r)
    clean = mem.retrieve(q[None], T)[0]  # z_0..z_T
    centres: list[tuple[str, np.ndarray]] = [("q", q)]
    last = T + 1 if cfg.method == "endpoint" else T
    centres += [(f"z_{t}", clean[t]) for t in range(1, last)]
    if released is not None:
        rel = np.asarray(released, dtype=np.float64).reshape(-1, X.shape[1])
        centres += [(f"Y (pilot release {i})", c) for i, c in enumerate(rel)]
    cands: list[tuple[int, np.ndarray, str, str]] = []
    for label, c in centres:
        cands += _boundary_candidates(X, c, r, T, label, gen)
    if cfg.method != "endpoint" and cfg.release == "smooth":
        cands += _smooth_bound_candidates(X, q, clean, cfg, gen)
    if cfg.method == "brace" and cfg.release == "smooth":
        cands += _scale_ratio_candidates(X, q, clean, cfg, gen)
    pairs: list[Pair] = []
    seen: set = set()
    gate_d = int((np.sum((X - q) ** 2, axis=1) <= r * r).sum())
    for row, val, kind, label in cands:
        if not np.all(np.isfinite(val)) or np.array_equal(val, X[row]):
            continue
        key = (row, tuple(np.round(val, 12)))
        if key in seen:
            continue
        seen.add(key)
        Xp = X.copy()
        Xp[row] = val
        gate_p = int((np.sum((Xp - q) ** 2, axis=1) <= r * r).sum())
        pairs.append(Pair(int(row), tuple(map(float, X[row])), tuple(map(float, val)),
                          kind, label, (gate_d, gate_p)))
    if len(pairs) > cfg.max_candidates:  # keep the first per kind, then a random subset
        keep, rest = [], []
        kinds_seen: set = set()
        for p in pairs:
            (rest if p.kind in kinds_seen else keep).append(p)
            kinds_seen.add(p.kind)
        extra = cfg.max_candidates - len(keep)
        if extra > 0:
            idx = np.sort(gen.choice(len(rest), extra, replace=False))
            keep += [rest[i] for i in idx]
        pairs = keep[: cfg.max_candidates]
    return pairs


def _unit(v: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    nv = float(np.linalg.norm(v))
    if nv > 0 and math.isfinite(nv):
        return v / nv
    u = gen.standard_normal(v.shape)
    return u / np.linalg.norm(u)


def _boundary_candidates(X, c, r, T, label, gen):
    dist = np.sqrt(np.sum((X - c) ** 2, axis=1))
    inside = np.flatnonzero(dist <= r)
    outside = np.flatnonzero(dist > r)
    out: list[tuple[int, np.ndarray, str, str]] = []
    if inside.size:
        by_dist = inside[np.argsort(dist[inside], kind="stable")]
        members = list(dict.fromkeys([by_dist[-1], by_dist[0], by_dist[len(by_dist) // 2]]))
        for i in members:
            u = _unit(X[i] - c, gen)
            out.append((i, c + r * (1 + _REL_BOUNDARY) * u, "boundary-out", label))
            out.append((i, c - r * (1 - _REL_BOUNDARY) * u, "antipodal", label))
        near = by_dist[0]
        u = _unit(X[near] - c, gen)
        out.append((near, c + 1e3 * r * u, "far", label))
        out.append((near, c + (2 * T + 3) * r * u, "far", label))
        far_row = int(np.argmax(dist))
        if far_row != near:
            out.append((far_row, X[near].copy(), "duplicate", label))
        edge = by_dist[-1]
        if far_row != edge:
            out.append((far_row, X[edge].copy(), "duplicate", label))
    if outside.size:
        by_dist = outside[np.argsort(dist[outside], kind="stable")]
        for j in by_dist[:2]:
            u = _unit(X[j] - c, gen)
            out.append((j, c + r * (1 - _REL_BOUNDARY) * u, "boundary-in", label))
        if not inside.size:  # empty gate: bring the nearest row onto the centre
            out.append((by_dist[0], c.copy(), "duplicate", label))
    return out


def _step_gaussians(mem, q, hist, cfg, gamma):
    cert = certificate(mem, q[None], hist[None], method=cfg.method, steps=cfg.steps,
                       kappa=cfg.kappa, gamma=gamma, output_projection=False)
    return cert.pre_noise[0], cert.noise_scale[0]


def _smooth_bound_candidates(X, q, clean, cfg, gen, n_values=12, keep=4):
    """Random replacements ranked by the symmetric KL of the step Gaussians along the
    clean history (a proxy; the pilot runs decide)."""
    r, T, d = cfg.radius, cfg.steps, X.shape[1]
    gamma = _setup(cfg, q[None]).spent.gamma
    hist = clean[:T]
    mu, s = _step_gaussians(LSRMemory(X, radius=r), q, hist, cfg, gamma)
    dist = np.sqrt(((X[None] - hist[:, None]) ** 2).sum(-1))  # (T, n)
    rows = set(np.flatnonzero((dist <= 2 * r).any(0))[:8].tolist())
    rows |= set(gen.choice(X.shape[0], min(2, X.shape[0]), replace=False).tolist())
    u = gen.standard_normal((n_values, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    vals = q + u * ((T + 1) * r * gen.random((n_values, 1)) ** (1.0 / d))
    scored = []
    for j in sorted(rows):
        for v in vals:
            Xp = X.copy()
            Xp[j] = v
            mu_p, s_p = _step_gaussians(LSRMemory(Xp, radius=r), q, hist, cfg, gamma)
            ratio = (s / s_p) ** 2
            dm2 = np.sum((mu - mu_p) ** 2, axis=1)
            jeff = 0.5 * d * (ratio + 1 / ratio - 2) + 0.5 * dm2 * (1 / s**2 + 1 / s_p**2)
            scored.append((float(jeff.sum()), float(np.abs(np.log(ratio)).sum()), j, v))
    out = []
    for key in (0, 1):
        for sc in sorted(scored, key=lambda z: -z[key])[:keep]:
            if sc[key] > 0:
                out.append((sc[2], sc[3].copy(), "smooth-bound", "q (clean history)"))
    return out


def _on_boundary_values(X, c, r, gen, n_rows=3):
    """(row, value) with the row moved exactly onto distance ``r`` of ``c`` and 1e-15 inside
    and outside: the nearest non-members, the farthest row and the outermost members."""
    dist = np.sqrt(np.sum((X - c) ** 2, axis=1))
    inside = np.flatnonzero(dist <= r)
    outside = np.flatnonzero(dist > r)
    rows = list(outside[np.argsort(dist[outside], kind="stable")][:n_rows])
    rows += list(inside[np.argsort(-dist[inside], kind="stable")][:n_rows])
    rows.append(int(np.argmax(dist)))
    out = []
    for j in dict.fromkeys(int(j) for j in rows):
        u = _unit(X[j] - c, gen)
        for rel in (0.0, -1e-15, 1e-15):
            out.append((j, c + r * (1.0 + rel) * u))
    return out


def _scale_ratio_candidates(X, q, clean, cfg, gen, keep=4):
    """Replacements ranked by ``max_t |log Δ̄_t(D')/Δ̄_t(D)|`` along the clean history."""
    r, T = cfg.radius, cfg.steps
    gamma = _setup(cfg, q[None]).spent.gamma
    hist = clean[:T]
    _, s = _step_gaussians(LSRMemory(X, radius=r), q, hist, cfg, gamma)
    pool = []
    for c in clean[:T]:
        pool += _on_boundary_values(X, c, r, gen)
    scored = []
    for j, v in pool:
        Xp = X.copy()
        Xp[j] = v
        _, s_p = _step_gaussians(LSRMemory(Xp, radius=r), q, hist, cfg, gamma)
        scored.append((float(np.max(np.abs(np.log(s_p / s)))), j, v))
    scored.sort(key=lambda z: -z[0])
    return [(j, v.copy(), "scale-ratio", "q (clean history)") for sc, j, v in scored[:keep]
            if sc > 0]


def _replaced(X: np.ndarray, pair: Pair) -> np.ndarray:
    Xp = X.copy()
    Xp[pair.row] = pair.new_value
    return Xp


def _given_pair(X: np.ndarray, q: np.ndarray, r: float, replacement: Any) -> Pair:
    if not isinstance(replacement, tuple | list) or len(replacement) != 2:
        raise TypeError(f"replacement must be a pair (row, value); got {replacement!r}.")
    row, value = replacement
    n, d = X.shape
    row = check_int_at_least("replacement row", row, 0)
    if row >= n:
        raise ValueError(f"replacement row must be < n = {n}. Found {row}.")
    v = np.asarray(value)
    if v.dtype.kind not in "iuf" or v.dtype == bool:
        raise TypeError(f"replacement value must hold real numbers; got dtype {v.dtype}.")
    v = v.astype(np.float64).reshape(-1)
    if v.size != d:
        raise ValueError(f"replacement value must have d = {d} entries; got {v.size}.")
    if not np.all(np.isfinite(v)):
        raise ValueError(
            f"replacement value contains non-finite values (NaN or inf): {v.tolist()}; "
            "every entry must be finite."
        )
    Xp = X.copy()
    Xp[row] = v
    gate = (int((np.sum((X - q) ** 2, axis=1) <= r * r).sum()),
            int((np.sum((Xp - q) ** 2, axis=1) <= r * r).sum()))
    return Pair(row, tuple(map(float, X[row])), tuple(map(float, v)), "given", "user", gate)
