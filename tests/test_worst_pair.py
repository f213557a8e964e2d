"""The worst-pair search (``FootprintIndex._worst``, its probe and its bulk fallback)
returns exactly what the pairwise loop as it was returned, on random ledgers (the loop is
kept here as the reference: the search now stops an order once its best reaches the
total, and a probe keeps the stored footprints' neighbour lists), and stays an upper
bound where too many pairs meet to list them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import brace.accounting.filter as flt
from brace.accounting import GaussianStep
from brace.accounting.filter import ROUNDING, FootprintIndex, K, event_weights


def _loop_worst(index: FootprintIndex, cols=None) -> tuple[np.ndarray, bool]:
    """The pairwise loop as it was (per order, lexicographic pairs, running best, no
    stop at the total), and whether any order hit the evaluation cap."""
    m = len(index)
    out = index.total.copy()
    if m == 0:
        return np.zeros(K + 1), False
    columns = list(range(K + 1) if cols is None else cols)
    W = index.weights[:, columns]
    where = {c: i for i, c in enumerate(columns)}
    capped = False
    unions = {}

    def union(a, b):
        key = (a, b) if a < b else (b, a)
        if key not in unions:
            na, nb = index.neighbours(a), index.neighbours(b)
            mk = np.zeros(m, dtype=bool)
            mk[na] = True
            unions[key] = W[na].sum(axis=0) + W[nb[~mk[nb]]].sum(axis=0)
        return unions[key]

    for col in columns:
        u = index.U[:, col]
        if not np.all(np.isfinite(u)):
            out[col] = math.inf
            continue
        k = min(m, flt._MAX_TOP)
        top = np.argpartition(-u, k - 1)[:k] if k < m else np.arange(m)
        top = top[np.argsort(-u[top], kind="stable")]
        ut = u[top]
        best = ut[0]
        rest = ut[0] + (float(np.partition(u, m - k - 1)[m - k - 1]) if k < m else 0.0)
        stop, evals = 0.0, 0
        for a in range(k):
            if ut[a] + ut[0] <= best:
                break
            for b in range(a + 1, k):
                if ut[a] + ut[b] <= best:
                    break
                if evals >= flt._MAX_PAIRS:
                    stop, capped = ut[a] + ut[min(a + 1, k - 1)], True
                    break
                best = max(best, float(union(int(top[a]), int(top[b]))[where[col]]))
                evals += 1
            if stop:
                break
        out[col] = min(max(best, stop, rest if k < m else 0.0), index.total[col])
    return out * ROUNDING, capped


def _random_index(rng, n, d, spread, events="gaussian"):
    c = rng.uniform(-spread, spread, size=(n, d))
    r = rng.uniform(0.3, 2.0, size=n)
    rho = rng.uniform(0.005, 0.2, size=n)
    w = np.stack([event_weights(GaussianStep(float(x))) for x in rho])
    if events == "mixed":  # non-proportional columns: each order ranks footprints anew
        w[:, :K] *= rng.uniform(0.5, 2.0, size=(n, K))
        w[:, K] = rng.uniform(0, 1e-9, size=n) * (rng.random(n) < 0.3)
    index = FootprintIndex(d)
    for s in range(0, n, 7):  # incrementally, as releases arrive
        index.add(c[s:s + 7], r[s:s + 7], w[s:s + 7])
    return index


@pytest.mark.parametrize("seed", range(12))
def test_search_equals_the_pairwise_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 2, 3, 9, 40, 90, 200]))
    index = _random_index(rng, n, int(rng.choice([1, 2, 5])), float(rng.choice([1, 5, 30])),
                          events="mixed" if seed % 2 else "gaussian")
    for cols in (None, (3, 17, 40, K), (K,)):
        want, _ = _loop_worst(index, cols)  # capped or not
        np.testing.assert_array_equal(index.worst_pair(cols=cols), want)


def test_equal_with_probe_footprints_and_infinite_weights():
    rng = np.random.default_rng(5)
    index = _random_index(rng, 30, 2, 3.0)
    extra = [(rng.normal(size=(4, 2)), np.full(4, 0.8), index.weights[:4] * 2.0)]
    before = index.worst_pair()
    index_b = _random_index(np.random.default_rng(5), 30, 2, 3.0)
    index_b.add(*extra[0])
    np.testing.assert_array_equal(index.worst_pair(extra),
                                  _loop_worst(index_b)[0])
    np.testing.assert_array_equal(index.worst_pair(), before)  # the probe left no trace
    w = index.weights[:1].copy()
    w[0, 5] = math.inf
    index.add(np.zeros((1, 2)), np.ones(1), w)
    got, (want, _) = index.worst_pair(), _loop_worst(index)
    np.testing.assert_array_equal(got, want)
    assert got[5] == math.inf and np.all(np.isfinite(np.delete(got, 5)))


def test_capped_search_is_still_a_bound(monkeypatch):
    """With the evaluation cap at 2, every sampled pair of points still costs at most the
    bound, and the bound is at most the global total."""
    monkeypatch.setattr(flt, "_MAX_PAIRS", 2)
    rng = np.random.default_rng(3)
    index = _random_index(rng, 150, 2, 2.0, events="mixed")
    bound = index.worst_pair()
    assert np.all(bound <= index.global_weights())
    pts = index.centres[rng.integers(0, 150, 300)] + rng.normal(size=(300, 2)) * 0.5
    for a in range(0, 300, 2):
        inside = [np.linalg.norm(index.centres - p, axis=1) <= index.radii
                  for p in (pts[a], pts[a + 1])]
        pw = index.weights[inside[0] | inside[1]].sum(axis=0)
        assert np.all(pw <= bound + 1e-12)


@pytest.mark.parametrize("d", [2, 20])  # the KD-tree estimate and the blocked count
def test_too_many_meeting_pairs_fall_back_to_a_bound(monkeypatch, d):
    """Issue reproducer (affordable_epsilon on 100,000 queries died in cKDTree with a
    MemoryError): past ``_MAX_MEETS`` meeting pairs, added balls are taken to meet every
    footprint. The worst pair then stays between the exact search's and the total, and
    a probe leaves the index as it was."""
    rng = np.random.default_rng(7)
    n = 400
    c = rng.normal(size=(n, d))
    r = np.full(n, 3.0)  # every ball meets nearly every other
    w = np.stack([event_weights(GaussianStep(float(x))) for x in rng.uniform(0.01, 0.1, n)])
    exact = FootprintIndex(d)
    exact.add(c[:100], r[:100], w[:100])
    exact.add(c[100:], r[100:], w[100:])
    monkeypatch.setattr(flt, "_MAX_MEETS", 1000)
    capped = FootprintIndex(d)
    capped.add(c[:100], r[:100], w[:100])
    before = capped.worst_pair()
    probe = capped.worst_pair([(c[100:], r[100:], w[100:])])
    np.testing.assert_array_equal(capped.worst_pair(), before)
    capped.add(c[100:], r[100:], w[100:])
    got = capped.worst_pair()
    np.testing.assert_array_equal(probe, got)
    assert np.all(got >= exact.worst_pair()) and np.all(got <= capped.global_weights())
    assert np.all(capped.U >= exact.U * (1 - 1e-12))  # up to the sums' rounding


def test_affordable_epsilon_on_many_queries_answers(monkeypatch):
    """Many reserved balls that all meet: an answer (no MemoryError), at most the exact
    search's, from the same filter a retrieve would meet."""
    from brace import PrivateMemory

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    q = rng.normal(size=(3000, 2))
    pm = PrivateMemory(X, radius=1.0, budget=(8.0, 1e-5))
    exact = pm.affordable_epsilon(q, steps=1)
    monkeypatch.setattr(flt, "_MAX_MEETS", 10_000)
    pm2 = PrivateMemory(X, radius=1.0, budget=(8.0, 1e-5))
    got = pm2.affordable_epsilon(q, steps=1)
    assert 0.0 < got <= exact * (1 + 1e-5)


def test_neighbour_lists_kept_from_probes_are_exact():
    """The lists a probe computes for stored footprints are kept without the probe's
    balls: after many probes (and a real addition) every list, U and the worst pair
    equal those of an index that never probed."""
    rng = np.random.default_rng(9)
    probed, fresh = _random_index(rng, 60, 3, 2.0), _random_index(
        np.random.default_rng(9), 60, 3, 2.0)
    for _ in range(6):
        extra = [(rng.normal(size=(5, 3)), rng.uniform(0.5, 3.0, 5), probed.weights[:5])]
        probed.worst_pair(extra)
        probed.worst_pair(extra, cols=(2, K))
    add = (rng.normal(size=(4, 3)), np.full(4, 1.0), probed.weights[:4])
    for ix in (probed, fresh):
        ix.add(*add)
    np.testing.assert_array_equal(probed.U, fresh.U)
    np.testing.assert_array_equal(probed.worst_pair(), fresh.worst_pair())
    for i in range(len(fresh)):
        np.testing.assert_array_equal(probed.neighbours(i), fresh.neighbours(i))
