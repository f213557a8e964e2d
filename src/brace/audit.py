"""Empirical privacy audit: a statistically valid lower bound on ε (``docs/audit.md``).

The proof in ``docs/privacy.md`` is the guarantee; the audit tests that the *code*
matches it, in the style of DP-Sniper (Bichsel et al. 2021) and of the auditing papers
of Jagielski et al. (2020) and Nasr et al. (2021). For a mechanism configuration, a
public query ``q`` and a pair of neighbouring banks ``D ~ D'`` (one replaced row, spec
§1), the mechanism is run many times on each bank and a threshold test on a statistic
``S`` of the release decides "D" or "D'". If the mechanism is (ε, δ)-DP then for every
threshold τ (with ``FPR = P_D(S > τ)``, ``FNR = P_{D'}(S ≤ τ)``)::

    1 − FNR ≤ e^ε · FPR + δ      and      1 − FPR ≤ e^ε · FNR + δ,

so with one-sided Clopper–Pearson upper confidence bounds ``FPR_U ≥ FPR``, ``FNR_U ≥ FNR``
(Bonferroni over the thresholds and the pairs), with probability ``≥ 1 − α``::

    ε ≥ ε_lb = max{0, ln((1 − δ − FNR_U)/FPR_U), ln((1 − δ − FPR_U)/FNR_U)}.

Statistic (default). The exact log-likelihood ratio of the released trajectory,
``S(Y) = log p_{D'}(Y_{1:T}) − log p_D(Y_{1:T})``. Given the public history ``Y_{<t}``,
step ``t`` of an iterative method releases ``Y_t ~ N(μ_t(D; Y_{<t}), s_t(D; Y_{<t})² I_d)``
(spec §3 steps 4–5), so::

    log p_D(Y) = Σ_t [ −‖Y_t − μ_t(D)‖² / (2 s_t(D)²) − d·log s_t(D) ] + const,

where ``μ_t`` (the pre-noise point ``Q_t``, or ``Φ_D(Y_{t-1})`` for the baselines) and
the noise-scale sensitivity are recomputed for **both** banks along the **observed**
prefix by :func:`brace.certificate`, and ``s_t = noise_scale_t / sqrt(2ρ_step)``. The
``d·log s_t`` terms carry the information leaked by a data-dependent noise scale (they
grow with ``d``). The endpoint method releases ``z_T + N(0, (2Tr)²/(2ρ) I_d)`` once. The
audit runs every mechanism with ``output_projection=False``: the projection onto
``B̄(q, (t+1)r)`` is post-processing (it uses only public ``q, t, r``), so auditing the
unprojected release audits a mechanism that reveals at least as much, and its density
is exactly Gaussian per step.

Pairs. Unless a replacement is given, :func:`candidate_pairs` proposes replacements
that flip gate membership on the boundaries (around ``q``, the clean trajectory and
released states), duplicate rows, move the smooth bound ``Δ̄`` (or the noise scale)
the most, and far outliers; cheap *screening* runs rank them, *pilot* runs choose the
pair(s) and the thresholds, and only *fresh* runs are counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from . import accounting as _accounting
from ._validation import (
    check_bank,
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_queries,
    check_radius_beta,
    check_rng,
    check_steps,
)
from .experiments._common import NOT_DP_LABEL
from .mechanisms import (
    METHODS,
    PRIVATE_METHODS,
    NotPrivateWarning,
    certificate,
    endpoint_sensitivity,
    private_retrieve,
)
from .memory import LSRMemory

__all__ = [
    "AuditConfig",
    "AuditResult",
    "Pair",
    "PairCertificate",
    "audit",
    "candidate_pairs",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "error_counts",
    "certify_thresholds",
    "log_likelihood_ratio",
    "ReportConfig",
    "report",
    "report_bank",
    "report_cases",
    "format_report",
    "add_cli",
]

_REL_BOUNDARY = 1e-6  # relative offset of "just inside/outside the boundary" candidates


# ======================================================================================
# Statistics: Clopper–Pearson and the ε lower bound
# ======================================================================================


def clopper_pearson_upper(k: Any, n: Any, alpha: float) -> np.ndarray:
    """One-sided ``1 − α`` Clopper–Pearson upper confidence bound on a binomial rate.

    ``U(k, n) = Beta⁻¹(1 − α; k + 1, n − k)`` for ``k < n`` and ``1`` for ``k = n``
    (Clopper & Pearson 1934): ``P_p(U(K, n) ≥ p) ≥ 1 − α`` for every ``p`` when
    ``K ~ Bin(n, p)``. For ``k = 0`` this is ``1 − α^{1/n}``. Vectorised over ``k, n``.

    >>> round(float(clopper_pearson_upper(0, 10, 0.05)), 6)
    0.258866
    """
    a = _check_alpha(alpha)
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(~np.isfinite(k)) or np.any(~np.isfinite(n)):
        raise ValueError("clopper_pearson_upper: k and n must be finite.")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"clopper_pearson_upper needs 0 <= k <= n and n >= 1; got k={k}, n={n}.")
    full = k >= n
    out = stats.beta.ppf(1.0 - a, k + 1.0, np.where(full, 1.0, n - k))
    return np.where(full, 1.0, out)


def epsilon_lower_bound(fpr_upper: Any, fnr_upper: Any, delta: float) -> np.ndarray:
    """``max{0, ln((1 − δ − FNR_U)/FPR_U), ln((1 − δ − FPR_U)/FNR_U)}`` elementwise.

    Conventions: a term whose numerator is ``≤ 0`` contributes nothing (it certifies no
    ε); ``FPR_U = 0`` (or ``FNR_U = 0``) with a positive numerator gives ``+inf`` (only
    possible for exact rates, never for Clopper–Pearson bounds, which are ``> 0``).

    >>> round(float(epsilon_lower_bound(0.01, 0.5, 0.0)), 6)  # ln(0.5/0.01) = ln 50
    3.912023
    """
    dl = float(delta)
    if not 0.0 <= dl < 1.0:
        raise ValueError(f"delta must lie in [0, 1). Found {delta}.")
    p = np.asarray(fpr_upper, dtype=np.float64)
    f = np.asarray(fnr_upper, dtype=np.float64)
    if np.any(~((p >= 0) & (p <= 1))) or np.any(~((f >= 0) & (f <= 1))):
        raise ValueError("epsilon_lower_bound: rates must lie in [0, 1].")
    return np.maximum(_log_ratio(1.0 - dl - f, p), _log_ratio(1.0 - dl - p, f))


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``max(0, ln(num/den))`` with ``num ≤ 0 → 0`` and ``den = 0 < num → inf``."""
    num, den = np.broadcast_arrays(num, den)
    out = np.zeros(num.shape)
    pos = num > 0
    zero_den = pos & (den <= 0)
    ok = pos & ~zero_den
    out[ok] = np.maximum(0.0, np.log(num[ok]) - np.log(den[ok]))
    out[zero_den] = math.inf
    return out


def error_counts(
    stat_d: Any, stat_dprime: Any, thresholds: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Errors of the tests "say D' iff S > τ": ``FP(τ) = #{S_D > τ}``, ``FN(τ) = #{S_D' ≤ τ}``."""
    a = np.sort(np.asarray(stat_d, dtype=np.float64).ravel())
    b = np.sort(np.asarray(stat_dprime, dtype=np.float64).ravel())
    tau = np.asarray(thresholds, dtype=np.float64)
    fp = a.size - np.searchsorted(a, tau, side="right")
    fn = np.searchsorted(b, tau, side="right")
    return fp.astype(np.int64), fn.astype(np.int64)


def certify_thresholds(
    stat_d: Any,
    stat_dprime: Any,
    thresholds: Any,
    *,
    delta: float,
    alpha: float,
    n_bounds: int,
) -> dict[str, np.ndarray]:
    """Counts, Clopper–Pearson bounds and ``ε_lb`` per threshold.

    Each of the ``2·len(thresholds)`` rates in this call, and of any other call the
    caller combines with it, gets level ``α / n_bounds`` (Bonferroni: ``n_bounds`` is the
    total number of one-sided bounds, i.e. ``2 × thresholds × pairs``), so every bound
    holds simultaneously with probability ``≥ 1 − α``.
    """
    nb = check_int_at_least("n_bounds", n_bounds, 1)
    a = _check_alpha(alpha) / nb
    s0 = np.asarray(stat_d, dtype=np.float64).ravel()
    s1 = np.asarray(stat_dprime, dtype=np.float64).ravel()
    if s0.size == 0 or s1.size == 0:
        raise ValueError("certify_thresholds needs at least one run on each bank.")
    if np.any(np.isnan(s0)) or np.any(np.isnan(s1)):
        raise ValueError("the statistic contains NaN values.")
    tau = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    fp, fn = error_counts(s0, s1, tau)
    fpr_u = clopper_pearson_upper(fp, s0.size, a)
    fnr_u = clopper_pearson_upper(fn, s1.size, a)
    return {
        "thresholds": tau,
        "false_positives": fp,
        "false_negatives": fn,
        "fpr_upper": fpr_u,
        "fnr_upper": fnr_u,
        "epsilon_lb": epsilon_lower_bound(fpr_u, fnr_u, delta),
    }


def _check_alpha(alpha: Any) -> float:
    a = check_positive("alpha", alpha)
    if not a < 1.0:
        raise ValueError(f"alpha must lie in (0, 1). Found {a}.")
    return a


# ======================================================================================
# Configuration and results
# ======================================================================================


@dataclass(frozen=True)
class AuditConfig:
    """What is audited, and how many runs.

    Mechanism: ``method, epsilon, delta, steps, radius, kappa, gamma, accounting`` as in
    :func:`brace.private_retrieve` (``gamma=None``: the data-independent rule).
    ``noise_scale_factor`` multiplies the noise std of the mechanism **and** of the
    density model (an honest model of a deliberately broken mechanism; 1 = the real
    one, 0.5 = "noise std halved"). Sample sizes are per bank: ``n_screen`` per
    candidate pair, ``n_pilot`` per finalist (default ``n_runs // 4``), ``n_runs`` fresh
    runs per certified pair. ``n_finalists`` pairs get pilot runs, the best
    ``n_certify`` are certified (Bonferroni over them) with ``n_thresholds`` thresholds
    each. ``alpha``: the bound holds with probability ``≥ 1 − α``.
    """

    method: str = "brace"
    epsilon: float = 1.0
    delta: float = 1e-5
    steps: int = 2
    radius: float = 0.5
    kappa: float = 128.0  # the library default of private_retrieve
    gamma: float | None = None
    accounting: str = "rdp"
    noise_scale_factor: float = 1.0
    n_runs: int = 50_000
    n_pilot: int | None = None
    n_screen: int = 1_000
    n_finalists: int = 3
    n_certify: int = 1
    n_thresholds: int = 4
    max_candidates: int = 64
    alpha: float = 0.05
    seed: int | None = 0
    batch_size: int = 20_000

    def validated(self) -> AuditConfig:
        """A copy with every field checked (clear ValueError/TypeError otherwise)."""
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}.")
        if self.accounting not in _accounting.ACCOUNTING_RULES:
            raise ValueError(
                f"accounting must be one of {_accounting.ACCOUNTING_RULES}; "
                f"got {self.accounting!r}."
            )
        gamma = self.gamma
        if gamma is not None:
            gamma = check_nonnegative("gamma", gamma)
            if self.method == "brace" and gamma == 0:
                raise ValueError("gamma must be > 0 for BRACE (γ = 0 is global sensitivity).")
        n_runs = check_int_at_least("n_runs", self.n_runs, 10)
        if self.n_pilot is None:
            n_pilot = max(n_runs // 4, 10)
        else:
            n_pilot = check_int_at_least("n_pilot", self.n_pilot, 10)
        n_finalists = check_int_at_least("n_finalists", self.n_finalists, 1)
        n_certify = check_int_at_least("n_certify", self.n_certify, 1)
        if n_certify > n_finalists:
            raise ValueError(
                f"n_certify ({n_certify}) must not exceed n_finalists ({n_finalists})."
            )
        seed = self.seed
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
                raise TypeError(f"seed must be None or an int. Found {seed!r}.")
            if int(seed) < 0:
                raise ValueError(f"seed must be >= 0. Found {seed}.")
            seed = int(seed)
        return dataclasses.replace(
            self,
            epsilon=check_epsilon(self.epsilon),
            delta=check_delta(self.delta),
            steps=check_steps(self.steps),
            radius=check_radius_beta(None, self.radius),
            kappa=check_nonnegative("kappa", self.kappa, allow_inf=True),
            gamma=gamma,
            noise_scale_factor=check_positive("noise_scale_factor", self.noise_scale_factor),
            n_runs=n_runs,
            n_pilot=n_pilot,
            n_screen=check_int_at_least("n_screen", self.n_screen, 10),
            n_finalists=n_finalists,
            n_certify=n_certify,
            n_thresholds=check_int_at_least("n_thresholds", self.n_thresholds, 1),
            max_candidates=check_int_at_least("max_candidates", self.max_candidates, 1),
            alpha=_check_alpha(self.alpha),
            seed=seed,
            batch_size=check_int_at_least("batch_size", self.batch_size, 1),
        )

    @property
    def label(self) -> str:
        """Name for tables: ``naive (NOT DP)`` for the naive baseline."""
        if self.method == "naive":
            base = NOT_DP_LABEL
        elif self.method == "brace":
            base = f"brace (kappa={_fmt_num(self.kappa)})"
        else:
            base = self.method
        if self.noise_scale_factor != 1.0:
            base += f", std x{_fmt_num(self.noise_scale_factor)} (BROKEN on purpose)"
        return base

    @property
    def is_private(self) -> bool:
        """Does the configuration *claim* (ε, δ)-DP? (False for naive and broken noise.)"""
        return self.method in PRIVATE_METHODS and self.noise_scale_factor >= 1.0


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


# ======================================================================================
# Sampling and the likelihood ratio
# ======================================================================================


@dataclass(frozen=True)
class _Setup:
    cfg: AuditConfig
    q: np.ndarray  # (1, d)
    spent: Any  # PrivacySpent
    releases: int

    @property
    def dim(self) -> int:
        return self.q.shape[1]


def _setup(cfg: AuditConfig, q: np.ndarray) -> _Setup:
    releases = 1 if cfg.method == "endpoint" else cfg.steps
    spent = _accounting.calibrate(
        cfg.epsilon, cfg.delta, releases, dim=q.shape[1],
        gamma=(cfg.gamma if cfg.method == "brace" else 0.0),
        accounting=cfg.accounting, mechanism=cfg.method,
    )
    return _Setup(cfg, q, spent, releases)


def _sample(mem: LSRMemory, setup: _Setup, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` independent releases (rows) of the (possibly broken) mechanism on ``mem``."""
    cfg = setup.cfg
    d = setup.dim
    out = np.empty((n, setup.releases, d))
    for b0 in range(0, n, cfg.batch_size):
        m = min(cfg.batch_size, n - b0)
        xi = rng.standard_normal((m, setup.releases, d))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)  # labelled "NOT DP" in output
            res = private_retrieve(
                mem, np.repeat(setup.q, m, axis=0), method=cfg.method, epsilon=cfg.epsilon,
                delta=cfg.delta, steps=cfg.steps, kappa=cfg.kappa,
                gamma=setup.spent.gamma if cfg.method == "brace" else None,
                accounting=cfg.accounting, output_projection=False,
                noise=cfg.noise_scale_factor * xi,
            )
        if res.privacy.rho_per_step != setup.spent.rho_per_step:  # pragma: no cover
            raise RuntimeError("audit: the mechanism's calibration differs from the model's.")
        out[b0 : b0 + m] = res.outputs
    return out


def _log_density(mem: LSRMemory, setup: _Setup, outputs: np.ndarray) -> np.ndarray:
    """``log p_D(Y)`` up to a constant shared by all banks, one value per row of ``outputs``."""
    cfg = setup.cfg
    n, R, d = outputs.shape
    mult = cfg.noise_scale_factor * setup.spent.noise_multiplier
    out = np.empty(n)
    if cfg.method == "endpoint":
        mu = mem.retrieve(setup.q, cfg.steps)[0, -1]
        s = float(endpoint_sensitivity(mem.n_memories, mem.radius_, cfg.steps, setup.q)[0]) * mult
        diff = outputs[:, 0] - mu
        return -np.einsum("ij,ij->i", diff, diff) / (2.0 * s * s) - d * math.log(s)
    for b0 in range(0, n, cfg.batch_size):
        Y = outputs[b0 : b0 + cfg.batch_size]
        m = Y.shape[0]
        hist = np.concatenate([np.repeat(setup.q[:, None, :], m, axis=0), Y[:, :-1]], axis=1)
        cert = certificate(
            mem, np.repeat(setup.q, m, axis=0), hist, method=cfg.method, steps=cfg.steps,
            kappa=cfg.kappa, gamma=setup.spent.gamma, output_projection=False,
        )
        s = cert.noise_scale * mult  # (m, T)
        diff = Y - cert.pre_noise
        sq = np.einsum("itj,itj->it", diff, diff)
        out[b0 : b0 + m] = (-sq / (2.0 * s * s) - d * np.log(s)).sum(axis=1)
    return out


def log_likelihood_ratio(
    bank: Any,
    bank_prime: Any,
    query: Any,
    outputs: Any,
    config: AuditConfig,
) -> np.ndarray:
    """``S(Y) = log p_{D'}(Y) − log p_D(Y)`` for each row of ``outputs`` (shape (N, T, d);
    (N, 1, d) for the endpoint method), exactly, for unprojected releases of ``config``.
    """
    cfg = config.validated()
    X = check_bank(bank)
    Xp = check_bank(bank_prime, "bank_prime")
    if Xp.shape != X.shape:
        raise ValueError(f"bank_prime must have the shape of bank {X.shape}; got {Xp.shape}.")
    q = _single_query(query, X.shape[1])
    setup = _setup(cfg, q)
    Y = np.asarray(outputs, dtype=np.float64)
    if Y.ndim != 3 or Y.shape[1:] != (setup.releases, X.shape[1]):
        raise ValueError(
            f"outputs must have shape (N, {setup.releases}, {X.shape[1]}); got {Y.shape}."
        )
    mem = LSRMemory(X, radius=cfg.radius)
    memp = LSRMemory(Xp, radius=cfg.radius)
    return _log_density(memp, setup, Y) - _log_density(mem, setup, Y)


# ======================================================================================
# Candidate pairs
# ======================================================================================


def candidate_pairs(
    bank: Any,
    query: Any,
    config: AuditConfig,
    *,
    released: Any = None,
    rng: Any = None,
) -> list[Pair]:
    """Replacements worth auditing (``config.max_candidates`` at most, deduplicated).

    Around each centre — ``q``, the clean states ``z_1..z_{T-1}`` (and ``z_T`` for the
    endpoint method) and the released states in ``released`` (array (k, d)):

    * ``boundary-out``: a gate member moved just outside the boundary (distance
      ``r(1 + 1e-6)``, same direction) — the gate count drops by one;
    * ``boundary-in``: the nearest non-member moved just inside — the count grows;
    * ``antipodal``: a member moved to the opposite side of the ball — the largest
      shift of the gate mean at a fixed count;
    * ``duplicate``: the farthest row replaced by a copy of the nearest member;
    * ``far``: the nearest member sent ``10³ r`` away, and ``(2T + 3) r`` away.

    Plus ``smooth-bound``: from random replacements inside ``B̄(q, (T+1) r)``, those that
    change the noise scale (``Δ̄_t`` for BRACE) or the pre-noise point the most along
    the clean history, measured by the symmetric KL divergence of the step Gaussians.
    """
    cfg = config.validated()
    X = check_bank(bank)
    q = _single_query(query, X.shape[1])[0]
    gen = check_rng(rng)
    r = cfg.radius
    T = cfg.steps
    mem = LSRMemory(X, radius=r)
    clean = mem.retrieve(q[None], T)[0]  # z_0..z_T
    centres: list[tuple[str, np.ndarray]] = [("q", q)]
    last = T + 1 if cfg.method == "endpoint" else T
    centres += [(f"z_{t}", clean[t]) for t in range(1, last)]
    if released is not None:
        rel = np.asarray(released, dtype=np.float64).reshape(-1, X.shape[1])
        centres += [(f"Y (pilot release {i})", c) for i, c in enumerate(rel)]
    cands: list[tuple[int, np.ndarray, str, str]] = []
    for label, c in centres:
        cands += _boundary_candidates(X, c, r, T, label, gen)
    if cfg.method != "endpoint":
        cands += _smooth_bound_candidates(X, q, clean, cfg, gen)
    pairs: list[Pair] = []
    seen: set = set()
    gate_d = int((np.sum((X - q) ** 2, axis=1) <= r * r).sum())
    for row, val, kind, label in cands:
        if not np.all(np.isfinite(val)) or np.array_equal(val, X[row]):
            continue
        key = (row, tuple(np.round(val, 12)))
        if key in seen:
            continue
        seen.add(key)
        Xp = X.copy()
        Xp[row] = val
        gate_p = int((np.sum((Xp - q) ** 2, axis=1) <= r * r).sum())
        pairs.append(Pair(int(row), tuple(map(float, X[row])), tuple(map(float, val)),
                          kind, label, (gate_d, gate_p)))
    if len(pairs) > cfg.max_candidates:  # keep the first per kind, then a random subset
        keep, rest = [], []
        kinds_seen: set = set()
        for p in pairs:
            (rest if p.kind in kinds_seen else keep).append(p)
            kinds_seen.add(p.kind)
        extra = cfg.max_candidates - len(keep)
        if extra > 0:
            idx = np.sort(gen.choice(len(rest), extra, replace=False))
            keep += [rest[i] for i in idx]
        pairs = keep[: cfg.max_candidates]
    return pairs


def _unit(v: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    nv = float(np.linalg.norm(v))
    if nv > 0 and math.isfinite(nv):
        return v / nv
    u = gen.standard_normal(v.shape)
    return u / np.linalg.norm(u)


def _boundary_candidates(X, c, r, T, label, gen):
    dist = np.sqrt(np.sum((X - c) ** 2, axis=1))
    inside = np.flatnonzero(dist <= r)
    outside = np.flatnonzero(dist > r)
    out: list[tuple[int, np.ndarray, str, str]] = []
    if inside.size:
        by_dist = inside[np.argsort(dist[inside], kind="stable")]
        members = list(dict.fromkeys([by_dist[-1], by_dist[0], by_dist[len(by_dist) // 2]]))
        for i in members:
            u = _unit(X[i] - c, gen)
            out.append((i, c + r * (1 + _REL_BOUNDARY) * u, "boundary-out", label))
            out.append((i, c - r * (1 - _REL_BOUNDARY) * u, "antipodal", label))
        near = by_dist[0]
        u = _unit(X[near] - c, gen)
        out.append((near, c + 1e3 * r * u, "far", label))
        out.append((near, c + (2 * T + 3) * r * u, "far", label))
        far_row = int(np.argmax(dist))
        if far_row != near:
            out.append((far_row, X[near].copy(), "duplicate", label))
        edge = by_dist[-1]
        if far_row != edge:
            out.append((far_row, X[edge].copy(), "duplicate", label))
    if outside.size:
        by_dist = outside[np.argsort(dist[outside], kind="stable")]
        for j in by_dist[:2]:
            u = _unit(X[j] - c, gen)
            out.append((j, c + r * (1 - _REL_BOUNDARY) * u, "boundary-in", label))
        if not inside.size:  # empty gate: bring the nearest row onto the centre
            out.append((by_dist[0], c.copy(), "duplicate", label))
    return out


def _step_gaussians(mem, q, hist, cfg, gamma):
    cert = certificate(mem, q[None], hist[None], method=cfg.method, steps=cfg.steps,
                       kappa=cfg.kappa, gamma=gamma, output_projection=False)
    return cert.pre_noise[0], cert.noise_scale[0]


def _smooth_bound_candidates(X, q, clean, cfg, gen, n_values=12, keep=4):
    """Random replacements ranked by the symmetric KL of the step Gaussians along the
    clean history (a proxy; the pilot runs decide)."""
    r, T, d = cfg.radius, cfg.steps, X.shape[1]
    gamma = _setup(cfg, q[None]).spent.gamma
    hist = clean[:T]
    mu, s = _step_gaussians(LSRMemory(X, radius=r), q, hist, cfg, gamma)
    dist = np.sqrt(((X[None] - hist[:, None]) ** 2).sum(-1))  # (T, n)
    rows = set(np.flatnonzero((dist <= 2 * r).any(0))[:8].tolist())
    rows |= set(gen.choice(X.shape[0], min(2, X.shape[0]), replace=False).tolist())
    u = gen.standard_normal((n_values, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    vals = q + u * ((T + 1) * r * gen.random((n_values, 1)) ** (1.0 / d))
    scored = []
    for j in sorted(rows):
        for v in vals:
            Xp = X.copy()
            Xp[j] = v
            mu_p, s_p = _step_gaussians(LSRMemory(Xp, radius=r), q, hist, cfg, gamma)
            ratio = (s / s_p) ** 2
            dm2 = np.sum((mu - mu_p) ** 2, axis=1)
            jeff = 0.5 * d * (ratio + 1 / ratio - 2) + 0.5 * dm2 * (1 / s**2 + 1 / s_p**2)
            scored.append((float(jeff.sum()), float(np.abs(np.log(ratio)).sum()), j, v))
    out = []
    for key in (0, 1):
        for sc in sorted(scored, key=lambda z: -z[key])[:keep]:
            if sc[key] > 0:
                out.append((sc[2], sc[3].copy(), "smooth-bound", "q (clean history)"))
    return out


# ======================================================================================
# The audit
# ======================================================================================


StatisticFn = Callable[[np.ndarray], Any]


def _single_query(query: Any, dim: int) -> np.ndarray:
    q, _ = check_queries(query, dim, name="query")
    if q.shape[0] != 1:
        raise ValueError(f"query must be a single query (d,) or (1, d); got shape {q.shape}.")
    return q


def _threshold_grid(s0: np.ndarray, s1: np.ndarray, n_levels: int = 80) -> np.ndarray:
    """Candidate thresholds spread log-uniformly in tail mass: upper quantiles of ``S_D``
    (few false positives) and lower quantiles of ``S_{D'}`` (few false negatives)."""
    n = min(s0.size, s1.size)
    p = np.unique(np.concatenate([np.geomspace(1.0 / n, 0.5, n_levels), [0.5]]))
    grid = np.concatenate([np.quantile(s0, 1.0 - p), np.quantile(s1, p)])
    grid = grid[np.isfinite(grid)]
    return np.unique(grid) if grid.size else np.zeros(1)


def _choose_thresholds(s0, s1, k, *, delta, alpha, n_bounds) -> tuple[np.ndarray, float]:
    """Best ``k`` thresholds on pilot data (half per direction), and the pilot ε_lb."""
    grid = _threshold_grid(s0, s1)
    res = certify_thresholds(s0, s1, grid, delta=delta, alpha=alpha, n_bounds=n_bounds)
    fpr_u, fnr_u = res["fpr_upper"], res["fnr_upper"]
    e1 = _log_ratio(1.0 - delta - fnr_u, fpr_u)  # few false positives
    e2 = _log_ratio(1.0 - delta - fpr_u, fnr_u)  # few false negatives
    chosen: list[float] = []
    order1, order2 = np.argsort(-e1, kind="stable"), np.argsort(-e2, kind="stable")
    i1 = i2 = 0
    while len(chosen) < min(k, grid.size):
        if (len(chosen) % 2 == 0 and i1 < grid.size) or i2 >= grid.size:
            tau = grid[order1[i1]]
            i1 += 1
        else:
            tau = grid[order2[i2]]
            i2 += 1
        if tau not in chosen:
            chosen.append(float(tau))
    return np.array(sorted(chosen)), float(res["epsilon_lb"].max())


def _validate_statistic(vals: Any, n: int) -> np.ndarray:
    v = np.asarray(vals)
    if v.dtype.kind not in "iuf":
        raise TypeError(f"statistic must return real numbers; got dtype {v.dtype}.")
    v = v.astype(np.float64).reshape(-1)
    if v.size != n:
        raise ValueError(f"statistic must return one value per run ({n}); got {v.size}.")
    if np.any(np.isnan(v)):
        raise ValueError("statistic returned NaN.")
    return v


def _stat(setup: _Setup, mem_d: LSRMemory, mem_p: LSRMemory, outputs: np.ndarray,
          statistic: StatisticFn | None, cache_d: np.ndarray | None = None) -> np.ndarray:
    """The statistic of each run: ``statistic(outputs)``, or the exact LLR
    ``log p_{D'} − log p_D`` (``cache_d``: ``log p_D(outputs)`` if already computed)."""
    if statistic is not None:
        return _validate_statistic(statistic(outputs.copy()), outputs.shape[0])
    ld = _log_density(mem_d, setup, outputs) if cache_d is None else cache_d
    return _log_density(mem_p, setup, outputs) - ld


def audit(
    bank: Any,
    query: Any,
    config: AuditConfig = AuditConfig(),
    *,
    replacement: tuple[int, Any] | None = None,
    statistic: StatisticFn | None = None,
    progress: Callable[[str], None] | None = None,
) -> AuditResult:
    """Lower-bound the ε of a mechanism on a bank and query (module docstring).

    Parameters
    ----------
    bank : array_like (n, d)
        ``D``.
    query : array_like (d,) or (1, d)
        The public query ``q``.
    config : AuditConfig
        Mechanism and sample sizes.
    replacement : (row, value), optional
        Audit this neighbour only (``D'`` = ``D`` with ``D[row] = value``); otherwise the
        pair finder proposes candidates and the pilot runs choose.
    statistic : callable, optional
        ``outputs (N, T, d) -> (N,)`` real scores; default: the exact log-likelihood ratio.
    progress : callable, optional
        Called with short status strings.

    Returns
    -------
    AuditResult
    """
    t0 = time.perf_counter()
    cfg = config.validated()
    X = check_bank(bank)
    n, d = X.shape
    q = _single_query(query, d)
    if statistic is not None and not callable(statistic):
        raise TypeError(f"statistic must be callable or None; got {type(statistic).__name__}.")
    setup = _setup(cfg, q)
    say = progress or (lambda _msg: None)
    ss = np.random.SeedSequence(cfg.seed)
    s_cand, s_screen, s_pilot, s_fresh = ss.spawn(4)
    D = LSRMemory(X, radius=cfg.radius)

    # --- candidates and screening -------------------------------------------------
    if replacement is not None:
        pairs = [_given_pair(X, q[0], cfg.radius, replacement)]
        screen_scores = [math.nan]
        n_screen_used = 0
    else:
        screen_streams = s_screen.spawn(1 + cfg.max_candidates)
        out_d = _sample(D, setup, cfg.n_screen, check_rng(screen_streams[0]))
        gen_cand = check_rng(s_cand)
        released = None
        if cfg.method != "endpoint" and cfg.steps > 1:
            pick = gen_cand.choice(cfg.n_screen, 3, replace=False)
            released = out_d[pick, : cfg.steps - 1].reshape(-1, d)
        pairs = candidate_pairs(X, q, cfg, released=released, rng=gen_cand)
        if not pairs:
            raise ValueError("the pair finder found no neighbouring bank that differs from D.")
        say(f"screening {len(pairs)} candidate pairs x {cfg.n_screen} runs")
        ld = None if statistic is not None else _log_density(D, setup, out_d)
        screen_scores = []
        for i, p in enumerate(pairs):
            Dp = LSRMemory(_replaced(X, p), radius=cfg.radius)
            out_p = _sample(Dp, setup, cfg.n_screen, check_rng(screen_streams[1 + i]))
            a = _stat(setup, D, Dp, out_d, statistic, ld)
            b = _stat(setup, D, Dp, out_p, statistic)
            screen_scores.append(_screen_score(a, b, llr=statistic is None))
        n_screen_used = cfg.n_screen

    # --- pilot: choose the pair(s) and thresholds ---------------------------------
    order = np.argsort(-np.nan_to_num(np.array(screen_scores), nan=0.0), kind="stable")
    finalists = [int(i) for i in order[: cfg.n_finalists]]
    n_cert = min(cfg.n_certify, len(finalists))
    n_bounds = 2 * cfg.n_thresholds * n_cert
    say(f"pilot: {len(finalists)} finalist pair(s) x {cfg.n_pilot} runs")
    pilot_streams = s_pilot.spawn(1 + len(finalists))
    out_d = _sample(D, setup, cfg.n_pilot, check_rng(pilot_streams[0]))
    ld = None if statistic is not None else _log_density(D, setup, out_d)
    pilot = []
    for j, i in enumerate(finalists):
        Dp = LSRMemory(_replaced(X, pairs[i]), radius=cfg.radius)
        out_p = _sample(Dp, setup, cfg.n_pilot, check_rng(pilot_streams[1 + j]))
        a = _stat(setup, D, Dp, out_d, statistic, ld)
        b = _stat(setup, D, Dp, out_p, statistic)
        tau, eps_pilot = _choose_thresholds(
            a, b, cfg.n_thresholds, delta=cfg.delta, alpha=cfg.alpha, n_bounds=n_bounds
        )
        pilot.append((eps_pilot, -j, i, tau))
    pilot.sort(reverse=True)
    chosen = pilot[:n_cert]

    # --- fresh runs: count and certify ---------------------------------------------
    say(f"fresh: {n_cert} pair(s) x {cfg.n_runs} runs per bank")
    fresh_streams = s_fresh.spawn(1 + n_cert)
    out_d = _sample(D, setup, cfg.n_runs, check_rng(fresh_streams[0]))
    ld = None if statistic is not None else _log_density(D, setup, out_d)
    certs = []
    for j, (eps_pilot, _, i, tau) in enumerate(chosen):
        Dp = LSRMemory(_replaced(X, pairs[i]), radius=cfg.radius)
        out_p = _sample(Dp, setup, cfg.n_runs, check_rng(fresh_streams[1 + j]))
        a = _stat(setup, D, Dp, out_d, statistic, ld)
        b = _stat(setup, D, Dp, out_p, statistic)
        res = certify_thresholds(a, b, tau, delta=cfg.delta, alpha=cfg.alpha, n_bounds=n_bounds)
        certs.append(PairCertificate(
            pair=pairs[i], thresholds=res["thresholds"],
            false_positives=res["false_positives"], false_negatives=res["false_negatives"],
            fpr_upper=res["fpr_upper"], fnr_upper=res["fnr_upper"],
            epsilon_per_threshold=res["epsilon_lb"], pilot_epsilon_lb=eps_pilot,
            screen_score=float(screen_scores[i]),
        ))
    eps_lb = max(c.epsilon_lb for c in certs)
    seeds = {
        "seed": cfg.seed,
        "entropy": ss.entropy,
        "streams": "SeedSequence(entropy).spawn(4) = [candidates, screen, pilot, fresh]; "
        "each stage .spawn(1 + pairs): [0] bank D, [1 + i] the i-th D' of that stage",
    }
    return AuditResult(
        config=cfg, label=cfg.label, claimed_epsilon=cfg.epsilon, delta=cfg.delta,
        epsilon_lb=float(eps_lb), alpha=cfg.alpha, certified=tuple(certs), n_runs=cfg.n_runs,
        n_pilot=cfg.n_pilot, n_screen=n_screen_used, n_candidates=len(pairs),
        n_bounds=n_bounds,
        statistic="log-likelihood ratio" if statistic is None
        else getattr(statistic, "__name__", "user statistic"),
        rho_per_step=setup.spent.rho_per_step, gamma=setup.spent.gamma, seeds=seeds,
        wall_time_s=time.perf_counter() - t0,
    )


def _screen_score(a: np.ndarray, b: np.ndarray, *, llr: bool) -> float:
    """Ranking score of a candidate: the estimated Jeffreys divergence
    ``E_{D'}[S] − E_D[S]`` for the LLR; for a user statistic, the largest smoothed
    log ratio of tail frequencies over a threshold grid."""
    if llr:
        return float(np.mean(b) - np.mean(a))
    grid = _threshold_grid(a, b, 30)
    fp, fn = error_counts(a, b, grid)
    p0 = (fp + 0.5) / (a.size + 1.0)
    p1 = (fn + 0.5) / (b.size + 1.0)
    return float(np.max(np.maximum(np.log((1 - p1) / p0), np.log((1 - p0) / p1))))


def _replaced(X: np.ndarray, pair: Pair) -> np.ndarray:
    Xp = X.copy()
    Xp[pair.row] = pair.new_value
    return Xp


def _given_pair(X: np.ndarray, q: np.ndarray, r: float, replacement: Any) -> Pair:
    if not isinstance(replacement, tuple | list) or len(replacement) != 2:
        raise TypeError("replacement must be a pair (row, value).")
    row, value = replacement
    n, d = X.shape
    row = check_int_at_least("replacement row", row, 0)
    if row >= n:
        raise ValueError(f"replacement row must be < n = {n}. Found {row}.")
    v = np.asarray(value)
    if v.dtype.kind not in "iuf" or v.dtype == bool:
        raise TypeError(f"replacement value must hold real numbers; got dtype {v.dtype}.")
    v = v.astype(np.float64).reshape(-1)
    if v.size != d:
        raise ValueError(f"replacement value must have d = {d} entries; got {v.size}.")
    if not np.all(np.isfinite(v)):
        raise ValueError("replacement value contains non-finite values (NaN or inf).")
    Xp = X.copy()
    Xp[row] = v
    gate = (int((np.sum((X - q) ** 2, axis=1) <= r * r).sum()),
            int((np.sum((Xp - q) ** 2, axis=1) <= r * r).sum()))
    return Pair(row, tuple(map(float, X[row])), tuple(map(float, v)), "given", "user", gate)


# ======================================================================================
# The audit report
# ======================================================================================


@dataclass(frozen=True)
class ReportConfig:
    """The report of issue 7: BRACE (κ ∈ {0, 128}), global, endpoint at ε ∈ {1, 4} and
    the naive baseline, on small banks in d ∈ {1, 2}, plus a broken-noise self-check."""

    n_runs: int = 100_000
    steps: int = 2
    delta: float = 1e-5
    radius: float = 0.5
    epsilons: tuple = (1.0, 4.0)
    dims: tuple = (1, 2)
    bank_sizes: tuple = (24, 40)  # n for d = 1, 2
    n_screen: int = 1_000
    alpha: float = 0.05
    seed: int = 0
    data_seed: int = 7


def report_bank(n: int, d: int, radius: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A small bank, uniform on ``[-L, L]^d`` (about one memory per gate), and a public
    query whose gate holds exactly one memory, near its boundary (distance ≥ 0.9 r).

    There every pair that matters exists: moving that memory to the far side of the ball
    shifts the gate mean by almost ``2r`` (the global sensitivity), and moving another
    memory just inside makes the gate count go ``1 ↔ 2``, where the naive baseline's
    noise scale jumps between ``2r/1`` and ``2r/2``.
    """
    rng = check_rng(seed)
    half = {1: 0.5 * n * radius, 2: 0.9 * math.sqrt(n) * radius}.get(d, 2.0)
    X = rng.uniform(-half, half, (n, d))
    for c in rng.uniform(-half, half, (20_000, d)):
        dist = np.sqrt(np.sum((X - c) ** 2, axis=1))
        if int((dist <= radius).sum()) == 1 and dist[dist <= radius][0] >= 0.9 * radius:
            return X, c
    raise RuntimeError("report_bank: no query with a one-memory gate")  # pragma: no cover


def report_cases(rc: ReportConfig) -> list[tuple[int, AuditConfig]]:
    """(d, config) of every row of the report."""
    cases = []
    for d in rc.dims:
        for eps in rc.epsilons:
            for method, kappa in (("brace", 0.0), ("brace", 128.0), ("global", 0.0),
                                  ("endpoint", 0.0), ("naive", 0.0)):
                cases.append((d, AuditConfig(
                    method=method, epsilon=eps, delta=rc.delta, steps=rc.steps,
                    radius=rc.radius, kappa=kappa, n_runs=rc.n_runs, n_screen=rc.n_screen,
                    alpha=rc.alpha, seed=rc.seed,
                )))
    # self-check: the same audit must catch a mechanism whose noise std is halved
    cases.append((rc.dims[0], AuditConfig(
        method="global", epsilon=min(rc.epsilons), delta=rc.delta, steps=1,
        radius=rc.radius, noise_scale_factor=0.5, n_runs=rc.n_runs, n_screen=rc.n_screen,
        alpha=rc.alpha, seed=rc.seed,
    )))
    return cases


def report(rc: ReportConfig = ReportConfig(), *, progress: bool = True) -> dict:
    """Run every case of the report; return a JSON-able dict (see :func:`format_report`)."""
    check_int_at_least("n_runs", rc.n_runs, 10)
    t0 = time.perf_counter()
    rows = []
    banks = {}
    for i, d in enumerate(rc.dims):
        n = rc.bank_sizes[i] if i < len(rc.bank_sizes) else rc.bank_sizes[-1]
        banks[d] = report_bank(n, d, rc.radius, rc.data_seed + d)
    for d, cfg in report_cases(rc):
        X, q = banks[d]
        if progress:
            print(f"[audit] {cfg.label}, eps={cfg.epsilon:g}, d={d}, T={cfg.steps} ...",
                  file=sys.stderr, flush=True)
        res = audit(X, q, cfg)
        row = res.to_dict()
        row.update({"d": d, "n": int(X.shape[0]), "steps": cfg.steps})
        rows.append(row)
    private_ok = all(r["epsilon_lb"] <= r["claimed_epsilon"] for r in rows
                     if r["verdict"] in ("pass", "VIOLATION"))
    caught = all(r["exceeds_claim"] for r in rows if r["verdict"] in ("caught", "NOT CAUGHT"))
    from .experiments._common import metadata

    return {
        **metadata(rc),
        "banks": {str(d): {"bank": X.tolist(), "query": q.tolist()} for d, (X, q) in
                  banks.items()},
        "rows": rows,
        "private_mechanisms_pass": private_ok,
        "naive_and_broken_caught": caught,
        "passed": private_ok and caught,
        "wall_time_s": time.perf_counter() - t0,
    }


def format_report(rep: dict) -> str:
    """The report as a text table (claimed ε vs ε_lb)."""
    cfg = rep["config"]
    head = (f"{'mechanism':<44} {'d':>1} {'n':>3} {'T':>1} {'claimed eps':>11} "
            f"{'eps_lb':>7} {'runs/side':>9}  {'verdict':<10} pair")
    lines = [
        f"Privacy audit: delta = {cfg['delta']:g}, confidence {1 - cfg['alpha']:g} per row, "
        f"r = {cfg['radius']:g}; statistic: exact log-likelihood ratio of the unprojected "
        "release",
        head,
        "-" * len(head),
    ]
    for r in rep["rows"]:
        p = r["pair"]
        lines.append(
            f"{r['label']:<44} {r['d']:>1} {r['n']:>3} {r['steps']:>1} "
            f"{r['claimed_epsilon']:>11g} {r['epsilon_lb']:>7.3f} {r['n_runs_per_side']:>9d}  "
            f"{r['verdict']:<10} {p['kind']} at {p['centre']}, |I(q)| "
            f"{p['gate_q'][0]}->{p['gate_q'][1]}"
        )
    lines += [
        "",
        f"private mechanisms: eps_lb <= claimed in every row: {rep['private_mechanisms_pass']}",
        f"naive (NOT DP) and broken noise caught (eps_lb > claimed): "
        f"{rep['naive_and_broken_caught']}",
        f"overall: {'PASS' if rep['passed'] else 'FAIL'}; wall time {rep['wall_time_s']:.0f} s",
    ]
    return "\n".join(lines)


# ======================================================================================
# CLI
# ======================================================================================


def add_cli(sub) -> None:
    """Register ``brace audit``."""
    p = sub.add_parser(
        "audit",
        help="empirical privacy audit: a statistically valid lower bound on epsilon",
        description="Run a mechanism many times on two neighbouring banks and certify a "
        "lower bound on its epsilon (docs/audit.md). With --report, run the built-in "
        "audit report instead.",
    )
    d = AuditConfig()
    p.add_argument("--report", action="store_true",
                   help="run the audit report (built-in banks); --out is a directory")
    p.add_argument("--bank", help="(n, d) memory bank, .npy")
    p.add_argument("--query", help="one query, (d,) or (1, d), .npy")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--beta", type=float, help="inverse temperature beta > 0")
    g.add_argument("--radius", type=float, help="support radius r = sqrt(2/beta)")
    p.add_argument("--method", choices=list(METHODS),
                   help="'naive' is NOT differentially private (baseline only)")
    p.add_argument("--epsilon", type=float, help="claimed epsilon > 0")
    p.add_argument("--delta", type=float, default=d.delta, help="claimed delta in (0, 1)")
    p.add_argument("--steps", type=int, help="horizon T >= 1")
    p.add_argument("--kappa", type=float, default=None,
                   help=f"BRACE activation kappa >= 0 (default {d.kappa:g})")
    p.add_argument("--gamma", type=_gamma_arg, default=None,
                   help="BRACE smoothness gamma > 0 ('auto', the default: the "
                   "data-independent rule)")
    p.add_argument("--accounting", choices=list(_accounting.ACCOUNTING_RULES), default=None,
                   help=f"default {d.accounting}")
    p.add_argument("--noise-scale-factor", type=float, default=None,
                   help="multiply the noise std (e.g. 0.5: a deliberately broken mechanism)")
    p.add_argument("--replace-row", type=int, default=None,
                   help="audit only the neighbour with this row replaced")
    p.add_argument("--replace-value", default=None,
                   help="comma-separated new value of --replace-row")
    p.add_argument("--runs", type=int, default=None,
                   help=f"fresh runs per bank (default {d.n_runs}; report: 100000)")
    p.add_argument("--pilot-runs", type=int, default=None, help="pilot runs (default runs/4)")
    p.add_argument("--screen-runs", type=int, default=d.n_screen)
    p.add_argument("--alpha", type=float, default=d.alpha, help="1 - confidence")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None,
                   help="JSON result file (single audit) or output directory (--report)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_audit)


def _cmd_audit(args: argparse.Namespace) -> int:
    from ._io import atomic_write_text, load_npy, write_json

    if args.report:
        for flag in ("bank", "query", "method", "epsilon", "steps", "beta", "radius", "kappa",
                     "gamma", "accounting", "noise_scale_factor", "pilot_runs", "replace_row",
                     "replace_value"):
            if getattr(args, flag) is not None:
                raise ValueError(f"--report uses built-in banks and mechanisms; do not pass "
                                 f"--{flag.replace('_', '-')}.")
        if args.out is None:
            raise ValueError("--report needs --out DIR.")
        out_dir = Path(args.out)
        _check_output_dir(out_dir)
        rc = ReportConfig(n_runs=args.runs if args.runs is not None else ReportConfig.n_runs,
                          n_screen=args.screen_runs, alpha=args.alpha, delta=args.delta,
                          seed=args.seed)
        rep = report(rc, progress=not args.no_progress)
        text = format_report(rep)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json(out_dir / "audit_report.json", rep)
        atomic_write_text(out_dir / "audit_report.txt", text + "\n")
        print(text)
        print(f"wrote {out_dir / 'audit_report.json'} and {out_dir / 'audit_report.txt'}")
        return 0 if rep["passed"] else 1

    for flag in ("bank", "query", "method", "epsilon", "steps"):
        if getattr(args, flag) is None:
            raise ValueError(f"--{flag} is required (or use --report).")
    if (args.replace_row is None) != (args.replace_value is None):
        raise ValueError("give both --replace-row and --replace-value, or neither.")
    if args.out is not None:
        _check_output_file(Path(args.out))
    bank = load_npy(args.bank, "bank")
    query = load_npy(args.query, "query")
    radius = check_radius_beta(args.beta, args.radius)
    replacement = None
    if args.replace_row is not None:
        replacement = (args.replace_row, _parse_vector(args.replace_value, "--replace-value"))
    cfg = AuditConfig(
        method=args.method, epsilon=args.epsilon, delta=args.delta, steps=args.steps,
        radius=radius, kappa=0.0 if args.kappa is None else args.kappa, gamma=args.gamma,
        accounting=args.accounting or AuditConfig.accounting,
        noise_scale_factor=1.0 if args.noise_scale_factor is None else args.noise_scale_factor,
        n_runs=args.runs if args.runs is not None else AuditConfig.n_runs,
        n_pilot=args.pilot_runs, n_screen=args.screen_runs, alpha=args.alpha, seed=args.seed,
    )
    if cfg.method == "naive":
        print("brace: WARNING: method 'naive' is NOT differentially private (baseline only).",
              file=sys.stderr)
    say = None if args.no_progress else (lambda m: print(f"[audit] {m}", file=sys.stderr))
    res = audit(bank, query, cfg, replacement=replacement, progress=say)
    print(res)
    if args.out is not None:
        write_json(args.out, res.to_dict())
        print(f"wrote {args.out}")
    return 1 if res.verdict == "VIOLATION" else 0


def _gamma_arg(text: str) -> float | None:
    if text.strip().lower() == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _parse_vector(text: str, name: str) -> np.ndarray:
    try:
        v = np.array([float(t) for t in text.split(",")], dtype=np.float64)
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers; got {text!r}.") from None
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains non-finite values: {text!r}.")
    return v


def _check_output_file(path: Path) -> None:
    """Fail before any work if ``path`` cannot be written (the write itself is atomic)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"--out {path} is a directory; give a file name.")
    if not parent.is_dir():
        raise FileNotFoundError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"output directory is not writable: {parent}")


def _check_output_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} exists and is not a directory.")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write to {path}: {probe} is not a writable directory.")


# ======================================================================================
# helpers
# ======================================================================================


def _fmt_num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:g}"


def _fmt_vec(v: Sequence[float]) -> str:
    return "(" + ", ".join(f"{x:.6g}" for x in v) + ")"


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return _jsonable(v.item())
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v
