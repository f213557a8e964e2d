"""No request can make a ledger unreadable (docs/ledger.md §4, §7): every ε and δ at the
ends of its range is written through the library and read back, on SQLite and
PostgreSQL; a value past an end is refused before admission with a clear error and
nothing recorded; a ledger holding a record an earlier version wrote and this one cannot
read still opens for ``brace ledger show`` (which names it) and is mended by ``brace
ledger repair``; ledger locations of another URL scheme are refused; a read-only
directory still lets ``show`` and ``backup`` read."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from brace import PrivateMemory
from brace._validation import PRIVACY_FLOOR
from brace.budget import inspect_ledger
from brace.cli import main
from brace.ledger import Ledger, LedgerError
from brace.ledger.backend import ledger_class
from brace.ledger.backup import repair_ledger

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(0).normal(size=(120, 2))


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    pytest.importorskip("psycopg", reason="psycopg not installed (the 'serve' extra)")
    return request.getfixturevalue("pg_url")


#: (ε, δ, method) at the ends of what a call may ask for; each is written and read back
WRITTEN = [
    (1.0, PRIVACY_FLOOR, "global"), (1.0, PRIVACY_FLOOR, "endpoint"),
    (1.0, PRIVACY_FLOOR, "brace"), (1e-6, 1e-7, "global"), (1e6, 1e-7, "endpoint"),
    (1.0, 0.5, "global"), (1.0, math.nextafter(1.0, 0.0), "global"),
]
#: (ε, δ, method) past an end: refused before admission, nothing recorded
REFUSED = [
    (1.0, 5e-324, "global"), (1.0, 1e-301, "endpoint"), (1.0, 1e-320, "brace"),
    (1.0, math.nextafter(PRIVACY_FLOOR, 0.0), "global"), (1.0, 1.0, "global"),
    (1.0, 0.0, "global"), (1.0, math.nan, "global"), (math.nextafter(1e-6, 0.0), 1e-7,
                                                      "global"),
    (2e6, 1e-7, "global"), (5e-324, 1e-7, "global"), (math.inf, 1e-7, "global"),
]


def test_every_boundary_value_is_written_and_read_back(bank, location):
    """Issue reproducer: delta=5e-324 (global) or 1e-301 (endpoint) was recorded, and no
    process could open the ledger again; delta=1e-320 (default method) ended in a raw
    OverflowError."""
    pm = PrivateMemory(bank, radius=0.8, budget=(1e9, 0.9), ledger=location, create=True)
    for i, (eps, delta, method) in enumerate(WRITTEN):
        pm.retrieve(bank[i:i + 1], steps=2, epsilon=eps, delta=delta, method=method,
                    seed=i)
    for eps, delta, method in REFUSED:
        with pytest.raises(ValueError, match="epsilon|delta") as info:
            pm.retrieve(bank[:1], steps=1, epsilon=eps, delta=delta, method=method, seed=0)
        assert not isinstance(info.value, LedgerError)  # refused on the way in
    assert len(pm.releases) == len(WRITTEN)
    spent = pm.spent
    pm.close()
    again = PrivateMemory(bank, radius=0.8, budget=(1e9, 0.9), ledger=location)
    assert again.spent == spent
    got = [(r["epsilon"], r["delta"], r["method"]) for r in again.releases]
    assert got == WRITTEN  # bit for bit
    again.close()
    state = inspect_ledger(location)
    assert len(state.releases) == len(WRITTEN) and not state.unreadable


@pytest.mark.parametrize("budget", [(1e-6, PRIVACY_FLOOR), (1e300, math.nextafter(1.0, 0.0))])
def test_budgets_at_the_ends_are_written_and_read_back(bank, tmp_path, budget):
    path = tmp_path / "b.db"
    PrivateMemory(bank, radius=0.8, budget=budget, ledger=path, create=True).close()
    state = inspect_ledger(path)
    assert (state.budget_epsilon, state.budget_delta) == budget


def test_the_default_delta_of_a_tiny_budget_delta_is_named(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, PRIVACY_FLOOR))
    with pytest.raises(ValueError, match=r"delta \(by default 1 % of the budget's delta\)"):
        pm.retrieve(bank[:1], steps=1, epsilon=1.0, method="global", seed=0)
    assert pm.releases == ()


@pytest.mark.parametrize("budget", [(1e-7, 1e-5), (1e-300, 1e-5), (8.0, 1e-301),
                                    (8.0, 5e-324), (math.inf, 1e-5)])
def test_budgets_past_the_ends_are_refused_before_anything_is_written(bank, tmp_path,
                                                                      budget):
    path = tmp_path / "b.db"
    with pytest.raises(ValueError, match="budget (epsilon|delta)"):
        PrivateMemory(bank, radius=0.8, budget=budget, ledger=path, create=True)
    assert not path.exists()


def _earlier_version_write(db: Ledger, record: dict, row, monkeypatch) -> None:
    """Record ``record`` as a version before the check on write did: no check (a release
    of its own: the completion it was copied from named a pending charge)."""
    if isinstance(record, dict):
        record = {**record, "params": {k: v for k, v in record["params"].items()
                                       if k != "completes"}}
    with monkeypatch.context() as m:
        m.setattr(Ledger, "_parse_row", lambda self, row: None)
        with db.transaction():
            db.append(call_key="earlier", record=record,
                      outputs=np.frombuffer(row[4]).reshape(1, 1, -1),
                      released_counts=None,
                      centres=np.frombuffer(row[6]).reshape(1, -1),
                      radii=np.frombuffer(row[7]))


def test_the_write_path_refuses_what_the_reader_would(bank, tmp_path):
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=tmp_path / "l.db",
                       create=True)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-7, method="global", seed=0)
    row = pm._db.raw_rows()[0]
    rec = json.loads(row[3])
    for field, value in [("delta", 5e-324), ("epsilon", 1e-301), ("queries", 0),
                         ("dim", 3)]:
        with pytest.raises(LedgerError, match=field if field != "dim" else "values"), \
                pm._db.transaction():
            pm._db.append(call_key="x", record={**rec, field: value},
                          outputs=np.frombuffer(row[4]).reshape(1, 1, -1),
                          released_counts=None, centres=np.frombuffer(row[6]).reshape(1, -1),
                          radii=np.frombuffer(row[7]))
    pm.close()
    assert len(inspect_ledger(tmp_path / "l.db").releases) == 1


def test_an_unreadable_record_is_named_and_repaired(bank, location, tmp_path, capsys,
                                                   monkeypatch):
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=location, create=True)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-7, method="global", seed=0)
    row = pm._db.raw_rows()[-1]  # the release (after its pending charge)
    _earlier_version_write(pm._db, {**json.loads(row[3]), "delta": 5e-324}, row,
                           monkeypatch)
    pm.close()
    with pytest.raises(LedgerError, match="release 3 'delta' must lie in"):
        PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=location)
    state = inspect_ledger(location, unreadable=True)
    assert [i for i, _ in state.unreadable] == [3] and "5e-324" in state.unreadable[0][1]
    assert len(state.releases) == 1
    assert main(["ledger", "show", location]) == 1
    out, err = capsys.readouterr()
    assert "UNREADABLE       : release 3" in out and "brace ledger repair" in err
    target = str(tmp_path / "repaired.db")
    assert main(["ledger", "repair", location, target]) == 0
    assert "mended release 3: delta 5e-324 recorded as 1e-300" in capsys.readouterr().out
    fixed = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=target)
    recs = fixed.releases
    assert recs[1]["delta"] == PRIVACY_FLOOR and recs[1]["repaired"] == {
        "delta": (5e-324).hex()}
    assert recs[1]["event"] == recs[0]["event"]  # the charge is copied unchanged
    one = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5))  # the same two releases
    for _ in range(2):
        one.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-7, method="global",
                     fresh=True, seed=0)
    assert fixed.spent == pytest.approx(one.spent, rel=1e-12)
    assert main(["ledger", "show", target]) == 0
    with pytest.raises(LedgerError, match="nothing to repair"):
        repair_ledger(target, str(tmp_path / "again.db"))
    fixed.close()


@pytest.mark.parametrize("what", ["field", "not an object"])
def test_a_damaged_record_is_not_repaired(bank, tmp_path, monkeypatch, what):
    path = tmp_path / "l.db"
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=path, create=True)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-7, method="global", seed=0)
    row = pm._db.raw_rows()[-1]  # the release (after its pending charge)
    bad = {**json.loads(row[3]), "queries": 0} if what == "field" else [1, 2]
    _earlier_version_write(pm._db, bad, row, monkeypatch)
    pm.close()
    with pytest.raises(LedgerError, match="release 3 cannot be read.*Restore"):
        repair_ledger(path, tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()


def test_other_url_schemes_are_refused_not_taken_for_paths(bank, tmp_path, capsys,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "l.db"
    PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=path, create=True).close()
    for url in ("mysql://u:secret@h/db", "sqlite:///x.db", "MySQL://h/db"):
        with pytest.raises(LedgerError, match="unsupported ledger URL scheme"):
            ledger_class(url)
        assert main(["ledger", "backup", str(path), url]) == 2
        err = capsys.readouterr().err
        assert "unsupported ledger URL scheme" in err and "secret" not in err
        with pytest.raises(LedgerError, match="unsupported ledger URL scheme"):
            PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=url)
    assert not any(p.name.startswith(("mysql", "sqlite", "MySQL")) for p in tmp_path.iterdir())


def test_retrieve_takes_a_postgresql_url(bank, tmp_path, pg_url, capsys):
    """Issue reproducer: 'brace retrieve --ledger postgresql://…' read the URL as a
    path."""
    pytest.importorskip("psycopg")
    np.save(tmp_path / "bank.npy", bank)
    np.save(tmp_path / "q.npy", bank[:2])
    PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=pg_url, create=True).close()
    assert main(["retrieve", "--bank", str(tmp_path / "bank.npy"), "--queries",
                 str(tmp_path / "q.npy"), "--radius", "0.8", "--steps", "1", "--epsilon",
                 "1", "--delta", "1e-7", "--ledger", pg_url, "--out",
                 str(tmp_path / "r.npz")]) == 0
    assert "spent eps" in capsys.readouterr().out
    assert len(inspect_ledger(pg_url).releases) == 1


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        return []
    tool = shutil.which("setpriv")
    if tool is None:
        pytest.skip("running as root without setpriv: cannot read as another user")
    return [tool, "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_show_and_backup_read_a_ledger_in_a_read_only_directory(bank):
    """Issue reproducer: in a directory the user may not write, 'brace ledger show' and
    'backup' failed with 'attempt to write a readonly database'."""
    prefix = _as_nobody()
    tmp_path = Path(tempfile.mkdtemp())  # pytest's is private to its user
    d, out = tmp_path / "ro", tmp_path / "out"
    d.mkdir()
    out.mkdir()
    path = d / "ledger.db"
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=path, create=True)
    pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    pm.close()
    os.chmod(tmp_path, 0o755)
    os.chmod(out, 0o777)
    os.chmod(path, 0o644)
    os.chmod(d, 0o555)
    env = {**os.environ, "PYTHONPATH": SRC}

    def brace(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, sys.executable, "-m", "brace.cli", *args],
                              capture_output=True, text=True, env=env, cwd="/")

    try:
        got = brace("ledger", "show", str(path))
        assert got.returncode == 0 and "releases         : 1" in got.stdout, got.stderr
        got = brace("ledger", "backup", str(path), str(out / "b.db"))
        assert got.returncode == 0 and "1 release(s)" in got.stdout, got.stderr
        # a writer still has it open, with releases in its log, readable: they are read
        os.chmod(d, 0o755)
        live = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=path)
        live.retrieve(bank[5:6], steps=1, epsilon=1.0, delta=1e-6, seed=0)
        for suffix in ("-wal", "-shm"):
            os.chmod(str(path) + suffix, 0o644)
        os.chmod(d, 0o555)
        got = brace("ledger", "show", str(path))
        assert got.returncode == 0 and "releases         : 2" in got.stdout, got.stderr
        live.close()
        assert len(inspect_ledger(out / "b.db").releases) == 1
    finally:
        os.chmod(d, 0o755)
        shutil.rmtree(tmp_path)


@pytest.mark.parametrize("delta", [1e-3, 0.1, 0.5])
def test_a_snapshot_at_a_large_budget_delta_is_recorded(bank, tmp_path, delta):
    """A tiny ρ at a large δ converts to ε = 0, below what a ledger records: the cell
    rows' recorded ε is floored (the charge is their event), so the snapshot is written
    and read back (it was refused as a broken ledger)."""
    path = tmp_path / "l.db"
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, delta), ledger=path, create=True)
    for eps in (1e-6, 1.0):
        pm.snapshot(bounds=(-4.0, 4.0), epsilon=eps, seed=0, rounds=2)
        pm.snapshot(bank[:3], epsilon=eps, seed=0)
    spent = pm.spent
    pm.close()
    again = PrivateMemory(bank, radius=0.8, budget=(8.0, delta), ledger=path)
    assert again.spent == pytest.approx(spent, rel=1e-12) and spent > 0
