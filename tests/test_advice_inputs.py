"""Public advice (``affordable_epsilon``, ``recommend``) refuses arguments it cannot
answer for, instead of a wrong answer (issue reproducers)."""

from __future__ import annotations

import numpy as np
import pytest

from brace import PrivateMemory

X = np.random.default_rng(0).normal(size=(200, 2))


@pytest.fixture(scope="module")
def pm():
    return PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))


def test_affordable_epsilon_refuses_a_bogus_noise_mode(pm):
    """Issue reproducer: ``noise="bogus"`` answered 0.0 (every trial plan failed)."""
    with pytest.raises(ValueError, match="noise must be 'auto', 'plain' or 'secure'; got 'bogus'"):
        pm.affordable_epsilon(X[:2], steps=1, noise="bogus")
    with pytest.raises(TypeError, match="noise must be"):
        pm.affordable_epsilon(X[:2], steps=1, noise=3)


def test_affordable_epsilon_surfaces_a_plan_that_fails_at_every_epsilon(pm):
    """A keyword no plan accepts is the plan's own error, not an answer of 0.0."""
    with pytest.raises(ValueError, match="release must be"):
        pm.affordable_epsilon(X[:2], steps=1, release="bogus")
    with pytest.raises(ValueError, match="kappa"):
        pm.affordable_epsilon(X[:2], steps=1, kappa=-1.0)
    assert pm.affordable_epsilon(X[:2], steps=1) > 0.0
    assert pm.spent == 0.0


@pytest.mark.parametrize("gate", [1e12, 201, 0.5, 0.0, -3.0])
def test_recommend_refuses_a_gate_the_bank_cannot_hold(pm, gate):
    """Issue reproducer: ``recommend(10, gate_size=1e12)`` on a 200-row bank advised a
    release from an impossible gate; the range is [1, n]."""
    with pytest.raises(ValueError, match=r"gate_size must be (in \[1, n\] = \[1, 200\]|> 0)"):
        pm.recommend(10, gate_size=gate)
    for bad, err in ((float("nan"), ValueError), ("32", TypeError)):
        with pytest.raises(err, match="gate_size"):
            pm.recommend(10, gate_size=bad)


def test_recommend_gate_defaults_to_min_32_n():
    """The default gate is 32 memories, or the whole bank when smaller; the edges of
    [1, n] are accepted and a larger gate predicts less noise."""
    small = PrivateMemory(X[:20], radius=0.8, budget=(8.0, 1e-5))
    assert small.recommend(5).step_noise == small.recommend(5, gate_size=20).step_noise
    big = PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))
    assert big.recommend(5).step_noise == big.recommend(5, gate_size=32).step_noise
    assert big.recommend(5, gate_size=200).step_noise < big.recommend(5, gate_size=1).step_noise


# --- a memory-mapped bank whose file shrinks --------------------------------------------

_TRUNCATE = r"""
import os, sys
import numpy as np
import brace
from brace.gates.contract import BankMutatedError
path, how = sys.argv[1], sys.argv[2]
np.save(path, np.random.default_rng(0).normal(size=(4000, 8)))
bank = np.load(path, mmap_mode="r")
mem = (brace.PrivateMemory(bank, radius=1.0, budget=(8.0, 1e-5)) if how == "private"
       else brace.LSRMemory(bank, radius=1.0))
q = np.zeros((2, 8))
call = ((lambda: mem.retrieve(q, steps=1, epsilon=1.0, seed=0)) if how == "private"
        else (lambda: mem.retrieve(q, steps=1)))
call()
os.truncate(path, os.path.getsize(path) // 2)
for _ in range(2):
    try:
        call()
    except BankMutatedError as e:
        print("REFUSED", e)
    else:
        print("ANSWERED")
"""


@pytest.mark.parametrize("how", ["lsr", "private"])
def test_a_truncated_memory_mapped_bank_is_refused_not_a_sigbus(tmp_path, how):
    """Issue reproducer: a memory-mapped bank truncated after it was opened killed the
    process with SIGBUS; the file's size is checked before each pass and block."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _TRUNCATE, str(tmp_path / "b.npy"), how],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all(s.startswith("REFUSED") for s in lines), out.stdout
    assert "was truncated" in lines[0] and "b.npy" in lines[0]


def test_the_block_guard_checks_the_file_between_blocks(tmp_path):
    """The ``after_block`` callback (run between the blocks of a pass) refuses once the
    file no longer holds every mapped row, at any offset of the array in the file."""
    import os

    from brace.gates.contract import BankMutatedError
    from brace.gates.memmap import _mmap_release

    path = tmp_path / "raw.bin"
    np.arange(5000 * 4, dtype=np.float64).tofile(path)
    for offset in (0, 8 * 4 * 7, 8 * 4 * 1100):  # inside and past the first 4 KiB page
        n = (5000 * 4 * 8 - offset) // 32
        X = np.memmap(path, dtype=np.float64, mode="r", offset=offset, shape=(n, 4))
        guard = _mmap_release(X)
        guard(0, 10)  # the whole file: fine
        guard.check()
        del X, guard
    X = np.memmap(path, dtype=np.float64, mode="r", shape=(5000, 4))
    guard = _mmap_release(X)
    os.truncate(path, 5000 * 4 * 8 - 1)  # one byte short of the last row
    with pytest.raises(BankMutatedError, match="truncated"):
        guard(0, 10)
    with pytest.raises(BankMutatedError, match="truncated"):
        _mmap_release(X)


# --- recommend(public_rows=…): public data alone, or the synopsis ---------------------------

def _shape(n: int, d: int, eps: float) -> PrivateMemory:
    """A bank of the shape of a measured case (the advice reads only n, d and the budget)."""
    bank = np.zeros((n, d), dtype=np.float32)
    bank[:, 0] = np.arange(n) % 7
    return PrivateMemory(bank, radius=0.5, budget=(eps, 1e-5), accounting="global")


@pytest.mark.parametrize("n, d, eps, p, use", [
    (50_000, 32, 1.0, 500, "snapshot"),   # zipf, 1 % sample: synopsis 1.000, public 0.917
    (10_000, 784, 1.0, 100, "snapshot"),  # MNIST, 1 % sample: 0.372 against 0.268
    (1_397, 64, 4.0, 50, "snapshot"),     # digits, 50 rows: 0.660 against 0.605
    (1_397, 64, 8.0, 50, "snapshot"),     # 0.694 against 0.605
    (7_000, 784, 1.0, 50, "nothing"),     # MNIST-7k, 50 rows: 0.422 against 0.557
    (3_000, 64, 1.0, 50, "nothing"),      # sample_clusters: 0.266 against 0.554
    (1_397, 64, 2.0, 50, "nothing"),      # digits, 50 rows: 0.503 against 0.605
])
def test_recommend_with_public_rows_follows_measured_winners(n, d, eps, p, use):
    """Issue 38: the rule ``public_rows ≥ 1.5 · cells`` advised releasing nothing where
    the synopsis without public seeds was measured better (the first four cases:
    docs/benchmarks.md, "When private pays"). Now a synopsis of at least
    PUBLIC_FEW_CELLS cells is advised unless the public rows are PUBLIC_PLENTY per cell;
    the public sample's measured wins keep "nothing"."""
    from brace.budget.advice import PUBLIC_ENOUGH, PUBLIC_FEW_CELLS, PUBLIC_PLENTY

    rec = _shape(n, d, eps).recommend(1000, public_rows=p)
    assert rec.use == use
    if use == "snapshot":
        assert rec.seeds == "private" and p >= 1.5 * rec.cells  # the old rule: nothing
        assert rec.cells >= PUBLIC_FEW_CELLS and p < PUBLIC_PLENTY * rec.cells
        assert f"finer than your {p} public rows" in rec.reason
    else:
        assert rec.cells < PUBLIC_FEW_CELLS and p >= PUBLIC_ENOUGH * rec.cells
        assert "releasing nothing" in rec.reason and "coarse" in rec.reason


def test_public_suffices_edges_and_monotone():
    """The rule's two clauses at their edges; more public rows or fewer cells never turn
    "nothing" into the synopsis; no public rows never suffice."""
    from brace.budget.advice import (
        PUBLIC_ENOUGH,
        PUBLIC_FEW_CELLS,
        PUBLIC_PLENTY,
        public_suffices,
    )

    many = 2.0 * PUBLIC_FEW_CELLS
    assert public_suffices(int(np.ceil(PUBLIC_PLENTY * many)), many)
    assert not public_suffices(int(np.ceil(PUBLIC_PLENTY * many)) - 1, many)
    few = PUBLIC_FEW_CELLS / 2.0
    assert public_suffices(int(np.ceil(PUBLIC_ENOUGH * few)), few)
    assert not public_suffices(int(np.ceil(PUBLIC_ENOUGH * few)) - 1, few)
    assert not public_suffices(0, 0.0) and public_suffices(1, 0.0)
    grid = [(p, c) for p in range(0, 400, 7) for c in np.linspace(0.0, 100.0, 41)]
    for p, c in grid:
        if public_suffices(p, c):
            assert public_suffices(p + 1, c) and public_suffices(p, 0.9 * c)
