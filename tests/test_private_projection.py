"""A projected synopsis without public data (``snapshot(bounds=…, project=…)``,
``docs/privacy-accounting.md`` §15.1): the second-moment release's sensitivity (Lemma 14:
a property test over replacements in exact integers, its tightness, an adversarial
hill-climb, a slow reference, exact sums at the edge of float64), the exact projection,
the filter (charged once, refused beyond, recorded), the noise (secure without a seed,
plain with one, no seed echoed, the accounted scale), the JSON round trip and its
validation, bad inputs, rows outside the domain, and the audit row."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brace import BudgetExceededError, PrivateMemory, Synopsis, private_synopsis
from brace import projection as pj
from brace import seeding as sd
from edgerows import moved_row  # noqa: E402 (tests/, on the path)


def _subspace_clusters(n: int = 2000, d: int = 40, seed: int = 0):
    """Four clusters at the corners of a square (side 0.6) in a random plane of
    ``ℝ^d`` through the centre of [0, 1]^d."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, 2)))
    C = 0.5 + 0.3 * np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]]) @ Q.T
    y = rng.integers(0, 4, n)
    X = np.clip(C[y] + 0.02 * rng.standard_normal((n, d)), 0.0, 1.0)
    return X, y, C


def _exact_change(X, Xp, domain, mean, clip, bits) -> int:
    """``‖M(D) − M(D')‖_F²`` in exact integers."""
    a = pj.moments_stat(X, domain, mean, clip, bits).astype(object)
    b = pj.moments_stat(Xp, domain, mean, clip, bits).astype(object)
    return int(np.sum((a - b) ** 2))


# --- Lemma 14: the second moments' sensitivity -------------------------------------------


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 6), n=st.integers(1, 25),
       where=st.sampled_from(["inside", "sphere", "outside", "far"]))
def test_moments_sensitivity_holds_for_every_replacement(seed, d, n, where):
    """Replacing one row changes the exact statistic by Δ = uuᵀ − u'u'ᵀ with
    ½‖Δ‖_F² ≤ 16^b, wherever the two rows fall (inside the clip, on its sphere, beyond
    it, outside the domain, at 10^250); every row's Σu² ≤ 4^b exactly."""
    rng = np.random.default_rng(seed)
    domain = sd.parse_domain((-2.0, 2.0), None, d)
    mean = rng.uniform(-2, 2, d)
    clip = float(rng.uniform(0.05, 3.0))
    bits = pj.moments_bits(n, float(rng.uniform(1e-4, 5.0)))
    X = rng.uniform(-2.5, 2.5, (n, d))
    Xp = X.copy()
    i = int(rng.integers(0, n))
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    Xp[i] = {"inside": mean + clip * float(rng.uniform(0, 1)) * u,
             "sphere": mean + clip * (1 + float(rng.choice([-1, 0, 1])) * 1e-15) * u,
             "outside": mean + clip * float(rng.uniform(1, 5)) * u,
             "far": mean + 1e250 * u}[where]
    for B in (X, Xp):
        U = pj.moments_offsets(domain.clip(B), mean, clip, bits).astype(object)
        assert all(int(s) <= 4**bits for s in np.sum(U * U, axis=1))
    assert _exact_change(X, Xp, domain, mean, clip, bits) <= 2 * 16**bits


def test_moments_sensitivity_is_attained():
    """Two rows at the clip along orthogonal axes: u = 2^b e₁, u' = 2^b e₂, so
    ½‖Δ‖_F² = 16^b exactly: the bound is tight."""
    d, clip = 3, 0.5
    domain = sd.parse_domain((-4.0, 4.0), None, d)
    mean = np.zeros(d)
    bits = pj.moments_bits(2, 0.5)
    X = np.array([[clip, 0.0, 0.0], [0.1, 0.2, 0.0]])
    Xp = np.array([[0.0, clip, 0.0], [0.1, 0.2, 0.0]])
    assert _exact_change(X, Xp, domain, mean, clip, bits) == 2 * 16**bits
    u, v = (pj.moments_offsets(B[:1], mean, clip, bits)[0] for B in (X, Xp))
    assert pj.moments_weighted_change(u, v) == 2 * 16**bits


def test_moments_adversarial_search_finds_no_violation():
    """Hill-climb on the replacement row (the replaced one beyond the clip) to maximise
    the change: never above the bound, and close to it (the search has teeth)."""
    rng = np.random.default_rng(11)
    d, clip = 4, 0.6
    domain = sd.parse_domain((-3.0, 3.0), None, d)
    mean = rng.uniform(-0.5, 0.5, d)
    X = rng.uniform(-2, 2, (20, d))
    X[0] = mean + 2.0 * clip * np.eye(d)[0]
    bits = pj.moments_bits(20, 0.3)
    bound = 2 * 16**bits
    best = 0.0
    for _ in range(8):
        x = mean + rng.normal(size=d) * clip
        cur = -1.0
        for _ in range(60):
            cand = x + rng.normal(size=d) * 0.4 * clip
            Xp = X.copy()
            Xp[0] = cand
            v = _exact_change(X, Xp, domain, mean, clip, bits)
            assert v <= bound
            if v >= cur:
                x, cur = cand, v
        best = max(best, cur / bound)
    assert best > 0.8


def _reference_offset(z, mean, clip, bits):
    """Slow reference of one row's offset in exact rationals: ``t = (z − μ)/g`` scaled to
    norm ``2^b`` when longer (the factor from a correctly rounded square root), then
    truncated."""
    g = Fraction(clip) * Fraction(1, 2**bits)
    t = [(Fraction(float(a)) - Fraction(float(m))) / g for a, m in zip(z, mean, strict=True)]
    s = sum(x * x for x in t)
    if s > 4**bits:
        f = Fraction(2**bits) / Fraction(math.sqrt(float(s)))
        t = [x * f for x in t]
    return [int(x) for x in t]  # int() truncates towards zero


def test_moments_statistic_matches_the_slow_reference():
    rng = np.random.default_rng(3)
    for _ in range(12):
        d, n = int(rng.integers(2, 5)), int(rng.integers(1, 25))
        clip = float(rng.uniform(0.2, 1.5))
        domain = sd.parse_domain((-1.5, 1.5), None, d)
        mean = rng.uniform(-1, 1, d)
        bits = pj.moments_bits(n, float(rng.uniform(0.01, 2.0)))
        X = rng.uniform(-2, 2, (n, d))
        Z = domain.clip(X)
        U = pj.moments_offsets(Z, mean, clip, bits)
        R = np.array([_reference_offset(z, mean, clip, bits) for z in Z], dtype=np.int64)
        np.testing.assert_array_equal(U, R)  # Lemma 14's truncation, to the unit
        M = pj.moments_stat(X, domain, mean, clip, bits)
        exact = sum(np.outer(u.astype(object), u.astype(object)) for u in U)
        assert np.array_equal(M.astype(object), exact)


def test_moments_sums_are_exact_at_the_edge_of_float64(monkeypatch):
    """With the finest grid (b = 20) and rows at the clip, the sums reach 2^52: the
    float64 products of at most _exact_tile rows, added in int64, equal the exact
    integer sum, and the tile size changes nothing."""
    rng = np.random.default_rng(4)
    d, n, bits = 3, 5000, 20
    domain = sd.parse_domain((-1.0, 1.0), None, d)
    v = rng.normal(size=(n, d))
    X = 0.5 * v / np.linalg.norm(v, axis=1, keepdims=True) * 1.5  # beyond the clip 0.5
    M = pj.moments_stat(X, domain, np.zeros(d), 0.5, bits)
    U = pj.moments_offsets(domain.clip(X), np.zeros(d), 0.5, bits).astype(object)
    exact = U.T.dot(U)
    assert np.array_equal(M.astype(object), exact)
    assert max(int(x) for x in np.diagonal(exact)) > 2**50
    monkeypatch.setattr(sd, "_TILE", 3 * 7)  # seven rows per tile
    assert np.array_equal(pj.moments_stat(X, domain, np.zeros(d), 0.5, bits), M)


def test_projection_is_exact_and_depends_on_the_row_only(monkeypatch):
    """y = g·2^-30·(Wᵀu): the float64 product equals the exact integer product, row by
    row, whatever the tiles."""
    rng = np.random.default_rng(6)
    d, k, n = 30, 4, 301
    domain = sd.parse_domain((0.0, 1.0), None, d)
    X = rng.uniform(-0.2, 1.2, (n, d))
    mean = rng.uniform(0.3, 0.7, d)
    V, _ = np.linalg.qr(rng.normal(size=(d, k)))
    W = pj.basis_integers(V)
    bits = pj.moments_bits(n, 0.05)
    Y = pj.project_rows(X, domain, mean, 0.8, bits, W)
    U = pj.moments_offsets(domain.clip(X), mean, 0.8, bits)
    exact = U.astype(object).dot(W.astype(object))
    scale = 0.8 * 2.0**-bits * 2.0**-pj.BASIS_BITS
    assert np.array_equal(Y, exact.astype(np.float64) * scale)
    monkeypatch.setattr(sd, "_TILE", 5 * k)
    assert np.array_equal(pj.project_rows(X, domain, mean, 0.8, bits, W), Y)
    one = np.concatenate([pj.project_rows(X[i:i + 1], domain, mean, 0.8, bits, W)
                          for i in range(n)])
    assert np.array_equal(one, Y)


# --- the noise ---------------------------------------------------------------------------


def test_moments_noise_has_the_accounted_scale():
    """Secure: the discrete Gaussian of variance ≥ 16^b/(2ρ) off the diagonal and
    ≥ 16^b/ρ on it (rounded up by at most a relative 10⁻⁶), and the draws have that
    spread; plain: numpy's of the same σ."""
    rng = np.random.default_rng(1)
    d, n, rho = 60, 200, 0.2
    domain = sd.parse_domain((0.0, 1.0), None, d)
    X = rng.uniform(0, 1, (n, d))
    mean = np.full(d, 0.5)
    bits = pj.moments_bits(n, rho)
    exact = pj.moments_stat(X, domain, mean, 1.0, bits).astype(np.float64)
    for noise, gen in (("secure", None), ("plain", np.random.default_rng(2))):
        S, info = pj.release_moments(X, domain, mean, 1.0, rho, noise, gen, n)
        want = 4.0**bits / math.sqrt(2 * rho)
        assert want * (1 - 1e-12) <= info["sigma"] < want * (1 + 1e-6)
        diag = math.sqrt(2) * want
        assert diag * (1 - 1e-12) <= info["sigma_diag"] < diag * (1 + 1e-6)
        Z = S / info["unit"] ** 2 - exact
        assert np.array_equal(Z, Z.T)
        off = Z[np.triu_indices(d, 1)] / info["sigma"]
        assert abs(off.std() - 1) < 0.06 and abs(off.mean()) < 0.1
        diag = [np.diagonal(Z)] + [  # more draws: the diagonal's √2 larger σ, within 15 %
            np.diagonal(pj.release_moments(X, domain, mean, 1.0, rho, noise, gen, n)[0]
                        / info["unit"] ** 2 - exact) for _ in range(9)]
        assert abs(np.concatenate(diag).std() / info["sigma_diag"] - 1) < 0.15
        if noise == "secure":
            assert np.all(Z == np.rint(Z))


# --- the snapshot: the subspace, the filter, the record -------------------------------------


def test_projected_snapshot_finds_the_clusters_in_high_dimension():
    from sklearn.metrics import homogeneity_score

    X, y, C = _subspace_clusters()
    syn = private_synopsis(X, epsilon=4.0, delta=1e-5, bounds=(0, 1), project="auto",
                           seed=0)
    pr = syn.params["project"]
    assert 2 <= pr["k"] <= pj.K_MAX and pr["rule"] == "auto"
    assert homogeneity_score(y, syn.assign(X)) > 0.95  # no attractor mixes clusters
    near = np.linalg.norm(C[:, None] - syn.attractors[None], axis=2).min(axis=1)
    assert near.max() < 0.2  # every cluster has an attractor (the square's side: 0.6)
    B = np.asarray(pr["basis"])
    assert np.allclose(B @ B.T, np.eye(pr["k"]), atol=1e-8)
    # the centres' differences lie in the released subspace
    D = C - C.mean(0)
    assert np.linalg.norm(D - D @ B.T @ B) < 0.05 * np.linalg.norm(D)
    assert syn.params["radius_rule"] == "private scale" and syn.radius > syn.params["scale"]
    assert syn.attractors.shape[1] == 40 and np.all((syn.attractors >= 0)
                                                    & (syn.attractors <= 1))
    fixed = private_synopsis(X, epsilon=4.0, delta=1e-5, bounds=(0, 1), project=3, seed=0)
    assert fixed.params["project"]["k"] == 3 and fixed.params["project"]["rule"] == "fixed"
    assert "subspace" in str(fixed)


def test_projected_snapshot_is_charged_once_refused_beyond_and_recorded(tmp_path):
    from brace.ledger.state import inspect_ledger

    X, _, _ = _subspace_clusters(400, 12)
    path = tmp_path / "p.db"
    with PrivateMemory(X, radius=0.3, budget=(2.0, 1e-5), ledger=path, create=True,
                       accounting="local") as pm:
        syn = pm.snapshot(bounds=(0, 1), seed=0, rounds=3, project=2)
        assert syn.epsilon == pytest.approx(pm.spent, rel=1e-9) and pm.spent <= 2.0
        plan = pj.ProjectionPlan.make(syn.params["rho"], 400, 12, 2, 3)
        assert sum(plan.events()) == pytest.approx(syn.params["rho"])
        kinds = [r["params"]["kind"] for r in pm.releases]
        assert kinds == (["centre", "radii", "moments", "centre", "radii"]
                         + ["voronoi", "radii"] * 2 + ["voronoi", "pairs"])
        assert [r["params"].get("space") for r in pm.releases][3:] == ["projected"] * 8
        assert pm.releases[2]["queries"] == 12 and pm.releases[2]["steps"] == 1
        assert pm.spent_at(np.full((1, 12), 1e6))[0] == pytest.approx(pm.spent)
        with pytest.raises(BudgetExceededError, match="Nothing was released or spent"):
            pm.snapshot(bounds=(0, 1), seed=1, project=2)
        spent = pm.spent
    with PrivateMemory(X, radius=0.3, budget=(2.0, 1e-5), ledger=path,
                       accounting="local") as pm2:
        assert pm2.spent == pytest.approx(spent, rel=1e-12)
    assert "second moments (12 x 12" in inspect_ledger(path).summary()
    pm3 = PrivateMemory(X, radius=0.3, budget=(8.0, 1e-5), accounting="global")
    small = pm3.snapshot(bounds=(0, 1), epsilon=1.0, seed=0, project="auto")
    assert 0.95 <= small.epsilon <= 1.0 and pm3.remaining >= 7.0 - 1e-9


def test_projected_noise_is_secure_without_a_seed_and_no_seed_is_echoed():
    X, _, _ = _subspace_clusters(300, 10)
    kw = dict(epsilon=2.0, delta=1e-5, bounds=(0, 1), rounds=2, project=2)
    sec = private_synopsis(X, **kw)
    assert sec.params["noise"] == "secure" and "seed" not in sec.params
    assert "seed" not in sec.to_dict()["params"]
    plain = private_synopsis(X, seed=7, **kw)
    assert plain.params["noise"] == "plain" and plain.params["seed"] == 7
    assert plain.to_dict()["params"]["seed"] is None
    again = private_synopsis(X, seed=7, **kw)
    assert np.array_equal(plain.attractors, again.attractors)
    assert plain.params["project"]["basis"] == again.params["project"]["basis"]
    with pytest.raises(ValueError, match="seed must be None"):
        private_synopsis(X, seed=7, noise="secure", **kw)


def test_a_row_outside_the_domain_counts_as_its_clipped_self():
    X, _, _ = _subspace_clusters(400, 8)
    out = X.copy()
    out[0] = [5.0, -7.0, 0.3, 0.1, 2.0**400, -(2.0**400), 0.5, 9.0]
    clamped = out.copy()
    clamped[0] = np.clip(out[0], 0, 1)
    a, b = (private_synopsis(B, epsilon=4.0, delta=1e-5, bounds=(0, 1), seed=3, project=2)
            for B in (out, clamped))
    assert np.array_equal(a.attractors, b.attractors)
    assert a.params["project"] == b.params["project"]


def test_projected_json_round_trip_and_validation():
    X, _, _ = _subspace_clusters(300, 6)
    syn = private_synopsis(X, epsilon=2.0, delta=1e-5, bounds=(0, 1), rounds=2,
                           project=2, seed=1)
    back = Synopsis.from_json(syn.to_json())
    assert np.array_equal(back.attractors, syn.attractors)
    assert back.params["project"] == syn.params["project"]
    good = syn.to_dict()
    pr = good["params"]["project"]
    B = np.asarray(pr["basis"])
    for change, msg in [
        ({"k": 6}, "k"), ({"k": True}, "k"),
        ({"basis": B[:1].tolist()}, "basis"),
        ({"basis": (2 * B).tolist()}, "orthonormal"),
        ({"basis": [[np.nan] * 6] * 2}, "basis"),
        ({"mean": [0.5] * 5}, "mean"),
        ({"eigenvalues": [1.0]}, "eigenvalues"),
        ({"clip": 0.0}, "clip"), ({"clip": "x"}, "numbers"),
    ]:
        bad = {**good, "params": {**good["params"], "project": {**pr, **change}}}
        with pytest.raises(ValueError, match=msg):
            Synopsis.from_dict(bad)
    with pytest.raises(ValueError, match="must be an object"):
        Synopsis.from_dict({**good, "params": {**good["params"], "project": [1]}})


def test_bad_projections_are_refused_before_anything_is_spent(monkeypatch):
    X, _, _ = _subspace_clusters(100, 6)
    pm = PrivateMemory(X, radius=0.3, budget=(4.0, 1e-5))
    for value, msg in [("x", "project must be"), (0, "1 <= k < d"), (6, "1 <= k < d"),
                       (True, "project must be"), (2.5, "project must be")]:
        with pytest.raises(ValueError, match=msg):
            pm.snapshot(bounds=(0, 1), project=value)
    with pytest.raises(ValueError, match="project= is for a snapshot without seeds"):
        pm.snapshot(X[:3], project=2)
    monkeypatch.setattr(pj, "MAX_DIM", 5)
    with pytest.raises(ValueError, match="d x d matrix"):
        pm.snapshot(bounds=(0, 1), project=2)
    one = PrivateMemory(X[:, :1], radius=0.3, budget=(4.0, 1e-5))
    with pytest.raises(ValueError, match="1 <= k < d|d >= 2"):
        one.snapshot(bounds=(0, 1), project="auto")
    assert pm.spent == 0.0 and one.spent == 0.0


def test_plan_is_public_and_its_events_do_not_depend_on_the_released_k():
    plan = pj.ProjectionPlan.make(0.3, 5000, 784, "auto")
    ev = plan.events()
    assert sum(ev) == pytest.approx(0.3) and ev[2] == pytest.approx(0.15)
    assert plan.k_ref == pj.K_MAX
    for k in (1, 7, 32):
        p = plan.at(k)
        assert (p.rounds, p.rho_round, p.rho_radii, p.split_rounds) == (
            plan.seeding.rounds, plan.seeding.rho_round, plan.seeding.rho_radii,
            plan.seeding.split_rounds)
    assert plan.at(4).k0 >= plan.at(32).k0
    assert pj.ProjectionPlan.make(0.3, 5000, 784, "auto") == plan


# --- the audit row -------------------------------------------------------------------------


def test_audit_report_row_of_the_moments_release_passes_and_catches_broken_noise(
        monkeypatch):
    from brace.audit.report import report_bank
    from brace.audit.synopsis import moments_row

    X, q = report_bank(40, 2, 0.5, 9)
    kw = dict(epsilon=4.0, delta=1e-5, radius=0.5, n_runs=3_000, alpha=0.05, seed=0)
    row = moments_row(X, q, **kw)
    assert row["verdict"] == "pass" and 0.0 < row["epsilon_lb"] <= row["claimed_epsilon"]
    true = pj.noisy_integers
    monkeypatch.setattr(pj, "noisy_integers",
                        lambda stat, sens, *a: true(stat, 0.25 * sens, *a))
    broken = moments_row(X, q, **kw)
    assert broken["verdict"] == "VIOLATION" and broken["epsilon_lb"] > 4.0


def test_recommend_advises_a_private_subspace_where_it_affords_more_cells():
    """The public rule: the synopsis without public seeds in the space (full or a private
    subspace) whose rounds afford more cells; against 50 public rows, the projected
    synopsis on a 5,000 × 784 bank at ε = 4 and none on 7,000 rows at ε = 1, a
    coarse synopsis (docs/guide.md)."""
    X = np.zeros((5000, 784), dtype=np.float32)
    X[:, 0] = np.arange(5000) % 7
    four = PrivateMemory(X, radius=0.5, budget=(4.0, 1e-5), accounting="global")
    rec = four.recommend(1000, public_rows=50)
    assert rec.use == "snapshot" and rec.seeds == "private" and rec.project == "auto"
    assert "project='auto'" in rec.reason and rec.to_dict()["project"] == "auto"
    seven = np.zeros((7000, 784), dtype=np.float32)
    seven[:, 0] = np.arange(7000) % 7
    one = PrivateMemory(seven, radius=0.5, budget=(1.0, 1e-5), accounting="global")
    assert one.recommend(1000, public_rows=50).use == "nothing"
    low = np.zeros((30_000, 64), dtype=np.float32)
    low[:, 0] = np.arange(30_000) % 7
    flat = PrivateMemory(low, radius=0.5, budget=(1.0, 1e-5), accounting="global")
    rec = flat.recommend(1000, public_rows=50)
    assert rec.use == "snapshot" and rec.project is None  # the full space affords more


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 5), n=st.integers(1, 15),
       size=st.sampled_from([2.0**-400, 2.0**399]),
       cp_at=st.sampled_from([0.75 * 2.0**-12, 0.75]),
       where=st.sampled_from(["inside", "sphere", "outside", "far", "subnormal"]))
def test_moments_sensitivity_holds_at_the_range_extremes(seed, d, n, size, cp_at, where):
    """Lemma 14 at the smallest and largest domain size and at both ends of the clip's
    range ``c_p ∈ [0.75·R₀·2^-12, 0.75·R₀]`` (issue 37: in a domain of ±2^-520.6 the
    grid's ``g²`` underflowed to 0)."""
    rng = np.random.default_rng(seed)
    domain = sd.parse_domain(None, (np.zeros(d), size), d)
    clip = cp_at * domain.radius
    assert pj.CLIP_RANGE[0] <= clip <= pj.CLIP_RANGE[1]
    mean = domain.clip(rng.uniform(-1, 1, (1, d)) * domain.radius / math.sqrt(d))[0]
    bits = pj.moments_bits(n, float(rng.uniform(1e-6, 1e3)))
    assert (clip * 2.0**-bits) ** 2 > 2.0**-1022  # g² is normal
    X = domain.clip(mean + rng.normal(size=(n, d)) * clip)
    Xp = moved_row(X, rng, mean, clip, where)
    assert _exact_change(X, Xp, domain, mean, clip, bits) <= 2 * 16**bits


def test_recommend_advises_the_subspace_where_the_full_space_is_too_coarse(monkeypatch):
    """Fewer than FULL_SPACE_MIN_CELLS cells in the full space and d > 32: the subspace
    (its clusters were better on digits and MNIST, docs/benchmarks.md "Cluster
    shapes"), even where it affords fewer cells; at d <= 32 the full space."""
    from brace.budget.advice import FULL_SPACE_MIN_CELLS

    X = np.zeros((1797, 64))
    X[:, 0] = np.arange(1797) % 7
    pm = PrivateMemory(X, radius=0.5, budget=(1.0, 1e-5), accounting="global")
    rec = pm.recommend(1000, public_seeds=False)
    assert rec.use == "snapshot" and rec.project == "auto"
    assert FULL_SPACE_MIN_CELLS == 50.0
    # the full space affords more cells: without the minimum it would be advised
    import brace.budget.advice as adv

    monkeypatch.setattr(adv, "FULL_SPACE_MIN_CELLS", 0.0)
    again = PrivateMemory(X, radius=0.5, budget=(1.0, 1e-5), accounting="global")
    other = again.recommend(1000, public_seeds=False)
    assert other.project is None and rec.cells < other.cells < 50.0
    small = PrivateMemory(np.zeros((1797, 32)), radius=0.5, budget=(1.0, 1e-5),
                          accounting="global")
    assert small.recommend(1000, public_seeds=False).project is None
