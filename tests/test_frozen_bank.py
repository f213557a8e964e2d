"""Frozen banks (docs/scale.md, "No copies"): a bank whose memory is an immutable
``bytes`` object cannot change, so a memory on it is hashed once (at validation) and
never re-hashed per call; it releases exactly what the same values in a mutable array
release. Anything else — a writable array, a read-only view of one, a ``bytearray``, a
memory map — keeps the per-call checks."""

from __future__ import annotations

import numpy as np
import pytest

import brace
from brace import BankMutatedError, LSRMemory, PrivateMemory, frozen_bank, private_retrieve
from brace._fingerprint import BankHasher
from brace.memory import _is_frozen


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(3).normal(size=(500, 3))


def _count_hashing(monkeypatch) -> list[int]:
    rows = [0]
    real = BankHasher.update

    def counting(self, block):
        rows[0] += int(np.asarray(block).shape[0])
        return real(self, block)

    monkeypatch.setattr(BankHasher, "update", counting)
    return rows


def test_a_frozen_bank_is_an_immutable_copy(bank):
    F = frozen_bank(bank)
    assert isinstance(F, np.ndarray) and F.dtype == np.float64 and F.shape == bank.shape
    assert np.array_equal(F, bank) and not F.flags.writeable
    root = F
    while isinstance(root, np.ndarray):
        root = root.base
    assert type(root) is bytes and _is_frozen(F) and _is_frozen(F[10:20].view())
    with pytest.raises(ValueError, match="WRITEABLE"):
        F.setflags(write=True)
    with pytest.raises(ValueError, match="read-only"):
        F[0, 0] = 1.0
    bank32 = bank.astype(np.float32)
    assert frozen_bank(bank32).dtype == np.float32
    ints = frozen_bank(np.arange(12).reshape(4, 3))
    assert ints.dtype == np.float64 and _is_frozen(ints)
    assert frozen_bank(np.asfortranarray(bank)).flags.c_contiguous


@pytest.mark.parametrize(("bad", "exc", "match"), [
    (np.ones((3, 2), dtype=bool), TypeError, "real numbers"),
    (np.array([["a", "b"]]), TypeError, "real numbers"),
    (np.ones(5), ValueError, "2-D"),
])
def test_frozen_bank_refuses_what_a_bank_refuses(bad, exc, match):
    with pytest.raises(exc, match=match):
        frozen_bank(bad)


def test_a_frozen_bank_releases_what_the_same_values_release(bank, tmp_path):
    """Bit for bit: noiseless retrieval, a seeded private release, a PrivateMemory release
    on a ledger (whose fingerprint is the same bank's) and a synopsis."""
    q = bank[:4] + 0.05
    F = frozen_bank(bank)
    kw = dict(steps=3, epsilon=4.0, delta=1e-7, seed=7)
    assert np.array_equal(LSRMemory(F, radius=0.9).retrieve(q, 3),
                          LSRMemory(bank, radius=0.9).retrieve(q, 3))
    a = private_retrieve(LSRMemory(F, radius=0.9), q, method="brace", **kw)
    b = private_retrieve(LSRMemory(bank, radius=0.9), q, method="brace", **kw)
    assert np.array_equal(a.outputs, b.outputs)
    path = tmp_path / "l.db"
    pm = PrivateMemory(bank, radius=0.9, budget=(20.0, 1e-5), ledger=path, create=True)
    r1 = pm.retrieve(q, **kw)
    pm.close()
    pf = PrivateMemory(F, radius=0.9, budget=(20.0, 1e-5), ledger=path)  # same bank
    assert np.array_equal(pf.retrieve(q, **kw).outputs, r1.outputs)  # a free repeat
    q2 = bank[10:14] + 0.05
    r2 = pf.retrieve(q2, **{**kw, "seed": 8})
    assert len(pf.releases) == 2
    pg = PrivateMemory(bank, radius=0.9, budget=(20.0, 1e-5))
    assert np.array_equal(r2.outputs, pg.retrieve(q2, **{**kw, "seed": 8}).outputs)
    s1 = PrivateMemory(F, radius=0.9, budget=(4.0, 1e-5)).snapshot(bank[:6], seed=1)
    s2 = PrivateMemory(bank, radius=0.9, budget=(4.0, 1e-5)).snapshot(bank[:6], seed=1)
    assert np.array_equal(s1.attractors, s2.attractors)
    pf.close()


def test_a_frozen_bank_is_hashed_once_and_a_mutable_one_at_every_call(bank, monkeypatch):
    rows = _count_hashing(monkeypatch)
    q = bank[:2] + 0.05
    for make, per_call in ((frozen_bank, False), (np.array, True)):
        pm = PrivateMemory(make(bank), radius=0.9, budget=(50.0, 1e-5))
        pm.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=0)  # validates: hashes once
        rows[0] = 0
        for s in range(3):
            pm.retrieve(q, steps=2, epsilon=1.0, delta=1e-6, seed=s + 1)
        if per_call:  # entry and exit of every call: the whole bank twice
            assert rows[0] == 3 * 2 * bank.shape[0]
        else:
            assert rows[0] == 0


def test_only_bytes_freeze_a_bank(bank, tmp_path):
    """A bytearray (mutable) or a memory map (its file can be rewritten) behind a
    read-only array is not frozen: an edit is refused at the next call, as for any
    mutable bank."""
    buf = bytearray(np.ascontiguousarray(bank).tobytes())
    X = np.frombuffer(buf, dtype=np.float64).reshape(bank.shape)
    X.flags.writeable = False
    assert not _is_frozen(X)
    mem = LSRMemory(X, radius=0.9)
    mem.retrieve(bank[:1], 1)
    np.frombuffer(buf, dtype=np.float64)[0] += 1.0  # through the mutable buffer
    with pytest.raises(BankMutatedError):
        mem.retrieve(bank[:1], 1)
    np.save(tmp_path / "b.npy", bank)
    assert not _is_frozen(np.load(tmp_path / "b.npy", mmap_mode="r"))
    ro = np.array(bank)
    ro.flags.writeable = False
    assert not _is_frozen(ro) and not _is_frozen(ro.view())


def test_brace_exports_frozen_bank():
    assert brace.frozen_bank is frozen_bank and "frozen_bank" in brace.__all__
