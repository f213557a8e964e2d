"""Every public scale of a snapshot has a stated range, checked before admission, and
nothing after admission fails for free (``docs/privacy-accounting.md`` §12, §14–§15,
``docs/privacy.md`` §8; issue 37 §1).

* The four reported failures, each reproduced first (they failed on the code before the
  fix): a projected snapshot in a huge domain, the second moments in a tiny one, the
  Voronoi clip² underflowing, a seeded snapshot's tiny ``cell_radius``.
* Sensitivity sweeps at the extremes of the stated ranges — the domain's radius, the
  clip, the cell radius; both snapshot paths (with seeds and without), with and without
  the projection: the exact statistic moves by at most its sensitivity between
  replace-one neighbours, wherever the replaced row falls (inside, on the clip's sphere,
  beyond it, outside the domain, at 1e250, subnormal).
* A failure after admission keeps its charge (in memory and in the ledger) and says so;
  ``rounds`` is capped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace import PrivateMemory
from brace import projection as pj
from brace import seeding as sd
from brace import synopsis as syn

LO, HI = 2.0**-400, 2.0**400  # the stated range of a domain's radius and a cell radius


def _box(h: float, d: int) -> sd.Domain:
    """A box ``[-h, h]^d`` built directly (no range check: the old code accepted it)."""
    lo, hi = np.full(d, -h), np.full(d, h)
    return sd.Domain("box", lo, hi, np.zeros(d), float(math.sqrt(d) * h) * (1 + 1e-9))


def _voronoi_moved(X, Xp, C, clip, unit, domain) -> float:
    """The L2 change of the stacked Voronoi statistic, in exact integers (grid units)."""
    def stat(B):
        cnt, sums = sd.voronoi_stats(B, C, clip, unit, domain)
        return np.concatenate([sums, cnt[:, None] * int(round(clip / unit))], axis=1)
    diff = stat(X).astype(object) - stat(Xp).astype(object)
    return math.sqrt(int(np.sum(diff * diff)))


def _cells_moved(X, Xp, C, radius, rho) -> tuple[float, float]:
    a, sa, unit = syn.cell_sums(X, C, radius, rho)
    b, sb, _ = syn.cell_sums(Xp, C, radius, rho)
    per = int(round(radius / unit))
    diff = np.concatenate([sa - sb, ((a - b) * per)[:, None]], axis=1).astype(object)
    return math.sqrt(int(np.sum(diff * diff))), syn.cell_sensitivity(radius, unit,
                                                                     C.shape[1]) / unit


def _place(rng, c, clip, d, where):
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    return {"inside": c + clip * float(rng.uniform(0, 1)) * u,
            "sphere": c + clip * (1 + float(rng.choice([-1, 0, 1])) * 1e-15) * u,
            "outside": c + clip * float(rng.uniform(1, 5)) * u,
            "far": c + 1e250 * u,
            "subnormal": np.full(d, 5e-324) * rng.choice([-1, 1], d)}[where]


WHERE = ["inside", "sphere", "outside", "far", "subnormal"]


# --- the four reported failures ------------------------------------------------------------


def test_reported_projected_snapshot_in_a_huge_domain_is_refused_for_both_neighbours():
    """Box ±2^400, ``project=1``: the private clip ``c_p = 0.75·s₀`` exceeded 2^400 for
    one bank (ValueError after admission, nothing spent) and not for its neighbour. The
    domain's half-diagonal 2^400.5 is now refused before admission, for both alike."""
    h = 2.0**400
    A = np.array([[h, h], [-h, -h], [0.0, 0.0]])
    B = np.array([[0.0, 0.0], [-h, -h], [0.0, 0.0]])
    got = []
    for X in (A, B):
        pm = PrivateMemory(X, radius=1.0, budget=(1e6, 1e-5), accounting="global")
        with pytest.raises(ValueError, match=r"half-diagonal .* \[2\^-400, 2\^400\]") as e:
            pm.snapshot(bounds=(-h, h), project=1, epsilon=1e5, seed=1)
        got.append(str(e.value))
        assert pm.spent == 0.0
    assert got[0] == got[1]


def test_reported_second_moments_in_a_tiny_domain_are_refused_for_both_neighbours():
    """Box ±2^-520.6: ``g²`` underflowed to 0 and ``eigh`` raised ``LinAlgError`` on one
    bank and not the other, uncharged. Refused before admission now."""
    t = 2.0**-520.6
    rng = np.random.default_rng(0)
    X = rng.uniform(-t, t, (50, 3))
    Xp = X.copy()
    Xp[0] = [t, -t, t]
    for B in (X, Xp):
        pm = PrivateMemory(B, radius=1.0, budget=(1e6, 1e-5), accounting="global")
        for project in (1, None):
            with pytest.raises(ValueError, match="half-diagonal"):
                pm.snapshot(bounds=(-t, t), project=project, epsilon=1.0, seed=2)
        assert pm.spent == 0.0


def test_reported_voronoi_clip_underflow_no_longer_breaks_the_sensitivity():
    """A tiny domain (±2^-536) and a clip below it: ``clip²`` underflowed, ``d2 > c2``
    stopped clipping, and the statistic moved up to 32.8× its sensitivity. A clip outside
    the stated range is now refused from its value alone (public); the pipeline never
    reaches one (its scales are clamped, its domains checked)."""
    h = 2.0**-536
    d, n = 2, 40
    domain = _box(h, d)
    clip = domain.radius * 2.0**-12
    rng = np.random.default_rng(5)
    X = rng.uniform(-h, h, (n, d))
    C = np.zeros((1, d))
    unit = sd.voronoi_unit(clip, n, 0.5)
    bound = sd.voronoi_sensitivity(clip, unit, d) / unit
    worst = 0.0
    for i in range(n):
        Xp = X.copy()
        Xp[i] = -np.sign(X[i]) * h  # the opposite corner
        try:
            worst = max(worst, _voronoi_moved(X, Xp, C, clip, unit, domain))
        except ValueError as exc:  # refused: the clip alone decides (same for every bank)
            assert "clip" in str(exc)
    assert worst <= bound
    pm = PrivateMemory(X, radius=1.0, budget=(10.0, 1e-5))
    with pytest.raises(ValueError, match="half-diagonal"):
        pm.snapshot(bounds=(-h, h), project=1, epsilon=1.0, seed=3)
    assert pm.spent == 0.0


def test_reported_tiny_cell_radius_no_longer_counts_far_rows():
    """``cell_radius=1e-200``: ``r_c²`` underflowed, far rows with ``fl(d²) = 0`` were
    counted, and the cell statistic moved 1e6–1e9× Lemma 9's bound. Refused before
    admission now (naming the argument, echoing the value)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-0.5, 0.5, (30, 2)) * 1e-200  # within the cell
    C = np.zeros((1, 2))
    Xp = X.copy()
    Xp[0] = [1e-195, -1e-195]  # 1.4e5 cell radii away; fl(d²) = 0: counted before
    try:
        moved, bound = _cells_moved(X, Xp, C, 1e-200, None)
        assert moved <= bound
    except ValueError as exc:
        assert "radius" in str(exc)
    pm = PrivateMemory(rng.normal(size=(30, 2)), radius=1.0, budget=(10.0, 1e-5))
    with pytest.raises(ValueError, match=r"cell_radius must be in .*got 1e-200"):
        pm.snapshot(C, cell_radius=1e-200, epsilon=1.0, seed=3)
    assert pm.spent == 0.0


# --- the stated ranges, checked before admission -------------------------------------------


@pytest.mark.parametrize("kw", [dict(bounds=(-LO / 4, LO / 4)), dict(ball=(0.0, LO / 2)),
                                dict(bounds=(-(2.0**399.6), 2.0**399.6))])
def test_domains_outside_the_radius_range_are_refused_before_admission(kw):
    pm = PrivateMemory(np.zeros((20, 2)), radius=1.0, budget=(10.0, 1e-5))
    with pytest.raises(ValueError, match=r"\[2\^-400, 2\^400\]"):
        pm.snapshot(epsilon=1.0, seed=0, **kw)
    assert pm.spent == 0.0


@pytest.mark.parametrize("rc", [LO / 2, HI * 2, 0.0, -1.0, math.inf, math.nan])
def test_cell_radii_outside_the_range_are_refused_before_admission(rc):
    pm = PrivateMemory(np.zeros((20, 2)), radius=1.0, budget=(10.0, 1e-5))
    with pytest.raises(ValueError, match="cell_radius"):
        pm.snapshot(np.zeros((1, 2)), cell_radius=rc, epsilon=1.0, seed=0)
    assert pm.spent == 0.0


@pytest.mark.parametrize("s", [1e300, 2.0**401])
def test_seeds_outside_the_bank_range_are_refused_before_admission(s):
    """Seeds are public: one beyond ``|x| ≤ 2^400`` made every cell round's squared
    distances overflow after admission (the same for every bank: public, but late)."""
    pm = PrivateMemory(np.zeros((20, 2)), radius=1.0, budget=(10.0, 1e-5))
    with pytest.raises(ValueError, match=r"seeds must lie within .*2\^400"):
        pm.snapshot(np.array([[s, 0.0]]), epsilon=1.0, seed=0)
    assert pm.spent == 0.0 and pm.releases == ()


def test_rounds_are_capped_before_admission_on_both_paths():
    """``rounds=10**6`` hung in pricing; now refused at once, as steps are."""
    pm = PrivateMemory(np.zeros((20, 2)), radius=1.0, budget=(10.0, 1e-5))
    for kw in (dict(bounds=(-2, 2)), dict(seeds=np.zeros((1, 2)))):
        for R in (10**6, sd.MAX_ROUNDS + 1):
            with pytest.raises(ValueError, match=rf"rounds must be at most "
                                                 rf"{sd.MAX_ROUNDS}.*got {R}"):
                pm.snapshot(rounds=R, epsilon=1.0, seed=0, **kw)
    assert pm.spent == 0.0


def test_released_scales_are_clamped_into_the_public_range():
    """Post-processing: ``s ∈ [R₀·2^-48, 2R₀]``; each radii release could otherwise
    shrink the scale 4×, past float64's normal range after many rounds."""
    dom = sd.parse_domain(None, (0.0, LO), 2)
    assert sd.clamp_scale(0.0, dom) == sd.SCALE_FLOOR * dom.radius
    assert sd.clamp_scale(1e300, dom) == 2.0 * dom.radius
    assert sd.clamp_scale(dom.radius / 3, dom) == dom.radius / 3
    assert sd.check_clip(sd.SCALE_FLOOR * 0.75 * LO * 2.0**-12) > 0  # the smallest clip
    with pytest.raises(ValueError, match="clip"):
        sd.check_clip(2.0**-500)


def test_the_smallest_domain_with_many_rounds_stays_in_range():
    """All rows at one point of the smallest domain, 64 rounds: every radii release
    halves the scale twice; the clamp keeps every clip at or above ``R₀·2^-48`` and the
    snapshot releases (the old code's clip reached ``R₀·2^-138``, ``clip²`` subnormal)."""
    h = LO * 0.75
    X = np.full((60, 2), h / 3)
    pm = PrivateMemory(X, radius=1.0, budget=(1e6, 1e-5), accounting="global")
    out = pm.snapshot(bounds=(-h, h), rounds=sd.MAX_ROUNDS, epsilon=1e4, seed=4)
    assert np.all(np.isfinite(out.attractors))
    R0 = sd.parse_domain((-h, h), None, 2).radius
    clips = [r["params"]["radius"] for r in pm.releases if r["params"]["kind"] == "voronoi"]
    assert len(clips) == sd.MAX_ROUNDS and min(clips) >= sd.SCALE_FLOOR * R0
    assert min(clips) < R0 * 2.0**-40  # the floor was reached: the clamp has teeth


# --- sensitivity sweeps at the extremes ------------------------------------------------------

DOMAINS = {  # the smallest and largest domains in range, and an ordinary one
    "smallest": lambda d: sd.parse_domain((-LO * 0.75, LO * 0.75), None, d),
    "ordinary": lambda d: sd.parse_domain((-2.0, 2.0), None, d),
    "largest": lambda d: sd.parse_domain(None, (0.0, HI * (1 - 1e-6)), d),
}


@pytest.mark.parametrize("dom", list(DOMAINS))
@pytest.mark.parametrize("clip_at", ["floor", "first", "top"])
def test_voronoi_sensitivity_holds_at_the_extremes(dom, clip_at):
    """Lemma 11 at the smallest and largest domain radius and at the smallest
    (``R₀·2^-48``), first (``R₀·2^-12``) and largest (``2R₀``) clip: 40 replacements per
    placement, each within the bound (exact integers), the bound reached within 1 %."""
    rng = np.random.default_rng(hash((dom, clip_at)) % 2**32)
    d, n, k = 3, 12, 3
    domain = DOMAINS[dom](d)
    R0 = domain.radius
    clip = {"floor": sd.SCALE_FLOOR * R0, "first": R0 * 2.0**-12, "top": 2 * R0}[clip_at]
    best = 0.0
    for where in WHERE:
        for _ in range(8):
            C = domain.clip(domain.centre + rng.uniform(-1, 1, (k, d)) * R0 / math.sqrt(d))
            c = C[int(rng.integers(0, k))]
            X = domain.clip(c + rng.normal(size=(n, d)) * clip)
            unit = sd.voronoi_unit(clip, n, float(rng.uniform(1e-6, 1e3)))
            bound = sd.voronoi_sensitivity(clip, unit, d) / unit
            Xp = X.copy()
            Xp[int(rng.integers(0, n))] = _place(rng, c, clip, d, where)
            moved = _voronoi_moved(X, Xp, C, clip, unit, domain)
            assert moved <= bound, (where, moved / bound)
            best = max(best, moved / bound)
    assert best > 0.4  # the sweep reaches the clip (a row moved across its cell)


@pytest.mark.parametrize("dom", list(DOMAINS))
@pytest.mark.parametrize("cp_at", ["smallest", "largest"])
def test_moments_sensitivity_holds_at_the_extremes(dom, cp_at):
    """Lemma 14 at the extremes of ``c_p ∈ [0.75·R₀·2^-12, 0.75·R₀]``: ``½‖Δ‖_F² ≤
    16^b`` in exact integers, wherever the replaced row falls."""
    rng = np.random.default_rng(hash((dom, cp_at, 1)) % 2**32)
    d, n = 3, 10
    domain = DOMAINS[dom](d)
    R0 = domain.radius
    clip = 0.75 * R0 * (2.0**-12 if cp_at == "smallest" else 1.0)
    assert pj.CLIP_RANGE[0] <= clip <= pj.CLIP_RANGE[1]
    for where in WHERE:
        for _ in range(6):
            mean = domain.clip(domain.centre[None] + rng.uniform(-1, 1, (1, d)) * R0 / 2)[0]
            bits = pj.moments_bits(n, float(rng.uniform(1e-6, 1e3)))
            X = domain.clip(mean + rng.normal(size=(n, d)) * clip)
            Xp = X.copy()
            Xp[0] = _place(rng, mean, clip, d, where)
            a = pj.moments_stat(X, domain, mean, clip, bits).astype(object)
            b = pj.moments_stat(Xp, domain, mean, clip, bits).astype(object)
            assert int(np.sum((a - b) ** 2)) <= 2 * 16**bits, where


@pytest.mark.parametrize("rc", [LO, 1.0, HI])
def test_cell_round_sensitivity_holds_at_the_cell_radius_extremes(rc):
    """Lemma 9 at ``r_c = 2^-400``, 1 and ``2^400``, bank coordinates scaled with it (within
    ``|x| ≤ 2^400``): far rows (their ``fl(d²)`` underflowing or not) are never counted."""
    rng = np.random.default_rng(int(math.log2(rc)) % 2**32)
    d, n, k = 2, 14, 3
    scale = min(rc, HI / 8)
    best = 0.0
    for where in WHERE:
        for _ in range(8):
            C = rng.uniform(-2, 2, (k, d)) * scale
            c = C[int(rng.integers(0, k))]
            X = c + rng.normal(size=(n, d)) * rc * 0.7
            Xp = X.copy()
            row = _place(rng, c, rc, d, where)
            Xp[int(rng.integers(0, n))] = np.clip(row, -HI, HI)
            for rho in (None, float(rng.uniform(1e-6, 1e3))):
                moved, bound = _cells_moved(X, Xp, C, rc, rho)
                assert moved <= bound, (where, moved / bound)
                best = max(best, moved / bound)
    assert best > 0.4


# --- both snapshot paths end to end at the extremes ------------------------------------------


@pytest.mark.parametrize("dom", ["smallest", "largest"])
@pytest.mark.parametrize("project", [None, 1])
def test_seedless_snapshot_at_the_domain_extremes(dom, project, tmp_path):
    """Without seeds, with and without the projection, in the smallest and largest
    domains in range: neighbour banks (one row moved from one corner to the opposite)
    both release finite attractors, at the same charge; the centre release (public
    centre, the same seeded noise) moves by at most its sensitivity."""
    d = 3
    domain = DOMAINS[dom](d)
    h = float(domain.hi[0]) if domain.kind == "box" else domain.radius / math.sqrt(d) / 1.01
    rng = np.random.default_rng(7)
    X = np.clip(rng.choice([-0.6, 0.5], (40, d)) * h + rng.normal(size=(40, d)) * h * 0.05,
                -h, h)
    Xp = X.copy()
    Xp[0] = -np.sign(X[0]) * h
    bounds = (-h, h)
    outs = []
    for i, B in enumerate((X, Xp)):
        pm = PrivateMemory(B, radius=1.0, budget=(1e6, 1e-5), accounting="global",
                           ledger=tmp_path / f"{i}.sqlite", create=True)
        s = pm.snapshot(bounds=bounds, project=project, epsilon=50.0, seed=11)
        assert np.all(np.isfinite(s.attractors))
        outs.append((pm, s))
    (pa, sa), (pb, sb) = outs
    assert sa.epsilon == sb.epsilon and pa.spent == pb.spent
    va, vb = (p._db.arrays(min(p._records))[0] for p in (pa, pb))  # the 1st release
    ra = pa.releases[0]
    sens = ra["params"]["sensitivity"]
    ca = np.asarray(ra["params"]["noisy_counts"]) * ra["params"]["radius"]
    cb = np.asarray(pb.releases[0]["params"]["noisy_counts"]) * ra["params"]["radius"]
    diff = np.concatenate([(va - vb)[:, 1].ravel(), ca - cb])
    assert 0 < np.linalg.norm(diff) <= sens * (1 + 1e-9)


@pytest.mark.parametrize("rc", [LO, HI / 4])
def test_seeded_snapshot_at_the_cell_radius_extremes(rc, tmp_path):
    """With seeds, at the smallest and a large cell radius (bank and seeds scaled with
    it): neighbours both release, at the same charge; round 1 (public centres, the same
    seeded noise) moves by at most its sensitivity."""
    rng = np.random.default_rng(8)
    S = np.array([[-1.0, 0.0], [1.0, 0.0]]) * rc
    X = S[rng.integers(0, 2, 40)] + rng.normal(size=(40, 2)) * 0.3 * rc
    Xp = X.copy()
    Xp[0] = -X[0] * 1.2
    outs = []
    for i, B in enumerate((X, Xp)):
        pm = PrivateMemory(B, radius=min(rc, 2.0**399), budget=(1e6, 1e-5),
                           accounting="global", ledger=tmp_path / f"{i}.sqlite", create=True)
        s = pm.snapshot(S, cell_radius=rc, rounds=2, epsilon=50.0, seed=12)
        assert np.all(np.isfinite(s.attractors))
        outs.append(pm)
    pa, pb = outs
    assert pa.spent == pb.spent
    ra, rb = pa.releases[0], pb.releases[0]
    va, vb = (p._db.arrays(min(p._records))[0] for p in (pa, pb))  # the 1st release
    diff = np.concatenate([(va - vb)[:, 1].ravel(),
                           (np.asarray(ra["params"]["noisy_counts"])
                            - np.asarray(rb["params"]["noisy_counts"])) * rc])
    assert 0 < np.linalg.norm(diff) <= ra["params"]["sensitivity"] * (1 + 1e-9)


# --- a failure after admission keeps its charge -----------------------------------------------


def _boom(*a, **k):
    raise RuntimeError("a data-dependent failure")


def _bank():
    rng = np.random.default_rng(9)
    return np.clip(rng.normal(size=(120, 3)) * 0.4, -1.5, 1.5)


SNAPSHOTS = {  # (what fails after admission, the call)
    "seedless": ("brace.seeding.release_radii",
                 lambda pm: pm.snapshot(bounds=(-2, 2), epsilon=2.0, seed=1)),
    "projected": ("brace.projection.top_directions",
                  lambda pm: pm.snapshot(bounds=(-2, 2), project=1, epsilon=2.0, seed=1)),
    "seeded": ("brace.budget.snapshot.release_cell_round",
               lambda pm: pm.snapshot(np.zeros((2, 3)), epsilon=2.0, seed=1)),
    "seeded-steps": ("brace.budget.snapshot.run_plan",
                     lambda pm: pm.snapshot(np.zeros((2, 3)), steps=2, epsilon=2.0, seed=1)),
    "retrieve": ("brace.budget.facade.run_plan",
                 lambda pm: pm.retrieve(np.zeros((2, 3)), steps=2, epsilon=1.0, seed=1)),
    "retrieve-endpoint": ("brace.budget.facade.run_plan",
                          lambda pm: pm.retrieve(np.zeros((2, 3)), steps=3, epsilon=1.0,
                                                 seed=1, method="endpoint")),
}


@pytest.mark.parametrize("ledger", [False, True])
@pytest.mark.parametrize("what", list(SNAPSHOTS))
def test_a_failure_after_admission_keeps_its_charge_and_says_so(what, ledger, tmp_path,
                                                                monkeypatch):
    """Each path, failing after admission: :class:`AdmittedCallFailed` (a fixed message
    that says the budget was charged; the cause chained), the admitted charge recorded —
    the same as the successful call's under global accounting — and, with a ledger,
    still there when the ledger is reopened. A later identical call is not a free
    repeat of the failed one."""
    from brace.budget import AdmittedCallFailed, inspect_ledger

    target, call = SNAPSHOTS[what]
    ok = PrivateMemory(_bank(), radius=0.5, budget=(20.0, 1e-5), accounting="global")
    call(ok)
    path = tmp_path / "l.sqlite"
    kw = dict(ledger=path, create=True) if ledger else {}
    pm = PrivateMemory(_bank(), radius=0.5, budget=(20.0, 1e-5), accounting="global", **kw)
    with monkeypatch.context() as m:
        m.setattr(target, _boom)
        with pytest.raises(AdmittedCallFailed, match="budget was charged") as e:
            call(pm)
    assert isinstance(e.value.__cause__, Exception)
    assert "data-dependent" not in str(e.value)
    assert ok.spent > 0 and pm.spent == pytest.approx(ok.spent, rel=1e-12)
    assert all(r["params"].get("pending") for r in pm.releases)  # charged, unreplaced
    if ledger:
        rows = len(pm.releases)
        pm.close()
        again = PrivateMemory(_bank(), radius=0.5, budget=(20.0, 1e-5),
                              accounting="global", ledger=path)
        assert again.spent == pytest.approx(ok.spent, rel=1e-12)
        assert len(inspect_ledger(path).releases) == rows == len(again.releases)
        assert "pending" in inspect_ledger(path).releases[-1]["params"]
        pm = again
    before = pm.spent
    call(pm)  # admitted and paid again: the failed call left nothing to repeat
    assert pm.spent > before


def test_local_accounting_charges_a_failed_retrieval_its_reserved_footprints(monkeypatch):
    """Local accounting: the failed call is charged at its reserved balls (at least what
    the successful call's footprints cost), and nothing far from them."""
    from brace.budget import AdmittedCallFailed

    q = np.zeros((1, 3))
    ok = PrivateMemory(_bank(), radius=0.5, budget=(20.0, 1e-5))
    ok.retrieve(q, steps=2, epsilon=1.0, seed=1)
    pm = PrivateMemory(_bank(), radius=0.5, budget=(20.0, 1e-5))
    monkeypatch.setattr("brace.budget.facade.run_plan", _boom)
    with pytest.raises(AdmittedCallFailed):
        pm.retrieve(q, steps=2, epsilon=1.0, seed=1)
    assert pm.spent >= ok.spent > 0
    assert pm.spent_at(np.full((1, 3), 50.0))[0] == 0.0


def test_the_service_passes_a_charged_failure_through(monkeypatch):
    """:class:`ServedMemory` hides what failed, but not that the call was charged."""
    pytest.importorskip("starlette")
    from brace.budget import AdmittedCallFailed
    from brace.serve.service import ServedMemory

    pm = ServedMemory(_bank(), radius=0.5, budget=(20.0, 1e-5))
    monkeypatch.setattr("brace.budget.facade.run_plan", _boom)
    monkeypatch.setattr("brace.seeding.release_radii", _boom)
    with pytest.raises(AdmittedCallFailed):
        pm.retrieve(np.zeros((1, 3)), steps=1, epsilon=1.0, seed=1)
    with pytest.raises(AdmittedCallFailed):
        pm.snapshot(bounds=(-2, 2), epsilon=1.0)
    assert pm.spent > 0


@pytest.mark.parametrize("rc", [LO, 2.0**-200, 2.0**300])
def test_far_rows_change_nothing_at_the_cell_radius_extremes(rc):
    """Local accounting, a seeded snapshot at a tiny or large cell radius (bank, seeds
    and radius scaled with it): a row far outside every footprint, moved to another far
    place, changes no released bit and is charged nothing; a row moved inside changes
    the release."""
    rng = np.random.default_rng(13)
    S = np.array([[0.0, 0.0], [3.0, 0.0]]) * rc
    X = S[rng.integers(0, 2, 60)] + rng.normal(size=(60, 2)) * 0.4 * rc
    X[-1] = [-1e6 * rc, 1e6 * rc]  # far from every footprint in both banks
    place = np.array([[1e6, -1e6]]) * rc
    far = X.copy()
    far[-1] = place[0]
    near = X.copy()
    near[0] = S[1] + 0.5 * rc
    out = []
    for B in (X, far, near):
        pm = PrivateMemory(B, radius=rc, budget=(20.0, 1e-5), accounting="local")
        out.append((pm.snapshot(S, cell_radius=rc, rounds=2, epsilon=10.0, seed=5), pm))
    (a, pm), (b, _), (c, _) = out
    assert np.array_equal(a.attractors, b.attractors) and np.array_equal(a.counts, b.counts)
    assert not np.array_equal(a.attractors, c.attractors)
    assert pm.spent_at(place)[0] == 0.0 and pm.spent_at(S[:1])[0] > 0.0


def test_public_refusals_of_a_retrieval_come_before_admission():
    """Queries beyond the certificate's floating-point range are refused from public
    values before admission (nothing charged), not after it as a charged failure."""
    import brace
    from brace.datasets import sample_mixture

    pm = brace.PrivateMemory(sample_mixture(300, seed=0), radius=0.8, budget=(8.0, 1e-5))
    with pytest.raises(ValueError, match="too large relative to the radius"):
        pm.retrieve(np.array([[1e162, 0.0]]), steps=2, epsilon=1.0, delta=1e-6)
    assert pm.spent == 0.0 and not pm._rows
