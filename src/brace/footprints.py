"""Footprints: the public ball of the bank that each released step reads.

An LSR step reads only its gate. For every released step (one query, one step) this
module gives a closed ball ``B̄(c, ρ)``, computed from public values only (the plan, the
queries and the released outputs), that contains every row on which the step's output
distribution depends, given the history before it (``docs/privacy-accounting.md`` §12):

* **Non-correcting iterative step** (BRACE's smooth release when the correction can
  never fire, the count release, the global baseline): step ``t`` reads the gate around
  the public centre ``Y_{t−1}`` and nothing else — the gate mean, the count, the noisy
  count and the certificate ``F(m_t)`` are functions of the members, and membership is
  ``direct_sqdist(X_i, y) ≤ fl(r²)``, which implies ``‖X_i − y‖ ≤ r(1 + (d+3)u)``.
  Footprint ``B̄(Y_{t−1}, r(1 + GATE_MARGIN))``.
* **Correcting BRACE step** (κ below ``no_correction_kappa(T)``, or no projection): step
  ``t`` also reads the clean trajectory ``z_0 = q, …, z_{t−1}`` (gates of radius r⁺
  around each) and the rows within ``2r + τ`` of ``z_{t−1}`` (the certificate's near
  distances). Each clean step moves by at most ``r⁺ + σ ≤ r(1 + SLACK_MAX_REL + 10⁻⁹)``
  (``σ`` is refused above ``SLACK_MAX_REL·r``), so everything read lies within
  ``(t+1)·r·(1 + CLEAN_MARGIN)`` of ``q``; the gate at ``Y_{t−1}`` adds
  ``‖Y_{t−1} − q‖ + r⁺``. Footprint ``B̄(q, max of the two)``.
* **Endpoint baseline**: one release per query from the clean trajectory
  ``z_0, …, z_{T−1}``: footprint ``B̄(q, T·r·(1 + CLEAN_MARGIN))``.

Before a call runs, the footprints are not known (they depend on the released centres),
but each query's are contained in its *reserved* ball :func:`reserved_radius` around the
query (the output projection keeps ``Y_{t−1}`` in ``B̄(q, tr)``): a call is admitted on
its reserved balls and charged on its footprints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .plan import ReleasePlan, may_correct
from .sensitivity import SLACK_MAX_REL, Numerics

__all__ = ["Footprints", "GATE_MARGIN", "CLEAN_MARGIN", "footprints", "reserved_radius",
           "reserved_steps"]

GATE_MARGIN = 1e-8  # ≥ (d + 3)u for every dimension the certificate accepts (d ≲ 10^5)
CLEAN_MARGIN = 2.0 * SLACK_MAX_REL  # covers r⁺ + σ per clean step and the near margin τ


@dataclass(frozen=True)
class Footprints:
    """The footprints of one release: ``centres`` (k, d), ``radii`` (k,), and for each
    the query ``query`` (k,) and step ``step`` (k,, 1-based) it belongs to."""

    centres: np.ndarray
    radii: np.ndarray
    query: np.ndarray
    step: np.ndarray

    def __len__(self) -> int:
        return int(self.radii.shape[0])


def _num(plan: ReleasePlan, q: np.ndarray) -> tuple[Numerics, np.ndarray]:
    num = Numerics(plan.n, q.shape[1], plan.radius, plan.steps)
    return num, np.abs(q).max(axis=1)


def reserved_radius(plan: ReleasePlan, queries: np.ndarray) -> np.ndarray:
    """Radius (per query) of a public ball around the query that holds every footprint
    of the call: ``(T+1)·r·(1 + CLEAN_MARGIN)`` for the iterative methods with the
    output projection, ``T·r·(1 + CLEAN_MARGIN)`` for the endpoint method, ``∞``
    without the projection (the released centres are then unbounded)."""
    q = np.asarray(queries, dtype=np.float64)
    T, r = plan.steps, plan.radius
    if plan.method == "endpoint":
        return np.full(q.shape[0], T * r * (1.0 + CLEAN_MARGIN))
    if not plan.output_projection:
        return np.full(q.shape[0], math.inf)
    return np.full(q.shape[0], (T + 1) * r * (1.0 + CLEAN_MARGIN))


def reserved_steps(plan: ReleasePlan, queries: np.ndarray) -> Footprints:
    """A public ball per future released step that holds its footprint, before anything is
    computed: step 1 of a non-correcting iterative release reads the gate of ``Y_0 = q``
    (exactly its footprint); step ``t ≥ 2`` a gate around ``Y_{t−1} ∈ B̄(q, tr)`` (the
    projection), within ``(t+1)·r·(1 + CLEAN_MARGIN)`` of ``q``; a correcting step, within
    the same radius; the endpoint release, :func:`reserved_radius`; without the
    projection, everything (∞)."""
    q = np.asarray(queries, dtype=np.float64)
    Q, d = q.shape
    if plan.method == "endpoint" or not plan.output_projection:
        rr = reserved_radius(plan, q)
        k = 1 if plan.method == "endpoint" else plan.steps
        return Footprints(np.repeat(q, k, axis=0), np.repeat(rr, k), np.repeat(np.arange(Q), k),
                          np.tile(np.arange(1, k + 1), Q))
    T, r = plan.steps, plan.radius
    t = np.arange(1, T + 1, dtype=np.float64)
    radii = (t + 1.0) * r * (1.0 + CLEAN_MARGIN)
    num, qscale = _num(plan, q)
    if not may_correct(plan, qscale, num):
        radii[0] = r * (1.0 + GATE_MARGIN)  # the gate of the public query itself
    return Footprints(np.repeat(q, T, axis=0), np.tile(radii, Q), np.repeat(np.arange(Q), T),
                      np.tile(np.arange(1, T + 1), Q))


def footprints(plan: ReleasePlan, queries: np.ndarray, outputs: np.ndarray) -> Footprints:
    """The footprint of every released step of a call (public: plan, queries, outputs).

    ``outputs`` are the release's ``(Q, T, d)`` states (``(Q, 1, d)`` for the endpoint
    method). Rows are ordered query by query, step by step.
    """
    q = np.asarray(queries, dtype=np.float64)
    Y = np.asarray(outputs, dtype=np.float64)
    Q, d = q.shape
    r = plan.radius
    if plan.method == "endpoint":
        T = plan.steps
        return Footprints(q.copy(), np.full(Q, T * r * (1.0 + CLEAN_MARGIN)),
                          np.arange(Q), np.ones(Q, dtype=np.int64))
    T = Y.shape[1]
    prev = np.concatenate([q[:, None, :], Y[:, :-1]], axis=1)  # Y_0 = q, …, Y_{T−1}
    gate = r * (1.0 + GATE_MARGIN)
    num, qscale = _num(plan, q)
    if may_correct(plan, qscale, num):
        t = np.arange(1, T + 1, dtype=np.float64)
        clean = (t + 1.0) * r * (1.0 + CLEAN_MARGIN)
        far = np.linalg.norm(prev - q[:, None, :], axis=2) * (1.0 + GATE_MARGIN) + gate
        centres = np.broadcast_to(q[:, None, :], (Q, T, d))
        radii = np.maximum(clean[None, :], far)
    else:
        centres = prev
        radii = np.full((Q, T), gate)
    return Footprints(
        np.ascontiguousarray(centres.reshape(Q * T, d)),
        radii.reshape(Q * T).astype(np.float64),
        np.repeat(np.arange(Q), T),
        np.tile(np.arange(1, T + 1), Q),
    )
