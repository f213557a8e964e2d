"""Gaussian confidence regions (step, joint, Bonferroni, interval, box) for a target."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import as_float_array
from ._common import KINDS, _blocks, _mahalanobis2, _mahalanobis2_many

__all__ = ["ConfidenceRegion"]

def _rank_cutoff(sorted_stat: np.ndarray, level: float) -> np.ndarray:
    """Conformal cut-off along axis 1 of sorted statistics: the ``⌈(M+1)·level⌉``-th
    smallest of ``M`` (``inf`` if that exceeds ``M``: too few simulations for the level)."""
    M = sorted_stat.shape[1]
    k = math.ceil((M + 1) * level - 1e-12)
    if k > M:
        return np.full(sorted_stat.shape[:1] + sorted_stat.shape[2:], np.inf)
    return sorted_stat[:, k - 1]


def _rank_level(sorted_stat: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``#{simulated < value} / (M + 1)`` along axis 1: the region of level ℓ contains
    ``value`` iff this is ``< ℓ``."""
    M = sorted_stat.shape[1]
    less = (sorted_stat < np.expand_dims(value, 1)).sum(axis=1)
    return np.where(np.isnan(value), np.nan, less / (M + 1))


def _calibration_stats(draws: np.ndarray, cov: np.ndarray) -> dict[str, np.ndarray]:
    """Sorted simulated statistics of every region kind from error draws (Q, M, S, d)."""
    Q, M, S, d = draws.shape
    blocks = _blocks(cov, S, d)
    per = np.stack([_mahalanobis2_many(blocks[:, s], draws[:, :, s]) for s in range(S)], -1)
    joint = _mahalanobis2_many(cov, draws.reshape(Q, M, S * d))
    sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2)).reshape(Q, 1, S, d)
    z = np.abs(draws) / sd
    return {
        "step": np.sort(per, axis=1),
        "joint": np.sort(joint, axis=1),
        "interval": np.sort(z, axis=1),
        "box": np.sort(z.reshape(Q, M, S * d).max(-1), axis=1),
    }


@dataclass(frozen=True)
class ConfidenceRegion:
    """Gaussian confidence regions for a trajectory target, centred at the release.

    The model is ``centre − target ≈ N(0, cov)`` (stacked by step). Kinds:

    * ``"step"``: per step ``t``, the ellipsoid ``(x − Y_t)ᵀ C_t⁻¹ (x − Y_t) ≤ χ²_d(1−α)``;
    * ``"bonferroni"``: all per-step ellipsoids at level ``1 − α/S`` (simultaneous);
    * ``"joint"``: the stacked ellipsoid ``≤ χ²_{Sd}(1−α)`` (simultaneous);
    * ``"interval"``: per coordinate ``Y_{tj} ± z_{1−α/2} σ_{tj}``;
    * ``"box"``: every coordinate at ``z_{1−α/(2Sd)}`` (simultaneous, Bonferroni).

    For a ``public`` region ``cov`` holds per-step isotropic upper bounds ``τ_t² I`` (in
    the Loewner order) and the cross-step covariance is unknown: every kind but
    ``"joint"`` stays valid (conservative); ``"joint"`` is refused.

    A *calibrated* region (``calibration`` given; ``privacy="simulate"`` in
    :func:`analyze`) keeps the shapes but takes every cut-off from ``n_calibration``
    simulated errors instead of χ²/normal quantiles: the ``k``-th smallest simulated
    statistic with ``k = ⌈(M+1)(1−α)⌉`` (conformal rank, so coverage is at least
    ``1 − α`` and at most ``1 − α + 1/(M+1)`` when the simulated and the actual error are
    exchangeable). Then ``"box"`` is calibrated on the maximum coordinate statistic itself
    (exact simultaneous coverage, no Bonferroni).

    Attributes
    ----------
    target : {"bank", "population"}
    level : float — ``1 − α``.
    centre : (Q, S, d) — the released ``Y_t``.
    cov : (Q, Sd, Sd)
    steps : tuple of int — the released steps (1-based) the ``S`` columns refer to.
    public : bool — computed from the release and public parameters only.
    method, is_private : the release's mechanism (naive is NOT DP).
    note : str
    calibration : dict or None — sorted simulated statistics, along axis 1: ``"step"``
        (Q, M, S) squared step distances, ``"joint"`` (Q, M), ``"interval"`` (Q, M, S, d)
        standardized absolute coordinates and ``"box"`` (Q, M) their maximum.
    n_calibration : int — simulated errors behind ``calibration`` (``M``).
    """

    target: str
    level: float
    centre: np.ndarray
    cov: np.ndarray
    steps: tuple
    public: bool = False
    method: str = ""
    is_private: bool = True
    note: str = ""
    calibration: dict | None = None
    n_calibration: int = 0

    @property
    def alpha(self) -> float:
        return 1.0 - self.level

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.centre.shape

    def step_cov(self) -> np.ndarray:
        """Per-step covariance blocks (Q, S, d, d)."""
        Q, S, d = self.centre.shape
        return _blocks(self.cov, S, d)

    def sd(self) -> np.ndarray:
        """Per-coordinate standard deviations (Q, S, d)."""
        Q, S, d = self.centre.shape
        return np.sqrt(np.diagonal(self.cov, axis1=1, axis2=2)).reshape(Q, S, d)

    def _kind(self, kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}.")
        if kind == "joint" and self.public:
            raise ValueError(
                "kind='joint' needs the cross-step covariance, which a public region does "
                "not know; use 'bonferroni' or 'box' for a simultaneous public region."
            )
        return kind

    def radius2(self, kind: str = "step") -> float | np.ndarray:
        """The cut-off of an ellipsoid kind (``"step"``, ``"bonferroni"``, ``"joint"``): a
        χ² quantile, or per-query simulated cut-offs ((Q, S) / (Q,)) when calibrated."""
        from scipy import stats

        kind = self._kind(kind)
        _, S, d = self.centre.shape
        if kind not in ("step", "bonferroni", "joint"):
            raise ValueError(f"radius2 is defined for ellipsoid kinds; got {kind!r}.")
        if self.calibration is not None:
            if kind == "bonferroni":
                return _rank_cutoff(self.calibration["step"], 1.0 - self.alpha / S)
            return _rank_cutoff(self.calibration[kind], self.level)
        if kind == "step":
            return float(stats.chi2.ppf(self.level, d))
        if kind == "bonferroni":
            return float(stats.chi2.ppf(1.0 - self.alpha / S, d))
        return float(stats.chi2.ppf(self.level, S * d))

    def halfwidth(self, kind: str = "interval") -> np.ndarray:
        """Per-coordinate half-widths (Q, S, d) of ``"interval"`` or ``"box"``."""
        from scipy import stats

        kind = self._kind(kind)
        _, S, d = self.centre.shape
        if self.calibration is not None and kind in ("interval", "box"):
            zq = _rank_cutoff(self.calibration[kind], self.level)
            return (zq if kind == "interval" else zq[:, None, None]) * self.sd()
        if kind == "interval":
            zq = stats.norm.ppf(1.0 - self.alpha / 2.0)
        elif kind == "box":
            zq = stats.norm.ppf(1.0 - self.alpha / (2.0 * S * d))
        else:
            raise ValueError(f"halfwidth is defined for 'interval' and 'box'; got {kind!r}.")
        return zq * self.sd()

    def bounds(self, kind: str = "interval") -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends (Q, S, d) of ``"interval"`` or ``"box"``."""
        h = self.halfwidth(kind)
        return self.centre - h, self.centre + h

    def _points(self, points: Any) -> np.ndarray:
        x = as_float_array("points", points)
        Q, S, d = self.centre.shape
        if x.ndim == 3 and x.shape[0] == Q and x.shape[2] == d:
            if x.shape[1] == S:
                return x
            T = max(self.steps)
            if x.shape[1] >= T + 1:  # a trajectory z_0..z_T' (index 0 = query), T' ≥ T
                return x[:, list(self.steps)]
        raise ValueError(
            f"points must have shape (Q, S, d) = {(Q, S, d)} (the released steps) or "
            f"(Q, T'+1, d) with T' >= {max(self.steps)} (a trajectory from the query); "
            f"got {x.shape}."
        )

    def standardized(self, points: Any) -> np.ndarray:
        """``(points − centre) / sd`` per coordinate, (Q, S, d)."""
        return (self._points(points) - self.centre) / self.sd()

    def distance2(self, points: Any) -> tuple[np.ndarray, np.ndarray]:
        """Squared Mahalanobis distances of ``points − centre``: per step (Q, S) and joint
        (Q,) (NaN for a public region, whose cross-step covariance is unknown)."""
        x = self._points(points) - self.centre
        Q, S, d = x.shape
        blocks = self.step_cov()
        per = np.stack([_mahalanobis2(blocks[:, s], x[:, s]) for s in range(S)], axis=1)
        joint = (
            np.full(Q, np.nan) if self.public else _mahalanobis2(self.cov, x.reshape(Q, S * d))
        )
        return per, joint

    def entry_level(self, points: Any, kind: str = "step") -> np.ndarray:
        """The smallest nominal level whose region of this ``kind`` contains ``points``:
        the region at level ℓ contains them iff this is ≤ ℓ (Gaussian) or < ℓ (calibrated).
        Shapes as :meth:`contains`. Used to read coverage at every level at once."""
        from scipy import stats

        kind = self._kind(kind)
        Q, S, d = self.centre.shape
        cal = self.calibration
        if kind in ("interval", "box"):
            z = np.abs(self.standardized(points))
            if kind == "interval":
                if cal is not None:
                    return _rank_level(cal["interval"], z)
                return 2.0 * stats.norm.cdf(z) - 1.0
            zmax = z.reshape(Q, S * d).max(-1)
            if cal is not None:
                return _rank_level(cal["box"], zmax)
            return np.clip(1.0 - 2.0 * S * d * stats.norm.sf(zmax), 0.0, 1.0)
        per, joint = self.distance2(points)
        if kind == "joint":
            if cal is not None:
                return _rank_level(cal["joint"], joint)
            return stats.chi2.cdf(joint, S * d)
        u = _rank_level(cal["step"], per) if cal is not None else stats.chi2.cdf(per, d)
        if kind == "step":
            return u
        return np.clip(1.0 - S * (1.0 - u.max(axis=1)), 0.0, 1.0)

    def contains(self, points: Any, kind: str = "step") -> np.ndarray:
        """Whether ``points`` (the target trajectory) lie in the region.

        Returns (Q, S) for ``"step"``, (Q, S, d) for ``"interval"``, and (Q,) for the
        simultaneous kinds ``"bonferroni"``, ``"joint"`` and ``"box"``.
        """
        kind = self._kind(kind)
        if kind in ("interval", "box"):
            x = self._points(points)
            inside = np.abs(x - self.centre) <= self.halfwidth(kind)
            return inside if kind == "interval" else inside.all(axis=(1, 2))
        per, joint = self.distance2(points)
        if kind == "joint":
            return joint <= self.radius2("joint")
        inside = per <= self.radius2(kind)
        return inside if kind == "step" else inside.all(axis=1)

    def to_dict(self) -> dict:
        def lst(v: Any) -> Any:
            return v.tolist() if isinstance(v, np.ndarray) else v

        out = {
            "target": self.target,
            "level": self.level,
            "steps": list(self.steps),
            "public": self.public,
            "method": self.method,
            "is_private_release": self.is_private,
            "centre": self.centre.tolist(),
            "cov": self.cov.tolist(),
            "interval_halfwidth": self.halfwidth("interval").tolist(),
            "box_halfwidth": self.halfwidth("box").tolist(),
            "radius2_step": lst(self.radius2("step")),
            "radius2_bonferroni": lst(self.radius2("bonferroni")),
            "calibrated_by_simulation": self.n_calibration,
            "note": self.note,
        }
        if not self.public:
            out["radius2_joint"] = lst(self.radius2("joint"))
        return out
