"""brace retrieve: safe defaults, output checks, --ledger; brace ledger show."""

from __future__ import annotations

import json

import numpy as np
import pytest

from brace import LSRMemory, NoiselessResult, PrivateRetrievalResult, load_result
from brace.budget import inspect_ledger as read_ledger
from brace.cli import main


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    q = X[:3] + 0.05
    np.save(tmp_path / "bank.npy", X)
    np.save(tmp_path / "q.npy", q)
    return tmp_path, X, q


def base(tmp, out="r.npz", *extra):
    return ["retrieve", "--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q.npy"),
            "--radius", "0.8", "--steps", "3", "--out", str(tmp / out), *extra]


def test_retrieve_without_method_is_private_or_refused(files, capsys):
    tmp, X, q = files
    rc = main(base(tmp))
    err = capsys.readouterr().err
    assert rc == 2 and "--epsilon is required" in err and "--method none" in err
    assert not (tmp / "r.npz").exists()
    rc = main(base(tmp, "r.npz", "--epsilon", "4", "--seed", "0"))
    out = capsys.readouterr().out
    assert rc == 0
    res = load_result(tmp / "r.npz")
    assert isinstance(res, PrivateRetrievalResult)
    assert res.method == "brace" and res.is_private and res.privacy.epsilon == 4
    assert "all 3 queries composed" in out


def test_method_none_writes_the_labelled_noiseless_trajectory(files, capsys):
    tmp, X, q = files
    rc = main(base(tmp, "n.npz", "--method", "none"))
    cap = capsys.readouterr()
    assert rc == 0 and "WARNING" in cap.err and "NOT differentially private" in cap.err
    res = load_result(tmp / "n.npz")
    assert isinstance(res, NoiselessResult) and not res.is_private
    np.testing.assert_array_equal(res.outputs, LSRMemory(X, radius=0.8).retrieve(q, 3)[:, 1:])
    with np.load(tmp / "n.npz") as z:
        assert "NOT differentially private" in str(z["warning"])
        assert not bool(z["is_private"])


@pytest.mark.parametrize("which", ["bank", "q"])
def test_output_equal_to_an_input_is_refused(files, capsys, which):
    tmp, X, q = files
    before = (tmp / f"{which}.npy").read_bytes()
    argv = base(tmp, "x.npz", "--epsilon", "4", "--overwrite")
    argv[argv.index("--out") + 1] = str(tmp / f"{which}.npy")
    assert main(argv) == 2
    assert "would destroy an input" in capsys.readouterr().err
    assert (tmp / f"{which}.npy").read_bytes() == before


def test_existing_output_needs_overwrite(files, capsys):
    tmp, X, q = files
    (tmp / "r.npz").write_bytes(b"keep me")
    assert main(base(tmp, "r.npz", "--epsilon", "4")) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (tmp / "r.npz").read_bytes() == b"keep me"
    assert main(base(tmp, "r.npz", "--epsilon", "4", "--overwrite", "--seed", "1")) == 0
    assert load_result(tmp / "r.npz").is_private


def test_json_output_and_csv_bank(files, capsys):
    tmp, X, q = files
    np.savetxt(tmp / "bank.csv", X, delimiter=",")
    argv = base(tmp, "r.json", "--epsilon", "4", "--seed", "2", "--method", "global")
    argv[argv.index("--bank") + 1] = str(tmp / "bank.csv")
    assert main(argv) == 0
    doc = json.loads((tmp / "r.json").read_text())
    assert doc["method"] == "global" and doc["is_private"] is True
    assert load_result(tmp / "r.json").outputs.shape == (3, 3, 2)


def _init(tmp, led, budget="6", delta="1e-5"):
    return main(["ledger", "init", str(led), "--bank", str(tmp / "bank.npy"), "--radius",
                 "0.8", "--budget", budget, "--budget-delta", delta])


def test_retrieve_through_a_ledger(files, capsys):
    tmp, X, q = files
    led = tmp / "ledger.db"
    # a ledger is never created implicitly: a missing one is an error naming the path
    argv = [*base(tmp, "a.npz", "--epsilon", "1", "--delta", "1e-6", "--seed", "0"),
            "--ledger", str(led)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(led) in err and "brace ledger init" in err and not led.exists()
    assert _init(tmp, led) == 0
    assert "created ledger" in capsys.readouterr().out
    assert _init(tmp, led) == 2 and "already exists" in capsys.readouterr().err
    assert main(argv) == 0
    out = capsys.readouterr().out
    state = read_ledger(led)
    assert len(state.releases) == 1 and f"{state.spent_local:.6g}" in out
    assert "remaining" in out
    # the same call again is a free repeat; --fresh pays
    assert main([*argv[:-2], "--out", str(tmp / "a2.npz"), "--ledger", str(led)]) == 0
    capsys.readouterr()
    assert len(read_ledger(led).releases) == 1
    np.testing.assert_array_equal(load_result(tmp / "a.npz").outputs,
                                  load_result(tmp / "a2.npz").outputs)
    argv2 = [*base(tmp, "b.npz", "--epsilon", "1", "--delta", "1e-6", "--seed", "1"),
             "--ledger", str(led), "--fresh"]
    assert main(argv2) == 0
    capsys.readouterr()
    assert len(read_ledger(led).releases) == 2
    # over the budget: refused, nothing written, nothing spent
    argv3 = [*base(tmp, "c.npz", "--epsilon", "5", "--delta", "1e-6"), "--ledger", str(led)]
    assert main(argv3) == 2
    err = capsys.readouterr().err
    assert "past what the filter admits" in err and "remaining" in err
    assert not (tmp / "c.npz").exists() and len(read_ledger(led).releases) == 2
    # the show command: releases, totals under both accountings, what is left
    assert main(["ledger", "show", str(led)]) == 0
    shown = capsys.readouterr().out
    st = read_ledger(led)
    assert st.fingerprint["sha256"] in shown and f"{st.spent_local:.6g}" in shown
    assert f"{st.spent_global:.6g}" in shown
    assert f"{st.remaining:.6g}" in shown and shown.count("method=brace") == 2
    assert main(["ledger", "show", str(led), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["spent_local_epsilon"] == st.spent_local and len(doc["releases"]) == 2
    # global accounting charges more for the same history
    assert st.spent_local <= st.spent_global


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--method", "naive", "--epsilon", "1"], "NOT differentially private"),
        (["--method", "none"], "--method none"),
        (["--epsilon", "1", "--diagnostics"], "--diagnostics"),
    ],
)
def test_ledger_refusals(files, capsys, extra, match):
    tmp, X, q = files
    led = tmp / "ledger.db"
    assert _init(tmp, led) == 0
    assert main([*base(tmp, "r.npz", *extra), "--ledger", str(led)]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp / "r.npz").exists()


def test_ledger_path_errors(files, capsys):
    tmp, X, q = files
    assert main([*base(tmp, "r.npz", "--epsilon", "1"), "--ledger", str(tmp)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert _init(tmp, tmp / "no" / "such" / "l.db") == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp / "no").exists()
    assert main(base(tmp, "r.npz", "--epsilon", "1", "--fresh")) == 2
    assert "--fresh needs --ledger" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "match"), [
    (["ledger", "show", "l.db", "--last", "-1"], "--last: must be >= 0: '-1'"),
    (["ledger", "show", "l.db", "--last", "2.5"], "not a whole number: '2.5'"),
    (["serve", "--workers", "0"], "--workers: must be >= 1: '0'"),
    (["serve", "--max-body", "x"], "--max-body: not a whole number: 'x'"),
])
def test_counts_are_whole_numbers_with_one_clear_line(capsys, argv, match):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_ledger_show_of_a_saved_release(files, capsys):
    tmp, X, q = files
    led = tmp / "ledger.db"
    assert _init(tmp, led, budget="3") == 0
    assert main([*base(tmp, "a.npz", "--epsilon", "1", "--seed", "0"), "--ledger",
                 str(led)]) == 0
    assert main(base(tmp, "b.npz", "--epsilon", "2", "--seed", "1", "--method", "global")) == 0
    capsys.readouterr()
    assert main(["ledger", "show", str(tmp / "b.npz"), "--ledger", str(led), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    res = load_result(tmp / "b.npz")
    assert doc["epsilon_total"] == res.privacy.epsilon_total
    assert doc["ledger"]["spent_local"] == read_ledger(led).spent_local
    assert len(read_ledger(led).releases) == 1  # read only
    assert main(base(tmp, "n.npz", "--method", "none")) == 0
    capsys.readouterr()
    assert main(["ledger", "show", str(tmp / "n.npz")]) == 0
    assert "NOT differentially private" in capsys.readouterr().out


def test_count_release_composition_is_stated_where_finite(files, capsys):
    """Issue reproducer: a count release of two or more queries printed '(inf, δ)'."""
    tmp, X, q = files
    assert main(base(tmp, "c.npz", "--epsilon", "1", "--seed", "0", "--release-mode",
                     "count")) == 0
    capsys.readouterr()
    assert main(["ledger", "show", str(tmp / "c.npz")]) == 0
    out = capsys.readouterr().out
    assert "eps = inf" not in out and "(inf" not in out
    assert "the deltas add" in out


def test_ledger_backup_copies_a_ledger_in_use(files, capsys):
    """``brace ledger backup``: a consistent copy while a PrivateMemory holds the ledger
    (the WAL not yet checkpointed), verified; an existing target is refused."""
    from brace import PrivateMemory

    tmp, X, q = files
    led = tmp / "ledger.db"
    assert _init(tmp, led) == 0
    pm = PrivateMemory(X, radius=0.8, budget=(6.0, 1e-5), ledger=led)
    pm.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=0)
    capsys.readouterr()
    assert main(["ledger", "backup", str(led), str(tmp / "copy.db")]) == 0
    out = capsys.readouterr().out
    assert "1 release(s), chain verified" in out and f"{pm.spent:.6g}" in out
    assert read_ledger(tmp / "copy.db").releases == read_ledger(led).releases
    assert main(["ledger", "backup", str(led), str(tmp / "copy.db")]) == 2
    assert "already exists" in capsys.readouterr().err
    pm.close()


def test_ledger_show_reports_damage(files, capsys):
    tmp, X, q = files
    (tmp / "bad.db").write_bytes(b"\x00garbage" * 20)
    assert main(["ledger", "show", str(tmp / "bad.db")]) == 2
    assert "not a brace ledger" in capsys.readouterr().err
    (tmp / "old.db").write_text('{"format": "brace-ledger/1", "releases": []}')
    assert main(["ledger", "show", str(tmp / "old.db")]) == 2
    assert "brace ledger migrate" in capsys.readouterr().err


def test_horizon_bound_and_progress(files, capsys):
    tmp, X, q = files
    assert main(base(tmp, "r.npz", "--epsilon", "1", "--steps", "100000000")) == 2
    assert "at most 10000" in capsys.readouterr().err
    assert not (tmp / "r.npz").exists()


def test_synthetic_checks_its_output_before_computing(tmp_path, capsys, monkeypatch):
    import brace.experiments.synthetic as syn

    monkeypatch.setattr(syn, "run_synthetic", lambda *a, **k: pytest.fail("computed"))
    (tmp_path / "file").write_text("x")
    assert main(["experiment", "synthetic", "--out", str(tmp_path / "file"),
                 "--no-progress"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["experiment", "synthetic", "--out", str(tmp_path / "file" / "sub"),
                 "--no-progress"]) == 2
    assert "is a file" in capsys.readouterr().err


def test_uq_accepts_a_saved_release(tmp_path, capsys):
    from brace.datasets import sample_mixture

    np.save(tmp_path / "bank.npy", sample_mixture(600, seed=0))
    np.save(tmp_path / "q.npy", np.array([[0.3, 0.1], [-0.9, 0.1]]))
    mem = ["--bank", str(tmp_path / "bank.npy"), "--radius", "0.8"]
    common = ["--kappa", "0", "--seed", "1", "--privacy", "linear"]
    rc = main(["uq", *mem, "--queries", str(tmp_path / "q.npy"), "--steps", "2",
               "--epsilon", "8", *common, "--out", str(tmp_path / "direct.json")])
    assert rc == 0
    for diag in ([], ["--diagnostics"]):
        name = f"r{len(diag)}.npz"
        assert main(["retrieve", *mem, "--queries", str(tmp_path / "q.npy"), "--steps", "2",
                     "--epsilon", "8", "--kappa", "0", "--seed", "1",
                     "--out", str(tmp_path / name), *diag]) == 0
        out = tmp_path / f"uq{len(diag)}.json"
        assert main(["uq", *mem, "--release", str(tmp_path / name), "--privacy", "linear",
                     "--seed", "1", "--out", str(out)]) == 0
        a = json.loads((tmp_path / "direct.json").read_text())["regions"]
        b = json.loads(out.read_text())["regions"]
        for t in ("bank", "population"):
            np.testing.assert_allclose(np.array(b[t]["cov"], dtype=float),
                                       np.array(a[t]["cov"], dtype=float), rtol=1e-9)
    capsys.readouterr()
    # output checked before computing; --release of the noiseless trajectory is refused
    assert main(["uq", *mem, "--release", str(tmp_path / "r0.npz"), "--out",
                 str(tmp_path / "bank.npy")]) == 2
    assert "would destroy an input" in capsys.readouterr().err
    assert main(["uq", *mem, "--release", str(tmp_path / "r0.npz"), "--out",
                 str(tmp_path / "uq0.json")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["retrieve", *mem, "--queries", str(tmp_path / "q.npy"), "--steps", "2",
                 "--method", "none", "--out", str(tmp_path / "z.npz")]) == 0
    capsys.readouterr()
    assert main(["uq", *mem, "--release", str(tmp_path / "z.npz")]) == 2
    assert "noiseless" in capsys.readouterr().err
    assert main(["uq", *mem, "--queries", str(tmp_path / "q.npy"), "--epsilon", "8"]) == 2
    assert "--steps is required" in capsys.readouterr().err


def test_audit_refuses_an_output_that_is_an_input(files, capsys):
    tmp, X, q = files
    np.save(tmp / "q1.npy", q[0])
    rc = main(["audit", "--bank", str(tmp / "bank.npy"), "--query", str(tmp / "q1.npy"),
               "--radius", "0.8", "--method", "global", "--epsilon", "1", "--steps", "1",
               "--out", str(tmp / "bank.npy"), "--no-progress"])
    assert rc == 2 and "would destroy an input" in capsys.readouterr().err


def test_long_horizons_show_progress(files, capsys):
    pytest.importorskip("tqdm")
    tmp, X, q = files
    assert main(base(tmp, "r.npz", "--method", "global", "--epsilon", "1", "--steps", "120",
                     "--seed", "0")) == 0
    err = capsys.readouterr().err
    assert "retrieve (3 queries)" in err and "120" in err
    assert main(base(tmp, "s.npz", "--method", "global", "--epsilon", "1", "--seed", "0")) == 0
    assert "retrieve (" not in capsys.readouterr().err  # short runs: no bar


def test_uq_releases_through_a_ledger_are_charged(files, capsys):
    """Issue: 'brace uq' had no --ledger, so its releases escaped the budget."""
    tmp, X, q = files
    led = tmp / "ledger.db"
    assert _init(tmp, led, budget="4") == 0
    argv = ["uq", "--bank", str(tmp / "bank.npy"), "--queries", str(tmp / "q.npy"),
            "--radius", "0.8", "--steps", "2", "--epsilon", "1", "--delta", "1e-6",
            "--n-sim", "20", "--seed", "0", "--ledger", str(led)]
    assert main(argv) == 0
    assert "spent eps" in capsys.readouterr().out
    assert len(read_ledger(led).releases) == 1
    assert main([*argv, "--epsilon", "50"]) == 2  # does not fit: refused, nothing spent
    assert "past what the filter admits" in capsys.readouterr().err
    assert len(read_ledger(led).releases) == 1
