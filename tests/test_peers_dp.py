"""The differentially private clustering peers of ``benchmarks/bench_real.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import peers_dp  # noqa: E402

TRUE = np.array([[-3.0, -3.0], [3.0, 3.0]])


def _two_clusters(seed: int = 0, n: int = 200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(TRUE[0], 0.5, (n, 2)), rng.normal(TRUE[1], 0.5, (n, 2))])


def _match(modes: np.ndarray) -> np.ndarray:
    """Distance from each true mode to its nearest released mode."""
    return np.linalg.norm(TRUE[:, None, :] - modes[None, :, :], axis=2).min(axis=1)


@pytest.mark.parametrize("sample_rate", [1.0, None])
def test_dp_grams_non_private_limit_recovers_both_modes(sample_rate):
    X = _two_clusters()
    modes = peers_dp.dp_grams(X, epsilon=1e5, delta=1e-5, bandwidth=0.8, n_inits=30,
                              bounds=(-6.0, 6.0), iters=10, sample_rate=sample_rate, seed=1)
    assert modes.shape == (2, 2)
    assert np.all(_match(modes) < 0.25), modes


def test_dp_grams_public_seeds_and_noise():
    X = _two_clusters()
    seeds = _two_clusters(seed=5, n=10)
    a, info = peers_dp.dp_grams(X, epsilon=0.5, delta=1e-5, bandwidth=0.8, init=seeds,
                                sample_rate=1.0, seed=0, return_info=True)
    b = peers_dp.dp_grams(X, epsilon=0.5, delta=1e-5, bandwidth=0.8, init=seeds,
                          sample_rate=1.0, seed=1)
    c = peers_dp.dp_grams(X, epsilon=0.5, delta=1e-5, bandwidth=0.8, init=seeds,
                          sample_rate=1.0, seed=0)
    assert info["points"].shape == seeds.shape
    assert info["sigma"] == pytest.approx(2.0 * info["noise_multiplier"])  # clip = 1
    assert np.array_equal(a, c)
    assert a.shape != b.shape or not np.allclose(a, b)  # the noise is there


def test_dp_grams_without_public_data():
    """Box starts from a public seed (init_seed) and the paper's private-row starts,
    which the run reports as uncharged."""
    X = _two_clusters()
    kw = dict(epsilon=1e5, delta=1e-5, bandwidth=0.8, n_inits=30, iters=10, sample_rate=1.0)
    modes, info = peers_dp.dp_grams(X, init="rows", seed=1, return_info=True, **kw)
    assert not info["seeds_charged"]
    assert modes.shape == (2, 2) and np.all(_match(modes) < 0.25), modes
    _, info = peers_dp.dp_grams(X, init="box", bounds=(-6, 6), seed=1, return_info=True, **kw)
    assert info["seeds_charged"]
    # the box starts come from init_seed alone, whatever the noise seed
    a = peers_dp.dp_grams(X, init="box", bounds=(-6, 6), seed=1, init_seed=9,
                          return_info=True, **kw)[1]["starts"]
    b = peers_dp.dp_grams(X, init="box", bounds=(-6, 6), seed=2, init_seed=9,
                          return_info=True, **kw)[1]["starts"]
    np.testing.assert_array_equal(a, b)
    assert a.shape == (30, 2) and np.all(np.abs(a) <= 6)
    with pytest.raises(ValueError, match="n_inits <= n"):
        peers_dp.dp_grams(X[:10], init="rows", **dict(kw, n_inits=11))
    with pytest.raises(ValueError, match="n_inits >= 1"):
        peers_dp.dp_grams(X, init="rows", **dict(kw, n_inits=None))


@pytest.mark.parametrize("batch", [400, 70])
@pytest.mark.parametrize("eps", [0.25, 1.0, 4.0])
def test_grams_noise_multiplier_is_tight(eps, batch):
    if batch < 400:
        pytest.importorskip("dp_accounting")
    kw = dict(delta=1e-5, iters=6, n=400, batch=batch)
    z = peers_dp.grams_noise_multiplier(eps, 1e-5, iters=6, n=400, batch=batch)
    assert peers_dp.grams_epsilon(z, **kw) <= eps
    assert peers_dp.grams_epsilon(z * 0.995, **kw) > eps


def test_grams_full_batch_matches_dp_accounting_gaussian():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting import rdp

    z, T = 3.0, 8
    acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), T))
    ours = peers_dp.grams_epsilon(z, delta=1e-5, iters=T, n=100, batch=100)
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)


def test_subsampling_amplifies():
    full = peers_dp.grams_noise_multiplier(1.0, 1e-5, iters=6, n=1000, batch=1000)
    pytest.importorskip("dp_accounting")
    sub = peers_dp.grams_noise_multiplier(1.0, 1e-5, iters=6, n=1000, batch=100)
    assert sub < full


def test_merge_points():
    P = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [0.2, 0.0]])
    np.testing.assert_allclose(peers_dp.merge_points(P, 0.25), [[0.1, 0.0], [5.0, 5.0]])
    # no chaining: 0 and 0.2 are 0.2 apart, beyond 0.15 of the leader 0
    np.testing.assert_allclose(peers_dp.merge_points(P, 0.15),
                               [[0.05, 0.0], [5.0, 5.0], [0.2, 0.0]])
    assert peers_dp.merge_points(P, 0.05).shape == (4, 2)


@pytest.mark.parametrize("kw, msg", [
    (dict(bandwidth=0.0), "bandwidth"),
    (dict(sample_rate=1.5), "sample_rate"),
    (dict(init="data"), "init"),
    (dict(init=np.zeros((3, 5))), "shape"),
    (dict(bounds=None), "bounds"),
    (dict(epsilon=-1.0), "epsilon"),
])
def test_dp_grams_rejects_bad_input(kw, msg):
    args = dict(epsilon=1.0, delta=1e-5, bandwidth=0.8, n_inits=5, bounds=(-6, 6))
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        peers_dp.dp_grams(_two_clusters(n=20), **args)


def test_diffprivlib_kmeans():
    why = peers_dp.diffprivlib_unavailable()
    if why is not None:
        pytest.skip(why)
    X = _two_clusters()
    a = peers_dp.diffprivlib_kmeans(X, 2, epsilon=50.0, bounds=(-6.0, 6.0), seed=3)
    b = peers_dp.diffprivlib_kmeans(X, 2, epsilon=50.0, bounds=(-6.0, 6.0), seed=3)
    assert a.shape == (2, 2)
    np.testing.assert_array_equal(a, b)
    assert np.all(_match(a) < 1.0), a
    with pytest.raises(ValueError, match="bounds"):
        peers_dp.diffprivlib_kmeans(X, 2, epsilon=1.0, bounds=(1.0, -1.0))


def test_nopublic_harness_registry_and_scores():
    """bench_peers_nopublic: every registered method runs on a tiny bank through the one
    signature, and the per-centre completion score equals the per-query one."""
    pytest.importorskip("sklearn")
    import bench_peers_nopublic as bn

    X = _two_clusters(n=60)
    y = np.repeat([0, 1], 60)
    bank = bn.Bank(X, y, TRUE.copy())
    dom = bn.Domain("toy", np.full(2, -6.0), np.full(2, 6.0), 2)
    for name, fn in bn.METHODS.items():
        if name == "diffprivlib" and not bn_have_diffprivlib():
            continue
        C = bn._centres_of(fn(bank, dom, 4.0, 1e-5, 0))
        assert C.ndim == 2 and C.shape[1] == 2 and C.shape[0] >= 1, name
        assert set(bn.score(bank, C)) == {"ari", "nmi", "k"}
    wl = bn.make_workload(bank, dom, 0)
    C = bn.m_kmeans(bank, dom, 1.0, 1e-5, 0)
    fast = bn.completion_accuracy(bank, wl, *bn._complete(C, wl.queries))
    slow = bn.completion_accuracy(bank, wl, bn._complete(C, wl.queries)[0])
    assert fast == slow and fast > 0.9


def bn_have_diffprivlib() -> bool:
    return peers_dp.diffprivlib_unavailable() is None
