"""Item 5, what correction costs: BRACE's final error and mean ``Δ̄_t`` per step against κ
in the synthetic setting of paper §6.1, beside naive (NOT DP) and global.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ... import LSRMemory
from ..._validation import check_rng
from ...datasets import PAPER_MIXTURE, sample_mixture
from ...mechanisms import no_correction_kappa
from .._common import NOT_DP_LABEL, mean_ci95, pyplot, save_figure
from ._plot import _COLORS
from ._shared import _ci, _queries_near_memories, _retrieve
from .config import TheoryConfig


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
