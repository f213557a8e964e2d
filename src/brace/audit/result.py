"""Results of an audit: the neighbouring :class:`Pair`, its certificate, :class:`AuditResult`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._format import _fmt_vec, _jsonable
from .config import AuditConfig
from .stats import _runs_to_certify, epsilon_lower_bound, max_certifiable_epsilon

__all__ = ["Pair", "PairCertificate", "AuditResult"]

@dataclass(frozen=True)
class Pair:
    """A neighbouring bank ``D'``: row ``row`` of ``D`` replaced by ``new_value``.

    ``kind`` says how the candidate was proposed (``boundary-out``, ``boundary-in``,
    ``antipodal``, ``duplicate``, ``far``, ``smooth-bound``, ``scale-ratio``, ``given``,
    and ``far-pair``/``near-pair`` of :mod:`brace.audit.local`), ``centre``
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
    """Fresh-run counts and bounds for one certified pair (arrays over thresholds).

    ``differing_runs``: with coupled runs (``AuditConfig.coupled``), how many of the
    ``n_runs`` pairs of releases differ in any bit (None without coupling). At 0 every
    test has ``FP + FN = n_runs``, so ``FPR_U + FNR_U ≥ 1`` and ``ε_lb = 0`` exactly.
    """

    pair: Pair
    thresholds: np.ndarray
    false_positives: np.ndarray
    false_negatives: np.ndarray
    fpr_upper: np.ndarray
    fnr_upper: np.ndarray
    epsilon_per_threshold: np.ndarray
    pilot_epsilon_lb: float
    screen_score: float
    differing_runs: int | None = None

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
    ``claimed_epsilon`` is the mechanism's per-query ε; ``charged_epsilon`` the ε the
    audit checks (:attr:`claim`): what local accounting charges the audited pair for
    this release — 0 for a far pair, the per-query ε otherwise (None: the per-query ε).
    ``exceeds_claim``: ``epsilon_lb > claim`` — a *violation* for a mechanism that
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
    charged_epsilon: float | None = None

    @property
    def claim(self) -> float:
        """The ε that ``epsilon_lb`` is checked against (``charged_epsilon``, else the
        per-query ``claimed_epsilon``)."""
        return self.claimed_epsilon if self.charged_epsilon is None else self.charged_epsilon

    @property
    def differing_runs(self) -> int | None:
        """Coupled runs of the best pair whose releases differ (None: not coupled)."""
        return self.best.differing_runs

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
        return self.epsilon_lb > self.claim

    @property
    def max_certifiable_epsilon(self) -> float:
        """The largest ε_lb these runs could certify (no error at all on either side)."""
        return max_certifiable_epsilon(self.n_runs, self.alpha, self.n_bounds, self.delta)

    @property
    def point_epsilon(self) -> float:
        """The best ε of the chosen tests at their *observed* error rates (no confidence
        penalty): what the runs show, as opposed to what they certify."""
        best = 0.0
        for c in self.certified:
            e = epsilon_lower_bound(c.false_positives / self.n_runs,
                                    c.false_negatives / self.n_runs, self.delta)
            best = max(best, float(np.max(e)))
        return best

    @property
    def underpowered(self) -> bool:
        """Not caught, but only for want of runs: either no outcome of ``n_runs`` runs
        could certify more than the claim, or the observed rates already exceed it and
        the Clopper–Pearson penalty of so few runs hides it."""
        if self.exceeds_claim:
            return False
        return (self.max_certifiable_epsilon <= self.claim
                or self.point_epsilon > self.claim)

    @property
    def runs_needed(self) -> int | None:
        """Runs per side that would certify the claim at the observed error rates (None
        when the observed rates do not exceed the claim, or more than 10⁹ would be)."""
        if self.exceeds_claim:
            return None
        best: int | None = None
        for c in self.certified:
            for fp, fn in zip(c.false_positives, c.false_negatives, strict=True):
                n = _runs_to_certify(fp / self.n_runs, fn / self.n_runs,
                                     self.claim, self.alpha, self.n_bounds,
                                     self.delta, start=self.n_runs)
                if n is not None and (best is None or n < best):
                    best = n
        return best

    @property
    def verdict(self) -> str:
        """``pass`` / ``VIOLATION`` for claimed-DP configs; ``caught`` / ``NOT CAUGHT``
        for the naive baseline and deliberately broken noise; ``UNDERPOWERED`` for one of
        those not caught by runs too few to tell (:attr:`underpowered`) — not a failure
        of the mechanism or of the audit."""
        if self.config.is_private:
            return "VIOLATION" if self.exceeds_claim else "pass"
        if self.exceeds_claim:
            return "caught"
        return "UNDERPOWERED" if self.underpowered else "NOT CAUGHT"

    def to_dict(self) -> dict[str, Any]:
        cfg = dataclasses.asdict(self.config)
        return {
            "label": self.label,
            "config": _jsonable(cfg),
            "claimed_epsilon": self.claimed_epsilon,
            "charged_epsilon": self.claim,
            "delta": self.delta,
            "epsilon_lb": self.epsilon_lb,
            "exceeds_claim": self.exceeds_claim,
            "verdict": self.verdict,
            "max_certifiable_epsilon": self.max_certifiable_epsilon,
            "point_epsilon": self.point_epsilon if math.isfinite(self.point_epsilon) else None,
            "underpowered": self.underpowered,
            "runs_needed": self.runs_needed,
            "alpha": self.alpha,
            "pair": self.pair.to_dict(),
            "differing_runs": self.differing_runs,
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
            f"T = {self.config.steps}"
            + (f"; checked against the charged eps {self.claim:g}"
               if self.claim != self.claimed_epsilon else ""),
            f"  epsilon_lb = {self.epsilon_lb:.4f}  (confidence {1 - self.alpha:g}; "
            f"{self.verdict})",
            f"  pair: {self.pair.description}",
            f"  fresh runs per bank: {self.n_runs}; pilot {self.n_pilot}; screen "
            f"{self.n_screen} x {self.n_candidates} candidates; statistic: {self.statistic}",
        ]
        if self.differing_runs is not None:
            lines.append(f"  coupled runs whose releases differ: {self.differing_runs} of "
                         f"{self.n_runs}")
        for i in range(b.thresholds.size):
            lines.append(
                f"  tau = {b.thresholds[i]: .6g}: FP {b.false_positives[i]}, "
                f"FN {b.false_negatives[i]}, FPR_U {b.fpr_upper[i]:.3g}, "
                f"FNR_U {b.fnr_upper[i]:.3g}, eps_lb {b.epsilon_per_threshold[i]:.4f}"
            )
        return "\n".join(lines)
