"""The real-data experiment's report (:mod:`brace.experiments.real`): the markdown tables
(:func:`format_table`, the settings and the floor-beating tables) and the figures."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ._common import (
    pyplot,
    save_figure,
)
from .real_config import (
    _PRIVATE_SYNOPSES,
    LABELS,
    METHODS,
    PER_QUERY,
    SETTINGS,
    RealConfig,
    _has_eps,
)
from .real_data import NAMES


def format_table(summary: dict, cfg: RealConfig) -> str:
    """Markdown: accuracy (MSE) per (dataset, Q, method) row and ε_total column."""
    every = summary["cells"]
    cells = [c for c in every if c.get("setting", "split") == "split"]
    eps = sorted(float(e) for e in cfg.epsilons)
    idx = {(c["dataset"], c["n_queries"], c["epsilon_total"], c["method"]): c
           for c in cells}
    lines = [
        "Completion on real data: label accuracy (per-coordinate MSE to the noiseless "
        f"completion); δ = {cfg.delta:g}, T and gate size chosen on public data per data "
        f"set (see results), R = {cfg.repetitions}, noise = {cfg.noise:g}·scale, "
        f"mask = {cfg.mask:g}",
        "",
        "| data | Q | method | " + " | ".join(f"ε={e:g}" for e in eps) + " |",
        "|---|---:|---|" + "---:|" * len(eps),
    ]
    for ds in summary["datasets"]:
        for Q in sorted({c["n_queries"] for c in cells if c["dataset"] == ds}):
            for m in METHODS:
                row = []
                if _has_eps(m):
                    for e in eps:
                        c = idx.get((ds, Q, e, m))
                        row.append("" if c is None else
                                   f"{c['accuracy']['mean']:.3f} ({c['mse']['mean']:.2g})")
                else:
                    c = idx.get((ds, Q, None, m))
                    if c is None:
                        continue
                    row = [f"{c['accuracy']['mean']:.3f}"] * len(eps)
                    if m == "noiseless":
                        row[0] += f" (query as is: {c['query_accuracy']['mean']:.3f})"
                if any(row):
                    lines.append(f"| {ds} | {Q} | {LABELS[m]} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append("ε used per query (per-query methods): mean over repetitions")
    lines.append("")
    lines.append("| data | Q | method | " + " | ".join(f"ε={e:g}" for e in eps) + " |")
    lines.append("|---|---:|---|" + "---:|" * len(eps))
    for ds in summary["datasets"]:
        for Q in sorted({c["n_queries"] for c in cells if c["dataset"] == ds}):
            for m in PER_QUERY:
                row = []
                for e in eps:
                    c = idx.get((ds, Q, e, m))
                    row.append("" if c is None else f"{c['epsilon_per_query']:.3g}")
                if any(row):
                    lines.append(f"| {ds} | {Q} | {LABELS[m]} | " + " | ".join(row) + " |")
    other = [c for c in every if c.get("setting", "split") != "split"]
    if other:
        lines += ["", settings_table(other, eps), "", beats_floor_table(every, eps)]
    return "\n".join(lines)


def settings_table(cells: list[dict], eps: list[float]) -> str:
    """Markdown: label accuracy ± its sd over repetitions, per (data set, setting, Q,
    method) row and ε_total column (the settings other than "split")."""
    idx = {(c["dataset"], c["setting"], c["n_queries"], c["epsilon_total"], c["method"]): c
           for c in cells}
    lines = ["Public-data settings (none / sample of 50 rows / shifted: classes 0-4 "
             "only): label accuracy ± sd over repetitions",
             "",
             "| data | setting | Q | method | " + " | ".join(f"ε={e:g}" for e in eps) + " |",
             "|---|---|---:|---|" + "---:|" * len(eps)]
    keys = sorted({(c["dataset"], c["setting"], c["n_queries"]) for c in cells},
                  key=lambda k: (NAMES.index(k[0]), SETTINGS.index(k[1]), k[2]))
    for ds, st_, Q in keys:
        for m in METHODS:
            if _has_eps(m):
                row = [idx.get((ds, st_, Q, e, m)) for e in eps]
            else:
                row = [idx.get((ds, st_, Q, None, m))] * len(eps)
            if not any(row):
                continue
            txt = ["" if c is None else f"{c['accuracy']['mean']:.3f} ± "
                   f"{c.get('accuracy_sd', 0.0):.3f}" for c in row]
            label = "releases nothing (the query)" if (m, st_) == ("public_only", "none") \
                else LABELS[m]
            lines.append(f"| {ds} | {st_} | {Q} | {label} | " + " | ".join(txt) + " |")
    return "\n".join(lines)


def beats_floor(priv: dict, floor: dict) -> bool:
    """The private method beats the public-only floor by more than its run-to-run
    spread: the difference of the means exceeds the larger of the two standard
    deviations over repetitions."""
    gap = priv["accuracy"]["mean"] - floor["accuracy"]["mean"]
    return gap > max(priv.get("accuracy_sd", 0.0), floor.get("accuracy_sd", 0.0))


def beats_floor_table(cells: list[dict], eps: list[float]) -> str:
    """Per data set and setting with public data: in how many (Q, ε ≥ 1) cells each
    synopsis beats ``public_only`` by more than the spread (:func:`beats_floor`)."""
    idx = {(c["dataset"], c.get("setting", "split"), c["n_queries"], c["epsilon_total"],
            c["method"]): c for c in cells}
    lines = ["Private beats public-only (ε ≥ 1): cells where the synopsis's mean accuracy "
             "exceeds public_only's by more than the larger sd over repetitions",
             "", "| data | setting | synopsis, no public data | synopsis, no public data, "
             "private PCA | synopsis, public seeds |",
             "|---|---|---:|---:|---:|"]
    groups = sorted({(c["dataset"], c.get("setting", "split")) for c in cells
                     if c.get("setting", "split") != "none"},
                    key=lambda k: (NAMES.index(k[0]), SETTINGS.index(k[1])))
    for ds, st_ in groups:
        out = []
        for m in ("synopsis_private", "synopsis_private_pca", "synopsis"):
            won = tot = 0
            for (d_, s_, Q, e, m_), c in idx.items():
                if (d_, s_, m_) != (ds, st_, m) or e is None or e < 1.0:
                    continue
                fl = idx.get((ds, st_, Q, None, "public_only"))
                if fl is None:
                    continue
                tot += 1
                won += beats_floor(c, fl)
            out.append(f"{won}/{tot}" if tot else "—")
        lines.append(f"| {ds} | {st_} | " + " | ".join(out) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures

_COLOR = {"brace_global": "tab:blue", "brace_local": "tab:purple",
          "global_noise": "tab:green", "synopsis": "tab:orange",
          "synopsis_private": "tab:red", "synopsis_private_pca": "tab:brown"}


def _figures(cfg: RealConfig, summary: dict, out_dir: Path) -> None:
    """``accuracy.png`` and ``mse.png``: against ε_total (log x), one panel per data set,
    one line per (method, Q) (the synopsis once, at the largest Q: its cost does not
    depend on Q); noiseless dashed, public-only dotted."""
    plt = pyplot()
    cells = [c for c in summary["cells"] if c.get("setting", "split") == "split"]
    names = list(summary["datasets"])
    Qs = sorted({c["n_queries"] for c in cells})
    alphas = {Q: 0.35 + 0.65 * (i + 1) / len(Qs) for i, Q in enumerate(Qs)}
    markers = dict(zip(Qs, "os^Dv<>p", strict=False))
    for field, fname, ylabel in (("accuracy", "accuracy.png", "label accuracy"),
                                 ("mse", "mse.png", "MSE to noiseless completion")):
        fig, axes = plt.subplots(1, len(names), figsize=(4.3 * len(names), 3.6),
                                 squeeze=False)
        for ax, ds in zip(axes[0], names, strict=True):
            mine = [c for c in cells if c["dataset"] == ds]
            for m in ("brace_global", "brace_local", "global_noise", "synopsis",
                      *_PRIVATE_SYNOPSES):
                for Q in (Qs if not m.startswith("synopsis") else Qs[-1:]):
                    pts = sorted((c["epsilon_total"], c[field]["mean"]) for c in mine
                                 if c["method"] == m and c["n_queries"] == Q)
                    if not pts:
                        continue
                    x, y = zip(*pts, strict=True)
                    lab = (f"{LABELS[m]}, Q={Q}" if not m.startswith("synopsis")
                           else f"{LABELS[m]} (any Q)")
                    ax.plot(x, y, color=_COLOR[m], alpha=alphas[Q], marker=markers[Q],
                            ms=3.5, lw=1.3, label=lab)
            if field == "accuracy":
                for m, ls in (("noiseless", "--"), ("public_only", ":")):
                    vals = [c[field]["mean"] for c in mine if c["method"] == m]
                    if vals:
                        ax.axhline(float(np.mean(vals)), color="k", ls=ls, lw=1.2,
                                   label=LABELS[m])
            ax.set_xscale("log")
            if field == "mse":
                ax.set_yscale("log")
            ax.set_title(ds, fontsize=10)
            ax.set_xlabel(f"total ε (δ = {cfg.delta:g})")
            ax.grid(True, which="major", alpha=0.3)
        axes[0, 0].set_ylabel(ylabel)
        h, lab = axes[0, 0].get_legend_handles_labels()
        if lab:
            fig.legend(h, lab, loc="upper center", ncol=min(6, len(lab)), fontsize=7,
                       bbox_to_anchor=(0.5, 1.0 + 0.03 * math.ceil(len(lab) / 6)))
        fig.tight_layout()
        save_figure(fig, out_dir / fname)


def _settings_figure(cfg: RealConfig, summary: dict, out_dir: Path) -> None:
    """``settings.png`` (when a setting other than "split" ran): label accuracy against
    ε_total, one row of panels per data set, one panel per setting; the two synopses,
    per-query BRACE at the largest Q, and public_only (dotted; in "none": the query)."""
    cells = summary["cells"]
    keys = sorted({(c["dataset"], c["setting"]) for c in cells},
                  key=lambda k: (NAMES.index(k[0]), SETTINGS.index(k[1])))
    if not any(st_ != "split" for _, st_ in keys):
        return
    plt = pyplot()
    names = sorted({k[0] for k in keys}, key=NAMES.index)
    sets = [st_ for st_ in SETTINGS if any(k[1] == st_ for k in keys)]
    fig, axes = plt.subplots(len(names), len(sets), figsize=(3.4 * len(sets),
                                                             2.9 * len(names)),
                             squeeze=False, sharey="row")
    for i, ds in enumerate(names):
        for j, st_ in enumerate(sets):
            ax = axes[i, j]
            mine = [c for c in cells if c["dataset"] == ds and c["setting"] == st_]
            Qmax = max((c["n_queries"] for c in mine), default=None)
            for m in (*_PRIVATE_SYNOPSES, "synopsis", "brace_global"):
                pts = sorted((c["epsilon_total"], c["accuracy"]["mean"]) for c in mine
                             if c["method"] == m and c["n_queries"] == Qmax)
                if pts:
                    x, y = zip(*pts, strict=True)
                    lab = LABELS[m] + (f", Q={Qmax}" if m == "brace_global" else "")
                    ax.plot(x, y, color=_COLOR[m], marker="o", ms=3, lw=1.3, label=lab)
            fl = [c["accuracy"]["mean"] for c in mine if c["method"] == "public_only"]
            if fl:
                ax.axhline(float(np.mean(fl)), color="k", ls=":", lw=1.2,
                           label="public only" if st_ != "none" else "the query itself")
            ax.set_xscale("log")
            ax.minorticks_off()
            ticks = sorted(float(e) for e in cfg.epsilons)
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{e:g}" for e in ticks], fontsize=7)
            ax.set_title(f"{ds}, {st_}", fontsize=9)
            ax.grid(True, alpha=0.3)
            if i == len(names) - 1:
                ax.set_xlabel(f"total ε (δ = {cfg.delta:g})")
            if j == 0:
                ax.set_ylabel("label accuracy")
            ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    save_figure(fig, out_dir / "settings.png")
