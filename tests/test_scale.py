"""Scale backends (docs/scale.md): float32 banks, the KD-tree index, memory-mapped and
Dask banks give the gate statistics of the brute-force reference exactly (counts,
memberships, pair counts, near rows), sums to float64 rounding; the bank is never copied
and an edit after validation is refused; bad dtypes get clear errors.

The reference is the canonical definition, row by row in float64:
``member(i, c) ⟺ Σ_j (float64(X_ij) − c_j)² ≤ fl(r·r)``.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import brace.gates.dense as dense_mod
import brace.memory as memory_mod
from brace._fingerprint import bank_fingerprint
from brace.gates.dense import band_coefficients, direct_sqdist, gate_pass
from brace.memory import LSRMemory


def ref_stats(X, Y, r, pairs, near, R):
    X64 = np.asarray(X, dtype=np.float64)
    d2 = np.array([direct_sqdist(X64, y) for y in Y])
    mask = d2 <= r * r
    sums = mask.astype(np.float64) @ X64
    pc = (mask[pairs[0]] & mask[pairs[1]]).sum(1)
    nd = np.sqrt(d2[near])
    return mask, sums, pc, [np.sort(row[row <= R]) for row in nd]


def check_against_ref(mem, X, Y, r, rng, *, tol=0.0):
    m = Y.shape[0]
    pairs = (rng.integers(0, m, 2 * m), rng.integers(0, m, 2 * m))
    near = np.unique(rng.integers(0, m, max(1, m // 2)))
    R = 2.0 * r
    mask, sums, pc, nd = ref_stats(X, Y, r, pairs, near, R)
    gp = mem.gate_pass(Y, pairs=pairs, near_centres=near, near_radius=R, near_tolerance=tol)
    np.testing.assert_array_equal(gp.counts, mask.sum(1))
    np.testing.assert_array_equal(gp.pair_counts, pc)
    # a row missing from or added to a gate moves its sum by the whole row
    np.testing.assert_allclose(gp.sums, sums, rtol=1e-12, atol=1e-9 * (1 + np.abs(X).max()))
    for k in range(near.size):
        got = np.sort(gp.near_dist[gp.near_rows == k])
        if tol == 0:
            np.testing.assert_array_equal(got, nd[k])
        else:  # every row within R reported, each within tol of its exact distance
            assert got.size >= nd[k].size
            np.testing.assert_allclose(got[: nd[k].size], nd[k], atol=tol, rtol=0)
    np.testing.assert_array_equal(mem.gate(Y), mask)
    return gp


def boundary_instance(dtype, offset, d, rng, r):
    """Centres on a dyadic grid near ``offset``; rows exactly on the sphere, one ulp (of
    the bank dtype) inside and outside along each axis, random rows, and far rows whose
    norms dwarf the rest."""
    step = 8.0 if (dtype == np.float32 and offset >= 1e8) else 1 / 8
    Y = offset + rng.integers(-64, 64, size=(6, d)) * step
    pts = []
    for y in Y:
        for j in range(d):
            for s in (1.0, -1.0):
                p = y.astype(dtype)
                p[j] = dtype(y[j] + s * r)
                pts += [p.copy()]
                for direction in (np.inf, -np.inf):
                    q = p.copy()
                    q[j] = np.nextafter(p[j], dtype(direction))
                    pts.append(q)
    X = np.array(pts, dtype=dtype)
    noise = (Y[0] + rng.normal(scale=r, size=(40, d))).astype(dtype)
    # at the edge of the accepted input range (MAX_COORD: 2^400 for float64)
    far = np.full((3, d), 1e18 if dtype == np.float32 else 2.0**400, dtype=dtype)
    far[1] *= -1
    # centres moved by a hair off-axis: the on-sphere rows of the other axes are then
    # outside by a relative 1e-9 or so, far below the expansion's error
    shifted = Y.copy()
    shifted[:, 0] += 1e-3 * r
    return np.concatenate([X, noise, far]), np.concatenate([Y, shifted])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index", ["brute", "kdtree"])
@pytest.mark.parametrize("offset", [0.0, 1e3, 1e8])
def test_boundary_rows_identical_to_reference(dtype, index, offset):
    rng = np.random.default_rng(int(offset) % 97)
    d = 3
    r = 64.0 if (dtype == np.float32 and offset >= 1e8) else 1.0
    X, Y = boundary_instance(dtype, offset, d, rng, r)
    d2 = np.array([direct_sqdist(X.astype(np.float64), y) for y in Y])
    assert (d2 == r * r).any() and ((d2 > r * r) & (d2 < r * r * (1 + 1e-5))).any()
    mem = LSRMemory(X, radius=r, index=index)
    check_against_ref(mem, X, Y, r, rng)
    # far rows do not change the decision for the others: drop them, same statistics
    mem2 = LSRMemory(X[:-3], radius=r, index=index)
    np.testing.assert_array_equal(mem2.gate_pass(Y).counts, mem.gate_pass(Y).counts)


@pytest.mark.parametrize("d", [2, 5, 64])
def test_float32_bank_kept_and_matches_float64_decisions(d):
    rng = np.random.default_rng(d)
    n = 5000  # more than one row block
    X = (rng.normal(size=(n, d)) + rng.integers(0, 3, size=(n, 1)) * 3).astype(np.float32)
    Y = X[rng.integers(0, n, 12)].astype(np.float64) + rng.normal(scale=0.3, size=(12, d))
    r = float(np.median(np.sqrt(direct_sqdist(X, Y[0]))) / 4)
    for index in ("brute", "kdtree") if d <= 8 else ("brute",):
        mem = LSRMemory(X, radius=r, index=index)
        assert mem._bank()[0].dtype == np.float32  # no float64 copy of the bank
        gp = check_against_ref(mem, X, Y, r, rng)
        assert gp.sums.dtype == np.float64
        # the same values as a float64 bank: identical counts, sums to rounding
        g64 = LSRMemory(X.astype(np.float64), radius=r, index=index).gate_pass(Y)
        np.testing.assert_array_equal(gp.counts, g64.counts)
        np.testing.assert_allclose(gp.sums, g64.sums, rtol=1e-12, atol=1e-9)
        traj = mem.retrieve(Y, 3)
        assert traj.dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_near_distances_within_tolerance_float32(dtype):
    rng = np.random.default_rng(3)
    X = (1e3 + rng.normal(size=(3000, 8))).astype(dtype)
    Y = (1e3 + rng.normal(size=(6, 8)))
    r, tol = 2.0, 1e-3
    mem = LSRMemory(X, radius=r, index="brute")
    gp = mem.gate_pass(Y, near_centres=np.arange(6), near_radius=2 * r, near_tolerance=tol)
    for k in range(6):
        exact = np.sqrt(direct_sqdist(X, Y[k]))
        got = np.sort(gp.near_dist[gp.near_rows == k])
        want = np.sort(exact[exact <= 2 * r])
        # every row within the near radius is reported, each within tol of exact
        assert got.size >= want.size
        np.testing.assert_allclose(got[: want.size], want, atol=tol, rtol=0)


def test_group_size_bit_identical_float32():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(4000, 16)).astype(np.float32)
    Y = rng.normal(size=(10, 16))
    mem = LSRMemory(X, radius=4.0, index="brute")
    both = mem.gate_pass(np.concatenate([Y, Y[::-1]]), group_size=10)
    alone = mem.gate_pass(Y)
    np.testing.assert_array_equal(both.counts[:10], alone.counts)
    np.testing.assert_array_equal(both.sums[:10], alone.sums)


def test_band_coefficients_cover_float32_rounding():
    """The float32 band dominates the measured expansion error on adversarial rows."""
    rng = np.random.default_rng(5)
    d = 64
    X = (rng.normal(size=(3000, d)) * rng.choice([1e-3, 1, 1e3], (3000, 1))).astype(
        np.float32)
    C = rng.normal(size=(20, d)) * 10
    a, b = band_coefficients(np.float32, d, 1.0)
    e = (C.astype(np.float32) @ X.T) * np.float32(-2.0)
    e += np.einsum("ij,ij->i", X.astype(np.float64), X.astype(np.float64)).astype(
        np.float32)[None]
    e -= (1.0 - (C * C).sum(1)).astype(np.float32)[:, None]
    exact = np.array([direct_sqdist(X, c) for c in C]) - 1.0
    S = (C * C).sum(1)[:, None] + (X.astype(np.float64) ** 2).sum(1)[None]
    err = np.abs(e.astype(np.float64) - exact)
    assert (err <= a * S + b).all()
    assert err.max() > 1e-3 * (a * S + b).max()  # the bound is not vacuous


def test_sparse_and_dense_sums_agree(monkeypatch):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 5)).astype(np.float32)
    Y = rng.normal(size=(9, 5))
    ref = gate_pass(X, None, Y, 0.8)
    monkeypatch.setattr(dense_mod, "_SPARSE_DENSITY", 1.0)  # always gather
    sp = gate_pass(X, None, Y, 0.8)
    monkeypatch.setattr(dense_mod, "_SPARSE_DENSITY", 0.0)  # always the mask product
    de = gate_pass(X, None, Y, 0.8)
    for g in (sp, de):
        np.testing.assert_array_equal(g.counts, ref.counts)
        np.testing.assert_allclose(g.sums, ref.sums, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ index and threads


def test_auto_index_and_bad_settings():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(5000, 2))
    mem = LSRMemory(X, radius=0.1)
    assert mem._index(mem._state()) == "kdtree"
    assert LSRMemory(X[:100], radius=0.1)._index(LSRMemory(X[:100], radius=0.1)._state()) \
        == "brute"
    Y = rng.normal(size=(4, 2))
    np.testing.assert_array_equal(mem.gate_pass(Y).counts,
                                  LSRMemory(X, radius=0.1, index="brute").gate_pass(Y).counts)
    with pytest.raises(ValueError, match=r"index must be one of .* got 'ball'"):
        LSRMemory(X, radius=0.1, index="ball").step(Y)
    with pytest.raises(ValueError, match="threads must be >= 1. Found 0"):
        LSRMemory(X, radius=0.1, threads=0).step(Y)
    with pytest.raises(TypeError, match="threads must be an integer"):
        LSRMemory(X, radius=0.1, threads="2").step(Y)
    for t in (None, 1, 2):
        np.testing.assert_array_equal(
            LSRMemory(X, radius=0.1, threads=t, index="brute").gate_pass(Y).counts,
            mem.gate_pass(Y).counts)
    # dense gates: "auto" falls back to brute force (the choice never changes a result)
    from brace.gates.kdtree import dense_gates

    assert not dense_gates(X, Y, 0.1) and dense_gates(X, Y, 1.5)
    for r in (0.1, 1.5):
        pairs = (np.arange(4), np.arange(4)[::-1])
        gps = [LSRMemory(X, radius=r, index=i).gate_pass(Y, pairs=pairs)
               for i in ("auto", "kdtree", "brute")]
        for gp in gps[1:]:
            np.testing.assert_array_equal(gp.counts, gps[0].counts)
            np.testing.assert_array_equal(gp.pair_counts, gps[0].pair_counts)
            np.testing.assert_allclose(gp.sums, gps[0].sums, rtol=1e-12)


@pytest.mark.parametrize(("bank", "exc", "msg"), [
    (np.ones((3, 2), dtype=np.complex64), TypeError, "got dtype complex64"),
    (np.ones((3, 2), dtype=bool), TypeError, "boolean"),
    (np.array([[1.0, np.nan]], dtype=np.float32), ValueError, "1 non-finite"),
    (np.ones(3, dtype=np.float32), ValueError, r"2-D array .* got shape \(3,\)"),
])
def test_bad_float32_like_banks_refused(bank, exc, msg):
    with pytest.raises(exc, match=msg):
        LSRMemory(bank, radius=1.0).step(np.zeros(2))


# ------------------------------------------------------------------ fingerprint, mmap


def test_fingerprint_streams_and_distinguishes(tmp_path):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 7))
    f = bank_fingerprint(X, 1.0)
    assert f == bank_fingerprint(X.copy(order="F"), 1.0)  # C-order bytes
    assert f != bank_fingerprint(X, np.nextafter(1.0, 2.0))
    assert f != bank_fingerprint(X.astype(np.float32), 1.0)
    Y = X.copy()
    Y.view(np.uint64)[5, 3] ^= 1
    assert f != bank_fingerprint(Y, 1.0)
    np.save(tmp_path / "b.npy", X)
    assert bank_fingerprint(np.load(tmp_path / "b.npy", mmap_mode="r"), 1.0) == f


def test_mmap_bank_read_in_blocks_without_copy(tmp_path):
    rng = np.random.default_rng(9)
    n, d = 80_000, 32
    X = rng.normal(size=(n, d)).astype(np.float32)
    np.save(tmp_path / "bank.npy", X)
    mm = np.load(tmp_path / "bank.npy", mmap_mode="r")
    Y = X[:6].astype(np.float64) + 0.1
    mem = LSRMemory(mm, radius=6.0)
    assert mem._state().kind == "mmap" and mem._index(mem._state()) == "brute"
    mem.gate_pass(Y)  # validate outside the traced region
    tracemalloc.start()
    gp = mem.gate_pass(Y)
    traj = mem.retrieve(Y, 2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < X.nbytes / 4, (peak, X.nbytes)  # row blocks only, never a whole copy
    ref = LSRMemory(X, radius=6.0)
    np.testing.assert_array_equal(gp.counts, ref.gate_pass(Y).counts)
    np.testing.assert_array_equal(gp.sums, ref.gate_pass(Y).sums)
    np.testing.assert_array_equal(traj, ref.retrieve(Y, 2))
    # the file changed under the map: detected, not used
    w = np.load(tmp_path / "bank.npy", mmap_mode="r+")
    w[123, 4] += 1.0
    w.flush()
    with pytest.raises(memory_mod.BankMutatedError):
        mem.gate_pass(Y)
    with pytest.raises(ValueError, match="needs an in-memory bank"):
        LSRMemory(mm, radius=6.0, index="kdtree").step(Y)


@pytest.mark.parametrize("index", ["brute", "kdtree"])
def test_bank_mutated_during_a_call_is_refused(index, monkeypatch):
    """Inside one public call the bank is verified at entry and exit only; an edit made
    between two passes of the call is caught at exit and no result is returned."""
    from brace import PrivateMemory
    from brace.mechanisms import private_retrieve

    rng = np.random.default_rng(12)
    X0 = rng.normal(size=(5000, 2))
    q = X0[:3] + 0.01
    orig = LSRMemory.gate_pass
    calls = []

    def edit_after_first_pass(self, centres, **kw):
        gp = orig(self, centres, **kw)
        calls.append(1)
        if len(calls) == 1:
            np.asarray(self.bank)[17, 1] += 1e-12  # the caller's (writable) array
        return gp

    brace_kw = dict(method="brace", epsilon=4.0, delta=1e-5, steps=3, seed=0)
    for call in (lambda m: m.retrieve(q, 3),
                 lambda m: private_retrieve(m, q, **brace_kw),
                 lambda m: PrivateMemory(m.bank, radius=0.3, budget=(100.0, 1e-5))
                 .retrieve(q, **brace_kw)):
        mem = LSRMemory(X0.copy(), radius=0.3, index=index)
        mem._state()
        monkeypatch.setattr(LSRMemory, "gate_pass", edit_after_first_pass)
        calls.clear()
        with pytest.raises(memory_mod.BankMutatedError, match="fingerprint mismatch"):
            call(mem)
        assert len(calls) > 1  # the edit happened mid-call, after the entry check
        monkeypatch.setattr(LSRMemory, "gate_pass", orig)
        mem.bank = mem.bank  # same array object: still refused until reassigned anew
        with pytest.raises(memory_mod.BankMutatedError):
            mem.retrieve(q, 3)
        mem.bank = np.array(mem.bank)  # the remedy: new contents, validated afresh
        np.testing.assert_array_equal(mem.retrieve(q, 3)[:, 0], q)


def test_a_pinned_call_hashes_the_bank_twice(monkeypatch):
    """One public call reads the bank for its fingerprint at entry and at exit only (the
    passes inside skip theirs); a lone gate pass still hashes what it reads."""
    import brace._fingerprint as fp
    from brace.mechanisms import private_retrieve

    X = np.random.default_rng(14).normal(size=(3000, 8))
    mem = LSRMemory(X, radius=2.0, index="brute")
    mem.retrieve(X[:1], 1)  # validated and checked once (the first scope skips its entry hash)
    hashed = []
    orig = fp.BankHasher.update
    monkeypatch.setattr(fp.BankHasher, "update",
                        lambda self, rows: (hashed.append(rows.shape[0]), orig(self, rows)))
    for call in (lambda: mem.retrieve(X[:5], 4),
                 lambda: private_retrieve(mem, X[:5], method="brace", epsilon=4.0,
                                          delta=1e-5, steps=4, seed=0)):
        hashed.clear()
        call()
        assert sum(hashed) == 2 * X.shape[0]
    hashed.clear()
    mem.gate_pass(X[:5])
    assert sum(hashed) == X.shape[0]


def test_private_retrieve_float32_and_mmap(tmp_path):
    from brace.mechanisms import private_retrieve

    rng = np.random.default_rng(10)
    X = rng.normal(size=(500, 3)).astype(np.float32)
    np.save(tmp_path / "b.npy", X)
    q = rng.normal(size=(4, 3))
    kw = dict(method="brace", epsilon=4.0, delta=1e-5, steps=3, seed=1, return_clean=True)
    a = private_retrieve(LSRMemory(X, radius=1.0), q, **kw)
    b = private_retrieve(LSRMemory(X.astype(np.float64), radius=1.0), q, **kw)
    c = private_retrieve(LSRMemory(np.load(tmp_path / "b.npy", mmap_mode="r"), radius=1.0),
                         q, **kw)
    for res in (b, c):
        np.testing.assert_array_equal(a.gate_released, res.gate_released)
        np.testing.assert_array_equal(a.gate_clean, res.gate_clean)
        np.testing.assert_allclose(a.outputs, res.outputs, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a.smooth_sensitivity, res.smooth_sensitivity,
                                   rtol=1e-12, atol=1e-15)
    assert a.outputs.dtype == np.float64


# ------------------------------------------------------------------------------ Dask


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, memory_limit="1GiB")
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_dask_bank_map_reduce_matches_in_memory(dask_client):
    da = pytest.importorskip("dask.array")
    from brace.mechanisms import private_retrieve

    rng = np.random.default_rng(11)
    X = rng.normal(size=(9000, 6)).astype(np.float32)
    Y = X[:10].astype(np.float64) + 0.05
    bank = da.from_array(X, chunks=(2500, 3))  # column chunks are merged
    mem = LSRMemory(bank, radius=1.2)
    ref = LSRMemory(X, radius=1.2, index="brute")
    assert mem._state().kind == "dask"
    pairs = (np.arange(10), np.arange(10)[::-1])
    kw = dict(pairs=pairs, near_centres=np.arange(0, 10, 2), near_radius=2.4)
    got, want = mem.gate_pass(Y, **kw), ref.gate_pass(Y, **kw)
    np.testing.assert_array_equal(got.counts, want.counts)
    np.testing.assert_array_equal(got.pair_counts, want.pair_counts)
    np.testing.assert_allclose(got.sums, want.sums, rtol=0, atol=1e-9)
    for k in range(5):
        np.testing.assert_array_equal(np.sort(got.near_dist[got.near_rows == k]),
                                      np.sort(want.near_dist[want.near_rows == k]))
    check_against_ref(mem, X, Y, 1.2, rng)
    q = Y[:3]
    opts = dict(method="brace", epsilon=4.0, delta=1e-5, steps=3, seed=2)
    a, b = private_retrieve(mem, q, **opts), private_retrieve(ref, q, **opts)
    np.testing.assert_array_equal(a.gate_released, b.gate_released)
    np.testing.assert_allclose(a.outputs, b.outputs, rtol=1e-9, atol=1e-9)
    with pytest.raises(TypeError, match=r"float32 or float64; got dtype int64.*astype"):
        LSRMemory(da.from_array(np.ones((4, 2), dtype=np.int64)), radius=1.0).step(q[0, :2])
    # a chunk whose bytes differ from those validated is refused (simulated by altering
    # the recorded digest; dask arrays built from numpy snapshot their data)
    mem._state().extra["chunk_digests"][1] = "0" * 64
    with pytest.raises(memory_mod.BankMutatedError, match="chunk"):
        mem.gate_pass(Y)
    bad = da.from_array(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="1 non-finite"):
        LSRMemory(bad, radius=1.0).step(np.zeros(2))


# --------------------------------------------------------------- property: any scale


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), log_off=st.integers(-3, 9), d=st.integers(1, 12),
       dtype=st.sampled_from(["float32", "float64"]), quant=st.booleans())
def test_counts_equal_reference_at_any_offset(seed, log_off, d, dtype, quant):
    """Random banks around an offset 10^k (k ∈ [-3, 9]), coordinates optionally on a
    coarse grid (many exact ties), radius at a row's exact distance: counts and pair
    counts equal the reference for every backend."""
    rng = np.random.default_rng(seed)
    off = 10.0**log_off
    X = off + rng.normal(size=(300, d)) * max(1.0, off * 1e-4)
    if quant:
        X = np.round(X * 4) / 4
    X = X.astype(dtype)
    Y = np.asarray(X[rng.integers(0, 300, 5)], dtype=np.float64)
    Y[1:] += rng.normal(size=(4, d)) * 0.5
    r = float(np.sqrt(direct_sqdist(X[7], Y[0]))) or 1.0  # row 7 exactly on the sphere
    ref = np.array([direct_sqdist(X, y) <= r * r for y in Y])
    pairs = (np.array([0, 1, 2]), np.array([3, 4, 0]))
    for index in ("brute", "kdtree"):
        gp = LSRMemory(X, radius=r, index=index).gate_pass(Y, pairs=pairs)
        np.testing.assert_array_equal(gp.counts, ref.sum(1))
        np.testing.assert_array_equal(gp.pair_counts, (ref[pairs[0]] & ref[pairs[1]]).sum(1))


def test_uq_on_dask_and_mmap_banks_matches_in_memory(dask_client, tmp_path, monkeypatch):
    """``brace.uq`` on a Dask bank runs its bank sums on the workers (the client never
    converts the Dask array) and on a memory-mapped bank block by block; counts equal the
    in-memory estimate exactly, the covariances, Jacobians and regions to 1e-9."""
    da = pytest.importorskip("dask.array")
    from brace import uq
    from brace.mechanisms import private_retrieve

    rng = np.random.default_rng(13)
    X = rng.normal(size=(3000, 3))
    q = rng.normal(size=(4, 3)) * 0.3
    np.save(tmp_path / "b.npy", X)
    ref = LSRMemory(X, radius=0.9, index="brute")
    banks = {"dask": LSRMemory(da.from_array(X, chunks=(700, 3)), radius=0.9),
             "mmap": LSRMemory(np.load(tmp_path / "b.npy", mmap_mode="r"), radius=0.9)}
    want = uq.sampling_covariance(ref, q, 3)
    res = private_retrieve(ref, q, method="brace", epsilon=8.0, delta=1e-5, steps=3, seed=3)
    want_uq = uq.analyze(ref, res, privacy="linear")

    def no_client_copy(self, *a, **k):
        raise AssertionError("the Dask bank was converted on the client")

    for kind, mem in banks.items():
        with monkeypatch.context() as mp:
            mp.setattr(da.Array, "__array__", no_client_copy)
            got = uq.sampling_covariance(mem, q, 3)
            got_uq = uq.analyze(mem, res, privacy="linear")
        np.testing.assert_array_equal(got.gate_counts, want.gate_counts)
        assert got.gate_counts.min() >= 2
        for name in ("cov", "jacobians", "boundary_moment", "trajectory"):
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-9,
                                       atol=1e-12, err_msg=f"{kind}: {name}")
        np.testing.assert_allclose(got_uq.privacy_cov, want_uq.privacy_cov, rtol=1e-9)
        for target in ("bank", "population"):
            a, b = got_uq.confidence_region(target), want_uq.confidence_region(target)
            np.testing.assert_array_equal(a.centre, b.centre)
            np.testing.assert_allclose(a.cov, b.cov, rtol=1e-9, err_msg=f"{kind}: {target}")
    # the bootstrap: blocked on the memory map (same draws), refused on Dask
    kw = dict(estimator="bootstrap", n_boot=20, seed=5)
    np.testing.assert_allclose(uq.sampling_covariance(banks["mmap"], q, 2, **kw).cov,
                               uq.sampling_covariance(ref, q, 2, **kw).cov, rtol=1e-9)
    with pytest.raises(ValueError, match="estimator='bootstrap' is not supported on a Dask"):
        uq.sampling_covariance(banks["dask"], q, 2, **kw)


def test_a_first_call_hashes_the_bank_at_validation_and_exit(monkeypatch):
    """A fresh memory's first call does not re-hash the bank it has just validated (the
    validation's digest is the entry check); the exit check still reads it."""
    import brace._fingerprint as fp

    X = np.random.default_rng(15).normal(size=(3000, 8))
    hashed = []
    orig = fp.BankHasher.update
    monkeypatch.setattr(fp.BankHasher, "update",
                        lambda self, rows: (hashed.append(rows.shape[0]), orig(self, rows)))
    mem = LSRMemory(X, radius=2.0, index="brute")
    mem.retrieve(X[:5], 3)
    assert sum(hashed) == 2 * X.shape[0]
    hashed.clear()
    mem.retrieve(X[:5], 3)  # validated before: entry and exit
    assert sum(hashed) == 2 * X.shape[0]


def test_sparse_and_dense_sums_agree_and_counts_match_direct():
    """Gate sums from the CSR path (sparse gates) and the dense mask GEMM (dense gates)
    both equal float64 sums of the direct-formula members."""
    from brace import memory as mm

    rng = np.random.default_rng(16)
    X = rng.normal(size=(5000, 16)).astype(np.float32)
    Y = rng.normal(size=(40, 16))
    for r in (3.5, 6.0):  # sparse (≈1 % of the bank) and dense (≈70 %) gates
        gp = LSRMemory(X, radius=r, index="brute").gate_pass(Y)
        d2 = mm.direct_sqdist(X[None, :, :], Y[:, None, :])
        mk = d2 <= r * r
        assert np.array_equal(gp.counts, mk.sum(1))
        np.testing.assert_allclose(gp.sums, mk.astype(np.float64) @ X.astype(np.float64),
                                   rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("index", ["brute", "kdtree"])
def test_duplicate_centres_are_passed_once_with_identical_counts(index, monkeypatch):
    """Bit-identical centres share one pass: counts equal the pass without sharing, and
    each copy gets exactly the statistics of its distinct centre."""
    from brace import memory as mm

    rng = np.random.default_rng(17)
    X = rng.normal(size=(6000, 3))
    U = rng.normal(size=(7, 3))
    pick = rng.integers(0, 7, size=40)
    Y = U[pick]
    mem = LSRMemory(X, radius=0.8, index=index)
    gp = mem.gate_pass(Y)
    gu = mem.gate_pass(U)
    assert np.array_equal(gp.counts, gu.counts[pick])
    assert np.array_equal(gp.sums, gu.sums[pick])
    monkeypatch.setattr(mm, "_DEDUPE", False)
    g0 = mem.gate_pass(Y)
    assert np.array_equal(gp.counts, g0.counts)
    np.testing.assert_allclose(gp.sums, g0.sums, rtol=1e-12, atol=1e-12)
    first, inv = mm._distinct_rows(np.array([[0.0, 1.0], [-0.0, 1.0], [0.0, 1.0]]))
    assert first.tolist() == [0, 1] and inv.tolist() == [0, 1, 0]  # -0.0 is kept apart


@pytest.mark.parametrize("scale", [1e-120, 1.0, 1e119])
def test_kdtree_members_match_brute_on_the_sphere_at_any_scale(scale):
    """Rows on the sphere and one ulp either side: the tree's shortcut (its own distance
    decides rows well inside) and the direct recomputation agree with brute force, also
    where the shortcut is off (radius outside [1e-100, 1e100])."""
    rng = np.random.default_rng(18)
    c = rng.normal(size=(5, 2))
    ang = rng.uniform(0, 2 * np.pi, size=(5, 300))
    ring = np.stack([np.cos(ang), np.sin(ang)], -1)
    pts = c[:, None, :] + ring * np.array([1.0, np.nextafter(1.0, 0), np.nextafter(1.0, 2)]
                                          ).repeat(100)[None, :, None]
    X = np.concatenate([pts.reshape(-1, 2), rng.normal(size=(4000, 2))]) * scale
    C = c * scale
    a = LSRMemory(X, radius=scale, index="kdtree").gate_pass(C)
    b = LSRMemory(X, radius=scale, index="brute").gate_pass(C)
    assert np.array_equal(a.counts, b.counts)
    assert 0 < a.counts.min() and a.counts.max() < X.shape[0]
    np.testing.assert_allclose(a.sums, b.sums, rtol=1e-12, atol=1e-12 * scale)
