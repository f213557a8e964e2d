"""Where does each method end in the wrong mode? A phase diagram of boundary switching.

The paper's mixture (``brace.datasets.PAPER_MIXTURE``: two dominant modes at (±1, 0) and a
broad central component) with r = 0.8, T = 5. Queries sit at distance ``s`` to the right
of the separatrix ``x = 0`` between the two modes, ``q = (s, 0)``; the noiseless
trajectory from there ends in the right-hand mode. For each (ε, n, s) the experiment makes
``runs`` independent releases per method and records the fraction whose endpoint lies on
the other side of the separatrix from the noiseless endpoint (sign of the first
coordinate). Methods: naive (**NOT DP**), BRACE κ = ∞ (no correction), BRACE κ = 0,
BRACE with the best κ of a small grid (chosen in hindsight per cell: an upper bound on what
tuning κ could give, not a private choice), and global. Run with ``accounting="rdp"`` and
with ``accounting="paper"`` (the paper's per-step rules), to look for the naive mode
switch of the paper's Fig. 1.

Outputs (``out_dir``): ``switching.json`` (config, versions, every cell) and
``switching.png`` (one heat map per method and (n, accounting): wrong-mode fraction over
ε and s). All files are written atomically.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import LSRMemory, NotPrivateWarning, private_retrieve
from .._io import write_json
from .._meta import NOT_DP_LABEL, metadata
from ..datasets import sample_mixture
from ._common import pyplot, save_figure

__all__ = ["SwitchingConfig", "run_switching"]


@dataclass(frozen=True)
class SwitchingConfig:
    epsilons: tuple = (2.0, 8.0, 32.0, 128.0)
    sizes: tuple = (256, 2048)
    distances: tuple = (0.02, 0.05, 0.1, 0.2, 0.4)
    kappa_grid: tuple = (0.0, 0.01, 1.0, 10.0)
    runs: int = 100
    radius: float = 0.8
    steps: int = 5
    delta: float = 1e-5
    accountings: tuple = ("rdp", "paper")
    seed: int = 0
    data_seed: int = 0
    quick: bool = False

    @classmethod
    def quick_config(cls) -> SwitchingConfig:
        return cls(epsilons=(8.0, 128.0), sizes=(256,), distances=(0.05, 0.2),
                   kappa_grid=(0.0, 10.0), runs=20, quick=True)


METHOD_LABELS = {
    "naive": NOT_DP_LABEL,
    "brace_inf": "brace (kappa=inf)",
    "brace_0": "brace (kappa=0)",
    "brace_best": "brace (best kappa, hindsight)",
    "global": "global",
}


def _wrong(res, clean_end: np.ndarray) -> np.ndarray:
    return np.sign(res.final[:, 0]) != np.sign(clean_end[0])


def _cell(mem, q, cfg, eps, acc, seed):
    Q = np.repeat(q[None], cfg.runs, axis=0)
    kw = dict(epsilon=eps, delta=cfg.delta, steps=cfg.steps, accounting=acc, seed=seed)
    clean_end = mem.retrieve(q, cfg.steps)[-1]
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)  # labelled NOT DP in the output
        out["naive"] = float(_wrong(private_retrieve(mem, Q, method="naive", **kw),
                                    clean_end).mean())
    out["global"] = float(_wrong(private_retrieve(mem, Q, method="global", **kw),
                                 clean_end).mean())
    by_kappa = {}
    for kappa in sorted(set(cfg.kappa_grid) | {0.0, math.inf}):
        res = private_retrieve(mem, Q, method="brace", kappa=kappa, **kw)
        by_kappa[kappa] = float(_wrong(res, clean_end).mean())
    out["brace_inf"] = by_kappa[math.inf]
    out["brace_0"] = by_kappa[0.0]
    best = min(cfg.kappa_grid, key=lambda k: by_kappa[k])
    out["brace_best"] = by_kappa[best]
    out["best_kappa"] = best
    out["by_kappa"] = {("inf" if not math.isfinite(k) else f"{k:g}"): v
                       for k, v in by_kappa.items()}
    return out


def run_switching(cfg: SwitchingConfig = SwitchingConfig(),
                  out_dir: str | Path | None = None, *, progress: bool = True) -> dict:
    """Run the phase diagram; write ``switching.json`` and ``switching.png`` to ``out_dir``."""
    cells = []
    for n in cfg.sizes:
        X = sample_mixture(n, seed=cfg.data_seed)
        mem = LSRMemory(X, radius=cfg.radius)
        for s in cfg.distances:
            q = np.array([s, 0.0])
            for acc in cfg.accountings:
                for i, eps in enumerate(cfg.epsilons):
                    seed = np.random.SeedSequence([cfg.seed, n, int(s * 1e6), i,
                                                   cfg.accountings.index(acc)])
                    row = _cell(mem, q, cfg, eps, acc, seed)
                    row.update(n=n, distance=s, epsilon=eps, accounting=acc)
                    cells.append(row)
                    if progress:
                        print(f"[switching] n={n} s={s:g} {acc} eps={eps:g}: "
                              + ", ".join(f"{k} {row[k]:.2f}" for k in METHOD_LABELS),
                              flush=True)
    out = {**metadata(cfg), "methods": METHOD_LABELS, "cells": cells}
    if out_dir is not None:
        path = Path(out_dir)
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / "switching.json", out)
        _figure(out, cfg, path / "switching.png")
    return out


def _figure(out: dict, cfg: SwitchingConfig, path: Path) -> None:
    plt = pyplot()
    cols = [(n, a) for n in cfg.sizes for a in cfg.accountings]
    fig, axes = plt.subplots(len(METHOD_LABELS), len(cols), squeeze=False,
                             figsize=(2.6 * len(cols) + 1, 1.9 * len(METHOD_LABELS) + 0.6))
    for j, (n, acc) in enumerate(cols):
        for i, (key, label) in enumerate(METHOD_LABELS.items()):
            grid = np.full((len(cfg.distances), len(cfg.epsilons)), np.nan)
            for c in out["cells"]:
                if c["n"] == n and c["accounting"] == acc:
                    grid[cfg.distances.index(c["distance"]),
                         cfg.epsilons.index(c["epsilon"])] = c[key]
            ax = axes[i][j]
            im = ax.imshow(grid, origin="lower", vmin=0, vmax=1, cmap="magma_r",
                           aspect="auto")
            ax.set_xticks(range(len(cfg.epsilons)), [f"{e:g}" for e in cfg.epsilons],
                          fontsize=7)
            ax.set_yticks(range(len(cfg.distances)), [f"{s:g}" for s in cfg.distances],
                          fontsize=7)
            if i == 0:
                ax.set_title(f"n = {n}, {acc}", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{label}\ndistance s", fontsize=7)
            if i == len(METHOD_LABELS) - 1:
                ax.set_xlabel("ε", fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.6, label="fraction ending in the wrong mode")
    save_figure(fig, path)
