"""The real-data completion experiment: data layer (public/private splits, public-only
preprocessing, corruption, radius), config checks, a tiny end-to-end run, resume."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")

from brace.experiments import real_data as rd  # noqa: E402
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
