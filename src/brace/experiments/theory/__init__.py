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

One module per item (:mod:`.dimension`, :mod:`.horizon`, :mod:`.activation`,
:mod:`.root_n`, :mod:`.correction_cost`), each with its run, its text table and its
figure; :mod:`.config` holds :class:`TheoryConfig`, :mod:`.risks` the risk rows and path
bound of items 1–2, :mod:`._shared` the banks, queries and releases every item uses, and
:mod:`._plot` the shared plotting. This module runs the selected items
(:func:`run_theory`).

Every random draw goes through :func:`brace._validation.check_rng`; each item gets its
own child of ``SeedSequence(seed)``, so an item's numbers do not depend on which other
items ran.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from ..._io import atomic_write_text, save_npz, write_json
from .._common import metadata
from ._shared import embedded_mixture
from .activation import (
    ActivationCheck,
    _fig_activation,
    _fmt_activation,
    activation_check,
    run_activation,
)
from .config import ITEMS, TheoryConfig, quick_config
from .correction_cost import _fig_cost, _fmt_cost, run_correction_cost
from .dimension import _fig_dimension, _fmt_dimension, run_dimension
from .horizon import _fig_horizon, _fmt_horizon, run_horizon
from .risks import PathBoundCheck, path_bound_check
from .root_n import _fig_root_n, _fmt_root_n, cluster_bank, run_root_n

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
    "run_dimension",
    "run_horizon",
    "run_activation",
    "run_root_n",
    "run_correction_cost",
]


_RUNNERS = {
    "dimension": run_dimension,
    "horizon": run_horizon,
    "activation": run_activation,
    "root_n": run_root_n,
    "correction_cost": run_correction_cost,
}

_FORMATTERS = {
    "dimension": _fmt_dimension,
    "horizon": _fmt_horizon,
    "activation": _fmt_activation,
    "root_n": _fmt_root_n,
    "correction_cost": _fmt_cost,
}

_FIGURES = {
    "dimension": _fig_dimension,
    "horizon": _fig_horizon,
    "activation": _fig_activation,
    "root_n": _fig_root_n,
    "correction_cost": _fig_cost,
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
