"""Entry points: :func:`analyze` (from the bank) and :func:`public_region` (release only)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import check_int_at_least, check_positive, check_queries, check_rng
from ..mechanisms import PrivateRetrievalResult
from ..memory import LSRMemory, pins_bank
from ..plan import recorded_kappa
from ._common import _check_level, _check_target, _select
from .privacy import (
    _gaussian_draws,
    _linearization_error,
    _projection_risk,
    _released_steps,
    _simulate_release,
    privacy_covariance,
)
from .regions import ConfidenceRegion
from .result import RetrievalUQ
from .sampling import SamplingCovariance, sampling_covariance

__all__ = ["analyze", "public_region"]

def _check_result(result: Any) -> PrivateRetrievalResult:
    if not isinstance(result, PrivateRetrievalResult):
        raise TypeError(f"result must be a PrivateRetrievalResult; got {type(result).__name__}.")
    return result


@pins_bank
def analyze(
    memory: LSRMemory,
    result: PrivateRetrievalResult,
    queries: Any = None,
    *,
    sampling: str | SamplingCovariance = "delta",
    privacy: str = "auto",
    bandwidth: float | None = None,
    n_boot: int = 1000,
    n_sim: int = 400,
    max_linearization_error: float = 0.3,
    seed: Any = None,
) -> RetrievalUQ:
    """Uncertainty of a private release ``result`` computed on ``memory`` for ``queries``.

    Parameters
    ----------
    memory : LSRMemory — the bank the release was computed on (private).
    result : PrivateRetrievalResult — from :func:`brace.private_retrieve`.
    queries : (Q, d) or (d,), optional — the queries of the release; default
        ``result.queries``. If given, they must equal the stored queries.
    sampling : "delta", "bootstrap" or a precomputed :class:`SamplingCovariance` (same
        queries, horizon ≥ T), e.g. to share one estimate between several releases.
    privacy : "linear", "simulate" or "auto"
        ``"linear"``: the linear-Gaussian model of :func:`privacy_covariance` (the
        paper's CLT form). ``"simulate"``: the conditional law of ``Y − z`` given the
        bank by Monte Carlo — ``n_sim`` fresh runs of the same mechanism on the same
        bank and queries — exact up to simulation error, whatever the projections and
        the non-linearity. ``"auto"``: simulate only when the linear model is
        unreliable: a projection risk, or ``linearization_error > max_linearization_error``
        on some step.
    bandwidth, n_boot : passed to :func:`sampling_covariance`.
    n_sim : int — simulated releases (half shape the regions, half calibrate them).
    max_linearization_error : float — ``"auto"`` simulates above it (docs/uq.md §4.2).
    seed : drives the bootstrap and the simulations.

    Returns
    -------
    RetrievalUQ — ``.confidence_region(target="bank"|"population", level)``.

    Everything here is computed from the private bank; see docs/uq.md §6 for what the
    output reveals, and :func:`public_region` for the variant that uses only the release.
    """
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    res = _check_result(result)
    n, d = memory.n_memories, memory.dim
    r = memory.radius_
    stored = getattr(res, "queries", None)
    if queries is None:
        if stored is None:
            raise ValueError(
                "queries is None and the result does not store them; pass the queries "
                "of the release."
            )
        queries = stored
    q, _ = check_queries(queries, d, name="queries")
    if stored is not None and (stored.shape != q.shape or not np.array_equal(stored, q)):
        raise ValueError(
            "queries differ from the queries the release was computed for; pass "
            "result.queries (or None)."
        )
    Q = q.shape[0]
    Y = np.asarray(res.outputs, dtype=np.float64)
    T = int(res.params["steps"])
    steps = _released_steps(res)
    S = len(steps)
    if Y.ndim != 3 or Y.shape != (Q, S, d):
        raise ValueError(
            f"mismatched shapes: the release holds outputs of shape {Y.shape} but "
            f"{Q} queries of d = {d} with {S} released step(s) need {(Q, S, d)}."
        )
    r_res = float(res.params["radius"])
    if not math.isclose(r_res, r, rel_tol=1e-12):
        raise ValueError(
            f"the release was computed with radius {r_res} but the memory has radius {r}."
        )
    if res.clean is not None and not np.allclose(res.clean[:, 0], q, rtol=0, atol=1e-12):
        raise ValueError(
            "queries differ from those of the release (result.clean[:, 0]); pass the "
            "queries of the release."
        )
    if privacy not in ("linear", "simulate", "auto"):
        raise ValueError(f"privacy must be 'linear', 'simulate' or 'auto'; got {privacy!r}.")
    max_err = check_positive("max_linearization_error", max_linearization_error)
    rng = check_rng(seed)
    if isinstance(sampling, SamplingCovariance):
        sc = sampling
        if sc.n != n or sc.trajectory.shape[0] != Q or sc.trajectory.shape[2] != d:
            raise ValueError(
                f"the sampling estimate is for n = {sc.n}, {sc.trajectory.shape[0]} queries, "
                f"d = {sc.trajectory.shape[2]}; the release needs n = {n}, {Q}, d = {d}."
            )
        if sc.steps < T:
            raise ValueError(f"the sampling estimate covers {sc.steps} steps; need T = {T}.")
        if not np.allclose(sc.trajectory[:, 0], q, rtol=0, atol=1e-12):
            raise ValueError(
                "sampling was computed for other queries; estimate it for these queries "
                "or pass sampling='delta'."
            )
    elif sampling in ("delta", "bootstrap"):
        sc = sampling_covariance(
            memory, q, T, estimator=sampling, bandwidth=bandwidth, n_boot=n_boot, seed=rng
        )
    else:
        raise ValueError(
            f"sampling must be 'delta', 'bootstrap' or a SamplingCovariance; got {sampling!r}."
        )
    idx = [t - 1 for t in steps]
    samp = _select(sc.cov[:, : T * d, : T * d], idx, d) / n
    P, exact = privacy_covariance(res, sc.jacobians[:, :T] if res.method != "endpoint" else None)
    # projections: the public output ball, and BRACE's inner ball on corrected steps
    proj = np.zeros((Q, S), dtype=bool)
    if res.params.get("output_projection", True):
        for j, t in enumerate(steps):
            dist = np.linalg.norm(Y[:, j] - q, axis=1)
            proj[:, j] = dist >= (t + 1) * r * (1.0 - 1e-9)
    if res.method == "brace":
        z = sc.trajectory
        kappa = recorded_kappa(res.params)
        corr = np.asarray(res.activated, dtype=bool) | (kappa == 0.0)
        prev = np.concatenate([q[:, None], Y[:, :-1]], axis=1)
        far = np.linalg.norm(z[:, 1 : T + 1] - prev, axis=2) > r
        proj |= corr & far
    risk = _projection_risk(res, sc.trajectory, q, P, steps, r, d)
    lin_err = _linearization_error(sc, P, exact, steps, n, d)
    model = privacy
    if privacy == "auto":
        model = "simulate" if (risk.any() or (lin_err > max_err).any()) else "linear"
    pdraws = sdraws = None
    if model == "simulate":
        M = check_int_at_least("n_sim", n_sim, 2)
        sims = _simulate_release(memory, res, q, M, rng)
        pdraws = sims - sc.trajectory[:, None, list(steps)]
        flat = pdraws.reshape(Q, M, S * d)
        P = np.einsum("qmi,qmj->qij", flat, flat) / M
        sdraws = _gaussian_draws(samp, M, rng).reshape(Q, M, S, d)
    return RetrievalUQ(
        method=res.method,
        is_private=res.is_private,
        steps=steps,
        n=n,
        radius=r,
        queries=q,
        released=Y,
        noise_std=np.asarray(res.noise_std, dtype=np.float64),
        privacy_cov=P,
        sampling_cov=samp,
        sampling=sc,
        privacy_exact=exact,
        projection_active=proj,
        projection_risk=risk,
        privacy_model=model,
        linearization_error=lin_err,
        privacy_draws=pdraws,
        sampling_draws=sdraws,
    )


def public_region(
    result: PrivateRetrievalResult,
    *,
    target: str = "bank",
    level: float = 0.95,
    n: int | None = None,
    min_gate_fraction: float | None = None,
    jacobian_bound: float | None = None,
) -> ConfidenceRegion:
    """A region computed from the released ``Y`` and public parameters only (docs/uq.md §6).

    Reads ``result.outputs``, ``result.method``, ``result.privacy`` (ε, δ, T, d, γ and the
    calibrated ρ — functions of public inputs) and ``result.params`` (r, κ, T, projection);
    never the noise std, gate counts, activations or any other field computed from the
    bank. Post-processing of the release, so it is covered by the release's (ε, δ).

    The per-step noise std is bounded by its public maximum ``σ̄ = 2r/√(2ρ)`` (``Δ̄_t ≤ 2r``;
    endpoint: ``2Tr/√(2ρ)``). Steps that may carry the previous error (BRACE with κ > 0,
    global, naive) need a public bound ``jacobian_bound ≥ ‖J_t‖₂``; the population target
    also needs the bank size ``n`` and a public lower bound ``min_gate_fraction ≤ p_t``,
    since ``Cov(X | gate) ⪯ r² I``. The region then uses per-step bounds ``τ_t² I`` with

        τ_t² = Σ_{s≤t} L^{2(t−s)} σ̄_s²  +  (Σ_{s≤t} L^{t−s})² r² / (n p_min),

    (second term for the population only; ``L`` the Jacobian bound, propagation only
    where it can occur), valid kinds: ``"step"``, ``"bonferroni"``, ``"interval"``,
    ``"box"``.
    """
    res = _check_result(result)
    target = _check_target(target)
    lv = _check_level(level)
    Y = np.asarray(res.outputs, dtype=np.float64)
    Q, S, d = Y.shape
    r = float(res.params["radius"])
    T = int(res.params["steps"])
    steps = _released_steps(res)
    mult = 1.0 / math.sqrt(2.0 * float(res.privacy.rho_per_step))
    sigma = (2.0 * T * r if res.method == "endpoint" else 2.0 * r) * mult
    kappa = recorded_kappa(res.params)
    carries = res.method in ("global", "naive") or (res.method == "brace" and kappa > 0.0)
    needs_L = (carries and S > 1) or (target == "population" and T > 1)
    if needs_L:
        if jacobian_bound is None:
            raise ValueError(
                "this release can carry errors from step to step: pass a public "
                "jacobian_bound >= ||J_t|| (an assumption about the population, not "
                "computed from the bank)."
            )
        Lb = float(check_positive("jacobian_bound", jacobian_bound))
    else:
        Lb = 0.0
    tau2 = np.empty(S)
    for j, t in enumerate(steps):
        if res.method == "endpoint" or not carries:
            v_priv = sigma**2
        else:
            v_priv = sum(Lb ** (2 * (t - s)) * sigma**2 for s in range(1, t + 1))
        tau2[j] = v_priv
    note = "public: uses only the released Y and public parameters"
    if target == "population":
        if n is None or min_gate_fraction is None:
            raise ValueError(
                "target='population' needs the public bank size n and a public "
                "min_gate_fraction (a lower bound on the gate probability p_t)."
            )
        nn = check_int_at_least("n", n, 1)
        p = check_positive("min_gate_fraction", min_gate_fraction)
        if p > 1.0:
            raise ValueError(f"min_gate_fraction must lie in (0, 1]. Found {p}.")
        for j, t in enumerate(steps):
            amp = sum(Lb ** (t - s) for s in range(1, t + 1))  # 0.0 ** 0 == 1.0
            tau2[j] += amp**2 * r * r / (nn * p)
        note += f"; assumes p_t >= {p}" + (f" and ||J_t|| <= {Lb}" if needs_L else "")
    elif needs_L:
        note += f"; assumes ||J_t|| <= {Lb}"
    cov = np.zeros((Q, S * d, S * d))
    diag = np.repeat(tau2, d)
    cov[:, np.arange(S * d), np.arange(S * d)] = diag
    return ConfidenceRegion(
        target=target, level=lv, centre=Y, cov=cov, steps=steps, public=True,
        method=res.method, is_private=res.is_private, note=note,
    )
