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
from brace.ledger import Ledger, LedgerError, LedgerLockTimeout, settle

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
                                ("delta", -0.5, "'delta' must lie in")]:
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


# --------------------------------------------------------------------------------------
# nothing lost, nothing half-done: races, deletion, copies, migration, permissions
# --------------------------------------------------------------------------------------

CREATOR = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import numpy as np
    import brace
    root, trials, me = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    X = np.random.default_rng(0).normal(size=(120, 2))
    for t in range(trials):
        print("READY", t, flush=True)
        go = root / f"go{t}"
        while not go.exists():
            time.sleep(0.0002)
        try:
            pm = brace.PrivateMemory(X, radius=0.8, budget=(20.0, 1e-5),
                                     ledger=root / f"ledger{t}.db", create=True)
            res = pm.retrieve(X[me:me + 1], steps=1, epsilon=1.0, delta=1e-6, seed=me)
            pm.close()
            print("RELEASED", t, res.outputs.tobytes().hex(), flush=True)
        except Exception as exc:
            print("FAILED", t, type(exc).__name__, str(exc).replace("\\n", " "), flush=True)
    """
)


def test_concurrent_creation_never_loses_a_returned_release(tmp_path):
    """Issue reproducer: processes creating one ledger at once (6 of 12 trials lost the
    winner's release). Exactly one creates it; the others fail clearly and remove
    nothing; every returned release is recorded exactly once."""
    procs_n, trials = 6, 4
    script = tmp_path / "creator.py"
    script.write_text(CREATOR)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(trials),
                               str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(procs_n)]
    try:
        for t in range(trials):
            for p in procs:
                line = p.stdout.readline()
                assert line.split() == ["READY", str(t)], (line, p.stderr.read())
            (tmp_path / f"go{t}").touch()
            outcomes = [p.stdout.readline().rstrip("\n").split(" ", 2) for p in procs]
            released = sorted(o[2] for o in outcomes if o[0] == "RELEASED")
            failed = [o[2] for o in outcomes if o[0] == "FAILED"]
            assert all("LedgerError" in f and "already exists" in f for f in failed), failed
            db = Ledger.open(tmp_path / f"ledger{t}.db", write=False)
            rows = settle(db.read_since(0, ""))[0]  # a release replaces its charge
            db.close()
            assert sorted(r.outputs.tobytes().hex() for r in rows) == released
            assert len(released) == 1  # exactly one creator; the others refused
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
            p.stdout.close()
            p.stderr.close()
    left = sorted(f.name for f in tmp_path.iterdir() if ".tmp" in f.name)
    assert left == []  # no temporary file left behind


def test_a_ledger_deleted_or_replaced_while_open_is_refused(bank, tmp_path, monkeypatch):
    """Issue reproducer: after ledger.db (-wal, -shm) was deleted under a live
    PrivateMemory, the next retrieve returned, recorded only in the unlinked file."""
    import brace.budget.facade as facade

    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink()
    with pytest.raises(LedgerError, match="deleted or moved while this process had it"):
        pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    pm.close()
    # replaced by another ledger at the same path
    pm = _new(bank, path)
    other = tmp_path / "other.db"
    _new(bank, other).close()
    os.replace(other, path)
    with pytest.raises(LedgerError, match="replaced by another file"):
        pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    pm.close()
    # deleted while the release is being computed: refused before the commit
    path.unlink()
    pm = _new(bank, path)
    real = facade.run_plan

    def deleting(*a, **kw):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink()
        return real(*a, **kw)

    monkeypatch.setattr(facade, "run_plan", deleting)
    # admitted (its charge committed before the bank was read): the release is refused
    # at its record, and the call says it was charged
    with pytest.raises(brace.budget.AdmittedCallFailed, match="budget was charged") as e:
        pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    assert isinstance(e.value.__cause__, LedgerError)
    assert "deleted or moved" in str(e.value.__cause__)
    monkeypatch.setattr(facade, "run_plan", real)
    pm.close()
    # a rolled-back release is forgotten: the object reads its ledger afresh
    path = tmp_path / "again.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    spent = pm.spent
    monkeypatch.setattr(Ledger, "_check_identity", _fail_second_call())
    with pytest.raises(LedgerError, match="injected"):
        pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    monkeypatch.undo()
    assert pm.spent == spent and len(pm.releases) == 1
    pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    assert len(pm.releases) == len(inspect_ledger(path).releases) == 2
    pm.close()


def _fail_second_call():
    """A ``Ledger._check_identity`` that fails on its second call: the check before the
    commit of the next transaction."""
    calls = []

    def check(self):
        calls.append(1)
        if len(calls) == 2:
            raise LedgerError("injected failure before the commit")

    return check


def test_a_closed_private_memory_says_so(bank, tmp_path):
    pm = _new(bank, tmp_path / "ledger.db")
    pm.close()
    with pytest.raises(LedgerError, match="is closed"):
        pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    with pytest.raises(LedgerError, match="is closed"):
        pm.spent  # noqa: B018


def test_backup_copies_a_live_ledger_that_a_file_copy_misses(bank, tmp_path):
    """Issue reproducer: ``cp ledger.db copy.db`` of a ledger a writer holds (without the
    -wal file) opened with spent 0. The online backup has every release."""
    import shutil

    from brace.ledger import backup_ledger

    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    for i in range(3):
        pm.retrieve(bank[i:i + 1], steps=2, epsilon=1.0, delta=1e-6, seed=i)
    shutil.copyfile(path, tmp_path / "cp.db")  # the main file only: the WAL is missing
    assert len(inspect_ledger(tmp_path / "cp.db").releases) < 3
    n = backup_ledger(path, tmp_path / "copy.db")  # while pm holds it open
    state, copy = inspect_ledger(path), inspect_ledger(tmp_path / "copy.db")
    assert n == 3 and copy.releases == state.releases
    assert copy.spent_local == state.spent_local == pytest.approx(pm.spent)
    assert _open(bank, tmp_path / "copy.db").spent == pm.spent
    with pytest.raises(LedgerError, match="already exists"):
        backup_ledger(path, tmp_path / "copy.db")
    with pytest.raises(LedgerError, match="does not exist"):
        backup_ledger(tmp_path / "missing.db", tmp_path / "c2.db")
    assert not (tmp_path / "c2.db").exists()
    assert not [f for f in tmp_path.iterdir() if ".tmp" in f.name]
    pm.close()


def _json_ledger(tmp_path, bank, releases, **fp_edit):
    import hashlib

    from brace.ledger import bank_fingerprint

    fp = {**bank_fingerprint(bank, 0.8), **fp_edit}
    fp = {k: v for k, v in fp.items() if v is not None}
    body = {"format": "brace-ledger/1", "brace_version": "0.1.0", "created": "then",
            "fingerprint": fp, "budget": {"epsilon": 20.0, "delta": 1e-5},
            "releases": releases}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
    src = tmp_path / "old.json"
    src.write_text(json.dumps({**body, "checksum": hashlib.sha256(blob.encode()).hexdigest()}))
    return src


@pytest.mark.parametrize("case", ["negative rho", "1e9 steps", "no shape"])
def test_a_failed_migration_leaves_nothing_behind(bank, tmp_path, case):
    """Issue reproducers: a failed migrate (negative rho; a 1e9 self-composition that ran
    out of memory; a fingerprint without shape) left a fresh full-budget ledger, or
    raised MemoryError / KeyError."""
    from brace.accounting import GaussianStep, SelfComposed
    from brace.ledger import event_to_dict

    good = {"method": "global", "queries": 2, "steps": 3, "epsilon": 1.0, "delta": 1e-6,
            "params": {}, "event": event_to_dict(SelfComposed(GaussianStep(0.05), 6))}
    releases, fp, match = [good], {}, ""
    if case == "negative rho":
        releases.append({**good, "event": {"type": "SelfComposed", "count": 2, "event":
                                           {"type": "GaussianStep", "rho": -0.5}}})
        match = "rho must be a finite number"
    elif case == "1e9 steps":
        releases.append({**good, "event": event_to_dict(SelfComposed(GaussianStep(1e-12),
                                                                     10**9))})
        match = "release 2 records 1,000,000,000 steps in d = 2.*past the limit"
    else:
        fp, match = {"shape": None}, "'shape' must be \\[n, d\\]"
    src = _json_ledger(tmp_path, bank, releases, **fp)
    target = tmp_path / "new.db"
    t0 = time.perf_counter()
    with pytest.raises(LedgerError, match=match):
        migrate_json_ledger(src, target)
    assert time.perf_counter() - t0 < 5.0
    assert sorted(f.name for f in tmp_path.iterdir()) == ["old.json"]


def _unwritable(path: Path):
    """Make ``path`` unwritable for this process: chmod, or for root (whom chmod does not
    restrict) the immutable attribute. Returns the undo, or skips."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        return lambda: path.chmod(mode)
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("running as root, where chmod does not restrict, and chattr +i is not "
                    f"available here ({done.stderr.decode().strip()})")
    return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("where", ["file", "directory"])
def test_permission_problems_are_named_and_reads_still_work(bank, tmp_path, where, capsys):
    """Issue reproducer: in a read-only directory or on a chmod 444 ledger, opening,
    retrieving and 'brace ledger show' reported 'corrupt, truncated or foreign' or a raw
    sqlite3.OperationalError."""
    from brace.cli import main

    d = tmp_path / "d"
    d.mkdir()
    path = d / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    spent = pm.spent
    pm.close()  # the journal files are gone: the main file is complete
    undo = _unwritable(path if where == "file" else d)
    try:
        state = inspect_ledger(path)  # reads open the ledger read-only
        assert len(state.releases) == 1 and state.spent_local == pytest.approx(spent)
        assert main(["ledger", "show", str(path)]) == 0
        assert "releases         : 1" in capsys.readouterr().out
        if where == "file":  # opens for reading; a release is refused, naming why
            pm = _open(bank, path)
            assert pm.spent == spent
            with pytest.raises(LedgerError, match="read-only here: permission denied.*may "
                               "not write"):
                pm.retrieve(bank[5:6], steps=1, epsilon=1.0, delta=1e-6, seed=0)
            pm.close()
        else:  # SQLite cannot keep its journal files: opening names the directory
            with pytest.raises(LedgerError, match="permission denied.*may not write its "
                               "directory"):
                _open(bank, path)
            with pytest.raises(LedgerError, match="permission denied.*directory"):
                _new(bank, d / "new.db")
            assert main(["ledger", "backup", str(path), str(d / "b.db")]) == 2
            assert "permission denied" in capsys.readouterr().err
    finally:
        undo()
    assert len(inspect_ledger(path).releases) == 1


def test_edited_rows_with_a_valid_digest_are_ledger_errors(bank, tmp_path):
    """Issue reproducers: rows edited and the unkeyed digest recomputed: a filter without
    orders (KeyError), orders "ab" (TypeError), a 7-byte outputs blob (numpy's buffer
    error). Each is a LedgerError that names the problem."""
    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    pm.close()

    conn = sqlite3.connect(path, isolation_level=None)
    meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}

    def edit_meta(**change):  # the metadata digest recomputed
        Ledger._write_meta(conn, {**meta, **change}, None)

    original = meta["filter"]
    for filt, match in [({"delta_direct": 5e-6}, "filter's 'orders' must be"),
                        ({**original, "orders": "ab"}, "filter's 'orders' must be"),
                        ({**original, "delta_direct": 1.0}, "delta_direct must be"),
                        ("x", "filter must be an object")]:
        edit_meta(filter=filt)
        with pytest.raises(LedgerError, match=match):
            _open(bank, path)
        with pytest.raises(LedgerError, match=match):
            inspect_ledger(path)
    edit_meta(filter=original)
    conn.close()
    db = Ledger.open(path)
    row = db._conn.execute("SELECT * FROM releases WHERE id = 1").fetchone()
    blob = bytes(row[4])[:7]
    mac = db._row_mac("", 1, row[1], row[2], row[3], blob, row[5], row[6], row[7])
    db._conn.execute("UPDATE releases SET outputs = ?, mac = ? WHERE id = 1", (blob, mac))
    db._write_meta(db._conn, {**db.meta, "head": {"count": 1, "mac": mac}}, None)
    db.close()
    with pytest.raises(LedgerError, match="outputs is a blob of 7 bytes"):
        _open(bank, path)


def test_a_backup_sees_a_release_committed_after_the_source_was_opened(bank, tmp_path,
                                                                      monkeypatch):
    """A writer commits between the backup opening its source and copying it: the backup
    holds that release too and is not reported damaged (it was, when the source's head
    was checked against rows read later)."""
    from brace.ledger import backup_ledger

    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    real = Ledger.open.__func__

    def open_then_write(cls, *a, **kw):
        db = real(cls, *a, **kw)
        if kw.get("write") is False:  # the backup's source: another release lands now
            pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=1)
        return db

    monkeypatch.setattr(Ledger, "open", classmethod(open_then_write))
    assert backup_ledger(path, tmp_path / "copy.db") == 2
    monkeypatch.undo()
    assert len(inspect_ledger(tmp_path / "copy.db").releases) == 2
    pm.close()


def test_a_refused_call_keeps_what_other_processes_recorded(bank, tmp_path):
    """A refusal after the call read another process's releases keeps them in memory: only
    a transaction that appended this object's own release and then failed is forgotten."""
    path = tmp_path / "ledger.db"
    a = PrivateMemory(bank, radius=0.8, budget=(3.0, 1e-5), ledger=path, create=True)
    b = PrivateMemory(bank, radius=0.8, budget=(3.0, 1e-5), ledger=path)
    a.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    b.retrieve(bank[:1] + 0.01, steps=1, epsilon=1.0, delta=1e-6, seed=1)
    with pytest.raises(brace.BudgetExceededError):
        a.retrieve(bank[:1], steps=3, epsilon=3.0, delta=1e-6, seed=2)
    # b's release read, kept, not re-read (each release: its pending charge, then itself)
    assert len(a._rows) == 2 and a._last_id == 4
    a.close()
    b.close()


def test_a_failed_commit_of_a_seedless_snapshot_is_forgotten(bank, tmp_path, monkeypatch):
    """The snapshot without seeds records its rounds in the ledger's transaction: when
    the commit fails, nothing of it stays counted in memory."""
    path = tmp_path / "ledger.db"
    pm = _new(bank, path)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    spent = pm.spent
    monkeypatch.setattr(Ledger, "_check_identity", _fail_second_call())
    with pytest.raises(LedgerError, match="injected"):
        pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0, seed=3)
    monkeypatch.undo()
    assert pm.spent == spent and len(pm.releases) == 1
    assert len(inspect_ledger(path).releases) == 1
    pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0, seed=3)
    assert len(pm.releases) == len(inspect_ledger(path).releases) > 1
    pm.close()
