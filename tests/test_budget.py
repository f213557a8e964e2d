"""PrivateMemory, the budget and the persistent ledger (docs/ledger.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from brace.accounting.filter import convert, event_weights
from brace.ledger import (
    LedgerError,
    bank_fingerprint,
    event_from_dict,
    event_to_dict,
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
    pm = PrivateMemory(bank, radius=0.8, budget=(50.0, 1e-5), accounting="global")
    assert pm.spent == 0.0 and pm.remaining == 50.0
    calls = [(3, 2, 1.0, 1e-6), (5, 4, 0.5, 1e-7), (1, 1, 2.0, 1e-6)]
    acc = RdpAccountant()
    for i, (Q, T, eps, dlt) in enumerate(calls):
        res = pm.retrieve(bank[:Q], steps=T, epsilon=eps, delta=dlt, method="global", seed=i)
        assert res.is_private and res.outputs.shape == (Q, T, 2)
        acc.compose(GaussianStep(per_call_rho(eps, dlt, T)), Q * T)
    want = acc.get_epsilon(1e-5)
    # the ledger converts on its fixed grid of orders: never below, at most 1 % above
    assert want <= pm.spent <= want * 1.01
    assert pm.remaining == pytest.approx(50.0 - pm.spent, rel=1e-12)
    # composing beats adding the per-query epsilons (the naive sum)
    assert pm.spent < sum(Q * eps for Q, _, eps, _ in calls)


def test_total_agrees_with_dp_accounting(bank):
    """γ = 0 (global method and accounting): the ledger's total agrees with Google's
    RdpAccountant composing GaussianDpEvent."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.rdp import rdp_privacy_accountant as google_rdp

    pm = PrivateMemory(bank, radius=0.8, budget=(100.0, 1e-5), accounting="global")
    google = google_rdp.RdpAccountant()
    for i, (Q, T, eps) in enumerate([(4, 3, 1.0), (10, 2, 0.25), (2, 5, 3.0)]):
        pm.retrieve(bank[:Q], steps=T, epsilon=eps, delta=1e-6, method="global", seed=i)
        nm = 1.0 / math.sqrt(2.0 * per_call_rho(eps, 1e-6, T))
        google.compose(dp_accounting.GaussianDpEvent(nm), Q * T)
    g_eps = google.get_epsilon(1e-5)
    # both convert on a grid of orders (Google's and ours): within 2 % of each other
    assert pm.spent == pytest.approx(g_eps, rel=0.02)


def test_brace_spend_uses_the_smooth_curve(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(40.0, 1e-5), accounting="global")
    res = pm.retrieve(bank[:3], steps=2, epsilon=2.0, delta=1e-6, seed=0,
                      release="smooth")
    p = res.privacy
    assert p.gamma > 0
    want = RdpAccountant().compose(SmoothGaussianStep(p.rho_per_step, p.gamma, 2), 6)
    assert want.get_epsilon(1e-5) <= pm.spent <= want.get_epsilon(1e-5) * 1.01
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
    assert err.reason == "epsilon" and 0 < err.affordable_epsilon < 1.0
    assert "50 queries x 2 steps" in str(err) and "per-query epsilon of about" in str(err)
    assert err.remaining == pytest.approx(3.0 - before)
    assert f"{err.remaining:.6g}" in str(err)
    assert pm.spent == before and len(pm.releases) == 1


def test_refusal_happens_before_anything_is_computed(bank, monkeypatch):
    import brace.budget.facade as budget_module

    pm = PrivateMemory(bank, radius=0.8, budget=(1.0, 1e-5))

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("the mechanism ran")

    monkeypatch.setattr(budget_module, "run_plan", boom)
    with pytest.raises(BudgetExceededError):
        pm.retrieve(bank[:100], steps=3, epsilon=1.0, delta=1e-6, seed=0)


def test_an_admitted_history_never_spends_past_the_budget(bank):
    """Calls are admitted until the filter refuses; the reported spend (worst pair, best
    order) never exceeds the budget, and the filter's usage stays <= 1."""
    for acct in ("global", "local"):
        pm = PrivateMemory(bank, radius=0.8, budget=(2.0, 1e-5), accounting=acct)
        n = 0
        with pytest.raises(BudgetExceededError):
            for i in range(200):
                pm.retrieve(bank[i % 120:i % 120 + 1], steps=2, epsilon=0.5, delta=1e-6,
                            method="global", seed=i, fresh=True)
                n += 1
                assert pm.spent <= 2.0 and pm.filter_usage <= 1.0
        assert n >= 1 and len(pm.releases) == n


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
        (dict(fresh=1), TypeError, "fresh must be a bool"),
        (dict(rng=np.random.default_rng(0)), TypeError, "rng"),
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


def test_non_private_event_weighs_infinity():
    assert np.all(np.isinf(event_weights(NonPrivateEvent("naive"))))
    assert convert(event_weights(NonPrivateEvent("x")), 1e-5) == math.inf


def test_direct_delta_is_charged_as_delta():
    from brace.accounting import CountedGaussianStep

    ev = CountedGaussianStep(0.05, 0.1, 1e-6)
    w = event_weights(ev) * 4
    plain = RdpAccountant().compose(ev, 4)
    assert w[-1] == pytest.approx(4e-6)
    assert plain.get_epsilon(1e-5) <= convert(w, 1e-5) <= plain.get_epsilon(1e-5) * 1.01
    assert convert(w * 3, 1e-5) == math.inf  # δ exhausted


@pytest.mark.parametrize(
    "event",
    [GaussianStep(0.25), SmoothGaussianStep(0.3, 0.01, 4),
     SelfComposed(SmoothGaussianStep(0.3, 0.01, 4), 7), NonPrivateEvent("why")],
)
def test_event_round_trip(event):
    assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


@pytest.mark.parametrize(
    ("data", "match"),
    [({"type": "GaussianStep", "rho": -0.5}, "rho must be a finite number in"),
     ({"type": "GaussianStep", "rho": "abc"}, "rho must be a finite number"),
     ({"type": "SelfComposed", "count": "abc", "event": {"type": "GaussianStep", "rho": 1}},
      "count must be an integer"),
     ({"type": "CountedGaussianStep", "rho": 1, "eps_count": 1, "delta_count": 1.5},
      "delta_count must be a finite number in"),
     ({"type": "Composed", "events": "abc"}, "must be a list"),
     ({"type": "Nope"}, "unknown ledger event type"),
     ({"rho": 1}, "must be an object with a 'type'")],
)
def test_every_bad_event_field_is_a_ledger_error(data, match):
    with pytest.raises(LedgerError, match=match):
        event_from_dict(data)


def test_fingerprint_depends_on_bytes_shape_and_radius(bank):
    a = bank_fingerprint(bank, 0.8)
    assert a == bank_fingerprint(bank.astype(np.float64).copy(), 0.8)
    assert a["sha256"] != bank_fingerprint(bank.reshape(60, 4), 0.8)["sha256"]
    assert a["sha256"] != bank_fingerprint(bank, 0.81)["sha256"]
    assert a["shape"] == [120, 2] and a["dtype"] == "float64"


def test_public_names():
    for name in ("PrivateMemory", "BudgetExceededError", "load_result", "DEFAULT_KAPPA"):
        assert name in brace.__all__ and hasattr(brace, name)


def test_threads_cannot_overspend_the_budget():
    """Issue reproducer: 8 threads, room for one call; pricing through recording is one
    critical section, so exactly one release is returned."""
    import threading

    X = np.random.default_rng(0).normal(size=(64, 2))
    q = X[:2]
    for acct in ("global", "local"):
        pm = PrivateMemory(X, radius=0.8, budget=(1.5, 1e-5), accounting=acct)
        out, refused = [], []

        def call(i, pm=pm, out=out, refused=refused):
            try:
                out.append(pm.retrieve(q, steps=3, epsilon=1.0, delta=1e-6, seed=i,
                                       fresh=True))
            except BudgetExceededError:
                refused.append(i)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(out) == 1 and len(refused) == 7
        assert pm.spent <= 1.5 and len(pm.releases) == 1


def test_identical_calls_are_free_repeats_and_fresh_pays(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5))
    a = pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0)
    spent = pm.spent
    b = pm.retrieve(bank[:3].copy(), steps=2, epsilon=1.0, delta=1e-6, seed=7)
    assert np.array_equal(a.outputs, b.outputs) and pm.spent == spent
    assert len(pm.releases) == 1
    # anything that changes the release is a new call
    q = bank[:3].copy()
    q[0, 0] = np.nextafter(q[0, 0], 1.0)
    for kw in (dict(queries=q), dict(steps=3), dict(epsilon=1.5), dict(delta=2e-6),
               dict(method="global"), dict(release="count")):
        args = dict(queries=bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=0) | kw
        pm.retrieve(args.pop("queries"), **args)
    assert len(pm.releases) == 7 and pm.spent > spent
    before = pm.spent
    c = pm.retrieve(bank[:3], steps=2, epsilon=1.0, delta=1e-6, seed=1, fresh=True)
    assert not np.array_equal(a.outputs, c.outputs) and pm.spent > before


def test_default_query_delta_comes_from_the_budget(bank):
    pm = PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5))
    res = pm.retrieve(bank[:1], steps=2, epsilon=1.0, seed=0)
    assert res.privacy.delta == pytest.approx(1e-7)


def test_attributes_are_read_only_and_repr_says_what_is_spent(bank):
    pm = PrivateMemory(bank, beta=2.0, budget=(20.0, 1e-5))
    for name, value in (("bank", bank[:10]), ("radius", 0.1), ("budget", (1.0, 1e-5)),
                        ("accounting", "global")):
        with pytest.raises(AttributeError):
            setattr(pm, name, value)
    pm.retrieve(bank[:1], steps=2, epsilon=1.0, seed=0)
    r = repr(pm)
    assert "spent" in r and "remaining" in r and "accounting='local'" in r
    assert pm.beta == pytest.approx(2.0) and pm.radius == pytest.approx(1.0)


def test_an_lsr_memory_is_accepted_as_the_bank(bank):
    mem = brace.LSRMemory(bank, radius=0.8)
    pm = PrivateMemory(mem, budget=(20.0, 1e-5))
    assert pm.radius == 0.8 and pm.bank.shape == bank.shape
    with pytest.raises(TypeError, match="radius"):
        PrivateMemory(bank, budget=(20.0, 1e-5))


def test_composed_total_of_a_count_release_is_stated_where_finite(bank):
    """Issue reproducer: a count release of two or more queries printed
    'all 2 queries composed: (inf, 1e-05)'."""
    res = brace.private_retrieve(brace.LSRMemory(bank, radius=0.8), bank[:2],
                                 method="brace", epsilon=1.0, delta=1e-5, steps=3,
                                 release="count", seed=0)
    p = res.privacy
    assert p.epsilon_total == math.inf  # at the per-query δ
    eps, dl = p.composed()
    assert math.isfinite(eps) and dl == pytest.approx(2e-5)
    text = str(p)
    assert "eps = inf" not in text and "the deltas add" in text
    assert res.to_dict()["privacy"]["epsilon_total_finite"]["delta"] == pytest.approx(2e-5)


def test_advice_is_cached_per_plan_and_per_spend(bank, monkeypatch, tmp_path):
    """affordable_epsilon and recommend read only public values: asked again before the
    next release they answer from their cache without planning anything; after a
    release they answer afresh, as an object that never asked before does (issue 32)."""
    from brace.budget import advice

    path = tmp_path / "ledger.db"
    pm = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=path, create=True)
    q = bank[:3] + 0.01
    pm.retrieve(bank[:1], steps=2, epsilon=0.5, delta=1e-6, seed=0)
    first = (pm.affordable_epsilon(q, steps=2, method="global"),
             pm.recommend(50).per_query_epsilon)

    def boom(*a, **kw):
        raise AssertionError("planned again")

    monkeypatch.setattr(advice, "plan_release", boom)
    advice._cached_plan.cache_clear()
    assert (pm.affordable_epsilon(q, steps=2, method="global"),
            pm.recommend(50).per_query_epsilon) == first
    monkeypatch.undo()
    pm.retrieve(bank[5:6], steps=2, epsilon=0.5, delta=1e-6, seed=1)  # the spend changed
    again = pm.affordable_epsilon(q, steps=2, method="global")
    advice._cached_plan.cache_clear()
    fresh = PrivateMemory(bank, radius=0.8, budget=(8.0, 1e-5), ledger=path)
    cold = fresh.affordable_epsilon(q, steps=2, method="global")
    # the warm search starts from the earlier answer (a public hint): the same answer to
    # the contract's relative 1e-5, and admitted
    assert again < first[0] and again == pytest.approx(cold, rel=2e-5)
    fresh.retrieve(q, steps=2, epsilon=again, method="global", seed=2)
    pm.close()
    fresh.close()


@settings(max_examples=200, deadline=None)
@given(answer=st.floats(-14.0, 11.0), shift=st.floats(-3.0, 3.0),
       power=st.floats(1.0, 2.0), jump=st.booleans(), tiny=st.booleans())
def test_hinted_search_meets_the_same_contract(answer, shift, power, jump, tiny):
    """``_largest_fitting(…, hint=…)`` (the warm search of affordable_epsilon and
    recommend after a release) returns what the cold search does to a relative 1e-5:
    an admitted x whose neighbour at 2·1e-5 above is refused, for usage curves ε^s
    (s ∈ [1, 2]) with or without a jump at the answer, whether the answer moved from
    the hint by a lot (``shift``) or by 1e-6 (``tiny``)."""
    from brace.budget.admission import _largest_fitting

    root = math.exp(answer)

    def usage(x: float) -> float:
        if jump:  # usage jumps from 0.01 to 2 at the root (a release mode switch)
            return 0.01 * (x / root) ** power if x <= root else 2.0 * (x / root) ** power
        return (x / root) ** power

    hint = root * math.exp(1e-6 if tiny else shift)
    cold = _largest_fitting(usage, 1e-5, 1e4)
    warm = _largest_fitting(usage, 1e-5, 1e4, hint=hint)
    for got in (cold, warm):
        if root < 1e-5:
            assert got == 0.0
        elif root >= 1e4:  # the whole range fits: its end, as priced
            assert got == pytest.approx(1e4, rel=1e-15) and usage(got) <= 1.0
        else:
            assert usage(got) <= 1.0 < usage(got * (1.0 + 2e-5))
    assert warm == pytest.approx(cold, rel=2e-5)
