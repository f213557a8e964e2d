"""Completion on real data under a total budget: per-query BRACE, global noise, synopsis.

``brace experiment real``.

Data (:mod:`brace.experiments.real_data`): breast cancer (d = 30), digits (d = 64) and,
when the MNIST test split is found, MNIST PCA-16 and PCA-64. Each is split into a
private bank and a disjoint public split; preprocessing constants, the horizon ``T`` and
the support radius come from the public split only: ``T ∈ {1, 3}`` and the gate size
(4, 8, 16 or 32 bank memories per gate, :func:`~brace.experiments.real_data.public_radius`
sized for corrupted queries) are those whose noiseless completion is most accurate on
public data (the seed pool standing in for the bank), unless ``steps`` /
``target_gate`` fix them.

Task: completion. The public split is divided into a **query pool** and a **seed pool**
(``min(n_seeds, m // 2)`` records: the memory of the public-only baseline, and the rows
whose k-means centres, two per class, seed the synopsis). A query is a query-pool record
drawn with replacement, corrupted by :func:`~brace.experiments.real_data.corrupt`
(Gaussian noise of std ``noise × feature_scale``, then a fraction ``mask`` of the
features set to 0). Per query:

* **accuracy**: the label of the bank memory nearest to the completed record equals the
  query record's label (evaluation only; no release reads labels);
* **MSE**: ``‖y − z_T‖² / d``, ``z_T`` the noiseless LSR completion of the same query
  (``LSRMemory(bank, radius=r).retrieve(q, T)``).

Workload: ``Q`` queries answered from one bank under a total budget ``(ε_total, δ)``.
Methods (``docs/privacy-accounting.md``):

* ``brace_global`` / ``brace_local``: ``PrivateMemory(bank, radius=r, budget=(ε_total,
  δ), accounting="global" / "local")``; ``ε_q = pm.affordable_epsilon(queries, steps=T)``;
  one batch ``pm.retrieve(queries, steps=T, epsilon=ε_q)`` (default release);
* ``global_noise``: the same with ``method="global"`` under global accounting;
* ``synopsis``: ``pm.snapshot(centres, epsilon=None, cell_radius=r_c, keep_seeds=True)``
  (cell rounds from the public centres, cells of the clean public radius ``r_c``: 32
  memories per gate) spends the whole budget once; every query is then answered by
  ``syn.complete`` (nearest attractor; post-processing, its cost does not depend on
  ``Q``);
* ``noiseless``: the ceiling (NOT private);
* ``public_only``: noiseless LSR over the seed pool alone (ε = 0; its radius is sized by
  the same rule for the seed pool's size): what public data give without the bank.

**Public-data settings** (``settings``; ``docs/experiments.md`` §6.1). ``"split"`` is
the setting above (a public split of the same population). The others run on the data
sets with a public domain (:data:`~brace.experiments.real_data.DOMAINS`: digits and raw
MNIST, ``mnist784``), with the same bank and query pool; only what counts as public
changes:

* ``"none"``: no public data at all. ``synopsis_private`` is the synopsis without seeds
  (``pm.snapshot(bounds=domain)``, ``docs/privacy-accounting.md`` §15); per-query
  methods take their radius from the private scale of a synopsis without seeds at
  ``(ε/5, δ/2)`` and spend ``(4ε/5, δ/2)`` on the queries; ``public_only`` is the query
  itself (nothing is released and nothing public is known); no public-seeded synopsis.
* ``"sample"``: the first :data:`SAMPLE_SIZE` (50) rows of the seed pool;
* ``"shifted"``: the seed-pool rows of the classes below :data:`SHIFT_CLASSES` (0–4): a
  public set from another class mix, half the classes missing.

In ``"sample"`` and ``"shifted"`` the public rows are the memory of ``public_only`` (at
the gate size of :data:`GATES` that scores best on the queries themselves: an oracle
choice in the floor's favour), the
k-means centres of the public-seeded ``synopsis`` (two per public class, at most half
the rows) and the source of the radii (:func:`~brace.experiments.real_data.public_radius`
on the public rows alone); ``T = 1`` (:data:`NEW_SETTING_STEPS`) in the three new
settings. ``synopsis_private`` does not read public data in any setting.

When nothing is affordable (``ε_q = 0``) no release is made and the completion is the
query itself (counted in ``refused``). A cell with ``Q`` below ``min_scored`` scores
``ceil(min_scored / Q)`` independent workloads, each with its own fresh budget, so that
the accuracy of ``Q = 1`` rests on more than one query. Each of the ``R`` repetitions
draws its own queries, corruption and noise.

Outputs (atomic, in ``--out``): ``results.jsonl`` (one line per (dataset, Q, ε, method)
cell with its R repetitions, the config and versions; a rerun skips cells already there),
``summary.json``, ``table.txt`` (markdown), ``accuracy.png``, ``mse.png`` and, when a
setting other than ``"split"`` ran, ``settings.png``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .._io import atomic_write_text, write_json
from ._common import (
    append_jsonl,
    metadata,
    read_jsonl,
    read_resumable,
)
from .real_cells import _cell, _prepare, _Prepared, _Public, _public, _queries
from .real_config import (
    _DS_CODE,
    METHODS,
    QUICK,
    SETTINGS,
    RealConfig,
    _grid,
    _key,
    _run_hash,
    _ss,
)
from .real_data import NAMES, RealData, load_real
from .real_report import _figures, _settings_figure, format_table

__all__ = ["RealConfig", "QUICK", "METHODS", "SETTINGS", "run_real", "format_table"]


# --------------------------------------------------------------------------- the run


def _sklearn_version() -> str | None:
    from importlib import metadata as md

    try:
        return md.version("scikit-learn")
    except md.PackageNotFoundError:  # pragma: no cover
        return None


def run_real(
    cfg: RealConfig = RealConfig(),  # noqa: B008 (frozen: an immutable default)
    out_dir: str | Path = "runs/real",
    *,
    data_dir: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Run (or resume) the grid; write results, table and figures to ``out_dir``.

    Returns the summary dict (also ``summary.json``). Cells already in
    ``out_dir/results.jsonl`` with the same run hash are not recomputed; a file written
    by another configuration is an error. MNIST data sets are skipped, with a one-line
    note, when the MNIST files are not found.
    """
    if not isinstance(cfg, RealConfig):
        raise TypeError(f"cfg must be a RealConfig; got {type(cfg).__name__}.")
    t_start = time.perf_counter()
    run_hash = _run_hash(cfg)
    out_dir = Path(out_dir)
    results_path = out_dir / "results.jsonl"
    existing = read_resumable(results_path, run_hash)
    done = {_key(r) for r in existing}

    loaded: dict[str, RealData] = {}
    skipped: dict[str, str] = {}
    for name in cfg.datasets:
        try:
            loaded[name] = load_real(name, seed=_ss(cfg.split_seed, _DS_CODE[name]),
                                     data_dir=data_dir)
        except FileNotFoundError as exc:
            skipped[name] = str(exc)
            print(f"note: {name} skipped: the MNIST test split was not found (pass "
                  "--data-dir DIR or set BRACE_MNIST_DIR)", file=sys.stderr)
    if not loaded:
        raise FileNotFoundError("no data set could be loaded: " + "; ".join(
            f"{k}: {v}" for k, v in skipped.items()))
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = metadata(cfg)
    meta["versions"]["scikit-learn"] = _sklearn_version()
    common = {"run_hash": run_hash, "config": meta["config"], "versions": meta["versions"]}

    grid = _grid(cfg, tuple(loaded))
    todo = [k for k in grid if k not in done]
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc="real data", unit="cell", file=sys.stderr)
    n_new = 0
    prepared: dict[str, _Prepared] = {}
    try:
        for name in loaded:
            syn_cache: dict = {}
            pubs: dict[str, _Public] = {}
            for Q in cfg.workloads:
                cells = [k for k in todo if k[0] == name and k[2] == int(Q)]
                if not cells:
                    continue
                if name not in prepared:
                    prepared[name] = _prepare(cfg, loaded[name])
                prep = prepared[name]
                qs = _queries(cfg, prep, int(Q))
                for _, setting, _, eps, method in cells:
                    if setting not in pubs:
                        pubs[setting] = _public(cfg, prep, setting)
                    rec = _cell(cfg, prep, pubs[setting], qs, int(Q), eps, method,
                                syn_cache, common)
                    append_jsonl(results_path, [rec])  # atomic: a finished cell survives
                    n_new += 1
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(data=name, setting=setting, Q=Q, eps=eps,
                                        method=method)
    finally:
        if bar is not None:
            bar.close()

    keys = set(grid)
    records = [r for r in read_jsonl(results_path) if _key(r) in keys]
    datasets = {}
    for name, data in loaded.items():
        prep = prepared.get(name) or _prepare(cfg, data)
        datasets[name] = {**data.describe(), "radius": prep.radius,
                          "radius_public_only": prep.radius_public,
                          "n_seeds": int(prep.seeds.shape[0]),
                          "n_query_pool": int(prep.pool.shape[0])}
    summary = {
        **meta,
        "run_hash": run_hash,
        "datasets": datasets,
        "skipped": skipped,
        "cells": _cells_summary(records),
        "cells_total": len(grid),
        "cells_computed_this_run": n_new,
        "wall_time_s_this_run": time.perf_counter() - t_start,
        "note": ("accuracy: label of the bank memory nearest to the completion equals the "
                 "query record's label; MSE: per coordinate, to the noiseless completion. "
                 "noiseless and public_only are not private releases."),
    }
    text = format_table(summary, cfg)
    print(text)
    _figures(cfg, summary, out_dir)
    _settings_figure(cfg, summary, out_dir)
    atomic_write_text(out_dir / "table.txt", text + "\n")
    write_json(out_dir / "summary.json", summary)
    print(f"wrote {out_dir}/results.jsonl ({len(records)} cells, {n_new} new), "
          "summary.json, table.txt, accuracy.png, mse.png")
    return summary


def _cells_summary(records: list[dict]) -> list[dict]:
    keep = ("dataset", "setting", "n_queries", "epsilon_total", "method", "label",
            "private", "accuracy", "mse", "epsilon_per_query", "epsilon_spent",
            "refused_fraction", "queries_scored", "wall_time_s", "query_accuracy",
            "n_attractors", "n_public", "projected_dim")
    out = [{k: r[k] for k in keep if k in r} for r in records]
    for c, r in zip(out, records, strict=True):
        c.setdefault("setting", "split")
        c["accuracy_sd"] = float(np.std([p["accuracy"] for p in r["repetitions"]]))
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(out, key=lambda c: (NAMES.index(c["dataset"]), SETTINGS.index(
        c["setting"]), c["n_queries"], order[c["method"]], c["epsilon_total"] or 0.0))
