"""The audit's local-accounting rows (docs/audit.md §5.1): a pair far from every footprint
certifies ε_lb = 0 exactly, a pair inside a footprint stays within its charge."""

from __future__ import annotations

import importlib
import json
import warnings

import numpy as np
import pytest

from brace import PrivateMemory
from brace.audit import AuditConfig, ReportConfig, audit, certify_thresholds, report_bank
from brace.audit import local as local_mod
from brace.audit.local import local_pair, reserved_ball_radius
from brace.audit.report import format_report, report_cases
from brace.footprints import CLEAN_MARGIN

report_mod = importlib.import_module("brace.audit.report")  # not the function report
R = 0.5
FAR = dict(pair="far", output_projection=True, coupled=True)


@pytest.fixture(scope="module")
def bank1():
    return report_bank(24, 1, R, 8)


@pytest.fixture(scope="module")
def bank2():
    return report_bank(40, 2, R, 9)


def _cfg(**kw):
    base = dict(method="brace", epsilon=1.0, steps=2, radius=R, n_runs=2000, n_pilot=500,
                seed=0)
    return AuditConfig(**{**base, **kw})


@pytest.mark.parametrize("which", ["bank1", "bank2"])
def test_far_pair_certifies_exactly_zero(which, request):
    """Both values outside the reserved ball: with coupled noise every release coincides
    bit for bit, so every test has FP + FN = N and ε_lb is exactly 0 — a pass against
    the charged ε of 0, with no division by zero anywhere in the verdict."""
    X, q = request.getfixturevalue(which)
    cfg = _cfg(**FAR)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = audit(X, q, cfg)
        with np.errstate(all="raise"):
            fields = (res.verdict, res.point_epsilon, res.underpowered, res.runs_needed,
                      res.max_certifiable_epsilon, res.to_dict(), str(res))
    assert res.epsilon_lb == 0.0
    assert res.claim == 0.0 and res.charged_epsilon == 0.0 and res.claimed_epsilon == 1.0
    assert res.verdict == "pass" and not res.exceeds_claim
    assert res.differing_runs == 0
    b = res.best
    assert np.all(b.false_positives + b.false_negatives == cfg.n_runs)
    assert np.all(b.epsilon_per_threshold == 0.0)
    # the pair: both values outside B̄(q, (T+1) r (1 + 2e-3)), the query's reserved ball
    Rq = reserved_ball_radius(*X.shape, cfg.validated())
    assert Rq == pytest.approx(3 * R * (1 + CLEAN_MARGIN), rel=1e-15)
    p = res.pair
    assert p.kind == "far-pair"
    for v in (p.old_value, p.new_value):
        assert np.linalg.norm(np.asarray(v) - q) > Rq
    d = fields[5]
    assert d["charged_epsilon"] == 0.0 and d["differing_runs"] == 0
    assert d["certified"][0]["differing_runs"] == 0
    json.dumps(d, allow_nan=False)
    assert "differ: 0 of 2000" in fields[6]


def test_identical_statistics_give_zero_for_every_threshold():
    """The zero-advantage case of the bound itself: identical samples on both sides give
    ε_lb = 0 at every threshold (constant or not), never a division by zero."""
    s = np.random.default_rng(0).normal(size=500)
    for a in (s, np.zeros(500)):
        with np.errstate(all="raise"):
            res = certify_thresholds(a, a.copy(), np.r_[-np.inf, np.quantile(a, [0, .5, 1])],
                                     delta=1e-5, alpha=0.05, n_bounds=8)
        assert np.all(res["false_positives"] + res["false_negatives"] == 500)
        assert np.all(res["epsilon_lb"] == 0.0)


def test_far_pair_has_teeth(bank1, monkeypatch):
    """If the ball called "reserved" were too small, the "far" pair would move a row that a
    footprint holds: the coupled releases differ and ε_lb > 0 is a VIOLATION of the
    zero charge."""
    X, q = bank1
    monkeypatch.setattr(local_mod, "reserved_ball_radius", lambda n, d, cfg: 0.2 * R)
    res = audit(X, q, _cfg(epsilon=4.0, n_runs=4000, n_pilot=1000, **FAR))
    assert np.linalg.norm(np.asarray(res.pair.old_value) - q) <= R  # a gate member
    assert res.differing_runs > 1000  # releases clipped onto the same point coincide
    assert res.epsilon_lb > 0.0 and res.verdict == "VIOLATION"


@pytest.mark.parametrize("which", ["bank1", "bank2"])
def test_near_pair_stays_within_its_charge(which, request):
    """The outermost gate member of q moved to the far side of the gate: both values lie in
    step 1's footprint; ε_lb stays within the per-query ε charged there."""
    X, q = request.getfixturevalue(which)
    cfg = _cfg(pair="near", n_runs=5000, n_pilot=1250)
    res = audit(X, q, cfg)
    p = res.pair
    assert p.kind == "near-pair" and p.gate_q == (1, 1)
    for v in (p.old_value, p.new_value):
        assert np.linalg.norm(np.asarray(v) - q) <= R
    assert res.claim == res.claimed_epsilon == 1.0
    assert 0.0 <= res.epsilon_lb <= res.claim and res.verdict == "pass"
    assert res.differing_runs is None  # independent runs


def test_the_ledger_charges_the_pairs_as_claimed(bank2):
    """PrivateMemory's local accounting after one release of q charges nothing at the far
    pair's two values and something at the near pair's."""
    X, q = bank2
    far = local_pair(X, q, _cfg(**FAR))
    near = local_pair(X, q, _cfg(pair="near"))
    pm = PrivateMemory(X, radius=R, budget=(8.0, 1e-5))
    pm.retrieve(q, steps=2, epsilon=1.0, method="brace", release="smooth", seed=0)
    assert np.all(pm.spent_at([far.old_value, far.new_value]) == 0.0)
    at_near = pm.spent_at([near.old_value, near.new_value])
    assert np.all(at_near > 0.0) and np.all(at_near <= pm.spent)


@pytest.mark.parametrize(("kw", "exc", "match"), [
    (dict(pair="nearby"), ValueError, "pair must be one of"),
    (dict(pair="far"), ValueError, "output_projection=True"),
    (dict(pair="near", method="naive"), ValueError, "private methods"),
    (dict(coupled=1), TypeError, "coupled"),
    (dict(output_projection="yes"), TypeError, "output_projection"),
])
def test_local_config_validation(bank1, kw, exc, match):
    X, q = bank1
    with pytest.raises(exc, match=match):
        audit(X, q, _cfg(**kw))


def test_local_pair_errors(bank1):
    X, q = bank1
    with pytest.raises(ValueError, match="not both"):
        audit(X, q, _cfg(pair="near"), replacement=(0, [0.0]))
    crowded = q + np.linspace(-1.0, 1.0, 9)[:, None]  # every row inside B̄(q, 1.503)
    with pytest.raises(ValueError, match="outside the query's reserved ball"):
        local_pair(crowded, q, _cfg(**FAR))
    with pytest.raises(ValueError, match="pair='far' or 'near'"):
        local_pair(X, q, _cfg())
    empty = local_pair(X + 100.0, q, _cfg(pair="near"))  # empty gate: nearest row onto q
    assert empty.new_value == tuple(map(float, q)) and empty.gate_q == (0, 1)


def test_report_has_the_local_rows(monkeypatch):
    monkeypatch.setattr(report_mod, "choose_gamma_for_gates", lambda *a, **k: 0.01)  # speed
    cases = report_cases(ReportConfig())
    local = [(d, c) for d, c in cases if c.pair != "search"]
    assert [(d, c.pair) for d, c in local] == [(1, "far"), (1, "near"), (2, "far"),
                                               (2, "near")]
    for _, c in local:
        assert c.method == "brace" and c.kappa == 128 and c.epsilon == 1.0 and c.is_private
        assert (c.output_projection, c.coupled) == ((True, True) if c.pair == "far"
                                                    else (False, False))
    assert [c.label for _, c in local[:2]] == ["brace (kappa=128), far pair: charged eps 0",
                                               "brace (kappa=128), near pair: charged = "
                                               "claimed"]
    assert not any(c.pair != "search" for _, c in report_cases(ReportConfig(local_pairs=False)))


def test_format_report_states_the_far_rows():
    row = {"label": "x", "d": 1, "n": 24, "steps": 2, "claimed_epsilon": 1.0,
           "charged_epsilon": 0.0, "epsilon_lb": 0.0, "n_runs_per_side": 10,
           "verdict": "pass", "differing_runs": 0, "config": {"pair": "far"},
           "pair": {"kind": "far-pair", "centre": "q", "gate_q": [1, 1]}}
    rep = {"config": {"delta": 1e-5, "alpha": 0.05, "radius": 0.5}, "rows": [row],
           "private_mechanisms_pass": True, "naive_and_broken_caught": True,
           "passed": True, "overall": "PASS", "wall_time_s": 1.0}
    text = format_report(rep)
    assert "far pairs (outside every footprint) give eps_lb = 0: True" in text
    assert "differ: 0/10" in text
    row["epsilon_lb"] = 0.01
    assert "give eps_lb = 0: False" in format_report(rep)
