"""The uncertainty of one private retrieval: the :class:`RetrievalUQ` result."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._common import _check_level, _check_target
from .regions import ConfidenceRegion, _calibration_stats
from .sampling import SamplingCovariance

__all__ = ["RetrievalUQ"]

_DISCLOSURE = (
    "computed from the private bank (noise std, gate counts, local covariance, Jacobian, "
    "clean trajectory): NOT covered by the release's (epsilon, delta); see docs/uq.md §6"
)


@dataclass(frozen=True)
class RetrievalUQ:
    """Uncertainty of a private retrieval, privacy part and sampling part separately.

    Attributes
    ----------
    method, is_private : the release's mechanism (``"naive"`` is NOT DP).
    steps : tuple of int — released steps (1..T, or (T,) for the endpoint method).
    n, radius : bank size and gate radius.
    queries : (Q, d); released : (Q, S, d) ``Y_t``; noise_std : (Q, S) ``s_t``.
    privacy_cov : (Q, Sd, Sd) ``E[(Y − z)(Y − z)ᵀ | D]``: the linear-Gaussian model
        (docs/uq.md §4), or the simulated second moment when ``privacy_model`` is
        ``"simulate"``.
    sampling_cov : (Q, Sd, Sd) ``Var(z − z̄) ≈ Σ̂/n`` (absolute scale).
    sampling : :class:`SamplingCovariance` the estimate came from (root-n scale, Ĵ, …).
    privacy_model : {"linear", "simulate"} — how the privacy part was obtained.
    privacy_exact : (Q, S) — the step's privacy law needs no linearisation.
    projection_active : (Q, S) — a projection (output ball, or BRACE's ``B̄(Y_{t-1}, r)``
        on a corrected step) moved the release: the Gaussian model is then conservative
        for the output ball and approximate for the inner one.
    projection_risk : (Q, S) — a projection can move the release with non-negligible
        probability (from ``z``, ``q`` and the modelled noise, not from the realised
        ``Y``, so that choosing the model does not select on the error).
    linearization_error : (Q, S) — estimated relative error of the step's modelled privacy
        variance: the empirical map is piecewise constant, and at the noise scale its
        local slope and lumps differ from ``Ĵ_t`` (docs/uq.md §4.2); large
        (> ``max_linearization_error``) sends ``"auto"`` to simulation.
    privacy_draws : (Q, M, S, d) or None — simulated ``Y − z`` (conditional law given D).
    sampling_draws : (Q, M, S, d) or None — ``N(0, sampling_cov)`` draws paired with them.
    """

    method: str
    is_private: bool
    steps: tuple
    n: int
    radius: float
    queries: np.ndarray
    released: np.ndarray
    noise_std: np.ndarray
    privacy_cov: np.ndarray
    sampling_cov: np.ndarray
    sampling: SamplingCovariance
    privacy_exact: np.ndarray
    projection_active: np.ndarray
    projection_risk: np.ndarray | None = None
    privacy_model: str = "linear"
    linearization_error: np.ndarray | None = None
    privacy_draws: np.ndarray | None = None
    sampling_draws: np.ndarray | None = None

    def confidence_region(self, target: str = "bank", level: float = 0.95) -> ConfidenceRegion:
        """Regions for ``z_t`` (``target="bank"``: privacy part only) or ``z̄_t``
        (``"population"``: privacy + sampling), at level ``1 − α``.

        Linear model: Gaussian regions with covariance ``P`` (bank) or ``P + Σ̂/n``
        (population). Simulated model: the first half of the simulated errors gives the
        shape (second moment), the second half calibrates the cut-offs
        (:class:`ConfidenceRegion`, conformal ranks); the population target adds the
        paired ``N(0, Σ̂/n)`` draws.
        """
        target = _check_target(target)
        lv = _check_level(level)
        common = dict(target=target, level=lv, centre=self.released, steps=self.steps,
                      public=False, method=self.method, is_private=self.is_private,
                      note=_DISCLOSURE)
        if self.privacy_draws is None:
            cov = self.privacy_cov if target == "bank" else self.privacy_cov + self.sampling_cov
            return ConfidenceRegion(cov=cov, **common)
        draws = self.privacy_draws
        if target == "population":
            draws = draws + self.sampling_draws
        Q, M, S, d = draws.shape
        M1 = M // 2
        flat = draws[:, :M1].reshape(Q, M1, S * d)
        shape = np.einsum("qmi,qmj->qij", flat, flat) / M1
        cal = _calibration_stats(draws[:, M1:], shape)
        return ConfidenceRegion(cov=shape, calibration=cal, n_calibration=M - M1, **common)

    @property
    def privacy_sd(self) -> np.ndarray:
        """Per-coordinate sd (Q, S, d) of the privacy error ``Y_t − z_t``."""
        Q, S, d = self.released.shape
        return np.sqrt(np.diagonal(self.privacy_cov, axis1=1, axis2=2)).reshape(Q, S, d)

    @property
    def sampling_sd(self) -> np.ndarray:
        """Per-coordinate sd (Q, S, d) of the sampling error ``z_t − z̄_t``."""
        Q, S, d = self.released.shape
        return np.sqrt(np.diagonal(self.sampling_cov, axis1=1, axis2=2)).reshape(Q, S, d)

    @property
    def privacy_share(self) -> np.ndarray:
        """``tr P_t / (tr P_t + tr Σ_t/n)`` (Q, S): the privacy part's share of the
        population-target variance. Near 0: privacy negligible at the root-n scale
        (``m̂_t ≫ √n``); near 1: privacy dominates (``m̂_t ≪ √n``); paper Thm 5."""
        p = (self.privacy_sd**2).sum(-1)
        s = (self.sampling_sd**2).sum(-1)
        return p / (p + s)

    def summary(self) -> str:
        Q, S, d = self.released.shape
        tag = "" if self.is_private else "  [NOT DIFFERENTIALLY PRIVATE]"
        lines = [
            f"RetrievalUQ(method={self.method!r}{tag}, n={self.n}, queries={Q}, "
            f"steps={list(self.steps)}, sampling={self.sampling.estimator}, "
            f"privacy={self.privacy_model})",
            "  mean per-coordinate sd by step: privacy (Y - z) | sampling (z - zbar) | "
            "privacy share",
        ]
        for j, t in enumerate(self.steps):
            lines.append(
                f"    t={t}: {self.privacy_sd[:, j].mean():.6g} | "
                f"{self.sampling_sd[:, j].mean():.6g} | {self.privacy_share[:, j].mean():.3f}"
            )
        if self.projection_active.any():
            lines.append(f"  projection active in {int(self.projection_active.sum())} step(s)")
        lines.append(f"  note: intervals are {_DISCLOSURE}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "is_private_release": self.is_private,
            "steps": list(self.steps),
            "n": self.n,
            "radius": self.radius,
            "queries": self.queries.tolist(),
            "released": self.released.tolist(),
            "noise_std": self.noise_std.tolist(),
            "privacy_cov": self.privacy_cov.tolist(),
            "sampling_cov": self.sampling_cov.tolist(),
            "privacy_sd": self.privacy_sd.tolist(),
            "sampling_sd": self.sampling_sd.tolist(),
            "privacy_share": self.privacy_share.tolist(),
            "privacy_exact": self.privacy_exact.tolist(),
            "projection_active": self.projection_active.tolist(),
            "privacy_model": self.privacy_model,
            "linearization_error": None if self.linearization_error is None
            else self.linearization_error.tolist(),
            "sampling": self.sampling.to_dict(),
            "note": _DISCLOSURE,
        }
