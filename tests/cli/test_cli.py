"""CLI: retrieve / account / experiment synthetic — outputs, errors, atomicity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from brace import LSRMemory, load_result
from brace.cli import main
from brace.datasets import sample_mixture


@pytest.fixture()
def files(tmp_path):
    X = sample_mixture(64, seed=0)
    q = X[:3] + 0.1
    np.save(tmp_path / "bank.npy", X)
    np.save(tmp_path / "q.npy", q)
    return tmp_path, X, q


def test_retrieve_noiseless_matches_library(files):
    tmp, X, q = files
    out = tmp / "out.npz"
    rc = main(["retrieve", "--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q.npy"),
               "--radius", "0.8", "--steps", "4", "--out", str(out), "--method", "none"])
    assert rc == 0
    with np.load(out) as z:
        traj = LSRMemory(X, radius=0.8).retrieve(q, 4)
        np.testing.assert_array_equal(z["outputs"], traj[:, 1:])
        np.testing.assert_array_equal(z["queries"], traj[:, 0])
        assert str(z["method"]) == "none" and not bool(z["is_private"])


def test_retrieve_private_and_naive_warning(files, capsys):
    tmp, X, q = files
    out = tmp / "b.npz"
    args = ["retrieve", "--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q.npy"),
            "--beta", "3.125", "--steps", "3", "--epsilon", "64", "--delta", "1e-5",
            "--kappa", "128", "--seed", "0"]
    assert main(args + ["--method", "brace", "--out", str(out)]) == 0
    with np.load(out) as z:
        assert z["outputs"].shape == (3, 3, 2)
        assert bool(z["is_private"])
        assert json.loads(str(z["privacy"]))["epsilon"] == 64
        # only the release: no data-dependent diagnostics unless asked for
        assert not any("sensitivity" in k or "gate" in k or "noise" in k for k in z.files)
    assert "smooth sensitivity" not in capsys.readouterr().out
    assert main(args + ["--method", "brace", "--out", str(out), "--diagnostics",
                        "--overwrite"]) == 0
    text = capsys.readouterr().out
    if load_result(out).params["release"] == "count":  # its noise scale is public
        assert "diagnostics (public: set by the released noisy counts)" in text
        assert "proposed sensitivity b_t" in text and "smooth sensitivity" not in text
    else:
        assert "diagnostics (data-dependent, NOT covered by epsilon)" in text
    with np.load(out) as z:
        assert z["diagnostic_not_private_smooth_sensitivity"].shape == (3, 3)
    capsys.readouterr()
    assert main(args + ["--method", "naive", "--out", str(tmp / "n.npz")]) == 0
    err = capsys.readouterr().err
    assert "NOT differentially private" in err
    with np.load(tmp / "n.npz") as z:
        assert not bool(z["is_private"])


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--radius", "0.8", "--steps", "0", "--method", "none"], "steps must be >= 1"),
        (["--radius", "-1", "--steps", "2", "--method", "none"], "radius must be > 0"),
        (["--radius", "0.8", "--steps", "2", "--method", "brace"], "--epsilon is required"),
        (["--radius", "0.8", "--steps", "2", "--method", "brace", "--epsilon", "0"],
         "epsilon must be > 0"),
    ],
)
def test_retrieve_errors_one_line_no_output(files, capsys, extra, match):
    tmp, X, q = files
    out = tmp / "o.npz"
    rc = main(["retrieve", "--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q.npy"),
               "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("brace: error:") and match in err[0]
    assert not out.exists()


def test_retrieve_bad_files(files, capsys):
    tmp, X, q = files
    (tmp / "corrupt.npy").write_bytes(b"not numpy")
    np.save(tmp / "q3.npy", np.zeros((2, 3)))
    cases = [
        (["--bank", str(tmp / "missing.npy")], "bank file not found"),
        (["--bank", str(tmp / "corrupt.npy")], "is not a .npy or .npz file"),
        (["--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q3.npy")],
         "dimension mismatch"),
    ]
    for extra, match in cases:
        rc = main(["retrieve", "--queries", str(tmp / "q.npy"), *extra, "--radius", "1",
                   "--steps", "1", "--out", str(tmp / "x.npz"), "--method", "none"])
        assert rc == 2
        assert match in capsys.readouterr().err
    assert not (tmp / "x.npz").exists()
    rc = main(["retrieve", "--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q.npy"),
               "--radius", "1", "--steps", "1", "--out", str(tmp / "nodir" / "x.npz"),
               "--method", "none"])
    assert rc == 2
    assert "output directory does not exist" in capsys.readouterr().err


def test_account_text_and_json(capsys):
    assert main(["account", "--epsilon", "128", "--delta", "1e-5", "--steps", "5", "--dim", "2",
                 "--gamma", "0.05", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rho_per_step"] == pytest.approx(13.89, rel=0.02)
    # the default release chooses from the bank's size: --n is needed, and then it works
    assert main(["account", "--epsilon", "8", "--delta", "1e-5", "--steps", "2", "--dim", "2"]) == 2
    assert "--n (the bank's number of memories, public) is required" in capsys.readouterr().err
    assert main(["account", "--epsilon", "8", "--steps", "2", "--dim", "2", "--n", "500"]) == 0
    assert "rho per step" in capsys.readouterr().out
    assert main(["account", "--epsilon", "8", "--delta", "2", "--steps", "2", "--dim", "2"]) == 2
    assert "delta must lie in (0, 1)" in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--bank", "b.npy"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "required" in err[0]
    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--bank", "b", "--queries", "q", "--radius", "nan", "--steps", "1",
              "--out", "o"])
    assert e.value.code == 2
    assert "NaN" in capsys.readouterr().err


def test_synthetic_experiment_quick(tmp_path, capsys):
    out = tmp_path / "syn"
    rc = main(["experiment", "synthetic", "--out", str(out), "--replications", "20",
               "--candidates", "10", "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "naive (NOT DP)" in text
    for f in ("summary.json", "table.txt", "fig1_trajectories.png", "fig1_errors.png"):
        assert (out / f).stat().st_size > 0
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["replications"] == 20 and "numpy" in s["versions"]
    labels = {r["label"]: r for r in s["summary"]}
    assert labels["naive (NOT DP)"]["private"] is False
    assert all(r["private"] for k, r in labels.items() if k != "naive (NOT DP)")
    assert len(s["highlighted_run"]["table"]) == 5
    # squared errors: the interval of the mean never goes below 0
    assert all(0 <= r["lo"] <= r["mean"] <= r["hi"] for r in s["summary"])
    assert not list(out.glob(".*.tmp"))


def test_synthetic_experiment_gamma_is_recorded_and_used(tmp_path, capsys):
    out = tmp_path / "syn"
    rc = main(["experiment", "synthetic", "--out", str(out), "--replications", "4",
               "--candidates", "2", "--gamma", "0.5", "--no-progress"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["gamma"] == 0.5
    assert all(r["gamma"] == 0.5 for r in s["summary"] if r["method"] == "brace")
    with pytest.raises(SystemExit):
        main(["experiment", "synthetic", "--gamma", "nan"])
    assert "NaN" in capsys.readouterr().err


def test_synthetic_noiseless_deterministic_and_shared_noise(tmp_path):
    from brace.experiments.synthetic import SyntheticConfig, run_synthetic

    cfg = SyntheticConfig(replications=4, candidates=6)
    a = run_synthetic(cfg, None, progress=False)
    b = run_synthetic(cfg, None, progress=False)
    ha, hb = a["highlighted_run"], b["highlighted_run"]
    assert ha["trajectories"]["noiseless"] == hb["trajectories"]["noiseless"]
    assert ha["table"] == hb["table"]
    # shared noise: naive and BRACE see the same innovation, so their first release
    # differs only by the noise scale (same pre-noise point Φ_D(q) at step 1)
    X = sample_mixture(cfg.n, seed=cfg.data_seed)
    q = np.array(ha["query"])
    z1 = LSRMemory(X, radius=cfg.radius).step(q)
    yn = np.array(ha["trajectories"]["naive"][1]) - z1
    yb = np.array(ha["trajectories"]["brace"][1]) - z1
    cos = yn @ yb / (np.linalg.norm(yn) * np.linalg.norm(yb))
    assert cos == pytest.approx(1.0, abs=1e-9)
