"""A synopsis without public data (``docs/privacy-accounting.md`` §15): each release's
sensitivity (property tests over replacements, an adversarial hill-climb, a slow exact
reference), the per-row classification (bit-for-bit additivity, the candidate search of
the nearest centre against brute force), rows outside the domain, the filter (charged
once, refused beyond the budget, the whole space under local accounting), the noise
(secure without a seed, plain with one, no seed echoed), the JSON round trip and its
validation, bad inputs, the ledger, and an audit row of the Voronoi round."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import brace
from brace import BudgetExceededError, PrivateMemory, Synopsis, private_synopsis
from brace import seeding as sd
from edgerows import moved_row  # noqa: E402 (tests/, on the path)


def _clusters(n: int = 1200, d: int = 16, k: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    C = rng.uniform(-0.6, 0.6, (k, d))
    y = rng.integers(0, k, n)
    return np.clip(C[y] + 0.08 * rng.standard_normal((n, d)), -1, 1), y, C


def _stat(X, C, clip, unit, domain):
    """The Voronoi round's exact statistic in grid units, stacked as released."""
    cnt, sums = sd.voronoi_stats(X, C, clip, unit, domain)
    return np.concatenate([sums, cnt[:, None] * int(round(clip / unit))], axis=1)


def _moved_units(X, Xp, C, clip, unit, domain) -> float:
    diff = _stat(X, C, clip, unit, domain) - _stat(Xp, C, clip, unit, domain)
    return float(np.sqrt(np.sum(diff.astype(object) ** 2)))  # exact integers


# --- the Voronoi round's sensitivity (Lemma 11) ------------------------------------------


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 6), d=st.integers(1, 6),
       n=st.integers(1, 25), where=st.sampled_from(["inside", "sphere", "outside", "far"]))
def test_voronoi_round_sensitivity_holds_for_every_replacement(seed, k, d, n, where):
    """Replacing one row moves the exact stacked statistic (grid units) by at most
    voronoi_sensitivity / unit in L2, wherever the two rows fall (any cell; inside the
    clip, on its sphere, beyond it, outside the domain)."""
    rng = np.random.default_rng(seed)
    clip = float(rng.uniform(0.05, 1.5))
    domain = sd.parse_domain((-2.0, 2.0), None, d)
    C = rng.uniform(-2, 2, (k, d))
    X = rng.uniform(-2.5, 2.5, (n, d))
    unit = sd.voronoi_unit(clip, n, float(rng.uniform(1e-4, 5.0)))
    Xp = X.copy()
    i = int(rng.integers(0, n))
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    c = C[int(rng.integers(0, k))]
    Xp[i] = {"inside": c + clip * float(rng.uniform(0, 1)) * u,
             "sphere": c + clip * (1 + float(rng.choice([-1, 0, 1])) * 1e-15) * u,
             "outside": c + clip * float(rng.uniform(1, 5)) * u,
             "far": c + 1e250 * u}[where]
    bound = sd.voronoi_sensitivity(clip, unit, d) / unit
    assert _moved_units(X, Xp, C, clip, unit, domain) <= bound


def test_voronoi_round_sensitivity_is_attained_within_rounding():
    """A row beyond the clip replaced by its mirror image through the centre (same
    cell): the clipped offset is reversed, a change of 2c."""
    d, clip = 3, 0.5
    domain = sd.parse_domain((-4.0, 4.0), None, d)
    C = np.zeros((1, d))
    X = np.array([[2.0, 0.0, 0.0], [0.1, 0.2, 0.0]])
    Xp = np.array([[-2.0, 0.0, 0.0], [0.1, 0.2, 0.0]])
    unit = sd.voronoi_unit(clip, 2, 0.5)
    bound = sd.voronoi_sensitivity(clip, unit, d) / unit
    got = _moved_units(X, Xp, C, clip, unit, domain)
    assert bound * (1 - 1e-6) <= got <= bound


def test_voronoi_round_adversarial_search_finds_no_violation():
    """Hill-climb on the replacement row to maximise the change: never above the bound,
    and close to it (the search has teeth)."""
    rng = np.random.default_rng(11)
    d, k, clip = 3, 4, 0.6
    domain = sd.parse_domain((-3.0, 3.0), None, d)
    C = rng.uniform(-2, 2, (k, d))
    X = rng.uniform(-2, 2, (30, d))
    unit = sd.voronoi_unit(clip, 30, 0.3)
    bound = sd.voronoi_sensitivity(clip, unit, d) / unit
    best = 0.0
    for start in range(12):
        x = C[start % k] + rng.normal(size=d) * clip
        cur = -1.0
        for _ in range(80):
            cand = x + rng.normal(size=d) * 0.3 * clip
            Xp = X.copy()
            Xp[0] = cand
            v = _moved_units(X, Xp, C, clip, unit, domain)
            if v >= cur:
                x, cur = cand, v
        assert cur <= bound
        best = max(best, cur)
    assert best > 0.8 * bound


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 5), d=st.integers(1, 4),
       n=st.integers(1, 20))
def test_radii_histogram_sensitivity_is_sqrt2(seed, k, d, n):
    """A replaced row leaves one bin and enters one: L2 change ≤ √2 (exact counts)."""
    rng = np.random.default_rng(seed)
    domain = sd.parse_domain(None, (np.zeros(d), 3.0), d)
    C = rng.uniform(-1, 1, (k, d))
    X = rng.uniform(-2, 2, (n, d))
    Xp = X.copy()
    Xp[int(rng.integers(0, n))] = rng.uniform(-5, 5, d)
    edges = sd.radii_edges(domain.radius, None if seed % 2 else 0.7)
    h, hp = (sd.radii_histogram(B, C, edges, domain) for B in (X, Xp))
    assert int(np.sum((h - hp) ** 2)) <= 2
    assert h.sum() == n


# --- one row's cell depends on that row only ---------------------------------------------


def test_nearest_centre_matches_brute_force_with_ties():
    """The candidate search returns the lowest index among the minimisers of the direct
    squared distance, also with duplicated centres and rows on a bisector."""
    rng = np.random.default_rng(2)
    for _ in range(30):
        d = int(rng.integers(1, 9))
        C = rng.normal(size=(int(rng.integers(1, 12)), d))
        C = np.concatenate([C, C[:2]])  # exact duplicates: ties
        Z = np.concatenate([rng.normal(size=(50, d)),
                            0.5 * (C[:1] + C[-1:]) + 0 * rng.normal(size=(3, d))])
        j, d2, off = sd.nearest_centres(Z, C, (C * C).sum(1))
        direct = np.array([[np.sum((z - c) ** 2) for c in C] for z in Z])
        want = np.array([int(np.flatnonzero(row == row.min())[0]) for row in direct])
        assert np.array_equal(j, want)
        assert np.array_equal(d2, direct[np.arange(len(Z)), want])


def test_statistics_are_additive_bit_for_bit(monkeypatch):
    """Each row's cell, clipped offset and radius bin do not depend on the other rows:
    the batch statistic is the exact sum of the one-row statistics, and the tile size
    changes nothing."""
    rng = np.random.default_rng(5)
    d = 5
    domain = sd.parse_domain((-1.0, 1.0), None, d)
    X = rng.normal(size=(257, d))
    C = rng.uniform(-1, 1, (7, d))
    unit = sd.voronoi_unit(0.4, 257, 0.2)
    edges = sd.radii_edges(domain.radius)
    cnt, sums = sd.voronoi_stats(X, C, 0.4, unit, domain)
    hist = sd.radii_histogram(X, C, edges, domain)
    parts = [sd.voronoi_stats(X[i:i + 1], C, 0.4, unit, domain) for i in range(len(X))]
    assert np.array_equal(cnt, sum(p[0] for p in parts))
    assert np.array_equal(sums, sum(p[1] for p in parts))
    assert np.array_equal(hist, sum(sd.radii_histogram(X[i:i + 1], C, edges, domain)
                                    for i in range(len(X))))
    monkeypatch.setattr(sd, "_TILE", 7 * 3)  # three rows per tile
    c2, s2 = sd.voronoi_stats(X, C, 0.4, unit, domain)
    assert np.array_equal(cnt, c2) and np.array_equal(sums, s2)


def _reference(X, C, clip, unit, domain):
    """Slow reference in exact rationals: clamp, nearest centre, clipped offset (the
    clip factor from an exact square root bracket), rounded to the grid."""
    k, d = C.shape
    g = Fraction(unit)
    lo, hi = domain.lo, domain.hi
    counts, sums = [0] * k, [[0] * d for _ in range(k)]
    for x in X:
        z = [min(max(Fraction(float(a)), Fraction(float(l))), Fraction(float(h)))
             for a, l, h in zip(x, lo, hi, strict=True)]
        dist = [sum((zi - Fraction(float(ci))) ** 2 for zi, ci in zip(z, c, strict=True))
                for c in C]
        j = min(range(k), key=lambda t: (dist[t], t))
        off = [zi - Fraction(float(ci)) for zi, ci in zip(z, C[j], strict=True)]
        n2 = dist[j]
        if n2 > Fraction(clip) ** 2:
            f = Fraction(clip) / Fraction(math.sqrt(float(n2)))
            off = [o * f for o in off]
        counts[j] += 1
        for t in range(d):
            sums[j][t] += round(off[t] / g)
    return np.array(counts), np.array(sums, dtype=np.int64)


def test_voronoi_statistic_matches_the_slow_reference():
    rng = np.random.default_rng(3)
    for _ in range(15):
        k, d, n = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 30))
        clip = float(rng.uniform(0.2, 1.5))
        domain = sd.parse_domain((-1.5, 1.5), None, d)
        C = rng.uniform(-1, 1, (k, d))
        X = rng.uniform(-2, 2, (n, d))
        unit = sd.voronoi_unit(clip, n, 0.5)
        cnt, sums = sd.voronoi_stats(X, C, clip, unit, domain)
        rc, rs = _reference(X, C, clip, unit, domain)
        np.testing.assert_array_equal(cnt, rc)
        np.testing.assert_array_equal(sums, rs)  # Lemma 11's rounding, to the unit


# --- rows outside the domain ----------------------------------------------------------------


def test_a_row_outside_the_domain_counts_as_its_clipped_self():
    """The stated rule: a row outside the box is clamped into it (a public map of the
    row), so replacing it by its clamped self changes no released bit; a row beyond
    float64's range of squares is clipped too, without an error."""
    X, _, _ = _clusters(400, 6)
    out = X.copy()
    out[0] = [5.0, -7.0, 0.3, 0.1, 2.0**400, -(2.0**400)]  # the input range's limit
    clamped = out.copy()
    clamped[0] = np.clip(out[0], -1, 1)
    a, b = (private_synopsis(B, epsilon=4.0, delta=1e-5, bounds=(-1, 1), seed=3)
            for B in (out, clamped))
    assert np.array_equal(a.attractors, b.attractors)
    assert np.array_equal(a.counts, b.counts)
    ball = sd.parse_domain(None, (np.zeros(6), 2.0), 6)
    z = ball.clip(out[:1])
    assert np.all(np.isfinite(z)) and np.linalg.norm(z) <= 2.0 * (1 + 1e-8)


def test_the_private_mean_is_clamped_into_the_domain():
    """The centre release's mean ``μ = c₀ + V₀/n`` is clamped into the domain
    (post-processing; as for a projected snapshot): a noisy mean outside the domain no
    longer carries the later centres away from it (far enough, a later release's
    ``_check_range`` refused after releases had been computed). The first radii release
    is centred at the clamped mean."""
    X = np.zeros((5, 2))  # every row at the box's corner: the noise decides the side
    domain = sd.parse_domain((0.0, 1.0), None, 2)
    plan = sd.SeedingPlan.make(1e-3, 5, 2, 3)
    outside = 0
    for s in range(6):
        out = sd.private_seeds(X, domain, plan, noise="plain",
                               rng=np.random.default_rng(s))
        v = out["releases"][0]["values"]
        raw = domain.centre + v[0, :-1] / 5
        outside += not np.all((raw >= 0.0) & (raw <= 1.0))
        assert np.all((out["mean"] >= 0.0) & (out["mean"] <= 1.0))
        np.testing.assert_array_equal(out["mean"], domain.clip(raw[None])[0])
        np.testing.assert_array_equal(out["releases"][1]["centres"], out["mean"][None])
        assert [r["kind"] for r in out["releases"][:2]] == ["centre", "radii"]
    assert outside >= 3  # the noisy mean left the box, and was clamped


# --- the snapshot: the filter, the noise, the record ---------------------------------------


def test_snapshot_without_seeds_finds_the_clusters():
    from sklearn.metrics import adjusted_rand_score

    X, y, _ = _clusters()
    split = 0
    for seed in range(6):
        syn = private_synopsis(X, epsilon=4.0, delta=1e-5, bounds=(-1, 1), seed=seed)
        # where the attractors split a cluster, the released pair counts merge them
        split += syn.n_attractors > 4 and adjusted_rand_score(y, syn.assign(X)) < 0.99
        assert adjusted_rand_score(y, syn.cluster(X)) > 0.99
        assert np.unique(syn.clusters()).size == 4
    assert split >= 2  # the merge had work to do
    assert syn.params["seeding"] == "private" and syn.seeds.shape == (0, 16)
    assert syn.radius == syn.params["scale"] and syn.params["radius_rule"] == "private scale"


def test_snapshot_without_seeds_is_charged_once_and_refused_beyond(tmp_path):
    X, _, _ = _clusters(300, 8)
    path = tmp_path / "s.db"
    with PrivateMemory(X, radius=0.3, budget=(2.0, 1e-5), ledger=path, create=True,
                       accounting="local") as pm:
        syn = pm.snapshot(bounds=(-1, 1), seed=0, rounds=3)
        assert syn.epsilon == pytest.approx(pm.spent, rel=1e-9) and pm.spent <= 2.0
        assert syn.params["rounds"] == 3
        kinds = [r["params"]["kind"] for r in pm.releases]
        assert kinds == ["centre", "radii"] + ["voronoi", "radii"] * 2 + ["voronoi", "pairs"]
        # the whole space is read: a far point is charged as much as a row
        assert pm.spent_at(np.full((1, 8), 1e6))[0] == pytest.approx(pm.spent)
        with pytest.raises(BudgetExceededError, match="Nothing was released or spent"):
            pm.snapshot(bounds=(-1, 1), seed=1)
        spent = pm.spent
    with PrivateMemory(X, radius=0.3, budget=(2.0, 1e-5), ledger=path,
                       accounting="local") as pm2:
        assert pm2.spent == pytest.approx(spent, rel=1e-12)
    pm3 = PrivateMemory(X, radius=0.3, budget=(8.0, 1e-5), accounting="global")
    small = pm3.snapshot(bounds=(-1, 1), epsilon=1.0, seed=0)
    assert 0.95 <= small.epsilon <= 1.0 and pm3.remaining >= 7.0 - 1e-9


def test_noise_is_secure_without_a_seed_and_no_seed_is_echoed():
    X, _, _ = _clusters(300, 4)
    sec = private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), rounds=2)
    assert sec.params["noise"] == "secure" and "seed" not in sec.params
    assert "seed" not in sec.to_dict()["params"]
    plain = private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), rounds=2, seed=7)
    assert plain.params["noise"] == "plain" and plain.params["seed"] == 7
    assert plain.to_dict()["params"]["seed"] is None  # withheld unless asked for
    assert plain.to_dict(include_seed=True)["params"]["seed"] == 7
    again = private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), rounds=2, seed=7)
    assert np.array_equal(plain.attractors, again.attractors)  # reproducible
    with pytest.raises(ValueError, match="seed must be None"):
        private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), seed=7,
                         noise="secure")
    # the seeded path (public seeds) follows the same rule
    pub = private_synopsis(X, radius=0.3, epsilon=2.0, delta=1e-5, seeds=X[:5] + 0.01)
    assert pub.params["noise"] == "secure" and "seed" not in pub.params


def test_secure_noise_has_the_accounted_scale():
    """The exact discrete Gaussian on an integer statistic: σ² ≥ Δ²/(2ρ) (rounded up)
    and the draws have that spread."""
    from brace._exact import noisy_integers

    stat = np.zeros(20_000, dtype=np.int64)
    out, sigma = noisy_integers(stat, 1000.0, 0.5, "secure", None)
    assert sigma >= 1000.0 and sigma < 1000.0 * 1.01
    assert np.all(out == np.rint(out)) and abs(out.std() / sigma - 1) < 0.03
    # a tiny ρ still fits the exact sampler (the grid is coarsened for it)
    unit = sd.voronoi_unit(1.0, 10**6, 1e-8)
    s_units = sd.voronoi_sensitivity(1.0, unit, 784) / unit / math.sqrt(2e-8)
    assert s_units < 2**29


def test_json_round_trip_and_validation():
    X, _, _ = _clusters(300, 4)
    syn = private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(-1, 1), rounds=2, seed=1)
    back = Synopsis.from_json(syn.to_json())
    assert np.array_equal(back.attractors, syn.attractors)
    assert back.seeds.shape == (0, 4) and back.params["domain"]["kind"] == "box"
    assert back.params["scale"] == syn.params["scale"]
    assert "found privately" in str(back)
    good = syn.to_dict()
    for field, value, msg in [
        ("attractors", [[np.nan] * 4] * syn.n_attractors, "finite"),
        ("counts", [-1] * syn.n_attractors, "counts"),
        ("counts", [1], "counts"),
        ("delta", 1.5, "delta"),
        ("epsilon", 0.0, "epsilon"),
        ("radius", -1.0, "radius"),
        ("seeds", [[0.0, 0.0]], "seeds"),
        ("endpoints", [[0.0] * 5], "endpoints"),
    ]:
        bad = {**good, field: value}
        with pytest.raises(ValueError, match=msg):
            Synopsis.from_dict(bad)
    with pytest.raises(ValueError, match="missing"):
        Synopsis.from_dict({"attractors": [[0.0]]})
    with pytest.raises(ValueError, match="noise"):
        Synopsis.from_dict({**good, "params": {**good["params"], "noise": "loud"}})


def test_bad_inputs_are_refused_before_anything_is_spent():
    X, _, _ = _clusters(100, 3)
    pm = PrivateMemory(X, radius=0.3, budget=(4.0, 1e-5))
    for kw, msg in [
        ({}, "public domain"),
        ({"bounds": (1, 0)}, "lo < hi"),
        ({"bounds": (np.nan, 1)}, "finite"),
        ({"bounds": ([0, 0], [1, 1])}, "bounds"),
        ({"bounds": (-1, 1), "ball": (0, 1)}, "exactly one"),
        ({"ball": (0, 0)}, "radius > 0"),
        ({"ball": ([0, 0], 1)}, "ball"),
        ({"bounds": (-1, 1), "steps": 2}, "public seeds"),
        ({"bounds": (-1, 1), "keep_seeds": True}, "public seeds"),
        ({"bounds": (-1, 1), "cell_radius": 0.5}, "public seeds"),
        ({"bounds": (-1, 1), "rounds": 0}, "rounds"),
        ({"bounds": (-1, 1), "noise": "loud"}, "noise"),
        ({"bounds": (-1, 1), "public_seed": -1}, "public_seed"),
        ({"bounds": (-1, 1), "merge_radius": -1.0}, "merge_radius"),
    ]:
        with pytest.raises(ValueError, match=msg):
            pm.snapshot(**kw)
    with pytest.raises(ValueError, match="ball= is for"):
        pm.snapshot(X[:3], ball=(0, 1))
    with pytest.raises(TypeError, match="does not take"):
        pm.snapshot(bounds=(-1, 1), kappa=3.0)
    assert pm.spent == 0.0


def test_plan_is_a_public_function_and_splits_the_budget():
    plan = sd.SeedingPlan.make(0.3, 1797, 64, 8)
    ev = plan.events()
    assert len(ev) == 1 + 8 + 8 + 1 and sum(ev) == pytest.approx(0.3)
    assert ev[-1] == plan.rho_pairs == pytest.approx(sd.PAIRS_SHARE * 0.3)
    assert plan.split_rounds == (2, 4) and 1 <= plan.k0 <= 64
    assert sd.SeedingPlan.make(0.3, 1797, 64, 8) == plan
    assert sd.SeedingPlan.make(1e-4, 1797, 64, 8).k0 == 1  # too little for two cells
    # without rounds, the budget decides: fewer, more accurate rounds when it is small
    assert sd.SeedingPlan.make(0.3, 10**5, 64).rounds == 8
    small = sd.SeedingPlan.make(0.02, 1797, 64)
    assert small.rounds == 3 and small.c_min == 1.0 and small.split_rounds == (1, 2)
    assert sum(small.events()) == pytest.approx(0.02)
    # a projected plan: its three full-space releases, then its synopsis's
    from brace.projection import ProjectionPlan

    pp = ProjectionPlan.make(0.3, 1797, 64, 8)
    assert pp.events() == [pp.rho_centre, pp.rho_scale, pp.rho_moments,
                           *pp.seeding.events()]
    assert sum(pp.events()) == pytest.approx(0.3)


def test_memory_mapped_bank_gives_the_same_synopsis(tmp_path):
    """The releases read the memory's verified row blocks: a memory-mapped bank gives
    the synopsis of the in-memory array, bit for bit."""
    X, _, _ = _clusters(500, 6)
    np.save(tmp_path / "b.npy", X)
    a, b = (private_synopsis(B, epsilon=3.0, delta=1e-5, bounds=(-1, 1), seed=4)
            for B in (X, np.load(tmp_path / "b.npy", mmap_mode="r")))
    assert np.array_equal(a.attractors, b.attractors) and np.array_equal(a.counts, b.counts)


# --- the audit row -------------------------------------------------------------------------


def test_audit_report_row_of_the_voronoi_round_passes_and_catches_broken_noise(monkeypatch):
    from brace.audit.report import report_bank
    from brace.audit.synopsis import voronoi_row

    X, q = report_bank(40, 2, 0.5, 9)
    kw = dict(epsilon=4.0, delta=1e-5, radius=0.5, n_runs=4_000, alpha=0.05, seed=0)
    row = voronoi_row(X, q, **kw)
    assert row["verdict"] == "pass" and 0.0 < row["epsilon_lb"] <= row["claimed_epsilon"]
    true = sd.voronoi_sensitivity
    monkeypatch.setattr(sd, "voronoi_sensitivity", lambda *a: 0.25 * true(*a))
    broken = voronoi_row(X, q, **kw)
    assert broken["verdict"] == "VIOLATION" and broken["epsilon_lb"] > 4.0


def test_recommend_advises_a_synopsis_without_public_seeds_or_nothing():
    """The public rule: a synopsis without public seeds when it can afford at least two
    cells and the user's public rows do not suffice (``public_suffices``: here, with at
    least PUBLIC_FEW_CELLS cells, fewer than PUBLIC_PLENTY per cell); releasing nothing
    when they do, or when no two cells fit."""
    from brace.budget.advice import PUBLIC_ENOUGH, PUBLIC_FEW_CELLS, PUBLIC_PLENTY

    X = np.random.default_rng(0).uniform(-1, 1, (3_000, 32))
    pm = PrivateMemory(X, radius=0.5, budget=(4.0, 1e-5), accounting="global")
    rec = pm.recommend(1000, public_seeds=False)
    assert rec.use == "snapshot" and rec.seeds == "private" and "bounds" in rec.reason
    few = pm.recommend(1000, public_rows=10)
    assert few.use == "snapshot" and few.seeds == "private" and "10 public rows" in few.reason
    assert rec.cells >= PUBLIC_FEW_CELLS  # so PUBLIC_ENOUGH per cell is not enough
    some = pm.recommend(1000, public_rows=int(PUBLIC_ENOUGH * rec.cells) + 1)
    assert some.use == "snapshot" and "fewer than 4 public rows per cell" in some.reason
    many = pm.recommend(1000, public_rows=int(PUBLIC_PLENTY * rec.cells) + 1)
    assert many.use == "nothing" and "releasing nothing" in many.reason
    tiny = PrivateMemory(X[:300], radius=0.5, budget=(0.3, 1e-5), accounting="global")
    none = tiny.recommend(1000, public_seeds=False)
    assert none.use == "nothing" and none.cells < 2 and "noisy mean" in none.reason
    assert pm.spent == 0.0 and brace.__version__


def test_a_domain_beyond_the_bank_range_is_refused_before_anything_is_spent():
    """The domain is public: one beyond |x| <= 2^400 (where the rounds' squares and the
    noise's variance could overflow after admission) is refused from it alone; one at
    the edge of the range releases finite attractors."""
    X = np.random.default_rng(0).uniform(-1, 1, size=(200, 1))
    pm = PrivateMemory(X, radius=0.5, budget=(1.0, 1e-5))
    for kw in (dict(bounds=(-1e150, 1e150)), dict(ball=(0.0, 1e130)),
               dict(ball=(2.0**400, 2.0**360))):
        with pytest.raises(ValueError, match=r"input range \|x\| <= 2\^400"):
            pm.snapshot(epsilon=1e-3, seed=1, **kw)
    assert pm.spent == 0.0
    B = 2.0**399
    wide = PrivateMemory(X * B, radius=B / 10, budget=(1.0, 1e-5))
    with np.errstate(all="raise"):
        syn = wide.snapshot(bounds=(-B, B), epsilon=1e-3, seed=1)
    assert np.all(np.isfinite(syn.attractors))


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 4), d=st.integers(1, 5),
       n=st.integers(1, 15), size=st.sampled_from([2.0**-400, 2.0**399]),
       clip_at=st.sampled_from([2.0**-48, 2.0**-12, 1.0, 2.0]),
       where=st.sampled_from(["inside", "sphere", "outside", "far", "subnormal"]))
def test_voronoi_round_sensitivity_holds_at_the_range_extremes(seed, k, d, n, size,
                                                               clip_at, where):
    """Lemma 11 at the smallest and largest domain size (``R₀ ∈ [2^-400, 2^400]``) and
    clips from the floor ``R₀·2^-48`` to ``2R₀``: the stated range of every clip a
    snapshot uses (issue 37: below it ``clip²`` underflowed and the round moved 32.8×
    its sensitivity)."""
    rng = np.random.default_rng(seed)
    domain = sd.parse_domain(None, (np.zeros(d), size), d)
    R0 = domain.radius
    clip = clip_at * R0
    C = domain.clip(rng.uniform(-1, 1, (k, d)) * R0 / math.sqrt(d))
    c = C[int(rng.integers(0, k))]
    X = domain.clip(c + rng.normal(size=(n, d)) * clip)
    unit = sd.voronoi_unit(clip, n, float(rng.uniform(1e-6, 1e3)))
    Xp = moved_row(X, rng, c, clip, where)
    bound = sd.voronoi_sensitivity(clip, unit, d) / unit
    assert _moved_units(X, Xp, C, clip, unit, domain) <= bound
