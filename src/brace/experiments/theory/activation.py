"""Item 3, activation bound (paper §4 "Activation", App. B.2).

For each κ of the grid: the share of activated steps ``H_t = 1`` and, on every step,
``‖Q_t − z_t‖² ≤ max{κTr², ‖Y_{t−1} − z_{t−1}‖²}`` with the pre-noise point ``Q_t``
recomputed along the released history by :func:`brace.certificate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import LSRMemory, certificate
from ..._validation import check_rng
from ...datasets import sample_mixture
from ...plan import recorded_kappa
from .._common import pyplot, save_figure
from ._shared import _RTOL, _queries_near_memories, _retrieve, embedded_mixture
from .config import TheoryConfig


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
