"""What to audit: :class:`AuditConfig` (mechanism, claim, run counts) and the query."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import accounting as _accounting
from .._meta import NOT_DP_LABEL
from .._validation import (
    check_bool,
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_queries,
    check_radius_beta,
    check_steps,
)
from ..mechanisms import DEFAULT_KAPPA, METHODS, PRIVATE_METHODS
from ._format import _fmt_num
from .stats import _check_alpha

__all__ = ["AuditConfig", "PAIR_MODES"]

PAIR_MODES = ("search", "far", "near")  # how the neighbour is chosen (audit.md §5.1)

@dataclass(frozen=True)
class AuditConfig:
    """What is audited, and how many runs.

    Mechanism: ``method, epsilon, delta, steps, radius, kappa, gamma, accounting`` as in
    :func:`brace.private_retrieve` (``gamma=None``: the data-independent rule).
    ``release`` (BRACE): ``"smooth"`` (the certificate) or ``"count"`` (the noisy-count
    release, ``docs/privacy-accounting.md`` §9; the released counts are the last column of
    the outputs the statistic sees). ``"auto"`` is not audited as such: it picks one of
    these two with public parameters, and each is audited.
    ``noise_scale_factor`` multiplies the noise std of the mechanism **and** of the
    density model (an honest model of a deliberately broken mechanism; 1 = the real
    one, 0.5 = "noise std halved"). ``noise="secure"`` audits secure mode
    (``docs/privacy-accounting.md`` §13: exact discrete noise on the public grid, OS
    randomness, so such rows are not reproducible from ``seed``; BRACE's count release,
    global and endpoint) with the exact discrete likelihood ratio; ``grid_factor`` > 1
    rounds the pre-noise point to a grid that many times coarser than the accounting
    assumes, its cell boundaries through the query (a deliberately broken variant; the
    density model follows it). Sample sizes are per bank: ``n_screen`` per
    candidate pair, ``n_pilot`` per finalist (default ``n_runs // 4``), ``n_runs`` fresh
    runs per certified pair. ``n_finalists`` pairs get pilot runs, the best
    ``n_certify`` are certified (Bonferroni over them) with ``n_thresholds`` thresholds
    each. ``alpha``: the bound holds with probability ``≥ 1 − α``.

    Local accounting (``docs/audit.md`` §5.1, ``docs/privacy-accounting.md`` §12):
    ``pair`` is ``"search"`` (the pair finder), ``"far"`` (a row outside the query's
    reserved ball :func:`brace.footprints.reserved_radius` moved to another place outside
    it: no footprint of the release holds either value, the charge at both is 0, and so
    is the claim the audit checks) or ``"near"`` (the outermost member of the gate of
    ``q`` moved to the far side of that gate, inside step 1's footprint: the claim is the
    per-query ε that local accounting reserves at both values). ``output_projection``
    audits the projected release (needed for ``"far"``: without the projection the
    released centres, hence the footprints, are unbounded); the statistic is then the
    unprojected log-likelihood ratio evaluated at the projected release, a fixed
    function of the release. ``coupled``: the runs on ``D'`` reuse the random streams of
    the runs on ``D`` (each Clopper–Pearson bound concerns one bank's runs only, so the
    bound stays valid); releases that coincide bit for bit then give ``ε_lb = 0``
    exactly, and the result counts the runs whose releases differ.
    """

    method: str = "brace"
    epsilon: float = 1.0
    delta: float = 1e-5
    steps: int = 2
    radius: float = 0.5
    kappa: float = DEFAULT_KAPPA  # the library default of private_retrieve
    gamma: float | None = None
    accounting: str = "rdp"
    release: str = "smooth"
    noise_scale_factor: float = 1.0
    noise: str = "plain"
    grid_factor: int = 1
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
    pair: str = "search"
    output_projection: bool = False
    coupled: bool = False

    def validated(self) -> AuditConfig:
        """A copy with every field checked (clear ValueError/TypeError otherwise)."""
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}.")
        if self.accounting not in _accounting.ACCOUNTING_RULES:
            raise ValueError(
                f"accounting must be one of {_accounting.ACCOUNTING_RULES}; "
                f"got {self.accounting!r}."
            )
        if self.release not in ("smooth", "count"):
            raise ValueError(f"release must be 'smooth' or 'count'; got {self.release!r}.")
        if self.release == "count" and (self.method != "brace" or self.accounting != "rdp"):
            raise ValueError("release='count' is a BRACE release with accounting='rdp'; got "
                             f"method={self.method!r}, accounting={self.accounting!r}.")
        if self.pair not in PAIR_MODES:
            raise ValueError(f"pair must be one of {PAIR_MODES}; got {self.pair!r}.")
        projection = check_bool("output_projection", self.output_projection)
        coupled = check_bool("coupled", self.coupled)
        if self.pair != "search" and self.method not in PRIVATE_METHODS:
            raise ValueError(
                f"pair={self.pair!r} audits local accounting, which charges the private "
                f"methods {PRIVATE_METHODS} only; got method={self.method!r}."
            )
        if self.pair == "far" and not projection and self.method != "endpoint":
            raise ValueError(
                "pair='far' needs output_projection=True: without the projection the "
                "released centres are unbounded, so no row lies outside every footprint "
                "(docs/privacy-accounting.md §12)."
            )
        if self.noise not in ("plain", "secure"):
            raise ValueError(f"noise must be 'plain' or 'secure'; got {self.noise!r}.")
        gf = self.grid_factor
        if isinstance(gf, bool) or not isinstance(gf, numbers.Integral) or int(gf) < 1:
            raise ValueError(f"grid_factor must be an int >= 1; got {gf!r}.")
        if self.noise == "secure":
            if self.method == "naive":
                raise ValueError("noise='secure' audits the private methods; the naive "
                                 "baseline is NOT differentially private.")
            if self.noise_scale_factor != 1.0:
                raise ValueError("noise='secure' takes no noise_scale_factor (use "
                                 "grid_factor for its broken variant).")
        elif gf != 1:
            raise ValueError("grid_factor is for noise='secure'.")
        gamma = self.gamma
        if gamma is not None and self.release == "count":
            raise ValueError("gamma does not apply to release='count' (no smooth bound).")
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
            grid_factor=int(gf),
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
            output_projection=projection,
            coupled=coupled,
        )

    @property
    def label(self) -> str:
        """Name for tables: ``naive (NOT DP)`` for the naive baseline."""
        if self.method == "naive":
            base = NOT_DP_LABEL
        elif self.method == "brace" and self.release == "count":
            base = "brace (count release)"
        elif self.method == "brace":
            base = f"brace (kappa={_fmt_num(self.kappa)}"
            base += f", gamma={_fmt_num(self.gamma)})" if self.gamma is not None else ")"
        else:
            base = self.method
        if self.pair == "far":
            base += ", far pair: charged eps 0"
        elif self.pair == "near":
            base += ", near pair: charged = claimed"
        if self.noise == "secure":
            base += " [secure]"
        if self.noise_scale_factor != 1.0:
            base += f", std x{_fmt_num(self.noise_scale_factor)} (BROKEN on purpose)"
        if self.grid_factor != 1:
            gf = int(self.grid_factor)
            times = f"2^{gf.bit_length() - 1}" if gf & (gf - 1) == 0 else str(gf)
            base += f", grid x{times} (BROKEN on purpose)"
        return base

    @property
    def charged_epsilon(self) -> float:
        """The ε the audit checks ``ε_lb`` against: what local accounting charges the
        audited pair for this one release — 0 for ``pair="far"`` (no footprint holds
        either value), else the per-query ``epsilon`` (every step of the query is
        reserved at the query's ball, which holds both values)."""
        return 0.0 if self.pair == "far" else float(self.epsilon)

    @property
    def is_private(self) -> bool:
        """Does the configuration *claim* (ε, δ)-DP? (False for naive and broken noise.)"""
        return (self.method in PRIVATE_METHODS and self.noise_scale_factor >= 1.0
                and self.grid_factor == 1)


def _single_query(query: Any, dim: int) -> np.ndarray:
    q, _ = check_queries(query, dim, name="query")
    if q.shape[0] != 1:
        raise ValueError(f"query must be a single query (d,) or (1, d); got shape {q.shape}.")
    return q
