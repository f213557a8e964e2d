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
