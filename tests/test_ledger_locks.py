"""Opening a ledger a second time in a process that has it open must keep the first
connection's locks (docs/ledger.md §6): closing any other descriptor of an SQLite file
drops all of a process's POSIX locks on it, and another process closing its connection
would then delete the write-ahead log under the first one — its later commits, returned
as recorded, in a deleted file and lost (www.sqlite.org/howtocorrupt.html §2.2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from brace import PrivateMemory
from brace.budget import inspect_ledger


def _count_elsewhere(path: Path) -> int:
    """Open and close the ledger in another process; the releases it sees."""
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print(c.execute('SELECT count(*) FROM releases').fetchone()[0]); c.close()")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True, timeout=60)
    return int(out.stdout)


def test_a_second_open_in_the_process_never_loses_the_first_ones_commits(tmp_path):
    X = np.random.default_rng(0).normal(size=(60, 2))
    path = tmp_path / "ledger.db"
    pm = PrivateMemory(X, radius=0.8, budget=(20.0, 1e-5), ledger=path, create=True)
    pm.retrieve(X[:1], steps=1, epsilon=1.0, noise="secure")
    inspect_ledger(path)  # a second open in this process (a health check, a dashboard)
    PrivateMemory(X, radius=0.8, budget=(20.0, 1e-5), ledger=path).close()
    assert _count_elsewhere(path) == 2  # the pending charge and the release
    assert Path(f"{path}-wal").exists()  # not taken for unused by the other process
    pm.retrieve(X[5:6], steps=1, epsilon=1.0, noise="secure")
    assert _count_elsewhere(path) == 4  # the commit is in the file everyone reads
    pm.close()
