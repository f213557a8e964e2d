"""Coverage study of the CLT confidence regions of :mod:`brace.uq` (``docs/spec.md`` §6).

A 2-D Gaussian mixture with known population trajectory ``z̄_t`` (exact quadrature,
:class:`brace.uq.MixturePopulation`); for every bank size ``n``, ``replications``
independent banks, and on each bank one private release per ``(ε, T)``. For both targets
— the bank's noiseless trajectory ``z_t`` and the population's ``z̄_t`` — the study
records the squared Mahalanobis distance of the target from the release under the
estimated covariance, so that the empirical coverage of every region kind is known at
every nominal level: per step, joint (χ² on the stacked trajectory), Bonferroni over
steps, and the Bonferroni box of coordinate intervals. It also records interval widths,
the privacy share of the variance, and checks the delta-method ``Σ̂`` against the exact
``Σ`` and against the spread of ``√n (z_t − z̄_t)`` over banks.

Defaults: the paper's mixture (``docs/spec.md`` §7), r = 0.8, q = (0.4, 0.25), BRACE with κ = ∞
(no correction: smooth-sensitivity private mean shift, the paper's MNIST regime),
γ from the public rule ``choose_gamma(ε, δ, T, d, fraction=0.75)`` — see the docs
(docs/uq.md §7) for why not the library default 0.9 at ε = 1, and for the κ = 0 runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import LSRMemory, NotPrivateWarning, private_retrieve
from .._io import atomic_write_text, write_json
from .._validation import check_int_at_least, check_positive
from ..datasets import PAPER_MIXTURE, MixtureSpec, sample_mixture
from ..policy import choose_gamma
from ..uq import MixturePopulation, analyze, sampling_covariance
from ._common import NOT_DP_LABEL, append_jsonl, metadata, pyplot, read_jsonl, save_figure

__all__ = ["CoverageConfig", "QUICK", "run_coverage", "coverage_table"]


@dataclass(frozen=True)
class CoverageConfig:
    ns: tuple = (500, 2000, 8000)
    epsilons: tuple = (1.0, 8.0, 64.0)
    horizons: tuple = (1, 3)
    replications: int = 1000
    radius: float = 0.8
    query: tuple = (0.4, 0.25)
    delta: float = 1e-5
    method: str = "brace"
    kappa: float = math.inf
    gamma_fraction: float = 0.75  # γ = choose_gamma(ε, δ, T, d, fraction) — public rule
    privacy: str = "auto"  # privacy part of brace.uq.analyze: linear | simulate | auto
    n_sim: int = 200  # simulated releases when the privacy part is simulated
    levels: tuple = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975, 0.99)
    nominal: float = 0.95
    seed: int = 0
    mixture: MixtureSpec = field(default_factory=lambda: PAPER_MIXTURE)


QUICK = dict(ns=(500, 2000), replications=60)


def _key(cfg: CoverageConfig) -> str:
    """Identity of a run for resuming: every field except the list of bank sizes."""
    d = dataclasses.asdict(cfg)
    d.pop("ns")
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _gamma(cfg: CoverageConfig, eps: float, T: int) -> float | None:
    if cfg.method != "brace":
        return None
    return choose_gamma(eps, cfg.delta, T, dim=2, fraction=cfg.gamma_fraction)


def _one_n(cfg: CoverageConfig, n: int, zbar: np.ndarray, progress: bool) -> list[dict]:
    """All replications for one bank size; one record per (ε, T)."""
    q = np.asarray(cfg.query, dtype=np.float64)[None]
    Tmax = max(cfg.horizons)
    R = cfg.replications
    root = np.random.SeedSequence([cfg.seed, n])
    settings = [(e, T) for e in cfg.epsilons for T in cfg.horizons]
    gam = {s: _gamma(cfg, *s) for s in settings}
    stat = {
        s: {k: [] for k in ("bank_step", "bank_joint", "bank_bonferroni", "bank_box",
                            "pop_step", "pop_joint", "pop_bonferroni", "pop_box", "priv_sd",
                            "samp_sd", "noise_std", "mhat", "proj", "exact", "simulated",
                            "linearization_error")}
        for s in settings
    }
    t0 = time.perf_counter()
    errs = np.empty((R, Tmax * 2))
    est_var = np.empty((R, Tmax * 2))
    it = range(R)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"n={n}", file=sys.stderr)
    for rep in it:
        ss_bank, ss_noise = _rep_seeds(root, rep)
        X = sample_mixture(n, spec=cfg.mixture, seed=ss_bank)
        mem = LSRMemory(X, radius=cfg.radius)
        sc = sampling_covariance(mem, q, Tmax)
        z = sc.trajectory
        errs[rep] = math.sqrt(n) * (z[0, 1:] - zbar[1:]).ravel()
        est_var[rep] = np.diagonal(sc.cov[0])
        rng = np.random.default_rng(ss_noise)
        for s in settings:
            eps, T = s
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotPrivateWarning)  # labelled in outputs
                res = private_retrieve(
                    mem, q, method=cfg.method, epsilon=eps, delta=cfg.delta, steps=T,
                    kappa=cfg.kappa, gamma=gam[s], seed=rng,
                )
            uq = analyze(mem, res, q, sampling=sc, privacy=cfg.privacy, n_sim=cfg.n_sim,
                         seed=rng)
            st = stat[s]
            for tgt, truth in (("bank", z[:, : T + 1]), ("pop", zbar[None, : T + 1])):
                reg = uq.confidence_region("bank" if tgt == "bank" else "population", 0.95)
                # entry levels: covered at nominal ℓ iff entry < ℓ (any ℓ, one pass)
                st[f"{tgt}_step"].append(reg.entry_level(truth, "step")[0].tolist())
                for kind in ("joint", "bonferroni", "box"):
                    st[f"{tgt}_{kind}"].append(float(reg.entry_level(truth, kind)[0]))
            st["priv_sd"].append(uq.privacy_sd[0].tolist())
            st["samp_sd"].append(uq.sampling_sd[0].tolist())
            st["noise_std"].append(res.noise_std[0].tolist())
            eff = res.effective_count
            st["mhat"].append(eff[0].tolist() if eff is not None else None)
            st["proj"].append(uq.projection_active[0].tolist())
            st["exact"].append(uq.privacy_exact[0].tolist())
            st["simulated"].append(uq.privacy_model == "simulate")
            st["linearization_error"].append(uq.linearization_error[0].tolist())
    emp_cov = np.cov(errs, rowvar=False)
    out = []
    for (eps, T), st in stat.items():
        out.append({
            "n": n, "epsilon": eps, "T": T, "gamma": gam[(eps, T)], **st,
            "n_block_time_s": time.perf_counter() - t0,
            "empirical_sampling_cov": emp_cov.tolist() if (eps, T) == settings[0] else None,
            "mean_estimated_sampling_var": est_var.mean(0).tolist()
            if (eps, T) == settings[0] else None,
        })
    return out


def _rep_seeds(root: np.random.SeedSequence, rep: int):
    """Independent (bank, noise) seed sequences for replication ``rep`` (order-free)."""
    ss = np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, rep))
    return ss.spawn(2)


def _coverage(rec: dict, level: float) -> dict:
    """Empirical coverage of each region kind at nominal ``level`` from the stored entry
    levels (a region of level ℓ covers iff the entry level is below ℓ)."""
    out = {}
    for tgt in ("bank", "pop"):
        per = np.asarray(rec[f"{tgt}_step"], dtype=np.float64)  # (R, S)
        out[f"{tgt}_step"] = (per < level).mean(0).tolist()
        for kind in ("joint", "bonferroni", "box"):
            out[f"{tgt}_{kind}"] = float((np.asarray(rec[f"{tgt}_{kind}"]) < level).mean())
    return out


def summarize(records: list[dict], cfg: CoverageConfig) -> list[dict]:
    """One row per (n, ε, T): coverage at every level, widths and diagnostics."""
    from scipy import stats

    rows = []
    z95 = stats.norm.ppf(0.975)
    for rec in sorted(records, key=lambda r: (r["n"], r["epsilon"], r["T"])):
        R = len(rec["bank_joint"])
        priv = np.asarray(rec["priv_sd"])  # (R, T, d)
        samp = np.asarray(rec["samp_sd"])
        row = {
            "n": rec["n"], "epsilon": rec["epsilon"], "T": rec["T"], "gamma": rec["gamma"],
            "replications": R,
            "coverage": {f"{lv:g}": _coverage(rec, lv) for lv in cfg.levels},
            "mc_sd_at_nominal": math.sqrt(cfg.nominal * (1 - cfg.nominal) / R),
            "halfwidth_bank_final": float(z95 * priv[:, -1].mean()),
            "halfwidth_pop_final": float(z95 * np.sqrt(priv[:, -1] ** 2 + samp[:, -1] ** 2)
                                         .mean()),
            "privacy_sd_final": float(priv[:, -1].mean()),
            "sampling_sd_final": float(samp[:, -1].mean()),
            "privacy_share_final": float(
                ((priv[:, -1] ** 2).sum(-1) / ((priv[:, -1] ** 2 + samp[:, -1] ** 2).sum(-1)))
                .mean()
            ),
            "projection_rate": float(np.asarray(rec["proj"]).any(axis=1).mean()),
            "exact_rate": float(np.asarray(rec["exact"]).all(axis=1).mean()),
            "simulated_rate": float(np.mean(rec["simulated"])),
            "max_linearization_error_median": float(
                np.median(np.asarray(rec["linearization_error"]).max(axis=1))
            ),
            "median_noise_std_final": float(np.median(np.asarray(rec["noise_std"])[:, -1])),
        }
        if rec["mhat"][0] is not None:
            row["median_mhat"] = np.median(np.asarray(rec["mhat"]), axis=0).tolist()
        rows.append(row)
    return rows


def sigma_check(records: list[dict], exact: np.ndarray) -> list[dict]:
    """Per n: exact Σ vs the spread of √n(z − z̄) over banks and the mean delta Σ̂."""
    out = []
    for rec in records:
        if rec.get("empirical_sampling_cov") is None:
            continue
        emp = np.asarray(rec["empirical_sampling_cov"])
        est = np.asarray(rec["mean_estimated_sampling_var"])
        de = np.diag(exact)
        out.append({
            "n": rec["n"],
            "empirical_over_exact_var": (np.diag(emp) / de).tolist(),
            "mean_delta_over_exact_var": (est / de).tolist(),
            "empirical_vs_exact_rel_frobenius": float(
                np.linalg.norm(emp - exact) / np.linalg.norm(exact)
            ),
        })
    return sorted(out, key=lambda r: r["n"])


def coverage_table(summary: dict) -> str:
    cfg = summary["config"]
    nom = f"{cfg['nominal']:g}"
    label = NOT_DP_LABEL if cfg["method"] == "naive" else cfg["method"]
    kap = cfg["kappa"]
    lines = [
        f"Coverage of nominal {float(nom):.0%} regions, method {label}, kappa={kap}, "
        f"gamma rule fraction={cfg['gamma_fraction']}, privacy part {cfg['privacy']} "
        f"(n_sim={cfg['n_sim']}), {cfg['replications']} banks per n; "
        f"MC sd ≈ {summary['rows'][0]['mc_sd_at_nominal']:.4f}",
        "  step: per-step ellipsoid at every step (listed); joint: chi2 on the stacked "
        "trajectory; bonf: Bonferroni over steps; box: Bonferroni box of coordinates",
        f"{'n':>5} {'eps':>4} {'T':>1} {'m̂_T':>7} {'priv%':>6} "
        f"{'bank step':>17} {'joint':>6} {'bonf':>6} {'box':>6} "
        f"{'pop step':>17} {'joint':>6} {'bonf':>6} {'box':>6} "
        f"{'hw bank':>9} {'hw pop':>9} {'proj':>5} {'sim':>5}",
    ]
    for r in summary["rows"]:
        c = r["coverage"][nom]
        mh = r.get("median_mhat")
        mh = f"{mh[-1]:7.1f}" if mh else f"{'-':>7}"
        bs = "/".join(f"{v:.3f}" for v in c["bank_step"])
        ps = "/".join(f"{v:.3f}" for v in c["pop_step"])
        lines.append(
            f"{r['n']:>5} {r['epsilon']:>4g} {r['T']:>1} {mh} "
            f"{100 * r['privacy_share_final']:>5.1f}"
            f"% {bs:>17} {c['bank_joint']:>6.3f} {c['bank_bonferroni']:>6.3f} "
            f"{c['bank_box']:>6.3f} {ps:>17} {c['pop_joint']:>6.3f} "
            f"{c['pop_bonferroni']:>6.3f} {c['pop_box']:>6.3f} "
            f"{r['halfwidth_bank_final']:>9.2e} {r['halfwidth_pop_final']:>9.2e} "
            f"{r['projection_rate']:>5.3f} {r['simulated_rate']:>5.3f}"
        )
    lines.append("  hw: mean 95% half-width of one coordinate at the final step; priv%: privacy "
                 "share of the population-target variance at the final step; proj: share of "
                 "releases with an active projection; sim: share whose privacy part was "
                 "simulated (privacy='auto' switches when the linear model is unreliable).")
    lines.append("")
    lines.append("Sampling covariance check (root-n scale, variances in step-major order):")
    for s in summary["sigma_check"]:
        lines.append(
            f"  n={s['n']:>5}: spread over banks / exact = "
            f"{np.round(s['empirical_over_exact_var'], 3).tolist()}; "
            f"mean delta-method / exact = {np.round(s['mean_delta_over_exact_var'], 3).tolist()}"
        )
    return "\n".join(lines)


def run_coverage(
    cfg: CoverageConfig = CoverageConfig(),
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
) -> dict:
    """Run (or resume) the study; write ``records.jsonl``, ``summary.json``, ``table.txt``
    and the figures to ``out_dir`` when given; return the summary dict."""
    check_int_at_least("replications", cfg.replications, 2)
    for n in cfg.ns:
        check_int_at_least("n", n, 2)
    for e in cfg.epsilons:
        check_positive("epsilon", e)
    for T in cfg.horizons:
        check_int_at_least("T", T, 1)
    if cfg.privacy not in ("auto", "linear", "simulate"):
        raise ValueError(f"privacy must be 'auto', 'linear' or 'simulate'; got {cfg.privacy!r}.")
    check_int_at_least("n_sim", cfg.n_sim, 2)
    if cfg.method == "brace":
        check_positive("gamma_fraction", cfg.gamma_fraction)
        if cfg.gamma_fraction > 1:
            raise ValueError(f"gamma_fraction must lie in (0, 1]. Found {cfg.gamma_fraction}.")
    t0 = time.perf_counter()
    pop = MixturePopulation(cfg.mixture)
    Tmax = max(cfg.horizons)
    zbar = pop.trajectory(cfg.query, radius=cfg.radius, steps=Tmax)
    exact = pop.sampling_covariance(cfg.query, radius=cfg.radius, steps=Tmax)
    key = _key(cfg)
    out_path = None if out_dir is None else Path(out_dir)
    records: list[dict] = []
    if out_path is not None:
        out_path.mkdir(parents=True, exist_ok=True)
        records = [r for r in read_jsonl(out_path / "records.jsonl") if r.get("key") == key]
    done = {r["n"] for r in records}
    for n in cfg.ns:
        if n in done:
            continue
        new = [{"key": key, **r} for r in _one_n(cfg, n, zbar, progress)]
        records += new
        if out_path is not None:
            append_jsonl(out_path / "records.jsonl", new)
    records = [r for r in records if r["n"] in cfg.ns]
    summary = {
        **metadata(cfg),
        "population_trajectory": zbar.tolist(),
        "population_sampling_cov": exact.tolist(),
        "rows": summarize(records, cfg),
        "sigma_check": sigma_check(records, exact),
        "wall_time_s": time.perf_counter() - t0,
        # time spent computing the records (over resumed runs too), one block per n
        "compute_time_s": sum({r["n"]: r.get("n_block_time_s") or 0.0 for r in records}
                              .values()),
    }
    text = coverage_table(summary)
    print(text)
    if out_path is not None:
        atomic_write_text(out_path / "table.txt", text + "\n")
        write_json(out_path / "summary.json", summary)
        _figures(summary, out_path)
        print(f"wrote {out_path}/records.jsonl, summary.json, table.txt, "
              "coverage_calibration.png, coverage_widths.png")
    return summary


def _figures(summary: dict, out: Path) -> None:
    plt = pyplot()
    cfg = summary["config"]
    rows = summary["rows"]
    ns = sorted({r["n"] for r in rows})
    Ts = sorted({r["T"] for r in rows})
    eps = sorted({r["epsilon"] for r in rows})
    colors = dict(zip(eps, ("tab:red", "tab:orange", "tab:blue", "tab:green", "tab:purple"),
                      strict=False))
    levels = [float(x) for x in cfg["levels"]]
    fig, axes = plt.subplots(len(Ts), len(ns), figsize=(3.3 * len(ns), 3.1 * len(Ts)),
                             squeeze=False, sharex=True, sharey=True)
    for i, T in enumerate(Ts):
        for j, n in enumerate(ns):
            ax = axes[i, j]
            ax.plot([0.45, 1], [0.45, 1], color="0.6", lw=0.8)
            for r in rows:
                if r["n"] != n or r["T"] != T:
                    continue
                c = colors[r["epsilon"]]
                cov = [r["coverage"][f"{lv:g}"] for lv in levels]
                ax.plot(levels, [x["bank_joint"] for x in cov], color=c, ls="--", marker=".",
                        label=f"ε={r['epsilon']:g} bank")
                ax.plot(levels, [x["pop_joint"] for x in cov], color=c, ls="-", marker="o",
                        ms=3, label=f"ε={r['epsilon']:g} population")
            ax.set_title(f"n={n}, T={T}", fontsize=9)
            if i == len(Ts) - 1:
                ax.set_xlabel("nominal level")
            if j == 0:
                ax.set_ylabel("empirical coverage (joint)")
    # One legend for colour (ε) and one for line style (target): the short lines of a
    # combined legend cannot show the dashes.
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[e], lw=2, label=f"ε = {e:g}") for e in eps]
    handles += [
        Line2D([], [], color="k", ls="--", marker=".", label="bank: z_t (dashed)"),
        Line2D([], [], color="k", ls="-", marker="o", ms=3, label="population: z̄_t (solid)"),
        Line2D([], [], color="0.6", lw=0.8, label="nominal = empirical"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), fontsize=8,
               handlelength=3.5, bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.suptitle(f"Joint-region coverage vs nominal ({cfg['method']}, κ={cfg['kappa']})",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.14 / len(Ts), 1, 1))
    save_figure(fig, out / "coverage_calibration.png")

    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, len(Ts), figsize=(4.2 * len(Ts), 3.4), squeeze=False)
    for i, T in enumerate(Ts):
        ax = axes[0, i]
        for e in eps:
            sel = [r for r in rows if r["T"] == T and r["epsilon"] == e]
            x = [r["n"] for r in sel]
            ax.plot(x, [r["halfwidth_pop_final"] for r in sel], color=colors[e], marker="o",
                    label=f"ε={e:g} population")
            ax.plot(x, [r["halfwidth_bank_final"] for r in sel], color=colors[e], ls="--",
                    marker=".", label=f"ε={e:g} bank")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ns, [str(v) for v in ns])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("n")
        ax.set_title(f"T={T}: 95% half-width, final step", fontsize=9)
    axes[0, 0].set_ylabel("half-width (one coordinate)")
    axes[0, -1].legend(fontsize=6)
    save_figure(fig, out / "coverage_widths.png")
