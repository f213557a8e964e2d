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

Every choice of a call — the release mode, γ, the calibrated ``ρ_t``, the noise mode —
is made by :func:`brace.plan.plan_release` into a frozen :class:`brace.plan.ReleasePlan`;
:func:`run_plan` draws with the plan's noise strategy (:mod:`brace.noise`) through the
step pipeline of :mod:`brace.steps` (gate pass → statistic → bound → noise → projection;
the sensitivity is in :mod:`brace.sensitivity`, the calibration in
:mod:`brace.accounting`). The naive baseline's noise scale depends on the gate count
``m_t = |I(D, Y_{t-1})|``, which leaks it: it is a baseline only, warns with
:class:`NotPrivateWarning` on every call, and its result says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import steps as _steps
from ._io import strict_json
from ._validation import (
    as_float_array,
    check_bool,
    check_output_size,
    check_queries,
    rng_and_record,
)
from .memory import LSRMemory, pins_bank
from .noise import make_noise
from .plan import (
    DEFAULT_KAPPA,
    METHODS,
    PRIVATE_METHODS,
    ReleasePlan,
    no_correction_kappa,
    plan_release,
)
from .secure import SECURE_SEED_REASON, check_noise
from .steps import endpoint_sensitivity, global_sensitivity

__all__ = [
    "DEFAULT_KAPPA",
    "DIAGNOSTIC_FIELDS",
    "METHODS",
    "PRIVATE_METHODS",
    "CertificateTrace",
    "NotPrivateWarning",
    "PrivateRetrievalResult",
    "certificate",
    "endpoint_sensitivity",
    "global_sensitivity",
    "no_correction_kappa",
    "private_retrieve",
    "run_plan",
]

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
    params : dict — radius, kappa (as it runs; None for ∞), kappa_rule, gamma,
        gamma_rule, release, release_rule, steps, output_projection, seed, accounting.
    clean : (Q, T+1, d) noiseless trajectory — only when ``return_clean=True``; it is
        **not private** and must not be released.
    queries : (Q, d) the (public) queries.
    released_counts : (Q, T) int or None — the count release's noisy gate counts
        ``m̃_t``: part of the DP release (``release="count"`` only).
    grid : (Q, T) float or None — secure mode (``noise="secure"``): the public grid unit
        (a power of two) of each released step; every released coordinate is an integer
        multiple of it (``docs/privacy-accounting.md`` §13). None for plain noise.
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
    grid: np.ndarray | None = None

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

        from ._version import __version__

        out: dict[str, Any] = {
            "schema": RESULT_SCHEMA,
            "version": __version__,
            "method": self.method,
            "is_private": self.is_private,
            "outputs": plain(self.outputs),
            "queries": plain(self.queries),
            **({} if self.released_counts is None
               else {"released_counts": plain(self.released_counts)}),
            **({} if self.grid is None else {"grid": plain(self.grid)}),
            "privacy": self.privacy.to_dict(),
            "params": strict_json(dict(self.params)),
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
        """Readable summary of the release and its privacy (what ``str`` shows).

        ``diagnostics=True`` adds per-step means of the noise std and the sensitivity bound
        (and BRACE's activation rate). For smooth BRACE and naive they are computed from
        the bank and **not covered by ε**; for the count release, global and endpoint they
        are public (functions of the released counts and states, or fixed)."""
        Q, T, d = self.outputs.shape
        tag = "" if self.is_private else "  [NOT DIFFERENTIALLY PRIVATE]"
        lines = [
            f"PrivateRetrievalResult(method={self.method!r}{tag})",
            f"  queries={Q}, released steps={T}, d={d}",
        ]
        if self.is_private:
            p = self.privacy
            eps_t, dl_t = p.composed()  # finite: at Q x delta where the deltas add
            lines.append(
                f"  privacy: ({p.epsilon:g}, {p.delta:g})-DP per query; all {Q} queries "
                f"composed: ({eps_t:.6g}, {dl_t:g})-DP"
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
            count = getattr(self.privacy, "release", "smooth") == "count"
            if count:
                head = "public: set by the released noisy counts"
                sens = "mean proposed sensitivity b_t per step"
            elif self.method in ("global", "endpoint"):
                head, sens = "public: fixed sensitivity", ""
            else:
                head = "data-dependent, NOT covered by epsilon"
                sens = "mean smooth sensitivity per step" if self.method == "brace" else ""
            lines.append(f"  diagnostics ({head}):")
            lines.append(
                f"    mean noise std per step: {np.round(self.noise_std.mean(0), 6).tolist()}"
            )
            if sens and self.smooth_sensitivity is not None:
                lines.append(
                    f"    {sens}: {np.round(self.smooth_sensitivity.mean(0), 6).tolist()}"
                )
            if self.method == "brace" and not count and self.activated is not None:
                lines.append(f"    activation rate per step: {self.activated.mean(0).tolist()}")
        return "\n".join(lines)

    def __str__(self) -> str:
        """The release and its privacy only; diagnostics with ``summary(diagnostics=True)``."""
        return self.summary()

    def __repr__(self) -> str:
        """The release and its privacy only (no diagnostics, no seed)."""
        Q, T, d = self.outputs.shape
        p = self.privacy
        priv = (f"({p.epsilon:g}, {p.delta:g})-DP per query, epsilon_total="
                f"{p.epsilon_total:.6g}" if self.is_private else "NOT differentially private")
        counts = "" if self.released_counts is None else ", released_counts=(Q, T) int"
        return (f"PrivateRetrievalResult(method={self.method!r}, is_private={self.is_private}, "
                f"release={self.params.get('release', '')!r}, outputs=(Q, T, d)=({Q}, {T}, "
                f"{d}){counts}, privacy={priv})")


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
    release: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    noise: str = "auto",
    _innovations: Any = None,
    _grid_factor: int = 1,
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
        Target (ε, δ) for the whole released trajectory of each query (ε > 0, δ ∈ (0,1));
        both are required (None is an error: a release needs its budget).
    steps : int
        Horizon ``T ≥ 1``.
    kappa : float, default 128
        BRACE activation threshold κ ≥ 0 (``H_t = 1{‖R_t‖² > κTr²}``); ``inf`` never
        corrects; κ = 0 corrects whenever the gates differ. The default is the paper's
        MNIST value: with the output projection and ``κ ≥ (2T+1)²/T`` (T ≤ 7 for 128)
        no step activates and BRACE is smooth-sensitivity private mean shift. Smaller κ
        enables the boundary correction, but its certificate (``docs/spec.md`` §5 (b))
        grows quickly with t: on banks with well-populated gates (the synthetic and
        theory experiments) its sensitivity cost exceeded its benefit, while where the
        clean gates are empty or hold fewer than about 1/γ memories correction won
        (``docs/experiments.md`` §4–§5). When correcting, a public γ above the default
        often pays (paper setting, κ = 0: final error 0.071 at the default γ, 0.054 at
        γ = 0.4). ``params["kappa"]`` records the κ that runs: None (κ = ∞) for the count
        release and the baselines, which never correct, and ``params["kappa_rule"]`` says
        why.
    gamma : float, None or "gates"
        Smoothness γ of Δ̄ (BRACE). None: the data-independent fraction-0.9 rule of
        :func:`brace.policy.choose_gamma`. ``"gates"``: the data-independent
        gate-size rule :func:`brace.policy.choose_gamma_for_gates` (public ε, δ, T, d
        and n; minimax over gate sizes ``m ≥ 20·log(1/δ)/ε``: within about 2× of the
        oracle noise at d ≤ 64 where the default rule is up to 40× off;
        ``docs/utility.md``). The rule used is recorded in ``params["gamma_rule"]``.
    accounting : {"rdp", "paper"}
        How the budget is split over steps (see :mod:`brace.accounting`).
    output_projection : bool, default True
        Project each release onto ``B̄(q, (t+1)r)`` (post-processing).
    seed : None, int, SeedSequence or Generator
        The plain noise's source (with ``noise="auto"``, giving a seed selects plain
        noise; without one the noise is secure). The innovations ``ξ ~ N(0, I)`` of shape (Q, T, d)
        are the first draw (the endpoint method uses the last step's), so two calls with
        the same seed and shapes share their noise draws — the paper's naive-vs-BRACE
        comparison. ``params["seed"]`` records it reproducibly (an int, the
        SeedSequence's entropy and spawn key, or a Generator's bit-generator state
        before the draw; :func:`brace._validation.rng_from_record` rebuilds it); a call
        without a seed records none. The record regenerates the noise, so it is secret:
        :meth:`PrivateRetrievalResult.to_dict` and :func:`brace.save_result` withhold it
        unless asked.
    return_clean : bool
        Also return the noiseless trajectory (NOT private; for evaluation only).
    release : {"smooth", "count", "auto"} or None
        BRACE only; None is :data:`brace.plan.DEFAULT_RELEASE` (``"auto"``; the
        baselines and ``accounting="paper"`` always use ``"smooth"``). ``"smooth"``: the
        smooth-sensitivity certificate (Δ̄_t, γ).
        ``"count"``: the dimension-free count release (``docs/privacy-accounting.md`` §9):
        each step releases a noisy gate count ``m̃_t`` (pure DP, two-sided geometric), which
        proposes the public sensitivity ``b_t = 2r/max(m̃_t − margin, 1)``, then adds
        Gaussian noise of std ``b_t/sqrt(2ρ_G)``; no variance mismatch, so the cost does not
        grow with d. No boundary correction (κ is not used; recorded as None, i.e. ∞).
        The noisy counts are part of the release (``released_counts``). ``"auto"``
        (``docs/privacy-accounting.md`` §10): with a γ given (a number or ``"gates"``),
        the smooth release with it; otherwise :func:`brace.policy.choose_release`
        picks, from public ε, δ, T, d, n only, the smooth release (largest γ) or the
        count release (largest count share) whose noise never exceeds 1.05× global, by
        the smaller predicted noise/oracle ratio over gate sizes — the count release only
        where no correction can fire (κ = ∞, or ``κ ≥ no_correction_kappa(T)`` with the
        projection). The choice is recorded in ``params["release_rule"]`` (and γ's in
        ``params["gamma_rule"]``).
    progress : callable ``progress(t, T)``, optional
        Called after each released step (``t = 1..T``; once for the endpoint method);
        the CLI uses it for a progress bar on long horizons. It must not edit the bank:
        an edit is refused at the call's exit, but one undone before the call returns
        is not detected (``docs/scale.md``, "No copies"). Horizons are bounded by
        :data:`brace._validation.MAX_STEPS`.
    noise : {"auto", "plain", "secure"}, default "auto"
        ``"auto"``: secure without a seed, plain with one. ``"secure"``
        (``docs/privacy-accounting.md`` §13, ``docs/deploying.md``): every random bit from
        the operating system's CSPRNG, no seed (a seed is an error); the pre-noise point is
        rounded to a public power-of-two grid (the rounding enters the sensitivity), the
        noise is the exact discrete Gaussian on that grid (Canonne, Kamath & Steinke 2020)
        and the noisy counts an exact two-sided geometric, and every released coordinate
        is a grid point (``res.grid``). Every method and release supports it; the smooth
        release's data-dependent scale is proven in Theorem 11. The guarantee and the
        accounting are those of the plain release. ``"plain"``: numpy's float64 draws
        from the seeded generator (reproducible, for experiments): their low bits can
        reveal the pre-noise point (``docs/audit.md`` §9), so never release them without
        a reason to.
    _innovations : array (Q, R, d), private
        Internal (the audit scales the innovations to test itself): standard normal
        draws used instead of drawing them. The result is then marked **not private**
        (``is_private=False``, ``privacy.event`` a NonPrivateEvent): caller-chosen noise
        (zeros, say) carries no guarantee.
    _grid_factor : int, private
        Secure mode, the audit's deliberately broken variant only: round the pre-noise
        point to a grid this many times coarser than the noise is calibrated for. Any
        value but 1 marks the result **not private**.

    Returns
    -------
    PrivateRetrievalResult

    Notes
    -----
    Every choice (release mode, γ, calibration) is made by :func:`brace.plan_release`
    from public values; ``brace.plan_release(memory, method=…, …)`` shows what a call
    would do without running it.

    Privacy is per query: each query's release is (ε, δ)-DP with respect to replacing
    one memory. Answering several queries on the same bank composes (``docs/spec.md`` §4):
    ``res.privacy.epsilon_total`` is the ε of the whole call at the same δ, and
    :class:`brace.PrivateMemory` tracks the total over calls against a budget.
    """
    q, noise = _checked_call(memory, queries, epsilon, delta, noise, _innovations)
    # every choice (release mode, γ, calibration, noise), from public values only; a seed
    # with noise="secure" is refused there (brace.noise.resolve_noise)
    plan = plan_release(memory, method=method, epsilon=epsilon, delta=delta, steps=steps,
                        kappa=kappa, gamma=gamma, accounting=accounting,
                        output_projection=output_projection, release=release,
                        queries=q.shape[0], noise=noise,
                        seeded=seed is not None or _innovations is not None)
    return run_plan(memory, q, plan, seed=seed, return_clean=return_clean,
                    progress=progress, innovations=_innovations, grid_factor=_grid_factor)


def _checked_call(memory: Any, queries: Any, epsilon: Any, delta: Any, noise: Any,
                  innovations: Any) -> tuple[np.ndarray, str]:
    """:func:`private_retrieve`'s own arguments checked, before the plan (which checks the
    mechanism's): the memory, the budget's presence, the queries and the noise mode."""
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    if epsilon is None or delta is None:  # public: refused before the bank is read
        raise ValueError(
            f"private_retrieve needs the budget: epsilon and delta must be numbers; got "
            f"epsilon={epsilon!r}, delta={delta!r}. Without a budget use brace.certificate "
            "or brace.plan_release (epsilon=None, delta=None) along a fixed history.")
    X, _ = memory._bank()
    q, _ = check_queries(queries, X.shape[1], name="queries")
    noise = check_noise(noise)
    if noise == "secure" and innovations is not None:
        raise ValueError("_innovations are standard normal draws; noise='secure' draws its "
                         "own exact discrete noise.")
    return q, noise


def _checked_run(plan: Any, q: np.ndarray, seed: Any, return_clean: Any, progress: Any,
                 innovations: Any, grid_factor: Any) -> tuple[bool, np.ndarray | None]:
    """:func:`run_plan`'s arguments checked against the plan: the seed (none in secure
    mode), the audit's grid factor, ``return_clean``, ``progress``, the output size and the
    innovations' shape. Returns ``return_clean`` and the innovations."""
    secure = plan.noise == "secure"
    if secure and seed is not None:
        raise ValueError(f"seed must be None with noise='secure': {SECURE_SEED_REASON}")
    if isinstance(grid_factor, bool) or not isinstance(grid_factor, int) or grid_factor < 1:
        raise ValueError(f"_grid_factor must be an int >= 1; got {grid_factor!r}.")
    if grid_factor != 1 and not secure:
        raise ValueError("_grid_factor is for noise='secure'.")
    return_clean = check_bool("return_clean", return_clean)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable as progress(t, T). Found {progress!r}.")
    Q, d = q.shape
    check_output_size((2, Q, plan.steps + 1, d), "the release and its clean trajectory")
    return return_clean, _check_noise(innovations, (Q, plan.releases, d))


def run_plan(memory: LSRMemory, q: np.ndarray, plan: Any, *, seed: Any = None,
             return_clean: bool = False, progress: Callable[[int, int], None] | None = None,
             innovations: Any = None, grid_factor: int = 1) -> PrivateRetrievalResult:
    """Run a validated plan on validated queries ``q`` (Q, d): the call's noise strategy
    (:func:`brace.noise.make_noise`, as ``plan.noise`` says), the step pipeline
    (:func:`brace.steps.run`) and the result. :func:`private_retrieve` and
    :class:`brace.PrivateMemory` (which prices the same plan) both end here."""
    return_clean, xi = _checked_run(plan, q, seed, return_clean, progress, innovations,
                                    grid_factor)
    secure = plan.noise == "secure"
    Q, d = q.shape
    rng, seed_record = (None, None) if secure else rng_and_record(seed)
    if plan.method == "naive":
        warnings.warn(
            "method='naive' is NOT differentially private: its noise scale 2r/max(1, m_t) "
            "reveals the gate count. Use it only as a baseline.",
            NotPrivateWarning,
            stacklevel=4,  # the caller of private_retrieve (through its bank-pinning wrapper)
        )
    noise = make_noise(plan, rng=rng, shape=(Q, plan.releases, d), innovations=xi,
                       grid_factor=grid_factor)
    spent = plan.spent
    if xi is not None:
        spent = dataclasses.replace(spent, not_private_reason=INNOVATIONS_REASON,
                                    epsilon_total=math.inf)
    if grid_factor != 1:
        spent = dataclasses.replace(spent, not_private_reason=GRID_FACTOR_REASON,
                                    epsilon_total=math.inf)
    arrays = _steps.run(memory, q, plan, noise, progress=progress, return_clean=return_clean)
    if plan.method == "endpoint" and progress is not None:
        progress(1, 1)
    params = plan.params(seed_record if xi is None else None)
    if secure:
        params["seed_null_reason"] = SECURE_SEED_RECORD
    elif seed_record is None:
        params["seed_null_reason"] = NO_SEED_RECORD
    return PrivateRetrievalResult(
        method=plan.method,
        is_private=plan.is_private and xi is None and grid_factor == 1,
        privacy=spent,
        params=params,
        queries=q,
        **arrays,
    )


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
    gamma: float | str | None = None,
    output_projection: bool = True,
    release: str | None = None,
    released_counts: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    noise: str | None = None,
    result: PrivateRetrievalResult | None = None,
) -> CertificateTrace:
    """Evaluate a mechanism's pre-noise outputs and noise scales along a fixed history.

    ``history`` holds ``Y_0 = q, Y_1, …, Y_{T-1}`` (shape (Q, T, d); a further column is
    ignored). Each step ``t`` uses only ``Y_{<t}``, exactly as the mechanism does, so
    this is the function whose sensitivity the certificate bounds — used by the
    validity tests and by the privacy audit to recompute both banks' Gaussian means and
    scales along an observed release.

    The plan is :func:`brace.plan_release`'s. Without ``epsilon``/``delta``: γ as given
    (a number ≥ 0; γ = 0 is the fixed-sensitivity bound) and the smooth release. With the
    release's ``epsilon`` and ``delta``: the plan of the same call to
    :func:`brace.private_retrieve` (``gamma`` and ``release`` as there, ``"auto"``
    included); the count release then needs ``released_counts`` (Q, T), the released
    noisy counts ``m̃_t``, and ``noise_scale`` is the public ``b_t`` they propose
    (``docs/privacy-accounting.md`` §9). ``noise_scale`` is the sensitivity, before the
    noise multiplier. ``noise`` is the noise mode of the evaluated release: with
    ``"secure"`` the smooth certificate's rate keeps secure mode's larger margin
    (``docs/privacy-accounting.md`` §13, Theorem 11).

    ``result``: the release this certifies (a :class:`PrivateRetrievalResult`). The noise
    mode follows it (``noise=None``; a ``noise`` that differs is refused), and so do the
    released counts of a count release; its method, horizon, release mode, γ, κ and
    output projection must be those of the plan, else a ``ValueError`` names the first
    that differs. Without ``result``, ``noise=None`` is ``"plain"``.
    """
    if method not in ("brace", "global", "naive"):
        raise ValueError(f"certificate is defined for iterative methods; got {method!r}.")
    X, _ = memory._bank()
    q, _ = check_queries(queries, X.shape[1], name="queries")
    noise = _certified_noise(noise, result)
    plan = plan_release(memory, method=method, epsilon=epsilon, delta=delta, steps=steps,
                        kappa=kappa, gamma=gamma, output_projection=output_projection,
                        release=release, queries=q.shape[0], noise=noise)
    if result is not None:
        _check_certified(plan, result)
        if released_counts is None:
            released_counts = result.released_counts
    Q, T, d = q.shape[0], plan.steps, q.shape[1]
    h = as_float_array("history", history)
    if h.ndim != 3 or h.shape[0] != Q or h.shape[2] != d or h.shape[1] < T:
        raise ValueError(f"history must have shape (Q, T, d) = {(Q, T, d)}; got {h.shape}.")
    hist = np.zeros((Q, T + 1, d))
    hist[:, :T] = h[:, :T]
    counts = _check_counts(released_counts, plan.release == "count", (Q, T))
    trace: dict = {}
    _steps.run(memory, q, plan, None, history=hist, trace=trace, counts=counts)
    return CertificateTrace(np.stack(trace["pre_noise"], axis=1),
                            np.stack(trace["scale"], axis=1), trace.get("G"))


def _certified_noise(noise: str | None, result: PrivateRetrievalResult | None) -> str:
    """The noise mode of the certified release: ``noise`` if given, else the result's,
    else ``"plain"``; a ``noise`` that differs from the result's is refused."""
    if result is not None and not isinstance(result, PrivateRetrievalResult):
        raise TypeError("result must be the PrivateRetrievalResult the certificate "
                        f"certifies; got {type(result).__name__}.")
    mode = None if result is None else result.params.get("noise", "plain")
    if noise is None:
        return mode or "plain"
    if noise not in ("plain", "secure"):
        raise ValueError(f"noise must be 'plain' or 'secure' (the evaluated release's mode); "
                         f"got {noise!r}.")
    if mode is not None and noise != mode:
        raise ValueError(f"noise={noise!r} differs from the certified release's noise mode "
                         f"{mode!r}; omit noise (it follows result).")
    return noise


def _check_certified(plan: ReleasePlan, result: PrivateRetrievalResult) -> None:
    """Refuse a certificate whose plan is not the certified release's."""
    if result.method != plan.method:
        raise ValueError(f"method={plan.method!r} differs from the certified release's "
                         f"method {result.method!r}.")
    mine = plan.params()
    for key in ("steps", "release", "gamma", "kappa", "output_projection"):
        if key in result.params and result.params[key] != mine[key]:
            raise ValueError(f"{key}={mine[key]!r} differs from the certified release's "
                             f"{key} {result.params[key]!r}; pass the release's value.")


def _check_counts(counts: Any, needed: bool, shape: tuple[int, int]) -> np.ndarray | None:
    """The released noisy counts of a count release along a history (integers, (Q, T))."""
    if not needed:
        if counts is not None:
            raise ValueError("released_counts is for release='count' (with epsilon and "
                             "delta); pass released_counts=None.")
        return None
    if counts is None:
        raise ValueError("release='count' needs released_counts, the released noisy gate "
                         f"counts of shape (Q, T) = {shape}; pass res.released_counts.")
    arr = np.asarray(counts)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"released_counts must be an integer array; got dtype {arr.dtype}.")
    if arr.ndim != 2 or arr.shape[0] != shape[0] or arr.shape[1] < shape[1]:
        raise ValueError(f"released_counts must have shape (Q, T) = {shape}; got "
                         f"{arr.shape}.")
    return arr[:, : shape[1]].astype(np.int64, copy=False)


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
GRID_FACTOR_REASON = ("the pre-noise point was rounded to a grid coarser than the noise is "
                      "calibrated for (_grid_factor; a deliberately broken variant)")
SECURE_SEED_RECORD = "secure noise: every bit from the operating system's CSPRNG, no seed"
NO_SEED_RECORD = ("no seed was passed: the noise came from fresh OS entropy, which is not "
                  "recorded (it would regenerate the noise)")
