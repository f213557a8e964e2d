"""The release policy: which smoothness γ and which release mode a BRACE call uses.

Every choice here depends on public values only (ε, δ, T, d, n), never on the data
(``docs/spec.md`` §4, ``docs/privacy-accounting.md`` §6 and §10):

* :func:`choose_gamma`: the largest γ that keeps a fraction of the γ = 0 budget;
* :func:`choose_gamma_for_gates`: the minimax γ over gate sizes (with :func:`gate_factor`);
* :func:`choose_release` / :class:`ReleaseChoice`: the default release, smooth or count,
  with :func:`predicted_noise_ratio` for the predicted noise of each.

The policy spends nothing itself: it calls the accounting (:mod:`brace.accounting`), which
never imports it. :mod:`brace.plan` turns its choices into a release plan.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from ._validation import check_int_at_least, check_positive
from .accounting import PrivacySpent, calibrate_count
from .accounting.calibration import (
    GAMMA_MAX,
    _calibrate_rho,
    _check_common,
    _choose_gamma,
    _count_epsilon,
    _count_rho,
)
from .sensitivity import n_terms

__all__ = [
    "choose_gamma",
    "choose_gamma_for_gates",
    "gate_factor",
    "predicted_noise_ratio",
    "choose_release",
    "ReleaseChoice",
    "AUTO_GLOBAL_RATIO",
    "AUTO_PROPOSAL_DELTA",
    "COUNT_SHARE_MAX",
    "GATE_RULE_MARGIN",
]

GATE_RULE_MARGIN = 20.0  # m_min = ceil(20 log(1/δ) / ε): the gates the rule optimises for
AUTO_GLOBAL_RATIO = 1.05  # the default release never adds more than this × global noise
AUTO_PROPOSAL_DELTA = 0.1  # share of δ given to the count proposals' failures (auto)
COUNT_SHARE_MAX = 0.5  # the largest share the default release considers


def choose_gamma(
    epsilon: float, delta: float, steps: int, *, dim: int, fraction: float = 0.9
) -> float:
    """Data-independent smoothness: the largest γ whose calibrated ρ is ≥ ``fraction`` × ρ(γ=0).

    Depends only on the public (ε, δ, T, d, fraction), never on the data (``docs/spec.md`` §4).
    Because ``ε(ρ, γ)`` is nondecreasing in both arguments, ``calibrate_rho(γ) ≥ f·ρ_0``
    iff ``ε(f·ρ_0, γ) ≤ ε``, so the rule is a root search on ``log γ`` (Brent's method, one
    accounting call each, relative tolerance 1e-7), returning the feasible end.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    f = check_positive("fraction", fraction)
    if f > 1.0:
        raise ValueError(f"fraction must lie in (0, 1]. Found {f}.")
    return _choose_gamma(eps, dl, t, d, f)


def gate_factor(gamma: float, m: np.ndarray, n: int) -> np.ndarray:
    """``Δ̄ / (2r/m)`` of the fixed-centre certificate for a gate of ``m`` memories.

    ``Δ̄ = max(max_{k ≤ K} e^{-γk}·2r/max(m − k, 1), e^{-γ(K+1)}·2r)`` with
    ``K = min(n − 1, ⌈log n / γ⌉, 4096)`` (``brace.sensitivity``): the factor by which the
    smooth bound exceeds the oracle ``2r/m`` that knows the gate size. Data independent.
    """
    m = np.atleast_1d(np.asarray(m, dtype=np.float64))
    K = n_terms(n, gamma)
    k = np.arange(K + 1, dtype=np.float64)
    F = np.exp(-gamma * k)[None, :] / np.maximum(m[:, None] - k[None, :], 1.0)
    tail = math.exp(-gamma * (K + 1))
    return m * np.maximum(F.max(axis=1), tail)


def choose_gamma_for_gates(
    epsilon: float, delta: float, steps: int, *, dim: int, n: int,
    m_min: int | None = None,
) -> float:
    """Data-independent γ, near-optimal across gate sizes (``docs/privacy-accounting.md`` §6).

    With ``J(γ, m) = gate_factor(γ, m, n) · sqrt(ρ_0 / ρ(γ))`` — the noise std of BRACE
    without correction for a gate of ``m`` memories divided by the oracle's
    ``(2r/m)/sqrt(2ρ_0)``, ``ρ(γ)`` the calibrated per-step ρ
    (:func:`brace.accounting.calibrate_rho`) and ``ρ_0`` its γ = 0 value — the rule is the
    minimax choice over gate sizes::

        γ* = argmin_γ max_{m ∈ [m_min, n]} J(γ, m),

    over a log grid of 40 values of γ in ``[1e-4, GAMMA_MAX]`` (the feasible ones),
    refined by a golden-section search between the grid neighbours of the best.
    ``m_min`` defaults to ``⌈20·log(1/δ)/ε⌉`` (clipped to ``[2, n]``). Depends only on the
    public ``(ε, δ, T, d, n, m_min)``; memoised.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    nn = check_int_at_least("n", n, 1)
    if m_min is None:
        m0 = math.ceil(GATE_RULE_MARGIN * math.log(1.0 / dl) / eps)
    else:
        m0 = check_int_at_least("m_min", m_min, 1)
    m0 = int(min(max(m0, 2), max(nn, 2)))
    return _gate_rule(eps, dl, t, d, nn, m0)


@functools.lru_cache(maxsize=512)
def _gate_rule(eps: float, dl: float, t: int, d: int, n: int, m0: int) -> float:
    rho0 = _calibrate_rho(eps, dl, t, d, 0.0)
    ms = np.unique(np.round(np.geomspace(m0, max(n, m0), 40)))

    def worst(log_g: float) -> float:  # max over gates of noise std / oracle
        g = math.exp(log_g)
        try:
            rho = _calibrate_rho(eps, dl, t, d, g)
        except ValueError:  # γ infeasible for (ε, δ, T, d)
            return math.inf
        return float(gate_factor(g, ms, n).max()) * math.sqrt(rho0 / rho)

    grid = np.linspace(math.log(1e-4), math.log(GAMMA_MAX), 40)
    vals = []
    for x in grid:
        vals.append(worst(float(x)))
        if not math.isfinite(vals[-1]):  # larger γ are infeasible too
            break
    i = int(np.argmin(vals))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(vals) - 1)])
    phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = worst(a), worst(b)
    for _ in range(12):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = worst(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = worst(b)
    return math.exp(min([(vals[i], float(grid[i])), (fa, a), (fb, b)])[1])


def _gate_grid(eps: float, dl: float, n: int) -> tuple[int, np.ndarray]:
    """``m_min = ⌈20·log(1/δ)/ε⌉`` (clipped to ``[2, n]``) and 40 log-spaced gates in
    ``[m_min, n]``."""
    # -log(δ), not log(1/δ): 1/δ overflows for a subnormal δ
    m0 = int(min(max(math.ceil(GATE_RULE_MARGIN * -math.log(dl) / eps), 2), max(n, 2)))
    return m0, np.unique(np.round(np.geomspace(m0, max(n, m0), 40)))


def _count_ratio(ms: np.ndarray, spent: PrivacySpent, rho0: float) -> np.ndarray:
    """Predicted count-release noise / oracle at gates ``ms`` (median proposal ``m − M``)."""
    return ms / np.maximum(ms - spent.count_margin, 1.0) * math.sqrt(rho0 / spent.rho_per_step)


def predicted_noise_ratio(
    release: str, epsilon: float, delta: float, steps: int, *, dim: int, n: int,
) -> tuple[float, float, float | None]:
    """Predicted step noise std / oracle over gates ``m ∈ [m_min, n]`` (public values only).

    ``"smooth"``: with the gate-size γ (:func:`choose_gamma_for_gates`),
    ``gate_factor(γ, m, n)·sqrt(ρ_0/ρ(γ))``. ``"count"``: with the median proposal
    ``m − margin``, ``m/max(m − margin, 1)·sqrt(ρ_0/ρ_G)``. Returns the geometric mean over a
    log grid of 40 gate sizes, the worst ratio, and the γ (None for the count release).
    The default release (:func:`choose_release`) compares the same predictions under its
    cap on the ratio to the global mechanism.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    nn = check_int_at_least("n", n, 1)
    m0, ms = _gate_grid(eps, dl, nn)
    rho0 = _calibrate_rho(eps, dl, t, d, 0.0)
    if release == "smooth":
        g = _gate_rule(eps, dl, t, d, nn, m0)
        ratio = gate_factor(g, ms, nn) * math.sqrt(rho0 / _calibrate_rho(eps, dl, t, d, g))
    elif release == "count":
        ratio = _count_ratio(ms, calibrate_count(eps, dl, t, dim=d), rho0)
        g = None
    else:
        raise ValueError(f"release must be 'smooth' or 'count'; got {release!r}.")
    return float(np.exp(np.mean(np.log(ratio)))), float(ratio.max()), g


@dataclasses.dataclass(frozen=True)
class ReleaseChoice:
    """What :func:`choose_release` picked for a BRACE call, from public values only.

    ``release``: ``"smooth"`` (certificate, smoothness ``gamma``) or ``"count"``
    (noisy-count proposal, ``count_share`` of each step's zCDP budget, a share
    ``proposal_delta`` of δ for the proposals' failures). ``predicted``: the geometric-mean
    predicted noise / oracle of each admissible candidate; ``global_ratio``: the chosen
    mode's noise bound relative to the global mechanism (≤ ``max_global_ratio``).
    """

    release: str
    gamma: float | None
    count_share: float | None
    proposal_delta: float | None
    global_ratio: float
    max_global_ratio: float
    predicted: dict

    @property
    def rule(self) -> str:
        """One line for ``params["release_rule"]``."""
        pred = ", ".join(f"{k} {v:.3g}" for k, v in self.predicted.items())
        return (f"auto: least predicted noise/oracle (geometric mean over gate sizes; {pred}) "
                f"among modes never above {self.max_global_ratio:g}x global noise")


def choose_release(
    epsilon: float, delta: float, steps: int, *, dim: int, n: int,
    max_global_ratio: float = AUTO_GLOBAL_RATIO, allow_count: bool = True,
) -> ReleaseChoice:
    """The default BRACE release, chosen from public ``(ε, δ, T, d, n)`` only
    (``docs/privacy-accounting.md`` §10).

    Two candidates, each restricted so that its noise std never exceeds
    ``max_global_ratio`` times the global mechanism's (``2r + σ`` over ``sqrt(2ρ_0)``)
    at any bank — a bound that holds at every step because both sensitivities are capped at
    ``2r + σ``:

    * smooth: the largest γ with ``sqrt(ρ_0/ρ(γ)) ≤ max_global_ratio`` (:func:`choose_gamma`
      with fraction ``1/max_global_ratio²``) — within that factor of the minimax γ over
      gate sizes restricted to the same set, since ``gate_factor`` decreases in γ;
    * count: the largest count share with ``sqrt(ρ_0/ρ_G) ≤ max_global_ratio``
      (``ρ_G = (1 − share)·ρ_s``, closed form), a tenth of δ for the proposals.

    It returns the one with the smaller geometric-mean predicted noise/oracle ratio over
    gate sizes ``m ∈ [⌈20·log(1/δ)/ε⌉, n]``; ``allow_count=False`` (the caller wants the
    boundary correction, which the count release lacks) leaves only the smooth candidate.
    Memoised; deterministic.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    nn = check_int_at_least("n", n, 1)
    lim = check_positive("max_global_ratio", max_global_ratio)
    if not lim > 1.0:
        raise ValueError(f"max_global_ratio must be > 1 (1 is the global mechanism itself); "
                         f"got {lim}.")
    if not isinstance(allow_count, bool):
        raise TypeError(f"allow_count must be True or False; got {allow_count!r}.")
    return _choose_release(eps, dl, t, d, nn, lim, allow_count)


@functools.lru_cache(maxsize=512)
def _choose_release(eps: float, dl: float, t: int, d: int, n: int, lim: float,
                    allow_count: bool = True) -> ReleaseChoice:
    _, ms = _gate_grid(eps, dl, n)
    rho0 = _calibrate_rho(eps, dl, t, d, 0.0)
    strict = lim * (1.0 - 1e-6)  # room for the grid rounding of the bounds
    pred: dict = {}
    cand: list = []
    # The largest admissible γ: gate_factor decreases in γ and sqrt(ρ_0/ρ(γ)) ∈ [1, lim] on
    # the admissible set, so it is within lim of the constrained minimax (§10).
    g = _choose_gamma(eps, dl, t, d, 1.0 / (strict * strict))
    if g > 0.0:
        gr = math.sqrt(rho0 / _calibrate_rho(eps, dl, t, d, g))
        w = float(np.exp(np.mean(np.log(gate_factor(g, ms, n) * gr))))
        pred["smooth"] = w
        cand.append((w, "smooth", g, None, gr))
    f = AUTO_PROPOSAL_DELTA
    # The count release exists only where ε > log(1/(1 − fδ)) and its count budget ε_c is
    # positive (§9); elsewhere (ε below about δ/10) only the smooth candidate remains.
    rho_s = _count_rho(eps, dl, t, d, f)
    share = 0.0
    if rho_s is not None:
        share = min(COUNT_SHARE_MAX, 1.0 - rho0 / (strict * strict * rho_s))
        if share > 0.0 and not _count_epsilon(rho_s, share, f * dl / t) > 0.0:
            share = 0.0
    if allow_count and share > 0.0:
        sp = calibrate_count(eps, dl, t, dim=d, count_share=share, proposal_delta=f)
        w = float(np.exp(np.mean(np.log(_count_ratio(ms, sp, rho0)))))
        pred["count"] = w
        cand.append((w, "count", None, share, math.sqrt(rho0 / sp.rho_per_step)))
    if not cand:  # a cap this close to 1 leaves no room for a positive γ or count share
        raise ValueError(f"no release mode stays within {lim:g}x global noise at "
                         f"epsilon={eps}, delta={dl}, T={t}, d={d}.")
    w, rel, gam, share, gr = min(cand, key=lambda c: c[0])
    return ReleaseChoice(rel, gam, share, f if rel == "count" else None, gr, lim, pred)
