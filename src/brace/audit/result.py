"""Results of an audit: the neighbouring :class:`Pair`, its certificate, :class:`AuditResult`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._format import _fmt_vec, _jsonable
from .config import AuditConfig

__all__ = ["Pair", "PairCertificate", "AuditResult"]

@dataclass(frozen=True)
class Pair:
    """A neighbouring bank ``D'``: row ``row`` of ``D`` replaced by ``new_value``.

    ``kind`` says how the candidate was proposed (``boundary-out``, ``boundary-in``,
    ``antipodal``, ``duplicate``, ``far``, ``smooth-bound``, ``given``), ``centre``
    around which point (``q``, ``z_t`` clean state, ``Y_t`` released state of a pilot run).
    ``gate_q``: ``(|I(D, q)|, |I(D', q)|)``.
    """

    row: int
    old_value: tuple[float, ...]
    new_value: tuple[float, ...]
    kind: str
    centre: str
    gate_q: tuple[int, int]

    @property
    def description(self) -> str:
        return (
            f"row {self.row}: {_fmt_vec(self.old_value)} -> {_fmt_vec(self.new_value)} "
            f"({self.kind} at {self.centre}); |I(q)| {self.gate_q[0]} -> {self.gate_q[1]}"
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["description"] = self.description
        return out


@dataclass(frozen=True)
class PairCertificate:
    """Fresh-run counts and bounds for one certified pair (arrays over thresholds)."""

    pair: Pair
    thresholds: np.ndarray
    false_positives: np.ndarray
    false_negatives: np.ndarray
    fpr_upper: np.ndarray
    fnr_upper: np.ndarray
    epsilon_per_threshold: np.ndarray
    pilot_epsilon_lb: float
    screen_score: float

    @property
    def epsilon_lb(self) -> float:
        return float(self.epsilon_per_threshold.max())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pair": self.pair.to_dict(), "epsilon_lb": self.epsilon_lb}
        for f in dataclasses.fields(self):
            if f.name == "pair":
                continue
            v = getattr(self, f.name)
            out[f.name] = _jsonable(v)
        return out


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit`.

    ``epsilon_lb``: the lower bound on ε at the claimed δ, valid with probability
    ``≥ 1 − alpha`` (Bonferroni over every threshold and certified pair).
    ``certified``: per certified pair, the thresholds, fresh counts and bounds.
    ``n_runs`` fresh runs per bank (per certified pair on ``D'``), ``n_pilot``,
    ``n_screen`` and ``n_candidates`` describe the pilot work; ``seeds`` the streams.
    ``exceeds_claim``: ``epsilon_lb > claimed ε`` — a *violation* for a mechanism that
    claims DP, the expected outcome for the naive baseline or a broken mechanism.
    """

    config: AuditConfig
    label: str
    claimed_epsilon: float
    delta: float
    epsilon_lb: float
    alpha: float
    certified: tuple[PairCertificate, ...]
    n_runs: int
    n_pilot: int
    n_screen: int
    n_candidates: int
    n_bounds: int
    statistic: str
    rho_per_step: float
    gamma: float
    seeds: dict = field(default_factory=dict)
    wall_time_s: float = math.nan

    @property
    def best(self) -> PairCertificate:
        return max(self.certified, key=lambda c: c.epsilon_lb)

    @property
    def pair(self) -> Pair:
        return self.best.pair

    @property
    def thresholds(self) -> np.ndarray:
        return self.best.thresholds

    @property
    def exceeds_claim(self) -> bool:
        return self.epsilon_lb > self.claimed_epsilon

    @property
    def verdict(self) -> str:
        """``pass`` / ``VIOLATION`` for claimed-DP configs; ``caught`` / ``NOT CAUGHT``
        for the naive baseline and deliberately broken noise."""
        if self.config.is_private:
            return "VIOLATION" if self.exceeds_claim else "pass"
        return "caught" if self.exceeds_claim else "NOT CAUGHT"

    def to_dict(self) -> dict[str, Any]:
        cfg = dataclasses.asdict(self.config)
        return {
            "label": self.label,
            "config": _jsonable(cfg),
            "claimed_epsilon": self.claimed_epsilon,
            "delta": self.delta,
            "epsilon_lb": self.epsilon_lb,
            "exceeds_claim": self.exceeds_claim,
            "verdict": self.verdict,
            "alpha": self.alpha,
            "pair": self.pair.to_dict(),
            "certified": [c.to_dict() for c in self.certified],
            "n_runs_per_side": self.n_runs,
            "n_pilot_per_side": self.n_pilot,
            "n_screen_per_side": self.n_screen,
            "n_candidates": self.n_candidates,
            "n_bounds": self.n_bounds,
            "statistic": self.statistic,
            "rho_per_step": self.rho_per_step,
            "gamma": self.gamma,
            "seeds": _jsonable(self.seeds),
            "wall_time_s": self.wall_time_s,
        }

    def __str__(self) -> str:
        b = self.best
        lines = [
            f"AuditResult({self.label}): claimed ({self.claimed_epsilon:g}, {self.delta:g})-DP, "
            f"T = {self.config.steps}",
            f"  epsilon_lb = {self.epsilon_lb:.4f}  (confidence {1 - self.alpha:g}; "
            f"{self.verdict})",
            f"  pair: {self.pair.description}",
            f"  fresh runs per bank: {self.n_runs}; pilot {self.n_pilot}; screen "
            f"{self.n_screen} x {self.n_candidates} candidates; statistic: {self.statistic}",
        ]
        for i in range(b.thresholds.size):
            lines.append(
                f"  tau = {b.thresholds[i]: .6g}: FP {b.false_positives[i]}, "
                f"FN {b.false_negatives[i]}, FPR_U {b.fpr_upper[i]:.3g}, "
                f"FNR_U {b.fnr_upper[i]:.3g}, eps_lb {b.epsilon_per_threshold[i]:.4f}"
            )
        return "\n".join(lines)
