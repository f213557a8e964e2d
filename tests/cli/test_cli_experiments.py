"""``brace experiment coverage | mnist | theory``: quick runs and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from brace.cli import main
from brace.experiments import mnist as mx
from brace.experiments._common import NOT_DP_LABEL
from brace.experiments.mnist import QUICK
from brace.experiments.theory import ITEMS


def test_coverage_cli_quick_smoke(tmp_path, capsys):
    rc = main(["experiment", "coverage", "--quick", "--replications", "4", "--ns", "300",
               "--epsilons", "8", "--horizons", "1", "2", "--out", str(tmp_path),
               "--no-progress"])
    assert rc == 0
    for f in ("records.jsonl", "summary.json", "table.txt", "coverage_calibration.png",
              "coverage_widths.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert "Coverage of nominal 95%" in capsys.readouterr().out


def test_mnist_missing_data_dir_is_one_line_cli_error(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["experiment", "mnist", "--quick", "--data-dir", str(tmp_path / "nope"),
               "--out", str(out), "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("brace: error: MNIST test split not found")
    assert "\n" not in err and "--data-dir" in err and str(tmp_path / "nope") in err
    assert not out.exists()  # nothing written


def test_mnist_bad_draws_is_cli_error(tmp_path, capsys):
    rc = main(["experiment", "mnist", "--quick", "--draws", "0", "--out", str(tmp_path)])
    assert rc == 2
    assert "draws" in capsys.readouterr().err


@pytest.mark.slow
def test_mnist_quick_run(quick_run, tmp_path, capsys):
    rc = main(["experiment", "mnist", "--quick", "--data-dir", str(quick_run["data"]),
               "--cache-dir", str(quick_run["cache"]), "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    assert "paper-style" in capsys.readouterr().out
    assert (tmp_path / "results.jsonl").read_bytes().count(b"\n") == len(mx._grid_keys(QUICK))


def test_theory_quick_experiment_produces_every_figure_and_table(tmp_path, capsys):
    out = tmp_path / "theory"
    rc = main(["experiment", "theory", "--quick", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert NOT_DP_LABEL in text
    for item in ITEMS:
        png = (out / f"{item}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
        assert (out / f"{item}.txt").read_text().strip()
        js = json.loads((out / f"{item}.json").read_text())
        assert js["item"] == item and js["config"]["quick"] is True
        assert "numpy" in js["versions"] and js["rows"]
    for raw in ("activation_raw.npz", "root_n_raw.npz"):
        with np.load(out / raw) as z:
            assert len(z.files) > 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["items"]) == set(ITEMS)
    assert (out / "table.txt").read_text().count("\n") > 40
    assert not list(out.glob(".*.tmp"))
    items = summary["items"]
    # every projected run respects (2T+1) r; the activation bound holds on every step
    for key in ("dimension", "horizon"):
        for r in items[key]["rows"]:
            if r["projection"]:
                assert r["path_bound"]["violations"] == 0
    assert all(r["violations"] == 0 for r in items["activation"]["rows"])
    # the paired rows of item 5 are labelled, naive as NOT DP and not private
    naive = [r for r in items["correction_cost"]["rows"] if r["method"] == "naive"]
    assert naive and all(r["label"] == NOT_DP_LABEL and not r["private"] for r in naive)
    assert len(items["root_n"]["fits"]) == 3


def test_theory_quick_items_subset_and_cli_error(tmp_path, capsys):
    out = tmp_path / "sub"
    assert main(["experiment", "theory", "--quick", "--out", str(out), "--items", "root_n",
                 "--no-progress"]) == 0
    assert sorted(p.name for p in out.glob("*.png")) == ["root_n.png"]
    capsys.readouterr()
    assert main(["experiment", "theory", "--quick", "--out", str(tmp_path / "bad"),
                 "--replications", "1"]) == 2
    assert "replications" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_switching_quick_writes_json_and_figure(tmp_path):
    """``brace experiment switching --quick``: a JSON record with every cell and method,
    fractions in [0, 1], the naive baseline labelled NOT DP, and the figure."""
    import json

    out = tmp_path / "sw"
    assert main(["experiment", "switching", "--quick", "--out", str(out), "--no-progress"]) == 0
    rec = json.loads((out / "switching.json").read_text())
    assert "NOT DP" in rec["methods"]["naive"]
    assert len(rec["cells"]) == 2 * 2 * 2  # ε × distances × accountings at n = 256
    for c in rec["cells"]:
        for k in rec["methods"]:
            assert 0.0 <= c[k] <= 1.0
        assert c["brace_best"] <= min(c["by_kappa"][f"{k:g}"] for k in (0.0, 10.0))
    assert (out / "switching.png").stat().st_size > 0
    assert rec["versions"]["numpy"]
