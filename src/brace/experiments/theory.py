"""Numerical checks of the paper's theory (paper §5, ``docs/spec.md`` §3 and §5).

Five items, each written as a figure (PNG), a JSON table of raw numbers and a text table,
with the full config and library versions (``_common.metadata``):

1. **Dimension-free error** (paper Thm 3 and the remark after Thm 5). For
   ``d ∈ {2, 8, 32, 128, 512}`` at fixed ``n, r, T, ε``: ``E‖Y_T − z_T‖²`` (total and
   per coordinate) and ``E max_t ‖Y_t − z_t‖²`` for BRACE, global and endpoint, with and
   without the output projection ``Y_t = Π_{B̄(q,(t+1)r)}(·)``; and, on every projected
   run, the deterministic bound ``max_t ‖Y_t − z_t‖ ≤ (2T+1)·r``.
2. **Horizon.** The same risks against ``T ∈ {1, 2, 3, 5, 8, 12}``, with the reference
   curves ``r²`` (fixed-T rate), ``T²r²`` (growing-T rate) and the bound ``(2T+1)²r²``.
3. **Activation bound** (paper §4 "Activation", App. B.2). For
   ``κ ∈ {0, 0.01, 1, (2T+1)²/T}``: the share of activated steps ``H_t = 1`` and, on every
   step, ``‖Q_t − z_t‖² ≤ max{κTr², ‖Y_{t−1} − z_{t−1}‖²}`` with the pre-noise point
   ``Q_t`` recomputed along the released history by :func:`brace.certificate`.
4. **Root-n transition** (paper Thm 5). Banks whose gate around the query holds
   ``m = ⌈n^α⌉`` memories, so that the effective count ``m̂ = 2r/Δ̄ ≍ n^α``,
   ``α ∈ {0.3, 0.5, 0.7}``: the distribution of ``√n·ξ_{n,t}`` (``ξ = Y_t − Q_t``, the
   noise actually added, no projection) for ``n = 10² … 10⁵``: vanishing (α > ½),
   order one (α = ½), blowing up (α < ½).
5. **What correction costs.** The synthetic setting of paper §6.1 (``n = 256``,
   ``r = 0.8``, ``T = 5``, ``ε = 128``): BRACE's final error and mean ``Δ̄_t`` per step
   against κ from 0 to ``(2T+1)²/T``, beside naive (NOT DP) and global.

Every random draw goes through :func:`brace._validation.check_rng`; each item gets its
own child of ``SeedSequence(seed)``, so an item's numbers do not depend on which other
items ran.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import LSRMemory, NotPrivateWarning, certificate, private_retrieve
from .._io import atomic_write_text, save_npz, write_json
from .._validation import (
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_rng,
)
from ..datasets import PAPER_MIXTURE, MixtureSpec, sample_mixture
from ..mechanisms import no_correction_kappa
from ..plan import recorded_kappa
from ._common import NOT_DP_LABEL, mean_ci95, metadata, pyplot, save_figure

__all__ = [
    "ITEMS",
    "TheoryConfig",
    "quick_config",
    "embedded_mixture",
    "cluster_bank",
    "PathBoundCheck",
    "path_bound_check",
    "ActivationCheck",
    "activation_check",
    "run_theory",
]

ITEMS = ("dimension", "horizon", "activation", "root_n", "correction_cost")
# Items 1-2: (variant label, method, κ) — "max" is (2T+1)²/T, where no bank activates.
_VARIANTS = (("brace κ=0", "brace", 0.0), ("brace κ=(2T+1)²/T", "brace", "max"),
             ("global", "global", 0.0), ("endpoint", "endpoint", 0.0))
_COLORS = {"brace": "tab:blue", "global": "tab:green", "endpoint": "tab:purple",
           "naive": "tab:red", "brace κ=0": "tab:blue", "brace κ=(2T+1)²/T": "tab:cyan",
           }
# Relative slack of the floating-point inequality checks (the bounds are exact in reals).
_RTOL = 1e-9


@dataclass(frozen=True)
class TheoryConfig:
    """Parameters of all five items (``None`` κ grids: the built-in defaults).

    Shared: bank size ``n``, radius ``r``, horizon ``steps`` (T), budget
    ``(epsilon, delta)``, BRACE threshold ``kappa`` (items 1–2), ``replications``
    (queries, each with its own noise draw, per cell), ``query_spread`` (queries are a
    random memory plus ``N(0, spread²)`` in the two mixture coordinates).
    """

    n: int = 256
    radius: float = 0.8
    steps: int = 5
    epsilon: float = 128.0
    delta: float = 1e-5
    kappa: float = 0.0
    replications: int = 500
    query_spread: float = 0.35
    off_plane_std: float = 0.1  # total std of the d − 2 extra coordinates (item 1)
    # 1. dimension
    dims: tuple = (2, 8, 32, 128, 512)
    # 2. horizon
    horizons: tuple = (1, 2, 3, 5, 8, 12)
    horizon_dim: int = 2
    # 3. activation
    activation_kappas: tuple | None = None  # None: (0, 0.01, 1, (2T+1)²/T)
    activation_dims: tuple = (2, 32, 512)
    # 4. root-n transition
    root_n_sizes: tuple = (100, 1000, 10_000, 100_000)
    root_n_alphas: tuple = (0.3, 0.5, 0.7)
    root_n_epsilon: float = 32.0
    root_n_gamma: float = 0.5
    root_n_steps: int = 3
    root_n_replications: int = 1000
    # 5. correction cost
    cost_kappas: tuple | None = None  # None: 0, 10^-3 … 10, (2T+1)²/T
    cost_replications: int = 1000
    data_seed: int = 0
    seed: int = 1
    accounting: str = "rdp"
    quick: bool = False

    @property
    def kappa_max(self) -> float:
        """``(2T+1)²/T`` (a hair above, for rounding): with the projection no bank activates."""
        return no_correction_kappa(self.steps)

    def activation_grid(self) -> tuple:
        if self.activation_kappas is not None:
            return tuple(self.activation_kappas)
        return (0.0, 0.01, 1.0, self.kappa_max)

    def cost_grid(self) -> tuple:
        if self.cost_kappas is not None:
            return tuple(self.cost_kappas)
        return (0.0, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, self.kappa_max)

    def validate(self) -> TheoryConfig:
        """Check every field; raise ValueError/TypeError naming the field and value."""
        check_int_at_least("n", self.n, 2)
        check_positive("radius", self.radius)
        check_int_at_least("steps", self.steps, 1)
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_nonnegative("kappa", self.kappa, allow_inf=True)
        check_int_at_least("replications", self.replications, 2)
        check_nonnegative("query_spread", self.query_spread)
        check_nonnegative("off_plane_std", self.off_plane_std)
        for name in ("dims", "horizons", "activation_dims", "root_n_sizes", "root_n_alphas"):
            if len(getattr(self, name)) == 0:
                raise ValueError(f"{name} must not be empty. Found {getattr(self, name)!r}.")
        for d in self.dims + self.activation_dims:
            check_int_at_least("dims", d, 2)
        for T in self.horizons:
            check_int_at_least("horizons", T, 1)
        check_int_at_least("horizon_dim", self.horizon_dim, 2)
        for k in self.activation_grid() + self.cost_grid():
            check_nonnegative("kappa grid", k, allow_inf=True)
        for s in self.root_n_sizes:
            check_int_at_least("root_n_sizes", s, 4)
        for a in self.root_n_alphas:
            if not 0.0 < check_positive("root_n_alphas", a) < 1.0:
                raise ValueError(f"root_n_alphas must lie in (0, 1). Found {a}.")
        check_epsilon(self.root_n_epsilon, "root_n_epsilon")
        check_positive("root_n_gamma", self.root_n_gamma)
        check_int_at_least("root_n_steps", self.root_n_steps, 1)
        check_int_at_least("root_n_replications", self.root_n_replications, 2)
        check_int_at_least("cost_replications", self.cost_replications, 2)
        if self.accounting not in ("rdp", "paper"):
            raise ValueError(f"accounting must be 'rdp' or 'paper'. Found {self.accounting!r}.")
        check_rng(self.seed)
        check_rng(self.data_seed)
        return self


def quick_config(**overrides: Any) -> TheoryConfig:
    """A small configuration that exercises every item, figure and table (tests, CI)."""
    base = dict(
        n=64, replications=12, dims=(2, 512), horizons=(1, 3), activation_dims=(2, 512),
        root_n_sizes=(100, 1000), root_n_replications=60, cost_replications=24,
        cost_kappas=(0.0, 0.01, 1.0, TheoryConfig().kappa_max), quick=True,
    )
    base.update(overrides)
    return TheoryConfig(**base)


# ---------------------------------------------------------------------------- banks


def embedded_mixture(dim: int, *, off_plane_std: float = 0.1,
                     base: MixtureSpec = PAPER_MIXTURE) -> MixtureSpec:
    """The paper's 2-D mixture embedded in ``R^d``.

    Coordinates 1–2 are ``base``; the other ``d − 2`` coordinates are centred Gaussians
    with per-coordinate std ``off_plane_std/sqrt(d − 2)``, so the off-plane part adds the
    same ``off_plane_std²`` to every squared distance's expectation at every d: the gate
    geometry is (nearly) the same across d, and what changes with d is the noise.
    """
    d = check_int_at_least("dim", dim, 2)
    tau = check_nonnegative("off_plane_std", off_plane_std)
    _, mu, sd = base.arrays()
    if mu.shape[1] != 2:
        raise ValueError(f"base mixture must be 2-D; got means of shape {mu.shape}.")
    K = mu.shape[0]
    extra = d - 2
    per = tau / math.sqrt(extra) if extra else 0.0
    means = np.zeros((K, d))
    means[:, :2] = mu
    stds = np.full((K, d), max(per, 1e-12))
    stds[:, :2] = sd
    return MixtureSpec(
        weights=tuple(base.weights), means=tuple(map(tuple, means.tolist())),
        stds=tuple(map(tuple, stds.tolist())),
        extra={"embedded_from": "2-D base mixture", "off_plane_std_total": tau},
    )


def cluster_bank(n: int, in_gate: int, *, radius: float, dim: int = 2,
                 seed: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """A bank of ``n`` rows whose query-side gate holds exactly ``in_gate`` of them.

    ``in_gate`` rows are uniform in ``B̄(0, r/2)``; the rest are uniform in
    ``B̄((20r, 0, …), 4r)``, at least ``16r`` from the cluster, so they never enter a gate
    of a query in ``B̄(0, r/10)`` or the certificate's counts (which look ``2r`` out).
    Returns the bank and the cluster centre (the origin).
    """
    n = check_int_at_least("n", n, 1)
    m = check_int_at_least("in_gate", in_gate, 0)
    if m > n:
        raise ValueError(f"in_gate must be <= n = {n}. Found {m}.")
    r = check_positive("radius", radius)
    rng = check_rng(seed)
    u = rng.standard_normal((m, dim))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    rad = 0.5 * r * rng.uniform(size=(m, 1)) ** (1.0 / dim)
    v = rng.standard_normal((n - m, dim))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    far = v * (4.0 * r * rng.uniform(size=(n - m, 1)) ** (1.0 / dim))
    far[:, 0] += 20.0 * r  # ‖far − 0‖ ≥ 16r: never within 2r of a gate near the cluster
    X = np.concatenate([u * rad, far])
    return X[rng.permutation(n)], np.zeros(dim)


def _queries_near_memories(X: np.ndarray, count: int, spread: float, rng) -> np.ndarray:
    """A random memory plus ``N(0, spread²)`` in the first two coordinates."""
    q = X[rng.integers(0, len(X), count)].copy()
    q[:, :2] += rng.normal(0.0, spread, (count, 2))
    return q


# ---------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class PathBoundCheck:
    """``max_t ‖Y_t − z_t‖ ≤ (2T+1)·r`` (and per step ``‖Y_t − z_t‖ ≤ (2t+1)·r``).

    ``dist`` (Q, T'): ``‖Y_t − z_t‖`` for each released step (endpoint: T' = 1, t = T);
    ``bound`` = ``(2T+1)r``; ``violations``: runs whose maximum exceeds it;
    ``step_violations``: (run, step) pairs exceeding ``(2t+1)r``.
    """

    dist: np.ndarray
    bound: float
    violations: int
    step_violations: int
    max_ratio: float

    def to_dict(self) -> dict:
        return {"bound": self.bound, "violations": self.violations,
                "step_violations": self.step_violations, "max_ratio": self.max_ratio,
                "runs": int(self.dist.shape[0]), "steps_checked": int(self.dist.size)}


def path_bound_check(result: Any, clean: np.ndarray) -> PathBoundCheck:
    """Check the deterministic path bound of the output projection (paper after Thm 5).

    With the projection, ``‖Y_t − q‖ ≤ (t+1)r`` and ``‖z_t − q‖ ≤ tr`` (``docs/spec.md`` §1), hence
    ``‖Y_t − z_t‖ ≤ (2t+1)r ≤ (2T+1)r``. ``clean`` is the (Q, T+1, d) noiseless trajectory.
    """
    r = float(result.params["radius"])
    T = int(result.params["steps"])
    Y = result.outputs
    if Y.shape[1] == 1 and T > 1:  # endpoint: one release of z_T
        z = clean[:, -1:, :]
        t = np.array([T])
    else:
        z = clean[:, 1:, :]
        t = np.arange(1, T + 1)
    dist = np.linalg.norm(Y - z, axis=-1)
    bound = (2 * T + 1) * r
    per_step = (2 * t + 1) * r
    return PathBoundCheck(
        dist=dist,
        bound=bound,
        violations=int((dist.max(axis=1) > bound * (1 + _RTOL)).sum()),
        step_violations=int((dist > per_step[None, :] * (1 + _RTOL)).sum()),
        max_ratio=float(dist.max() / bound),
    )


@dataclass(frozen=True)
class ActivationCheck:
    """The activation bound ``‖Q_t − z_t‖² ≤ max{κTr², ‖Y_{t−1} − z_{t−1}‖²}`` per step.

    Arrays are (Q, T): ``lhs = ‖Q_t − z_t‖²``, ``rhs`` the right side, ``activated``
    (``H_t``), ``projected`` (the pre-noise projection onto ``B̄(Y_{t−1}, r)`` moved
    ``a_t + H_t R_t``), ``needs_history`` (``lhs > κTr²``: only the ``‖Y_{t−1} − z_{t−1}‖²``
    term covers the step). ``violations`` counts steps with ``lhs > rhs``.
    ``pre_noise_mismatch``: max ``‖Q_t^{cert} − Π(a_t + H_t R_t)‖`` (an independent
    recomputation); ``scale_mismatch``: max relative gap between the certificate's
    ``Δ̄_t`` along the history and the one the release used.
    """

    lhs: np.ndarray
    rhs: np.ndarray
    activated: np.ndarray
    projected: np.ndarray
    needs_history: np.ndarray
    violations: int
    pre_noise_mismatch: float
    scale_mismatch: float

    def to_dict(self) -> dict:
        finite = np.isfinite(self.rhs) & (self.rhs > 0)
        ratio = float((self.lhs[finite] / self.rhs[finite]).max()) if finite.any() else 0.0
        return {
            "steps_checked": int(self.lhs.size),
            "violations": self.violations,
            "max_ratio_lhs_over_rhs": ratio,
            "activated_share": float(self.activated.mean()),
            "activated_share_per_step": self.activated.mean(axis=0).tolist(),
            "projection_active_share": float(self.projected.mean()),
            "activated_and_projected_share": float((self.activated & self.projected).mean()),
            "needs_history_term_share": float(self.needs_history.mean()),
            "pre_noise_mismatch": self.pre_noise_mismatch,
            "scale_mismatch": self.scale_mismatch,
        }


def activation_check(memory: LSRMemory, queries: np.ndarray, result: Any) -> ActivationCheck:
    """Recompute ``Q_t`` along the released history and check the activation bound.

    ``result`` is a BRACE :class:`~brace.PrivateRetrievalResult` for ``queries``. The
    history ``Y_0 = q, Y_1, …, Y_{T−1}`` is public; :func:`brace.certificate` evaluates
    ``Q_t(D; Y_{<t})`` on it. Proof that the bound holds (so a violation is a bug):
    if ``H_t = 0``, ``Q_t = a_t`` (``a_t ∈ B̄(Y_{t−1}, r)``) and ``‖Q_t − z_t‖ = ‖R_t‖ ≤
    sqrt(κT)·r``; if ``H_t = 1``, ``Q_t = Π(z_t)`` and ``‖Q_t − z_t‖ = (‖z_t − Y_{t−1}‖ −
    r)_+ ≤ ‖z_{t−1} − Y_{t−1}‖`` since ``‖z_t − z_{t−1}‖ ≤ r``. With the projection and
    ``κ ≥ (2T+1)²/T`` (never activates), ``‖R_t‖ ≤ (2t+1)r ≤ sqrt(κT)·r``.
    """
    if result.method != "brace":
        raise ValueError(f"activation_check needs a BRACE result; got {result.method!r}.")
    p = result.params
    r, T, kappa = float(p["radius"]), int(p["steps"]), recorded_kappa(p)
    q = np.asarray(queries, dtype=np.float64)
    Q, d = q.shape
    hist = np.concatenate([q[:, None, :], result.outputs[:, :-1]], axis=1)  # Y_0..Y_{T-1}
    cert = certificate(memory, q, hist, method="brace", steps=T, kappa=kappa,
                       gamma=float(p["gamma"]), output_projection=bool(p["output_projection"]))
    z = memory.retrieve(q, T)  # (Q, T+1, d)
    a = memory.step(hist.reshape(-1, d)).reshape(Q, T, d)  # a_t = Φ_D(Y_{t-1})
    R = z[:, 1:] - a  # R_t = z_t − a_t (``docs/spec.md`` §3 step 2 identity)
    H = result.activated
    target = a + H[..., None] * R
    off = np.linalg.norm(target - hist, axis=-1)
    projected = off > r * (1 + 1e-12)
    scale = np.where(projected, r / np.where(off > 0, off, 1.0), 1.0)
    pre_indep = hist + (target - hist) * scale[..., None]
    lhs = ((cert.pre_noise - z[:, 1:]) ** 2).sum(-1)
    theta2 = kappa * T * r * r if math.isfinite(kappa) else math.inf
    hist_err = ((hist - z[:, :-1]) ** 2).sum(-1)
    rhs = np.maximum(theta2, hist_err)
    tol = _RTOL * np.where(np.isfinite(rhs), rhs, 0.0) + 1e-12 * r * r
    sm = result.smooth_sensitivity
    return ActivationCheck(
        lhs=lhs,
        rhs=rhs,
        activated=H.astype(bool),
        projected=projected,
        needs_history=lhs > theta2 * (1 + _RTOL) + 1e-12 * r * r,
        violations=int((lhs > rhs + tol).sum()),
        pre_noise_mismatch=float(np.abs(cert.pre_noise - pre_indep).max()),
        scale_mismatch=float(np.max(np.abs(cert.noise_scale - sm) / sm)),
    )


# ---------------------------------------------------------------------------- runs


def _retrieve(mem, q, method, cfg, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)  # labelled in every output
        kw.setdefault("epsilon", cfg.epsilon)
        kw.setdefault("delta", cfg.delta)
        kw.setdefault("steps", cfg.steps)
        kw.setdefault("accounting", cfg.accounting)
        return private_retrieve(mem, q, method=method, **kw)


def _risks(res, clean: np.ndarray) -> dict:
    """Terminal and max-path squared errors (total and per coordinate) per query."""
    d = clean.shape[-1]
    final = ((res.final - clean[:, -1]) ** 2).sum(-1)
    if res.outputs.shape[1] == 1:  # endpoint: the only release is Y_T
        path = final
    else:
        path = ((res.outputs - clean[:, 1:]) ** 2).sum(-1).max(axis=1)
    return {
        "terminal_total": mean_ci95(final),
        "terminal_per_coord": mean_ci95(final / d),
        "max_path_total": mean_ci95(path),
        "max_path_per_coord": mean_ci95(path / d),
    }


def _risk_row(res, clean, **keys) -> dict:
    row = dict(keys)
    row.update(_risks(res, clean))
    row["path_bound"] = path_bound_check(res, clean).to_dict()
    row["gamma"] = res.privacy.gamma
    row["noise_multiplier"] = res.privacy.noise_multiplier
    row["mean_noise_std"] = float(res.noise_std.mean())
    if res.smooth_sensitivity is not None:
        row["mean_smooth_sensitivity"] = float(res.smooth_sensitivity.mean())
        row["activation_rate"] = float(res.activated.mean())
    return row


def run_dimension(cfg: TheoryConfig, seed: Any) -> dict:
    """Item 1: risks against d for BRACE/global/endpoint, with and without projection."""
    rng = check_rng(seed)
    T, Q = cfg.steps, cfg.replications
    rows = []
    for d in cfg.dims:
        X = sample_mixture(cfg.n, spec=embedded_mixture(d, off_plane_std=cfg.off_plane_std),
                           seed=rng)
        mem = LSRMemory(X, radius=cfg.radius)
        q = _queries_near_memories(X, Q, cfg.query_spread, rng)
        clean = mem.retrieve(q, T)
        shared = int(rng.integers(2**63))  # one seed: the same innovations for every method
        for label, m, k in _VARIANTS:
            kappa = no_correction_kappa(T) if k == "max" else k
            for proj in (True, False):
                res = _retrieve(mem, q, m, cfg, kappa=kappa, gamma=None,
                                output_projection=proj, seed=shared)
                rows.append(_risk_row(res, clean, d=int(d), variant=label, method=m,
                                      kappa=kappa, projection=proj))
    return {"rows": rows, "bound_total": ((2 * T + 1) * cfg.radius) ** 2}


def run_horizon(cfg: TheoryConfig, seed: Any) -> dict:
    """Item 2: risks against T at fixed d, with the r², T²r² and (2T+1)²r² references."""
    rng = check_rng(seed)
    d, Q = cfg.horizon_dim, cfg.replications
    X = sample_mixture(cfg.n, spec=embedded_mixture(d, off_plane_std=cfg.off_plane_std),
                       seed=rng)
    mem = LSRMemory(X, radius=cfg.radius)
    q = _queries_near_memories(X, Q, cfg.query_spread, rng)
    rows = []
    for T in cfg.horizons:
        clean = mem.retrieve(q, T)
        shared = int(rng.integers(2**63))  # one seed: the same innovations for every method
        for label, m, k in _VARIANTS:
            kappa = no_correction_kappa(T) if k == "max" else k
            for proj in (True, False):
                res = _retrieve(mem, q, m, cfg, steps=T, kappa=kappa, gamma=None,
                                output_projection=proj, seed=shared)
                rows.append(_risk_row(res, clean, T=int(T), variant=label, method=m,
                                      kappa=kappa, projection=proj))
    r2 = cfg.radius**2
    refs = {"r2": r2, "T2r2": [T * T * r2 for T in cfg.horizons],
            "bound_2T1_sq_r2": [(2 * T + 1) ** 2 * r2 for T in cfg.horizons]}
    return {"rows": rows, "references": refs, "dim": d}


def run_activation(cfg: TheoryConfig, seed: Any) -> tuple[dict, dict]:
    """Item 3: activation shares and the per-step activation bound."""
    rng = check_rng(seed)
    Q = cfg.replications
    rows, raw = [], {}
    for d in cfg.activation_dims:
        X = sample_mixture(cfg.n, spec=embedded_mixture(d, off_plane_std=cfg.off_plane_std),
                           seed=rng)
        mem = LSRMemory(X, radius=cfg.radius)
        q = _queries_near_memories(X, Q, cfg.query_spread, rng)
        shared = int(rng.integers(2**63))  # one seed: the same innovations for every kappa
        for kappa in cfg.activation_grid():
            for proj in (True, False):
                res = _retrieve(mem, q, "brace", cfg, kappa=kappa, gamma=None,
                                output_projection=proj, seed=shared)
                chk = activation_check(mem, q, res)
                rows.append({"d": int(d), "kappa": float(kappa), "projection": proj,
                             "gamma": res.privacy.gamma, **chk.to_dict()})
                key = f"d{d}_kappa{kappa:g}_proj{int(proj)}"
                raw[key + "_lhs"] = chk.lhs
                raw[key + "_rhs"] = chk.rhs
                raw[key + "_activated"] = chk.activated
                raw[key + "_projected"] = chk.projected
    return {"rows": rows, "kappas": list(cfg.activation_grid()), "kappa_max": cfg.kappa_max}, raw


def run_root_n(cfg: TheoryConfig, seed: Any) -> tuple[dict, dict]:
    """Item 4: distribution of ``√n·ξ_{n,t}`` when ``m̂ ≍ n^α``.

    The bank of size n has ``m = ⌈n^α⌉`` rows in the query's gate (:func:`cluster_bank`),
    ε and γ are fixed (γ public, chosen large enough that ``m̂ = 2r/Δ̄`` tracks m from
    m ≈ 4: for κ = ∞, ``Δ̄ = max(2r/m, 2r·e^{−γ(m−1)})``), so
    ``sd(√n ξ) = √n·Δ̄/sqrt(2ρ) ≍ n^{1/2−α}``. ``ξ_t = Y_t − Q_t`` with ``Q_t`` from
    :func:`brace.certificate` along the released (unprojected) history.
    """
    rng = check_rng(seed)
    T, Q, r = cfg.root_n_steps, cfg.root_n_replications, cfg.radius
    rows, raw = [], {}
    for alpha in cfg.root_n_alphas:
        for n in cfg.root_n_sizes:
            m = int(math.ceil(n**alpha))
            X, centre = cluster_bank(n, m, radius=r, seed=rng)
            mem = LSRMemory(X, radius=r)
            u = rng.standard_normal((Q, 2))
            u *= (0.1 * r * rng.uniform(size=(Q, 1)) ** 0.5) / np.linalg.norm(u, axis=1,
                                                                               keepdims=True)
            q = centre + u
            shared = int(rng.integers(2**63))
            xi_std = np.random.default_rng(shared).standard_normal((Q, T, 2))  # its draws
            res = _retrieve(mem, q, "brace", cfg, epsilon=cfg.root_n_epsilon, steps=T,
                            kappa=cfg.kappa, gamma=cfg.root_n_gamma, output_projection=False,
                            seed=shared)
            hist = np.concatenate([q[:, None], res.outputs[:, :-1]], axis=1)
            cert = certificate(mem, q, hist, method="brace", steps=T, kappa=cfg.kappa,
                               gamma=res.privacy.gamma, output_projection=False)
            xi = res.outputs - cert.pre_noise  # the noise actually added
            scaled = math.sqrt(n) * xi
            mult = res.privacy.noise_multiplier
            mismatch = float(np.abs(xi - res.noise_std[..., None] * xi_std).max())
            qs = np.quantile(scaled[:, 0, 0], [0.025, 0.25, 0.5, 0.75, 0.975])
            rows.append({
                "alpha": float(alpha), "n": int(n), "m_in_gate": m,
                "gate_size_mean_per_step": res.gate_released.mean(0).tolist(),
                "m_hat_mean_per_step": res.effective_count.mean(0).tolist(),
                "sd_sqrt_n_xi_per_step": scaled.std(axis=(0, 2), ddof=1).tolist(),
                "sd_predicted_per_step": (math.sqrt(n) * mult
                                          * np.sqrt((res.smooth_sensitivity ** 2).mean(0))
                                          ).tolist(),
                "mean_norm_sqrt_n_xi_per_step": np.linalg.norm(scaled, axis=-1).mean(0)
                .tolist(),
                "quantiles_t1_coord1": dict(zip(["q02.5", "q25", "q50", "q75", "q97.5"],
                                                qs.tolist(), strict=True)),
                "noise_multiplier": mult, "gamma": res.privacy.gamma,
                "xi_recomputation_mismatch": mismatch,
            })
            raw[f"alpha{alpha:g}_n{n}"] = scaled[:, 0, 0]
    fits = []
    for alpha in cfg.root_n_alphas:
        sub = [row for row in rows if row["alpha"] == alpha]
        ln = np.log([row["n"] for row in sub])
        fits.append({
            "alpha": float(alpha),
            "slope_sd_t1": _slope(ln, np.log([row["sd_sqrt_n_xi_per_step"][0] for row in sub])),
            "slope_m_hat_t1": _slope(ln, np.log([row["m_hat_mean_per_step"][0] for row in sub])),
            "theory_slope_sd": 0.5 - float(alpha),
            "theory_slope_m_hat": float(alpha),
            "regime": "vanishing" if alpha > 0.5 else "order one" if alpha == 0.5
            else "blowing up",
        })
    return {"rows": rows, "fits": fits, "dim": 2, "steps": T,
            "epsilon": cfg.root_n_epsilon, "gamma": cfg.root_n_gamma}, raw


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def run_correction_cost(cfg: TheoryConfig, seed: Any) -> dict:
    """Item 5: BRACE final error and mean Δ̄_t against κ beside naive (NOT DP) and global.

    The paper's synthetic setting (``sample_mixture(256)``, r = 0.8, T = 5, ε = 128) with
    two query sets: near memories (a memory plus N(0, 0.35²)) and between the modes
    (uniform on [−0.6, 0.6]×[−0.3, 0.3], where boundary switching happens). All methods
    and κ share the same innovations (paired comparison).
    """
    rng = check_rng(seed)
    n, r, T, eps = 256, 0.8, 5, 128.0
    if cfg.quick:
        n = cfg.n
    X = sample_mixture(n, spec=PAPER_MIXTURE, seed=check_rng(cfg.data_seed))
    mem = LSRMemory(X, radius=r)
    Q = cfg.cost_replications
    qsets = {
        "near memories": _queries_near_memories(X, Q, 0.35, rng),
        "between modes": rng.uniform((-0.6, -0.3), (0.6, 0.3), (Q, 2)),
    }
    kmax = no_correction_kappa(T)
    rows = []
    for name, q in qsets.items():
        clean = mem.retrieve(q, T)
        shared = int(rng.integers(2**63))  # one seed: the same innovations for every run
        runs = [("naive", None), ("global", None)] + [("brace", k) for k in cfg.cost_grid()]
        for m, k in runs:
            res = _retrieve(mem, q, m, cfg, epsilon=eps, steps=T, kappa=k or 0.0, gamma=None,
                            seed=shared)
            final = ((res.final - clean[:, -1]) ** 2).mean(-1)
            row = {"query_set": name, "method": m, "kappa": k, "private": res.is_private,
                   "label": NOT_DP_LABEL if m == "naive" else m if k is None
                   else f"brace (kappa={k:g})", "final_per_coord": mean_ci95(final),
                   "mean_noise_std_per_step": res.noise_std.mean(0).tolist()}
            if m == "brace":
                row["mean_smooth_sensitivity_per_step"] = res.smooth_sensitivity.mean(0).tolist()
                row["activation_rate"] = float(res.activated.mean())
                row["gamma"] = res.privacy.gamma
            else:
                sens = res.noise_std / res.privacy.noise_multiplier
                row["mean_sensitivity_per_step"] = sens.mean(0).tolist()
            rows.append(row)
    return {"rows": rows, "setting": {"n": n, "radius": r, "steps": T, "epsilon": eps,
                                      "delta": cfg.delta, "kappa_max": kmax}}


_RUNNERS = {
    "dimension": run_dimension,
    "horizon": run_horizon,
    "activation": run_activation,
    "root_n": run_root_n,
    "correction_cost": run_correction_cost,
}


def run_theory(cfg: TheoryConfig = TheoryConfig(), out_dir: str | Path | None = None, *,
               items: tuple = ITEMS, progress: bool = True) -> dict:
    """Run the selected items; write each item's ``<item>.png``, ``<item>.json`` and
    ``<item>.txt`` (and ``activation_raw.npz`` / ``root_n_raw.npz``) plus ``summary.json``
    and ``table.txt`` to ``out_dir`` (atomically) when given. Returns the summary."""
    cfg.validate()
    bad = [i for i in items if i not in ITEMS]
    if bad or not items:
        raise ValueError(f"items must be a non-empty subset of {ITEMS}. Found {items!r}.")
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
    seeds = dict(zip(ITEMS, np.random.SeedSequence(cfg.seed).spawn(len(ITEMS)), strict=True))
    t_all = time.perf_counter()
    results: dict[str, dict] = {}
    texts = []
    for item in ITEMS:
        if item not in items:
            continue
        t0 = time.perf_counter()
        out = _RUNNERS[item](cfg, seeds[item])
        raw = None
        if isinstance(out, tuple):
            out, raw = out
        out["wall_time_s"] = time.perf_counter() - t0
        text = _FORMATTERS[item](out, cfg)
        texts.append(text)
        results[item] = out
        if progress:
            print(f"[theory] {item}: {out['wall_time_s']:.1f} s", file=sys.stderr)
        if out_dir is not None:
            _FIGURES[item](out, cfg, out_dir / f"{item}.png", raw)
            write_json(out_dir / f"{item}.json", {**metadata(cfg), "item": item, **out})
            atomic_write_text(out_dir / f"{item}.txt", text + "\n")
            if raw:
                save_npz(out_dir / f"{item}_raw.npz", **raw)
    summary = {**metadata(cfg), "items": results, "wall_time_s": time.perf_counter() - t_all}
    text = "\n\n".join(texts) + f"\n\ntotal wall time {summary['wall_time_s']:.1f} s"
    print(text)
    if out_dir is not None:
        write_json(out_dir / "summary.json", summary)
        atomic_write_text(out_dir / "table.txt", text + "\n")
        print(f"wrote {out_dir}/summary.json, table.txt and one .png/.json/.txt per item")
    return summary


# ---------------------------------------------------------------------------- tables


def _ci(c: dict, fmt: str = ".4g") -> str:
    return f"{c['mean']:{fmt}} [{c['lo']:{fmt}}, {c['hi']:{fmt}}]"


def _fmt_risks(out: dict, key: str, title: str, cfg: TheoryConfig) -> str:
    lines = [title, f"{key:>4} {'variant':<19} {'proj':<4} {'E|Y_T-z_T|^2 [95% CI]':<32} "
             f"{'per coord':<10} {'E max_t|Y_t-z_t|^2':<19} {'bound viol':>10} "
             f"{'max ratio':>9} {'gamma':>7} {'noise sd':>9} {'act.':>5}"]
    for r in out["rows"]:
        pb = r["path_bound"]
        viol = f"{pb['violations']}/{pb['runs']}"
        lines.append(
            f"{r[key]:>4} {r['variant']:<19} {'yes' if r['projection'] else 'no':<4} "
            f"{_ci(r['terminal_total']):<32} {r['terminal_per_coord']['mean']:<10.4g} "
            f"{r['max_path_total']['mean']:<19.4g} {viol:>10} {pb['max_ratio']:>9.3f} "
            f"{r['gamma']:>7.3g} {r['mean_noise_std']:>9.3g} "
            f"{r['activation_rate'] if 'activation_rate' in r else float('nan'):>5.2f}"
        )
    lines.append("bound viol: runs with max_t |Y_t - z_t| > (2T+1) r (guaranteed 0 with the "
                 "projection); max ratio = max_t |Y_t - z_t| / ((2T+1) r). Endpoint: one "
                 "release, so its max-path risk is its terminal risk. noise sd: mean per-"
                 "coordinate noise std; act.: BRACE activation share.")
    return "\n".join(lines)


def _fmt_dimension(out: dict, cfg: TheoryConfig) -> str:
    return _fmt_risks(out, "d", (
        f"1. Dimension-free error: n = {cfg.n}, r = {cfg.radius}, T = {cfg.steps}, "
        f"eps = {cfg.epsilon:g}, delta = {cfg.delta:g}, kappa = {cfg.kappa:g}, "
        f"{cfg.replications} queries per cell; (2T+1)^2 r^2 = {out['bound_total']:.4g}"), cfg)


def _fmt_horizon(out: dict, cfg: TheoryConfig) -> str:
    return _fmt_risks(out, "T", (
        f"2. Horizon: d = {out['dim']}, n = {cfg.n}, r = {cfg.radius}, eps = {cfg.epsilon:g}, "
        f"{cfg.replications} queries per cell; references r^2 = {out['references']['r2']:.4g}, "
        "T^2 r^2, (2T+1)^2 r^2"), cfg)


def _fmt_activation(out: dict, cfg: TheoryConfig) -> str:
    lines = [
        f"3. Activation bound |Q_t - z_t|^2 <= max(kappa T r^2, |Y_(t-1) - z_(t-1)|^2): "
        f"n = {cfg.n}, T = {cfg.steps}, eps = {cfg.epsilon:g}, {cfg.replications} queries",
        f"{'d':>4} {'kappa':>7} {'proj':<4} {'activated':>9} {'per step':<32} {'viol':>9} "
        f"{'max lhs/rhs':>11} {'proj. active':>12} {'act&proj':>8} {'needs Y-term':>12}",
    ]
    for r in out["rows"]:
        ps = "[" + ", ".join(f"{x:.2f}" for x in r["activated_share_per_step"]) + "]"
        lines.append(
            f"{r['d']:>4} {r['kappa']:>7.4g} {'yes' if r['projection'] else 'no':<4} "
            f"{r['activated_share']:>9.3f} {ps:<32} "
            f"{r['violations']:>4}/{r['steps_checked']:<4} {r['max_ratio_lhs_over_rhs']:>11.4f} "
            f"{r['projection_active_share']:>12.3f} {r['activated_and_projected_share']:>8.3f} "
            f"{r['needs_history_term_share']:>12.3f}"
        )
    worst = max(max(r["pre_noise_mismatch"] for r in out["rows"]), 0.0)
    lines.append(f"certificate vs independent recomputation of Q_t: max gap {worst:.2e}; "
                 "needs Y-term = share of steps where |Q_t - z_t|^2 > kappa T r^2 (covered "
                 "only by |Y_(t-1) - z_(t-1)|^2; happens only when activated and projected)")
    return "\n".join(lines)


def _fmt_root_n(out: dict, cfg: TheoryConfig) -> str:
    lines = [
        f"4. Root-n transition: d = 2, T = {out['steps']}, eps = {out['epsilon']:g}, "
        f"gamma = {out['gamma']:g}, kappa = {cfg.kappa:g}, m = ceil(n^alpha) memories in the "
        f"gate, {cfg.root_n_replications} noise draws per cell; xi = Y_t - Q_t (no projection)",
        f"{'alpha':>5} {'n':>7} {'m':>5} {'m_hat t=1..T':<26} {'sd(sqrt(n) xi) t=1..T':<28} "
        f"{'predicted sd':<26} {'q2.5..q97.5 (t=1)':<24}",
    ]
    for r in out["rows"]:
        mh = "[" + ", ".join(f"{x:.3g}" for x in r["m_hat_mean_per_step"]) + "]"
        sd = "[" + ", ".join(f"{x:.3g}" for x in r["sd_sqrt_n_xi_per_step"]) + "]"
        pr = "[" + ", ".join(f"{x:.3g}" for x in r["sd_predicted_per_step"]) + "]"
        qq = r["quantiles_t1_coord1"]
        lines.append(f"{r['alpha']:>5.2f} {r['n']:>7} {r['m_in_gate']:>5} {mh:<26} {sd:<28} "
                     f"{pr:<26} [{qq['q02.5']:.3g}, {qq['q97.5']:.3g}]")
    lines.append("log-log slopes over n (t = 1): sd(sqrt(n) xi) measured vs 1/2 - alpha; "
                 "m_hat measured vs alpha")
    for f in out["fits"]:
        lines.append(f"  alpha = {f['alpha']:.2f} ({f['regime']}): sd slope "
                     f"{f['slope_sd_t1']:+.3f} (theory {f['theory_slope_sd']:+.2f}), m_hat "
                     f"slope {f['slope_m_hat_t1']:.3f} (theory {f['theory_slope_m_hat']:.2f})")
    return "\n".join(lines)


def _fmt_cost(out: dict, cfg: TheoryConfig) -> str:
    s = out["setting"]
    lines = [f"5. What correction costs: n = {s['n']}, r = {s['radius']}, T = {s['steps']}, "
             f"eps = {s['epsilon']:g}, delta = {s['delta']:g}; final per-coordinate squared "
             "error vs noiseless, mean [95% CI]; shared noise across rows"]
    for qs in dict.fromkeys(r["query_set"] for r in out["rows"]):
        lines.append(f"  queries {qs}:")
        lines.append(f"    {'method':<22} {'final error':<34} {'act.':>5} "
                     f"{'mean sensitivity (Dbar_t for brace) t=1..T':<46}")
        for r in out["rows"]:
            if r["query_set"] != qs:
                continue
            sens = r.get("mean_smooth_sensitivity_per_step", r.get("mean_sensitivity_per_step"))
            act = f"{r['activation_rate']:.2f}" if "activation_rate" in r else "-"
            sv = "[" + ", ".join(f"{x:.4f}" for x in sens) + "]"
            lines.append(f"    {r['label']:<22} {_ci(r['final_per_coord'], '.4g'):<34} "
                         f"{act:>5} {sv:<46}")
    return "\n".join(lines)


_FORMATTERS = {
    "dimension": _fmt_dimension,
    "horizon": _fmt_horizon,
    "activation": _fmt_activation,
    "root_n": _fmt_root_n,
    "correction_cost": _fmt_cost,
}


# ---------------------------------------------------------------------------- figures


def _risk_panels(out: dict, key: str, xs: list, axes, panels, refs=None) -> None:
    for ax, (field, ylab) in zip(axes, panels, strict=True):
        for v, _, _ in _VARIANTS:
            for proj in (True, False):
                rs = [r for r in out["rows"] if r["variant"] == v and r["projection"] == proj]
                y = [r[field]["mean"] for r in rs]
                lo = np.array([r[field]["lo"] for r in rs])
                hi = [r[field]["hi"] for r in rs]
                ax.plot([r[key] for r in rs], y, color=_COLORS[v], marker="o", ms=4,
                        ls="-" if proj else "--",
                        label=f"{v} ({'projection' if proj else 'no projection'})")
                # 95% CI band (log-scale interval of a non-negative mean: lo > 0 unless
                # every error is 0, which a log axis cannot draw)
                ax.fill_between([r[key] for r in rs], np.where(lo > 0, lo, np.nan), hi,
                                where=lo > 0, color=_COLORS[v], alpha=0.12)
        if refs is not None and "per coord" not in ylab:
            refs(ax)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(ylab)
        ax.grid(alpha=0.3, which="both")


def _legend_below(fig, ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8,
               bbox_to_anchor=(0.5, -0.02))
    fig.subplots_adjust(bottom=0.3)


def _fig_dimension(out: dict, cfg: TheoryConfig, path: Path, raw: dict | None = None) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    bound = out["bound_total"]

    def refs(ax):
        ax.axhline(bound, color="k", ls=":", lw=1.2, label="(2T+1)²r² (deterministic bound)")

    _risk_panels(out, "d", list(cfg.dims), axes, [
        ("terminal_total", "E‖Y_T − z_T‖²"),
        ("terminal_per_coord", "E‖Y_T − z_T‖²/d (per coord)"),
        ("max_path_total", "E max_t ‖Y_t − z_t‖²"),
    ], refs)
    _legend_below(fig, axes[0])
    fig.suptitle(f"1. Error against dimension (n = {cfg.n}, r = {cfg.radius}, T = {cfg.steps}, "
                 f"ε = {cfg.epsilon:g}); solid: with output projection, dashed: without")
    save_figure(fig, path)


def _fig_horizon(out: dict, cfg: TheoryConfig, path: Path, raw: dict | None = None) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    Ts = np.asarray(cfg.horizons, dtype=float)
    r2 = out["references"]["r2"]

    def refs(ax):
        ax.plot(Ts, np.full_like(Ts, r2), color="0.3", ls="-.", lw=1, label="r²")
        ax.plot(Ts, Ts**2 * r2, color="0.3", ls=":", lw=1.2, label="T²r²")
        ax.plot(Ts, (2 * Ts + 1) ** 2 * r2, color="k", ls=":", lw=1.2, label="(2T+1)²r²")

    _risk_panels(out, "T", list(cfg.horizons), axes, [
        ("terminal_total", "E‖Y_T − z_T‖²"),
        ("max_path_total", "E max_t ‖Y_t − z_t‖²"),
    ], refs)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(Ts, [f"{int(t)}" for t in Ts])
    _legend_below(fig, axes[0])
    fig.suptitle(f"2. Error against horizon T (d = {out['dim']}, n = {cfg.n}, r = {cfg.radius}, "
                 f"ε = {cfg.epsilon:g}); solid: projection, dashed: none")
    save_figure(fig, path)


def _fig_activation(out: dict, cfg: TheoryConfig, path: Path, raw: dict | None = None) -> None:
    plt = pyplot()
    dims = list(dict.fromkeys(r["d"] for r in out["rows"]))
    ncol = 2
    nrow = -(-(1 + len(dims)) // ncol)
    fig, grid = plt.subplots(nrow, ncol, figsize=(12, 4.6 * nrow), squeeze=False)
    axes = grid.ravel()
    for extra in axes[1 + len(dims):]:
        extra.set_visible(False)
    kap = out["kappas"]
    cmap = plt.get_cmap("viridis")
    ax = axes[0]
    for i, k in enumerate(kap):
        for d, ls in zip(dims, ("-", "--", ":", "-."), strict=False):
            r = next(r for r in out["rows"] if r["kappa"] == k and r["d"] == d
                     and r["projection"])
            t = np.arange(1, len(r["activated_share_per_step"]) + 1)
            ax.plot(t, r["activated_share_per_step"], color=cmap(i / max(1, len(kap) - 1)),
                    ls=ls, marker="o", ms=4, label=f"κ = {k:.3g}, d = {d}")
    ax.set_xticks(range(1, cfg.steps + 1))
    ax.set_xlabel("step t")
    ax.set_ylabel("share of activated steps (H_t = 1)")
    ax.set_title("activation share (with projection)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    raw = raw or {}
    floor = 1e-6
    for ax, d in zip(axes[1:1 + len(dims)], dims, strict=True):
        zeros = total = 0
        for i, k in enumerate(kap):
            for proj, mk in ((True, "o"), (False, "x")):
                key = f"d{d}_kappa{k:g}_proj{int(proj)}"
                if key + "_lhs" not in raw:
                    continue
                lhs, rhs = raw[key + "_lhs"].ravel(), raw[key + "_rhs"].ravel()
                keep = np.isfinite(rhs) & (rhs > 0)
                ratio = lhs[keep] / rhs[keep]
                zeros += int((ratio < floor).sum())
                total += int(keep.sum())
                ax.scatter(rhs[keep], np.maximum(ratio, floor), s=7, marker=mk, alpha=0.45,
                           color=cmap(i / max(1, len(kap) - 1)),
                           label=f"κ = {k:.3g} ({'proj.' if proj else 'no proj.'})")
        ax.axhline(1.0, color="k", lw=1.2, label="bound (ratio = 1)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(floor / 3, 3)
        ax.set_xlabel("rhs = max{κTr², ‖Y_{t−1} − z_{t−1}‖²}")
        ax.set_ylabel("‖Q_t − z_t‖² / rhs")
        viol = sum(r["violations"] for r in out["rows"] if r["d"] == d)
        n = sum(r["steps_checked"] for r in out["rows"] if r["d"] == d)
        ax.set_title(f"d = {d}: {viol} violations in {n} steps\n{zeros} of {total} plotted "
                     "steps have ‖Q_t − z_t‖² < 1e-6·rhs (drawn at 1e-6)", fontsize=9)
        ax.legend(fontsize=6, markerscale=2, loc="lower right")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"3. Activation bound (n = {cfg.n}, T = {cfg.steps}, ε = {cfg.epsilon:g}); "
                 "o: with output projection, x: without")
    fig.tight_layout()
    save_figure(fig, path)


def _fig_root_n(out: dict, cfg: TheoryConfig, path: Path, raw: dict | None = None) -> None:
    plt = pyplot()
    alphas = [f["alpha"] for f in out["fits"]]
    fig, axes = plt.subplots(1, len(alphas) + 1, figsize=(4.6 * (len(alphas) + 1), 4.6),
                             layout="constrained")  # no overlapping labels between panels
    raw = raw or {}
    sizes = list(dict.fromkeys(r["n"] for r in out["rows"]))
    for i, (ax, a, f) in enumerate(zip(axes, alphas, out["fits"], strict=False)):
        data = [raw.get(f"alpha{a:g}_n{n}", np.zeros(1)) for n in sizes]
        ax.violinplot(data, showmedians=True)
        ax.set_xticks(range(1, len(sizes) + 1),
                      [f"$10^{{{math.log10(n):.0f}}}$" for n in sizes])
        ax.axhline(0.0, color="0.5", lw=0.8)
        ax.set_xlabel("n")
        if i == 0:  # one y label for the violin panels
            ax.set_ylabel("√n · ξ_{n,1} (first coordinate)")
        ax.set_title(f"α = {a:g}: m̂ ≍ n^{a:g} — {f['regime']}", fontsize=10)
        ax.grid(alpha=0.3)
    ax = axes[-1]
    for a in alphas:
        rs = [r for r in out["rows"] if r["alpha"] == a]
        ns = np.array([r["n"] for r in rs], dtype=float)
        sd = np.array([r["sd_sqrt_n_xi_per_step"][0] for r in rs])
        ax.plot(ns, sd, marker="o", label=f"α = {a:g} measured")
        ax.plot(ns, sd[0] * (ns / ns[0]) ** (0.5 - a), ls=":", color="0.4", lw=1)
    ax.plot([], [], ls=":", color="0.4", label="slope ½ − α (theory)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n")
    ax.set_ylabel("sd of √n·ξ_{n,1} per coordinate")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"4. Root-n transition (d = 2, T = {out['steps']}, ε = {out['epsilon']:g}, "
                 f"γ = {out['gamma']:g}, gate holds ⌈n^α⌉ memories)")
    save_figure(fig, path)


def _fig_cost(out: dict, cfg: TheoryConfig, path: Path, raw: dict | None = None) -> None:
    plt = pyplot()
    qsets = list(dict.fromkeys(r["query_set"] for r in out["rows"]))
    fig, axes = plt.subplots(len(qsets), 2, figsize=(11, 4 * len(qsets)), squeeze=False)
    T = out["setting"]["steps"]
    cmap = plt.get_cmap("plasma")
    for row_axes, qs in zip(axes, qsets, strict=True):
        rows = [r for r in out["rows"] if r["query_set"] == qs]
        br = [r for r in rows if r["method"] == "brace"]
        k = np.array([r["kappa"] for r in br])
        ax = row_axes[0]
        m = [r["final_per_coord"]["mean"] for r in br]
        ax.errorbar(k, m, yerr=[np.subtract(m, [r["final_per_coord"]["lo"] for r in br]),
                                np.subtract([r["final_per_coord"]["hi"] for r in br], m)],
                    color=_COLORS["brace"], marker="o", ms=4, capsize=2, label="BRACE")
        for meth, lab in (("naive", NOT_DP_LABEL), ("global", "global")):
            r = next(r for r in rows if r["method"] == meth)
            c = r["final_per_coord"]
            ax.axhline(c["mean"], color=_COLORS[meth], ls="--" if meth == "naive" else "-",
                       label=lab)
            ax.axhspan(c["lo"], c["hi"], color=_COLORS[meth], alpha=0.12)
        ax.set_xscale("symlog", linthresh=1e-3)
        ax.set_yscale("log")
        ax.set_xlabel("κ")
        ax.set_ylabel("final per-coordinate squared error")
        ax.set_title(f"queries {qs}: final error", fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
        ax2 = ax.twinx()
        ax2.plot(k, [r["activation_rate"] for r in br], color="0.5", ls=":", marker=".",
                 label="activation share")
        ax2.set_ylim(0, 1)
        ax2.set_ylabel("activation share (dotted)", color="0.4")
        ax = row_axes[1]
        sens = np.array([r["mean_smooth_sensitivity_per_step"] for r in br])
        for t in range(T):
            ax.plot(k, sens[:, t], color=cmap(t / max(1, T - 1)), marker="o", ms=3,
                    label=rf"BRACE $\bar\Delta_{t + 1}$")
        gl = next(r for r in rows if r["method"] == "global")
        nv = next(r for r in rows if r["method"] == "naive")
        ax.axhline(gl["mean_sensitivity_per_step"][0], color=_COLORS["global"], label="global 2r")
        ax.plot(k, np.full_like(k, np.mean(nv["mean_sensitivity_per_step"])),
                color=_COLORS["naive"], ls="--", label=f"{NOT_DP_LABEL} mean 2r/m_t")
        ax.set_xscale("symlog", linthresh=1e-3)
        ax.set_yscale("log")
        ax.set_xlabel("κ")
        ax.set_ylabel("mean noise-scale sensitivity")
        ax.set_title(rf"queries {qs}: mean $\bar\Delta_t$ per step", fontsize=10)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3, which="both")
    s = out["setting"]
    fig.suptitle(f"5. What correction costs (n = {s['n']}, r = {s['radius']}, T = {T}, "
                 f"ε = {s['epsilon']:g}); κ from 0 to (2T+1)²/T = {s['kappa_max']:.3g}")
    fig.tight_layout()
    save_figure(fig, path)


_FIGURES = {
    "dimension": _fig_dimension,
    "horizon": _fig_horizon,
    "activation": _fig_activation,
    "root_n": _fig_root_n,
    "correction_cost": _fig_cost,
}
