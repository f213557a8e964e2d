"""Local accounting (docs/privacy-accounting.md §12): footprints with teeth, the worst-pair
bound, the filter's guarantee for random neighbour pairs, and a slow reference."""

from __future__ import annotations

import math
import os
import zlib

import numpy as np
import pytest

from brace import BudgetExceededError, LSRMemory, PrivateMemory, frozen_bank, private_retrieve
from brace.accounting import CountedGaussianStep, GaussianStep, RdpAccountant
from brace.accounting.filter import ORDERS, FilterSpec, FootprintIndex, K, convert, event_weights
from brace.footprints import (
    CLEAN_MARGIN,
    GATE_MARGIN,
    footprints,
    reserved_radius,
    reserved_steps,
)
from brace.plan import plan_release

R = 0.8
SEED_SALT = os.environ.get("BRACE_TEST_SALT", "")  # vary the footprint tests' data


def _bank(rng, n=240, d=2, spread=6.0):
    """Clusters spread over a box, so that most rows are far from any one query."""
    centres = rng.uniform(-spread, spread, size=(12, d))
    return centres[rng.integers(0, 12, n)] + 0.35 * rng.normal(size=(n, d))


def _outside(X, fp, margin=1e-6):
    """Rows (indices) outside every footprint ball, with a relative margin."""
    d = np.linalg.norm(X[:, None, :] - fp.centres[None, :, :], axis=2)
    return np.flatnonzero(np.all(d > fp.radii[None, :] * (1 + margin), axis=1))


def _far_point(fp, d, rng):
    """A point outside every footprint (and away from the bank's range)."""
    for _ in range(1000):
        p = rng.uniform(-9.0, 9.0, size=d)
        if np.all(np.linalg.norm(fp.centres - p, axis=1) > fp.radii * 1.01 + 0.1):
            return p
    raise AssertionError("no far point found")


CASES = [
    dict(method="brace"),  # default: auto release, no correction
    dict(method="brace", release="smooth"),
    dict(method="brace", release="count"),
    dict(method="brace", release="smooth", kappa=0.0),  # correcting
    dict(method="brace", release="smooth", output_projection=False, kappa=0.0),
    dict(method="global"),
    dict(method="endpoint"),
]


TEETH = [(c, "float64") for c in CASES] + [
    (c, b) for b in ("float32", "kdtree", "auto", "mmap", "dask", "frozen", "torch")
    for c in (CASES[0], CASES[3])]


@pytest.mark.parametrize(("case", "backend"), TEETH,
                         ids=[f"{b}-" + "-".join(map(str, c.values())) for c, b in TEETH])
def test_moving_a_row_outside_every_footprint_changes_nothing(case, backend, tmp_path):
    """With the same seed, moving a row from outside every footprint of a release to
    another place outside them gives bit-identical outputs; moving one into a footprint
    changes the release for some seed (the test has teeth)."""
    rng = np.random.default_rng(zlib.crc32(f"{case}{backend}{SEED_SALT}".encode()))
    X = _bank(rng)
    d = X.shape[1]
    q = X[rng.choice(X.shape[0], 3, replace=False)] + 0.1 * rng.normal(size=(3, d))
    kw = dict(epsilon=4.0, delta=1e-5, steps=3, **case)

    def memory(bank):  # canonical sums, as PrivateMemory uses (§12.1)
        kw = dict(radius=R, canonical_sums=True)
        if backend == "float32":
            return LSRMemory(bank.astype(np.float32), **kw)
        if backend == "kdtree":
            return LSRMemory(bank, index="kdtree", **kw)
        if backend == "auto":
            return LSRMemory(bank, index="auto", **kw)
        if backend == "mmap":
            path = tmp_path / f"b{rng.integers(1 << 30)}.npy"
            np.save(path, bank)
            return LSRMemory(np.load(path, mmap_mode="r"), **kw)
        if backend == "dask":
            da = pytest.importorskip("dask.array")
            return LSRMemory(da.from_array(bank, chunks=(80, d)), **kw)
        if backend == "frozen":  # hashed once, never per call (brace.frozen_bank)
            return LSRMemory(frozen_bank(bank), **kw)
        if backend == "torch":  # the tensor's own pass (gates/torch.py)
            torch = pytest.importorskip("torch")
            return LSRMemory(torch.from_numpy(bank.copy()), **kw)
        return LSRMemory(bank, index="brute", **kw)

    Xb = X.astype(np.float32).astype(np.float64) if backend == "float32" else X
    mem = memory(Xb)
    base = private_retrieve(mem, q, seed=1, **kw)
    plan = plan_release(mem, queries=3, **{k: v for k, v in kw.items()})
    fp = footprints(plan, q, base.outputs)
    out = _outside(Xb, fp)
    assert out.size > 10, "the case must leave rows outside every footprint"
    moved = 0
    for i in rng.choice(out, size=min(4, out.size), replace=False):
        Y = Xb.copy()
        Y[i] = _far_point(fp, d, rng)
        if backend == "float32":
            Y[i] = Y[i].astype(np.float32)
        again = private_retrieve(memory(Y), q, seed=1, **kw)
        np.testing.assert_array_equal(again.outputs, base.outputs)
        if base.released_counts is not None:
            np.testing.assert_array_equal(again.released_counts, base.released_counts)
        moved += 1
    assert moved >= 1
    # teeth: a row moved onto a footprint's centre (the first step reads it) changes
    # the release for some seed
    changed = False
    for seed in range(5):
        ref = private_retrieve(mem, q, seed=seed, **kw)
        Y = Xb.copy()
        Y[out[0]] = q[0]
        got = private_retrieve(memory(Y), q, seed=seed, **kw)
        changed |= not np.array_equal(got.outputs, ref.outputs)
    assert changed


def test_reserved_balls_hold_every_footprint():
    rng = np.random.default_rng(3)
    X = _bank(rng)
    mem = LSRMemory(X, radius=R)
    q = X[:6] + 0.2
    for case in CASES:
        kw = dict(epsilon=2.0, delta=1e-5, steps=4, **case)
        plan = plan_release(mem, queries=6, **kw)
        res = private_retrieve(mem, q, seed=0, **kw)
        fp = footprints(plan, q, res.outputs)
        rr = reserved_radius(plan, q)
        dist = np.linalg.norm(fp.centres - q[fp.query], axis=1)
        assert np.all(dist + fp.radii <= rr[fp.query]), case
        steps = reserved_steps(plan, q)  # one ball per step, in the same order
        np.testing.assert_array_equal(steps.query, fp.query)
        np.testing.assert_array_equal(steps.step, fp.step)
        gap = np.linalg.norm(fp.centres - steps.centres, axis=1)
        assert np.all(gap + fp.radii <= steps.radii * (1 + 1e-12)), case
        per_query = 1 if case["method"] == "endpoint" else 4
        assert len(fp) == 6 * per_query


def _reference_footprints(res, r):
    """Footprints of a release from first principles (docs/privacy-accounting.md §12),
    one query and step at a time."""
    p = res.params
    q, Y = res.queries, res.outputs
    Q, T, _ = Y.shape
    correcting = (res.method == "brace" and p.get("release") == "smooth"
                  and p.get("kappa") is not None and float(p["kappa"]) < 1.0)
    out = []
    for i in range(Q):
        if res.method == "endpoint":
            out.append((q[i], p["steps"] * r * (1 + CLEAN_MARGIN)))
            continue
        prev = q[i]
        for t in range(1, T + 1):
            if correcting:
                far = np.linalg.norm(prev - q[i]) * (1 + GATE_MARGIN) + r * (1 + GATE_MARGIN)
                out.append((q[i], max((t + 1) * r * (1 + CLEAN_MARGIN), far)))
            else:
                out.append((prev, r * (1 + GATE_MARGIN)))
            prev = Y[i, t - 1]
    return out


def test_spent_at_matches_a_slow_reference():
    rng = np.random.default_rng(5)
    X = _bank(rng)
    pm = PrivateMemory(X, radius=R, budget=(50.0, 1e-5))
    calls = []
    for j, case in enumerate(CASES[:4] + CASES[5:]):
        q = X[rng.choice(X.shape[0], 2, replace=False)] + 0.05
        res = pm.retrieve(q, steps=3, epsilon=1.0, delta=1e-6, seed=j, **case)
        calls.append(res)
    points = np.concatenate([X[:40], rng.uniform(-9, 9, size=(20, 2))])
    got = pm.spent_at(points)
    for p, g in zip(points, got, strict=True):
        acc = RdpAccountant()
        w = np.zeros(K + 1)
        for res in calls:
            step = res.privacy.step_event
            for c, rad in _reference_footprints(res, R):
                if np.linalg.norm(p - c) <= rad:
                    acc.compose(step)
                    w += event_weights(step)
        assert g == pytest.approx(convert(w, 1e-5), rel=1e-8, abs=1e-12)
        want = acc.get_epsilon(1e-5)
        assert want <= g + 1e-12 and g <= want * 1.01 + 1e-12
    assert np.any(got == 0.0) and np.any(got > 0.0)


def test_local_never_reports_more_than_global_on_the_same_history():
    rng = np.random.default_rng(7)
    X = _bank(rng)
    local = PrivateMemory(X, radius=R, budget=(1e4, 1e-5))
    glob = PrivateMemory(X, radius=R, budget=(1e4, 1e-5), accounting="global")
    for j in range(12):
        q = X[rng.choice(X.shape[0], int(rng.integers(1, 4)), replace=False)]
        case = CASES[int(rng.integers(len(CASES)))]
        a = local.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=j, **case)
        b = glob.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=j, **case)
        np.testing.assert_array_equal(a.outputs, b.outputs)
        assert local.spent <= glob.spent + 1e-12
        assert np.all(local.spent_at(X[:30]) <= glob.spent + 1e-12)
    # queries spread over far places, without correction: local pays less
    X2 = np.concatenate([rng.normal(size=(60, 2)) * 0.3 + 10.0 * k for k in range(4)])
    local = PrivateMemory(X2, radius=R, budget=(1e4, 1e-5))
    glob = PrivateMemory(X2, radius=R, budget=(1e4, 1e-5), accounting="global")
    for j in range(8):
        q = X2[60 * (j % 4):60 * (j % 4) + 1]
        local.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=j, fresh=True)
        glob.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=j, fresh=True)
    assert local.spent < glob.spent


def _pair_weights(index, x, xp):
    inside = [np.linalg.norm(index.centres - p, axis=1) <= index.radii for p in (x, xp)]
    hit = inside[0] | inside[1]
    return index.weights[hit].sum(axis=0)


@pytest.mark.parametrize("layout", ["spread", "concentrated", "two-places"])
def test_worst_pair_bound_holds_for_sampled_pairs(layout, monkeypatch):
    """The worst-pair bound is at least the weight of every sampled pair of points
    (points drawn inside the footprints, where pairs are worst), also when the search
    stops early (its fallback bound)."""
    rng = np.random.default_rng(11)
    if layout == "spread":
        c = rng.uniform(-20, 20, size=(300, 2))
    elif layout == "concentrated":
        c = rng.normal(size=(300, 2)) * 0.5
    else:
        c = np.concatenate([rng.normal(size=(150, 2)) * 0.5,
                            rng.normal(size=(150, 2)) * 0.5 + 10.0])
    r = rng.uniform(0.5, 1.5, size=300)
    w = np.stack([event_weights(GaussianStep(float(x))) for x in rng.uniform(0.01, 0.1, 300)])
    for max_pairs in (2048, 3):
        import brace.accounting.filter as flt

        monkeypatch.setattr(flt, "_MAX_PAIRS", max_pairs)
        index = FootprintIndex(2)
        for s in range(0, 300, 50):  # incrementally, as releases arrive
            index.add(c[s:s + 50], r[s:s + 50], w[s:s + 50])
        bound = index.worst_pair()
        assert np.all(bound <= index.global_weights())
        pts = c[rng.integers(0, 300, 400)] + rng.normal(size=(400, 2)) * 0.5
        for a in range(0, 400, 2):
            pw = _pair_weights(index, pts[a], pts[a + 1])
            assert np.all(pw <= bound + 1e-12)


def test_random_workloads_keep_every_pair_within_the_budget():
    """Property of the filter: random calls until the budget refuses them; for random
    neighbour pairs (x, x'), the steps whose footprints hold x or x' satisfy the filter's
    condition at some fixed order (so the pair is (ε, δ)-DP by §12), and their composition
    converts to at most the budget's ε."""
    rng = np.random.default_rng(13)
    for _ in range(2):
        X = _bank(rng, spread=4.0)
        budget = (float(rng.uniform(2.0, 4.0)), 1e-5)
        pm = PrivateMemory(X, radius=R, budget=budget)
        results = []
        refused = 0
        for j in range(40):
            q = X[rng.choice(X.shape[0], int(rng.integers(1, 3)), replace=False)]
            case = CASES[int(rng.integers(len(CASES)))]
            try:  # a few (ε, T) values, so that the release plans are reused
                results.append(pm.retrieve(q, steps=int(rng.integers(1, 4)),
                                           epsilon=float(rng.choice([0.5, 1.0, 2.0])),
                                           delta=1e-7, seed=j, **case))
            except BudgetExceededError:
                refused += 1
        assert refused > 0 and results
        spec = pm.filter
        B = spec.thresholds
        cand = np.concatenate([X, rng.uniform(-6, 6, size=(50, 2))])
        for _ in range(150):
            x, xp = cand[rng.integers(len(cand))], cand[rng.integers(len(cand))]
            w = np.zeros(K + 1)
            for res in results:
                ev = event_weights(res.privacy.step_event)
                for c, rad in _reference_footprints(res, R):
                    if np.linalg.norm(x - c) <= rad or np.linalg.norm(xp - c) <= rad:
                        w += ev
            assert w[K] <= spec.delta_direct
            assert np.any(w[list(spec.orders)] <= B)
            assert convert(w, budget[1]) <= budget[0] + 1e-9


def test_filter_thresholds_convert_back_to_the_budget():
    spec = FilterSpec.for_budget(8.0, 1e-5)
    assert len(spec.orders) == 2 and spec.delta_direct == 5e-6
    a = ORDERS[list(spec.orders)]
    d_a = (1e-5 - spec.delta_direct) / 2
    eps = spec.thresholds + np.log((a - 1) / a) - (math.log(d_a) + np.log(a)) / (a - 1)
    np.testing.assert_allclose(eps - math.log1p(-spec.delta_direct), 8.0, rtol=1e-12)
    # the orders bracket the Gaussian optimum of the budget and depend on it only
    assert spec == FilterSpec.for_budget(8.0, 1e-5)
    assert FilterSpec.for_budget(1.0, 1e-5).orders != spec.orders
    w = np.zeros(K + 1)
    assert spec.admits(w) and spec.usage(w) == 0.0
    w[list(spec.orders)] = spec.thresholds * 1.0000001
    assert not spec.admits(w)
    w[spec.orders[0]] = spec.thresholds[0]
    assert spec.admits(w)
    w[K] = spec.delta_direct * 1.01
    assert not spec.admits(w)
    with pytest.raises(ValueError, match="delta_direct"):
        FilterSpec(8.0, 1e-5, spec.orders, 1e-5)


def test_refusal_for_delta_names_delta():
    X = _bank(np.random.default_rng(2))
    pm = PrivateMemory(X, radius=R, budget=(50.0, 1e-5))
    with pytest.raises(BudgetExceededError, match="delta is the problem") as info:
        pm.retrieve(X[:40], steps=3, epsilon=1.0, delta=5e-6, release="count", seed=0)
    assert info.value.reason == "delta" and len(pm.releases) == 0
    # the count event spends part of δ directly
    assert event_weights(CountedGaussianStep(0.1, 0.2, 1e-7))[K] == pytest.approx(1e-7)


def test_far_rows_are_charged_nothing():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(100, 2)) * 0.3
    b = rng.normal(size=(100, 2)) * 0.3 + 30.0
    X = np.concatenate([a, b])
    pm = PrivateMemory(X, radius=R, budget=(8.0, 1e-5))
    for j in range(5):
        pm.retrieve(a[j:j + 2], steps=3, epsilon=1.0, seed=j)
    assert np.all(pm.spent_at(b) == 0.0)
    assert np.all(pm.spent_at(a[:5]) > 0.0)
    glob = PrivateMemory(X, radius=R, budget=(8.0, 1e-5), accounting="global")
    for j in range(5):
        glob.retrieve(a[j:j + 2], steps=3, epsilon=1.0, seed=j)
    assert float(np.max(pm.spent_at(a))) <= pm.spent <= glob.spent


@pytest.mark.parametrize("index", ["auto", "brute", "kdtree"])
def test_a_query_does_not_depend_on_rows_in_another_querys_footprints(index):
    """Footprints are per step: moving a row that only another query's steps read must
    leave this query's outputs bit-identical (the sums of a gate depend on its members
    only, whatever path, tile or backend another gate's density selects)."""
    rng = np.random.default_rng(21)
    dense = rng.normal(size=(3000, 2)) * 0.3  # one crowded place: a dense gate
    sparse = rng.normal(size=(40, 2)) * 0.3 + 20.0  # a quiet place: a sparse gate
    far = rng.uniform(-60, -40, size=(2000, 2))
    X = np.concatenate([dense, sparse, far])
    q = np.array([[0.0, 0.0], [20.0, 20.0]])
    kw = dict(method="brace", epsilon=4.0, delta=1e-5, steps=3, seed=3)
    mem = LSRMemory(X, radius=R, index=index, canonical_sums=True)
    base = private_retrieve(mem, q, **kw)
    plan = plan_release(mem, queries=2, **{k: v for k, v in kw.items() if k != "seed"})
    fp = footprints(plan, q, base.outputs)
    mine = fp.query == 1
    d = np.linalg.norm(X[:, None, :] - fp.centres[None, mine, :], axis=2)
    others = np.flatnonzero(np.all(d > fp.radii[None, mine] * 1.001, axis=1)[:3000])
    changed_other = False
    for i in rng.choice(others, 6, replace=False):
        Y = X.copy()
        Y[i] = X[i] + rng.normal(size=2) * 0.05  # stays in query 0's crowded place
        got = private_retrieve(LSRMemory(Y, radius=R, index=index, canonical_sums=True),
                               q, **kw)
        np.testing.assert_array_equal(got.outputs[1], base.outputs[1])
        changed_other |= not np.array_equal(got.outputs[0], base.outputs[0])
    assert changed_other  # the moved rows are read by query 0


def test_canonical_sums_do_not_depend_on_the_other_gates_of_a_tile(monkeypatch):
    """The dense pass chooses a GEMM or a sparse product per tile by the density of every
    gate in it, and the two may differ in the last bits; with canonical sums a centre's
    sum is the same whatever the other centres of the pass (issue: footprints are per
    step): its gate rows added in row order.

    The test's teeth do not depend on the BLAS (whether its GEMM happens to round like
    the row-order sum, as it may with some numpy builds): it checks which path sums each tile
    (the crowded one: a GEMM without canonical sums, the row-order product with them)
    and that the canonical sum is the row-order sum itself."""
    import brace.gates.dense as dense
    from brace.gates.dense import direct_sqdist, gate_pass

    rng = np.random.default_rng(8)
    X = rng.normal(size=(2048, 8)) * 1e3 + rng.normal(size=(2048, 8))  # one row block
    c = X[:1] + 1.0
    crowd = np.repeat(X[1:2], 40, axis=0)  # a dense neighbour gate flips the tile's path
    r = 2.5e3
    alone = gate_pass(X, None, c, r, canonical=True).sums[0]
    crowded = gate_pass(X, None, np.concatenate([c, crowd]), r, canonical=True).sums[0]
    assert np.array_equal(alone, crowded)
    members = X[direct_sqdist(X, c[0]) <= r * r]
    assert 1 < members.shape[0] < X.shape[0]
    assert np.array_equal(alone, np.cumsum(members, axis=0)[-1])  # row order, float64
    # the teeth: without canonical sums the crowded tile is a GEMM, the lone gate is not
    sparse = []
    real = dense.csr_gate_sums
    monkeypatch.setattr(dense, "csr_gate_sums",
                        lambda cnt, *a: sparse.append(cnt.size) or real(cnt, *a))
    gate_pass(X, None, np.concatenate([c, crowd]), r)
    assert sparse == []
    gate_pass(X, None, c, r)
    assert sparse == [1]
    # ... and with canonical sums the crowded tile is summed row by row all the same
    gate_pass(X, None, np.concatenate([c, crowd]), r, canonical=True)
    assert sparse == [1, 41]


def test_the_index_keeps_exact_neighbour_sums_through_adds_and_probes():
    """U_i (the weight of the footprints meeting i) after incremental adds, bulk adds
    and probes equals a brute-force recomputation; a probe leaves no trace."""
    rng = np.random.default_rng(17)
    c = np.concatenate([rng.normal(size=(120, 3)), rng.normal(size=(80, 3)) + 4.0])
    r = rng.uniform(0.3, 1.2, size=200)
    r[7] = np.inf  # a ball that meets everything (no projection)
    w = np.stack([event_weights(GaussianStep(float(x))) for x in rng.uniform(0.01, 0.1, 200)])

    def brute(n):
        d = np.linalg.norm(c[:n, None] - c[None, :n], axis=2)
        meet = (d <= r[:n, None] + r[None, :n])
        return meet.astype(float) @ np.where(np.isfinite(w[:n]), w[:n], 0.0)

    index = FootprintIndex(3)
    index.add(c[:90], r[:90], w[:90])  # bulk
    for s0 in range(90, 200, 7):  # incremental
        index.add(c[s0:s0 + 7], r[s0:s0 + 7], w[s0:s0 + 7])
        n = min(s0 + 7, 200)
        np.testing.assert_allclose(index.U, brute(n), rtol=1e-12)
    before = (index.U.copy(), index.total.copy(), len(index))
    worst = index.worst_pair()
    probe = index.worst_pair([(c[:2] + 0.1, np.array([1.0, 50.0]), w[:2])])
    assert np.all(probe >= worst)
    np.testing.assert_array_equal(index.U, before[0])
    np.testing.assert_array_equal(index.total, before[1])
    assert len(index) == before[2]
    np.testing.assert_array_equal(index.worst_pair(), worst)
    for i in (0, 7, 150):
        np.testing.assert_array_equal(
            index.neighbours(i),
            np.flatnonzero(np.linalg.norm(c - c[i], axis=1) <= r + r[i]))


def test_bulk_loads_through_the_kd_tree_match_brute_force():
    rng = np.random.default_rng(19)
    n = 2200  # n² above the bulk threshold: neighbour pairs come from KD-trees
    c = rng.normal(size=(n, 3)) * 3.0
    c[5] = c[4]  # distance exactly 0
    r = rng.uniform(0.2, 0.6, size=n)
    w = np.broadcast_to(event_weights(GaussianStep(0.02)), (n, K + 1))
    index = FootprintIndex(3)
    index.add(c, r, w)
    d = np.linalg.norm(c[:, None] - c[None, :], axis=2)
    want = (d <= r[:, None] + r[None, :]).astype(float) @ w
    np.testing.assert_allclose(index.U, want, rtol=1e-12)
