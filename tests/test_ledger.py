"""The SQLite privacy ledger (docs/ledger.md): explicit creation, binding, integrity,
keyed MAC, lock time-out, migration, kill -9 and races between processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import brace
from brace import BudgetExceededError, PrivateMemory
from brace.budget import inspect_ledger, migrate_json_ledger
from brace.ledger import Ledger, LedgerError, LedgerLockTimeout

SRC = str(Path(__file__).resolve().parents[1] / "src")
KEY = "a-test-key-of-enough-length"


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(0).normal(size=(120, 2))


def _new(bank, path, **kw):
    return PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path, create=True,
                         **kw)


def _open(bank, path, **kw):
    return PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path, **kw)


def test_a_ledger_is_created_only_explicitly(bank, tmp_path):
    path = tmp_path / "typo" / "ledger.db"
    with pytest.raises(LedgerError, match="does not exist.*brace ledger init"):
        _open(bank, tmp_path / "ledger.db")
    with pytest.raises(LedgerError, match="directory .* does not exist"):
        _new(bank, path)
    assert not path.parent.exists()  # never created implicitly
    with pytest.raises(LedgerError, match="is a directory"):
        _open(bank, tmp_path)
    _new(bank, tmp_path / "ledger.db")
    with pytest.raises(LedgerError, match="already exists"):
        _new(bank, tmp_path / "ledger.db")
    with pytest.raises(ValueError, match="create=True needs a ledger"):
        PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), create=True)


def test_ledger_persists_and_is_read_back_by_another_object(bank, tmp_path):
    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=5)
    pm.retrieve(bank[5:7], steps=3, epsilon=0.5, delta=1e-6, method="endpoint", seed=6)
    again = _open(bank.copy(), path)
    assert again.spent == pm.spent > 0 and len(again.releases) == 2
    state = inspect_ledger(path)
    assert state.spent_local == pytest.approx(pm.spent)
    assert state.spent_local <= state.spent_global
    rec = state.releases[0]
    assert "seed" not in rec["params"] and rec["queries"] == 3
    raw = path.read_bytes()
    assert bank[50].tobytes() not in raw  # never the data (row 50 was never a query)
    # a repeat through the other object is free and returns the recorded outputs
    res = again.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=99)
    assert again.spent == pm.spent and len(again.releases) == 2
    assert res.outputs.shape == (3, 2, 2)


def test_ledger_is_bound_to_its_bank_radius_and_budget(bank, tmp_path):
    path = tmp_path / "ledger.db"
    _new(bank, path)
    other = bank.copy()
    other[3, 1] = np.nextafter(other[3, 1], np.inf)
    with pytest.raises(LedgerError, match="another bank"):
        _open(other, path)
    with pytest.raises(LedgerError, match="another bank"):
        PrivateMemory(bank, radius=np.nextafter(0.8, 1.0), budget=(20.0, 1e-5), ledger=path)
    with pytest.raises(LedgerError, match="budget"):
        PrivateMemory(bank, radius=0.8, budget=(40.0, 1e-5), ledger=path)


def _sql(path, stmt, *args):
    conn = sqlite3.connect(path)
    conn.execute(stmt, args)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "edit", "delete", "foreign",
                                    "json"])
def test_damaged_ledger_is_a_clear_error_never_a_reset(bank, tmp_path, damage):
    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    pm.retrieve(bank[9:10], steps=2, epsilon=1.0, delta=1e-6, seed=1)
    pm.close()  # the last connection: the journal is checkpointed into the file
    assert not Path(f"{path}-wal").exists()
    match = {"truncate": "not a brace ledger|malformed|integrity",
             "garbage": "not a brace ledger", "edit": "integrity check at release 1",
             "delete": "release 1 is missing|integrity", "foreign": "not a brace ledger",
             "json": "JSON ledger of an earlier version.*migrate"}[damage]
    if damage == "truncate":
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00\x01 not a database" * 10)
    elif damage == "edit":
        _sql(path, "UPDATE releases SET record = replace(record, '\"queries\": 3', "
             "'\"queries\": 1') WHERE id = 1")
    elif damage == "delete":
        _sql(path, "DELETE FROM releases WHERE id = 1")
    elif damage == "foreign":
        path.unlink()
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('format', '\"other\"')")
        conn.commit()
        conn.close()
    else:
        path.unlink()
        path.write_text(json.dumps({"format": "brace-ledger/1", "releases": []}))
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=match):
        _open(bank, path)
    assert path.read_bytes() == before  # left as found


def test_edits_with_a_recomputed_digest_are_refused_by_validation_or_the_key(bank, tmp_path):
    """Issue reproducers: values edited and the (unkeyed) digest recomputed. Bad values
    are refused by validation whatever the digest; a plausible edit is caught only with a
    key (the unkeyed chain detects damage, not a deliberate edit: docs/ledger.md)."""
    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    db = Ledger.open(path)
    row = db._conn.execute("SELECT * FROM releases WHERE id = 1").fetchone()
    rec = json.loads(row[3])

    def rewrite(record):
        text = json.dumps(record, sort_keys=True)
        mac = db._row_mac("", 1, row[1], row[2], text, row[4], row[5], row[6], row[7])
        db._conn.execute("UPDATE releases SET record = ?, mac = ? WHERE id = 1", (text, mac))
        db._write_meta(db._conn, {**db.meta, "head": {"count": 1, "mac": mac}}, None)

    for field, value, match in [("event", {"type": "GaussianStep", "rho": -0.5},
                                 "rho must be a finite number in"),
                                ("queries", "abc", "'queries' must be int"),
                                ("delta", -0.5, "'delta' must be float|delta' must be a")]:
        rewrite({**rec, field: value})
        with pytest.raises(LedgerError, match=match):
            _open(bank, path)
    db.close()
    # with a key, even a plausible edit (a smaller rho) is refused
    kpath = tmp_path / "keyed.db"
    pk = _new(bank, kpath, ledger_key=KEY)
    pk.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    db = Ledger.open(kpath, key=KEY)
    row = db._conn.execute("SELECT * FROM releases WHERE id = 1").fetchone()
    rec = json.loads(row[3])
    rec["event"]["rho"] = rec["event"]["rho"] / 100
    text = json.dumps(rec, sort_keys=True)
    unkeyed = Ledger.open(path)._row_mac("", 1, row[1], row[2], text, row[4], row[5],
                                          row[6], row[7])
    db._conn.execute("UPDATE releases SET record = ?, mac = ? WHERE id = 1", (text, unkeyed))
    db.close()
    with pytest.raises(LedgerError, match="integrity"):
        _open(bank, kpath, ledger_key=KEY)


def test_keyed_ledgers_need_their_key(bank, tmp_path, monkeypatch):
    path = tmp_path / "keyed.db"
    pm = _new(bank, path, ledger_key=KEY)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    with pytest.raises(LedgerError, match="is keyed"):
        _open(bank, path)
    with pytest.raises(LedgerError, match="key is wrong"):
        _open(bank, path, ledger_key=KEY + "x")
    monkeypatch.setenv("BRACE_LEDGER_KEY", KEY)
    assert _open(bank, path).spent == pm.spent
    with pytest.raises(ValueError, match="at least 16"):
        _open(bank, path, ledger_key="short")


def test_a_held_lock_times_out_with_a_clear_error(bank, tmp_path):
    path = tmp_path / "ledger.db"
    pm = _new(bank, path, lock_timeout=0.3)
    holder = _spawn(tmp_path, "hold", path, 20.0, "-")
    assert holder.stdout.readline().strip() == "HOLDING", holder.stderr.read()
    try:
        t0 = time.monotonic()
        with pytest.raises(LedgerLockTimeout, match=rf"within 0.3 s: process {holder.pid}"):
            pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
        assert time.monotonic() - t0 < 5.0
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    assert len(pm.releases) == 0  # nothing was released or spent
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)  # the lock is free
    assert len(pm.releases) == 1


def test_refused_call_leaves_the_ledger_unchanged(bank, tmp_path):
    path = tmp_path / "ledger.db"
    pm = PrivateMemory(bank, radius=0.8, budget=(2.0, 1e-5), ledger=path, create=True)
    pm.retrieve(bank[:1], steps=1, epsilon=0.5, delta=1e-6, method="global", seed=0)
    before = inspect_ledger(path).to_dict()
    with pytest.raises(BudgetExceededError):
        pm.retrieve(bank[:100], steps=3, epsilon=1.0, delta=1e-6, seed=0)
    assert inspect_ledger(path).to_dict() == before


def test_json_ledgers_are_migrated(bank, tmp_path):
    """A ledger of the JSON format (brace-ledger/1) keeps its spend, charged everywhere."""
    import hashlib

    from brace.accounting import GaussianStep, RdpAccountant, SelfComposed
    from brace.ledger import bank_fingerprint, event_to_dict

    fp = bank_fingerprint(bank, 0.8)
    body = {"format": "brace-ledger/1", "brace_version": "0.1.0", "created": "then",
            "fingerprint": fp, "budget": {"epsilon": 20.0, "delta": 1e-5},
            "releases": [{"method": "global", "queries": 2, "steps": 3, "epsilon": 1.0,
                          "delta": 1e-6, "params": {},
                          "event": event_to_dict(SelfComposed(GaussianStep(0.05), 6))}]}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
    src = tmp_path / "old.json"
    src.write_text(json.dumps({**body, "checksum": hashlib.sha256(blob.encode()).hexdigest()}))
    with pytest.raises(LedgerError, match="migrate"):
        _open(bank, src)
    state = migrate_json_ledger(src, tmp_path / "new.db")
    want = RdpAccountant().compose(GaussianStep(0.05), 6).get_epsilon(1e-5)
    assert want <= state.spent_global <= 1.01 * want
    assert state.spent_local == state.spent_global  # infinite footprints
    pm = _open(bank, tmp_path / "new.db")
    assert pm.spent == pytest.approx(state.spent_local)
    assert pm.spent_at(np.array([[1e3, 1e3]]))[0] == pytest.approx(pm.spent)


# --------------------------------------------------------------------------------------
# real processes: kill -9, a race for the last of the budget, a held lock
# --------------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import os, sys, time, sqlite3
    import numpy as np
    import brace
    mode, ledger, budget, go = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    X = np.random.default_rng(0).normal(size=(120, 2))
    if mode == "hold":
        conn = sqlite3.connect(ledger, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        open(ledger + ".holder", "w").write(
            '{"pid": %d, "since": "now"}' % os.getpid())
        print("HOLDING", flush=True)
        time.sleep(120)
    pm = brace.PrivateMemory(X, radius=0.8, budget=(budget, 1e-5), ledger=ledger,
                             accounting="global", lock_timeout=60)
    print("READY", flush=True)
    if mode == "loop":
        for i in range(100000):
            pm.retrieve(X[i % 120:i % 120 + 1], steps=2, epsilon=0.5, delta=1e-6,
                        method="global", seed=i, fresh=True)
            print("RETURNED", i, flush=True)
    else:
        while not os.path.exists(go):
            time.sleep(0.0005)
        try:
            pm.retrieve(X[:1], steps=2, epsilon=0.5, delta=1e-6, method="global", seed=1,
                        fresh=True)
            print("WON", flush=True)
        except brace.BudgetExceededError:
            print("REFUSED", flush=True)
    """
)


def _spawn(tmp_path, *args):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_minus_9_never_loses_a_returned_release(bank, tmp_path):
    rng = np.random.default_rng(1)
    for round_ in range(3):
        path = tmp_path / f"ledger{round_}.db"
        PrivateMemory(np.random.default_rng(0).normal(size=(120, 2)), radius=0.8,
                      budget=(1e6, 1e-5), ledger=path, create=True)
        proc = _spawn(tmp_path, "loop", path, 1e6, "-")
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        returned = []
        while len(returned) < 2 + round_:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            returned.append(int(line.split()[1]))
        if round_:  # also kill at a random moment of the next release
            time.sleep(float(rng.uniform(0.0, 0.05)))
        os.kill(proc.pid, signal.SIGKILL)  # round 0: right after a release returned
        proc.wait(timeout=30)
        returned += [int(line.split()[1]) for line in proc.stdout.read().splitlines()]
        proc.stdout.close()
        proc.stderr.close()
        assert returned == list(range(len(returned)))
        state = inspect_ledger(path)  # never corrupt or half-written
        n = len(state.releases)
        # every returned release is recorded, in order; at most the one in flight more
        assert len(returned) <= n <= len(returned) + 1, (len(returned), n)


def test_two_processes_race_for_the_last_of_the_budget(bank, tmp_path):
    from brace.accounting.filter import FilterSpec, event_weights
    from brace.plan import plan_release

    X = np.random.default_rng(0).normal(size=(120, 2))
    plan = plan_release((120, 2), radius=0.8, method="global", epsilon=0.5, delta=1e-6,
                        steps=2)
    w = event_weights(plan.spent.step_event) * 2  # one call
    # the smallest budget that admits one call but not two, by bisection on the filter
    lo, hi = 0.01, 50.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        (lo, hi) = (lo, mid) if FilterSpec.for_budget(mid, 1e-5).admits(w) else (mid, hi)
    budget = hi * 1.0001
    assert not FilterSpec.for_budget(budget, 1e-5).admits(2 * w)
    path = tmp_path / "ledger.db"
    PrivateMemory(X, radius=0.8, budget=(budget, 1e-5), ledger=path, create=True)
    go = tmp_path / "go"
    procs = [_spawn(tmp_path, "race", path, budget, go) for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "READY", p.stderr.read()
    go.touch()
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["REFUSED", "WON"]
    assert len(inspect_ledger(path).releases) == 1


@pytest.mark.parametrize("kw", [dict(release="count"), dict(gamma="gates"),
                                dict(release="auto"), dict(kappa=0.0, release="smooth")])
def test_every_brace_release_is_recorded_with_its_event(bank, tmp_path, kw):
    path = tmp_path / "ledger.db"
    pm = _new(bank, path, accounting="global")
    res = pm.retrieve(bank[:3], steps=2, epsilon=2.0, delta=1e-6, seed=0, **kw)
    from brace.accounting import RdpAccountant

    want = RdpAccountant().compose(res.privacy.step_event, 6).get_epsilon(1e-5)
    assert want <= pm.spent <= want * 1.01
    assert inspect_ledger(path).spent_global == pytest.approx(pm.spent)
    if kw.get("release") == "count":
        assert res.released_counts is not None and res.released_counts.shape == (3, 2)


def test_float32_and_memory_mapped_banks_are_fingerprinted_in_place(bank, tmp_path):
    X32 = bank.astype(np.float32)
    np.save(tmp_path / "b.npy", X32)
    mm = np.load(tmp_path / "b.npy", mmap_mode="r")
    path = tmp_path / "ledger.db"
    pm = PrivateMemory(X32, radius=0.8, budget=(20.0, 1e-5), ledger=path, create=True)
    assert pm.fingerprint["dtype"] == "float32"
    pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, method="global", seed=0)
    again = PrivateMemory(mm, radius=0.8, budget=(20.0, 1e-5), ledger=path)  # same bytes
    assert again.spent == pm.spent > 0
    with pytest.raises(LedgerError, match="another bank"):
        PrivateMemory(X32.astype(np.float64), radius=0.8, budget=(20.0, 1e-5), ledger=path)


def test_public_names():
    assert hasattr(brace, "PrivateMemory") and hasattr(brace.ledger, "LedgerLockTimeout")
    assert issubclass(LedgerLockTimeout, LedgerError)
