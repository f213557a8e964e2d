"""The two-phase record (docs/ledger.md §4.1): an admitted call's charge is committed as
pending rows before the bank is read, and its release replaces it. A process that dies
after admission leaves its call charged (SQLite and PostgreSQL); a successful call
charges exactly what its release alone would; another process counts a pending charge
until its completion arrives; repeats, `brace ledger show` and copies follow the rule."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from brace import PrivateMemory
from brace.accounting.filter import FootprintIndex, K, convert
from brace.budget import AdmittedCallFailed, inspect_ledger
from brace.cli import main
from brace.ledger import (
    LedgerError,
    backup_ledger,
    copy_ledger,
    event_from_dict,
    ledger_class,
    settle,
    weights,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")
BUDGET = (20.0, 1e-5)


def _bank():
    return np.random.default_rng(0).normal(size=(120, 3))


def _call(pm, what):
    """The admitted call of each path (the same in the child and in the reference)."""
    X = _bank()
    if what == "retrieve":
        return pm.retrieve(X[:2], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    if what == "seeded":
        return pm.snapshot(X[:4], epsilon=1.0, seed=1)
    if what == "seedless":
        return pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0, seed=1)
    return pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0, seed=1, project=1)


#: the function each path calls first after admission (it reads the bank)
HOOK = {"retrieve": ("brace.budget.facade", "run_plan"),
        "seeded": ("brace.budget.snapshot", "release_cell_round"),
        "seedless": ("brace.budget.seedless", "private_seeds"),
        "projected": ("brace.budget.seedless", "private_projected_seeds")}

CHILD = textwrap.dedent(
    """
    import importlib, os, signal, sys
    sys.path.insert(0, sys.argv[4])
    import numpy as np
    import brace
    from test_ledger_twophase import BUDGET, HOOK, _bank, _call
    ledger, what, how = sys.argv[1:4]

    def die(*a, **kw):  # admitted: the charge is committed, the bank not yet read
        print("ADMITTED", flush=True)
        if how == "exit":
            os._exit(1)
        os.kill(os.getpid(), signal.SIGKILL)

    module, name = HOOK[what]
    setattr(importlib.import_module(module), name, die)
    pm = brace.PrivateMemory(_bank(), radius=0.8, budget=BUDGET, ledger=ledger)
    _call(pm, what)
    print("RETURNED", flush=True)
    """
)


def _run_child(tmp_path, ledger, what, how):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(script), str(ledger), what, how,
                           str(Path(__file__).parent)], env=env, capture_output=True,
                          text=True, timeout=180)


def _charged_in_memory(monkeypatch, what):
    """The spend of the same call failing after admission, without a ledger: its charge."""
    import importlib

    def fails(*a, **kw):
        raise RuntimeError("after admission")

    module, name = HOOK[what]
    with monkeypatch.context() as m:
        m.setattr(importlib.import_module(module), name, fails)
        pm = PrivateMemory(_bank(), radius=0.8, budget=BUDGET)
        with pytest.raises(AdmittedCallFailed, match="budget was charged"):
            _call(pm, what)
    return pm.spent


def _killed_after_admission(tmp_path, monkeypatch, capsys, ledger, what, how):
    PrivateMemory(_bank(), radius=0.8, budget=BUDGET, ledger=ledger, create=True).close()
    out = _run_child(tmp_path, ledger, what, how)
    assert out.returncode != 0 and "ADMITTED" in out.stdout, out.stderr
    assert "RETURNED" not in out.stdout
    charge = _charged_in_memory(monkeypatch, what)
    assert charge > 0
    pm = PrivateMemory(_bank(), radius=0.8, budget=BUDGET, ledger=ledger)
    # before the two-phase record: 0 (the call's one transaction was rolled back)
    assert pm.spent == pytest.approx(charge, rel=1e-12)
    state = inspect_ledger(ledger)
    assert state.pending and len(state.releases) == len(state.pending) == state.stored
    assert state.spent_local == pytest.approx(charge, rel=1e-12)
    assert all(r["params"]["pending"] for r in pm.releases)
    assert main(["ledger", "show", str(ledger)]) == 0
    assert "PENDING CHARGE" in capsys.readouterr().out
    # the charge stands: the next call is priced with it, and completes only itself
    pm.retrieve(_bank()[5:6], steps=1, epsilon=1.0, delta=1e-6, seed=3)
    assert inspect_ledger(ledger).pending == state.pending
    pm.close()
    return state


@pytest.mark.parametrize("what", ["retrieve", "seeded", "seedless", "projected"])
def test_a_process_that_exits_after_admission_leaves_its_charge(tmp_path, monkeypatch,
                                                                capsys, what):
    _killed_after_admission(tmp_path, monkeypatch, capsys, tmp_path / "l.db", what, "exit")


def test_a_process_killed_after_admission_leaves_its_charge_and_copies_keep_it(
        tmp_path, monkeypatch, capsys):
    path = tmp_path / "l.db"
    state = _killed_after_admission(tmp_path, monkeypatch, capsys, path, "retrieve", "kill")
    now = inspect_ledger(path)
    assert backup_ledger(path, tmp_path / "backup.db") == len(now.releases)
    copy_ledger(path, tmp_path / "copy.db")
    for other in ("backup.db", "copy.db"):
        got = inspect_ledger(tmp_path / other)
        assert got.pending == state.pending and got.stored == now.stored
        assert got.spent_local == now.spent_local and got.releases == now.releases


@pytest.mark.parametrize("what", ["retrieve", "seedless"])
def test_on_postgresql_a_process_that_exits_after_admission_leaves_its_charge(
        tmp_path, monkeypatch, capsys, pg_url, what):
    pytest.importorskip("psycopg")
    _killed_after_admission(tmp_path, monkeypatch, capsys, pg_url, what, "exit")


# --------------------------------------------------------------------------------------


def _releases_alone(db):
    """The old single-row accounting, independently: the worst pair over the releases'
    own rows (every pending charge left out), local and global."""
    rows = [r for r in db.read_since(0, "") if "pending" not in r.record["params"]]
    index = FootprintIndex(db.meta["fingerprint"]["shape"][1])
    for r in rows:
        w = weights(event_from_dict(r.record["event"]))
        index.add(r.centres, r.radii, np.broadcast_to(w, (r.radii.shape[0], K + 1)))
    return index.worst_pair(), index.global_weights()


@pytest.mark.parametrize("accounting", ["local", "global"])
def test_a_successful_call_charges_exactly_its_release(tmp_path, accounting):
    X = _bank()
    path = tmp_path / "l.db"
    pm = PrivateMemory(X, radius=0.8, budget=(40.0, 1e-5), ledger=path, create=True,
                       accounting=accounting)
    rng = np.random.default_rng(5)
    for i in range(5):
        pm.retrieve(X[rng.integers(0, 120, size=3)] + 0.01 * i, steps=1 + i % 3,
                    epsilon=0.5 + 0.1 * i, delta=1e-6, seed=i,
                    method=("brace", "global", "endpoint")[i % 3])
    pm.snapshot(X[:4], epsilon=1.0, seed=1, steps=1)
    pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0, seed=2)
    local, glob = _releases_alone(pm._db)
    want = convert(local if accounting == "local" else glob, 1e-5)
    # equal to rounding: each reader sums the same weights in its own order
    assert pm.spent == pytest.approx(want, rel=1e-12, abs=0)
    assert pm.remaining == pytest.approx(max(0.0, 40.0 - want), rel=1e-12, abs=0)
    state = inspect_ledger(path)
    # the read-only reader sums the same weights in its own order: equal to rounding
    assert state.spent_local == pytest.approx(convert(local, 1e-5), rel=1e-12, abs=0)
    assert state.spent_global == pytest.approx(convert(glob, 1e-5), rel=1e-12, abs=0)
    assert not state.pending and state.stored == 2 * len(state.releases)
    assert PrivateMemory(X, radius=0.8, budget=(40.0, 1e-5), ledger=path,
                         accounting=accounting).spent == pytest.approx(want, rel=1e-12,
                                                                        abs=0)  # read back
    pm.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_another_process_counts_a_pending_charge_until_it_completes(
        tmp_path, monkeypatch, request, backend):
    import brace.budget.facade as facade

    ledger = (tmp_path / "l.db" if backend == "sqlite"
              else request.getfixturevalue("pg_url"))
    X = _bank()
    a = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=ledger, create=True)
    b = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=ledger)  # its own connection
    charge = _charged_in_memory(monkeypatch, "retrieve")
    real, seen = facade.run_plan, {}

    def looking(*args, **kw):  # a is admitted, its bank not yet read: b looks
        seen.update(spent=b.spent, releases=b.releases,
                    here=b.spent_at(X[:2]), far=b.spent_at(np.full((1, 3), 50.0)))
        return real(*args, **kw)

    monkeypatch.setattr(facade, "run_plan", looking)
    _call(a, "retrieve")
    monkeypatch.undo()
    assert seen["spent"] == pytest.approx(charge, rel=1e-12)  # before: 0 (uncommitted)
    assert [r["params"].get("pending") is not None for r in seen["releases"]] == [True]
    assert np.all(seen["here"] > 0) and seen["far"][0] == 0.0  # at its reserved balls
    assert b.spent == a.spent <= charge  # the completion replaced it, at its footprints
    assert [r["params"].get("completes") for r in b.releases] == [[1]]
    a.close()
    b.close()


def test_repeats_come_only_from_completed_releases(tmp_path, monkeypatch):
    import brace.budget.facade as facade

    X = _bank()
    path = tmp_path / "l.db"
    pm = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=path, create=True)

    def fails(*a, **kw):
        raise RuntimeError("after admission")

    monkeypatch.setattr(facade, "run_plan", fails)
    with pytest.raises(AdmittedCallFailed):
        _call(pm, "retrieve")
    monkeypatch.undo()
    charged = pm.spent
    first = _call(pm, "retrieve")  # the failed call's charge is no release to repeat
    assert pm.spent > charged
    spent = pm.spent
    again = _call(pm, "retrieve")
    assert np.array_equal(again.outputs, first.outputs) and pm.spent == spent
    pm.close()
    other = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=path)
    assert np.array_equal(_call(other, "retrieve").outputs, first.outputs)
    assert other.spent == spent
    assert len(inspect_ledger(path).pending) == 1  # the failed call's
    other.close()


def test_a_completion_must_name_an_open_pending_charge(tmp_path):
    """A row naming a pending charge that is not open (a forged or edited record) could
    cancel a charge: every reader refuses it."""
    X = _bank()
    path = tmp_path / "l.db"
    pm = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=path, create=True)
    _call(pm, "retrieve")
    row = settle(pm._db.read_since(0, ""))[0][0]
    with pm._db.transaction():  # a second completion of pending row 1
        pm._db.append(call_key="x", record=row.record, outputs=row.outputs,
                      released_counts=row.released_counts, centres=row.centres,
                      radii=row.radii)
    pm.close()
    with pytest.raises(LedgerError, match="completes release 1, which is not a pending"):
        inspect_ledger(path)
    with pytest.raises(LedgerError, match="completes release 1, which is not a pending"):
        PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=path)
    db = ledger_class(path).open(path)
    with pytest.raises(LedgerError, match="must be a non-empty list"), db.transaction():
        db.append(call_key="x", record={**row.record, "params": {"completes": []}},
                  outputs=row.outputs, released_counts=row.released_counts,
                  centres=row.centres, radii=row.radii)
    db.close()


def test_a_second_snapshot_admitted_meanwhile_is_charged_not_released(tmp_path,
                                                                      monkeypatch):
    """The server releases one synopsis per ledger (without "again"): another process's
    snapshot admitted while one is computed (its charge pending, not a release) is
    caught when it records — charged, and refused with AdmittedCallFailed."""
    pytest.importorskip("starlette")
    import brace.budget.snapshot as snapshot
    from brace.serve.service import ServedMemory, _released_cells

    X = _bank()
    path = tmp_path / "l.db"
    a = ServedMemory(X, radius=0.8, budget=BUDGET, ledger=path, create=True)
    b = ServedMemory(X, radius=0.8, budget=BUDGET, ledger=path)
    a._snapshot_once = b._snapshot_once = True
    real, done = snapshot.release_cell_round, []

    def b_meanwhile(*args, **kw):  # a is admitted, its bank not yet read
        if not done:
            done.append(1)
            _call(b, "seeded")
        return real(*args, **kw)

    monkeypatch.setattr(snapshot, "release_cell_round", b_meanwhile)
    with pytest.raises(AdmittedCallFailed, match="budget was charged") as e:
        _call(a, "seeded")
    assert type(e.value.__cause__).__name__ == "SnapshotExists"
    state = inspect_ledger(path)
    released = [r for r in state.releases if _released_cells(r)]
    assert len(released) == 2 and len(state.pending) == 2  # b's two rounds; a's charge
    a.close()
    b.close()


def test_repair_keeps_the_pending_charges(tmp_path, monkeypatch):
    """A ledger holding a standing pending charge and a record an earlier version wrote
    unreadably (δ = 5e-324): the repaired copy keeps the charge and spends the same."""
    import json

    import brace.budget.facade as facade
    from brace.ledger import Ledger, repair_ledger

    X = _bank()
    path = tmp_path / "l.db"
    pm = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=path, create=True,
                       accounting="global")
    _call(pm, "retrieve")

    def fails(*a, **kw):
        raise RuntimeError("after admission")

    with monkeypatch.context() as m:
        m.setattr(facade, "run_plan", fails)
        with pytest.raises(AdmittedCallFailed):
            pm.retrieve(X[7:8], steps=1, epsilon=1.0, delta=1e-6, seed=4)
    release = settle(pm._db.read_since(0, ""))[0][0]
    rec = {**release.record, "delta": 5e-324,
           "params": {k: v for k, v in release.record["params"].items()
                      if k != "completes"}}
    with monkeypatch.context() as m:  # as an earlier version wrote it: unchecked
        m.setattr(Ledger, "_parse_row", lambda self, row: None)
        with pm._db.transaction():
            pm._db.append(call_key="earlier", record=json.loads(json.dumps(rec)),
                          outputs=release.outputs, released_counts=release.released_counts,
                          centres=release.centres, radii=release.radii)
    pm.close()
    before = inspect_ledger(path, unreadable=True)
    assert before.pending == (3,) and [i for i, _ in before.unreadable] == [4]
    state, fixed = repair_ledger(path, tmp_path / "fixed.db")
    assert len(fixed) == 1 and state.pending == before.pending
    assert state.stored == before.stored == 4
    one = PrivateMemory(X, radius=0.8, budget=BUDGET, ledger=tmp_path / "fixed.db",
                        accounting="global")
    assert one.spent == pytest.approx(state.spent_global) and one.spent > before.spent_global
    assert [r["params"].get("pending") is not None for r in one.releases] == [
        False, True, False]
    one.close()
