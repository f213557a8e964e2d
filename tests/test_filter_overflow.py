"""The footprint index decides a pair whose squared distance overflows float64 as
meeting (in doubt), never as apart: an overflow once made a charge vanish (a NaN
distance compared false)."""

import numpy as np

from brace.accounting.filter import _meets


def test_overflowing_distances_count_as_meeting():
    c = np.array([[1e160, 0.0], [1e160, 1.0]])
    r = np.array([1.0, 1.0])
    out = _meets(c, r, c, r)
    assert out.all()  # the true distances are 0 and 1: every pair meets


def test_far_pairs_still_apart_and_near_pairs_meet():
    ca = np.array([[0.0, 0.0], [10.0, 0.0]])
    cb = np.array([[1.5, 0.0]])
    out = _meets(ca, np.array([1.0, 1.0]), cb, np.array([1.0]))
    assert out[:, 0].tolist() == [True, False]


def test_a_probe_leaves_every_stored_u_as_it_was(monkeypatch):
    """Pricing a call (``worst_pair(extra)``) restores every ``U`` it changed — also when
    only the probe's own pairs pass the listing cap and ``add`` takes every stored
    footprint to meet it (it once restored only those the probe itself met)."""
    import brace.accounting.filter as flt
    from brace.accounting import GaussianStep
    from brace.accounting.filter import FootprintIndex, event_weights

    monkeypatch.setattr(flt, "_MAX_MEETS", 1000)
    rng = np.random.default_rng(0)
    w = event_weights(GaussianStep(0.05))
    index = FootprintIndex(2)
    c = rng.uniform(-100, 100, (50, 2))
    index.add(c, np.full(50, 0.5), np.tile(w, (50, 1)))
    u0, total0 = index._u[:50].copy(), index.total.copy()
    probe = (np.tile(c[0], (40, 1)), np.full(40, 0.5), np.tile(w, (40, 1)))  # meet #0 only
    index.worst_pair([probe])
    np.testing.assert_array_equal(index._u[:50], u0)
    np.testing.assert_array_equal(index.total, total0)


def test_the_pair_cap_holds_on_the_tree_path_whatever_the_sample_sees():
    """The KD-tree path's sample (every k/1024-th new ball) may see none of the balls that
    meet everything; the listing still stops at the cap."""
    from brace.accounting import GaussianStep
    from brace.accounting.filter import FootprintIndex, event_weights

    rng = np.random.default_rng(1)
    w = event_weights(GaussianStep(0.05))
    index = FootprintIndex(2)
    old = rng.uniform(-1, 1, (3000, 2))
    index.add(old, np.full(3000, 0.01), np.tile(w, (3000, 1)), local=False)
    new = np.empty((2048, 2))
    new[0::2] = 1e6  # the sampled balls: far from everything
    new[1::2] = 0.0  # the others meet every stored footprint (radius 2)
    r = np.where(np.arange(2048) % 2, 2.0, 0.01)
    assert index._adjacency(new, r, 3000, limit=1_000_000) is None
    full = index._adjacency(new, r, 3000)  # without a cap every pair is listed
    assert full.nnz == 1024 * 3000
