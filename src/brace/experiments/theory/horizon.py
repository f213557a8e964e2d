"""Item 2, horizon: the risks of item 1 against ``T``, with the reference curves ``r²``,
``T²r²`` and the bound ``(2T+1)²r²``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ... import LSRMemory
from ..._validation import check_rng
from ...datasets import sample_mixture
from ...mechanisms import no_correction_kappa
from .._common import pyplot, save_figure
from ._plot import _legend_below, _risk_panels
from ._shared import _queries_near_memories, _retrieve, embedded_mixture
from .config import TheoryConfig
from .risks import _VARIANTS, _fmt_risks, _risk_row


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


def _fmt_horizon(out: dict, cfg: TheoryConfig) -> str:
    return _fmt_risks(out, "T", (
        f"2. Horizon: d = {out['dim']}, n = {cfg.n}, r = {cfg.radius}, eps = {cfg.epsilon:g}, "
        f"{cfg.replications} queries per cell; references r^2 = {out['references']['r2']:.4g}, "
        "T^2 r^2, (2T+1)^2 r^2"), cfg)


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
