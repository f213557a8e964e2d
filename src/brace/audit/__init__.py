"""Empirical privacy audit: a statistically valid lower bound on ε (``docs/audit.md``).

The proof in ``docs/privacy.md`` is the guarantee; the audit tests that the *code*
matches it, in the style of DP-Sniper (Bichsel et al. 2021) and of the auditing papers
of Jagielski et al. (2020) and Nasr et al. (2021). For a mechanism configuration, a
public query ``q`` and a pair of neighbouring banks ``D ~ D'`` (one replaced row,
``docs/spec.md`` §1), the mechanism is run many times on each bank and a threshold test on a
statistic
``S`` of the release decides "D" or "D'". If the mechanism is (ε, δ)-DP then for every
threshold τ (with ``FPR = P_D(S > τ)``, ``FNR = P_{D'}(S ≤ τ)``)::

    1 − FNR ≤ e^ε · FPR + δ      and      1 − FPR ≤ e^ε · FNR + δ,

so with one-sided Clopper–Pearson upper confidence bounds ``FPR_U ≥ FPR``, ``FNR_U ≥ FNR``
(Bonferroni over the thresholds and the pairs), with probability ``≥ 1 − α``::

    ε ≥ ε_lb = max{0, ln((1 − δ − FNR_U)/FPR_U), ln((1 − δ − FPR_U)/FNR_U)}.

Statistic (default). The exact log-likelihood ratio of the released trajectory,
``S(Y) = log p_{D'}(Y_{1:T}) − log p_D(Y_{1:T})``. Given the public history ``Y_{<t}``,
step ``t`` of an iterative method releases ``Y_t ~ N(μ_t(D; Y_{<t}), s_t(D; Y_{<t})² I_d)``
(``docs/spec.md`` §3 steps 4–5), so::

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
pair(s) and the thresholds, and only *fresh* runs are counted. For local accounting
(``docs/privacy-accounting.md`` §12), ``AuditConfig(pair="far")`` audits a pair outside
every footprint of the release (charged ε = 0, certified 0 exactly with coupled runs) and
``pair="near"`` one inside step 1's footprint (charged the per-query ε).

Modules: ``stats`` (Clopper–Pearson, ε lower bound, thresholds), ``config``
(:class:`AuditConfig`), ``result`` (:class:`Pair`, :class:`PairCertificate`,
:class:`AuditResult`), ``density`` (sampling and the likelihood ratio), ``pairs``
(:func:`candidate_pairs`), ``local`` (:func:`local_pair`: far and near pairs of local
accounting), ``runner`` (:func:`audit`), ``report`` (the audit report).
"""

from __future__ import annotations

from .config import AuditConfig
from .density import log_likelihood_ratio
from .local import local_pair
from .pairs import candidate_pairs
from .report import ReportConfig, format_report, report, report_bank, report_cases
from .result import AuditResult, Pair, PairCertificate
from .runner import audit
from .stats import (
    certify_thresholds,
    clopper_pearson_upper,
    epsilon_lower_bound,
    error_counts,
    max_certifiable_epsilon,
)

__all__ = [
    "max_certifiable_epsilon",
    "AuditConfig",
    "AuditResult",
    "Pair",
    "PairCertificate",
    "audit",
    "candidate_pairs",
    "local_pair",
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
]
