"""Private retrieval: BRACE and its baselines (``docs/spec.md`` §2–§3).

The proof is in ``docs/privacy.md``.

``private_retrieve(memory, queries, method=…)`` releases, for each query ``q``:

=========  ====================================================  ==========================
method     release                                               noise std per step
=========  ====================================================  ==========================
brace      ``Y_t = Π_{B̄(q,(t+1)r)}(Q_t + ξ_t)`` (``docs/spec.md`` §3)          ``Δ̄_t / sqrt(2ρ_t)``
global     ``Y_t = Π(Φ_D(Y_{t-1}) + ξ_t)``                        ``2r / sqrt(2ρ_t)``
endpoint   ``Y = Π(z_T + ξ)`` (one release)                       ``2Tr / sqrt(2ρ)``
naive      ``Y_t = Π(Φ_D(Y_{t-1}) + ξ_t)`` — **NOT DP**           ``2r/max(1,m_t) / sqrt(2ρ_t)``
=========  ====================================================  ==========================

``ρ_t`` comes from :func:`brace.accounting.calibrate` (the noise scale is computed
there; the sensitivity in :mod:`brace.sensitivity`). The naive baseline's noise scale
depends on the gate count ``m_t = |I(D, Y_{t-1})|``, which leaks it: it is a baseline
only, warns with :class:`NotPrivateWarning` on every call, and its result says so.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import accounting
from ._validation import (
    as_float_array,
    check_bool,
    check_delta,
    check_epsilon,
    check_nonnegative,
    check_output_size,
    check_queries,
    check_steps,
    rng_and_record,
)
from .accounting import calibrate_count, choose_gamma_for_gates, predicted_noise_ratio
from .memory import LSRMemory, pins_bank
from .sensitivity import (
    CleanTrajectoryBound,
    Numerics,
    activation_possible,
    cap_units,
    combine,
    fixed_centre_units,
    n_terms,
    smooth_max,
    sorted_segments,
)

__all__ = [
    "DEFAULT_KAPPA",
    "METHODS",
    "CertificateTrace",
    "NotPrivateWarning",
    "DIAGNOSTIC_FIELDS",
    "DEFAULT_KAPPA",
    "PrivateRetrievalResult",
    "certificate",
    "endpoint_sensitivity",
    "global_sensitivity",
    "no_correction_kappa",
    "private_retrieve",
]

METHODS = ("brace", "global", "endpoint", "naive")
PRIVATE_METHODS = ("brace", "global", "endpoint")
DEFAULT_KAPPA = 128.0  # BRACE activation κ of private_retrieve and of every CLI flag
RESULT_SCHEMA = "brace-result/1"  # the saved-result schema (docs/results.md)
SEED_WITHHELD = ("withheld: the seed regenerates the noise, so it must not be published "
                 "with the release (include_seed=True keeps it)")


class NotPrivateWarning(UserWarning):
    """Raised (as a warning) whenever a mechanism without a DP guarantee is run."""


# Fields that depend on the bank but are NOT part of the (ε, δ)-DP release.
DIAGNOSTIC_FIELDS = (
    "noise_std",
    "smooth_sensitivity",
    "activated",
    "gate_clean",
    "gate_released",
    "left",
    "entered",
    "correction_norm",
)


@dataclass(frozen=True)
class PrivateRetrievalResult:
    """What a private retrieval released, what it cost, and diagnostics.

    Arrays have one row per query; ``T`` is the horizon (the endpoint method releases one
    state, so its per-step arrays have one column).

    **Only ``outputs`` is the differentially private release** (with the public
    ``queries``, ``privacy`` and ``params``). Every other array is a *diagnostic*
    computed from the bank and **not covered by ε**: the gate counts, ``‖R_t‖``, ``H_t``,
    ``Δ̄_t`` and, for BRACE and naive, the noise std (it is ``Δ̄_t/sqrt(2ρ)``). Keep them
    for evaluation; do not publish them with the release. :meth:`to_dict` leaves them out
    unless asked.

    Attributes
    ----------
    method : str
    is_private : bool — False for ``"naive"`` (NOT differentially private) and for a
        release from caller-supplied innovations (``_innovations``).
    outputs : (Q, T, d) released states ``Y_1..Y_T`` (endpoint: (Q, 1, d)).
    noise_std : (Q, T) standard deviation of the Gaussian noise of each release
        (diagnostic; data-dependent for BRACE and naive).
    smooth_sensitivity : (Q, T) ``Δ̄_t`` (BRACE only, else None; diagnostic).
    activated : (Q, T) bool ``H_t`` (BRACE; False for the baselines; diagnostic).
    gate_clean : (Q, T) ``|I_t| = |I(D, z_{t-1})|`` (diagnostic). This and ``left``,
        ``entered``, ``correction_norm`` need the clean trajectory: they are None unless
        ``return_clean=True`` or BRACE can activate (the pass is then skipped).
    gate_released : (Q, T) ``|J_t| = |I(D, Y_{t-1})|`` (diagnostic).
    left : (Q, T) ``|I_t \\ J_t|`` (memories that left the clean gate; diagnostic).
    entered : (Q, T) ``|J_t \\ I_t|`` (memories that entered the released gate; diagnostic).
    correction_norm : (Q, T) ``‖R_t‖ = ‖z_t - a_t‖`` (diagnostic).
    privacy : :class:`brace.accounting.PrivacySpent` — the per-query budget, per-step ρ,
        ``queries`` and ``epsilon_total`` (all queries composed, at the same δ).
    params : dict — radius, kappa, gamma, steps, output_projection, seed.
    clean : (Q, T+1, d) noiseless trajectory — only when ``return_clean=True``; it is
        **not private** and must not be released.
    queries : (Q, d) the (public) queries.
    released_counts : (Q, T) int or None — the count release's noisy gate counts
        ``m̃_t``: part of the DP release (``release="count"`` only).
    """

    method: str
    is_private: bool
    outputs: np.ndarray
    noise_std: np.ndarray
    smooth_sensitivity: np.ndarray | None
    activated: np.ndarray
    gate_clean: np.ndarray | None
    gate_released: np.ndarray
    left: np.ndarray | None
    entered: np.ndarray | None
    correction_norm: np.ndarray | None
    privacy: Any
    params: dict = field(default_factory=dict)
    clean: np.ndarray | None = None
    queries: np.ndarray | None = None
    released_counts: np.ndarray | None = None

    @property
    def effective_count(self) -> np.ndarray | None:
        """``m̂_t = 2r / Δ̄_t`` (BRACE only; diagnostic)."""
        if self.smooth_sensitivity is None:
            return None
        return 2.0 * self.params["radius"] / self.smooth_sensitivity

    @property
    def final(self) -> np.ndarray:
        """Released endpoint ``Y_T``, shape (Q, d)."""
        return self.outputs[:, -1]

    def diagnostics(self) -> dict[str, np.ndarray | None]:
        """The data-dependent diagnostics (NOT covered by ε), by name."""
        return {k: getattr(self, k) for k in DIAGNOSTIC_FIELDS}

    def to_dict(self, *, include_diagnostics: bool = False, include_clean: bool = False,
                include_seed: bool = False) -> dict:
        """JSON-able dict (arrays as nested lists) of the release: method, outputs,
        queries, privacy, params. Diagnostics (under ``"diagnostics_not_private"``) and the
        clean trajectory only if asked — neither is covered by ε.

        The seed record is **withheld** (``params["seed"]`` null, with a reason) unless
        ``include_seed=True``: it regenerates the noise, so whoever holds it can strip
        the noise from the release. Keep it with the operator, never publish it."""

        def plain(v: Any) -> Any:
            return v.tolist() if isinstance(v, np.ndarray) else v

        from . import __version__

        out: dict[str, Any] = {
            "schema": RESULT_SCHEMA,
            "version": __version__,
            "method": self.method,
            "is_private": self.is_private,
            "outputs": plain(self.outputs),
            "queries": plain(self.queries),
            **({} if self.released_counts is None
               else {"released_counts": plain(self.released_counts)}),
            "privacy": self.privacy.to_dict(),
            "params": dict(self.params),
        }
        if not include_seed and out["params"].get("seed") is not None:
            out["params"]["seed"] = None
            out["params"]["seed_null_reason"] = SEED_WITHHELD
        if include_diagnostics:
            out["diagnostics_not_private"] = {k: plain(v) for k, v in self.diagnostics().items()}
        if include_clean and self.clean is not None:
            out["clean_not_private"] = plain(self.clean)
        if not self.is_private:
            out["warning"] = f"NOT differentially private: {self.not_private_reason}"
        return out

    @property
    def not_private_reason(self) -> str:
        """Why the release carries no guarantee ("" when it is private)."""
        if self.is_private:
            return ""
        if self.privacy.not_private_reason:
            return self.privacy.not_private_reason
        return "naive baseline (its noise scale reveals the gate count)"

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(**kw), allow_nan=False)

    def summary(self, *, diagnostics: bool = False) -> str:
        """Readable summary; ``diagnostics=True`` adds per-step means of the diagnostics
        (data-dependent, not covered by ε)."""
        Q, T, d = self.outputs.shape
        tag = "" if self.is_private else "  [NOT DIFFERENTIALLY PRIVATE]"
        lines = [
            f"PrivateRetrievalResult(method={self.method!r}{tag})",
            f"  queries={Q}, released steps={T}, d={d}",
        ]
        if self.is_private:
            p = self.privacy
            lines.append(
                f"  privacy: ({p.epsilon:g}, {p.delta:g})-DP per query; all {Q} queries "
                f"composed: ({p.epsilon_total:.6g}, {p.delta:g})-DP"
            )
            lines.append("  " + str(p).replace("\n", "\n  "))
        elif self.privacy.not_private_reason:
            lines.append(f"  privacy: NONE ({self.privacy.not_private_reason}).")
        else:
            lines.append(
                "  privacy: NONE. The noise uses the per-step rho of the nominal budget "
                f"(rho = {self.privacy.rho_per_step:.6g}) but scales it by 2r/max(1, m_t), "
                "which reveals the gate count: NOT differentially private."
            )
        if diagnostics and self.noise_std is not None:
            lines.append("  diagnostics (data-dependent, NOT covered by epsilon):")
            lines.append(
                f"    mean noise std per step: {np.round(self.noise_std.mean(0), 6).tolist()}"
            )
            if self.smooth_sensitivity is not None:
                lines.append(
                    "    mean smooth sensitivity per step: "
                    f"{np.round(self.smooth_sensitivity.mean(0), 6).tolist()}"
                )
                if self.activated is not None:
                    lines.append(
                        f"    activation rate per step: {self.activated.mean(0).tolist()}"
                    )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary(diagnostics=True)


def _project(points: np.ndarray, centres: np.ndarray, radius: float | np.ndarray) -> np.ndarray:
    """Euclidean projection of each row onto the closed ball ``B̄(centre, radius)``."""
    diff = points - centres
    norm = np.linalg.norm(diff, axis=1)
    radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), norm.shape)
    scale = np.where(norm > radius, radius / np.where(norm > 0, norm, 1.0), 1.0)
    return centres + diff * scale[:, None]


def _check_noise(noise: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    if noise is None:
        return None
    arr = np.asarray(noise)
    if arr.dtype.kind not in "f":
        raise TypeError(
            f"_innovations must be a float array of standard normal draws; got {arr.dtype}."
        )
    if arr.shape != shape:
        raise ValueError(f"_innovations must have shape {shape} (Q, R, d); got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError("_innovations contains non-finite values.")
    return arr.astype(np.float64, copy=False)


INNOVATIONS_REASON = "innovations supplied by the caller (_innovations), not drawn"


@pins_bank
def private_retrieve(
    memory: LSRMemory,
    queries: Any,
    *,
    method: str,
    epsilon: float,
    delta: float,
    steps: int,
    kappa: float = DEFAULT_KAPPA,
    gamma: float | None = None,
    accounting: str = "rdp",
    output_projection: bool = True,
    seed: Any = None,
    return_clean: bool = False,
    release: str = "smooth",
    progress: Callable[[int, int], None] | None = None,
    _innovations: Any = None,
) -> PrivateRetrievalResult:
    """Release a retrieval trajectory from an LSR memory under (ε, δ)-DP.

    Parameters
    ----------
    memory : LSRMemory
        The bank (the private data) and radius ``r``.
    queries : array_like, (Q, d) or (d,)
        Public queries ``q``.
    method : {"brace", "global", "endpoint", "naive"}
        ``"naive"`` is **not differentially private** (warns with NotPrivateWarning).
    epsilon, delta : float
        Target (ε, δ) for the whole released trajectory of each query (ε > 0, δ ∈ (0,1)).
    steps : int
        Horizon ``T ≥ 1``.
    kappa : float, default 128
        BRACE activation threshold κ ≥ 0 (``H_t = 1{‖R_t‖² > κTr²}``); ``inf`` never
        corrects; κ = 0 corrects whenever the gates differ. The default is the paper's
        MNIST value: with the output projection and ``κ ≥ (2T+1)²/T`` (T ≤ 7 for 128)
        no step activates and BRACE is smooth-sensitivity private mean shift. Smaller κ
        enables the boundary correction, but its certificate (``docs/spec.md`` §5 (b)) grows quickly
        with t; in the synthetic and theory experiments its sensitivity cost exceeded
        its benefit (``docs/experiments.md``).
    gamma : float, None or "gates"
        Smoothness γ of Δ̄ (BRACE). None: the data-independent fraction-0.9 rule of
        :func:`brace.accounting.choose_gamma`. ``"gates"``: the data-independent
        gate-size rule :func:`brace.accounting.choose_gamma_for_gates` (public ε, δ, T, d
        and n; minimax over gate sizes ``m ≥ 20·log(1/δ)/ε``: within about 2× of the
        oracle noise at d ≤ 64 where the default rule is up to 40× off;
        ``docs/utility.md``). The rule used is recorded in ``params["gamma_rule"]``.
    accounting : {"rdp", "paper"}
        How the budget is split over steps (see :mod:`brace.accounting`).
    output_projection : bool, default True
        Project each release onto ``B̄(q, (t+1)r)`` (post-processing).
    seed : None, int, SeedSequence or Generator
        Source of every random draw. The innovations ``ξ ~ N(0, I)`` of shape (Q, T, d)
        are the first draw (the endpoint method uses the last step's), so two calls with
        the same seed and shapes share their noise draws — the paper's naive-vs-BRACE
        comparison. ``params["seed"]`` records it reproducibly (an int, the
        SeedSequence's entropy and spawn key, or a Generator's bit-generator state
        before the draw; :func:`brace._validation.rng_from_record` rebuilds it). The
        record regenerates the noise, so it is secret: :meth:`PrivateRetrievalResult.to_dict`
        and :func:`brace.save_result` withhold it unless asked.
    return_clean : bool
        Also return the noiseless trajectory (NOT private; for evaluation only).
    release : {"smooth", "count", "auto"}, default "smooth"
        BRACE only. ``"smooth"``: the smooth-sensitivity certificate (Δ̄_t, γ).
        ``"count"``: the dimension-free count release (``docs/privacy-accounting.md`` §9):
        each step releases a noisy gate count ``m̃_t`` (pure DP, two-sided geometric), which
        proposes the public sensitivity ``b_t = 2r/max(m̃_t − margin, 1)``, then adds
        Gaussian noise of std ``b_t/sqrt(2ρ_G)``; no variance mismatch, so the cost does not
        grow with d. No boundary correction (κ is ignored). The noisy counts are part of the
        release (``released_counts``). ``"auto"``: whichever of ``"count"`` and
        ``"smooth"`` with ``gamma="gates"`` has the smaller predicted worst noise/oracle
        ratio over gate sizes (:func:`brace.accounting.predicted_noise_ratio`; public
        ε, δ, T, d, n only); the choice is recorded in ``params["release_rule"]``.
    progress : callable ``progress(t, T)``, optional
        Called after each released step (``t = 1..T``; once for the endpoint method);
        the CLI uses it for a progress bar on long horizons. Horizons are bounded by
        :data:`brace._validation.MAX_STEPS`.
    _innovations : array (Q, R, d), private
        Internal (the audit scales the innovations to test itself): standard normal
        draws used instead of drawing them. The result is then marked **not private**
        (``is_private=False``, ``privacy.event`` a NonPrivateEvent): caller-chosen noise
        (zeros, say) carries no guarantee.

    Returns
    -------
    PrivateRetrievalResult

    Notes
    -----
    Privacy is per query: each query's release is (ε, δ)-DP with respect to replacing
    one memory. Answering several queries on the same bank composes (``docs/spec.md`` §4):
    ``res.privacy.epsilon_total`` is the ε of the whole call at the same δ, and
    :class:`brace.PrivateMemory` tracks the total over calls against a budget.
    """
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
    X, _ = memory._bank()
    r = memory.radius_
    q, was_1d = check_queries(queries, X.shape[1], name="queries")
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    T = check_steps(steps)
    kap = check_nonnegative("kappa", kappa, allow_inf=True)
    if accounting not in ("rdp", "paper"):
        raise ValueError(f"accounting must be 'rdp' or 'paper'; got {accounting!r}.")
    Q, d = q.shape
    gamma_rule = "given"
    if isinstance(gamma, str):
        if gamma != "gates":
            raise ValueError(
                f"gamma must be a number > 0, None (the fraction-0.9 rule) or 'gates' (the "
                f"gate-size rule); got {gamma!r}."
            )
        gamma_rule = "gates"
        gamma = (choose_gamma_for_gates(eps, dlt, T, dim=d, n=X.shape[0])
                 if method == "brace" and accounting == "rdp" else None)
        if method == "brace" and accounting != "rdp":
            raise ValueError("gamma='gates' is defined for accounting='rdp'.")
    elif gamma is None:
        gamma_rule = "fraction-0.9"
    if gamma is not None:
        gamma = check_nonnegative("gamma", gamma)
        if method == "brace" and gamma == 0:
            raise ValueError("gamma must be > 0 for BRACE (γ = 0 is global sensitivity).")
    proj_flag = check_bool("output_projection", output_projection)
    return_clean = check_bool("return_clean", return_clean)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable as progress(t, T). Found {progress!r}.")
    check_output_size((2, Q, T + 1, d), "the release and its clean trajectory")
    releases = 1 if method == "endpoint" else T
    xi = _check_noise(_innovations, (Q, releases, d))
    rng, seed_record = rng_and_record(seed)
    if xi is None:
        xi = rng.standard_normal((Q, T, d))
        if method == "endpoint":
            xi = xi[:, -1:]
    if method == "naive":
        warnings.warn(
            "method='naive' is NOT differentially private: its noise scale 2r/max(1, m_t) "
            "reveals the gate count. Use it only as a baseline.",
            NotPrivateWarning,
            stacklevel=2,
        )
    if release not in ("smooth", "count", "auto"):
        raise ValueError(f"release must be 'smooth', 'count' or 'auto'; got {release!r}.")
    release_rule = "given"
    if release == "auto":
        if method != "brace" or accounting != "rdp":
            raise ValueError("release='auto' is a BRACE choice with accounting='rdp'; got "
                             f"method={method!r}, accounting={accounting!r}.")
        # public: the predicted noise/oracle ratio of each mode over the gate sizes
        w_smooth, _, g_smooth = predicted_noise_ratio("smooth", eps, dlt, T, dim=d,
                                                      n=X.shape[0])
        w_count, _, _ = predicted_noise_ratio("count", eps, dlt, T, dim=d, n=X.shape[0])
        release = "count" if w_count < w_smooth else "smooth"
        if release == "smooth":
            gamma, gamma_rule = g_smooth, "gates"
        release_rule = (f"auto (predicted noise/oracle, geometric mean over gate sizes: "
                        f"smooth {w_smooth:.3g}, count {w_count:.3g})")
    count_noise = None
    if release == "count":
        if method != "brace" or accounting != "rdp":
            raise ValueError("release='count' is a BRACE release with accounting='rdp'; got "
                             f"method={method!r}, accounting={accounting!r}.")
        spent = calibrate_count(eps, dlt, T, dim=d)
        p = math.exp(-spent.eps_count)  # two-sided geometric: P(z) ∝ p^|z|
        count_noise = rng.geometric(1.0 - p, (Q, T)) - rng.geometric(1.0 - p, (Q, T))
        gamma_rule = "none (count release)"
    else:
        spent = accounting_module_calibrate(
            eps, dlt, releases, dim=d, gamma=gamma if method == "brace" else 0.0,
            accounting=accounting, mechanism=method,
        )
    mult = 1.0 / math.sqrt(2.0 * spent.rho_per_step)
    spent = spent.for_queries(Q)
    if _innovations is not None:
        spent = dataclasses.replace(spent, not_private_reason=INNOVATIONS_REASON,
                                    epsilon_total=math.inf)
    params = {
        "radius": r,
        "kappa": kap,
        "gamma": spent.gamma,
        "gamma_rule": gamma_rule if method == "brace" else "none (fixed sensitivity)",
        "release": release if method == "brace" else "fixed sensitivity",
        "release_rule": release_rule,
        "steps": T,
        "output_projection": proj_flag,
        "seed": seed_record if _innovations is None else None,
        "accounting": accounting,
    }
    if method == "endpoint":
        res = _endpoint(memory, q, T, r, mult, xi, proj_flag, spent, params, return_clean)
        if progress is not None:
            progress(1, 1)
    else:
        res = _iterative(
            memory, q, method, T, r, kap, spent, mult, xi, proj_flag, params,
            return_clean, count_noise=count_noise, progress=progress,
        )
    if _innovations is not None:
        res = dataclasses.replace(res, is_private=False)
    return res


@dataclass(frozen=True)
class CertificateTrace:
    """Pre-noise outputs and smooth bounds of a method along a given public history.

    ``pre_noise`` (Q, T, d): ``Q_t(D; y_{<t})``; ``noise_scale`` (Q, T): the sensitivity
    the method calibrates to (``Δ̄_t`` for BRACE); ``G`` (BRACE): list over t of the
    ``(Q, K+1)`` arrays ``G_D(k)``.
    """

    pre_noise: np.ndarray
    noise_scale: np.ndarray
    G: list | None


@pins_bank
def certificate(
    memory: LSRMemory,
    queries: Any,
    history: Any,
    *,
    method: str = "brace",
    steps: int,
    kappa: float = 0.0,
    gamma: float,
    output_projection: bool = True,
) -> CertificateTrace:
    """Evaluate a mechanism's pre-noise outputs and noise scales along a fixed history.

    ``history`` holds ``Y_0 = q, Y_1, …, Y_{T-1}`` (shape (Q, T, d); a further column is
    ignored). Each step ``t`` uses only ``Y_{<t}``, exactly as the mechanism does, so
    this is the function whose sensitivity the certificate bounds — used by the
    validity tests and by the privacy audit to recompute both banks' Gaussian means and
    scales along an observed release.
    """
    if method not in ("brace", "global", "naive"):
        raise ValueError(f"certificate is defined for iterative methods; got {method!r}.")
    X, _ = memory._bank()
    r = memory.radius_
    q, _ = check_queries(queries, X.shape[1], name="queries")
    T = check_steps(steps)
    kap = check_nonnegative("kappa", kappa, allow_inf=True)
    g = check_nonnegative("gamma", gamma)
    h = as_float_array("history", history)
    if h.ndim != 3 or h.shape[0] != q.shape[0] or h.shape[2] != q.shape[1] or h.shape[1] < T:
        raise ValueError(f"history must have shape (Q, T, d) = {(q.shape[0], T, q.shape[1])};"
                         f" got {h.shape}.")
    hist = np.zeros((q.shape[0], T + 1, q.shape[1]))
    hist[:, :T] = h[:, :T]

    trace: dict = {}
    # only γ of the calibration matters along a fixed history; noise multiplier 1
    res = _iterative(memory, q, method, T, r, kap, SimpleNamespace(gamma=g), 1.0, None,
                     output_projection, {}, False, history=hist, trace=trace)
    scale = res.smooth_sensitivity if method == "brace" else res.noise_std
    return CertificateTrace(np.stack(trace["pre_noise"], axis=1), scale, trace.get("G"))


@functools.lru_cache(maxsize=256)
def _calibrate_cached(eps, dlt, steps, dim, gamma, acc, method):
    return accounting.calibrate(eps, dlt, steps, dim=dim, gamma=gamma, accounting=acc,
                                mechanism=method)


def accounting_module_calibrate(eps, dlt, steps, *, dim, gamma, accounting, mechanism):
    """``accounting.calibrate`` memoised on its (scalar, validated) arguments: calibration
    is a deterministic function of public parameters, and the γ rule costs tens of ms."""
    return _calibrate_cached(eps, dlt, steps, dim, gamma, accounting, mechanism)


def no_correction_kappa(steps: int) -> float:
    """Smallest κ of the form ``(2T+1)²/T·(1 + 10⁻⁶)``: with the output projection no bank
    can activate the correction, so BRACE is smooth-sensitivity private mean shift.

    In exact arithmetic ``κ ≥ (2T+1)²/T`` suffices (``docs/privacy.md`` §4); the relative
    ``10⁻⁶`` covers the public rounding slack (§8) for inputs whose slack is below
    ``10⁻⁷ r`` (every bank within ``~10⁶ r`` of the origin).
    """
    T = check_steps(steps)
    return (2 * T + 1) ** 2 / T * (1.0 + 1e-6)


def endpoint_sensitivity(n: int, r: float, T: int, queries: np.ndarray) -> np.ndarray:
    """Sensitivity of the endpoint release, per query: ``Δ = 2T(r + σ)``.

    Both endpoints lie in ``B̄(q, Tr)``; each computed step adds at most the public
    rounding slack ``σ`` (``docs/privacy.md`` §8). Refuses coordinates out of range.
    """
    q = np.asarray(queries, dtype=np.float64)
    num = Numerics(n, q.shape[1], r, T)
    qscale = np.abs(q).max(axis=1)
    num.check(qscale + (T + 1) * r)
    return 2.0 * T * (r + num.slack(qscale + T * r))


def global_sensitivity(n: int, r: float, T: int, centres: np.ndarray) -> np.ndarray:
    """Sensitivity of one global-noise step at public centres ``y``: ``2r + σ_y`` (grid-rounded).

    Both gate means lie in ``B̄(y, r)`` up to the public rounding slack ``σ_y``.
    """
    y = np.asarray(centres, dtype=np.float64)
    num = Numerics(n, y.shape[1], r, T)
    return num.value(cap_units(num, num.slack(np.abs(y).max(axis=1))))


def _endpoint(memory, q, T, r, mult, xi, proj, spent, params, return_clean):
    clean = memory.retrieve(q, T)
    std = endpoint_sensitivity(memory.n_memories, r, T, q) * mult
    y = clean[:, -1] + std[:, None] * xi[:, 0]
    if proj:
        y = _project(y, q, (T + 1) * r)
    Q = q.shape[0]
    zeros = np.zeros((Q, 1), dtype=np.int64)
    return PrivateRetrievalResult(
        method="endpoint",
        is_private=True,
        outputs=y[:, None, :],
        noise_std=std[:, None],
        smooth_sensitivity=None,
        activated=np.zeros((Q, 1), dtype=bool),
        gate_clean=zeros,
        gate_released=zeros.copy(),
        left=zeros.copy(),
        entered=zeros.copy(),
        correction_norm=np.zeros((Q, 1)),
        privacy=spent,
        params=params,
        clean=clean if return_clean else None,
        queries=q,
    )


def _iterative(
    memory, q, method, T, r, kappa, spent, mult, xi, proj, params, return_clean,
    history=None, trace=None, count_noise=None, progress=None,
):
    """Run an iterative method. With ``history`` (Q, T+1, d), the released states are
    taken from it instead of being drawn (used to evaluate the certificate along a given
    public history); ``trace`` (a dict) then collects pre-noise points and ``G``."""
    Q, d = q.shape
    n = memory.n_memories
    brace = method == "brace"
    theta = math.sqrt(kappa * T) * r if math.isfinite(kappa) else math.inf
    # Floating point (docs/privacy.md §8): public slack per centre, refused out of range.
    num = Numerics(n, d, r, T)
    qscale = np.abs(q).max(axis=1)
    num.check(qscale + (T + 1) * r)
    # Public shortcut (``docs/spec.md`` §5): with the projection, ‖q - Y_{t-1}‖ ≤ t r (up to
    # rounding), so the public activation bound is at most b3_max below; if θ exceeds it
    # (κ a hair above (2T+1)²/T), no bank activates.
    never_activates = not math.isfinite(theta) or count_noise is not None
    if proj and not never_activates:
        smax = float(np.max(num.slack(qscale + (T + 1) * r)))
        mg = 1.0 + num.norm_margin
        b3_max = T * (r + num.tau + smax) + (T * r + smax) * mg + r + smax
        never_activates = bool(num.down(theta * (1.0 - num.norm_margin)) >= num.up(b3_max))
    K = n_terms(n, spent.gamma) if brace and count_noise is None else 0
    released_counts = None if count_noise is None else np.zeros((Q, T), dtype=np.int64)
    clean_bound = (
        CleanTrajectoryBound(Q, K, num, qscale) if brace and not never_activates else None
    )
    z = np.empty((Q, T + 1, d))
    z[:, 0] = q
    Y = np.empty((Q, T + 1, d))
    Y[:, 0] = q
    shape = (Q, T)
    std = np.zeros(shape)
    smooth = np.zeros(shape) if brace else None
    activated = np.zeros(shape, dtype=bool)
    gate_clean = np.zeros(shape, dtype=np.int64)
    gate_rel = np.zeros(shape, dtype=np.int64)
    inter = np.zeros(shape, dtype=np.int64)
    rnorm = np.zeros(shape)
    idx = np.arange(Q)
    # The clean trajectory is needed by the correction (BRACE when it can activate) or
    # when asked for; otherwise each step is one pass at the released state only, and
    # the clean-gate diagnostics are not computed.
    track_clean = return_clean or clean_bound is not None
    for t in range(1, T + 1):
        y_prev = Y[:, t - 1]
        if track_clean:
            centres = np.concatenate([y_prev, z[:, t - 1]])
            gp = memory.gate_pass(
                centres,
                group_size=Q,  # the released-state group as in a pass of its own
                pairs=(idx + Q, idx),
                near_centres=idx + Q if clean_bound is not None and t > 1 else None,
                near_radius=2.0 * r + num.tau,
                near_tolerance=num.near_tolerance,
            )
            means = gp.means(centres)
            a_t = means[:Q]
            z[:, t] = means[Q:]
            m_t = gp.counts[:Q]
            gate_clean[:, t - 1] = gp.counts[Q:]
            inter[:, t - 1] = gp.pair_counts
            R_t = z[:, t] - a_t  # identity R_t = z_t - a_t (``docs/spec.md`` §3 step 2)
            rn = np.linalg.norm(R_t, axis=1)
            rnorm[:, t - 1] = rn
        else:
            gp = memory.gate_pass(y_prev)
            a_t = gp.means(y_prev)
            m_t = gp.counts
        gate_rel[:, t - 1] = m_t
        yscale = np.abs(y_prev).max(axis=1)
        num.check(yscale, "a released state (the public centre of this step)")
        sig_y = num.slack(yscale)
        if brace and count_noise is not None:
            # count release (docs/privacy-accounting.md §9): public b from the noisy count
            noisy = m_t + count_noise[:, t - 1]
            released_counts[:, t - 1] = noisy
            m_prop = np.maximum(noisy - spent.count_margin, 1)
            b = np.minimum(fixed_centre_units(m_prop, 0, num, sig_y)[:, 0],
                           cap_units(num, sig_y))
            pre = a_t
            sens = num.value(b)
            smooth[:, t - 1] = sens
        elif brace:
            if never_activates:
                pre = a_t  # H_t = 0; the gate mean already lies in B̄(y_prev, r)
            else:
                H = rn * rn > kappa * T * r * r
                activated[:, t - 1] = H
                pre = _project(a_t + H[:, None] * R_t, y_prev, r)
            F = fixed_centre_units(m_t, K, num, sig_y)
            if clean_bound is not None:
                if t == 1:  # z_0 = q is public: A_1 is the fixed-centre bound at q
                    A_t = clean_bound.advance(clean_counts=gp.counts[Q:])
                else:
                    A_t = clean_bound.advance(
                        segments=sorted_segments(gp.near_rows, gp.near_dist, Q))
                U = activation_possible(
                    F=F,
                    A_t=A_t,
                    dist_z_a=rn,
                    dist_z_y=np.linalg.norm(z[:, t] - y_prev, axis=1),
                    dist_q_y=np.linalg.norm(q - y_prev, axis=1),
                    t=t,
                    num=num,
                    slack_y=sig_y,
                    threshold=theta,
                )
                G = combine(F, U, A_t, theta, num, sig_y)
            else:
                G = F
            sens = smooth_max(num.value(G), spent.gamma, num.value(cap_units(num, sig_y)))
            smooth[:, t - 1] = sens
        else:
            pre = a_t
            if method == "global":  # 2r, plus the public rounding slack
                sens = global_sensitivity(n, r, T, y_prev)
            else:
                sens = 2.0 * r / np.maximum(m_t, 1)
        s_t = sens * mult
        std[:, t - 1] = s_t
        if trace is not None:
            trace.setdefault("pre_noise", []).append(pre)
            if brace:
                trace.setdefault("G", []).append(num.value(G))
        if history is not None:
            Y[:, t] = history[:, t]
            continue
        y = pre + s_t[:, None] * xi[:, t - 1]
        if proj:
            y = _project(y, q, (t + 1) * r)
        Y[:, t] = y
        if progress is not None:
            progress(t, T)
    return PrivateRetrievalResult(
        method=method,
        is_private=method in PRIVATE_METHODS,
        outputs=Y[:, 1:],
        noise_std=std,
        smooth_sensitivity=smooth,
        activated=activated,
        gate_clean=gate_clean if track_clean else None,
        gate_released=gate_rel,
        left=gate_clean - inter if track_clean else None,
        entered=gate_rel - inter if track_clean else None,
        correction_norm=rnorm if track_clean else None,
        privacy=spent,
        params=params,
        clean=z if return_clean else None,
        queries=q,
        released_counts=released_counts,
    )
