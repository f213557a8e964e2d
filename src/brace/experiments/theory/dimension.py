"""Item 1, dimension-free error (paper Thm 3 and the remark after Thm 5).

For ``d`` in ``TheoryConfig.dims`` at fixed ``n, r, T, ε``: ``E‖Y_T − z_T‖²`` (total and per
coordinate) and ``E max_t ‖Y_t − z_t‖²`` for BRACE, global and endpoint, with and without
the output projection, and the path bound on every projected run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ... import LSRMemory
from ..._validation import check_rng
from ...datasets import sample_mixture
from ...mechanisms import no_correction_kappa
from .._common import pyplot, save_figure
from ._plot import _legend_below, _risk_panels
from ._shared import _queries_near_memories, _retrieve, embedded_mixture
from .config import TheoryConfig
from .risks import _VARIANTS, _fmt_risks, _risk_row


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


def _fmt_dimension(out: dict, cfg: TheoryConfig) -> str:
    return _fmt_risks(out, "d", (
        f"1. Dimension-free error: n = {cfg.n}, r = {cfg.radius}, T = {cfg.steps}, "
        f"eps = {cfg.epsilon:g}, delta = {cfg.delta:g}, kappa = {cfg.kappa:g}, "
        f"{cfg.replications} queries per cell; (2T+1)^2 r^2 = {out['bound_total']:.4g}"), cfg)


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
