"""The synthetic banks of ``brace.datasets``: the many-cluster high-d generator."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from brace.datasets import ClusterSpec, sample_clusters


def test_shapes_dtypes_and_labels():
    X, y, C = sample_clusters(5000, 64, 120, seed=0, return_centres=True)
    assert X.shape == (5000, 64) and X.dtype == np.float64
    assert y.shape == (5000,) and y.dtype == np.int64
    assert C.shape == (120, 64)
    assert y.min() >= 0 and y.max() < 120
    assert np.all(np.abs(X) <= 1.0)  # clipped into the public box
    assert np.all(np.abs(C) <= 0.8)  # centres inside the margin
    X32, y32 = sample_clusters(5000, 64, 120, seed=0, dtype=np.float32)
    assert X32.dtype == np.float32
    np.testing.assert_array_equal(y32, y)
    np.testing.assert_allclose(X32, X, atol=1e-6)  # same draws, rounded


def test_seeded():
    a = sample_clusters(40_000, 8, 10, seed=3)
    b = sample_clusters(40_000, 8, 10, seed=np.random.default_rng(3))
    c = sample_clusters(40_000, 8, 10, seed=4)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    # the centres are drawn before anything that depends on n
    small = sample_clusters(100, 8, 10, seed=3, return_centres=True)
    big = sample_clusters(40_000, 8, 10, seed=3, return_centres=True)
    np.testing.assert_array_equal(small[2], big[2])  # centres drawn first


def test_zipf_sizes_are_unequal():
    k = 100
    _, y = sample_clusters(200_000, 2, k, seed=1)
    counts = np.bincount(y, minlength=k)
    w = 1.0 / np.arange(1, k + 1)
    w /= w.sum()
    # multinomial counts: within 5 standard deviations of n·w
    sd = np.sqrt(200_000 * w * (1 - w))
    assert np.all(np.abs(counts - 200_000 * w) < 5 * sd)
    assert counts[0] > 50 * counts[-1]
    _, ye = sample_clusters(50_000, 2, 10, weights="equal", seed=1)
    assert np.bincount(ye).min() > 4500
    _, yd = sample_clusters(50_000, 2, 10, weights="dirichlet", dirichlet_alpha=0.5, seed=1)
    assert yd.max() < 10


def test_heavy_tails_and_gaussian_limit():
    """Student-t with 3 degrees of freedom: the row norms around the centre have a far
    heavier upper tail than the Gaussian's (df = inf)."""
    kw = dict(n=20_000, d=64, k=1, spread=0.01, clip=False, seed=2, return_centres=True)
    Xt, _, C = sample_clusters(**kw)
    Xg, _, Cg = sample_clusters(**{**kw, "df": np.inf})
    rt = np.linalg.norm(Xt - C[0], axis=1) / (0.01 * 8.0)  # / (spread · sqrt(d))
    rg = np.linalg.norm(Xg - Cg[0], axis=1) / (0.01 * 8.0)
    assert abs(np.median(rg) - 1.0) < 0.02
    assert np.quantile(rg, 0.999) < 1.5
    assert np.quantile(rt, 0.99) > 3.0  # sqrt(3 / u), u ~ χ²_3: P(> 3) ≈ 2 %
    # covariance spread² · df/(df − 2) = 3 spread² per coordinate
    assert np.var(Xt - C[0]) == pytest.approx(3e-4, rel=0.25)


def test_spec_is_frozen_and_recordable():
    spec = ClusterSpec(n=10, d=4, k=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n = 11  # type: ignore[misc]
    rec = json.loads(json.dumps(spec.to_dict()))
    assert rec["weights"] == "zipf" and rec["df"] == 3.0 and rec["dtype"] == "float64"
    assert spec.bounds == (-1.0, 1.0)
    assert ClusterSpec(n=10, d=4, k=3, dtype=np.float32).dtype == "float32"


@pytest.mark.parametrize("kw, exc, msg", [
    (dict(n=0), ValueError, "n must be >= 1"),
    (dict(d=2.5), TypeError, "d must be an integer"),
    (dict(k=0), ValueError, "k must be >= 1"),
    (dict(weights="pareto"), ValueError, "weights must be one of"),
    (dict(df=0.0), ValueError, "df must be > 0"),
    (dict(spread=-1.0), ValueError, "spread must be > 0"),
    (dict(box=np.inf), ValueError, "box must be finite"),
    (dict(centre_margin=1.0), ValueError, "centre_margin"),
    (dict(dtype=np.float16), ValueError, "dtype must be float64 or float32"),
    (dict(clip="yes"), TypeError, "clip must be True or False"),
    (dict(n=10**9, d=128), ValueError, "GiB"),
    (dict(seed=-1), ValueError, "seed"),
])
def test_bad_input(kw, exc, msg):
    args = dict(n=10, d=4, k=3)
    args.update(kw)
    with pytest.raises(exc, match=msg):
        sample_clusters(args.pop("n"), args.pop("d"), args.pop("k"), **args)
