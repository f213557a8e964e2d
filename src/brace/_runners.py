"""The step loops of the mechanisms: run a :class:`brace.plan.ReleasePlan` on a bank.

:func:`_iterative` runs BRACE (smooth or count release), global and naive step by step
(``docs/spec.md`` §2–§3); :func:`_endpoint` runs the one-release endpoint method. Both
take the plan (every choice already made by :func:`brace.plan_release`) and the standard
normal innovations, and return the release's arrays by field name of
:class:`brace.PrivateRetrievalResult`; :func:`brace.private_retrieve` wraps them with
the privacy record and the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import memory as _memory
from .memory import LSRMemory, _distinct_rows
from .plan import ReleasePlan
from .secure import secure_gaussian, snap
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


def may_correct(plan: ReleasePlan, qscale: np.ndarray, num: Numerics) -> bool:
    """Whether a step of this plan may apply the boundary correction (and so reads the
    clean trajectory): a public function of the plan and the queries' scale ``‖q‖_∞``.

    Only BRACE's smooth release with a finite activation threshold θ corrects; with the
    projection, ``‖q − Y_{t−1}‖ ≤ tr`` (up to rounding) bounds the public activation
    quantity by ``b3_max``, so θ above it (κ a hair above ``(2T+1)²/T``) never activates
    (``docs/spec.md`` §5).
    """
    if plan.method != "brace" or plan.release == "count" or not math.isfinite(plan.theta):
        return False
    if not plan.output_projection:
        return True
    T, r = plan.steps, plan.radius
    smax = float(np.max(num.slack(qscale + (T + 1) * r)))
    mg = 1.0 + num.norm_margin
    b3_max = T * (r + num.tau + smax) + (T * r + smax) * mg + r + smax
    return not bool(num.down(plan.theta * (1.0 - num.norm_margin)) >= num.up(b3_max))


def _secure_step(plan: ReleasePlan, pre: np.ndarray, sens: np.ndarray, q: np.ndarray,
                 radius: float, grid_factor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Secure mode (``docs/privacy-accounting.md`` §13): the exact discrete release on the
    public grid, projected onto ``B̄(q, radius − g√d)`` and rounded to the grid (both
    post-processing), so it stays in ``B̄(q, radius)``. Returns (release, grid, σ)."""
    y, g, sigma = secure_gaussian(pre, sens, plan.spent.rho_per_step, plan.radius,
                                  grid_factor=grid_factor, anchor=q)
    if plan.output_projection:
        y = snap(_project(y, q, radius - g * np.sqrt(q.shape[1])), g)
    return y, g, sigma


def _endpoint(memory: LSRMemory, q: np.ndarray, plan: ReleasePlan, xi: np.ndarray | None, *,
              return_clean: bool = False, grid_factor: int = 1) -> dict[str, Any]:
    """``Y = Π_{B̄(q,(T+1)r)}(z_T + s ξ)``, ``s = 2T(r + σ)·noise_multiplier``; secure
    mode: the same on its grid (:func:`_secure_step`)."""
    T, r = plan.steps, plan.radius
    clean = memory.retrieve(q, T)
    sens = endpoint_sensitivity(memory.n_memories, r, T, q)
    grid = None
    if plan.noise == "secure":
        y, g, std = _secure_step(plan, clean[:, -1], sens, q, (T + 1) * r, grid_factor)
        grid = g[:, None]
    else:
        std = sens * plan.noise_multiplier
        y = clean[:, -1] + std[:, None] * xi[:, 0]
        if plan.output_projection:
            y = _project(y, q, (T + 1) * r)
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
        grid=grid,
    )


def _iterative(
    memory: LSRMemory,
    q: np.ndarray,
    plan: ReleasePlan,
    xi: np.ndarray | None,
    *,
    history: np.ndarray | None = None,
    trace: dict | None = None,
    count_noise: np.ndarray | None = None,
    counts: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
    return_clean: bool = False,
    grid_factor: int = 1,
) -> dict[str, Any]:
    """Run an iterative method (BRACE, global, naive) as planned.

    Step ``t``: ``Y_t = Π_{B̄(q,(t+1)r)}(Q_t + s_t ξ_t)``, ``s_t = Δ_t·noise_multiplier``
    with ``Δ_t`` the smooth bound Δ̄_t (smooth BRACE, ``docs/spec.md`` §5), the public
    ``b_t`` of the noisy count ``m_t + count_noise_t`` (count release,
    ``docs/privacy-accounting.md`` §9), ``2r + σ_y`` (global) or ``2r/max(1, m_t)``
    (naive, NOT DP). With ``history`` (Q, T+1, d), the released states are taken from it
    instead of being drawn (the certificate along a given public history), and for the
    count release ``counts`` (Q, T) gives the released noisy counts ``m̃_t``; ``trace``
    (a dict) collects the pre-noise points, the sensitivities ``Δ_t`` and ``G``. Secure
    mode (``plan.noise``): each step is drawn by :func:`_secure_step` on its public grid
    (``grid`` (Q, T); ``noise_std`` is then the discrete Gaussian's σ).
    """
    Q, d = q.shape
    n = memory.n_memories
    method, T, r, kappa, proj = (plan.method, plan.steps, plan.radius, plan.kappa,
                                 plan.output_projection)
    brace = method == "brace"
    count = brace and plan.release == "count"
    theta = plan.theta
    mult = plan.noise_multiplier
    # Floating point (docs/privacy.md §8): public slack per centre, refused out of range.
    num = Numerics(n, d, r, T)
    qscale = np.abs(q).max(axis=1)
    num.check(qscale + (T + 1) * r)
    # Public shortcut (``docs/spec.md`` §5): with the projection, ‖q - Y_{t-1}‖ ≤ t r (up to
    # rounding), so the public activation bound is at most b3_max below; if θ exceeds it
    # (κ a hair above (2T+1)²/T), no bank activates.
    never_activates = not may_correct(plan, qscale, num)
    K = n_terms(n, plan.gamma) if brace and not count else 0
    released_counts = np.zeros((Q, T), dtype=np.int64) if count else None
    clean_bound = (
        CleanTrajectoryBound(Q, K, num, qscale) if brace and not never_activates else None
    )
    z = np.empty((Q, T + 1, d))
    z[:, 0] = q
    Y = np.empty((Q, T + 1, d))
    Y[:, 0] = q
    shape = (Q, T)
    std = np.zeros(shape)
    smooth = np.zeros(shape) if brace else None
    activated = np.zeros(shape, dtype=bool)
    gate_clean = np.zeros(shape, dtype=np.int64)
    gate_rel = np.zeros(shape, dtype=np.int64)
    inter = np.zeros(shape, dtype=np.int64)
    rnorm = np.zeros(shape)
    secure = plan.noise == "secure" and history is None
    grid = np.zeros(shape) if secure else None
    idx = np.arange(Q)
    # The clean trajectory is needed by the correction (BRACE when it can activate) or
    # when asked for; otherwise each step is one pass at the released state only, and
    # the clean-gate diagnostics are not computed.
    track_clean = return_clean or clean_bound is not None
    for t in range(1, T + 1):
        y_prev = Y[:, t - 1]
        if track_clean:
            # Converged clean states repeat: pass each distinct one once. Membership and
            # near distances are functions of the row and the centre, so every count and
            # distance is unchanged; the shared sums only change summation order, which
            # the rounding bound of docs/privacy.md §8 covers for any order.
            zc = z[:, t - 1]
            first, inv = _distinct_rows(zc) if _memory._DEDUPE else (idx, idx)
            n_distinct = first.size
            centres = np.concatenate([y_prev, zc[first]])
            near = clean_bound is not None and t > 1
            gp = memory.gate_pass(
                centres,
                group_size=Q,  # the released-state group as in a pass of its own
                pairs=(inv + Q, idx),
                near_centres=np.arange(n_distinct) + Q if near else None,
                near_radius=2.0 * r + num.tau,
                near_tolerance=num.near_tolerance,
            )
            means = gp.means(centres)
            a_t = means[:Q]
            z[:, t] = means[Q:][inv]
            m_t = gp.counts[:Q]
            gate_clean[:, t - 1] = gp.counts[Q:][inv]
            inter[:, t - 1] = gp.pair_counts
            R_t = z[:, t] - a_t  # identity R_t = z_t - a_t (``docs/spec.md`` §3 step 2)
            rn = np.linalg.norm(R_t, axis=1)
            rnorm[:, t - 1] = rn
        else:
            gp = memory.gate_pass(y_prev)
            a_t = gp.means(y_prev)
            m_t = gp.counts
        gate_rel[:, t - 1] = m_t
        yscale = np.abs(y_prev).max(axis=1)
        num.check(yscale, "a released state (the public centre of this step)")
        sig_y = num.slack(yscale)
        if count:
            # count release (docs/privacy-accounting.md §9): public b from the noisy count
            noisy = counts[:, t - 1] if counts is not None else m_t + count_noise[:, t - 1]
            released_counts[:, t - 1] = noisy
            pre = a_t
            sens = num.value(proposed_units(num, noisy, plan.count_margin, sig_y))
            smooth[:, t - 1] = sens
        elif brace:
            if never_activates:
                pre = a_t  # H_t = 0; the gate mean already lies in B̄(y_prev, r)
            else:
                H = rn * rn > kappa * T * r * r
                activated[:, t - 1] = H
                pre = _project(a_t + H[:, None] * R_t, y_prev, r)
            F = fixed_centre_units(m_t, K, num, sig_y)
            if clean_bound is not None:
                if t == 1:  # z_0 = q is public: A_1 is the fixed-centre bound at q
                    A_t = clean_bound.advance(clean_counts=gate_clean[:, 0])
                else:
                    segs = sorted_segments(gp.near_rows, gp.near_dist, n_distinct)
                    A_t = clean_bound.advance(
                        segments=[segs[j] for j in inv],
                        step_length=np.linalg.norm(z[:, t] - z[:, t - 1], axis=1))
                U = activation_possible(
                    F=F,
                    A_t=A_t,
                    dist_z_a=rn,
                    dist_z_y=np.linalg.norm(z[:, t] - y_prev, axis=1),
                    dist_q_y=np.linalg.norm(q - y_prev, axis=1),
                    t=t,
                    num=num,
                    slack_y=sig_y,
                    threshold=theta,
                )
                G = combine(F, U, A_t, theta, num, sig_y)
            else:
                G = F
            sens = smooth_max(num.value(G), plan.gamma, num.value(cap_units(num, sig_y)))
            smooth[:, t - 1] = sens
        else:
            pre = a_t
            if method == "global":  # 2r, plus the public rounding slack
                sens = global_sensitivity(n, r, T, y_prev)
            else:
                sens = 2.0 * r / np.maximum(m_t, 1)
        s_t = sens * mult
        std[:, t - 1] = s_t
        if trace is not None:
            trace.setdefault("pre_noise", []).append(pre)
            trace.setdefault("scale", []).append(sens)
            if brace and not count:
                trace.setdefault("G", []).append(num.value(G))
        if history is not None:
            Y[:, t] = history[:, t]
            continue
        if secure:
            y, grid[:, t - 1], std[:, t - 1] = _secure_step(plan, pre, sens, q, (t + 1) * r,
                                                           grid_factor)
        else:
            y = pre + s_t[:, None] * xi[:, t - 1]
            if proj:
                y = _project(y, q, (t + 1) * r)
        Y[:, t] = y
        if progress is not None:
            progress(t, T)
    return dict(
        outputs=Y[:, 1:],
        noise_std=std,
        smooth_sensitivity=smooth,
        activated=activated,
        gate_clean=gate_clean if track_clean else None,
        gate_released=gate_rel,
        left=gate_clean - inter if track_clean else None,
        entered=gate_rel - inter if track_clean else None,
        correction_norm=rnorm if track_clean else None,
        clean=z if return_clean else None,
        released_counts=released_counts,
        grid=grid,
    )
