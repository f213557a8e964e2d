"""Pairs for auditing local accounting: far from every footprint, and inside one.

Local accounting (``docs/privacy-accounting.md`` §12, Lemma 5) charges a pair of
neighbouring banks ``D ~ D'`` (row ``x`` replaced by ``x'``) only for the released steps
whose footprint holds ``x`` or ``x'``. For one release of one query every footprint lies
in the query's *reserved* ball ``B̄(q, R)`` (:func:`brace.footprints.reserved_radius`;
``R = (T+1)·r·(1 + 2·10⁻³)`` for the iterative methods with the output projection), so:

* **far pair** (``AuditConfig(pair="far")``): ``x`` and ``x'`` both outside ``B̄(q, R)``.
  No step is charged: the claim is ε = 0, and Lemma 5 says more — with the same noise the
  two releases are bit-identical. ``x`` is the row nearest to ``q`` outside the ball and
  ``x'`` the point just outside the ball on the opposite side of ``q``
  (``q − R(1 + 10⁻⁶)·u``, ``u`` the direction of ``x − q``), the closest a far pair can
  come to the release from both sides.
* **near pair** (``AuditConfig(pair="near")``): ``x`` the outermost member of the gate of
  ``q`` and ``x'`` its antipode in that gate (``q − r(1 − 10⁻⁶)·u``), both inside step
  1's footprint ``B̄(q, r(1 + 10⁻⁸))``, which every release has. The claim is the
  per-query ε: admission reserves every step of the query at ``B̄(q, R)``, which holds
  both values; the charge recorded after the release (``PrivateMemory.spent_at``) is at
  most that.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import check_bank
from ..footprints import reserved_radius
from ..mechanisms import DEFAULT_KAPPA
from ..plan import plan_release
from .config import AuditConfig, _single_query
from .result import Pair

__all__ = ["local_pair", "local_cases", "reserved_ball_radius"]

_REL = 1e-6  # relative offset of "just outside the reserved ball" / "just inside the gate"


def reserved_ball_radius(n: int, d: int, cfg: AuditConfig) -> float:
    """``R`` of the reserved ball ``B̄(q, R)`` of one query of ``cfg``'s release (public)."""
    plan = plan_release(
        (n, d), radius=cfg.radius, method=cfg.method, epsilon=cfg.epsilon,
        delta=cfg.delta, steps=cfg.steps, kappa=cfg.kappa,
        gamma=cfg.gamma if cfg.method == "brace" and cfg.release == "smooth" else None,
        accounting=cfg.accounting, output_projection=cfg.output_projection,
        release=cfg.release if cfg.method == "brace" else None,
    )
    return float(reserved_radius(plan, np.zeros((1, d)))[0])


def _unit(v: np.ndarray) -> np.ndarray:
    nv = float(np.linalg.norm(v))
    if nv > 0 and math.isfinite(nv):
        return v / nv
    u = np.zeros_like(v)
    u[0] = 1.0
    return u


def local_pair(bank: Any, query: Any, config: AuditConfig) -> Pair:
    """The far or near pair of ``config.pair`` (module docstring) for ``bank`` and ``query``.

    Raises ValueError when no such pair exists (no row outside the reserved ball).
    """
    cfg = config.validated()
    if cfg.pair not in ("far", "near"):
        raise ValueError(f"local_pair needs pair='far' or 'near'; got {cfg.pair!r}.")
    X = check_bank(bank)
    n, d = X.shape
    q = _single_query(query, d)[0]
    r = cfg.radius
    sq = np.sum((X - q) ** 2, axis=1)
    dist = np.sqrt(sq)
    gate_d = int((sq <= r * r).sum())
    if cfg.pair == "far":
        R = reserved_ball_radius(n, d, cfg)
        if not math.isfinite(R):  # pragma: no cover - refused by AuditConfig.validated
            raise ValueError("pair='far' needs a finite reserved ball (output projection).")
        outside = np.flatnonzero(dist > R * (1.0 + _REL))
        if outside.size == 0:
            raise ValueError(
                f"pair='far': no row of the bank lies outside the query's reserved ball "
                f"B(q, {R:.6g}); a far pair needs one."
            )
        row = int(outside[np.argmin(dist[outside])])
        new = q - R * (1.0 + _REL) * _unit(X[row] - q)
        if not float(np.linalg.norm(new - q)) > R:  # pragma: no cover - huge |q| only
            raise ValueError("pair='far': rounding put the new value inside the reserved "
                             "ball; choose a query with smaller coordinates.")
        kind, centre = "far-pair", f"q (x, x' outside B(q, {R:.6g}))"
    else:
        members = np.flatnonzero(sq <= r * r)
        if members.size:
            row = int(members[np.argmax(dist[members])])
            new = q - r * (1.0 - _REL) * _unit(X[row] - q)
        else:  # empty gate: bring the nearest row onto the query
            row = int(np.argmin(dist))
            new = q.copy()
        kind, centre = "near-pair", "q (x' in the gate of q)"
    Xp = X.copy()
    Xp[row] = new
    gate_p = int((np.sum((Xp - q) ** 2, axis=1) <= r * r).sum())
    return Pair(row, tuple(map(float, X[row])), tuple(map(float, new)), kind, centre,
                (gate_d, gate_p))


def local_cases(rc: Any) -> list[tuple[int, AuditConfig]]:
    """(d, config) of the report's local-accounting rows: per dimension, BRACE with the
    library defaults (κ = 128, no correction at this T with the projection) at the
    smallest ε of the report — a far pair (projected release, coupled runs) and a near
    pair (the unprojected release, as the other rows; it reveals at least as much)."""
    eps = min(rc.epsilons)
    common = dict(method="brace", epsilon=eps, delta=rc.delta, steps=rc.steps,
                  radius=rc.radius, kappa=DEFAULT_KAPPA, n_runs=rc.n_runs,
                  n_screen=rc.n_screen, alpha=rc.alpha, seed=rc.seed)
    cases = []
    for d in rc.dims:
        cases.append((d, AuditConfig(pair="far", output_projection=True, coupled=True,
                                     **common)))
        cases.append((d, AuditConfig(pair="near", **common)))
    return cases
