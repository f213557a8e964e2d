"""One released step, as one pipeline: gate pass → statistic → bound → noise → projection.

:func:`run` runs a :class:`brace.plan.ReleasePlan` on a bank (``docs/spec.md`` §2–§3):
for each step ``t`` and every query at once,

1. **gate pass** (:func:`_gate_pass`): one pass over the bank at the released centre
   ``y = Y_{t−1}`` (and at the clean state ``z_{t−1}`` when the correction can fire or the
   clean trajectory is asked for);
2. **statistic** (:func:`_statistic`): the pre-noise point ``Q_t`` — the gate mean
   ``a_t``, or ``Π_{B̄(y, r)}(a_t + H_t R_t)`` when BRACE corrects;
3. **bound** (:func:`_bound`): the sensitivity ``Δ_t`` the noise is scaled to — the
   smooth certificate ``Δ̄_t`` (:mod:`brace.sensitivity`), the count release's public
   ``b_t`` from the noisy count, global's ``2r + σ_y``, or the naive ``2r/max(1, m_t)``
   (NOT DP);
4. **noise** (the call's :mod:`brace.noise` strategy, plain or secure, chosen once by the
   plan): ``Q_t + ξ_t`` with std ``Δ_t·multiplier``, on the public grid in secure mode;
5. **projection** (:func:`_project_step`): onto ``B̄(q, (t+1)r)`` (post-processing; in
   secure mode onto ``B̄(q, (t+1)r − g√d)``, then rounded to the grid).

The endpoint method is one release of the clean endpoint (:func:`run_endpoint`). Every
choice was made by the plan from public values; every refusal a call can meet is decided
from public values before the bank is read (:func:`public_checks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import memory as _memory
from .memory import LSRMemory, _distinct_rows
from .plan import ReleasePlan, may_correct
from .secure import check_grid_range, grid_unit, snap
from .sensitivity import (
    CleanTrajectoryBound,
    Numerics,
    activation_possible,
    cap_units,
    combine,
    fixed_centre_units,
    n_terms,
    proposed_units,
    smooth_max,
    sorted_segments,
)

__all__ = ["StepPublics", "endpoint_sensitivity", "global_sensitivity", "public_checks",
           "run", "run_endpoint", "safety_radius", "secure_grid", "sensitivity_floor"]


def _project(points: np.ndarray, centres: np.ndarray, radius: float | np.ndarray) -> np.ndarray:
    """Euclidean projection of each point (last axis) onto the closed ball
    ``B̄(centre, radius)``; ``points`` and ``centres`` broadcast."""
    diff = points - centres
    norm = np.linalg.norm(diff, axis=-1)
    radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), norm.shape)
    scale = np.where(norm > radius, radius / np.where(norm > 0, norm, 1.0), 1.0)
    return centres + diff * scale[..., None]


def endpoint_sensitivity(n: int, r: float, T: int, queries: np.ndarray) -> np.ndarray:
    """Sensitivity of the endpoint release, per query: ``Δ = 2T(r + σ)``.

    Both endpoints lie in ``B̄(q, Tr)``; each computed step adds at most the public
    rounding slack ``σ`` (``docs/privacy.md`` §8). Refuses coordinates out of range.
    """
    q = np.asarray(queries, dtype=np.float64)
    num = Numerics(n, q.shape[1], r, T)
    qscale = np.abs(q).max(axis=1)
    num.check(qscale + (T + 1) * r)
    return 2.0 * T * (r + num.slack(qscale + T * r))


def global_sensitivity(n: int, r: float, T: int, centres: np.ndarray) -> np.ndarray:
    """Sensitivity of one global-noise step at public centres ``y``: ``2r + σ_y`` (grid-rounded).

    Both gate means lie in ``B̄(y, r)`` up to the public rounding slack ``σ_y``.
    """
    y = np.asarray(centres, dtype=np.float64)
    num = Numerics(n, y.shape[1], r, T)
    return num.value(cap_units(num, num.slack(np.abs(y).max(axis=1))))


def sensitivity_floor(plan: ReleasePlan) -> float:
    """A public lower bound of every step's sensitivity where it is not public itself:
    ``2r/n`` (the smooth certificate is at least the fixed-centre bound ``2r/m``, the
    naive scale is ``2r/max(1, m)``, and the count release's grid uses it as a floor;
    ``m ≤ n``). It sets the finest secure grid a call can use."""
    return 2.0 * plan.radius / plan.n


def _floor_grid(plan: ReleasePlan) -> float | None:
    """Secure mode: the grid at :func:`sensitivity_floor`, the finest a call can use (and
    the grid of every step whose scale depends on the data); None in plain mode."""
    if plan.noise != "secure":
        return None
    return float(grid_unit(sensitivity_floor(plan) * plan.noise_multiplier, plan.radius,
                           plan.dim))


def safety_radius(plan: ReleasePlan, num: Numerics, qscale: np.ndarray,
                  floor_grid: float | None = None) -> np.ndarray:
    """Without the output projection, the radius of the public ball around each query that
    keeps every released centre inside the proven floating-point range (the certificate's
    slack at most ``SLACK_MAX_REL·r``, and in secure mode ``2^60`` grid units): releases
    are clamped to it, a public post-processing that only binds far outside any realistic
    noise, so that no step is refused after an earlier one was drawn. ``floor_grid``: the
    plan's :func:`_floor_grid`, if already known."""
    limit = num.max_scale()
    if plan.noise == "secure":
        g = _floor_grid(plan) if floor_grid is None else floor_grid
        limit = min(limit, g * 2.0**60)
    return np.maximum(limit - qscale - 2.0 * plan.radius, 0.0)


@dataclass(frozen=True)
class StepPublics:
    """Every public quantity of a call's steps, computed once by :func:`public_checks`
    before the bank is read; the stages only read it.

    ``num``: the floating-point numerics; ``qscale``: ``‖q‖_∞`` per query; ``floor``:
    :func:`sensitivity_floor`; ``floor_grid``: secure mode's grid at the floor (None in
    plain mode); ``safety``: without the output projection, :func:`safety_radius` per
    query (None with it); ``never_corrects``: no step can apply BRACE's correction
    (:func:`brace.plan.may_correct`); ``K``: the terms of the smooth certificate (0 where
    there is none)."""

    num: Numerics
    qscale: np.ndarray
    floor: float
    floor_grid: float | None
    safety: np.ndarray | None
    never_corrects: bool
    K: int


def public_checks(plan: ReleasePlan, q: np.ndarray) -> StepPublics:
    """Every refusal a call can meet, decided from public values (the plan and the
    queries) before the bank is read (``docs/privacy.md`` §8, "Input range"): the
    certificate's floating-point range at every centre the call can reach (with the
    projection ``B̄(q, (T+1)r)``, without it the safety ball of :func:`safety_radius`), and
    in secure mode the grid's int64 range. Returns every public quantity of the steps
    (:class:`StepPublics`)."""
    T, r = plan.steps, plan.radius
    num = Numerics(plan.n, plan.dim, r, T)
    qscale = np.abs(q).max(axis=1)
    num.check(qscale + (T + 1) * r)
    floor_grid = _floor_grid(plan)
    safety = (None if plan.output_projection
              else safety_radius(plan, num, qscale, floor_grid))
    if floor_grid is not None:
        reach = qscale + (T + 2) * r + float(np.max(num.slack(qscale + (T + 1) * r)))
        if safety is not None:
            reach = reach + safety
        check_grid_range(reach, np.float64(floor_grid))
    iterative = plan.method != "endpoint"
    never = not may_correct(plan, qscale, num) if iterative else True
    smooth = plan.method == "brace" and plan.release != "count"
    K = n_terms(plan.n, plan.gamma) if iterative and smooth else 0
    return StepPublics(num, qscale, sensitivity_floor(plan), floor_grid, safety, never, K)


@dataclass
class _Walk:
    """The per-call state of the iterative release: released and clean trajectories, the
    certificate's recursion and the diagnostics, one row per query."""

    q: np.ndarray
    plan: ReleasePlan
    pub: StepPublics
    clean_bound: CleanTrajectoryBound | None
    track_clean: bool
    Y: np.ndarray = field(init=False)
    z: np.ndarray = field(init=False)
    diag: dict = field(init=False)

    def __post_init__(self) -> None:
        Q, d = self.q.shape
        T = self.plan.steps
        self.Y = np.empty((Q, T + 1, d))
        self.Y[:, 0] = self.q
        self.z = np.empty((Q, T + 1, d))
        self.z[:, 0] = self.q
        shape = (Q, T)
        self.diag = dict(
            noise_std=np.zeros(shape),
            smooth_sensitivity=np.zeros(shape) if self.plan.method == "brace" else None,
            activated=np.zeros(shape, dtype=bool),
            gate_clean=np.zeros(shape, dtype=np.int64),
            gate_released=np.zeros(shape, dtype=np.int64),
            inter=np.zeros(shape, dtype=np.int64),
            correction_norm=np.zeros(shape),
            released_counts=(np.zeros(shape, dtype=np.int64)
                             if self.plan.release == "count" else None),
        )


@dataclass
class _Pass:
    """What step ``t`` read from the bank."""

    a: np.ndarray  # gate means at the released centre
    m: np.ndarray  # gate counts there
    R: np.ndarray | None = None  # z_t − a_t (when the clean trajectory is tracked)
    rn: np.ndarray | None = None  # ‖R_t‖
    near: Any = None  # (rows, dist, n_distinct, inv) of the clean centres (step ≥ 2)


def _gate_pass(memory: LSRMemory, w: _Walk, t: int) -> _Pass:
    """1. One pass over the bank at ``y = Y_{t−1}`` (and at ``z_{t−1}``)."""
    y = w.Y[:, t - 1]
    if not w.track_clean:
        gp = memory.gate_pass(y)
        return _Pass(a=gp.means(y), m=gp.counts)
    # Converged clean states repeat: pass each distinct one once. Membership and near
    # distances are functions of the row and the centre, so every count and distance is
    # unchanged; the shared sums only change summation order, which the rounding bound
    # of docs/privacy.md §8 covers for any order.
    Q = y.shape[0]
    idx = np.arange(Q)
    zc = w.z[:, t - 1]
    first, inv = _distinct_rows(zc) if _memory._DEDUPE else (idx, idx)
    centres = np.concatenate([y, zc[first]])
    near = w.clean_bound is not None and t > 1
    gp = memory.gate_pass(
        centres,
        group_size=Q,  # the released-state group as in a pass of its own
        pairs=(inv + Q, idx),
        near_centres=np.arange(first.size) + Q if near else None,
        near_radius=2.0 * w.plan.radius + w.pub.num.tau,
        near_tolerance=w.pub.num.near_tolerance,
    )
    means = gp.means(centres)
    w.z[:, t] = means[Q:][inv]
    w.diag["gate_clean"][:, t - 1] = gp.counts[Q:][inv]
    w.diag["inter"][:, t - 1] = gp.pair_counts
    a = means[:Q]
    R = w.z[:, t] - a  # identity R_t = z_t − a_t (docs/spec.md §3 step 2)
    rn = np.linalg.norm(R, axis=1)
    w.diag["correction_norm"][:, t - 1] = rn
    return _Pass(a=a, m=gp.counts[:Q], R=R, rn=rn,
                 near=(gp.near_rows, gp.near_dist, first.size, inv) if near else None)


def _statistic(w: _Walk, p: _Pass, t: int) -> np.ndarray:
    """2. The pre-noise point ``Q_t``: the gate mean, or BRACE's corrected point
    ``Π_{B̄(y, r)}(a_t + H_t R_t)``, ``H_t = 1{‖R_t‖² > κTr²}``."""
    plan = w.plan
    if plan.method != "brace" or plan.release == "count" or w.pub.never_corrects:
        return p.a  # H_t = 0: the gate mean already lies in B̄(y, r)
    T, r = plan.steps, plan.radius
    H = p.rn * p.rn > plan.kappa * T * r * r
    w.diag["activated"][:, t - 1] = H
    return _project(p.a + H[:, None] * p.R, w.Y[:, t - 1], r)


def _bound(w: _Walk, p: _Pass, t: int, noisy: np.ndarray | None) -> tuple[np.ndarray, Any]:
    """3. The sensitivity ``Δ_t`` per query, and the certificate's ``G`` (smooth BRACE)."""
    plan, num = w.plan, w.pub.num
    y = w.Y[:, t - 1]
    sig_y = num.slack(np.abs(y).max(axis=1))
    if plan.release == "count":  # public b from the noisy count (privacy-accounting §9)
        return num.value(proposed_units(num, noisy, plan.count_margin, sig_y)), None
    if plan.method == "global":  # 2r, plus the public rounding slack
        return num.value(cap_units(num, sig_y)), None
    if plan.method == "naive":  # NOT DP: the scale reveals the gate count
        return 2.0 * plan.radius / np.maximum(p.m, 1), None
    F = fixed_centre_units(p.m, w.pub.K, num, sig_y)
    if w.clean_bound is None:
        G = F
    else:
        if t == 1:  # z_0 = q is public: A_1 is the fixed-centre bound at q
            A_t = w.clean_bound.advance(clean_counts=w.diag["gate_clean"][:, 0])
        else:
            rows, dist, n_distinct, inv = p.near
            segs = sorted_segments(rows, dist, n_distinct)
            A_t = w.clean_bound.advance(
                segments=[segs[j] for j in inv],
                step_length=np.linalg.norm(w.z[:, t] - w.z[:, t - 1], axis=1))
        U = activation_possible(
            F=F, A_t=A_t, dist_z_a=p.rn,
            dist_z_y=np.linalg.norm(w.z[:, t] - y, axis=1),
            dist_q_y=np.linalg.norm(w.q - y, axis=1),
            t=t, num=num, slack_y=sig_y, threshold=plan.theta,
        )
        G = combine(F, U, A_t, plan.theta, num, sig_y)
    sens = smooth_max(num.value(G), plan.gamma, num.value(cap_units(num, sig_y)),
                      margin=plan.smoothing_margin)
    return sens, G


def secure_grid(plan: ReleasePlan, sens: np.ndarray,
                pub: StepPublics | None = None) -> np.ndarray | None:
    """The public grid of a step in secure mode (None in plain mode): from the public
    sensitivity itself (global, endpoint), from the public ``b_t`` floored at
    :func:`sensitivity_floor` (count), or from that floor alone (smooth, naive: their
    scale depends on the data). ``pub``: the call's :class:`StepPublics`, if known."""
    if plan.noise != "secure":
        return None
    floor = sensitivity_floor(plan) if pub is None else pub.floor
    if not plan.scale_is_public:
        g = _floor_grid(plan) if pub is None else pub.floor_grid
        return np.full(np.shape(sens), g)
    s = sens if plan.release != "count" else np.maximum(sens, floor)
    return grid_unit(s * plan.noise_multiplier, plan.radius, plan.dim)


def _clamp(points: np.ndarray, centres: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """The projection onto ``B̄(centre, radius)`` where it binds; other points unchanged."""
    out = _project(points, centres, radius)
    inside = np.linalg.norm(points - centres, axis=-1) <= radius
    return np.where(inside[..., None], points, out)


def _project_step(w: _Walk, y: np.ndarray, g: np.ndarray | None, radius: Any) -> np.ndarray:
    """5. The output projection onto ``B̄(q, (t+1)r)`` (post-processing) — in secure mode
    onto ``B̄(q, (t+1)r − g√d)`` then rounded to the grid, which stays in the ball; without
    the projection, the public safety clamp of :func:`safety_radius` only."""
    proj = w.plan.output_projection
    if g is not None:
        inner = np.maximum(radius - g * math.sqrt(y.shape[1]), 0.0)  # ≥ 0: safety may be 0
        y = _project(y, w.q, inner) if proj else _clamp(y, w.q, inner)
        return snap(y, g)
    return _project(y, w.q, radius) if proj else _clamp(y, w.q, radius)


def run(memory: LSRMemory, q: np.ndarray, plan: ReleasePlan, noise: Any, *,
        history: np.ndarray | None = None, trace: dict | None = None,
        counts: np.ndarray | None = None, progress: Callable[[int, int], None] | None = None,
        return_clean: bool = False) -> dict[str, Any]:
    """Run an iterative method (BRACE, global, naive) as planned, step by step.

    With ``history`` (Q, T+1, d) the released states are taken from it instead of being
    drawn (the certificate along a given public history; ``noise`` is then None), and for
    the count release ``counts`` (Q, T) gives the released noisy counts ``m̃_t``;
    ``trace`` (a dict) collects the pre-noise points, the sensitivities ``Δ_t`` and ``G``.
    Returns the release's arrays by field name of :class:`brace.PrivateRetrievalResult`.
    """
    if plan.method == "endpoint":
        return run_endpoint(memory, q, plan, noise, return_clean=return_clean)
    pub = public_checks(plan, q)
    num = pub.num
    count = plan.release == "count"
    clean_bound = (CleanTrajectoryBound(q.shape[0], pub.K, num, pub.qscale)
                   if plan.method == "brace" and not pub.never_corrects else None)
    w = _Walk(q, plan, pub, clean_bound, track_clean=return_clean or clean_bound is not None)
    T, r, mult = plan.steps, plan.radius, plan.noise_multiplier
    grids = np.zeros((q.shape[0], T)) if (noise is not None and noise.grid) else None
    for t in range(1, T + 1):
        if history is not None:  # a caller's history: its centres are checked one by one
            num.check(np.abs(w.Y[:, t - 1]).max(axis=1), "a state of the given history")
        p = _gate_pass(memory, w, t)                        # 1. gate pass
        w.diag["gate_released"][:, t - 1] = p.m
        pre = _statistic(w, p, t)                           # 2. statistic
        noisy = None
        if count:
            noisy = counts[:, t - 1] if counts is not None else p.m + noise.counts(t)
            w.diag["released_counts"][:, t - 1] = noisy
        sens, G = _bound(w, p, t, noisy)                    # 3. bound
        if w.diag["smooth_sensitivity"] is not None:
            w.diag["smooth_sensitivity"][:, t - 1] = sens
        if trace is not None:
            trace.setdefault("pre_noise", []).append(pre)
            trace.setdefault("scale", []).append(sens)
            if G is not None:
                trace.setdefault("G", []).append(num.value(G))
        if history is not None:  # the std the release would have drawn with
            w.diag["noise_std"][:, t - 1] = sens * mult
            w.Y[:, t] = history[:, t]
            continue
        g = secure_grid(plan, sens, pub)
        y, std, g = noise.gaussian(t, pre, sens, mult, g=g,   # 4. noise
                                   data_dependent=not plan.scale_is_public, anchor=q)
        w.diag["noise_std"][:, t - 1] = std
        if grids is not None:
            grids[:, t - 1] = g
        radius = (t + 1) * r if plan.output_projection else pub.safety
        w.Y[:, t] = _project_step(w, y, g, radius)          # 5. projection
        if progress is not None:
            progress(t, T)
    return _arrays(w, return_clean, grids)


def _arrays(w: _Walk, return_clean: bool, grids: np.ndarray | None) -> dict[str, Any]:
    dg = w.diag
    tc = w.track_clean
    return dict(
        outputs=w.Y[:, 1:],
        noise_std=dg["noise_std"],
        smooth_sensitivity=dg["smooth_sensitivity"],
        activated=dg["activated"],
        gate_clean=dg["gate_clean"] if tc else None,
        gate_released=dg["gate_released"],
        left=dg["gate_clean"] - dg["inter"] if tc else None,
        entered=dg["gate_released"] - dg["inter"] if tc else None,
        correction_norm=dg["correction_norm"] if tc else None,
        clean=w.z if return_clean else None,
        released_counts=dg["released_counts"],
        grid=grids,
    )


def run_endpoint(memory: LSRMemory, q: np.ndarray, plan: ReleasePlan, noise: Any, *,
                 return_clean: bool = False) -> dict[str, Any]:
    """``Y = Π_{B̄(q,(T+1)r)}(z_T + ξ)`` with std ``2T(r + σ)·multiplier`` (one release):
    the same pipeline with the clean endpoint as the statistic and a public bound."""
    pub = public_checks(plan, q)
    T, r = plan.steps, plan.radius
    clean = memory.retrieve(q, T)                                        # 1–2. z_T
    sens = endpoint_sensitivity(plan.n, r, T, q)                         # 3. bound
    g = secure_grid(plan, sens, pub)
    y, std, g = noise.gaussian(1, clean[:, -1], sens, plan.noise_multiplier, g=g,
                               data_dependent=False, anchor=q)           # 4. noise
    w = _Walk(q, plan, pub, None, False)
    radius = (T + 1) * r if plan.output_projection else pub.safety
    y = _project_step(w, y, g, radius)                                   # 5. projection
    Q = q.shape[0]
    zeros = np.zeros((Q, 1), dtype=np.int64)
    return dict(
        outputs=y[:, None, :],
        noise_std=std[:, None],
        smooth_sensitivity=None,
        activated=np.zeros((Q, 1), dtype=bool),
        gate_clean=zeros,
        gate_released=zeros.copy(),
        left=zeros.copy(),
        entered=zeros.copy(),
        correction_norm=np.zeros((Q, 1)),
        clean=clean if return_clean else None,
        released_counts=None,
        grid=None if g is None else g[:, None],
    )
