"""Hostile inputs get a clear error that names the problem, never a raw library error or
a silently wrong answer (issue reproducers: edited saved results and synopses, absurd
arguments, a bank with no data). The ledger's own cases are in ``tests/test_ledger.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import brace
from brace import PrivateMemory, Synopsis, load_result, save_result
from brace.cli import main

X = np.random.default_rng(0).normal(size=(120, 2))


@pytest.fixture(scope="module")
def memory():
    return brace.LSRMemory(X, radius=0.8)


# --- saved results ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["brace", "global", "endpoint"])
def test_a_secure_release_with_an_edited_or_missing_grid_is_refused(memory, tmp_path, method):
    """Issue reproducer: a secure result whose grid was multiplied by 2^20, or removed,
    still loaded."""
    res = brace.private_retrieve(memory, X[:12], method=method, steps=3, epsilon=2.0,
                                 delta=1e-6, noise="secure")  # >= 24 coordinates
    for suffix in (".json", ".npz"):
        path = save_result(res, tmp_path / f"r{suffix}", overwrite=True)
        np.testing.assert_array_equal(load_result(path).grid, res.grid)
    doc = json.loads((tmp_path / "r.json").read_text())
    for edit, match in [(lambda d: d.update(grid=(np.asarray(d["grid"]) * 2**20).tolist()),
                         "grid.*(powers of two no larger than|does not match the outputs)"),
                        (lambda d: d.update(grid=(np.asarray(d["grid"]) * 2).tolist()),
                         "grid.*does not match the outputs"),  # all even: p = 2^-24
                        (lambda d: d.pop("grid"), "grid.*missing: a release with secure"),
                        (lambda d: d.update(grid=[[1.0]]), "grid.*has shape")]:
        bad = json.loads(json.dumps(doc))
        edit(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=match):
            load_result(tmp_path / "bad.json")
    with np.load(tmp_path / "r.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "grid"}
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="grid.*missing"):
        load_result(tmp_path / "bad.npz")
    plain = brace.private_retrieve(memory, X[:3], method=method, steps=3, epsilon=2.0,
                                   delta=1e-6, seed=0)
    doc = json.loads(save_result(plain, tmp_path / "p.json").read_text())
    doc["grid"] = [[2.0**-20] * plain.outputs.shape[1]] * 3  # plain: 3 queries
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="grid.*only secure noise has a grid"):
        load_result(tmp_path / "bad.json")


@pytest.mark.parametrize("what", ["outputs", "queries"])
@pytest.mark.parametrize("method", ["brace", "endpoint"])
def test_a_result_with_edited_outputs_or_queries_is_refused(memory, tmp_path, what, method):
    """Issue reproducer: a result JSON whose queries or outputs were edited (a point
    outside the projection ball) loaded."""
    res = brace.private_retrieve(memory, X[:3], method=method, steps=2, epsilon=2.0,
                                 delta=1e-6, seed=0)
    doc = json.loads(save_result(res, tmp_path / "r.json").read_text())
    a = np.asarray(doc[what])
    a[1] += 10.0  # 10 away: outside every projection ball of r = 0.8, T = 2
    doc[what] = a.tolist()
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="outside the projection ball.*edited"):
        load_result(tmp_path / "bad.json")
    # without the projection there is no ball to check (documented)
    res = brace.private_retrieve(memory, X[:3], method=method, steps=2, epsilon=2.0,
                                 delta=1e-6, seed=0, output_projection=False)
    assert load_result(save_result(res, tmp_path / "np.json")).outputs.shape[0] == 3


def test_the_headline_of_a_count_release_states_the_finite_composition(memory):
    """Issue reproducer: the headline printed "composed: (inf, 1e-05)-DP" while the
    detail gave the finite total at Q·δ."""
    res = brace.private_retrieve(memory, X[:3], method="brace", steps=3, epsilon=1.0,
                                 delta=1e-5, release="count", seed=0)
    assert res.privacy.epsilon_total == np.inf
    eps, dl = res.privacy.composed()
    head = res.summary().splitlines()[2]
    assert "(inf" not in head and f"({eps:.6g}, {dl:g})-DP" in head
    assert dl == pytest.approx(3e-5)


def test_a_tiny_epsilon_with_secure_noise_reports_the_epsilon_passed(memory):
    """Issue reproducer: private_retrieve(..., epsilon=1e-6, noise="secure") reported an
    internal value (8.99e-07) instead of the one passed."""
    res = brace.private_retrieve(memory, X[:2], method="brace", steps=3, epsilon=1e-6,
                                 delta=1e-6, noise="secure")
    assert res.privacy.epsilon == 1e-6 and res.params["noise"] == "secure"
    cnt = brace.private_retrieve(memory, X[:2], method="brace", steps=3, epsilon=1e-3,
                                 delta=1e-6, noise="secure", release="count")
    assert cnt.privacy.epsilon == 1e-3 and cnt.params["release"] == "count"
    with pytest.raises(ValueError, match=r"Found 1e-07\."):
        brace.private_retrieve(memory, X[:2], method="brace", steps=3, epsilon=1e-7,
                               delta=1e-6, noise="secure")


# --- synopses -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synopsis():
    pm = PrivateMemory(X, radius=0.8, budget=(50.0, 1e-5), accounting="global")
    return pm.snapshot(X[:6] + 0.1, steps=1, seed=0)


@pytest.mark.parametrize("edit, match", [
    (dict(epsilon=-5), "'epsilon'.*must be > 0"),
    (dict(epsilon="abc"), "'epsilon'.*real number"),
    (dict(delta=2), "'delta'.*delta must lie in"),
    (dict(counts="many"), "'counts'.*finite numbers|'counts'"),
    (dict(radius=None), "'radius'"),
    (dict(cell_rho=float("nan")), "'cell_rho'"),
    (dict(attractors=[[0.0, 0.0, 0.0]]), "counts must be 1 integers|seeds must be an"),
    (dict(params=[]), "'params' must be an object"),
])
def test_a_saved_synopsis_is_checked_field_by_field(synopsis, edit, match):
    """Issue reproducer: Synopsis.from_json accepted ε = −5, δ = 2, non-numeric fields
    (raw errors), attractors of another dimension."""
    doc = {**synopsis.to_dict(), **edit}
    with pytest.raises(ValueError, match=match):
        Synopsis.from_dict(doc)
    with pytest.raises(ValueError, match="not a saved synopsis"):
        Synopsis.from_json(json.dumps(doc))


def test_a_saved_synopsis_refuses_other_dimensions_negative_counts_and_bad_text(synopsis):
    doc = synopsis.to_dict()
    k = len(doc["counts"])
    back = Synopsis.from_json(synopsis.to_json())
    np.testing.assert_array_equal(back.attractors, synopsis.attractors)
    np.testing.assert_array_equal(back.counts, synopsis.counts)
    assert back.epsilon == synopsis.epsilon and back.seeds.shape == synopsis.seeds.shape
    three = {**doc, "attractors": [[0.0, 0.0, 0.0]] * k}
    with pytest.raises(ValueError, match="seeds must be an \\(S, 3\\) array"):
        Synopsis.from_dict(three)
    if k > 1:
        neg = {**doc, "counts": [-5] * k}
        with pytest.raises(ValueError, match="counts must be >= 0"):
            Synopsis.from_dict(neg)
        Synopsis.from_dict({**neg, "params": {**doc["params"], "keep_seeds": True}})
    with pytest.raises(ValueError, match="counts must be .* integers"):
        Synopsis.from_dict({**doc, "counts": [2.5] * k})
    for text in ("not json", '{"epsilon": NaN}', "[1, 2]"):
        with pytest.raises(ValueError, match="not a saved synopsis"):
            Synopsis.from_json(text)


def test_snapshot_and_recommend_refuse_absurd_arguments():
    """Issue reproducers: snapshot(min_count=-5) and min_count=nan (NaN silently dropped
    every cell but the largest); keep_seeds="no" and recommend(public_seeds="no") read
    as True."""
    pm = PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))
    for bad, err, match in [(dict(min_count=-5), ValueError, "min_count must be >= 0"),
                            (dict(min_count=float("nan")), ValueError, "must not be NaN"),
                            (dict(min_count="3"), TypeError, "min_count must be a real"),
                            (dict(keep_seeds="no"), TypeError, "keep_seeds must be True")]:
        with pytest.raises(err, match=match):
            pm.snapshot(X[:4], steps=1, seed=0, **bad)
    # the same checks without seeds (a negative threshold was accepted there)
    for bad, err, match in [(dict(min_count=-5), ValueError, "min_count must be >= 0"),
                            (dict(min_count=float("nan")), ValueError, "must not be NaN"),
                            (dict(min_count=float("inf")), ValueError, "must be finite"),
                            (dict(min_count="3"), TypeError, "min_count must be a real")]:
        with pytest.raises(err, match=match):
            pm.snapshot(bounds=(-3, 3), seed=0, **bad)
    # a noise mode that is not a string is refused as by every call (secure.check_noise)
    for kw in (dict(bounds=(-3, 3)), dict(seeds=X[:4])):
        with pytest.raises(TypeError, match="noise must be 'auto', 'plain' or 'secure'"):
            pm.snapshot(noise=3, seed=0, **kw)
    assert pm.spent == 0.0
    with pytest.raises(TypeError, match="public_seeds must be True or False"):
        pm.recommend(10, public_seeds="no")


# --- banks and the command line -----------------------------------------------------------


def test_a_torch_bank_on_the_meta_device_is_refused_clearly():
    """Issue reproducer: a torch bank on the ``meta`` device raised NotImplementedError
    ("Cannot copy out of meta tensor")."""
    torch = pytest.importorskip("torch")
    bank = torch.empty((50, 2), device="meta")
    for make in (lambda: PrivateMemory(bank, radius=0.8, budget=(1.0, 1e-5)),
                 lambda: brace.LSRMemory(bank, radius=0.8).retrieve(np.zeros((1, 2)), 1)):
        with pytest.raises(ValueError, match="'meta' device holds no data"):
            make()


def test_ledger_show_refuses_a_negative_last(tmp_path, capsys):
    """Issue reproducer: ``brace ledger show --last -5`` was accepted."""
    PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5), ledger=tmp_path / "l.db",
                  create=True).close()
    with pytest.raises(SystemExit) as exc:
        main(["ledger", "show", str(tmp_path / "l.db"), "--last", "-5"])
    assert exc.value.code == 2 and "must be >= 0" in capsys.readouterr().err
    assert main(["ledger", "show", str(tmp_path / "l.db"), "--last", "0"]) == 0
