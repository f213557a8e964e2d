"""The one-shot synopsis (``PrivateMemory.snapshot``, docs/privacy-accounting.md §14):
its cell release's sensitivity (property and adversarial tests, a slow reference), the
per-row classification, the accounting (charged once, within the budget, the filter),
locality (a far row changes nothing, bit for bit), an audit of the cell release, the
ledger, and post-processing."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import brace
from brace import BudgetExceededError, PrivateMemory, Synopsis, private_synopsis
from brace.audit.stats import clopper_pearson_upper, epsilon_lower_bound
from brace.synopsis import (
    cell_sensitivity,
    cell_sums,
    cell_unit,
    merge_centres,
    public_seeds,
)

CENTRES = np.array([[0.0, 0.0], [3.0, 3.0], [-3.0, 3.0]])


def _bank(n_per: int = 60, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 0.3, (n_per, 2)) for c in CENTRES])


def _public(seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, 0.3, (4, 2)) for c in CENTRES])


def _stacked(X: np.ndarray, C: np.ndarray, r: float) -> np.ndarray:
    """The noiseless statistic of a cell round, in units of r (exact: integers in grid
    units times a power of two)."""
    cnt, sums, unit = cell_sums(X, C, r)
    return np.concatenate([sums * (unit / r), cnt[:, None]], axis=1)


def _moved(X: np.ndarray, Xp: np.ndarray, C: np.ndarray, r: float) -> float:
    """How far replacing rows moves the statistic (in the units of the release)."""
    return float(np.linalg.norm(_stacked(X, C, r) - _stacked(Xp, C, r))) * r


# --- the cell release's sensitivity -------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 6), d=st.integers(1, 5),
       n=st.integers(1, 30), on_boundary=st.booleans())
def test_cell_release_sensitivity_holds_for_every_replacement(seed, k, d, n, on_boundary):
    """Replacing one row changes the stacked (offset sums, r·counts) by at most
    cell_sensitivity in L2, whichever cells the two rows fall in (or none)."""
    rng = np.random.default_rng(seed)
    r = float(rng.uniform(0.1, 2.0))
    C = rng.normal(size=(k, d)) * r
    X = C[rng.integers(0, k, n)] + rng.normal(size=(n, d)) * r * 0.6
    i = int(rng.integers(0, n))
    Xp = X.copy()
    j = int(rng.integers(0, k))
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    # the replacement sits on (or just inside / outside) the sphere around a centre
    rad = r * (1.0 + (rng.choice([-1, 0, 1]) * 1e-15 if on_boundary else 0.0)) \
        if on_boundary else r * float(rng.uniform(0, 1.2))
    Xp[i] = C[j] + rad * u
    assert _moved(X, Xp, C, r) <= cell_sensitivity(r, cell_unit(r, n), d)


def test_cell_release_sensitivity_is_attained_within_rounding():
    """The bound is tight: a row on one side of its cell's sphere replaced by the
    antipodal row (same cell) moves the sum by about 2r."""
    r = 1.0
    C = np.zeros((1, 3))
    u = np.array([1.0, 0.0, 0.0])
    X = np.array([r * u, [0.1, 0.0, 0.0]])
    Xp = np.array([-r * u, [0.1, 0.0, 0.0]])
    diff = _moved(X, Xp, C, r)
    bound = cell_sensitivity(r, cell_unit(r, 2), 3)
    assert bound * (1 - 1e-6) <= diff <= bound


def test_cell_release_adversarial_search_finds_no_violation():
    """Hill-climb on the replacement row to maximise the change: never above the bound."""
    rng = np.random.default_rng(7)
    r, d, k = 0.7, 3, 4
    C = rng.normal(size=(k, d))
    X = C[rng.integers(0, k, 40)] + rng.normal(size=(40, d)) * 0.4
    bound = cell_sensitivity(r, cell_unit(r, 40), d)
    best = 0.0
    for start in range(20):
        x = C[start % k] + rng.normal(size=d) * r
        cur = -1.0
        for _ in range(150):
            cand = x + rng.normal(size=d) * 0.05 * r
            Xp = X.copy()
            Xp[0] = cand
            v = _moved(X, Xp, C, r)
            if v >= cur:
                x, cur = cand, v
        best = max(best, cur)
        assert cur <= bound
    assert best > 0.8 * bound  # the search reaches near the bound (it has teeth)


def _reference_cells(X, C, r):
    """Slow reference: exact rational distances, row by row."""
    k, d = C.shape
    unit = Fraction(cell_unit(r, X.shape[0]))
    counts = [0] * k
    sums = [[0] * d for _ in range(k)]
    for x in X:
        best, bj = None, -1
        for j in range(k):
            dist = sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(x, C[j],
                                                                                    strict=True))
            if dist <= Fraction(r) ** 2 and (best is None or dist < best):
                best, bj = dist, j
        if bj >= 0:
            counts[bj] += 1
            for t in range(d):
                off = (Fraction(float(x[t])) - Fraction(float(C[bj, t]))) / unit
                sums[bj][t] += round(off)
    return np.array(counts), np.array(sums, dtype=np.int64)


def test_cell_sums_match_the_slow_reference():
    rng = np.random.default_rng(3)
    for _ in range(20):
        k, d, n = rng.integers(1, 5), rng.integers(1, 4), rng.integers(1, 40)
        r = float(rng.uniform(0.2, 1.5))
        C = rng.normal(size=(k, d))
        X = C[rng.integers(0, k, n)] + rng.normal(size=(n, d)) * r * 0.7
        cnt, sums, _ = cell_sums(X, C, r)
        rc, rs = _reference_cells(X, C, r)
        # rows within float rounding of a sphere or of a tie may differ; none here do
        np.testing.assert_array_equal(cnt, rc)
        # offsets in grid units: fl(x − c) may round a .5 the other way (1 unit a row)
        assert np.abs(sums - rs).max(initial=0) <= n


def test_a_rows_cell_depends_on_that_row_only():
    """The statistics are additive over rows, bit for bit: each row's cell and rounded
    offset do not depend on the other rows (no matrix product over the bank)."""
    rng = np.random.default_rng(5)
    C = rng.normal(size=(5, 4))
    X = C[rng.integers(0, 5, 301)] + rng.normal(size=(301, 4)) * 0.5
    cnt, sums, unit = cell_sums(X, C, 0.9)
    assert unit == cell_unit(0.9, 1)  # the same grid for one row and for the bank
    parts = [cell_sums(X[i:i + 1], C, 0.9) for i in range(X.shape[0])]
    assert np.array_equal(cnt, sum(p[0] for p in parts))
    assert np.array_equal(sums, sum(p[1] for p in parts))  # exact: integer offsets


def test_cell_sums_refuse_out_of_range_values():
    with pytest.raises(ValueError, match="float64 range"):
        cell_sums(np.array([[1e200, 0.0]]), np.zeros((1, 2)), 1.0)


# --- the snapshot: accounting and validity ------------------------------------------------


def test_snapshot_is_charged_once_within_the_budget():
    X = _bank()
    pm = PrivateMemory(X, radius=0.8, budget=(4.0, 1e-5), accounting="global")
    syn = pm.snapshot(_public(), steps=3, seed=0)
    assert isinstance(syn, Synopsis)
    assert 0 < pm.spent <= 4.0
    assert syn.epsilon == pytest.approx(pm.spent, rel=1e-6)
    # the filter admitted it with almost nothing left, so another snapshot does not fit
    with pytest.raises(BudgetExceededError, match="Nothing was released or spent"):
        pm.snapshot(_public(), steps=3, seed=1)
    spent = pm.spent
    q = X[:5] + 0.1
    assert syn.complete(q).shape == (5, 2)
    assert pm.spent == spent  # answering is post-processing


def test_snapshot_with_an_explicit_epsilon_costs_at_most_that():
    pm = PrivateMemory(_bank(), radius=0.8, budget=(8.0, 1e-5), accounting="global")
    syn = pm.snapshot(_public(), steps=3, epsilon=2.0, seed=0)
    assert 1.9 <= syn.epsilon <= 2.0
    assert pm.spent <= 2.0 + 1e-9
    assert pm.remaining >= 6.0 - 1e-9


def test_snapshot_finds_the_clusters_at_a_moderate_budget():
    syn = private_synopsis(_bank(200), radius=0.8, epsilon=4.0, delta=1e-5,
                           seeds="grid", bounds=(-5, 5), seed=3)
    found = np.linalg.norm(syn.attractors[:, None] - CENTRES[None], axis=2)
    assert found.min(axis=0).max() < 0.3  # every true centre has an attractor near it
    assert np.all(syn.counts > 100)


def test_snapshot_records_in_the_ledger(tmp_path):
    X = _bank()
    path = tmp_path / "l.db"
    with PrivateMemory(X, radius=0.8, budget=(4.0, 1e-5), ledger=path, create=True,
                       accounting="global") as pm:
        syn = pm.snapshot(_public(), steps=3, epsilon=1.0, seed=0)
        spent = pm.spent
    with PrivateMemory(X, radius=0.8, budget=(4.0, 1e-5), ledger=path,
                       accounting="global") as pm2:
        assert pm2.spent == pytest.approx(spent, rel=1e-12)
        methods = [r["method"] for r in pm2.releases]
    assert methods == ["brace", "synopsis-cells", "synopsis-cells"]
    state = brace.budget.inspect_ledger(path)
    assert state.spent_global == pytest.approx(spent, rel=1e-9)
    assert syn.epsilon <= 1.0


def test_snapshot_far_row_changes_nothing_under_local_accounting():
    """A row outside every footprint of the snapshot (seeds, cell rounds) changes no
    released bit, and local accounting charges it nothing; a row inside changes it."""
    X = _bank()
    seeds = _public()[:4]  # the cluster at the origin
    far = X.copy()
    far[-1] = [500.0, 500.0]
    near = X.copy()
    near[0] = seeds[0]
    out = []
    for bank in (X, far, near):
        pm = PrivateMemory(bank, radius=0.8, budget=(4.0, 1e-5), accounting="local")
        out.append((pm.snapshot(seeds, steps=2, seed=11, rounds=1), pm))
    (a, pm), (b, _), (c, _) = out
    for f in ("attractors", "counts", "endpoints"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert not (np.array_equal(a.attractors, c.attractors)
                and np.array_equal(a.endpoints, c.endpoints))
    assert pm.spent_at(np.array([[500.0, 500.0]]))[0] == 0.0
    assert pm.spent_at(seeds[:1])[0] > 0.0


def test_snapshot_refuses_bad_input():
    pm = PrivateMemory(_bank(), radius=0.8, budget=(4.0, 1e-5))
    with pytest.raises(ValueError, match="bounds"):
        pm.snapshot(10)
    with pytest.raises(ValueError, match="d <= 3"):
        PrivateMemory(np.zeros((5, 4)) + np.arange(5)[:, None], radius=1.0,
                      budget=(1.0, 1e-5)).snapshot("grid", bounds=(0, 1))
    with pytest.raises(ValueError, match="dimension mismatch"):
        pm.snapshot(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="method"):
        pm.snapshot(_public(), method="naive")
    with pytest.raises(ValueError, match="cell_share"):
        pm.snapshot(_public(), cell_share=1.0)
    with pytest.raises(ValueError, match="rounds"):
        pm.snapshot(_public(), rounds=0)
    with pytest.raises(TypeError, match="does not take"):
        pm.snapshot(_public(), return_clean=True)
    with pytest.raises(ValueError, match="NaN|finite"):
        pm.snapshot(np.array([[np.nan, 0.0]]))
    assert pm.spent == 0.0  # nothing was spent by any refusal


def test_public_seeds():
    g = public_seeds("grid", 2, 0.5, bounds=(0, 1))
    assert g.shape == (9, 2)
    u = public_seeds(7, 3, 1.0, bounds=([0, 0, 0], [1, 2, 3]), public_seed=4)
    assert u.shape == (7, 3) and np.all(u >= 0) and np.all(u <= [1, 2, 3])
    assert np.array_equal(u, public_seeds(7, 3, 1.0, bounds=([0, 0, 0], [1, 2, 3]),
                                          public_seed=4))
    with pytest.raises(ValueError, match="lo < hi"):
        public_seeds(3, 2, 1.0, bounds=(1, 0))
    with pytest.raises(ValueError, match=r"must be in \[1, 16384\]"):
        public_seeds(10**6, 2, 1.0, bounds=(0, 1))


def test_merge_centres_is_leader_clustering_without_chaining():
    Y = np.array([[0.0, 0], [0.1, 0], [5, 5], [0.2, 0], [5.05, 5]])
    w = np.array([1.0, 5.0, 1.0, 1.0, 2.0])
    assert merge_centres(Y, w, 0.15).tolist() == [0, 0, 1, 0, 1]
    chain = np.array([[0.1 * i, 0.0] for i in range(10)])  # a row of close points
    labels = merge_centres(chain, np.ones(10), 0.15)
    assert labels.max() + 1 > 1  # not chained into one group, as single linkage would


# --- post-processing --------------------------------------------------------------------


def test_synopsis_post_processing_and_json_round_trip():
    syn = private_synopsis(_bank(100), radius=0.8, epsilon=4.0, delta=1e-5,
                           seeds=_public(), steps=3, seed=2)
    q = _public(9)
    near = syn.complete(q)
    idx = syn.assign(q)
    assert np.array_equal(near, syn.attractors[idx])
    lsr = syn.complete(q, how="lsr")
    assert lsr.shape == q.shape
    # the noise seed regenerates the noise: withheld from the published form
    assert syn.params["seed"] == 2
    pub = syn.to_dict()
    assert pub["params"]["seed"] is None and "regenerates" in pub["params"]["seed_null_reason"]
    assert syn.to_dict(include_seed=True)["params"]["seed"] == 2
    back = Synopsis.from_json(syn.to_json())
    assert np.array_equal(back.attractors, syn.attractors)
    assert np.array_equal(back.complete(q), near)
    assert "attractors" in str(syn) and "free" in str(syn)
    with pytest.raises(ValueError, match="how"):
        syn.complete(q, how="mean")
    with pytest.raises(ValueError, match="not a saved synopsis"):
        Synopsis.from_dict({"attractors": []})


# --- an audit of the cell release ----------------------------------------------------------


def test_cell_release_audit_stays_under_its_claim():
    """The worst pair for one cell round (a row at +r replaced by the row at −r of the
    same cell): the exact likelihood-ratio test over 20,000 runs per bank certifies an
    ε lower bound below the round's claimed ε (and above 0: the audit has power)."""
    from brace.accounting import GaussianStep, RdpAccountant

    r, d = 1.0, 2
    C = np.zeros((1, d))
    X = np.array([[r, 0.0], [0.2, 0.1]])
    Xp = np.array([[-r, 0.0], [0.2, 0.1]])
    sens = cell_sensitivity(r, cell_unit(r, 2), d)
    rho = 0.5
    sigma = sens / math.sqrt(2 * rho)
    m0, m1 = _stacked(X, C, r)[0] * r, _stacked(Xp, C, r)[0] * r
    rng = np.random.default_rng(0)
    N = 20000
    s0 = rng.normal(m0, sigma, (N, d + 1))
    s1 = rng.normal(m1, sigma, (N, d + 1))
    w = (m1 - m0) / sigma**2
    t0, t1 = s0 @ w, s1 @ w
    delta = 1e-5
    claim = RdpAccountant().compose(GaussianStep(rho)).get_epsilon(delta)
    best = 0.0
    for tau in np.quantile(np.concatenate([t0, t1]), np.linspace(0.05, 0.95, 19)):
        fpr = clopper_pearson_upper(np.sum(t0 > tau), N, 0.05 / 38)
        fnr = clopper_pearson_upper(np.sum(t1 <= tau), N, 0.05 / 38)
        best = max(best, float(epsilon_lower_bound(fpr, fnr, delta)))
    assert 0.3 < best < claim


# --- affordable_epsilon --------------------------------------------------------------------


@pytest.mark.parametrize("accounting", ["global", "local"])
def test_affordable_epsilon_is_admitted_and_tight(accounting):
    X = _bank()
    q = X[:20]
    pm = PrivateMemory(X, radius=0.8, budget=(2.0, 1e-5), accounting=accounting)
    e = pm.affordable_epsilon(q, steps=2)
    assert e > 0
    probe = PrivateMemory(X, radius=0.8, budget=(2.0, 1e-5), accounting=accounting)
    with pytest.raises(BudgetExceededError):
        probe.retrieve(q, steps=2, epsilon=e * 1.001, seed=0)
    pm.retrieve(q, steps=2, epsilon=e, seed=0)  # admitted
    assert pm.affordable_epsilon(q + 0.01, steps=2) < e
    with pytest.raises(ValueError, match="method"):
        pm.affordable_epsilon(q, steps=2, method="naive")


def test_cells_only_snapshot_and_cell_radius(tmp_path):
    """steps=0 (the default): no trajectories, the cell rounds take the whole budget and
    are the only records; a larger public cell radius counts more rows per cell."""
    X = _bank(100)
    path = tmp_path / "c.db"
    with PrivateMemory(X, radius=0.5, budget=(2.0, 1e-5), ledger=path, create=True,
                       accounting="global") as pm:
        syn = pm.snapshot(_public(), rounds=2, seed=0)
        assert [r["method"] for r in pm.releases] == ["synopsis-cells"] * 2
        assert syn.endpoints.shape == (0, 2) and syn.seed_epsilon == 0.0
        assert syn.epsilon == pytest.approx(pm.spent, rel=1e-9) and pm.spent <= 2.0
        assert pm.remaining < 0.2  # it spent (almost) everything the filter admits
    small = private_synopsis(X, radius=0.5, epsilon=8.0, delta=1e-5, seeds=_public(),
                             rounds=1, seed=1, cell_radius=0.3)
    large = private_synopsis(X, radius=0.5, epsilon=8.0, delta=1e-5, seeds=_public(),
                             rounds=1, seed=1, cell_radius=1.2)
    assert small.params["cell_radius"] == 0.3 and large.params["cell_radius"] == 1.2
    assert large.counts.sum() > small.counts.sum()
    assert abs(large.counts.sum() - X.shape[0]) < 0.1 * X.shape[0]


def test_shrunk_step_never_moves_further_than_the_plain_step():
    from brace.synopsis import next_centres

    rng = np.random.default_rng(0)
    C = rng.normal(size=(5, 8)) * 10
    rel = np.concatenate([rng.normal(size=(5, 8)) * 3, np.full((5, 1), 40.0)], axis=1)
    plain, _ = next_centres(C, rel, 1.0, 1e-9, 0.0)
    shrunk, _ = next_centres(C, rel, 1.0, 1e-9, 0.0, noise_std=5.0)
    assert np.all(np.linalg.norm(shrunk - C, axis=1) <= np.linalg.norm(plain - C, axis=1))
    assert not np.allclose(shrunk, plain)


def test_keep_seeds_keeps_every_public_seed_when_nothing_passes():
    """keep_seeds=True: a cell below the count threshold keeps its public centre, so the
    synopsis is never poorer than its seeds; without it the cell is dropped."""
    X = _bank(50)
    far = np.array([[40.0, 40.0], [-40.0, 40.0]])  # public seeds with no data near them
    seeds = np.concatenate([_public()[:1], far])
    kept = private_synopsis(X, radius=0.8, epsilon=4.0, delta=1e-5, seeds=seeds, rounds=1,
                            seed=0, keep_seeds=True)
    dropped = private_synopsis(X, radius=0.8, epsilon=4.0, delta=1e-5, seeds=seeds,
                               rounds=1, seed=0)
    assert kept.n_attractors == 3 and dropped.n_attractors == 1
    for f in far:
        assert np.min(np.linalg.norm(kept.attractors - f, axis=1)) == 0.0


# --- recommend -----------------------------------------------------------------------------


def test_recommend_follows_the_per_query_budget():
    X = np.random.default_rng(0).normal(size=(300, 8))
    pm = PrivateMemory(X, radius=1.0, budget=(8.0, 1e-5), accounting="global")
    one = pm.recommend(1)
    assert one.use == "retrieve" and one.step_noise <= 0.5
    many = pm.recommend(1000)
    assert many.use == "snapshot" and many.step_noise > 0.5
    # a smaller stated gate predicts more noise
    assert pm.recommend(10, gate_size=4).step_noise > pm.recommend(10).step_noise
    assert "synopsis" in str(many)
    # the figure is the per-query ε that Q queries at one place could spend
    q = np.zeros((10, 8))
    assert pm.recommend(10).per_query_epsilon == pytest.approx(
        pm.affordable_epsilon(q, steps=1), rel=1e-3)
    blind = pm.recommend(1000, public_seeds=False)  # a synopsis without public seeds
    assert blind.use == "snapshot" and blind.seeds == "private" and "bounds" in blind.reason
    low = PrivateMemory(_bank(), radius=0.8, budget=(1.0, 1e-5)).recommend(
        1000, public_seeds=False)
    assert low.use == "snapshot" and low.seeds == "private" and low.cells >= 2
    assert pm.spent == 0.0
    with pytest.raises(ValueError, match="queries"):
        pm.recommend(0)


def test_first_centres_merge_public_seeds_into_fuller_cells():
    """Many public seeds on two modes merge into a few centres (public post-processing),
    so each cell holds enough rows to pass the count threshold: the synopsis of the
    mixture finds both modes from 200 public seeds at (1, 1e-5)."""
    from brace.datasets import sample_mixture
    from brace.synopsis import first_centres

    public = sample_mixture(200, seed=1)
    c = first_centres(public, 0.8)
    assert 2 <= c.shape[0] <= 20
    syn = private_synopsis(sample_mixture(2000, seed=0), radius=0.8, epsilon=1.0,
                           delta=1e-5, seeds=public, seed=0)
    assert syn.n_attractors == 2
    assert np.sort(syn.attractors[:, 0]).tolist() == pytest.approx([-0.9, 0.9], abs=0.1)


def test_audit_report_row_of_the_cell_round_passes_and_catches_broken_noise(monkeypatch):
    """The report's synopsis row runs the library's release (release_cell_round) on the
    worst same-cell pair: it passes, and a release whose sensitivity is a quarter of
    Lemma 9's bound is caught (ε_lb above the claim)."""
    import brace.synopsis as syn_mod
    from brace.audit.report import format_report, report_bank
    from brace.audit.synopsis import synopsis_row

    X, q = report_bank(40, 2, 0.5, 9)
    row = synopsis_row(X, q, epsilon=4.0, delta=1e-5, radius=0.5, n_runs=20_000,
                       alpha=0.05, seed=0)
    assert row["verdict"] == "pass" and 0.0 < row["epsilon_lb"] <= row["claimed_epsilon"]
    true = syn_mod.cell_sensitivity
    monkeypatch.setattr(syn_mod, "cell_sensitivity", lambda *a: 0.25 * true(*a))
    broken = synopsis_row(X, q, epsilon=4.0, delta=1e-5, radius=0.5, n_runs=20_000,
                          alpha=0.05, seed=0)
    assert broken["verdict"] == "VIOLATION"
    assert broken["epsilon_lb"] > broken["claimed_epsilon"]
    text = format_report({"config": {"delta": 1e-5, "alpha": 0.05, "radius": 0.5},
                          "rows": [row], "private_mechanisms_pass": True,
                          "naive_and_broken_caught": True, "passed": True,
                          "overall": "PASS", "wall_time_s": 1.0})
    assert "synopsis cell round" in text


def test_snapshot_reads_every_backend_the_same(tmp_path):
    """The cell rounds read the bank through the memory's verified row blocks: a
    memory-mapped bank (and a torch tensor, where torch is installed) gives the same
    synopsis bit for bit as the in-memory array."""
    X = _bank(80)
    np.save(tmp_path / "b.npy", X)
    banks = [X, np.load(tmp_path / "b.npy", mmap_mode="r")]
    try:
        import torch

        banks.append(torch.from_numpy(X.copy()))
    except ImportError:
        pass
    out = [private_synopsis(b, radius=0.8, epsilon=4.0, delta=1e-5, seeds=_public(),
                            seed=5) for b in banks]
    for s in out[1:]:
        assert np.array_equal(s.attractors, out[0].attractors)
        assert np.array_equal(s.counts, out[0].counts)
