"""Canonical gate sums are the same bits on every in-memory backend
(``docs/privacy-accounting.md`` §12.1): each gate's members summed from zero in row order
within each fixed row tile, tiles added in order — whether the pass is the dense one, the
KD-tree, a memory map or a torch tensor. So ``PrivateMemory`` (which sets
``canonical_sums``) releases the same bits from any of them, at the same seed.
"""

from __future__ import annotations

import numpy as np
import pytest

import brace
from brace.gates.dense import _ROW_BLOCK
from brace.memory import LSRMemory


def _bank(n: int, d: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 0.3
    X[::7] += 1e3  # far rows in every tile
    return X


def _backends(X: np.ndarray, tmp_path):
    out = {"brute": X, "kdtree": X, "auto": X}
    path = tmp_path / "bank.npy"
    np.save(path, X)
    out["mmap"] = np.load(path, mmap_mode="r")
    torch = pytest.importorskip("torch")
    out["torch"] = torch.from_numpy(X.copy())
    return out


@pytest.mark.parametrize("d", [2, 3])
def test_canonical_sums_are_bit_identical_across_backends(d, tmp_path):
    X = _bank(3 * _ROW_BLOCK + 777, d)  # gates spanning several row tiles, a partial last
    C = np.random.default_rng(2).normal(size=(40, d)) * 0.3
    ref = None
    for name, bank in _backends(X, tmp_path).items():
        index = name if name in ("brute", "kdtree", "auto") else "auto"
        gp = LSRMemory(bank, radius=0.5, index=index, canonical_sums=True).gate_pass(C)
        if ref is None:
            ref = gp
            assert np.any(gp.counts > _ROW_BLOCK)  # a gate with members in several tiles
            continue
        assert np.array_equal(gp.counts, ref.counts), name
        assert np.array_equal(gp.sums, ref.sums), name


def test_the_kdtree_sums_differ_without_canonical_sums():
    """Teeth: the KD-tree's own (non-canonical) reduction is not the canonical sum, so the
    test above would catch a backend that ignored ``canonical_sums``."""
    X = _bank(3 * _ROW_BLOCK + 777, 2)
    C = np.random.default_rng(2).normal(size=(40, 2)) * 0.3
    canon = LSRMemory(X, radius=0.5, index="brute", canonical_sums=True).gate_pass(C)
    kd = LSRMemory(X, radius=0.5, index="kdtree").gate_pass(C)
    assert np.array_equal(kd.counts, canon.counts)
    assert np.allclose(kd.sums, canon.sums, rtol=1e-12, atol=1e-9)
    # the canonical sum, recomputed here from its definition
    own = np.zeros_like(canon.sums)
    for i, c in enumerate(C):
        members = np.flatnonzero(((X - c) ** 2).sum(1) <= 0.25)
        for t0 in range(0, X.shape[0], _ROW_BLOCK):
            part = np.zeros(2)
            for j in members[(members >= t0) & (members < t0 + _ROW_BLOCK)]:
                part = part + X[j]
            own[i] = own[i] + part
    assert np.array_equal(own, canon.sums)
    assert not np.array_equal(kd.sums, canon.sums)


def test_private_memory_releases_the_same_bits_from_a_torch_bank():
    torch = pytest.importorskip("torch")
    X = _bank(2 * _ROW_BLOCK + 100, 2)
    q = X[1:4] + 0.05
    kw = dict(steps=3, epsilon=2.0, seed=7, kappa=0.0)
    a = brace.PrivateMemory(X, radius=0.5, budget=(8.0, 1e-5)).retrieve(q, **kw)
    b = brace.PrivateMemory(torch.from_numpy(X.copy()), radius=0.5,
                            budget=(8.0, 1e-5)).retrieve(q, **kw)
    assert np.array_equal(a.outputs, b.outputs)
