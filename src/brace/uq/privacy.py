"""The privacy part: covariance of ``Y − z`` given the bank, modelled or simulated."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from .._validation import as_float_array
from ..mechanisms import PrivateRetrievalResult
from ..memory import LSRMemory
from ..plan import recorded_kappa
from ._common import _propagator
from .sampling import SamplingCovariance

__all__ = ["privacy_covariance"]

def _released_steps(result: PrivateRetrievalResult) -> tuple[int, ...]:
    T = int(result.params["steps"])
    return (T,) if result.method == "endpoint" else tuple(range(1, T + 1))


def privacy_covariance(
    result: PrivateRetrievalResult, jacobians: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Covariance of ``Y − z`` given the bank over the released steps, and exactness flags.

    Linear-Gaussian model of docs/uq.md §4: ``e_t = F_t e_{t-1} + ξ_t``, ``e_0 = 0``,
    ``ξ_t ~ N(0, s_t² I)`` with the released per-step std ``s_t``, and

    * BRACE, κ = 0: ``F_t = 0`` (a step is either corrected, ``Q_t = z_t``, or has
      ``R_t = 0``, so ``a_t = z_t``);
    * BRACE, κ > 0: ``F_t = (1 − H_t) Ĵ_t`` (``H_t`` the activation; non-corrected steps
      carry ``−R_t = Φ_D(Y_{t-1}) − Φ_D(z_{t-1}) ≈ Ĵ_t (Y_{t-1} − z_{t-1})``);
    * global / naive: ``F_t = Ĵ_t``; endpoint: one release, ``Y = z_T + ξ``.

    Returns ``(cov (Q, Sd, Sd), exact (Q, S))``: ``exact`` marks steps whose law needs no
    linearisation (``F_t = 0`` or ``t = 1``); projections are flagged separately by
    :func:`analyze`.
    """
    if not isinstance(result, PrivateRetrievalResult):
        raise TypeError(f"result must be a PrivateRetrievalResult; got {type(result).__name__}.")
    s = np.asarray(result.noise_std, dtype=np.float64)
    Q, S = s.shape
    d = result.outputs.shape[2]
    if result.method == "endpoint":
        cov = (s[:, 0] ** 2)[:, None, None] * np.eye(d)[None]
        return cov, np.ones((Q, 1), dtype=bool)
    J = as_float_array("jacobians", jacobians)
    if J.shape != (Q, S, d, d):
        raise ValueError(
            f"jacobians must have shape (Q, T, d, d) = {(Q, S, d, d)}; got {J.shape}."
        )
    if result.method == "brace":
        kappa = recorded_kappa(result.params)
        active = np.asarray(result.activated, dtype=bool)
        keep = np.zeros((Q, S)) if kappa == 0.0 else (~active).astype(np.float64)
    else:
        keep = np.ones((Q, S))
    keep[:, 0] = 0.0  # e_0 = Y_0 − z_0 = 0
    F = J * keep[:, :, None, None]
    L = _propagator(F)
    noise = np.repeat(s**2, d, axis=1)
    cov = np.einsum("qij,qj,qkj->qik", L, noise, L)
    return cov, keep == 0.0


def _projection_risk(
    res: PrivateRetrievalResult, z: np.ndarray, q: np.ndarray, P: np.ndarray, steps: tuple,
    r: float, d: int,
) -> np.ndarray:
    """Whether a projection can act with probability above ~1e-4 (Q, S).

    Output ball: ``(t+1) r − ‖z_t − q‖ < c·σ_t``; BRACE's inner ball on steps that may be
    corrected (κ < ∞): ``‖z_t − z_{t-1}‖ + c·σ_{t-1} > r``; ``σ`` the modelled per-coordinate
    sd of ``Y − z`` and ``c² = χ²_d(1 − 10⁻⁴)``. Uses the clean trajectory and the model,
    never the realised release: a rule that looked at ``Y`` would pick the model by the
    size of the very error it is meant to cover.
    """
    from scipy import stats

    Q = P.shape[0]
    S = len(steps)
    c = math.sqrt(stats.chi2.ppf(1.0 - 1e-4, d))
    sd = np.sqrt(np.diagonal(P, axis1=1, axis2=2).reshape(Q, S, d).mean(-1))
    risk = np.zeros((Q, S), dtype=bool)
    if res.params.get("output_projection", True):
        for j, t in enumerate(steps):
            room = (t + 1) * r - np.linalg.norm(z[:, t] - q, axis=1)
            risk[:, j] = room < c * sd[:, j]
    kappa = recorded_kappa(res.params)
    if res.method == "brace" and math.isfinite(kappa):
        for j in range(1, S):
            t = steps[j]
            step_len = np.linalg.norm(z[:, t] - z[:, t - 1], axis=1)
            risk[:, j] |= step_len + c * sd[:, j - 1] > r
    return risk


def _linearization_error(
    sc: SamplingCovariance, P: np.ndarray, exact: np.ndarray, steps: tuple, n: int, d: int
) -> np.ndarray:
    """Relative error of the modelled privacy variance of each step (docs/uq.md §4.2).

    A displacement ``δ ~ N(0, s_e² I)`` of the gate centre flips the membership of about
    ``n ∮ f |⟨δ, ν⟩| dS`` memories, each moving the gate mean by ``(X_i − z_t)/m_t``. Around
    ``Ĵ_t δ`` this leaves, per coordinate, the variance
    ``v = (n/m_t²) · s_e √(2/π) · ∮ f ‖x − z_t‖² dS / d``; the same flips make the bank's
    slope at the noise scale deviate from ``Ĵ_t`` by about ``√v / s_e``, which changes the
    carried variance ``‖Ĵ_t‖² s_e²`` by up to ``2‖Ĵ_t‖ √v s_e``. Returned:
    ``(2‖Ĵ_t‖₂ √v s_e + v) / (tr P_tt / d)``; 0 where the step carries no error.
    """
    Q = P.shape[0]
    S = len(steps)
    out = np.zeros((Q, S))
    if S < 2:
        return out
    var = np.diagonal(P, axis1=1, axis2=2).reshape(Q, S, d).mean(-1)
    for j in range(1, S):
        t = steps[j]
        m = np.maximum(sc.gate_counts[:, t - 1], 1).astype(np.float64)
        s_e = np.sqrt(var[:, j - 1])
        v = (n / m**2) * s_e * math.sqrt(2.0 / math.pi) * sc.boundary_moment[:, t - 1] / d
        jn = np.linalg.norm(sc.jacobians[:, t - 1], ord=2, axis=(1, 2))
        err = (2.0 * jn * np.sqrt(v) * s_e + v) / np.maximum(var[:, j], 1e-300)
        out[:, j] = np.where(exact[:, j], 0.0, err)
    return out


def _gaussian_draws(cov: np.ndarray, M: int, rng: np.random.Generator) -> np.ndarray:
    """``M`` draws of ``N(0, cov)`` per query, (Q, M, k); NaN where ``cov`` is NaN."""
    Q, k, _ = cov.shape
    w = rng.standard_normal((Q, M, k))
    out = np.full((Q, M, k), np.nan)
    for i in range(Q):
        if not np.all(np.isfinite(cov[i])):
            continue
        vals, vecs = np.linalg.eigh(cov[i])
        root = vecs * np.sqrt(np.maximum(vals, 0.0))
        out[i] = w[i] @ root.T
    return out


def _simulate_release(
    memory: LSRMemory, res: PrivateRetrievalResult, q: np.ndarray, M: int, rng
) -> np.ndarray:
    """``M`` fresh releases (Q, M, S, d) of the same mechanism, parameters, bank and
    queries (the conditional law of ``Y`` given ``D``)."""
    from ..mechanisms import NotPrivateWarning, private_retrieve

    Q, S, d = res.outputs.shape
    priv, params = res.privacy, res.params
    # the same plan: smooth with the recorded γ; a count release as it was chosen (its
    # budget split is a public function of the same parameters)
    release, gamma = "smooth", priv.gamma if res.method == "brace" else None
    if res.method == "brace" and params.get("release") == "count":
        auto = str(params.get("release_rule", "")).startswith("auto")
        release, gamma = ("auto" if auto else "count"), None
    elif res.method != "brace":
        release = None
    out = np.empty((Q, M, S, d))
    chunk = max(1, 256 // Q)
    for m0 in range(0, M, chunk):
        mm = min(chunk, M - m0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            sim = private_retrieve(
                memory, np.repeat(q, mm, axis=0), method=res.method, epsilon=priv.epsilon,
                delta=priv.delta, steps=int(params["steps"]), kappa=recorded_kappa(params),
                gamma=gamma, release=release, accounting=priv.accounting,
                output_projection=params.get("output_projection", True),
                # secure noise (its own plan, no seed): simulated as released
                **({"noise": "secure"} if params.get("noise") == "secure" else {"seed": rng}),
            )
        if not math.isclose(sim.privacy.rho_per_step, priv.rho_per_step, rel_tol=1e-9):
            raise ValueError(
                "cannot reproduce the release's noise calibration for the simulation "
                f"(rho per step {sim.privacy.rho_per_step} vs {priv.rho_per_step})."
            )
        out[:, m0 : m0 + mm] = sim.outputs.reshape(Q, mm, S, d)
    return out
