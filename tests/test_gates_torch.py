"""Torch banks (brace.gates.torch): the gate pass on the tensor's device against the numpy
pass — counts, memberships, pair counts and near distances identical, canonical sums bit
for bit, other sums within the rounding bound — and everything above it unchanged:
certificates, local accounting, private_retrieve and PrivateMemory (docs/scale.md,
"Torch banks"). Runs on the CPU; skipped where torch is absent."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import brace.gates.torch as torch_mod  # noqa: E402
from brace import BankMutatedError, LSRMemory, PrivateMemory, certificate, private_retrieve  # noqa: E402
from brace._fingerprint import bank_fingerprint  # noqa: E402
from brace.footprints import footprints  # noqa: E402
from brace.gates.dense import direct_sqdist, gate_pass, mean_rounding_bound  # noqa: E402
from brace.ledger import LedgerError  # noqa: E402
from brace.ledger import bank_fingerprint as ledger_fingerprint  # noqa: E402
from brace.plan import plan_release  # noqa: E402
from test_certificate import (  # noqa: E402
    _assert_smooth,
    _neighbour,
    _smoothness_instance,
    _weak_bank,
)
from test_local_accounting import CASES, R, _bank, _far_point, _outside  # noqa: E402

_U = float(np.finfo(np.float64).eps) / 2.0


def _t(X):
    return torch.from_numpy(np.ascontiguousarray(X))


def _pass(mem, C, **kw):
    with mem._pinned():  # validated once; no per-pass hashing
        return mem.gate_pass(C, **kw)


def _same(a, b, sums=True):
    np.testing.assert_array_equal(a.counts, b.counts)
    if sums:
        np.testing.assert_array_equal(a.sums, b.sums)
    if a.pair_counts is not None:
        np.testing.assert_array_equal(a.pair_counts, b.pair_counts)
    if a.near_rows is not None:
        for i in np.union1d(a.near_rows, b.near_rows):
            np.testing.assert_array_equal(np.sort(a.near_dist[a.near_rows == i]),
                                          np.sort(b.near_dist[b.near_rows == i]))


def _instance(seed, d, offset, dtype):
    """The certificate tests' hold-out style: rows on and ±1e-15 of the radius around the
    query and the clean states, inside rows, far rows, duplicates, an offset."""
    rng = np.random.default_rng(seed)
    n, r = 300, float(rng.uniform(0.3, 1.0))
    q0 = rng.normal(0, 1, d)
    clean = LSRMemory(q0 + rng.normal(0, 0.5 * r, (n, d)), radius=r).retrieve(q0, 3)[1:]
    X = (_weak_bank(rng, n, d, r, q0, clean, offset) + offset).astype(dtype)
    C = np.concatenate([q0[None], clean, q0 + rng.normal(0, r, (5, d))]) + offset
    C = np.concatenate([C, X[:4].astype(np.float64)])  # centres on rows
    return X, C, r


# ----------------------------------------------------------------------- the formula


def test_importing_brace_does_not_import_torch():
    code = ("import sys, numpy as np, brace; brace.LSRMemory(np.eye(3), radius=1.0)"
            ".step(np.zeros(3)); assert 'torch' not in sys.modules, 'torch imported'")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("d", [1, 2, 7, 8, 9, 16, 100, 128, 129, 384, 1000])
def test_direct_formula_on_the_device_is_numpys_bit_for_bit(d):
    rng = np.random.default_rng(d)
    X = rng.normal(size=(64, d)) * rng.exponential(1.0, (64, d)) ** 3 + 1e3 * rng.normal()
    c = rng.normal(size=(64, d))
    got = torch_mod.direct_sqdist_torch(_t(X), _t(c)).numpy()
    np.testing.assert_array_equal(got, direct_sqdist(X, c))


# ------------------------------------------------------------------ the pass vs numpy


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 3, 12, 40])
@pytest.mark.parametrize("offset", [0.0, 1e6, 1e8])
def test_pass_equals_numpy_on_boundary_instances(dtype, d, offset):
    X, C, r = _instance(zlib.crc32(f"{dtype}{d}{offset}".encode()), d, offset, dtype)
    m = C.shape[0]
    kw = dict(pairs=(np.arange(m // 2), np.arange(m // 2, 2 * (m // 2))),
              near_centres=np.arange(0, m, 2), near_radius=2.0 * r, near_tolerance=0.0,
              group_size=3)
    for canon in (True, False):
        a = _pass(LSRMemory(X, radius=r, index="brute", canonical_sums=canon), C, **kw)
        b = _pass(LSRMemory(_t(X), radius=r, canonical_sums=canon), C, **kw)
        _same(a, b, sums=canon)  # near distances direct (tolerance 0): bit for bit
        scale = float(np.abs(C).max())
        bound = mean_rounding_bound(X.shape[0], d, r, scale)
        ma, mb = a.means(C), b.means(C)
        assert np.all(np.linalg.norm(ma - mb, axis=1) <= 2.0 * bound)


def test_memberships_do_not_rely_on_the_device_summation_order(monkeypatch):
    """Perturb the device's direct formula by a few ulps (another summation order): pairs
    within the tie band go to numpy's formula, so counts stay exactly numpy's."""
    X, C, r = _instance(5, 12, 0.0, np.float64)
    real = torch_mod.direct_sqdist_torch
    monkeypatch.setattr(torch_mod, "direct_sqdist_torch",
                        lambda a, b: real(a, b) * (1.0 + 8.0 * _U))
    a = _pass(LSRMemory(X, radius=r, index="brute"), C)
    b = _pass(LSRMemory(_t(X), radius=r), C)
    np.testing.assert_array_equal(a.counts, b.counts)
    # teeth: the perturbed formula alone would decide some pair differently
    d2 = direct_sqdist(X[:, None, :], C[None, :, :])
    assert np.any((d2 * (1.0 + 8.0 * _U) <= r * r) != (d2 <= r * r))


def test_tiles_sparse_and_dense_super_blocks_and_huge_rows(monkeypatch):
    """A dense gate beside sparse ones, several super-blocks with a partial last tile,
    rows and centres whose norms get an infinite band: identical to numpy, and the
    super-block size does not change a bit."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(5000, 8)) * 1e3 + rng.normal(size=(5000, 8))
    X[100:110] = 1e16 * rng.normal(size=(10, 8))  # huge norms: always recomputed
    X[200:2200] = X[0] + rng.normal(size=(2000, 8))  # a crowd: dense tiles
    X = X.astype(np.float32).astype(np.float64)
    C = np.concatenate([X[:1] + 1.0, X[50:60], X[100:102], X[1:2] + 0.5])
    r = 2.5e3
    for dt in (np.float32, np.float64):
        for canon in (True, False):
            a = _pass(LSRMemory(X.astype(dt), radius=r, index="brute", canonical_sums=canon),
                      C)
            b = _pass(LSRMemory(_t(X.astype(dt)), radius=r, canonical_sums=canon), C)
            _same(a, b, sums=canon)
            monkeypatch.setattr(torch_mod, "_TILE_ELEMS_CPU", 1)  # 2048 rows per call
            c = _pass(LSRMemory(_t(X.astype(dt)), radius=r, canonical_sums=canon), C)
            monkeypatch.undo()
            _same(b, c)


def test_canonical_sums_do_not_depend_on_the_other_gates_of_a_tile(monkeypatch):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(2048, 8)) * 1e3 + rng.normal(size=(2048, 8))
    c = X[:1] + 1.0
    crowd = np.repeat(X[1:2], 40, axis=0)  # a dense neighbour gate: the tile is dense
    r = 2.5e3
    sparse_tiles = []
    real = torch_mod._sparse_sums
    monkeypatch.setattr(torch_mod, "_sparse_sums",
                        lambda *a: sparse_tiles.append(int(a[3].sum())) or real(*a))
    mem = LSRMemory(_t(X), radius=r, canonical_sums=True)
    alone = _pass(mem, c).sums[0]
    crowded = _pass(mem, np.concatenate([c, crowd]), group_size=64).sums[0]  # no dedupe
    np.testing.assert_array_equal(alone, crowded)
    np.testing.assert_array_equal(alone, gate_pass(X, None, c, r, canonical=True).sums[0])
    assert sparse_tiles == [1, 1]
    _pass(LSRMemory(_t(X), radius=r), np.concatenate([c, crowd]), group_size=64)
    assert sparse_tiles == [1, 1]  # without canonical sums the dense tile is a GEMM


def test_host_side_computations_and_public_api_match_numpy():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(500, 5))
    Y = X[:7] + 0.1
    a, b = LSRMemory(X, radius=1.2, index="brute"), LSRMemory(_t(X), radius=1.2)
    np.testing.assert_array_equal(a.gate(Y), b.gate(Y))
    np.testing.assert_array_equal(a.gate(Y, counts=True), b.gate(Y, counts=True))
    np.testing.assert_array_equal(a.energy(Y), b.energy(Y))
    np.testing.assert_array_equal(a.gradient(Y), b.gradient(Y))
    np.testing.assert_allclose(a.retrieve(Y, 4), b.retrieve(Y, 4), rtol=0, atol=1e-13)
    out = b.retrieve(Y, 2)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    assert b.n_memories == 500 and b.dim == 5
    with pytest.raises(ValueError, match="in-memory bank"):
        LSRMemory(_t(X), radius=1.0, index="kdtree").step(Y)


def test_pass_restores_torch_settings():
    X = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)
    prec, thr = torch.get_float32_matmul_precision(), torch.get_num_threads()
    try:
        torch.set_float32_matmul_precision("medium")  # would allow TF32 / bf16 products
        a = _pass(LSRMemory(X, radius=1.0, index="brute", canonical_sums=True), X[:20] * 1.0)
        b = _pass(LSRMemory(_t(X), radius=1.0, canonical_sums=True, threads=1),
                  X[:20].astype(np.float64))
        _same(a, b)
        assert torch.get_float32_matmul_precision() == "medium"
        assert torch.get_num_threads() == thr
    finally:
        torch.set_float32_matmul_precision(prec)


# ----------------------------------------------------------------- bank handling


def test_bad_torch_banks_are_refused():
    good = torch.ones((4, 3), dtype=torch.float64)
    with pytest.raises(ValueError, match="non-finite"):
        LSRMemory(torch.tensor([[0.0, float("nan")]]), radius=1.0).step(np.zeros(2))
    with pytest.raises(ValueError, match="2-D"):
        LSRMemory(torch.ones(5), radius=1.0).step(np.zeros(3))
    with pytest.raises(ValueError, match="2-D"):
        LSRMemory(torch.ones((2, 2, 2)), radius=1.0).step(np.zeros(3))
    with pytest.raises(ValueError, match="empty"):
        LSRMemory(torch.ones((0, 3)), radius=1.0).step(np.zeros(3))
    for dt in (torch.int64, torch.float16, torch.bool):
        with pytest.raises(TypeError, match="torch.float32 or torch.float64"):
            LSRMemory(good.to(dt), radius=1.0).step(np.zeros(3))
    with pytest.raises(TypeError, match="dense"):
        LSRMemory(good.to_sparse(), radius=1.0).step(np.zeros(3))


def test_requires_grad_is_used_detached():
    X = torch.randn(50, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    Xg = X.clone().requires_grad_(True)
    y = X[:3].numpy() + 0.05
    got = LSRMemory(Xg, radius=0.9).retrieve(y, 3)
    np.testing.assert_array_equal(got, LSRMemory(X, radius=0.9).retrieve(y, 3))
    assert Xg.grad is None


def test_an_edited_torch_bank_is_detected():
    X = torch.randn(300, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mem = LSRMemory(X, radius=1.0)
    mem.step(np.zeros(3))
    X[5, 0] += 1.0
    with pytest.raises(BankMutatedError, match="mem.bank = new"):
        mem.step(np.zeros(3))
    with pytest.raises(BankMutatedError):
        mem.retrieve(np.zeros(3), 2)
    mem.bank = X.clone()  # a new tensor is validated afresh
    mem.step(np.zeros(3))


def test_fingerprint_streams_a_torch_bank_block_by_block(monkeypatch):
    import brace._fingerprint as fp

    X = np.random.default_rng(3).normal(size=(1000, 6)).astype(np.float32)
    seen = []
    real = fp.host_array
    monkeypatch.setattr(fp, "_BLOCK_BYTES", 6 * 4 * 64)  # 64 rows per block
    monkeypatch.setattr(fp, "host_array", lambda b: seen.append(b.shape[0]) or real(b))
    got = bank_fingerprint(_t(X), 0.5)
    assert max(seen) == 64 and sum(seen) == 1000  # one block of rows at a time
    assert got == bank_fingerprint(X, 0.5)
    assert ledger_fingerprint(_t(X), 0.5) == ledger_fingerprint(X, 0.5)


# --------------------------------------------------- everything above the gate pass


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("offset", [0.0, 1e7])
def test_neighbour_smoothness_on_torch_banks(seed, offset):
    T = 1 + seed % 3
    X, Xp, r, q, hist = _smoothness_instance(seed, T, offset)
    for kappa, gamma in ((0.0, 0.1), (1.0, 0.02)):
        kw = dict(steps=T, kappa=kappa, gamma=gamma)
        cD = certificate(LSRMemory(_t(X), radius=r), q[None], hist[None], **kw)
        cP = certificate(LSRMemory(_t(Xp), radius=r), q[None], hist[None], **kw)
        _assert_smooth(cD, cP, gamma)
        moved = np.linalg.norm(cD.pre_noise - cP.pre_noise, axis=-1)
        assert np.all(moved <= cD.noise_scale) and np.all(moved <= cP.noise_scale)
        ref = certificate(LSRMemory(X, radius=r, canonical_sums=True), q[None], hist[None],
                          **kw)
        got = certificate(LSRMemory(_t(X), radius=r, canonical_sums=True), q[None],
                          hist[None], **kw)
        np.testing.assert_array_equal(got.noise_scale, ref.noise_scale)
        np.testing.assert_array_equal(got.pre_noise, ref.pre_noise)


def test_neighbour_smoothness_on_float32_torch_banks():
    for seed in range(6):
        rng = np.random.default_rng(seed)
        d, T, r, gamma = 12, 2, float(rng.uniform(0.3, 1.0)), 0.1
        q = rng.normal(0, 1, d)
        clean = LSRMemory(q + rng.normal(0, 0.5 * r, (30, d)), radius=r).retrieve(q, T)[1:]
        X = _weak_bank(rng, 30, d, r, q, clean, 0.0).astype(np.float32)
        Xp = _neighbour(rng, X.astype(np.float64), q, clean, r).astype(np.float32)
        hist = np.concatenate([q[None], clean[: T - 1]])
        kw = dict(steps=T, kappa=0.0, gamma=gamma)
        cD = certificate(LSRMemory(_t(X), radius=r), q[None], hist[None], **kw)
        cP = certificate(LSRMemory(_t(Xp), radius=r), q[None], hist[None], **kw)
        _assert_smooth(cD, cP, gamma)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=["auto", "correcting"])
def test_moving_a_row_outside_every_footprint_changes_nothing(case, dtype):
    """The far-row test of local accounting on a torch bank: bit-identical outputs, and
    bit-identical to the numpy bank at the same seed."""
    rng = np.random.default_rng(zlib.crc32(f"{case}{dtype}torch".encode()))
    X = _bank(rng).astype(dtype).astype(np.float64)
    d = X.shape[1]
    q = X[rng.choice(X.shape[0], 3, replace=False)] + 0.1 * rng.normal(size=(3, d))
    kw = dict(epsilon=4.0, delta=1e-5, steps=3, **case)

    def memory(bank):
        return LSRMemory(_t(bank.astype(dtype)), radius=R, canonical_sums=True)

    mem = memory(X)
    base = private_retrieve(mem, q, seed=1, **kw)
    ref = private_retrieve(LSRMemory(X.astype(dtype), radius=R, canonical_sums=True), q,
                           seed=1, **kw)
    np.testing.assert_array_equal(base.outputs, ref.outputs)
    fp = footprints(plan_release(mem, queries=3, **kw), q, base.outputs)
    out = _outside(X, fp)
    assert out.size > 10
    for i in rng.choice(out, size=min(4, out.size), replace=False):
        Y = X.copy()
        Y[i] = _far_point(fp, d, rng)
        again = private_retrieve(memory(Y), q, seed=1, **kw)
        np.testing.assert_array_equal(again.outputs, base.outputs)
    changed = False  # teeth: a row moved onto the first footprint's centre
    for seed in range(5):
        Y = X.copy()
        Y[out[0]] = q[0]
        got = private_retrieve(memory(Y), q, seed=seed, **kw)
        changed |= not np.array_equal(got.outputs,
                                      private_retrieve(mem, q, seed=seed, **kw).outputs)
    assert changed


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_private_retrieve_equals_numpy_bit_for_bit(dtype):
    rng = np.random.default_rng(11)
    X = (rng.normal(size=(400, 6)) * 0.6).astype(dtype)
    q = X[:4].astype(np.float64) + 0.05
    for kw in (dict(method="brace"), dict(method="brace", release="count"),
               dict(method="brace", release="smooth", kappa=0.0), dict(method="global")):
        kw = dict(epsilon=2.0, delta=1e-5, steps=3, seed=7, **kw)
        a = private_retrieve(LSRMemory(X, radius=0.9, canonical_sums=True), q, **kw)
        b = private_retrieve(LSRMemory(_t(X), radius=0.9, canonical_sums=True), q, **kw)
        np.testing.assert_array_equal(a.outputs, b.outputs)
        np.testing.assert_array_equal(a.noise_std, b.noise_std)
        np.testing.assert_array_equal(a.gate_released, b.gate_released)
        # default (non-canonical) sums: the same release up to the rounding bound
        c = private_retrieve(LSRMemory(_t(X), radius=0.9), q, **kw)
        np.testing.assert_allclose(c.outputs, a.outputs, rtol=0, atol=1e-9)
    s = private_retrieve(LSRMemory(_t(X), radius=0.9), q, method="brace", epsilon=2.0,
                         delta=1e-5, steps=2,
                         noise="secure")
    assert s.outputs.shape == (4, 2, 6) and np.all(np.isfinite(s.outputs))


def test_private_memory_on_a_torch_bank_equals_numpy(tmp_path):
    rng = np.random.default_rng(12)
    X = rng.normal(size=(300, 4)) * 0.5
    q = X[:3] + 0.05
    pn = PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))
    pt = PrivateMemory(_t(X), radius=0.8, budget=(8.0, 1e-5), ledger=tmp_path / "l.db",
                       create=True)
    for j in range(3):
        a = pn.retrieve(q[j:j + 2], steps=3, epsilon=1.0, seed=j)
        b = pt.retrieve(q[j:j + 2], steps=3, epsilon=1.0, seed=j)
        np.testing.assert_array_equal(a.outputs, b.outputs)
    spent = pt.spent
    assert pn.spent == spent and math.isfinite(spent)
    np.testing.assert_array_equal(pn.spent_at(X[:20]), pt.spent_at(X[:20]))
    pt.close()
    # the ledger is bound to the bank's bytes: the numpy bank opens it
    with PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5), ledger=tmp_path / "l.db") as again:
        assert again.spent == spent
    with pytest.raises(LedgerError):  # another bank does not
        PrivateMemory(_t(X + 1.0), radius=0.8, budget=(8.0, 1e-5), ledger=tmp_path / "l.db")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_validation_works_in_blocks_of_a_twentieth_of_the_bank(dtype):
    """Validation's working copies are bounded by a share of the bank (blocks of whole
    row tiles), the bank is never written, and the squared norms and the fingerprint are
    those of one pass over the whole bank."""
    n, d = 5000, 7
    rows = torch_mod._validation_rows(n, d, 4 if dtype == torch.float32 else 8)
    assert rows == torch_mod._ROW_BLOCK < n  # several blocks here
    X = _t(np.random.default_rng(4).normal(size=(n, d))).to(dtype)
    before = X.clone()
    st = torch_mod.validate_torch(X)
    assert torch.equal(X, before)
    one = (X.to(torch.float64) ** 2).sum(dim=1)
    assert torch.equal(st.extra["sq"], one)
    assert st.digest == LSRMemory(X.numpy(), radius=1.0)._state().digest  # numpy's, whole
    big = torch_mod._validation_rows(10**6, 384, 4)
    assert big * (4 + 10) * 384 <= torch_mod._EXTRA_SHARE * 10**6 * 384 * 4


@pytest.mark.parametrize("k, ns", [(1, 5), (3, 2048), (70, 2048 * 3 + 17), (300, 4096)])
def test_tile_counts_in_slices_of_centres(k, ns):
    """Members per centre and row tile, counted over slices of centres (the int64 cast of
    torch's sum bounded), equal the count of the whole mask at once."""
    mk = torch.from_numpy(np.random.default_rng(k).random((k, ns)) < 0.3)
    B = -(-ns // torch_mod._ROW_BLOCK)
    ref = torch.stack([mk[:, j * torch_mod._ROW_BLOCK : (j + 1) * torch_mod._ROW_BLOCK]
                       .sum(dim=1) for j in range(B)], dim=1)
    assert torch.equal(torch_mod._tile_counts(torch, mk), ref)


def test_slices_of_centres_change_nothing(monkeypatch):
    """A tile's distances and a dense tile's mask product are computed over slices of
    centres sized from the bank: one centre per slice and all at once give the same
    counts, pair counts, sums (dense tiles included) and near distances, in order (with
    ``near_tolerance=0`` every near distance is the canonical one; a tolerance lets the
    tile's value stand, whose last bits may depend on the GEMM's shape)."""
    rng = np.random.default_rng(9)
    X = rng.normal(size=(4500, 6))
    X[:2500] = X[0] + 0.3 * rng.normal(size=(2500, 6))  # a crowd: dense tiles
    C = np.concatenate([X[:30] + 0.01, rng.normal(size=(20, 6))])
    kw = dict(pairs=(np.arange(25), np.arange(25, 50)), near_centres=np.arange(0, 50, 2),
              near_radius=1.3, near_tolerance=0.0)
    for canon in (True, False):
        mem = LSRMemory(_t(X.astype(np.float32)), radius=1.0, canonical_sums=canon)
        monkeypatch.setattr(torch_mod, "_MIN_SLICE", 1)
        monkeypatch.setattr(torch_mod, "_SLICE_SHARE", 0.0)  # one centre per slice
        a = _pass(mem, C, **kw)
        monkeypatch.setattr(torch_mod, "_SLICE_SHARE", 1e9)  # the whole chunk
        b = _pass(mem, C, **kw)
        monkeypatch.undo()
        for f in ("counts", "sums", "pair_counts", "near_rows", "near_dist"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert a.near_rows.size and a.pair_counts.any()
        ref = _pass(LSRMemory(X.astype(np.float32), radius=1.0, index="brute",
                              canonical_sums=canon), C, **kw)
        _same(ref, a, sums=canon)
