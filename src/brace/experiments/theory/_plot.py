"""Plotting shared by the theory checks: colours, the risk panels of items 1–2, the
legend below the panels.
"""

from __future__ import annotations

import numpy as np

from .risks import _VARIANTS

_COLORS = {"brace": "tab:blue", "global": "tab:green", "endpoint": "tab:purple",
           "naive": "tab:red", "brace κ=0": "tab:blue", "brace κ=(2T+1)²/T": "tab:cyan",
           }


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
