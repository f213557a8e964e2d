"""The clusters of a synopsis without public data (docs/privacy-accounting.md §15.2):
the pair release's statistic and sensitivity, and the merge rule (post-processing)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import brace
from brace import merging as mg
from brace import seeding as sd


def _exact_pairs(X, C, near=sd.PAIR_NEAR):
    """A slow reference of the pair statistic: row by row, in plain Python."""
    k = C.shape[0]
    out = np.zeros(k * (k - 1) // 2, dtype=np.int64)
    for x in X:
        d2 = [float(np.sum((x - c) ** 2)) for c in C]
        order = sorted(range(k), key=lambda j: (d2[j], j))
        a, b = order[0], order[1]
        ax = C[b] - C[a]
        t = float(np.sum((x - C[a]) * ax)) / float(np.sum(ax * ax))
        if t >= near:
            out[sd.pair_index(np.array([a]), np.array([b]), k)[0]] += 1
    return out


def test_pair_histogram_matches_a_slow_reference_and_its_index():
    rng = np.random.default_rng(0)
    dom = sd.parse_domain((-1, 1), None, 5)
    X = rng.uniform(-1, 1, (300, 5))
    C = rng.uniform(-0.8, 0.8, (7, 5))
    np.testing.assert_array_equal(sd.pair_histogram(X, C, dom), _exact_pairs(X, C))
    iu = np.triu_indices(7, 1)
    np.testing.assert_array_equal(sd.pair_index(iu[0], iu[1], 7), np.arange(21))
    np.testing.assert_array_equal(sd.pair_index(iu[1], iu[0], 7), np.arange(21))
    assert sd.pair_histogram(X, C[:1], dom).size == 0


def test_pair_histogram_sensitivity_is_sqrt2_and_rows_are_independent():
    """Replacing one row changes the histogram by one unit in at most two entries
    (Lemma 16), whatever the replacement (inside, outside the domain, far away); a row's
    contribution does not depend on the other rows or the tile."""
    rng = np.random.default_rng(1)
    dom = sd.parse_domain((-1, 1), None, 4)
    X = rng.uniform(-1, 1, (200, 4))
    C = rng.uniform(-0.7, 0.7, (6, 4))
    h = sd.pair_histogram(X, C, dom)
    for _ in range(40):
        Y = X.copy()
        Y[rng.integers(200)] = rng.uniform(-3, 3, 4) * (10.0 ** rng.integers(0, 5))
        diff = sd.pair_histogram(Y, C, dom) - h
        assert np.sum(diff ** 2) <= 2 and np.abs(diff).max(initial=0) <= 1
    parts = sum(sd.pair_histogram(X[i:i + 17], C, dom) for i in range(0, 200, 17))
    np.testing.assert_array_equal(parts, h)


def test_release_pairs_noise_is_calibrated():
    dom = sd.parse_domain((-1, 1), None, 3)
    X = np.zeros((50, 3))
    C = np.array([[0.5, 0, 0], [-0.5, 0, 0], [0, 0.5, 0]])
    v, sigma = sd.release_pairs(X, C, 0.1, dom, "plain", np.random.default_rng(0))
    assert v.shape == (3,) and sigma == pytest.approx(sd.RADII_SENSITIVITY / np.sqrt(0.2))
    # secure: the exact discrete Gaussian, σ² rounded up from Δ²/(2ρ), integer values
    w, s2 = sd.release_pairs(X, C, 0.1, dom, "secure", None)
    assert np.all(w == np.rint(w)) and s2 >= sd.RADII_SENSITIVITY / np.sqrt(0.2)
    assert s2 == pytest.approx(sd.RADII_SENSITIVITY / np.sqrt(0.2), rel=1e-6)


def _chain(n_pieces=30, m=400.0, bridge=150.0):
    """Released values of one elongated cluster tiled into a chain of pieces: heavy
    counts, thick bridges between neighbours only."""
    k = n_pieces
    counts = np.full(k, m) + np.arange(k)  # distinct
    S = np.zeros((k, k))
    for i in range(k - 1):
        S[i, i + 1] = S[i + 1, i] = bridge
    return counts, S[np.triu_indices(k, 1)]


def test_an_elongated_chain_merges_into_one_cluster():
    counts, pairs = _chain()
    lab = mg.merge_labels(counts, pairs, sigma=5.0)
    assert np.unique(lab).size == 1


def test_two_blobs_with_a_valley_stay_apart():
    # two chains of 15 pieces each, joined by a thin bridge (a valley)
    counts, pairs = _chain(30)
    k = 30
    S = np.zeros((k, k))
    S[np.triu_indices(k, 1)] = pairs
    S = S + S.T
    S[14, 15] = S[15, 14] = 12.0  # few rows near the bisector: a valley
    lab = mg.merge_labels(counts, S[np.triu_indices(k, 1)], sigma=5.0)
    assert np.unique(lab[:15]).size == 1 and np.unique(lab[15:]).size == 1
    assert lab[0] != lab[15]
    # a thick bridge within the noise does not merge either (its lower bound is 0)
    S[14, 15] = S[15, 14] = 90.0
    lab = mg.merge_labels(counts, S[np.triu_indices(k, 1)], sigma=50.0)
    assert lab[14] != lab[15]


def test_a_fine_tiling_scales_ratio_and_share_down():
    # 128 tiles (K = 2·MERGE_TILES): two chains of 64, each tile bridged to its
    # neighbours by 0.1 of the largest count — below ratio = 0.15, above (64/128)·0.15
    counts, pairs = _chain(128, m=300.0, bridge=0.1 * 428.0 + 2 * 1.0)
    k = 128
    S = np.zeros((k, k))
    S[np.triu_indices(k, 1)] = pairs
    S = S + S.T
    S[63, 64] = S[64, 63] = 0.0  # a valley between the two chains
    v = S[np.triu_indices(k, 1)]
    lab = mg.merge_labels(counts, v, sigma=1.0)
    assert np.unique(lab[:64]).size == 1 and np.unique(lab[64:]).size == 1
    assert lab[0] != lab[64]
    # unscaled (tiles >= K), the same bridges join nothing
    assert np.unique(mg.merge_labels(counts, v, sigma=1.0, tiles=k)).size > 100
    # at most MERGE_TILES attractors nothing is scaled: 64 tiles, the same thin bridges
    c64, p64 = _chain(mg.MERGE_TILES, m=300.0, bridge=0.1 * 428.0 + 2 * 1.0)
    assert np.unique(mg.merge_labels(c64, p64, sigma=1.0)).size > 50


def test_overlapping_classes_without_a_standing_out_bridge_stay_apart():
    # few attractors, every pair bridged thickly (overlapping classes: MNIST-like)
    counts = np.array([2600.0, 2500, 2300, 1800])
    S = np.array([[0, 600, 1100, 300], [600, 0, 200, 800], [1100, 200, 0, 1000],
                  [300, 800, 1000, 0]], dtype=float)
    lab = mg.merge_labels(counts, S[np.triu_indices(4, 1)], sigma=10.0)
    np.testing.assert_array_equal(lab, np.arange(4))
    # the same pairs without the contrast condition would be merged
    assert np.unique(mg.merge_labels(counts, S[np.triu_indices(4, 1)], sigma=10.0,
                                     contrast=0.0)).size < 4


def test_background_cells_never_bridge_two_clusters():
    # clusters 0 and 3 (heavy), light background cells 1 and 2 between them, every
    # light cell's rows near a bisector (thick bridges relative to the light cells);
    # more attractors far away (no bridges)
    counts = np.array([500.0, 60.0, 55.0, 480.0] + [300.0] * 20)
    k = counts.size
    S = np.zeros((k, k))
    for a, b in [(0, 1), (1, 2), (2, 3)]:
        S[a, b] = S[b, a] = 50.0
    lab = mg.merge_labels(counts, S[np.triu_indices(k, 1)], sigma=1.0)
    assert lab[0] != lab[3] and lab[0] != lab[1] and lab[3] != lab[2]
    assert lab[1] == lab[2]  # two light cells of comparable weight are joined


def test_separated_round_clusters_stay_apart_on_real_releases():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(3)
    C = rng.uniform(-0.6, 0.6, (5, 8))
    y = np.arange(3000) % 5
    X = np.clip(C[y] + 0.04 * rng.standard_normal((3000, 8)), -1, 1)
    syn = brace.private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), seed=0)
    lab = syn.cluster(X)
    # no cluster holds rows of two blobs; pieces of one blob are (partly) rejoined
    assert all(np.unique(y[lab == g]).size == 1 for g in np.unique(lab))
    assert adjusted_rand_score(y, lab) > adjusted_rand_score(y, syn.assign(X)) + 0.1


def _blob_and_rod(d: int = 6, n: int = 6000) -> tuple[np.ndarray, np.ndarray]:
    """A round blob (std 0.02) and a thin rod 1.2 long (std 0.02 across it), d = 6."""
    rng = np.random.default_rng(4)
    centres = np.array([[-0.5] + [0.0] * (d - 1), [0.5] + [0.0] * (d - 1)])
    y = np.arange(n) % 2
    X = centres[y] + 0.02 * rng.standard_normal((n, d))
    X[y == 1, 1] = rng.uniform(-0.6, 0.6, int((y == 1).sum()))
    return X, y


def test_an_elongated_cluster_is_one_cluster_on_real_releases():
    """Over seeds: the rod and the blob are tiled by many attractors, and the merge finds
    the two clusters — better, not worse, with more budget."""
    from sklearn.metrics import adjusted_rand_score

    X, y = _blob_and_rod()
    ari: dict[float, list[float]] = {1.0: [], 4.0: []}
    for eps, seeds in ((1.0, range(3)), (4.0, range(6))):
        for s in seeds:
            syn = brace.private_synopsis(X, epsilon=eps, delta=1e-5, bounds=(-1, 1),
                                         seed=s)
            assert syn.n_attractors > 8  # both are tiled
            ari[eps].append(adjusted_rand_score(y, syn.cluster(X)))
    assert min(ari[4.0]) > 0.75 and float(np.median(ari[4.0])) > 0.95, ari
    assert min(ari[1.0]) > 0.85, ari  # the chain joins (without them: 0.60–0.72)
    assert np.mean(ari[4.0]) > np.mean(ari[1.0]), ari


def test_the_clusters_are_a_function_of_the_released_synopsis_alone():
    """Post-processing: the clusters are the same from the synopsis saved to JSON and
    read back (no bank), and change when a released value changes."""
    rng = np.random.default_rng(5)
    X = np.clip(rng.uniform(-0.5, 0.5, (8, 6))[np.arange(2000) % 8]
                + 0.05 * rng.standard_normal((2000, 6)), -1, 1)
    syn = brace.private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), seed=0)
    back = brace.Synopsis.from_json(syn.to_json())
    np.testing.assert_array_equal(back.clusters(), syn.clusters())
    np.testing.assert_array_equal(back.clusters(k=3), syn.clusters(k=3))
    k = syn.n_attractors
    assert len(syn.params["pairs"]) == k * (k - 1) // 2
    # a huge released bridge along a chain through every attractor merges them all
    chain = np.zeros((k, k))
    for i in range(k - 1):
        chain[i, i + 1] = 1e9
    big = dataclasses.replace(syn, params={**syn.params,
                                           "pairs": chain[np.triu_indices(k, 1)].tolist()})
    assert np.unique(big.clusters()).size == 1 < np.unique(syn.clusters()).size
    # no pair counts (a seeded synopsis): every attractor is its own cluster
    none = dataclasses.replace(syn, params={k_: v for k_, v in syn.params.items()
                                            if k_ != "pairs"})
    np.testing.assert_array_equal(none.clusters(), np.arange(k))


def test_clusters_are_computed_once_per_k_and_follow_changed_pair_counts(monkeypatch):
    """``cluster(points)`` reuses the merge (computed once per ``k``); a caller who
    changes ``params["pairs"]`` in place gets the merge of the new counts, and mutating a
    returned array changes nothing."""
    rng = np.random.default_rng(5)
    X = np.clip(rng.uniform(-0.5, 0.5, (8, 6))[np.arange(2000) % 8]
                + 0.05 * rng.standard_normal((2000, 6)), -1, 1)
    syn = brace.private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), seed=0)
    calls = {"merge": 0, "kmeans": 0}
    real_merge, real_kmeans = mg.merge_labels, mg.kmeans_labels

    def merge(*a, **kw):
        calls["merge"] += 1
        return real_merge(*a, **kw)

    def kmeans(*a, **kw):
        calls["kmeans"] += 1
        return real_kmeans(*a, **kw)

    monkeypatch.setattr(mg, "merge_labels", merge)
    monkeypatch.setattr(mg, "kmeans_labels", kmeans)
    first = syn.clusters()
    for _ in range(3):
        np.testing.assert_array_equal(syn.cluster(X), first[syn.assign(X)])
    syn.clusters(k=2)
    syn.clusters(k=2)
    assert calls == {"merge": 1, "kmeans": 1}
    out = syn.clusters()
    out[:] = 99  # a caller's copy
    np.testing.assert_array_equal(syn.clusters(), first)
    k = syn.n_attractors
    chain = np.zeros((k, k))
    for i in range(k - 1):
        chain[i, i + 1] = 1e9
    syn.params["pairs"] = chain[np.triu_indices(k, 1)].tolist()  # changed in place
    assert np.unique(syn.clusters()).size == 1 < np.unique(first).size
    assert calls["merge"] == 2
    # a copy (dataclasses.replace) starts without the memo
    back = dataclasses.replace(syn)
    back.clusters()
    assert calls["merge"] == 3
    assert "_memo" not in syn.to_dict() and "_memo" not in repr(syn)
    bad = dataclasses.replace(syn, params={k_: v for k_, v in syn.params.items()
                                           if k_ != "pairs_sigma"})
    with pytest.raises(ValueError, match="no 'pairs_sigma'"):
        bad.clusters()


def test_k_groups_the_attractors_into_k_clusters_and_checks_k():
    rng = np.random.default_rng(6)
    X = np.clip(rng.uniform(-0.5, 0.5, (6, 5))[np.arange(3000) % 6]
                + 0.04 * rng.standard_normal((3000, 5)), -1, 1)
    syn = brace.private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), seed=0)
    for k in (1, 2, 3):
        assert np.unique(syn.clusters(k=k)).size == k
        assert syn.cluster(X, k=k).shape == (3000,)
    assert np.unique(syn.clusters(k=10 ** 6)).size == syn.n_attractors
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="k must be"):
            syn.clusters(k=bad)


def test_pair_matrix_checks_its_length():
    with pytest.raises(ValueError, match="pairs must hold"):
        mg.pair_matrix([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="sigma must be"):
        mg.merge_labels([1.0, 2.0], [1.0], float("nan"))
    A = np.zeros((3, 2))
    with pytest.raises(ValueError, match="attractors must be"):
        mg.merge_labels([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], 1.0, attractors=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="sigma must be"):
        mg.attach_labels(A, [1.0, 2.0, 3.0], [1.0] * 3, -1.0, [0, 1, 2])
    with pytest.raises(ValueError, match="labels must"):
        mg.attach_labels(A, [1.0, 2.0, 3.0], [1.0] * 3, 1.0, [0, 1])
    with pytest.raises(ValueError, match="labels must"):
        mg.attach_labels(A, [1.0, 2.0, 3.0], [1.0] * 3, 1.0, [[0, 1, 2]])
    with pytest.raises(ValueError, match="pairs must hold"):
        mg.pair_matrix([1.0, float("nan"), 2.0], 3)
    with pytest.raises(ValueError, match="counts must be"):
        mg.merge_labels([1.0, float("inf"), 3.0], [1.0] * 3, 1.0)
    with pytest.raises(ValueError, match="attractors must be"):
        mg.merge_labels([1.0, 2.0, 3.0], [1.0] * 3, 1.0, attractors=np.full((3, 2), np.nan))
    with pytest.raises(ValueError, match="attractors must be"):
        mg.chain_joins(np.zeros((3, 0)), [1.0, 2.0, 3.0], [1.0] * 3, 1.0)
    with pytest.raises(ValueError, match="sigma must be"):
        mg.chain_joins(A, [1.0, 2.0, 3.0], [1.0] * 3, float("nan"))
    # negative noisy counts (a keep_seeds synopsis) count as 1, as in the first pass
    assert not mg.chain_joins(np.array([[0.0], [1.0], [2.0]]), [-50.0, -60.0, -70.0],
                              [0.1, 0.0, 0.1], 0.01).any()


def test_a_saved_synopsis_checks_its_pair_counts():
    rng = np.random.default_rng(7)
    X = np.clip(rng.uniform(-0.5, 0.5, (4, 4))[np.arange(800) % 4]
                + 0.05 * rng.standard_normal((800, 4)), -1, 1)
    syn = brace.private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), seed=0)
    assert "clusters" in syn.summary()
    d = syn.to_dict()
    for bad, msg in [({"pairs": d["params"]["pairs"] + [1.0]}, "k\\(k-1\\)/2"),
                     ({"pairs": ["x"] * len(d["params"]["pairs"])}, "must be numbers"),
                     ({"pairs_sigma": -1.0}, "pairs_sigma"),
                     ({"pairs_sigma": None}, "must be numbers")]:
        with pytest.raises(ValueError, match=msg):
            brace.Synopsis.from_dict({**d, "params": {**d["params"], **bad}})


def test_audit_report_row_of_the_pair_release_passes_and_catches_broken_noise(monkeypatch):
    from brace.audit.report import report_bank
    from brace.audit.synopsis import pairs_row

    X, q = report_bank(40, 2, 0.5, 9)
    kw = dict(epsilon=4.0, delta=1e-5, radius=0.5, n_runs=4_000, alpha=0.05, seed=0)
    row = pairs_row(X, q, **kw)
    assert row["verdict"] == "pass" and 0.0 < row["epsilon_lb"] <= row["claimed_epsilon"]
    monkeypatch.setattr(sd, "RADII_SENSITIVITY", 0.25 * sd.RADII_SENSITIVITY)
    broken = pairs_row(X, q, **kw)
    assert broken["verdict"] == "VIOLATION" and broken["epsilon_lb"] > 4.0


def test_pair_histogram_with_equal_centres_counts_nothing_for_them_and_warns_not():
    import warnings

    dom = sd.parse_domain((-1, 1), None, 2)
    C = np.array([[0.0, 0.0], [0.0, 0.0], [0.5, 0.0]])
    X = np.random.default_rng(8).uniform(-0.2, 0.2, (50, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = sd.pair_histogram(X, C, dom)
    assert h[sd.pair_index(np.array([0]), np.array([1]), 3)[0]] == 0


# --------------------------------------------------------------------------- second pass


def _gabriel_slow(A):
    K = A.shape[0]
    G = np.zeros((K, K), dtype=bool)
    for a in range(K):
        for b in range(K):
            if a != b:
                mid, h2 = (A[a] + A[b]) / 2, float(np.sum((A[a] - A[b]) ** 2)) / 4
                G[a, b] = all(float(np.sum((A[c] - mid) ** 2)) > h2
                              for c in range(K) if c not in (a, b))
    return G


def test_gabriel_pairs_match_a_slow_reference():
    rng = np.random.default_rng(9)
    for K, d in ((2, 3), (3, 2), (12, 2), (30, 5)):
        A = rng.uniform(-1, 1, (K, d))
        np.testing.assert_array_equal(mg.gabriel_pairs(A), _gabriel_slow(A))
    # on a line only consecutive points are neighbours
    line = np.arange(6.0)[:, None] * np.array([[1.0, 0.0]])
    g = mg.gabriel_pairs(line)
    assert g.sum() == 10 and all(g[i, i + 1] for i in range(5))
    assert mg.gabriel_pairs(np.zeros((1, 3))).shape == (1, 1)
    # the ball is closed: a square's diagonals are not neighbours (the other corners lie
    # on the ball's boundary); duplicates and ties on grids match the reference
    sq = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    g = mg.gabriel_pairs(sq)
    assert g.sum() == 8 and not g[0, 2] and not g[1, 3]
    for _ in range(20):
        A = rng.integers(0, 3, (int(rng.integers(3, 12)), 2)).astype(float)
        np.testing.assert_array_equal(mg.gabriel_pairs(A), _gabriel_slow(A))


def _piece_bank():
    """Released values in the plane: cluster X (tiles 0–3 on a square around (0, 0)),
    its piece 4 just beyond tile 3, cluster Y (tiles 5–7 around (3, 0)). The piece is
    bridged to tiles 2 and 3 by 25 rows each (each below the first pass's ratio of the
    larger cell), the clusters' tiles to each other by thick bridges."""
    A = np.array([[-0.3, -0.3], [-0.3, 0.3], [0.3, -0.3], [0.3, 0.3], [0.8, 0.0],
                  [3.0, -0.3], [3.0, 0.3], [3.5, 0.0]])
    m = np.array([400.0, 410, 420, 430, 200, 405, 415, 425])
    S = np.zeros((8, 8))
    for a, b in [(0, 1), (0, 2), (1, 3), (2, 3), (5, 6), (5, 7), (6, 7)]:
        S[a, b] = 150.0
    S[2, 4] = S[3, 4] = 25.0
    S = S + S.T
    return A, m, S


def test_second_pass_attaches_a_piece_bridged_to_several_tiles():
    A, m, S = _piece_bank()
    v = S[np.triu_indices(8, 1)]
    first = mg.merge_labels(m, v, sigma=1.0)
    assert first[4] not in (first[0], first[5])  # the first pass leaves the piece apart
    lab = mg.merge_labels(m, v, sigma=1.0, attractors=A)
    np.testing.assert_array_equal(lab, [0, 0, 0, 0, 0, 1, 1, 1])
    # its bridge (50 − 2·√2 of 200) falls below attach·M: it stays apart
    S2 = S.copy()
    S2[2, 4] = S2[4, 2] = S2[3, 4] = S2[4, 3] = 15.0
    lab = mg.merge_labels(m, S2[np.triu_indices(8, 1)], sigma=1.0, attractors=A)
    assert lab[4] not in (lab[0], lab[5])
    # the noise margin is the bridge's: z·σ·√p with p = 2 Gabriel pairs, against
    # attach·M = 40 — σ = 3: 50 − 2·3·√2 ≥ 40 (a margin z·σ·p would be 38: apart);
    # σ = 4: 50 − 2·4·√2 < 40 (a margin z·σ would be 42: attached); σ = 8: far below
    assert mg.merge_labels(m, v, sigma=3.0, attractors=A)[4] == 0
    assert mg.merge_labels(m, v, sigma=4.0, attractors=A)[4] != 0
    assert mg.merge_labels(m, v, sigma=8.0, attractors=A)[4] != 0


def test_second_pass_repeats_until_none_attaches():
    """A piece that attaches only to the union of a cluster and another piece: the pass
    repeats, its threshold fixed after the first round."""
    A = np.array([[0.0, 0.0], [1.0, 0.6], [1.0, -0.6], [10.0, 0.0]])  # X, B, C, far Y
    m = np.array([2000.0, 200.0, 100.0, 3000.0])
    S = np.zeros((4, 4))
    S[0, 1], S[0, 2], S[1, 2] = 30.0, 40.0, 20.0
    S = S + S.T
    # round 1: C (40 − 2 of 100) joins X; B (28/200 < 0.2 to X alone) joins X ∪ C in
    # round 2 (30 + 20 − 2·√2 of 200)
    lab = mg.attach_labels(A, m, S[np.triu_indices(4, 1)], 1.0, np.arange(4))
    np.testing.assert_array_equal(lab, [0, 0, 0, 1])


def test_second_pass_reads_only_gabriel_pairs():
    A, m, S = _piece_bank()
    S[2, 4] = S[4, 2] = S[3, 4] = S[4, 3] = 0.0
    S[0, 4] = S[4, 0] = 80.0  # a count between non-neighbours (tile 2 lies between them)
    assert not mg.gabriel_pairs(A)[0, 4]
    lab = mg.merge_labels(m, S[np.triu_indices(8, 1)], sigma=1.0, attractors=A)
    assert lab[4] != lab[0]


def test_second_pass_does_not_attach_where_every_component_sends_much():
    """Overlapping classes (MNIST-like): every component sends a third of its weight to
    a heavier neighbour; none stands out from the bulk of the weight (spread)."""
    K = 8
    A = np.stack([np.arange(K, dtype=float), np.zeros(K)], axis=1)
    m = 300.0 + 10.0 * np.arange(K)
    S = np.zeros((K, K))
    for i in range(K - 1):
        S[i, i + 1] = S[i + 1, i] = 0.35 * m[i] + 2.0
    v = S[np.triu_indices(K, 1)]
    first = mg.merge_labels(m, v, sigma=1.0, contrast=1e9)  # the first pass: no joins
    assert np.unique(first).size == K
    np.testing.assert_array_equal(mg.attach_labels(A, m, v, 1.0, first), np.arange(K))
    # without the spread condition they would all be joined
    assert np.unique(mg.attach_labels(A, m, v, 1.0, first, spread=0.0)).size == 1


def test_second_pass_a_light_cell_between_two_clusters_attaches_to_one():
    # heavy clusters 0 and 2, a light cell 1 between them, thickly bridged to both:
    # it attaches to one (the lighter side attaches), the heavy ones stay apart (then the
    # lighter component {0, 1} sends 45 − 2 of its 1,060 to cluster 2: below attach)
    A = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    m = np.array([1000.0, 60.0, 1100.0])
    S = np.array([[0, 50, 0], [50, 0, 45], [0, 45, 0]], dtype=float)
    lab = mg.attach_labels(A, m, S[np.triu_indices(3, 1)], 1.0, np.arange(3))
    assert lab[0] != lab[2] and lab[1] == lab[0]


def test_anisotropic_clusters_are_found_whole_on_real_releases():
    """Gaussian clusters with condition number 100 in d = 16: the split rounds cut
    some into pieces; the two passes find every cluster whole, at ε = 1 and 4."""
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(11)
    d, k, n = 16, 8, 8000
    C: list[np.ndarray] = []
    while len(C) < k:
        c = rng.uniform(-1.5, 1.5, d)
        if all(np.linalg.norm(c - o) >= 1.2 for o in C):
            C.append(c)
    y = np.arange(n) % k
    X = np.empty((n, d))
    for j in range(k):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        X[y == j] = C[j] + (rng.standard_normal((n // k, d)) * np.geomspace(0.4, 0.04, d)
                            ) @ (q * np.sign(np.diag(r))).T
    X = np.clip(X, -3, 3)
    pieces = 0
    for eps, s in ((1.0, 0), (4.0, 0), (4.0, 1)):
        syn = brace.private_synopsis(X, epsilon=eps, delta=1e-5, bounds=(-3, 3), seed=s)
        first = mg.merge_labels(syn.counts, syn.params["pairs"], syn.params["pairs_sigma"])
        pieces += np.unique(first).size - k
        lab = syn.cluster(X)
        assert np.unique(lab).size == k and adjusted_rand_score(y, lab) > 0.99
    assert pieces >= 3  # the first pass alone leaves pieces


def test_chain_joins_join_a_noisy_chain_and_nothing_else():
    """A rod's tiles on a line, each bridged to its neighbours by 2.6σ–4σ (the first
    pass cuts the thinner ones); a bridge within 2.5σ, one shared alike among many
    neighbours, or between non-neighbours is not a chain join."""
    K, sigma = 8, 25.0
    A = np.stack([0.1 * np.arange(K), np.zeros(K)], axis=1)
    m = np.full(K, 220.0)
    S = np.zeros((K, K))
    for i, b in enumerate([100.0, 66.0, 90.0, 70.0, 100.0, 68.0, 95.0]):
        S[i, i + 1] = S[i + 1, i] = b
    v = S[np.triu_indices(K, 1)]
    assert np.unique(mg.merge_labels(m, v, sigma)).size > 1  # the first pass cuts it
    np.testing.assert_array_equal(mg.merge_labels(m, v, sigma, attractors=A), 0)
    j = mg.chain_joins(A, m, v, sigma)
    assert j[0, 1] and j[1, 2] and not j[0, 2]  # (0, 2): not Gabriel neighbours
    S2 = S.copy()
    S2[3, 4] = S2[4, 3] = 60.0  # below z_c·σ = 62.5
    assert not mg.chain_joins(A, m, S2[np.triu_indices(K, 1)], sigma)[3, 4]
    S2[3, 4] = S2[4, 3] = 50.0  # ... and below ratio_c·m = 55
    assert not mg.chain_joins(A, m, S2[np.triu_indices(K, 1)], sigma * 0.1)[3, 4]
    # a cell bridged alike to six neighbours (a hexagon around it): each bridge a sixth
    # of its boundary, below share_c
    ang = np.arange(6) * np.pi / 3
    H = np.vstack([[0.0, 0.0], np.stack([np.cos(ang), np.sin(ang)], axis=1)])
    mh = np.full(7, 300.0)
    Sh = np.zeros((7, 7))
    Sh[0, 1:] = Sh[1:, 0] = 100.0
    jh = mg.chain_joins(H, mh, Sh[np.triu_indices(7, 1)], 1.0)
    assert mg.gabriel_pairs(H)[0, 1:].all() and not jh[0].any()
    Sh[0, 2:] = Sh[2:, 0] = 0.0  # now one bridge is all of both boundaries
    assert mg.chain_joins(H, mh, Sh[np.triu_indices(7, 1)], 1.0)[0, 1]
