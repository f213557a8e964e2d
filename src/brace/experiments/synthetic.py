"""Synthetic boundary switching (paper §6.1, ``docs/spec.md`` §7) — the README's main job.

n = 256 memories from the three-component mixture of :mod:`brace.datasets`, r = 0.8
(β = 3.125), T = 5, (ε, δ) = (128, 1e-5).

1. A highlighted run in which naive and BRACE share the same Gaussian innovations,
   printed as a per-step table and drawn as the figure pair of paper Fig. 1. The run is
   *selected* (rule: the largest naive final error among ``candidates`` seeded (query,
   noise) draws with queries between the modes) to illustrate boundary switching; one
   run is an anecdote.
2. The unselected picture: ``replications`` independent (query, noise) draws, mean and
   95% interval of the final per-coordinate squared error against noiseless retrieval,
   per method, with BRACE at κ ∈ {0, κ_mid, ∞}.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import LSRMemory, NotPrivateWarning, private_retrieve
from .._io import write_json
from .._validation import check_int_at_least, check_rng
from ..datasets import PAPER_MIXTURE, sample_mixture
from ._common import NOT_DP_LABEL, mean_ci95, metadata, pyplot, save_figure

__all__ = ["SyntheticConfig", "run_synthetic"]


@dataclass(frozen=True)
class SyntheticConfig:
    n: int = 256
    radius: float = 0.8
    steps: int = 5
    epsilon: float = 128.0
    delta: float = 1e-5
    kappa: float = 0.0  # highlighted run: correct whenever the gates differ
    kappa_grid: tuple = (0.0, 0.05, math.inf)
    gamma: float | None = None  # None: data-independent rule of brace.policy
    query_spread: float = 0.35  # queries = a random memory + N(0, spread² I)
    data_seed: int = 0
    seed: int = 1
    candidates: int = 200
    replications: int = 200
    accounting: str = "rdp"


def _errors(outputs: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """Per-coordinate squared error ``‖Y_t − z_t‖²/d`` per query and step."""
    return ((outputs - clean[:, 1:]) ** 2).mean(axis=-1)


def _run(mem, q, method, cfg, *, kappa=None, seed=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)  # labelled in every output
        return private_retrieve(
            mem, q, method=method, epsilon=cfg.epsilon, delta=cfg.delta, steps=cfg.steps,
            kappa=cfg.kappa if kappa is None else kappa, gamma=cfg.gamma,
            seed=seed, accounting=cfg.accounting, return_clean=True,
        )


def _queries(X, count, cfg, rng):
    return X[rng.integers(0, len(X), count)] + rng.normal(0, cfg.query_spread, (count, 2))


def run_synthetic(cfg: SyntheticConfig = SyntheticConfig(), out_dir: str | Path | None = None,
                  *, progress: bool = True) -> dict:
    """Run the experiment; write ``summary.json``, ``table.txt`` and the figures to
    ``out_dir`` (atomically) when given, and return the summary dict."""
    check_int_at_least("replications", cfg.replications, 2)
    check_int_at_least("candidates", cfg.candidates, 1)
    t0 = time.perf_counter()
    X = sample_mixture(cfg.n, spec=PAPER_MIXTURE, seed=cfg.data_seed)
    mem = LSRMemory(X, radius=cfg.radius)
    rng = check_rng(cfg.seed)
    T = cfg.steps

    # 1. highlighted run: shared innovations for naive / BRACE / global (one seed: the
    # innovations are each call's first draw, so the same seed shares them)
    qc = rng.uniform((-0.6, -0.3), (0.6, 0.3), (cfg.candidates, 2))  # between the modes
    shared = int(rng.integers(2**63))
    runs = {m: _run(mem, qc, m, cfg, seed=shared) for m in ("naive", "brace", "global")}
    err = {m: _errors(r.outputs, r.clean) for m, r in runs.items()}
    pick = int(np.argmax(err["naive"][:, -1]))
    b = runs["brace"]
    clean = b.clean[pick]
    table = []
    for t in range(T):
        table.append({
            "t": t + 1,
            "gate_clean": int(b.gate_clean[pick, t]),
            "gate_released": int(b.gate_released[pick, t]),
            "left": int(b.left[pick, t]),
            "entered": int(b.entered[pick, t]),
            "correction_norm": float(b.correction_norm[pick, t]),
            "activated": bool(b.activated[pick, t]),
            "smooth_sensitivity": float(b.smooth_sensitivity[pick, t]),
            "noise_std_brace": float(b.noise_std[pick, t]),
            "err_naive_NOT_DP": float(err["naive"][pick, t]),
            "err_brace": float(err["brace"][pick, t]),
            "err_global": float(err["global"][pick, t]),
        })
    highlighted = {
        "query": qc[pick].tolist(),
        "candidate_index": pick,
        "selection_rule": "argmax over candidates (queries between the modes) of the naive "
        "final error",
        "first_perturbation_norm_brace": float(np.linalg.norm(b.outputs[pick, 0] - clean[1])),
        "trajectories": {
            "noiseless": clean.tolist(),
            **{m: np.concatenate([qc[pick][None], r.outputs[pick]]).tolist()
               for m, r in runs.items()},
        },
        "table": table,
    }

    # 2. multi-seed summary (independent queries and noise, nothing selected)
    qs = _queries(X, cfg.replications, cfg, rng)
    methods = [("naive", None), ("global", None), ("endpoint", None)]
    methods += [("brace", k) for k in cfg.kappa_grid]
    summary = []
    it = methods
    if progress:
        from tqdm import tqdm

        it = tqdm(methods, desc="methods", file=sys.stderr)
    for m, k in it:
        res = _run(mem, qs, m, cfg, kappa=k, seed=rng)
        final = ((res.final - res.clean[:, -1]) ** 2).mean(axis=-1)
        row = {"method": m, "kappa": k, "private": res.is_private,
               "label": _label(m, k), **mean_ci95(final)}
        if m == "brace":
            row["activation_rate"] = float(res.activated.mean())
            row["mean_smooth_sensitivity_per_step"] = res.smooth_sensitivity.mean(0).tolist()
            row["gamma"] = res.privacy.gamma
            row["release"] = res.params["release"]
            row["release_rule"] = res.params["release_rule"]
        row["noise_std_per_step"] = res.noise_std.mean(0).tolist()
        summary.append(row)

    out = {
        **metadata(cfg),
        "bank_mixture": PAPER_MIXTURE.to_dict(),
        "highlighted_run": highlighted,
        "summary": summary,
        "wall_time_s": time.perf_counter() - t0,
    }
    text = format_tables(out)
    print(text)
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        _figures(out, X, out_dir)
        from .._io import atomic_write_text

        atomic_write_text(out_dir / "table.txt", text + "\n")
        write_json(out_dir / "summary.json", out)
        print(f"wrote {out_dir}/summary.json, table.txt, fig1_trajectories.png, fig1_errors.png")
    return out


def _label(method: str, kappa) -> str:
    if method == "naive":
        return NOT_DP_LABEL
    if method == "brace":
        return f"brace (kappa={'inf' if kappa is not None and math.isinf(kappa) else kappa})"
    return method


def format_tables(out: dict) -> str:
    h = out["highlighted_run"]
    lines = [
        "Highlighted run (selected to illustrate boundary switching; naive, BRACE and global "
        "share noise)",
        f"query = {np.round(h['query'], 4).tolist()}, first BRACE perturbation norm = "
        f"{h['first_perturbation_norm_brace']:.5f}",
        f"{'t':>2} {'|I_t|':>5} {'|J_t|':>5} {'left':>4} {'entr':>4} {'||R_t||':>8} {'H_t':>3} "
        f"{'Dbar_t':>8} {'naive(NOT DP)':>13} {'brace':>9} {'global':>9}",
    ]
    for r in h["table"]:
        lines.append(
            f"{r['t']:>2} {r['gate_clean']:>5} {r['gate_released']:>5} {r['left']:>4} "
            f"{r['entered']:>4} {r['correction_norm']:>8.5f} {int(r['activated']):>3} "
            f"{r['smooth_sensitivity']:>8.5f} {r['err_naive_NOT_DP']:>13.5f} "
            f"{r['err_brace']:>9.5f} {r['err_global']:>9.5f}"
        )
    n = out["summary"][0]["n"]
    lines += [
        "",
        f"Final per-coordinate squared error vs noiseless, {n} independent (query, noise) "
        "draws: mean [95% CI]",
    ]
    for r in out["summary"]:
        extra = f"  activation rate {r['activation_rate']:.2f}" if "activation_rate" in r else ""
        lines.append(f"  {r['label']:<22} {r['mean']:.5f} [{r['lo']:.5f}, {r['hi']:.5f}]{extra}")
    return "\n".join(lines)


def _figures(out: dict, X: np.ndarray, out_dir: Path) -> None:
    plt = pyplot()
    h = out["highlighted_run"]
    kappa = out["config"]["kappa"]
    styles = {
        "noiseless": ("k", "o", "noiseless"),
        "naive": ("tab:red", "x", NOT_DP_LABEL),
        "brace": ("tab:blue", "s", f"BRACE (κ = {kappa:g})"),
        "global": ("tab:green", "^", "global"),
    }
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.scatter(X[:, 0], X[:, 1], s=6, c="0.75", label="memories")
    for m, (c, mk, lab) in styles.items():
        tr = np.asarray(h["trajectories"][m])
        ax.plot(tr[:, 0], tr[:, 1], color=c, marker=mk, lw=1.5, ms=5, label=lab,
                ls="--" if m == "naive" else "-")
    q = h["query"]
    ax.add_patch(plt.Circle(q, out["config"]["radius"], fill=False, ls=":", color="0.4",
                            label="gate of q (radius r)"))
    ax.scatter([q[0]], [q[1]], marker="*", s=160, c="gold", edgecolors="k", zorder=5,
               label="query q")
    ax.set_aspect("equal")
    ax.set_xlabel("coordinate 1")
    ax.set_ylabel("coordinate 2")
    ax.set_title("Retrieval trajectories (naive is NOT differentially private)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # off the data
    save_figure(fig, out_dir / "fig1_trajectories.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    t = [r["t"] for r in h["table"]]
    for key, m in (("err_naive_NOT_DP", "naive"), ("err_brace", "brace"),
                   ("err_global", "global")):
        c, mk, lab = styles[m]
        ax.plot(t, [r[key] for r in h["table"]], color=c, marker=mk, label=lab,
                ls="--" if m == "naive" else "-")
    ax.set_yscale("log")
    ax.set_xticks(t)  # updates are integers
    ax.set_xlabel("update t")
    ax.set_ylabel("per-coordinate squared error vs noiseless")
    ax.set_title("Per-step error (highlighted run)")
    ax.legend(fontsize=8)
    save_figure(fig, out_dir / "fig1_errors.png")
