"""``brace audit``: one audit written to JSON, the report, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from brace.audit import report_bank
from brace.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::brace.NotPrivateWarning")


@pytest.fixture(scope="module")
def bank1():
    """The report's d = 1 bank: a query whose gate holds one memory near the boundary."""
    return report_bank(24, 1, 0.5, 8)


def test_cli_single_audit_writes_json(tmp_path, bank1, capsys):
    X, q = bank1
    np.save(tmp_path / "bank.npy", X)
    np.save(tmp_path / "q.npy", q)
    out = tmp_path / "res.json"
    rc = main(["audit", "--bank", str(tmp_path / "bank.npy"), "--query", str(tmp_path / "q.npy"),
               "--radius", "0.5", "--method", "naive", "--epsilon", "1", "--steps", "1",
               "--runs", "400", "--screen-runs", "50", "--out", str(out), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "NOT differentially private" in cap.err
    res = json.loads(out.read_text())
    assert res["label"] == "naive (NOT DP)" and res["n_runs_per_side"] == 400
    rc = main(["audit", "--bank", str(tmp_path / "bank.npy"), "--query", str(tmp_path / "q.npy"),
               "--radius", "0.5", "--method", "global", "--epsilon", "1", "--steps", "1",
               "--runs", "400", "--replace-row", "0", "--replace-value", "3.5",
               "--no-progress"])
    assert rc == 0
    assert "given at user" in capsys.readouterr().out


def test_cli_single_audit_far_pair_certifies_zero(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    np.save(tmp_path / "bank.npy", X)
    np.save(tmp_path / "q.npy", X[0])
    out = tmp_path / "far.json"
    rc = main(["audit", "--bank", str(tmp_path / "bank.npy"), "--query", str(tmp_path / "q.npy"),
               "--radius", "0.8", "--method", "brace", "--epsilon", "1", "--steps", "2",
               "--pair", "far", "--runs", "300", "--out", str(out), "--no-progress"])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["config"]["pair"] == "far" and res["config"]["coupled"] is True
    assert res["epsilon_lb"] == 0.0 and res["charged_epsilon"] == 0.0
    assert res["differing_runs"] == 0
    with pytest.raises(SystemExit):
        main(["audit", "--pair", "sideways"])
    rc = main(["audit", "--bank", str(tmp_path / "bank.npy"), "--query", str(tmp_path / "q.npy"),
               "--radius", "0.8", "--method", "brace", "--epsilon", "1", "--steps", "2",
               "--pair", "near", "--replace-row", "0", "--replace-value", "1,1"])
    assert rc != 0
    assert "chooses the replacement itself" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["audit", "--method", "brace"], "--bank is required"),
        (["audit", "--report", "--out", "{tmp}/r", "--bank", "x.npy"], "built-in banks"),
        (["audit", "--report"], "--out"),
        (["audit", "--bank", "{tmp}/missing.npy", "--query", "{tmp}/missing.npy",
          "--radius", "1", "--method", "brace", "--epsilon", "1", "--steps", "1"],
         "not found"),
        (["audit", "--bank", "{tmp}/b.npy", "--query", "{tmp}/q.npy", "--radius", "1",
          "--method", "brace", "--epsilon", "1", "--steps", "1", "--replace-row", "0"],
         "both --replace-row"),
        (["audit", "--bank", "{tmp}/b.npy", "--query", "{tmp}/q.npy", "--radius", "1",
          "--method", "brace", "--epsilon", "1", "--steps", "1", "--replace-row", "0",
          "--replace-value", "a,b"], "comma-separated"),
        (["audit", "--bank", "{tmp}/b.npy", "--query", "{tmp}/q.npy", "--radius", "1",
          "--method", "brace", "--epsilon", "1", "--steps", "1", "--out",
          "{tmp}/b.npy/res.json"], "output directory"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, argv, match):
    np.save(tmp_path / "b.npy", np.zeros((3, 1)))
    np.save(tmp_path / "q.npy", np.zeros(1))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("brace: error:") and match in err[0]
    assert not (tmp_path / "r").exists()


def test_cli_report_small(tmp_path, capsys):
    out = tmp_path / "rep"
    rc = main(["audit", "--report", "--runs", "60", "--screen-runs", "20", "--out", str(out),
               "--no-progress"])
    cap = capsys.readouterr().out
    assert rc in (0, 1, 3)  # too few runs to catch the naive baseline: may "fail"
    rep = json.loads((out / "audit_report.json").read_text())
    labels = [r["label"] for r in rep["rows"]]
    assert labels.count("naive (NOT DP)") == 4
    assert {"brace (kappa=0)", "brace (kappa=128)", "global", "endpoint"} <= set(labels)
    assert {r["claimed_epsilon"] for r in rep["rows"]} == {1.0, 4.0}
    assert {r["d"] for r in rep["rows"]} == {1, 2}
    assert (out / "audit_report.txt").read_text().strip() in cap
    assert rep["passed"] == (rc == 0)
    assert rep["overall"] == {0: "PASS", 1: "FAIL", 3: "UNDERPOWERED"}[rc]
    under = [r for r in rep["rows"] if r["verdict"] == "UNDERPOWERED"]
    assert under  # 60 runs per side cannot certify the naive rows that exceed their claim
    assert "UNDERPOWERED rows" in cap
    for r in under:
        assert r["underpowered"] and not r["exceeds_claim"]
        assert (r["point_epsilon"] is None or r["point_epsilon"] > r["claimed_epsilon"]
                or r["max_certifiable_epsilon"] <= r["claimed_epsilon"])
    assert rc == 1 or not any(r["verdict"] == "NOT CAUGHT" for r in rep["rows"])
    assert sorted(p.name for p in out.iterdir()) == ["audit_report.json", "audit_report.txt"]


def test_cli_kappa_default_is_the_library_default(tmp_path, bank1):
    """``brace audit`` without --kappa audits the κ that private_retrieve uses by default."""
    import inspect

    from brace import private_retrieve
    from brace.cli import build_parser
    from brace.mechanisms import DEFAULT_KAPPA

    assert inspect.signature(private_retrieve).parameters["kappa"].default == DEFAULT_KAPPA
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ("retrieve", "uq"):
        kappa = next(a for a in sub.choices[name]._actions if a.dest == "kappa")
        assert kappa.default == DEFAULT_KAPPA and f"default {DEFAULT_KAPPA:g}" in kappa.help
    X, q = bank1
    np.save(tmp_path / "bank.npy", X)
    np.save(tmp_path / "q.npy", q)
    out = tmp_path / "res.json"
    rc = main(["audit", "--bank", str(tmp_path / "bank.npy"), "--query", str(tmp_path / "q.npy"),
               "--radius", "0.5", "--method", "brace", "--epsilon", "1", "--steps", "1",
               "--runs", "200", "--screen-runs", "20", "--out", str(out), "--no-progress"])
    assert rc == 0
    assert json.loads(out.read_text())["config"]["kappa"] == DEFAULT_KAPPA
    kappa = next(a for a in sub.choices["audit"]._actions if a.dest == "kappa")
    assert f"default {DEFAULT_KAPPA:g}" in kappa.help
