"""The release plan: every choice of one private release, made in one place.

:func:`plan_release` validates the mechanism's parameters and decides, from public values
only (ε, δ, T, d, n, r, κ and the arguments), everything a release does before it touches
the bank: the release mode, the smoothness γ and the rule that chose it, the calibrated
noise multiplier and the budget split of the count release. The result is a frozen
:class:`ReleasePlan`; :func:`brace.private_retrieve` runs it, :func:`brace.certificate`
evaluates it along a fixed history, and :class:`brace.PrivateMemory` prices it.

Where is the release mode chosen? Here: ``release`` (``"smooth"``, ``"count"`` or
``"auto"``; None is :data:`DEFAULT_RELEASE` for BRACE) in :func:`plan_release`.

>>> import brace
>>> plan = brace.plan_release((1000, 2), radius=0.5, method="brace", epsilon=4.0,
...                           delta=1e-5, steps=2, release="count")
>>> plan.release, plan.gamma_rule, plan.count_margin
('count', 'none (count release)', 70)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from . import accounting as _acc
from . import policy as _policy
from ._validation import (
    check_bool,
    check_int_at_least,
    check_nonnegative,
    check_privacy_delta,
    check_privacy_epsilon,
    check_radius_beta,
    check_steps,
)
from .accounting import PrivacySpent
from .memory import LSRMemory
from .noise import resolve_noise
from .secure import (
    MAX_SECURE_SMOOTH_N,
    MIN_SECURE_GAMMA,
    SMOOTH_RATE_MARGIN,
    check_noise,
)
from .sensitivity import RATE_MARGIN, Numerics

__all__ = [
    "DEFAULT_KAPPA",
    "DEFAULT_RELEASE",
    "METHODS",
    "PRIVATE_METHODS",
    "RELEASE_MODES",
    "ReleasePlan",
    "may_correct",
    "no_correction_kappa",
    "plan_release",
    "recorded_kappa",
]

METHODS = ("brace", "global", "endpoint", "naive")
PRIVATE_METHODS = ("brace", "global", "endpoint")
RELEASE_MODES = ("smooth", "count", "auto")
DEFAULT_KAPPA = 128.0  # BRACE activation κ of private_retrieve and of every CLI flag
DEFAULT_RELEASE = "auto"  # BRACE release mode when none is given (one of RELEASE_MODES)
FIXED = "fixed sensitivity"  # the release mode of the baselines


@dataclass(frozen=True)
class ReleasePlan:
    """What one call releases and how, decided from public values (:func:`plan_release`).

    Attributes
    ----------
    method : str — one of :data:`METHODS`.
    release : str — ``"smooth"`` (the certificate Δ̄_t), ``"count"`` (noisy-count
        proposal, ``docs/privacy-accounting.md`` §9) or ``"fixed sensitivity"`` (the
        baselines).
    release_rule : str — ``"given"``, or how ``release="auto"`` chose.
    gamma : float — smoothness γ of Δ̄ (0 for fixed sensitivity and the count release).
    gamma_rule : str — ``"given"``, ``"fraction-0.9"``, ``"gates"``,
        ``"none (count release)"`` or ``"none (fixed sensitivity)"``.
    steps : int — horizon T. radius : float — r.
    kappa : float — activation κ of the correction that runs: as given for smooth BRACE;
        ∞ for the count release and the baselines, which never correct (whatever κ the
        caller passed). kappa_rule : str — ``"given"``, ``"given (…)"`` when no bank can
        activate the correction, or ``"none (…)"`` when no correction runs.
    accounting : str — ``"rdp"`` or ``"paper"``.
    output_projection : bool — project release t onto ``B̄(q, (t+1)r)``.
    n, dim : int — bank size and dimension (public). queries : int — queries per call.
    noise_multiplier : float — noise std per unit of sensitivity, ``1/sqrt(2ρ)`` (1 for a
        plan without budget, which evaluates the mechanism along a fixed history).
    spent : PrivacySpent or None — the calibration, composed over ``queries``
        (``PrivacySpent.for_queries``); None without budget.
    count_share : float or None — count release: share of the per-step zCDP budget spent
        on the noisy count (its ε_c, δ_c and margin are in ``spent``).
    proposal_delta : float or None — count release: share of δ given to the proposals'
        failure probability (``δ_c = proposal_delta·δ/T``).
    noise : str — ``"plain"`` (numpy, floating point, seeded) or ``"secure"`` (exact
        discrete noise on a public grid from the operating system's CSPRNG,
        ``docs/privacy-accounting.md`` §13). noise_rule : str — ``"given"`` or how
        ``noise="auto"`` chose (secure without a seed, plain with one).
    """

    method: str
    release: str
    release_rule: str
    gamma: float
    gamma_rule: str
    steps: int
    radius: float
    kappa: float
    accounting: str
    output_projection: bool
    n: int
    dim: int
    queries: int
    noise_multiplier: float
    spent: PrivacySpent | None
    count_share: float | None = None
    proposal_delta: float | None = None
    kappa_rule: str = "given"
    noise: str = "plain"
    noise_rule: str = "given"

    @property
    def is_private(self) -> bool:
        """False for ``"naive"`` (NOT differentially private: its noise reveals m_t)."""
        return self.method in PRIVATE_METHODS

    @property
    def scale_is_public(self) -> bool:
        """Whether every step's noise scale is a public value: the count release (from the
        released noisy count), global and endpoint; not the smooth certificate Δ̄_t nor
        the naive ``2r/max(1, m_t)``, which depend on the data."""
        return self.release == "count" or self.method in ("global", "endpoint")

    @property
    def smoothing_margin(self) -> float:
        """``γ − γ'`` of the smooth certificate's weights: ``2·10⁻¹⁵`` with plain noise,
        ``2^-30`` with secure noise (room for σ²'s rational rounding, Theorem 11 of
        ``docs/privacy-accounting.md`` §13)."""
        return SMOOTH_RATE_MARGIN if self.noise == "secure" else RATE_MARGIN

    @property
    def releases(self) -> int:
        """Gaussian releases per query: 1 for the endpoint method, else T."""
        return 1 if self.method == "endpoint" else self.steps

    @property
    def theta(self) -> float:
        """Activation threshold on ``‖R_t‖``: ``θ = sqrt(κT)·r`` (∞ for κ = ∞)."""
        return math.sqrt(self.kappa * self.steps) * self.radius if math.isfinite(
            self.kappa) else math.inf

    @property
    def eps_count(self) -> float:
        """Count release: pure DP ε_c of each noisy gate count (0 otherwise)."""
        return self.spent.eps_count if self.spent is not None else 0.0

    @property
    def delta_count(self) -> float:
        """Count release: per-step failure probability δ_c of the proposal (0 otherwise)."""
        return self.spent.delta_count if self.spent is not None else 0.0

    @property
    def count_margin(self) -> int:
        """Count release: the margin M of the proposal ``max(m̃ − M, 1)`` (0 otherwise)."""
        return self.spent.count_margin if self.spent is not None else 0

    def params(self, seed: Any = None) -> dict[str, Any]:
        """The ``params`` record of the release (``PrivateRetrievalResult.params``).

        ``kappa`` is None where κ = ∞ (the count release and the baselines, which never
        correct, or κ = ∞ given), with ``kappa_rule`` saying why: a record that is JSON
        as it stands."""
        return {
            "radius": self.radius,
            "kappa": self.kappa if math.isfinite(self.kappa) else None,
            "kappa_rule": self.kappa_rule,
            "gamma": self.gamma,
            "gamma_rule": self.gamma_rule,
            "release": self.release,
            "release_rule": self.release_rule,
            "steps": self.steps,
            "output_projection": self.output_projection,
            "seed": seed,
            "accounting": self.accounting,
            "noise": self.noise,
            "noise_rule": self.noise_rule,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of every field (``spent`` as ``PrivacySpent.to_dict``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["spent"] = None if self.spent is None else self.spent.to_dict()
        if not math.isfinite(self.kappa):
            out["kappa"] = None
            out["kappa_null_reason"] = f"infinite: {self.kappa_rule}"
        return out

    def __str__(self) -> str:
        lines = [
            f"ReleasePlan: method={self.method!r}, release={self.release!r} "
            f"({self.release_rule})",
            f"  T = {self.steps}, r = {self.radius:g}, kappa = {self.kappa:g} "
            f"[{self.kappa_rule}], n = {self.n}, d = {self.dim}, queries = {self.queries}",
            f"  gamma = {self.gamma:.6g} ({self.gamma_rule}), noise multiplier = "
            f"{self.noise_multiplier:.8g}, output projection = {self.output_projection}"
            + (", noise = secure (exact, OS randomness)" if self.noise == "secure"
               else ", noise = plain (seeded, floating point)")
            + ("" if self.noise_rule == "given" else f" [{self.noise_rule}]"),
        ]
        if self.release == "count":
            lines.append(f"  count release: share {self.count_share:g} of rho, "
                         f"{self.proposal_delta:g} of delta, eps_c = "
                         f"{self.eps_count:.6g}, delta_c = {self.delta_count:.3g}, "
                         f"margin {self.count_margin}")
        if self.spent is not None:
            lines.append("  " + str(self.spent).replace("\n", "\n  "))
        return "\n".join(lines)


def plan_release(
    memory: LSRMemory | tuple[int, int],
    *,
    method: str,
    epsilon: float | None,
    delta: float | None,
    steps: int,
    kappa: float = DEFAULT_KAPPA,
    gamma: float | str | None = None,
    accounting: str = "rdp",
    output_projection: bool = True,
    release: str | None = None,
    queries: int = 1,
    radius: float | None = None,
    noise: str = "auto",
    seeded: bool = False,
) -> ReleasePlan:
    """Validate the mechanism's parameters and decide every choice of a release.

    Nothing here reads the bank's rows: the plan is a function of public values only
    (ε, δ, T, n, d, r and the arguments), so computing it costs no privacy.

    Parameters
    ----------
    memory : LSRMemory or (n, d)
        The memory (its size, dimension and radius are read), or its public shape with
        ``radius`` (to inspect what a call would do without a bank).
    method, epsilon, delta, steps, kappa, gamma, accounting, output_projection
        As in :func:`brace.private_retrieve`. ``epsilon = delta = None`` plans an
        evaluation along a fixed history (:func:`brace.certificate`): no calibration
        (``spent`` None, noise multiplier 1) and γ is used as given (any γ ≥ 0).
    release : {"smooth", "count", "auto"} or None
        None: :data:`DEFAULT_RELEASE` for BRACE with ``accounting="rdp"`` and a budget,
        else ``"smooth"`` (the baselines have fixed sensitivity; the other modes need RDP
        and the budget).
    queries : int
        Queries answered by the call (``spent.epsilon_total`` composes over them).
    radius : float
        Only with ``memory=(n, d)``.
    noise : {"auto", "plain", "secure"}, default "auto"
        ``"secure"``: exact discrete noise on a public grid from the operating system's
        CSPRNG (``docs/privacy-accounting.md`` §13), for every method and release.
        ``"plain"``: numpy's float64 noise from a seeded generator (reproducible; its low
        bits can reveal the pre-noise point, ``docs/audit.md`` §9). ``"auto"``: secure
        unless ``seeded``.
    seeded : bool, default False
        Whether the call passes a seed (``noise="auto"`` then means plain;
        ``noise="secure"`` is then refused: :data:`brace.secure.SECURE_SEED_REASON`).

    Returns
    -------
    ReleasePlan

    Notes
    -----
    The choices, in order (``docs/spec.md`` §2–§4):

    1. **Release mode** (BRACE; the baselines have fixed sensitivity). ``"smooth"``: step
       noise ``N(0, (Δ̄_t/sqrt(2ρ))² I)`` with the smooth certificate Δ̄_t
       (``docs/spec.md`` §5). ``"count"``: a noisy gate count ``m̃_t`` (two-sided
       geometric, pure ε_c-DP) proposes the public ``b_t`` and the step adds
       ``N(0, (b_t/sqrt(2ρ_G))² I)`` (``docs/privacy-accounting.md`` §9). ``"auto"``
       (§10): with a γ from the caller (a number or ``"gates"``), the smooth release with
       it; otherwise :func:`brace.policy.choose_release` — of the smooth release with
       the largest γ and the count release with the largest count share whose noise
       never exceeds 1.05× the global mechanism's, the one with the smaller predicted
       noise/oracle ratio over gate sizes; the count release is offered only when no
       correction can fire (κ = ∞, or ``κ ≥ no_correction_kappa(T)`` with the output
       projection).
    2. **γ** (smooth BRACE). A number: as given (> 0). None: the fraction-0.9 rule
       :func:`brace.policy.choose_gamma` (largest γ with ``ρ(γ) ≥ 0.9 ρ(0)``,
       ``docs/privacy-accounting.md`` §6). ``"gates"``: the gate-size rule
       :func:`brace.policy.choose_gamma_for_gates`,
       ``argmin_γ max_{m ≥ m_min} gate_factor(γ, m, n)·sqrt(ρ_0/ρ(γ))`` (§6).
    3. **Calibration.** Smooth and fixed sensitivity: the per-step ρ of
       :func:`brace.accounting.calibrate` that spends exactly (ε, δ) over the
       ``releases`` steps (1 for the endpoint method, else T; §6). Count:
       :func:`brace.accounting.calibrate_count`, ``ρ_s`` split into the count's
       ``(ε_c + log(1/(1 − δ_c)))²/2 = share·ρ_s`` and the Gaussian's
       ``ρ_G = (1 − share)·ρ_s``, ``δ_c = f·δ/T`` (share 0.09 and ``f = 1/2`` for
       ``release="count"``; the choice's for ``"auto"``) and the margin
       ``M = ⌈log(1/(δ_c(1 + e^{−ε_c})))/ε_c⌉`` (§9). The noise multiplier is
       ``1/sqrt(2ρ)`` (``1/sqrt(2ρ_G)`` for the count release).
    4. **κ as it runs.** Smooth BRACE records κ as given (``kappa_rule`` notes when no
       bank can activate the correction, ``docs/privacy.md`` §4). The count release and
       the baselines never correct: they record ``κ = ∞`` with ``kappa_rule`` saying so,
       whatever κ was passed (``docs/spec.md`` §2; ``docs/privacy-accounting.md`` §9).
    """
    a = _checked(memory, method=method, epsilon=epsilon, delta=delta, steps=steps,
                 kappa=kappa, gamma=gamma, accounting=accounting,
                 output_projection=output_projection, release=release, queries=queries,
                 radius=radius, noise=noise, seeded=seeded)
    n, dim, method, accounting, budget = a.n, a.dim, a.method, a.accounting, a.budget
    eps, dlt, T, kap, proj = a.eps, a.dlt, a.steps, a.kappa, a.proj
    gamma, gamma_rule, release, noise, brace = a.gamma, a.gamma_rule, a.release, a.noise, a.brace
    common = dict(method=method, steps=T, radius=a.radius, accounting=accounting,
                  output_projection=proj, n=n, dim=dim, queries=a.queries, noise=noise,
                  noise_rule=a.noise_rule)
    if not budget:
        return ReleasePlan(**common, **_kappa_record(kap, brace, release, proj, T),
                           release=release if brace else FIXED,
                           release_rule="given", gamma=gamma,
                           gamma_rule=gamma_rule if brace else "none (fixed sensitivity)",
                           noise_multiplier=1.0, spent=None)

    # 1. the release mode
    release_rule = "given"
    share = f_delta = None
    if release == "auto":
        if gamma_rule in ("given", "gates"):  # a γ from the caller: the smooth release
            release, release_rule = "smooth", "auto: smooth (gamma given by the caller)"
        else:
            # the count release has no correction: offered only where none can fire
            no_correction = not math.isfinite(kap) or (proj and kap >= no_correction_kappa(T))
            choice = _policy.choose_release(eps, dlt, T, dim=dim, n=n, allow_count=no_correction)
            release, release_rule = choice.release, choice.rule
            if release == "smooth":
                gamma = choice.gamma
                gamma_rule = f"auto (largest within {choice.max_global_ratio:g}x global noise)"
            else:
                share, f_delta = choice.count_share, choice.proposal_delta
    # 2. γ (the "gates" rule, when asked for and needed) and 3. the calibration
    if release == "count":
        if share is None:
            share, f_delta = _acc.COUNT_SHARE, _acc.COUNT_PROPOSAL_DELTA
        spent = _calibrate_count(eps, dlt, T, dim, share, f_delta)
        gamma_rule = "none (count release)"
    else:
        if gamma_rule == "gates" and gamma is None and brace and accounting == "rdp":
            gamma = _gamma_for_gates(eps, dlt, T, dim, n)
        spent = _calibrate(eps, dlt, 1 if method == "endpoint" else T, dim,
                           gamma if brace else 0.0, accounting, method)
    if noise == "secure" and brace and release != "count":
        _check_secure_smooth(spent.gamma, n)
    return ReleasePlan(
        **common,
        **_kappa_record(kap, brace, release, proj, T),
        release=release if brace else FIXED,
        release_rule=release_rule,
        gamma=spent.gamma,
        gamma_rule=gamma_rule if brace else "none (fixed sensitivity)",
        noise_multiplier=spent.noise_multiplier,
        spent=spent.for_queries(a.queries),
        count_share=share,
        proposal_delta=f_delta,
    )


@dataclass(frozen=True)
class _Args:
    """The arguments of :func:`plan_release`, checked (names as there)."""

    n: int
    dim: int
    radius: float
    method: str
    noise: str
    noise_rule: str
    budget: bool
    eps: float | None
    dlt: float | None
    steps: int
    kappa: float
    accounting: str
    brace: bool
    gamma: Any
    gamma_rule: str
    proj: bool
    queries: int
    release: str


def _checked(memory: Any, *, method: Any, epsilon: Any, delta: Any, steps: Any, kappa: Any,
             gamma: Any, accounting: Any, output_projection: Any, release: Any,
             queries: Any, radius: Any, noise: Any, seeded: Any) -> _Args:
    """Every argument of :func:`plan_release` checked, in the order the errors are
    raised (each names the argument and echoes the value), and the release mode's
    default; no choice is made here."""
    n, dim, r = _shape(memory, radius)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
    noise, noise_rule = resolve_noise(check_noise(noise), check_bool("seeded", seeded))
    budget = epsilon is not None or delta is not None
    if budget:
        eps = check_privacy_epsilon(epsilon)  # the ranges a ledger records (and reads)
        dlt = check_privacy_delta(delta)
    T = check_steps(steps)
    kap = check_nonnegative("kappa", kappa, allow_inf=True)
    if accounting not in _acc.ACCOUNTING_RULES:
        raise ValueError(f"accounting must be 'rdp' or 'paper'; got {accounting!r}.")
    brace = method == "brace"
    if budget:
        gamma, gamma_rule = _check_gamma(gamma, method, accounting)
    else:  # along a fixed history: γ as given; γ = 0 is the fixed-sensitivity bound
        gamma, gamma_rule = check_nonnegative("gamma", gamma), "given"
    proj = check_bool("output_projection", output_projection)
    Q = check_int_at_least("queries", queries, 1)
    if release is None:
        release = DEFAULT_RELEASE if brace and accounting == "rdp" and budget else "smooth"
    if release not in RELEASE_MODES:
        raise ValueError(f"release must be 'smooth', 'count' or 'auto'; got {release!r}.")
    if release == "auto" and (not brace or accounting != "rdp"):
        raise ValueError("release='auto' is a BRACE choice with accounting='rdp'; got "
                         f"method={method!r}, accounting={accounting!r}.")
    if release == "count" and (not brace or accounting != "rdp"):
        raise ValueError("release='count' is a BRACE release with accounting='rdp'; got "
                         f"method={method!r}, accounting={accounting!r}.")
    if not budget and release != "smooth":
        raise ValueError(f"release={release!r} needs the budget (epsilon, delta): its split "
                         "and margin are calibrated from it.")
    return _Args(n=n, dim=dim, radius=r, method=method, noise=noise, noise_rule=noise_rule,
                 budget=budget, eps=eps if budget else None, dlt=dlt if budget else None,
                 steps=T, kappa=kap, accounting=accounting, brace=brace, gamma=gamma,
                 gamma_rule=gamma_rule, proj=proj, queries=Q, release=release)


def _kappa_record(kappa: float, brace: bool, release: str, proj: bool,
                  steps: int) -> dict[str, Any]:
    """The κ that runs, and why: a release without correction records ∞, never the κ the
    caller passed (it would claim a correction that did not run)."""
    if not brace:
        return {"kappa": math.inf, "kappa_rule": "none (fixed sensitivity: no correction)"}
    if release == "count":
        return {"kappa": math.inf, "kappa_rule": "none (count release: no correction)"}
    if math.isfinite(kappa) and proj and kappa >= no_correction_kappa(steps):
        return {"kappa": kappa, "kappa_rule": "given (no correction can fire: kappa >= "
                "no_correction_kappa(T) with the output projection)"}
    if not math.isfinite(kappa):
        return {"kappa": kappa, "kappa_rule": "given (infinite: the correction never "
                "activates)"}
    return {"kappa": kappa, "kappa_rule": "given"}


def _check_secure_smooth(gamma: float, n: int) -> None:
    """Theorem 11's public conditions for the smooth release with secure noise
    (``docs/privacy-accounting.md`` §13): ``γ ≥ 10⁻⁹`` (orders below ``2^30``) and
    ``n ≤ 2^30`` (the noise std at most ``2^52`` grid units)."""
    if not gamma >= MIN_SECURE_GAMMA:
        raise ValueError(f"secure noise for the smooth release needs gamma >= "
                         f"{MIN_SECURE_GAMMA:g}; got gamma = {gamma:g}. Use a larger gamma, "
                         "or release='count'.")
    if n > MAX_SECURE_SMOOTH_N:
        raise ValueError(f"secure noise for the smooth release supports n <= 2^30 memories; "
                         f"the bank has n = {n}. Use release='count' or method='global'.")


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


def _shape(memory: Any, radius: Any) -> tuple[int, int, float]:
    """``(n, d, r)`` of a memory, or of a public shape ``(n, d)`` with ``radius``."""
    if isinstance(memory, LSRMemory):
        if radius is not None:
            raise TypeError("radius is read from the memory; pass radius= only with "
                            f"memory=(n, d). Found radius={radius!r}.")
        return memory.n_memories, memory.dim, memory.radius_
    if isinstance(memory, tuple) and len(memory) == 2:
        n = check_int_at_least("n (memory[0])", memory[0], 1)
        d = check_int_at_least("d (memory[1])", memory[1], 1)
        if radius is None:
            raise TypeError("radius is required with memory=(n, d); pass radius=r.")
        return n, d, check_radius_beta(None, radius)
    raise TypeError(f"memory must be an LSRMemory or a shape (n, d); got "
                    f"{type(memory).__name__}.")


def _check_gamma(gamma: Any, method: str, accounting: str) -> tuple[Any, str]:
    """Validate γ; returns ``(γ or None, rule)``. The rules are evaluated later, when the
    release mode is known (the count release has no γ)."""
    if isinstance(gamma, str):
        if gamma != "gates":
            raise ValueError(
                f"gamma must be a number > 0, None (the fraction-0.9 rule) or 'gates' (the "
                f"gate-size rule); got {gamma!r}."
            )
        if method == "brace" and accounting != "rdp":
            raise ValueError("gamma='gates' is defined for accounting='rdp'.")
        return None, "gates"
    if gamma is None:
        return None, "fraction-0.9"
    g = check_nonnegative("gamma", gamma)
    if method == "brace" and g == 0:
        raise ValueError("gamma must be > 0 for BRACE (γ = 0 is global sensitivity).")
    return g, "given"


@functools.lru_cache(maxsize=64)
def _gamma_for_gates(eps: float, dlt: float, T: int, d: int, n: int) -> float:
    """The gate-size rule's γ (memoised: a deterministic function of public values that
    costs seconds)."""
    g = _policy.choose_gamma_for_gates(eps, dlt, T, dim=d, n=n)
    if check_nonnegative("gamma", g) == 0:  # pragma: no cover - the rule returns γ > 0
        raise ValueError("gamma must be > 0 for BRACE (γ = 0 is global sensitivity).")
    return g


@functools.lru_cache(maxsize=256)
def _calibrate_count(eps: float, dlt: float, steps: int, dim: int, share: float,
                     f_delta: float) -> PrivacySpent:
    """:func:`brace.accounting.calibrate_count`, memoised like :func:`_calibrate`: a
    call's count release is calibrated once per (ε, δ, T, d, share), not once per call."""
    return _acc.calibrate_count(eps, dlt, steps, dim=dim, count_share=share,
                                proposal_delta=f_delta)


@functools.lru_cache(maxsize=256)
def _calibrate(eps: float, dlt: float, releases: int, dim: int, gamma: float | None,
               accounting: str, method: str) -> PrivacySpent:
    """:func:`brace.accounting.calibrate`, memoised on its (scalar, validated) arguments:
    the calibration is a deterministic function of public values, and the γ rule costs
    tens of ms."""
    return _acc.calibrate(eps, dlt, releases, dim=dim, gamma=gamma, accounting=accounting,
                          mechanism=method)


def recorded_kappa(params: Mapping[str, Any]) -> float:
    """The κ a ``params`` record says ran: None (null in a file) is κ = ∞."""
    k = params.get("kappa", DEFAULT_KAPPA)
    return math.inf if k is None else float(k)


def no_correction_kappa(steps: int) -> float:
    """Smallest κ of the form ``(2T+1)²/T·(1 + 10⁻⁶)``: with the output projection no bank
    can activate the correction, so BRACE is smooth-sensitivity private mean shift.

    In exact arithmetic ``κ ≥ (2T+1)²/T`` suffices (``docs/privacy.md`` §4); the relative
    ``10⁻⁶`` covers the public rounding slack (§8) for inputs whose slack is below
    ``10⁻⁷ r`` (every bank within ``~10⁶ r`` of the origin).
    """
    T = check_steps(steps)
    return (2 * T + 1) ** 2 / T * (1.0 + 1e-6)
