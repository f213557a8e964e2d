"""PrivateMemory, the budget and the persistent ledger (docs/ledger.md)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import brace
from brace import BudgetExceededError, PrivateMemory
from brace.accounting import (
    GaussianStep,
    NonPrivateEvent,
    RdpAccountant,
    SelfComposed,
    SmoothGaussianStep,
    calibrate,
)
from brace.ledger import (
    LedgerError,
    bank_fingerprint,
    compose_records,
    event_from_dict,
    event_to_dict,
    read_ledger,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(0).normal(size=(120, 2))


def per_call_rho(eps, delta, steps, dim=2):
    return calibrate(eps, delta, steps, dim=dim, gamma=0.0, mechanism="global").rho_per_step


# --------------------------------------------------------------------------------------
# composition and refusal
# --------------------------------------------------------------------------------------


def test_spent_is_the_composition_of_every_query_and_step(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(50.0, 1e-5))
    assert pm.spent == 0.0 and pm.remaining == 50.0
    calls = [(3, 2, 1.0, 1e-6), (5, 4, 0.5, 1e-7), (1, 1, 2.0, 1e-6)]
    acc = RdpAccountant()
    for i, (Q, T, eps, dlt) in enumerate(calls):
        res = pm.retrieve(bank[:Q], steps=T, epsilon=eps, delta=dlt, method="global", seed=i)
        assert res.is_private and res.outputs.shape == (Q, T, 2)
        acc.compose(GaussianStep(per_call_rho(eps, dlt, T)), Q * T)
    want = acc.get_epsilon(1e-5)
    assert pm.spent == pytest.approx(want, rel=1e-12)
    assert pm.remaining == pytest.approx(50.0 - want, rel=1e-12)
    # composing beats adding the per-query epsilons (the naive sum)
    assert pm.spent < sum(Q * eps for Q, _, eps, _ in calls)


def test_total_agrees_with_dp_accounting(bank):
    """γ = 0 (global): our continuous-α total is never above Google's RdpAccountant on its
    grid of orders composing GaussianDpEvent, and not far below it."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import rdp_privacy_accountant as google_rdp

    pm = PrivateMemory(bank, radius=0.8, budget=(100.0, 1e-5))
    google = google_rdp.RdpAccountant()
    for i, (Q, T, eps) in enumerate([(4, 3, 1.0), (10, 2, 0.25), (2, 5, 3.0)]):
        pm.retrieve(bank[:Q], steps=T, epsilon=eps, delta=1e-6, method="global", seed=i)
        nm = 1.0 / math.sqrt(2.0 * per_call_rho(eps, 1e-6, T))
        google.compose(dp_accounting.GaussianDpEvent(nm), Q * T)
    g_eps = google.get_epsilon(1e-5)
    assert pm.spent <= g_eps + 1e-9
    assert pm.spent >= 0.98 * g_eps


def test_brace_spend_uses_the_smooth_curve(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(40.0, 1e-5))
    res = pm.retrieve(bank[:3], steps=2, epsilon=2.0, delta=1e-6, seed=0)  # brace default
    p = res.privacy
    assert p.gamma > 0
    want = RdpAccountant().compose(SmoothGaussianStep(p.rho_per_step, p.gamma, 2), 6)
    assert pm.spent == pytest.approx(want.get_epsilon(1e-5), rel=1e-12)
    # per-query and whole-call figures are both reported
    assert p.queries == 3
    assert p.epsilon_total == pytest.approx(want.get_epsilon(1e-6), rel=1e-12)
    assert p.epsilon_total > p.epsilon


def test_refusal_spends_nothing_and_says_what_is_left(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(3.0, 1e-5))
    pm.retrieve(bank[:1], steps=2, epsilon=1.0, delta=1e-6, method="global", seed=0)
    before = pm.spent
    with pytest.raises(BudgetExceededError, match="remaining") as info:
        pm.retrieve(bank[:50], steps=2, epsilon=1.0, delta=1e-6, method="global", seed=1)
    err = info.value
    assert err.spent == pytest.approx(before) and err.requested_total > 3.0
    assert err.remaining == pytest.approx(3.0 - before)
    assert f"{err.remaining:.6g}" in str(err)
    assert pm.spent == before and len(pm.releases) == 1


def test_refusal_happens_before_anything_is_computed(bank, monkeypatch):
    import brace.budget as budget_module

    pm = PrivateMemory(bank, radius=0.8, budget=(1.0, 1e-5))

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("the mechanism ran")

    monkeypatch.setattr(budget_module, "private_retrieve", boom)
    with pytest.raises(BudgetExceededError):
        pm.retrieve(bank[:100], steps=3, epsilon=1.0, delta=1e-6, seed=0)


def test_the_budget_can_be_spent_exactly_to_its_end(bank):
    two = RdpAccountant().compose(GaussianStep(per_call_rho(1.0, 1e-6, 2)), 4)  # 2 calls
    total = two.get_epsilon(1e-5)
    pm = PrivateMemory(bank, radius=0.8, budget=(total * (1 + 1e-12), 1e-5))
    pm.retrieve(bank[:1], steps=2, epsilon=1.0, delta=1e-6, method="global", seed=0)
    pm.retrieve(bank[:1], steps=2, epsilon=1.0, delta=1e-6, method="global", seed=1)
    assert pm.remaining < 1e-9 * total
    with pytest.raises(BudgetExceededError):
        pm.retrieve(bank[:1], steps=1, epsilon=0.01, delta=1e-6, method="global", seed=2)


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        (dict(method="naive"), ValueError, "NOT differentially private"),
        (dict(method="noiseless"), ValueError, "only private methods"),
        (dict(return_clean=True), TypeError, "return_clean"),
        (dict(_innovations=np.zeros((1, 2, 2))), TypeError, "_innovations"),
        (dict(epsilon=-1.0), ValueError, "epsilon must be > 0"),
        (dict(steps=0), ValueError, "steps must be >= 1"),
        (dict(accounting="zcdp"), ValueError, "accounting must be"),
    ],
)
def test_retrieve_refuses(bank, kw, exc, match):
    pm = PrivateMemory(bank, radius=0.8, budget=(10.0, 1e-5))
    args = dict(steps=2, epsilon=1.0, delta=1e-6, seed=0) | kw
    with pytest.raises(exc, match=match):
        pm.retrieve(bank[:1], **args)
    assert pm.spent == 0.0


@pytest.mark.parametrize(
    ("budget", "exc", "match"),
    [(10.0, TypeError, "pair"), ((0.0, 1e-5), ValueError, "budget epsilon must be > 0"),
     ((1.0, 1.0), ValueError, "budget delta must lie in")],
)
def test_bad_budget(bank, budget, exc, match):
    with pytest.raises(exc, match=match):
        PrivateMemory(bank, radius=0.8, budget=budget)


def test_release_carries_no_diagnostics(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(10.0, 1e-5))
    res = pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    assert all(v is None for v in res.diagnostics().values())
    assert "NOT" not in str(res)


def test_non_private_event_composes_to_infinity():
    acc = RdpAccountant().compose(GaussianStep(0.1), 3)
    assert math.isfinite(acc.get_epsilon(1e-5))
    acc.compose(NonPrivateEvent("naive"))
    assert acc.get_epsilon(1e-5) == math.inf
    assert compose_records([{"event": event_to_dict(NonPrivateEvent("x"))}], 1e-5)[0] == math.inf


def test_delta_extra_is_added_as_delta():
    rec = {"event": event_to_dict(SelfComposed(GaussianStep(0.05), 4)), "delta_extra": 4e-6}
    eps, _, extra = compose_records([rec], 1e-5)
    plain = RdpAccountant().compose(GaussianStep(0.05), 4)
    assert extra == 4e-6
    assert eps == pytest.approx(plain.get_epsilon(6e-6), rel=1e-12)
    assert eps > plain.get_epsilon(1e-5)
    assert compose_records([rec, rec, rec], 1e-5)[0] == math.inf  # δ exhausted


@pytest.mark.parametrize(
    "event",
    [GaussianStep(0.25), SmoothGaussianStep(0.3, 0.01, 4),
     SelfComposed(SmoothGaussianStep(0.3, 0.01, 4), 7), NonPrivateEvent("why")],
)
def test_event_round_trip(event):
    assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


# --------------------------------------------------------------------------------------
# the ledger file
# --------------------------------------------------------------------------------------


def test_ledger_persists_and_recomposes(bank, tmp_path):
    path = tmp_path / "ledger.json"
    pm = PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=5)
    pm.retrieve(bank[:2], steps=3, epsilon=0.5, delta=1e-6, method="endpoint", seed=6)
    again = PrivateMemory(bank.copy(), radius=0.8, budget=(20.0, 1e-5), ledger=path)
    assert again.spent == pm.spent > 0
    state = read_ledger(path)
    assert len(state.releases) == 2 and state.spent == pm.spent
    doc = json.loads(path.read_text())
    assert "bank" not in json.dumps(doc["releases"])  # events, never the data
    rec = doc["releases"][0]
    assert rec["event"]["type"] == "SelfComposed" and rec["event"]["count"] == 6
    assert "seed" not in rec and rec["queries"] == 3  # a seed would regenerate the noise
    # the stored bytes do not contain the bank
    assert str(bank[0, 0])[:8] not in path.read_text()


def test_ledger_is_bound_to_its_bank_radius_and_budget(bank, tmp_path):
    path = tmp_path / "ledger.json"
    PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path)
    other = bank.copy()
    other[3, 1] = np.nextafter(other[3, 1], np.inf)
    with pytest.raises(LedgerError, match="another bank"):
        PrivateMemory(other, radius=0.8, budget=(20.0, 1e-5), ledger=path)
    with pytest.raises(LedgerError, match="another bank"):
        PrivateMemory(bank, radius=np.nextafter(0.8, 1.0), budget=(20.0, 1e-5), ledger=path)
    with pytest.raises(LedgerError, match="budget"):
        PrivateMemory(bank, radius=0.8, budget=(40.0, 1e-5), ledger=path)


def test_fingerprint_depends_on_bytes_shape_and_radius(bank):
    a = bank_fingerprint(bank, 0.8)
    assert a == bank_fingerprint(bank.astype(np.float64).copy(), 0.8)
    assert a["sha256"] != bank_fingerprint(bank.reshape(60, 4), 0.8)["sha256"]
    assert a["sha256"] != bank_fingerprint(bank, 0.81)["sha256"]
    assert a["shape"] == [120, 2] and a["dtype"] == "float64"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "edit", "foreign", "nan"])
def test_damaged_ledger_is_a_clear_error_never_a_reset(bank, tmp_path, damage):
    path = tmp_path / "ledger.json"
    pm = PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path)
    pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    text = path.read_text()
    bad = {
        "truncate": text[: len(text) // 2],
        "garbage": "\x00\x01 not json",
        "edit": text.replace('"queries": 3', '"queries": 1'),
        "foreign": json.dumps({"hello": 1}),
        "nan": text.replace('"delta_extra": 0.0', '"delta_extra": NaN'),
    }[damage]
    assert bad != text
    path.write_text(bad)
    match = {"truncate": "corrupt or truncated", "garbage": "corrupt or truncated",
             "edit": "checksum", "foreign": "not a brace ledger", "nan": "NaN"}[damage]
    with pytest.raises(LedgerError, match=match):
        PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path)
    with pytest.raises(LedgerError):
        pm.retrieve(bank[:1], steps=1, epsilon=1.0, delta=1e-6, seed=1)
    assert path.read_text() == bad  # left as found


def test_refused_call_leaves_the_ledger_unchanged(bank, tmp_path):
    path = tmp_path / "ledger.json"
    pm = PrivateMemory(bank, radius=0.8, budget=(2.0, 1e-5), ledger=path)
    pm.retrieve(bank[:1], steps=1, epsilon=0.5, delta=1e-6, method="global", seed=0)
    before = path.read_bytes()
    with pytest.raises(BudgetExceededError):
        pm.retrieve(bank[:100], steps=3, epsilon=1.0, delta=1e-6, seed=0)
    assert path.read_bytes() == before


# --------------------------------------------------------------------------------------
# real processes: kill -9 and a race for the last of the budget
# --------------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import brace
    mode, ledger, budget, go = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    X = np.random.default_rng(0).normal(size=(120, 2))
    pm = brace.PrivateMemory(X, radius=0.8, budget=(budget, 1e-5), ledger=ledger)
    print("READY", flush=True)
    if mode == "loop":
        for i in range(100000):
            pm.retrieve(X[:1], steps=2, epsilon=0.5, delta=1e-6, method="global", seed=i)
            print("RETURNED", i, flush=True)
    else:
        while not os.path.exists(go):
            time.sleep(0.0005)
        try:
            pm.retrieve(X[:1], steps=2, epsilon=0.5, delta=1e-6, method="global", seed=1)
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


def _one_call_total(calls):
    rho = per_call_rho(0.5, 1e-6, 2)
    return RdpAccountant().compose(GaussianStep(rho), 2 * calls).get_epsilon(1e-5)


def test_kill_minus_9_never_loses_a_returned_release(bank, tmp_path):
    rng = np.random.default_rng(1)
    for round_ in range(3):
        path = tmp_path / f"ledger{round_}.json"
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
        state = read_ledger(path)  # never corrupt or half-written
        ids = [r["id"] for r in state.releases]
        # every returned release is recorded, in order; at most the one in flight more
        assert ids == list(range(1, len(ids) + 1))
        assert len(returned) <= len(ids) <= len(returned) + 1, (len(returned), len(ids))
        assert state.spent == pytest.approx(_one_call_total(len(ids)), rel=1e-12)


def test_two_processes_race_for_the_last_of_the_budget(bank, tmp_path):
    path = tmp_path / "ledger.json"
    go = tmp_path / "go"
    one, two = _one_call_total(1), _one_call_total(2)
    budget = 0.5 * (one + two)  # room for exactly one call
    procs = [_spawn(tmp_path, "race", path, budget, go) for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "READY", p.stderr.read()
    go.touch()
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["REFUSED", "WON"]
    state = read_ledger(path)
    assert len(state.releases) == 1
    assert state.spent == pytest.approx(one, rel=1e-12) and state.spent <= budget


def test_public_names():
    for name in ("PrivateMemory", "BudgetExceededError", "load_result", "DEFAULT_KAPPA"):
        assert name in brace.__all__ and hasattr(brace, name)


@pytest.mark.parametrize("kw", [dict(release="count"), dict(gamma="gates"),
                                dict(release="auto")])
def test_other_brace_calibrations_are_priced_as_released(bank, tmp_path, kw):
    path = tmp_path / "ledger.json"
    pm = PrivateMemory(bank, radius=0.8, budget=(50.0, 1e-5), ledger=path)
    res = pm.retrieve(bank[:3], steps=2, epsilon=2.0, delta=1e-6, seed=0, **kw)
    want = RdpAccountant().compose(res.privacy.step_event, 6).get_epsilon(1e-5)
    assert pm.spent == pytest.approx(want, rel=1e-12)
    assert read_ledger(path).spent == pm.spent  # the event survives the JSON round trip
    if kw.get("release") == "count":
        assert res.released_counts is not None and res.released_counts.shape == (3, 2)


def test_float32_and_memory_mapped_banks_are_fingerprinted_in_place(bank, tmp_path):
    X32 = bank.astype(np.float32)
    np.save(tmp_path / "b.npy", X32)
    mm = np.load(tmp_path / "b.npy", mmap_mode="r")
    path = tmp_path / "ledger.json"
    pm = PrivateMemory(X32, radius=0.8, budget=(20.0, 1e-5), ledger=path)
    assert pm.fingerprint["dtype"] == "float32"
    pm.retrieve(bank[:2], steps=2, epsilon=1.0, delta=1e-6, method="global", seed=0)
    again = PrivateMemory(mm, radius=0.8, budget=(20.0, 1e-5), ledger=path)  # same bytes
    assert again.spent == pm.spent > 0
    with pytest.raises(LedgerError, match="another bank"):
        PrivateMemory(X32.astype(np.float64), radius=0.8, budget=(20.0, 1e-5), ledger=path)
