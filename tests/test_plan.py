"""The release plan (``brace.plan``): one place decides the release mode, γ and the
calibration; the mechanism runs it and the certificate evaluates the same plan."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

import brace
from brace import LSRMemory, NotPrivateWarning, certificate, plan_release, private_retrieve
from brace.steps import _project

R = 0.5


def _bank(n=60, d=2, m=12, seed=0):
    """A gate of ``m`` memories near the origin, the rest within a few radii."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(m, d))
    inner = u / np.linalg.norm(u, axis=1, keepdims=True) * (0.4 * R * rng.random((m, 1)))
    return np.concatenate([inner, rng.uniform(-2.0, 2.0, (n - m, d))])


# (method, keyword arguments of private_retrieve besides the budget and steps)
CASES = [
    ("brace", dict(kappa=0.0, gamma=0.05)),  # the correction activates
    ("brace", dict(kappa=128.0)),  # fraction-0.9 γ, never activates
    ("brace", dict(kappa=0.0, gamma=0.05, output_projection=False)),
    ("brace", dict(gamma="gates")),
    ("brace", dict(release="count")),
    ("brace", dict(release="auto")),
    ("global", {}),
    ("global", dict(output_projection=False)),
    ("naive", {}),
]


@pytest.mark.parametrize("method, kw", CASES)
def test_certificate_and_private_retrieve_agree(method, kw):
    """Along the released history, the certificate's noise scale times the plan's noise
    multiplier is the release's noise std, and its pre-noise means plus that noise are
    the released states (bit for bit, with the innovations regenerated from the seed)."""
    X = _bank(n=400, m=300)  # a gate large against the count release's margin
    mem = LSRMemory(X, radius=R)
    q = X[:4] + 0.05
    Q, d, T, eps, dlt, seed = 4, 2, 3, 4.0, 1e-5, 11
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        res = private_retrieve(mem, q, method=method, epsilon=eps, delta=dlt, steps=T,
                               seed=seed, **kw)
    hist = np.concatenate([q[:, None], res.outputs[:, :-1]], axis=1)
    counts = res.released_counts
    cert = certificate(mem, q, hist, method=method, steps=T, epsilon=eps, delta=dlt,
                       released_counts=counts, **{"kappa": 128.0, **kw})
    mult = res.privacy.noise_multiplier
    np.testing.assert_array_equal(cert.noise_scale * mult, res.noise_std)
    if method == "brace":
        np.testing.assert_array_equal(cert.noise_scale, res.smooth_sensitivity)
    xi = np.random.default_rng(seed).standard_normal((Q, T, d))
    for t in range(T):
        y = cert.pre_noise[:, t] + res.noise_std[:, t, None] * xi[:, t]
        if kw.get("output_projection", True):
            y = _project(y, q, (t + 2) * R)
        np.testing.assert_array_equal(y, res.outputs[:, t])
    if kw.get("kappa") == 0.0:
        assert res.activated.any()  # the case exercises the boundary correction
    if counts is not None:  # and the proposal, not only the cap 2r + σ
        assert np.any(counts - res.privacy.count_margin > 1)
    if res.params["release"] == "smooth":
        # the budget-free form (γ as released, multiplier 1) gives the same trace
        free = certificate(mem, q, hist, method=method, steps=T, gamma=res.params["gamma"],
                           kappa=kw.get("kappa", 128.0),
                           output_projection=kw.get("output_projection", True))
        np.testing.assert_array_equal(free.noise_scale, cert.noise_scale)
        np.testing.assert_array_equal(free.pre_noise, cert.pre_noise)


@pytest.mark.parametrize("method, kw", CASES)
def test_plan_is_what_private_retrieve_runs(method, kw):
    """``plan_release`` with the call's arguments predicts the release's params and
    privacy record; a bank of the same public shape gets the same plan."""
    X = _bank()
    args = dict(method=method, epsilon=4.0, delta=1e-5, steps=3, **kw)
    plan = plan_release(LSRMemory(X, radius=R), queries=3, seeded=True, **args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        res = private_retrieve(LSRMemory(X, radius=R), X[:3], seed=0, **args)
        sec = private_retrieve(LSRMemory(X, radius=R), X[:3], **args)  # no seed: secure
    assert plan.params(res.params["seed"]) == res.params
    assert plan.noise == "plain" and sec.params["noise"] == "secure"
    unseeded = plan_release(LSRMemory(X, radius=R), queries=3, **args)
    assert {**unseeded.params(None), "seed_null_reason": sec.params["seed_null_reason"]} \
        == sec.params
    assert unseeded.spent.to_dict() == sec.privacy.to_dict() == res.privacy.to_dict()
    assert plan.spent.to_dict() == res.privacy.to_dict()
    assert plan.noise_multiplier == res.privacy.noise_multiplier
    assert plan.is_private == res.is_private
    other = plan_release(LSRMemory(_bank(seed=5)[::-1].copy(), radius=R), queries=3,
                         seeded=True, **args)
    assert other.to_dict() == plan.to_dict()  # public values only, never the rows
    shape = plan_release((60, 2), radius=R, queries=3, seeded=True, **args)
    assert shape.to_dict() == plan.to_dict()
    json.dumps(plan.to_dict(), allow_nan=False)
    assert str(plan).startswith("ReleasePlan: method=")


def test_plan_fields():
    mem = LSRMemory(_bank(), radius=R)
    count = plan_release(mem, method="brace", epsilon=4.0, delta=1e-5, steps=2,
                         release="count")
    assert count.release == "count" and count.gamma == 0.0 and count.count_share > 0
    assert count.count_margin == count.spent.count_margin > 0
    assert count.delta_count == pytest.approx(1e-5 / 4)
    ep = plan_release(mem, method="endpoint", epsilon=1.0, delta=1e-5, steps=4)
    assert ep.releases == 1 and ep.release == "fixed sensitivity" and ep.spent.steps == 1
    inf = plan_release(mem, method="brace", epsilon=1.0, delta=1e-5, steps=2,
                       kappa=np.inf, gamma=0.01)
    assert inf.theta == np.inf and inf.to_dict()["kappa"] is None
    free = plan_release(mem, method="brace", epsilon=None, delta=None, steps=3, gamma=0.0)
    assert free.spent is None and free.noise_multiplier == 1.0 and free.count_margin == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        free.gamma = 1.0


def test_default_release_is_one_constant(monkeypatch):
    """The default mode is ``brace.plan.DEFAULT_RELEASE``: changing it changes BRACE's
    default only (the baselines and the paper's accounting keep their only mode)."""
    mem = LSRMemory(_bank(), radius=R)
    args = dict(epsilon=4.0, delta=1e-5, steps=2)
    explicit = plan_release(mem, method="brace", release=brace.plan.DEFAULT_RELEASE, **args)
    assert plan_release(mem, method="brace", **args).to_dict() == explicit.to_dict()
    monkeypatch.setattr(brace.plan, "DEFAULT_RELEASE", "count")
    res = private_retrieve(mem, np.zeros(2), method="brace", seed=0, **args)
    assert res.params["release"] == "count" and res.released_counts is not None
    assert private_retrieve(mem, np.zeros(2), method="global", seed=0,
                            **args).params["release"] == "fixed sensitivity"
    paper = plan_release(mem, method="brace", accounting="paper", **args)
    assert paper.release == "smooth"
    free = plan_release(mem, method="brace", epsilon=None, delta=None, steps=2, gamma=0.1)
    assert free.release == "smooth"


@pytest.mark.parametrize("call, exc, match", [
    (lambda m: plan_release(m, method="brace", epsilon=1.0, delta=1e-5, steps=2,
                            radius=0.5), TypeError, "radius is read from the memory"),
    (lambda m: plan_release((10, 2), method="brace", epsilon=1.0, delta=1e-5, steps=2),
     TypeError, "radius is required"),
    (lambda m: plan_release((0, 2), radius=0.5, method="brace", epsilon=1.0, delta=1e-5,
                            steps=2), ValueError, r"n \(memory\[0\]\)"),
    (lambda m: plan_release("bank", method="brace", epsilon=1.0, delta=1e-5, steps=2),
     TypeError, "memory must be an LSRMemory or a shape"),
    (lambda m: plan_release(m, method="brace", epsilon=1.0, delta=1e-5, steps=2,
                            queries=0), ValueError, "queries"),
    (lambda m: plan_release(m, method="brace", epsilon=1.0, delta=None, steps=2),
     TypeError, "delta must be a real number"),
    (lambda m: plan_release(m, method="global", epsilon=1.0, delta=1e-5, steps=2,
                            noise="secure", seeded=True),
     ValueError, "seed must be None with noise='secure': secure noise draws every random "
                 "bit from the operating system's CSPRNG"),
    (lambda m: plan_release(m, method="brace", epsilon=None, delta=None, steps=2,
                            gamma=0.1, release="count"), ValueError, "needs the budget"),
    (lambda m: plan_release(m, method="brace", epsilon=None, delta=None, steps=2,
                            gamma="gates"), TypeError, "gamma must be a real number"),
    (lambda m: certificate(m, np.zeros(2), np.zeros((1, 2, 2)), steps=2, epsilon=4.0,
                           delta=1e-5, release="count"), ValueError, "needs released_counts"),
    (lambda m: certificate(m, np.zeros(2), np.zeros((1, 2, 2)), steps=2, epsilon=4.0,
                           delta=1e-5, release="count", released_counts=np.zeros((1, 2))),
     TypeError, "integer array"),
    (lambda m: certificate(m, np.zeros(2), np.zeros((1, 2, 2)), steps=2, epsilon=4.0,
                           delta=1e-5, release="count",
                           released_counts=np.zeros((2, 2), dtype=int)),
     ValueError, r"shape \(Q, T\) = \(1, 2\)"),
    (lambda m: certificate(m, np.zeros(2), np.zeros((1, 2, 2)), steps=2, gamma=0.1,
                           released_counts=np.zeros((1, 2), dtype=int)),
     ValueError, "released_counts is for release='count'"),
])
def test_bad_plan_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call(LSRMemory(_bank(), radius=R))


def test_auto_release_follows_the_default_release_rule():
    """``release="auto"`` (``docs/privacy-accounting.md`` §10): the choice of
    ``policy.choose_release`` from public values; a caller's γ means the smooth
    release with it; the count release only where no correction can fire."""
    from brace.policy import choose_release

    mem = LSRMemory(_bank(n=400, d=64, seed=2), radius=R)
    args = dict(method="brace", epsilon=1.0, delta=1e-5, steps=3, release="auto")
    want = choose_release(1.0, 1e-5, 3, dim=64, n=400)
    plan = plan_release(mem, kappa=np.inf, **args)
    assert plan.release == want.release == "count"  # small ε, d = 64: dimension-free
    assert plan.release_rule == want.rule
    assert (plan.count_share, plan.proposal_delta) == (want.count_share, want.proposal_delta)
    assert plan.delta_count == pytest.approx(want.proposal_delta * 1e-5 / 3)
    assert plan_release(mem, kappa=brace.plan.no_correction_kappa(3), **args).release == "count"
    # a correction that can fire keeps the certificate
    for kw in (dict(kappa=0.0), dict(kappa=128.0, output_projection=False)):
        smooth = plan_release(mem, **kw, **args)
        no_count = choose_release(1.0, 1e-5, 3, dim=64, n=400, allow_count=False)
        assert smooth.release == "smooth" and smooth.gamma == no_count.gamma
        assert smooth.gamma_rule.startswith("auto")
    given = plan_release(mem, kappa=np.inf, gamma=1e-4, **args)
    assert (given.release, given.gamma, given.gamma_rule) == ("smooth", 1e-4, "given")
    gates = plan_release(mem, kappa=np.inf, gamma="gates", **args)
    assert gates.release == "smooth" and gates.gamma_rule == "gates"
