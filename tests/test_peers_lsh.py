"""The private LSH-tree clustering peer (``benchmarks/peers_lsh.py``)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import peers_lsh  # noqa: E402

TRUE = np.array([[-3.0, -3.0], [3.0, 3.0], [3.0, -3.0]])


def _three_clusters(seed: int = 0, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(t, 0.3, (n, 2)) for t in TRUE])
    return X, np.repeat(np.arange(3), n)


def test_non_private_limit_recovers_separated_clusters():
    X, _ = _three_clusters()
    C = peers_lsh.lsh_tree_clustering(X, 3, epsilon=1e6, delta=1e-5, radius=6.0, seed=0)
    assert C.shape == (3, 2)
    err = np.linalg.norm(TRUE[:, None, :] - C[None], axis=2).min(axis=1)
    assert np.all(err < 0.1), C


def test_tree_partitions_rows_without_noise():
    """σ_c = 0, thresholds 1 and 2: every row ends in exactly one leaf, a leaf's count
    is its number of rows, and leaves are prefixes of distinct codes."""
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2, size=(500, 6))
    leaf_of, levels, depth, counts = peers_lsh._build_tree(bits, 0.0, 1.0, 2.0, rng)
    assert np.all(leaf_of >= 0)
    np.testing.assert_array_equal(np.bincount(leaf_of, minlength=counts.size), counts)
    assert len(levels) == 6
    # a leaf of one row stops branching (count 1 < 2); others go down to depth 6
    assert np.all((counts == 1) | (depth == 6))


def _one_point_runs(reps: int, x0: np.ndarray, **kw):
    X = np.tile(x0, (2000, 1))
    for s in range(reps):
        _, w, info = peers_lsh.lsh_coreset(X, 1, seed=s, **kw)
        yield w, info


def test_noise_is_as_calibrated():
    """All rows identical: the level-1 counts are (2000, 0) plus N(0, σ_c²) and the one
    leaf's sum is 2000·x0 (clipped to the ball) plus N(0, σ_s²) per coordinate."""
    kw = dict(epsilon=4.0, delta=1e-5, radius=2.0, max_depth=3, count_share=0.5,
              min_node=500.0, min_branch=1000.0)
    x0 = np.array([10.0, 0.0, 0.0, 0.0])  # outside the ball: clipped to (2, 0, 0, 0)
    dev_c, dev_s = [], []
    for w, info in _one_point_runs(300, x0, **kw):
        lv = info["levels"][0]["counts"]
        dev_c.extend([lv.max() - 2000.0, lv.min()])
        assert w.size == 1 and info["depth_reached"] == 3
        dev_s.extend(info["leaf_sums"][0] - 2000.0 * np.array([2.0, 0, 0, 0]))
    z = peers_lsh.lsh_noise(4.0, 1e-5, max_depth=3, radius=2.0, count_share=0.5)
    assert np.std(dev_c) == pytest.approx(z["sigma_count"], rel=0.1)
    assert np.std(dev_s) == pytest.approx(z["sigma_sum"], rel=0.08)
    assert abs(np.mean(dev_s)) < 4 * z["sigma_sum"] / math.sqrt(len(dev_s))


@pytest.mark.parametrize("eps, L, share, R", [(0.25, 20, 0.05, 64.0), (1.0, 7, 0.5, 1.0),
                                              (8.0, 10, 0.9, 8.0)])
def test_privacy_split_spends_the_target(eps, L, share, R):
    """Recomputed from the released noise scales alone: the counts' L levels of L2
    sensitivity √2 and the sums' sensitivity 2R give ρ = L/σ_c² + (2R)²/(2σ_s²); its
    (ε, δ) conversion is the target, and dp-accounting's RDP accountant agrees it is
    within it."""
    delta = 1e-5
    z = peers_lsh.lsh_noise(eps, delta, max_depth=L, radius=R, count_share=share)
    rho = L * 2.0 / (2.0 * z["sigma_count"] ** 2) + (2.0 * R) ** 2 / (2.0 * z["sigma_sum"] ** 2)
    spent = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    assert spent <= eps * (1 + 1e-9)
    assert spent >= eps * (1 - 1e-9)
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z["sigma_count"] / math.sqrt(2)), L))
    acc.compose(dpa.GaussianDpEvent(z["sigma_sum"] / (2.0 * R)))
    assert acc.get_epsilon(delta) <= eps


def test_auto_parameters_are_public_rules():
    p = peers_lsh.lsh_params(100_000, 64, 100, epsilon=1.0, delta=1e-5, radius=8.0)
    assert p["max_depth"] == 10  # ceil(log2 100) + 3
    assert 4.0 * p["sigma_count"] <= p["min_node"]
    assert p["min_branch"] == 3.0 * p["min_node"]
    lim = 10.0 * 8.0 * p["sigma_sum"] / 8.0
    assert p["min_node"] == pytest.approx(min(lim, 100_000 / 200))
    fixed = peers_lsh.lsh_params(1797, 64, 10, epsilon=1.0, delta=1e-5, radius=64.0,
                                 max_depth=20, count_share=0.3)
    assert fixed["max_depth"] == 20 and fixed["count_share"] == 0.3


def test_deterministic_with_a_seed():
    X, _ = _three_clusters(n=100)
    kw = dict(epsilon=1.0, delta=1e-5, radius=6.0)
    a = peers_lsh.lsh_tree_clustering(X, 3, seed=7, **kw)
    b = peers_lsh.lsh_tree_clustering(X, 3, seed=7, **kw)
    c = peers_lsh.lsh_tree_clustering(X, 3, seed=8, **kw)
    np.testing.assert_array_equal(a, b)
    assert a.shape != c.shape or not np.allclose(a, c)


@pytest.mark.parametrize("kw, msg", [
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=np.inf), "epsilon"),
    (dict(delta=1.0), "delta"),
    (dict(radius=-1.0), "radius"),
    (dict(k=0), "k must"),
    (dict(max_depth=0), "max_depth"),
    (dict(max_depth=63), "max_depth"),
    (dict(max_depth="deep"), "max_depth"),
    (dict(count_share=1.5), "count_share"),
    (dict(count_share="half"), "count_share"),
    (dict(centre=np.zeros(3)), "centre"),
    (dict(min_node=10.0, min_branch=5.0), "min_branch"),
    (dict(X=np.array([[0.0, np.nan]])), "finite"),
    (dict(X=np.zeros(4)), "2-D"),
])
def test_rejects_bad_input(kw, msg):
    X, _ = _three_clusters(n=20)
    args = dict(X=X, k=3, epsilon=1.0, delta=1e-5, radius=6.0)
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        peers_lsh.lsh_tree_clustering(args.pop("X"), args.pop("k"), **args)
