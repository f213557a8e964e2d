"""The real-data completion experiment: data layer (public/private splits, public-only
preprocessing, corruption, radius), config checks, a tiny end-to-end run, resume."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("sklearn")

from brace.experiments import real as rx  # noqa: E402
from brace.experiments import real_config as rc  # noqa: E402
from brace.experiments import real_data as rd  # noqa: E402
from brace.experiments._common import read_jsonl  # noqa: E402
from brace.experiments.real import QUICK, RealConfig, run_real  # noqa: E402
from brace.experiments.real_data import corrupt, load_real, public_radius  # noqa: E402

# --------------------------------------------------------------------------- data layer


@pytest.mark.parametrize(("name", "n_bank", "n_public", "d", "n_classes"), [
    ("breast_cancer", 419, 150, 30, 2),
    ("digits", 1397, 400, 64, 10),
])
def test_sklearn_sets_shapes_and_splits(name, n_bank, n_public, d, n_classes):
    D = load_real(name, seed=0)
    assert D.bank.shape == (n_bank, d) and D.public.shape == (n_public, d)
    assert D.bank.dtype == np.float64 and D.public.dtype == np.float64
    assert D.bank_labels.shape == (n_bank,) and D.public_labels.shape == (n_public,)
    assert set(np.unique(D.public_labels)) == set(range(n_classes))  # stratified
    assert not D.bank.flags.writeable and not D.public.flags.writeable
    assert "PUBLIC" in D.scale_note or "public" in D.scale_note
    # disjoint: no public row equals a bank row (the raw sets hold no duplicates across)
    rows_b = {r.tobytes() for r in np.asarray(D.bank)}
    assert not any(r.tobytes() in rows_b for r in np.asarray(D.public))
    # together they are the whole data set
    assert len(rows_b | {r.tobytes() for r in np.asarray(D.public)}) == n_bank + n_public


def test_split_is_seeded():
    a, b, c = (load_real("digits", seed=s) for s in (3, 3, 4))
    np.testing.assert_array_equal(a.bank, b.bank)
    assert not np.array_equal(a.bank, c.bank)
    g = np.random.default_rng(3)
    np.testing.assert_array_equal(load_real("digits", seed=g).public,
                                  load_real("digits", seed=np.random.default_rng(3)).public)


def test_breast_cancer_standardised_with_public_constants_only():
    D = load_real("breast_cancer", seed=1)
    np.testing.assert_allclose(D.public.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(D.public.std(axis=0), 1.0, rtol=1e-12)
    assert np.abs(D.bank.mean(axis=0)).max() > 1e-3  # the bank is not what was centred
    assert D.feature_scale == pytest.approx(1.0)


def test_changing_a_bank_row_changes_neither_scaling_nor_radius(monkeypatch):
    from sklearn import datasets

    X, y = datasets.load_breast_cancer(return_X_y=True)
    D0 = load_real("breast_cancer", seed=5)
    bank_idx, pub_idx = rd._stratified_split(np.asarray(y, np.int64), 150,
                                             np.random.default_rng(5))
    X2 = X.copy()
    X2[bank_idx[0]] = 1e6  # replace one bank row by an outlier
    monkeypatch.setattr(datasets, "load_breast_cancer", lambda return_X_y: (X2, y))
    D1 = load_real("breast_cancer", seed=5)
    np.testing.assert_array_equal(D0.public, D1.public)  # same constants, same rows
    assert not np.array_equal(D0.bank, D1.bank)
    np.testing.assert_array_equal(np.delete(D0.bank, 0, 0), np.delete(D1.bank, 0, 0))
    r0 = public_radius(D0.public, n_bank=419)
    assert public_radius(D1.public, n_bank=419) == r0


def test_digits_scaled_by_public_range():
    D = load_real("digits", seed=0)
    assert D.bank.min() >= 0 and D.bank.max() <= 1 and D.public.max() <= 1
    assert np.all(np.isin(np.round(D.bank * 16, 9), np.arange(17)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist16", "mnist64"])
def test_mnist_pca_fitted_on_a_disjoint_public_part(name, mnist_dir):
    D = load_real(name, seed=0, data_dir=mnist_dir)
    d = int(name[5:])
    assert D.bank.shape == (5000, d) and D.public.shape == (3000, d)
    assert 0 < D.extra["pca_explained_variance"] < 1
    assert "disjoint" in D.scale_note
    assert load_real("mnist", dim=d, seed=0, data_dir=mnist_dir).bank.shape == (5000, d)


@pytest.mark.slow
def test_mnist784_7k_bank_takes_the_unused_images(mnist_dir):
    D = load_real("mnist784_7k", seed=0, data_dir=mnist_dir)
    assert D.bank.shape == (7000, 784) and D.public.shape == (3000, 784)
    rows = {r.tobytes() for r in np.asarray(D.bank)}
    assert not any(r.tobytes() in rows for r in np.asarray(D.public))  # disjoint
    with pytest.raises(ValueError, match="contradicts"):
        load_real("mnist784_7k", seed=0, dim=64)


def test_bad_names_and_dims():
    with pytest.raises(ValueError, match="unknown data set"):
        load_real("iris", seed=0)
    with pytest.raises(ValueError, match="dim"):
        load_real("digits", seed=0, dim=8)
    with pytest.raises(ValueError, match="needs dim"):
        load_real("mnist", seed=0)
    with pytest.raises(ValueError, match="contradicts"):
        load_real("mnist16", seed=0, dim=64)


def test_mnist_missing_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("BRACE_MNIST_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        load_real("mnist16", seed=0, data_dir=tmp_path)


def test_corrupt_masks_the_stated_fraction_with_the_fill_value():
    X = np.random.default_rng(0).normal(size=(50, 20)) + 5.0  # no zeros by chance
    q = corrupt(X, noise=0.0, mask=0.25, rng=1)
    zeros = q == rd.FILL_VALUE
    assert np.all(zeros.sum(axis=1) == 5)
    np.testing.assert_array_equal(q[~zeros], X[~zeros])  # no noise: the rest unchanged
    assert len({tuple(np.flatnonzero(z)) for z in zeros}) > 1  # chosen per record
    np.testing.assert_array_equal(corrupt(X, noise=0.0, mask=0.0, rng=1), X)


def test_corrupt_noise_has_the_stated_std():
    X = np.zeros((4000, 10))
    q = corrupt(X, noise=0.5, mask=0.0, rng=2)
    assert q.std() == pytest.approx(0.5, rel=0.02)
    np.testing.assert_array_equal(q, corrupt(X, noise=0.5, mask=0.0, rng=2))
    assert np.all(corrupt(X + 1, noise=0.5, mask=1.0, rng=2) == 0.0)


@pytest.mark.parametrize(("kw", "match"), [
    ({"noise": -1.0, "mask": 0.0}, "noise"),
    ({"noise": 0.1, "mask": 1.5}, "mask"),
    ({"noise": float("nan"), "mask": 0.0}, "noise"),
])
def test_corrupt_rejects_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        corrupt(np.zeros((2, 3)), rng=0, **kw)


def test_public_radius_targets_the_gate_size():
    P = np.random.default_rng(0).normal(size=(400, 3))
    bank = np.random.default_rng(1).normal(size=(2000, 3))
    r = public_radius(P, n_bank=2000, target_gate=50)
    sq = ((P[:, None, :] - bank[None]) ** 2).sum(-1)
    median_gate = np.median((sq <= r * r).sum(axis=1))
    assert 35 <= median_gate <= 70
    assert public_radius(P, n_bank=2000, target_gate=200) > r
    with pytest.raises(ValueError, match="target_gate"):
        public_radius(P, target_gate=0.5)
    with pytest.raises(ValueError, match="queries"):
        public_radius(P, queries=np.zeros((3, 4)))


# --------------------------------------------------------------------------- experiment

TINY = dataclasses.replace(QUICK, datasets=("breast_cancer",), workloads=(8,),
                           epsilons=(1.0,), min_scored=8)
OUTPUTS = ("results.jsonl", "summary.json", "table.txt", "accuracy.png", "mse.png")


@pytest.mark.parametrize(("field", "value", "match"), [
    ("datasets", (), "datasets"),
    ("datasets", ("iris",), "unknown data set"),
    ("datasets", ("digits", "digits"), "duplicates"),
    ("workloads", (0,), "workloads"),
    ("epsilons", (-1.0,), "epsilons"),
    ("epsilons", (float("inf"),), "epsilons"),
    ("methods", ("naive",), "unknown method"),
    ("settings", ("public",), "unknown setting"),
    ("settings", (), "settings"),
    ("delta", 1.5, "delta"),
    ("steps", 0, "steps"),
    ("repetitions", 0, "repetitions"),
    ("mask", 1.0, "mask"),
    ("noise", -0.1, "noise"),
    ("target_gate", 0.5, "target_gate"),
    ("n_seeds", 0, "n_seeds"),
])
def test_config_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(RealConfig(), **{field: value})


def test_run_rejects_a_non_config(tmp_path):
    with pytest.raises(TypeError, match="RealConfig"):
        run_real({"datasets": ("digits",)}, tmp_path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real")
    return {"out": out, "summary": run_real(TINY, out, progress=False)}


@pytest.mark.slow
def test_tiny_run_writes_every_output(tiny_run):
    out, s = tiny_run["out"], tiny_run["summary"]
    for f in OUTPUTS:
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    for f in OUTPUTS[3:]:
        assert (out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)  # no temp files left
    recs = read_jsonl(out / "results.jsonl")
    grid = rx._grid(TINY, TINY.datasets)
    assert len(recs) == len(grid) == s["cells_total"] == s["cells_computed_this_run"]
    assert {rx._key(r) for r in recs} == set(grid)
    assert json.loads((out / "summary.json").read_text())["run_hash"] == s["run_hash"]
    assert "| breast_cancer | 8 | BRACE, global acct. |" in (out / "table.txt").read_text()


@pytest.mark.slow
def test_tiny_run_records_are_consistent(tiny_run):
    recs = {rx._key(r): r for r in read_jsonl(tiny_run["out"] / "results.jsonl")}
    for (_, _setting, _Q, eps, m), r in recs.items():
        assert 0.0 <= r["accuracy"]["mean"] <= 1.0
        assert r["config"]["datasets"] == ["breast_cancer"] and "versions" in r
        assert r["wall_time_s"] >= 0 and len(r["repetitions"]) == TINY.repetitions
        assert r["queries_scored"] >= TINY.min_scored
        if m == "noiseless":
            assert r["mse"]["mean"] == 0.0 and not r["private"]
        if m in rc.PER_QUERY:
            assert 0.0 <= r["epsilon_per_query"] <= eps
            assert r["epsilon_spent"] <= eps * (1 + 1e-9)
        if m == "synopsis":
            assert 0.8 * eps <= r["epsilon_spent"] <= eps * (1 + 1e-9)  # what is left, once
    # the synopsis answers every workload from one release per (ε, repetition)
    for eps in TINY.epsilons:
        spent = {recs[("breast_cancer", "split", Q, eps, "synopsis")]["epsilon_spent"]
                 for Q in TINY.workloads}
        assert len(spent) == 1
    # global accounting never affords more than local on the same queries
    for Q in TINY.workloads:
        for eps in TINY.epsilons:
            g = recs[("breast_cancer", "split", Q, eps, "brace_global")]["epsilon_per_query"]
            loc = recs[("breast_cancer", "split", Q, eps, "brace_local")]["epsilon_per_query"]
            assert g <= loc * (1 + 1e-9)


@pytest.mark.slow
def test_resume_skips_done_cells_and_recomputes_the_same(tiny_run, tmp_path):
    out = tmp_path / "again"
    out.mkdir()
    lines = (tiny_run["out"] / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[:-1]))  # the last cell is missing
    s = run_real(TINY, out, progress=False)
    assert s["cells_computed_this_run"] == 1
    redo = read_jsonl(out / "results.jsonl")
    assert len(redo) == len(lines)
    old, new = json.loads(lines[-1]), redo[-1]
    assert rx._key(old) == rx._key(new)
    assert new["accuracy"] == old["accuracy"] and new["mse"] == old["mse"]
    s2 = run_real(TINY, out, progress=False)
    assert s2["cells_computed_this_run"] == 0


@pytest.mark.slow
def test_results_of_another_config_are_refused(tiny_run, tmp_path):
    (tmp_path / "results.jsonl").write_text(
        (tiny_run["out"] / "results.jsonl").read_text())
    with pytest.raises(ValueError, match="different configuration"):
        run_real(dataclasses.replace(TINY, noise=0.7), tmp_path, progress=False)


def test_an_interrupted_run_leaves_whole_lines_only(tmp_path, monkeypatch):
    real_cell, calls = rx._cell, []

    def flaky(*a, **k):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real_cell(*a, **k)

    monkeypatch.setattr(rx, "_cell", flaky)
    cfg = dataclasses.replace(TINY, methods=("noiseless", "public_only", "synopsis"))
    with pytest.raises(KeyboardInterrupt):
        run_real(cfg, tmp_path, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]
    assert len(read_jsonl(tmp_path / "results.jsonl")) == 2


def test_missing_mnist_is_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("BRACE_MNIST_DIR", raising=False)
    cfg = dataclasses.replace(TINY, datasets=("breast_cancer", "mnist16"), workloads=(10,),
                              methods=("noiseless",))
    s = run_real(cfg, tmp_path, progress=False)
    assert list(s["datasets"]) == ["breast_cancer"] and list(s["skipped"]) == ["mnist16"]
    assert "mnist16 skipped" in capsys.readouterr().err
    only = dataclasses.replace(cfg, datasets=("mnist64",))
    with pytest.raises(FileNotFoundError, match="no data set"):
        run_real(only, tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_cli_real(tmp_path, capsys):
    from brace.cli import main

    out = tmp_path / "cli"
    argv = ["experiment", "real", "--quick", "--datasets", "breast_cancer", "--out",
            str(out), "--no-progress", "--repetitions", "1", "--workloads", "10",
            "--epsilons", "1"]
    assert main(argv) == 0
    assert (out / "table.txt").is_file()
    assert main(argv) == 0  # resumes: nothing new
    assert "0 new" in capsys.readouterr().out
    assert main(["experiment", "real", "--quick", "--datasets", "breast_cancer", "--out",
                 str(tmp_path / "bad"), "--repetitions", "0", "--no-progress"]) == 2
    assert "repetitions" in capsys.readouterr().err


def test_settings_without_public_data(tmp_path):
    """The public-data settings on digits: every cell of the grid is computed; the
    synopsis without public data is one release per (ε, repetition) whatever the setting
    (it reads no public data); "none" has no public-seeded synopsis and its floor is the
    query itself; per-query methods in "none" pay for their private radius."""
    cfg = dataclasses.replace(TINY, datasets=("digits",), settings=("none", "sample",
                                                                    "shifted"),
                              methods=("brace_global", "synopsis", "synopsis_private",
                                       "synopsis_private_pca", "public_only"),
                              repetitions=1, min_scored=10, workloads=(10,))
    s = run_real(cfg, tmp_path, progress=False)
    recs = {rx._key(r): r for r in read_jsonl(tmp_path / "results.jsonl")}
    assert len(recs) == len(rx._grid(cfg, ("digits",))) == s["cells_total"]
    assert ("digits", "none", 10, 1.0, "synopsis") not in recs
    priv = {recs[("digits", st, 10, 1.0, "synopsis_private")]["accuracy"]["mean"]
            for st in cfg.settings}
    assert len(priv) == 1
    pca = [recs[("digits", st, 10, 1.0, "synopsis_private_pca")] for st in cfg.settings]
    assert len({r["accuracy"]["mean"] for r in pca}) == 1  # one release, every setting
    assert 1 <= pca[0]["projected_dim"] <= 32
    g = recs[("digits", "none", 10, 1.0, "brace_global")]
    assert g["repetitions"][0]["scale_epsilon"] > 0 and g["epsilon_spent"] <= 1.0 + 1e-9
    assert recs[("digits", "sample", 10, None, "public_only")]["n_public"] == rc.SAMPLE_SIZE
    text = (tmp_path / "table.txt").read_text()
    assert "Private beats public-only" in text and "| digits | none | 10 |" in text
    assert "private PCA" in text
    assert (tmp_path / "settings.png").is_file()


def test_global_noise_outside_the_split_is_priced_as_global(tmp_path):
    """Outside "split", a global-accounting cell of method "global" prices ε with
    ``affordable_epsilon(method="global")`` (``recommend`` prices a brace release, which
    over-asks for global noise and was refused): the cell runs and stays in budget."""
    cfg = dataclasses.replace(TINY, datasets=("digits",), settings=("sample",),
                              methods=("global_noise",), repetitions=1, min_scored=10,
                              workloads=(10,))
    run_real(cfg, tmp_path, progress=False)
    (rec,) = read_jsonl(tmp_path / "results.jsonl")
    assert rec["method"] == "global_noise" and rec["setting"] == "sample"
    assert rec["repetitions"][0]["refused"] == 0
    assert 0.0 < rec["epsilon_spent"] <= 1.0 + 1e-9
