"""Item 4, root-n transition (paper Thm 5).

Banks whose gate around the query holds ``m = ⌈n^α⌉`` memories (:func:`cluster_bank`), so
that ``m̂ = 2r/Δ̄ ≍ n^α``: the distribution of ``√n·ξ_{n,t}`` (``ξ = Y_t − Q_t``, the noise
actually added) is vanishing (α > ½), order one (α = ½) or blowing up (α < ½).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ... import LSRMemory, certificate
from ..._validation import check_int_at_least, check_positive, check_rng
from .._common import pyplot, save_figure
from ._shared import _retrieve
from .config import TheoryConfig


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
