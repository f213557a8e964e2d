"""The PostgreSQL privacy ledger (docs/ledger.md §9): the SQLite ledger's semantics on a
real server — explicit creation, binding, chain and MAC, lock time-out, a refused call,
kill -9, two processes racing for the last of the budget, a lost connection — and
backups (a verified copy between backends). A throw-away server is started by
``conftest.py`` (skipped, with one line, where no server binary exists)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import numpy as np
import pytest

from brace import BudgetExceededError, PrivateMemory
from brace.budget import AdmittedCallFailed, inspect_ledger, migrate_json_ledger
from brace.ledger import LedgerError, LedgerLockTimeout
from brace.ledger.backend import LedgerUnavailable, ledger_class, redact_url
from brace.ledger.backup import copy_ledger
from pgserver import free_port  # tests/, on the path for conftest.py

psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (the 'serve' extra)")

KEY = "a-test-key-of-enough-length"


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(0).normal(size=(120, 2))


def _new(bank, url, **kw):
    return PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=url, create=True,
                         **kw)


def _open(bank, url, **kw):
    return PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=url, **kw)


def _sql(url, stmt, *args):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(stmt, args)


def _state(url, **kw):
    d = inspect_ledger(url, **kw).to_dict()
    d.pop("path")
    return d


def test_a_pg_ledger_is_created_only_explicitly(bank, pg_url):
    with pytest.raises(LedgerError, match="does not exist.*brace ledger init"):
        _open(bank, pg_url)
    with pytest.raises(LedgerError, match="no schema of the search_path exists"):
        _new(bank, pg_url.replace("%3Dt", "%3Dmissing"))
    pm = _new(bank, pg_url)
    assert pm.ledger == pg_url and type(pm._db).__name__ == "PgLedger"
    with pytest.raises(LedgerError, match="already exists"):
        _new(bank, pg_url)
    with pytest.raises(LedgerError, match="cannot reach"):
        _open(bank, f"postgresql://brace@127.0.0.1:{free_port()}/postgres")
    assert redact_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


def test_pg_ledger_persists_binds_and_answers_repeats(bank, pg_url):
    pm = _new(bank, pg_url)
    r1 = pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=5)
    pm.retrieve(bank[5:7], steps=3, epsilon=0.5, delta=1e-6, method="endpoint",
                noise="secure")
    again = _open(bank.copy(), pg_url)
    assert again.spent == pm.spent > 0 and len(again.releases) == 2
    state = inspect_ledger(pg_url)
    assert state.spent_local == pytest.approx(pm.spent)
    assert state.spent_local <= state.spent_global
    assert "seed" not in state.releases[0]["params"]
    res = again.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=99)  # a repeat
    assert np.array_equal(res.outputs, r1.outputs) and len(again.releases) == 2
    with psycopg.connect(pg_url) as conn:  # never the data
        blob = b"".join(bytes(r[0]) + bytes(r[1]) for r in conn.execute(
            "SELECT outputs, centres FROM releases").fetchall())
    assert bank[50].tobytes() not in blob
    other = bank.copy()
    other[3, 1] = np.nextafter(other[3, 1], np.inf)
    with pytest.raises(LedgerError, match="another bank"):
        _open(other, pg_url)
    with pytest.raises(LedgerError, match="budget"):
        PrivateMemory(bank, radius=0.8, budget=(40.0, 1e-5), ledger=pg_url)


@pytest.mark.parametrize("damage", ["edit", "delete", "head", "budget", "foreign"])
def test_damaged_pg_ledger_is_a_clear_error_never_a_reset(bank, pg_url, damage):
    pm = _new(bank, pg_url)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    pm.retrieve(bank[9:10], steps=2, epsilon=1.0, delta=1e-6, seed=1)
    pm.close()
    stmt, match = {
        "edit": ("UPDATE releases SET record = replace(record, '\"queries\": 3', "
                 "'\"queries\": 1') WHERE id = 1", "integrity check at release 1"),
        "delete": ("DELETE FROM releases WHERE id = 1", "release 1 is missing"),
        # the last row (each release: its pending charge, then itself)
        "head": ("DELETE FROM releases WHERE id = 4", "integrity check: it holds 3"),
        "budget": ("UPDATE meta SET value = '{\"epsilon\": 40.0, \"delta\": 1e-05}' "
                   "WHERE key = 'budget'", "integrity check \\(metadata\\)"),
        "foreign": ("UPDATE meta SET value = '\"other\"' WHERE key = 'format'",
                    "not a brace ledger"),
    }[damage]
    _sql(pg_url, stmt)
    with psycopg.connect(pg_url) as conn:
        before = conn.execute("SELECT count(*) FROM releases").fetchone()
    with pytest.raises(LedgerError, match=match):
        pm = _open(bank, pg_url)
        pm.spent  # noqa: B018 (a read verifies the chain)
    with psycopg.connect(pg_url) as conn:  # left as found
        assert conn.execute("SELECT count(*) FROM releases").fetchone() == before


def test_pg_edits_with_a_recomputed_digest_need_the_key(bank, pg_url):
    pm = _new(bank, pg_url, ledger_key=KEY)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    with pytest.raises(LedgerError, match="is keyed"):
        _open(bank, pg_url)
    with pytest.raises(LedgerError, match="key is wrong"):
        _open(bank, pg_url, ledger_key=KEY + "x")
    # a plausible edit (a smaller rho) with the unkeyed digest recomputed: refused
    db = ledger_class(pg_url).open(pg_url, key=KEY)
    row = db._conn.execute("SELECT * FROM releases WHERE id = 1").fetchone()
    rec = json.loads(row[3])
    rec["event"]["rho"] /= 100
    text = json.dumps(rec, sort_keys=True)
    db._key = None
    mac = db._row_mac("", 1, row[1], row[2], text, bytes(row[4]), None, bytes(row[6]),
                      bytes(row[7]))
    db._conn.execute("UPDATE releases SET record = %s, mac = %s WHERE id = 1", (text, mac))
    db.close()
    with pytest.raises(LedgerError, match="integrity"):
        _open(bank, pg_url, ledger_key=KEY).spent  # noqa: B018


def test_a_held_pg_lock_times_out_naming_the_holder(bank, pg_url):
    pm = _new(bank, pg_url, lock_timeout=0.3)
    with psycopg.connect(pg_url, application_name="brace holder test") as holder:
        holder.execute("SELECT value FROM meta WHERE key = 'head' FOR UPDATE")  # a tx
        t0 = time.monotonic()
        with pytest.raises(LedgerLockTimeout, match=r"within 0.3 s: held by one of: brace "
                                                    r"holder test"):
            pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
        assert time.monotonic() - t0 < 5.0
    assert len(pm.releases) == 0  # nothing released or spent
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    assert len(pm.releases) == 1


def test_refused_pg_call_leaves_the_ledger_unchanged(bank, pg_url):
    pm = PrivateMemory(bank, radius=0.8, budget=(2.0, 1e-5), ledger=pg_url, create=True)
    pm.retrieve(bank[:1], steps=1, epsilon=0.5, delta=1e-6, method="global", seed=0)
    before = _state(pg_url)
    with pytest.raises(BudgetExceededError):
        pm.retrieve(bank[:30], steps=3, epsilon=2.0, delta=1e-6, seed=0)
    assert _state(pg_url) == before


def test_a_release_written_at_commit_that_fails_is_neither_served_nor_counted(
        bank, pg_url, monkeypatch):
    """The release row, the new head and COMMIT go to the server in one round trip when
    the transaction ends: if that write fails (here the row's INSERT), the call raises,
    nothing is recorded, nothing stays counted in memory, and the next call works."""
    from psycopg import sql

    pm = _new(bank, pg_url)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    before = _state(pg_url)
    monkeypatch.setitem(pm._db._sql, "insert", sql.SQL(
        "INSERT INTO no_such_table VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"))
    with pytest.raises(LedgerError, match="no_such_table"):
        pm.retrieve(bank[3:4], steps=1, epsilon=1.0, delta=1e-6, seed=1)
    monkeypatch.undo()
    assert _state(pg_url) == before and len(pm.releases) == 1
    pm.retrieve(bank[3:4], steps=1, epsilon=1.0, delta=1e-6, seed=1)  # not a "repeat"
    assert len(pm.releases) == 2 == len(inspect_ledger(pg_url).releases)
    assert pm.spent == pytest.approx(inspect_ledger(pg_url).spent_local)


def test_a_lost_connection_is_unavailable_then_recovers(bank, pg_url, monkeypatch):
    """The server drops the session (as a restart does): the call fails clearly, and a
    COMMIT lost with it leaves nothing half-known in memory; the next call reconnects."""
    pm = _new(bank, pg_url)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    admin = psycopg.connect(pg_url, autocommit=True)

    def kill():
        admin.execute("SELECT pg_terminate_backend(%s)", (pm._db._conn.info.backend_pid,))

    kill()
    with pytest.raises(LedgerUnavailable, match="lost the connection"):
        pm.retrieve(bank[3:4], steps=1, epsilon=1.0, delta=1e-6, seed=1)
    db, real = pm._db, pm._db.transaction

    def commit_lost(phase):
        @contextlib.contextmanager
        def transaction(durable=True):
            with real(durable):
                yield
                if durable == (phase == "release"):
                    kill()  # the rows inserted, before COMMIT
        return transaction

    # the pending charge's commit lost: nothing was admitted, nothing is charged
    monkeypatch.setattr(db, "transaction", commit_lost("charge"))
    with pytest.raises(LedgerUnavailable):
        pm.retrieve(bank[5:6], steps=1, epsilon=1.0, delta=1e-6, seed=2)
    monkeypatch.undo()
    assert len(pm.releases) == 1 == len(inspect_ledger(pg_url).releases)
    # the release's commit lost (the release computed): its pending charge stands
    monkeypatch.setattr(db, "transaction", commit_lost("release"))
    with pytest.raises(AdmittedCallFailed, match="budget was charged") as e:
        pm.retrieve(bank[5:6], steps=1, epsilon=1.0, delta=1e-6, seed=2)
    assert isinstance(e.value.__cause__, LedgerUnavailable)
    monkeypatch.undo()
    assert len(pm.releases) == 2 == len(inspect_ledger(pg_url).releases)
    assert len(inspect_ledger(pg_url).pending) == 1
    pm.retrieve(bank[5:6], steps=1, epsilon=1.0, delta=1e-6, seed=2)  # not a "repeat"
    assert len(pm.releases) == 3 and pm.spent == pytest.approx(
        inspect_ledger(pg_url).spent_local)
    admin.close()


# --------------------------------------------------------------------------------------
# real processes: kill -9, a race for the last of the budget, readers during writes
# --------------------------------------------------------------------------------------

def _worker(out, mode, ledger, budget, go):
    """A writer in a forked process: ``loop`` records releases and reports each returned
    one (``RETURNED i``, written unbuffered before the next starts); ``race`` asks for
    one release when ``go`` appears."""
    import brace

    def say(text):
        os.write(out, (text + "\n").encode())

    X = np.random.default_rng(0).normal(size=(120, 2))
    pm = brace.PrivateMemory(X, radius=0.8, budget=(budget, 1e-5), ledger=ledger,
                             accounting="global", lock_timeout=60)
    say("READY")
    if mode == "loop":
        for i in range(100000):
            pm.retrieve(X[i % 120:i % 120 + 1], steps=2, epsilon=0.5, delta=1e-6,
                        method="global", noise="secure", fresh=True)
            say(f"RETURNED {i}")
    while not os.path.exists(go):
        time.sleep(0.0005)
    try:
        pm.retrieve(X[:1], steps=2, epsilon=0.5, delta=1e-6, method="global",
                    noise="secure", fresh=True)
        say("WON")
    except brace.BudgetExceededError:
        say("REFUSED")


def _fork(*args):
    """Run :func:`_worker` in a forked process (a real process, started in
    milliseconds): its pid and a reader of its lines."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest, and runs no finalizer
        os.close(r)
        code = 0
        try:
            _worker(w, *args)
        except BaseException as exc:  # noqa: BLE001
            os.write(w, f"ERROR {exc!r}\n".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, os.fdopen(r)


def _reap(pid, sig=signal.SIGKILL):
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    os.waitpid(pid, 0)


def _create(url, budget):
    PrivateMemory(np.random.default_rng(0).normal(size=(120, 2)), radius=0.8,
                  budget=(budget, 1e-5), ledger=url, create=True).close()


def test_kill_minus_9_never_loses_a_returned_pg_release(pg_server):
    rng = np.random.default_rng(1)
    for round_ in range(3):
        url = pg_server.new_schema(f"kill{os.getpid()}_{round_}")
        _create(url, 1e6)
        pid, lines = _fork("loop", url, 1e6, "-")
        assert lines.readline().strip() == "READY"
        returned = []
        while len(returned) < 2 + round_:
            line = lines.readline()
            assert line.startswith("RETURNED"), line
            returned.append(int(line.split()[1]))
        if round_:  # also kill at a random moment of the next release
            time.sleep(float(rng.uniform(0.0, 0.03)))
        os.kill(pid, signal.SIGKILL)  # round 0: right after a release returned
        _reap(pid)
        returned += [int(line.split()[1]) for line in lines.read().splitlines()]
        lines.close()
        assert returned == list(range(len(returned)))
        n = len(inspect_ledger(url).releases)  # never corrupt or half-written
        assert len(returned) <= n <= len(returned) + 1, (len(returned), n)
        pm = PrivateMemory(np.random.default_rng(0).normal(size=(120, 2)), radius=0.8,
                           budget=(1e6, 1e-5), ledger=url, lock_timeout=10)
        pm.retrieve(np.zeros((1, 2)), steps=1, epsilon=1.0, noise="secure")  # lock freed
        pm.close()


def test_two_processes_race_for_the_last_of_a_pg_budget(tmp_path, pg_url):
    from brace.accounting.filter import FilterSpec, event_weights
    from brace.plan import plan_release

    plan = plan_release((120, 2), radius=0.8, method="global", epsilon=0.5, delta=1e-6,
                        steps=2, noise="secure")
    w = event_weights(plan.spent.step_event) * 2  # one call
    lo, hi = 0.01, 50.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        (lo, hi) = (lo, mid) if FilterSpec.for_budget(mid, 1e-5).admits(w) else (mid, hi)
    budget = hi * 1.0001
    assert not FilterSpec.for_budget(budget, 1e-5).admits(2 * w)
    _create(pg_url, budget)
    go = tmp_path / "go"
    workers = [_fork("race", pg_url, budget, str(go)) for _ in range(2)]
    for _, lines in workers:
        assert lines.readline().strip() == "READY"
    go.touch()
    outcomes = []
    for pid, lines in workers:
        outcomes.append(lines.readline().strip())
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, outcomes
        lines.close()
    assert sorted(outcomes) == ["REFUSED", "WON"]
    assert len(inspect_ledger(pg_url).releases) == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_reader_sees_one_moment_while_another_writes(tmp_path, request, monkeypatch,
                                                       backend):
    """A read of the spend takes the head and the releases from one snapshot: a release
    committed by another writer between its two reads is not a damaged chain."""
    url = (request.getfixturevalue("pg_url") if backend == "postgresql"
           else str(tmp_path / "ledger.db"))
    X = np.random.default_rng(0).normal(size=(120, 2))
    reader = PrivateMemory(X, radius=0.8, budget=(1e6, 1e-5), ledger=url, create=True)
    writer = PrivateMemory(X, radius=0.8, budget=(1e6, 1e-5), ledger=url)
    real = reader._db.refresh_meta

    def refresh_then_another_writes():
        real()
        writer.retrieve(X[:1], steps=1, epsilon=1.0, noise="secure")

    monkeypatch.setattr(reader._db, "refresh_meta", refresh_then_another_writes)
    assert reader.spent == 0.0  # the moment before the other release
    assert len(inspect_ledger(url).releases) == 1
    monkeypatch.undo()
    assert writer.spent > 0 and reader.spent == pytest.approx(writer.spent)


# --------------------------------------------------------------------------------------
# backup and restore: a verified copy between backends; migration; the CLI
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, KEY])
def test_backup_to_a_file_and_restore_to_postgresql(bank, pg_url, pg_server, tmp_path, key):
    pm = _new(bank, pg_url, ledger_key=key)
    r = pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, noise="secure")
    pm.retrieve(bank[7:8], steps=1, epsilon=0.5, delta=1e-6, method="global", seed=3)
    pm.snapshot(bank[:4], epsilon=1.0, seed=0)
    backup = tmp_path / "backup.db"
    state = copy_ledger(pg_url, backup, ledger_key=key)
    assert len(state.releases) == len(pm.releases) == 4
    assert _state(backup, ledger_key=key) == _state(pg_url, ledger_key=key)
    restored = pg_server.new_schema(f"restored{os.getpid()}_{key is None}")
    copy_ledger(backup, restored, ledger_key=key)
    assert _state(restored, ledger_key=key) == _state(pg_url, ledger_key=key)
    again = _open(bank, restored, ledger_key=key)
    assert again.spent == pytest.approx(pm.spent)
    rep = again.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, noise="secure")
    assert np.array_equal(rep.outputs, r.outputs) and len(again.releases) == 4  # free
    with pytest.raises(LedgerError, match="already exists"):
        copy_ledger(pg_url, backup, ledger_key=key)
    assert _state(backup, ledger_key=key)["releases"] == state.to_dict()["releases"]


def test_a_damaged_ledger_is_not_backed_up(bank, pg_url, tmp_path):
    pm = _new(bank, pg_url)
    pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    _sql(pg_url, "UPDATE releases SET call_key = 'x' WHERE id = 1")
    with pytest.raises(LedgerError, match="integrity check at release 1"):
        copy_ledger(pg_url, tmp_path / "b.db")
    assert not (tmp_path / "b.db").exists()


def test_json_ledgers_migrate_into_postgresql(bank, pg_url, tmp_path):
    import hashlib

    from brace.accounting import GaussianStep, SelfComposed
    from brace.ledger import bank_fingerprint, event_to_dict

    body = {"format": "brace-ledger/1", "brace_version": "0.1.0", "created": "then",
            "fingerprint": bank_fingerprint(bank, 0.8),
            "budget": {"epsilon": 20.0, "delta": 1e-5},
            "releases": [{"method": "global", "queries": 2, "steps": 3, "epsilon": 1.0,
                          "delta": 1e-6, "params": {},
                          "event": event_to_dict(SelfComposed(GaussianStep(0.05), 6))}]}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
    src = tmp_path / "old.json"
    src.write_text(json.dumps({**body, "checksum": hashlib.sha256(blob.encode()).hexdigest()}))
    state = migrate_json_ledger(src, pg_url)
    assert state.spent_local == state.spent_global > 0
    assert _open(bank, pg_url).spent == pytest.approx(state.spent_local)


def test_cli_init_show_backup_restore_with_a_url(bank, pg_url, pg_server, tmp_path, capsys):
    from brace.cli import main

    np.save(tmp_path / "bank.npy", bank)
    assert main(["ledger", "init", pg_url, "--bank", str(tmp_path / "bank.npy"),
                 "--radius", "0.8", "--budget", "20"]) == 0
    _open(bank, pg_url).retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    assert main(["ledger", "show", pg_url]) == 0
    assert "releases         : 1" in capsys.readouterr().out
    assert main(["ledger", "backup", pg_url, str(tmp_path / "b.db")]) == 0
    target = pg_server.new_schema(f"cli{os.getpid()}")
    assert main(["ledger", "restore", str(tmp_path / "b.db"), target]) == 0
    out = capsys.readouterr().out
    assert "restored" in out and "1 release(s), chain verified" in out
    assert "not in the restored ledger" in out
    assert main(["ledger", "init", pg_url, "--bank", str(tmp_path / "bank.npy"),
                 "--radius", "0.8", "--budget", "20"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_closed_pg_ledger_is_an_error_not_a_reconnection(bank, pg_url):
    """After ``close()`` the PostgreSQL ledger refuses every use (it reconnects only after
    a lost connection), and a write outside a transaction is refused."""
    pm = _new(bank, pg_url)
    pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=0)
    db = pm._db
    with db.read_view(), pytest.raises(LedgerError, match="only inside transaction"):
        db.insert_raw([], db.meta)
    pm.close()
    assert db.closed
    with pytest.raises(LedgerError, match="is closed"):
        pm.retrieve(bank[1:2], steps=1, epsilon=1.0, delta=1e-6, seed=1)
    assert len(inspect_ledger(pg_url).releases) == 1
