"""What a release spends: the frozen :class:`PrivacySpent` record and its summary."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._validation import check_int_at_least, check_nonnegative
from .accountant import RdpAccountant
from .events import CountedGaussianStep, DpEvent, NonPrivateEvent, SelfComposed, _step_event

__all__ = ["NOT_PRIVATE_MECHANISMS", "PrivacySpent", "format_spent"]

NOT_PRIVATE_MECHANISMS = ("naive",)  # releases with no DP guarantee (NonPrivateEvent)


@dataclasses.dataclass(frozen=True, slots=True)
class PrivacySpent:
    """What a release spends: the calibrated per-step noise and its guarantee.

    ``epsilon, delta``: the target, (ε, δ)-DP for the whole release of ``steps`` steps.
    ``rho_per_step``: each step adds ``N(0, Δ̄²/(2ρ) I_dim)``. ``gamma``: smoothness of
    the sensitivity bound (0 = fixed sensitivity). ``accounting``: ``"rdp"`` (RDP
    composition, one conversion) or ``"paper"`` (the paper's per-step rules).
    ``epsilon_rdp``: the ε actually spent at ``delta`` under RDP accounting, attained at
    order ``alpha_opt`` (≤ ``epsilon`` for ``"rdp"``; for ``"paper"`` it shows how much
    the paper's rule leaves unused).

    ``queries``: how many queries the release answered (each one the (ε, δ) above), and
    ``epsilon_total``: the ε of all of them composed (RDP curves summed over queries and
    steps, one conversion at the same ``delta``; see :meth:`for_queries`). A release by a
    mechanism in :data:`NOT_PRIVATE_MECHANISMS` (``"naive"``) has no guarantee: its
    :attr:`event` is a :class:`NonPrivateEvent` and ``epsilon_total`` is ∞.
    """

    epsilon: float
    delta: float
    steps: int
    dim: int
    gamma: float
    rho_per_step: float
    accounting: str
    mechanism: str = ""
    epsilon_rdp: float = math.nan
    alpha_opt: float = math.nan
    release: str = "smooth"  # "count": noisy-count proposal, fixed Gaussian (§9)
    eps_count: float = 0.0  # count release: pure DP of each noisy gate count
    delta_count: float = 0.0  # count release: per-step failure probability of the proposal
    count_margin: int = 0  # count release: proposal m̃ − margin (a lower bound w.p. ≥ 1 − δ)
    queries: int = 1
    epsilon_total: float = math.nan
    not_private_reason: str = ""

    @property
    def is_private(self) -> bool:
        """False for a mechanism without a DP guarantee (``"naive"``) or a release marked
        not private (``not_private_reason``, e.g. innovations supplied by the caller)."""
        return not self.not_private_reason and self.mechanism not in NOT_PRIVATE_MECHANISMS

    def for_queries(self, queries: int) -> PrivacySpent:
        """This calibration applied to ``queries`` queries: sets ``queries`` and the
        composed ``epsilon_total`` at ``delta`` (∞ when not private)."""
        n = check_int_at_least("queries", queries, 1)
        if not self.is_private:
            total = math.inf
        else:
            total = RdpAccountant().compose(self.step_event, self.steps * n).get_epsilon(
                self.delta
            )
        return dataclasses.replace(self, queries=n, epsilon_total=total)

    @property
    def noise_multiplier(self) -> float:
        """Noise std per unit of sensitivity: ``s/Δ̄ = 1/sqrt(2ρ)``."""
        return 1.0 / math.sqrt(2.0 * self.rho_per_step)

    def noise_std(self, sensitivity: float) -> float:
        """Per-coordinate noise std for a step with sensitivity (bound) ``sensitivity``."""
        return check_nonnegative("sensitivity", sensitivity) * self.noise_multiplier

    @property
    def step_event(self) -> DpEvent:
        """One step of one query, as an event (:class:`NonPrivateEvent` if not private)."""
        if not self.is_private:
            return NonPrivateEvent(
                self.not_private_reason
                or f"mechanism {self.mechanism!r}: the noise scale depends on the data"
            )
        if self.release == "count":
            return CountedGaussianStep(self.rho_per_step, self.eps_count, self.delta_count)
        return _step_event(self.rho_per_step, self.gamma, self.dim)

    @property
    def event(self) -> DpEvent:
        """The release of one query described as an event (``steps`` self-composed
        steps); a :class:`NonPrivateEvent` for a mechanism without a guarantee."""
        if not self.is_private:
            return self.step_event
        return SelfComposed(self.step_event, self.steps)

    @property
    def call_event(self) -> DpEvent:
        """The whole release (all ``queries`` queries) as one event."""
        if not self.is_private:
            return self.step_event
        return SelfComposed(self.step_event, self.steps * self.queries)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of every field plus ``noise_multiplier`` and ``rho_total``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["noise_multiplier"] = self.noise_multiplier
        out["rho_total"] = self.rho_per_step * self.steps
        out["is_private"] = self.is_private
        out["epsilon_total_delta"] = self.delta
        if self.is_private and self.queries > 1 and not math.isfinite(self.epsilon_total):
            e, dl = self.composed()
            out["epsilon_total_finite"] = {
                "epsilon": e, "delta": dl,
                "why": "the count proposals spend part of each query's delta directly, so "
                       "the composition is stated at queries x delta (the deltas add)"}
        for k, v in list(out.items()):  # strict JSON: no inf/nan, null plus a reason
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                if k == "epsilon_total" and not self.is_private:
                    out[f"{k}_null_reason"] = "not differentially private (infinite epsilon)"
                elif k == "epsilon_total" and math.isinf(v):
                    out[f"{k}_null_reason"] = (
                        "infinite at this delta: the failure probabilities of the count "
                        "proposals of all queries and steps exceed it")
                elif k == "epsilon_total":
                    out[f"{k}_null_reason"] = "not computed (set by for_queries)"
                else:
                    out[f"{k}_null_reason"] = "infinite" if math.isinf(v) else "not computed"
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacySpent:
        """Inverse of :meth:`to_dict` (extra keys ignored; null floats read as NaN/∞)."""
        if not isinstance(data, dict):
            raise TypeError(f"privacy must be a dict; got {type(data).__name__}.")
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            v = data[f.name]
            if v is None:
                reason = data.get(f"{f.name}_null_reason", "")
                v = math.inf if str(reason).startswith(("infinite", "not differentially")) \
                    else math.nan
            kw[f.name] = v
        missing = {"epsilon", "delta", "steps", "dim", "gamma", "rho_per_step",
                   "accounting"} - kw.keys()
        if missing:
            raise ValueError(f"privacy record lacks the field(s) {sorted(missing)}.")
        return cls(**kw)

    def __str__(self) -> str:
        rule = {
            "rdp": "rdp (Renyi DP composed over steps, one conversion to (eps, delta))",
            "paper": (
                "paper (zCDP rule rho(eps,delta)/T)"
                if self.gamma == 0.0
                else "paper (per-step (eps/T, delta/T), basic composition)"
            ),
        }.get(self.accounting, self.accounting)
        name = f" [{self.mechanism}]" if self.mechanism else ""
        lines = [
            f"PrivacySpent{name}: ({self.epsilon:g}, {self.delta:g})-DP over "
            f"T = {self.steps} step(s), d = {self.dim}",
            f"  accounting        : {rule}",
            f"  smoothness gamma  : {self.gamma:.6g}"
            + ("  (count release: public proposed sensitivity)" if self.release == "count"
               else "  (fixed sensitivity)" if self.gamma == 0.0 else ""),
            f"  rho per step      : {self.rho_per_step:.8g}  "
            f"(total {self.rho_per_step * self.steps:.6g})",
            f"  noise multiplier  : {self.noise_multiplier:.8g}  (noise std / sensitivity)",
            f"  RDP-accounted eps : {self.epsilon_rdp:.8g} at delta = {self.delta:g}, "
            f"optimal alpha = {self.alpha_opt:.6g}",
        ]
        if self.queries > 1 or math.isfinite(self.epsilon_total):
            eps_t, dl_t = self.composed()
            why = "" if dl_t == self.delta else (
                f"; at the per-query delta the composition is infinite: each query spends "
                f"part of its delta directly on the count proposals, so it is stated at "
                f"{self.queries} x the per-query delta, as the deltas add")
            lines.append(
                f"  all {self.queries} queries: eps = {eps_t:.8g} at delta = {dl_t:g} "
                f"(composed over queries and steps; the eps above is per query{why})"
            )
        return "\n".join(lines)

    def composed(self) -> tuple[float, float]:
        """``(ε, δ)`` of all ``queries`` composed, at a δ where it is finite: the
        per-query δ, or, when the queries' direct δ parts (the count release's proposals,
        ``docs/privacy-accounting.md`` §9) exhaust it, ``queries × δ`` (capped at 0.5):
        the δ's add under composition. ``(∞, δ)`` for a release without a guarantee."""
        if not self.is_private:
            return math.inf, self.delta
        if math.isfinite(self.epsilon_total) or self.queries == 1:
            return self.epsilon_total, self.delta
        from .accountant import RdpAccountant

        dl = min(self.delta * self.queries, 0.5)
        acc = RdpAccountant().compose(self.step_event, self.steps * self.queries)
        return acc.get_epsilon(dl), dl


def format_spent(spent: PrivacySpent) -> str:
    """The readable multi-line summary printed by ``brace account`` (``str(spent)``)."""
    return str(spent)
