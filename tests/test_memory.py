"""LSR / LSE dense associative memories (spec §1): energy, gradient, retrieval map, gate
statistics, batching, numerical robustness and input validation.

Every random instance is seeded; hypothesis runs derandomized.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp, softmax

import brace.gates.dense as dense_mod
import brace.memory as memory_mod
from brace.gates import GatePass, gate_pass
from brace.memory import LOG_FLOOR, LSEMemory, LSRMemory

HYP = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


# --------------------------------------------------------------------------- brute force


def brute_d2(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return ((X - y) ** 2).sum(-1)


def brute_gate(X: np.ndarray, y: np.ndarray, r: float) -> np.ndarray:
    return brute_d2(X, y) <= r * r


def brute_step(X: np.ndarray, Y: np.ndarray, r: float) -> np.ndarray:
    out = np.empty_like(Y)
    for i, y in enumerate(Y):
        mask = brute_gate(X, y, r)
        out[i] = X[mask].mean(0) if mask.any() else y
    return out


def brute_retrieve(X: np.ndarray, Q: np.ndarray, r: float, T: int) -> np.ndarray:
    out = np.empty((Q.shape[0], T + 1, Q.shape[1]))
    out[:, 0] = Q
    for t in range(1, T + 1):
        out[:, t] = brute_step(X, out[:, t - 1], r)
    return out


def brute_kernel_sum(X: np.ndarray, z: np.ndarray, beta: float) -> float:
    return float(np.maximum(1.0 - 0.5 * beta * brute_d2(X, z), 0.0).sum())


def brute_energy(X: np.ndarray, z: np.ndarray, beta: float) -> float:
    return -np.log(max(brute_kernel_sum(X, z, beta), LOG_FLOOR)) / beta


def random_instance(seed: int, n: int, d: int, Q: int, *, empty_frac: float = 0.2):
    """Bank from a small Gaussian mixture, queries near bank points plus a few far ones;
    radius at a quantile of the pairwise distances so gate sizes vary."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(3, d))
    X = centres[rng.integers(0, 3, size=n)] + rng.normal(size=(n, d))
    Y = X[rng.integers(0, n, size=Q)] + 0.5 * rng.normal(size=(Q, d))
    far = rng.random(Q) < empty_frac
    Y[far] += 100.0  # empty gates
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    r = float(np.quantile(D[np.triu_indices(n, 1)], 0.15)) if n > 1 else 1.0
    return X, Y, r


def tie_instance(seed: int, d: int, r: float = 0.5):
    """Queries on a dyadic grid and bank points at exactly y ± r·e_j (r dyadic, so r*r
    and every coordinate difference are exact): every such point lies exactly on the
    gate boundary. Plus bank points just inside / outside and interior noise points."""
    rng = np.random.default_rng(seed)
    Y = rng.integers(-16, 16, size=(4, d)) / 8.0
    pts = []
    for y in Y:
        for j in range(d):
            e = np.zeros(d)
            e[j] = r
            pts += [y + e, y - e]
        pts.append(y + np.nextafter(r, 0.0) * np.eye(d)[0])  # just inside (≤ r)
        pts.append(y + np.nextafter(r, 1.0) * np.eye(d)[0])  # just outside
    X = np.concatenate([np.array(pts), rng.integers(-16, 16, size=(10, d)) / 8.0])
    X = X[rng.permutation(X.shape[0])]
    Y = np.concatenate([Y, [np.full(d, 50.0)]])  # one empty gate
    return X, Y


# --------------------------------------------------------------- energy and stationarity


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("d", [1, 2, 5])
def test_fixed_points_of_phi_have_zero_gradient(seed, d):
    X, _, r = random_instance(seed, n=25, d=d, Q=12, empty_frac=0.0)
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(12, d))
    u *= 0.5 * r * rng.random((12, 1)) / np.linalg.norm(u, axis=1, keepdims=True)
    Y = X[rng.integers(0, 25, size=12)] + u  # a bank point is in every starting gate
    mem = LSRMemory(X, radius=r)
    y = Y.copy()
    for _ in range(500):
        nxt = mem.step(y)
        if np.array_equal(nxt, y):
            break
        y = nxt
    else:  # pragma: no cover - would be a bug
        pytest.fail("mean shift did not reach an exact fixed point")
    np.testing.assert_array_equal(mem.step(y), y)
    assert (mem.gate(y, counts=True) > 0).all()
    g = mem.gradient(y)
    assert np.abs(g).max() <= 1e-12 * max(1.0, np.abs(X).max())
    # and the fixed point is never worse than the start (energy descent)
    assert np.all(mem.energy(y) <= mem.energy(Y) + 1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_gradient_matches_central_finite_difference(seed):
    rng = np.random.default_rng(100 + seed)
    n, d, r = 15, 3, 1.3
    X = rng.normal(scale=0.8, size=(n, d))
    mem = LSRMemory(X, radius=r)
    h = 1e-6
    checked = 0
    while checked < 20:
        z = X[rng.integers(n)] + rng.normal(scale=0.7, size=d)
        dist = np.sqrt(brute_d2(X, z))
        # open support, away from every kink ‖z − X_i‖ = r
        if not (dist < r).any() or np.abs(dist - r).min() < 1e-3:
            continue
        fd = np.empty(d)
        for j in range(d):
            e = np.zeros(d)
            e[j] = h
            fd[j] = (mem.energy(z + e) - mem.energy(z - e)) / (2 * h)
        g = mem.gradient(z)
        assert g.shape == (d,)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
        checked += 1


def test_energy_matches_formula_and_floor():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(20, 4))
    beta = 1.7
    mem = LSRMemory(X, beta=beta)
    Z = np.concatenate([X[:5] + 0.2 * rng.normal(size=(5, 4)), [np.full(4, 40.0)]])
    E = mem.energy(Z)
    assert E.shape == (6,)
    for z, e in zip(Z, E, strict=True):
        assert e == pytest.approx(brute_energy(X, z, beta), rel=1e-12, abs=1e-12)
    # outside every support ball: finite plateau, zero gradient, Φ(y) = y
    plateau = -np.log(LOG_FLOOR) / beta
    assert E[-1] == plateau and np.isfinite(E[-1])
    assert isinstance(mem.energy(Z[-1]), float)
    np.testing.assert_array_equal(mem.gradient(Z[-1]), 0.0)
    np.testing.assert_array_equal(mem.step(Z[-1]), Z[-1])


@st.composite
def lsr_instances(draw):
    n = draw(st.integers(1, 25))
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    lattice = draw(st.booleans())  # lattice banks produce exact ties at the radius
    r = draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]) | st.floats(0.05, 5.0))
    rng = np.random.default_rng(seed)
    if lattice:
        X = rng.integers(-4, 5, size=(n, d)) * 0.25
        y = rng.integers(-16, 17, size=d) * 0.125
    else:
        X = rng.normal(scale=draw(st.floats(0.1, 3.0)), size=(n, d))
        y = X[rng.integers(n)] + rng.normal(scale=r, size=d)
    return X, y, r


@HYP
@given(lsr_instances())
def test_one_phi_step_never_increases_lsr_energy(inst):
    X, y, r = inst
    mem = LSRMemory(X, radius=r)
    beta = mem.beta_
    e0 = mem.energy(y)
    y1 = mem.step(y)
    e1 = mem.energy(y1)
    s0 = brute_kernel_sum(X, y, beta)
    if s0 == 0.0:  # on the plateau the energy is already the maximum value
        assert e1 <= e0
    else:  # rounding of S (≈ n·eps absolute) moves log S by ≈ n·eps / S
        assert e1 <= e0 + 1e-12 * abs(e0) + 1e-13 * X.shape[0] / (beta * s0)


@HYP
@given(lsr_instances())
def test_step_moves_at_most_r(inst):
    X, y, r = inst
    y1 = LSRMemory(X, radius=r).step(y)
    assert np.linalg.norm(y1 - y) <= r + 1e-12 * (1.0 + np.abs(y).max())


# ------------------------------------------------------------ batched == brute force


def _check_all_against_brute(mem: LSRMemory, X, Y, r, rng):
    m, n = Y.shape[0], X.shape[0]
    ref_mask = np.array([brute_gate(X, y, r) for y in Y])
    np.testing.assert_array_equal(mem.gate(Y), ref_mask)
    np.testing.assert_array_equal(mem.gate(Y, counts=True), ref_mask.sum(1))
    ref_step = brute_step(X, Y, r)
    np.testing.assert_allclose(mem.step(Y), ref_step, rtol=1e-12, atol=1e-12)
    empty = ~ref_mask.any(1)
    np.testing.assert_array_equal(mem.step(Y)[empty], Y[empty])  # empty gate returns y

    a = rng.integers(0, m, size=2 * m)
    b = rng.integers(0, m, size=2 * m)
    near = np.array(sorted(set(rng.integers(0, m, size=max(1, m // 2)).tolist())))[::-1]
    R = 2.0 * r
    gp = mem.gate_pass(Y, pairs=(a, b), near_centres=near, near_radius=R)
    assert isinstance(gp, GatePass)
    np.testing.assert_array_equal(gp.counts, ref_mask.sum(1))
    assert gp.counts.dtype == np.int64
    ref_sums = np.array([X[mk].sum(0) for mk in ref_mask]).reshape(m, X.shape[1])
    np.testing.assert_allclose(gp.sums, ref_sums, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(gp.pair_counts, (ref_mask[a] & ref_mask[b]).sum(1))
    np.testing.assert_allclose(gp.means(Y), ref_step, rtol=1e-12, atol=1e-12)
    # near distances: rows are positions in `near`; compare per row as sorted multisets
    assert gp.near_rows.shape == gp.near_dist.shape
    for k, c in enumerate(near):
        dist = np.sqrt(brute_d2(X, Y[c]))
        ref = np.sort(dist[dist <= R])
        got = np.sort(gp.near_dist[gp.near_rows == k])
        np.testing.assert_array_equal(got, ref)
    assert gp.near_rows.size == 0 or gp.near_rows.max() < near.size
    assert n >= 1


@pytest.mark.parametrize("seed", range(8))
def test_batched_equals_brute_force_random(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    d = int(rng.integers(1, 7))
    Q = int(rng.integers(1, 20))
    X, Y, r = random_instance(seed, n, d, Q)
    mem = LSRMemory(X, radius=r)
    _check_all_against_brute(mem, X, Y, r, rng)
    T = 4
    traj = mem.retrieve(Y, T)
    np.testing.assert_allclose(traj, brute_retrieve(X, Y, r, T), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("d", [1, 2, 3, 6])
@pytest.mark.parametrize("by_beta", [False, True])
def test_batched_equals_brute_force_exact_ties(d, by_beta):
    X, Y = tie_instance(d, d)
    r = 0.5
    mem = LSRMemory(X, beta=8.0) if by_beta else LSRMemory(X, radius=r)
    assert mem.radius_ == r  # sqrt(2/8) is exactly 0.5
    # the construction really has boundary points (distance exactly r) in every gate
    d2 = np.array([brute_d2(X, y) for y in Y[:-1]])
    assert ((d2 == r * r).sum(1) >= 2 * d).all()
    mask = mem.gate(Y)
    assert mask[:-1][d2 == r * r].all()  # ties are in the gate (closed ball)
    assert not mask[-1].any()
    _check_all_against_brute(mem, X, Y, r, np.random.default_rng(d))


@pytest.mark.parametrize("seed", range(4))
def test_blocked_path_matches_brute_force(monkeypatch, seed):
    X, Y, r = random_instance(seed, n=37, d=3, Q=6)
    Xt, Yt = tie_instance(seed, 3)
    ref = {}
    for key, (XX, YY, rr) in {"rand": (X, Y, r), "ties": (Xt, Yt, 0.5)}.items():
        ref[key] = (LSRMemory(XX, radius=rr).retrieve(YY, 3), brute_retrieve(XX, YY, rr, 3))
    monkeypatch.setattr(dense_mod, "_BLOCK_ELEMS", 3 * 6)  # 3-row blocks for 6 centres
    assert 1 < dense_mod._block_size(6, 37) < 37
    for key, (XX, YY, rr) in {"rand": (X, Y, r), "ties": (Xt, Yt, 0.5)}.items():
        mem = LSRMemory(XX, radius=rr)
        _check_all_against_brute(mem, XX, YY, rr, np.random.default_rng(seed))
        traj = mem.retrieve(YY, 3)
        np.testing.assert_allclose(traj, ref[key][1], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(traj, ref[key][0], rtol=1e-12, atol=1e-12)
    # a single block of one row
    monkeypatch.setattr(dense_mod, "_BLOCK_ELEMS", 1)
    assert dense_mod._block_size(6, 37) == 1
    _check_all_against_brute(LSRMemory(X, radius=r), X, Y, r, np.random.default_rng(seed))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("r", "d"), [(1.0, 3), (1.1, 3), (0.9, 8)])
def test_far_from_origin_refinement_band(seed, r, d, monkeypatch):
    """Coordinates ~1e6 with r ~ 1: the expansion ‖c‖² + ‖x‖² − 2cᵀx loses ≈ 1e-3 of
    absolute accuracy, so gate membership near r must come from the refinement."""
    rng = np.random.default_rng(seed)
    if r == 1.0:  # dyadic: the points at factor 1.0 are exactly on the boundary
        base = 1e6 + rng.integers(0, 1000, size=d) / 8.0
        Y = base + rng.integers(-8, 8, size=(6, d)) / 8.0
    else:
        base = 1e6 + rng.uniform(0, 100, size=d)
        Y = base + rng.uniform(-1, 1, size=(6, d))
    pts = []
    for y in Y:
        for j in range(d):
            for s in (1.0, -1.0):
                # on, just inside / outside, and inside / outside by less than the error
                # of the expansion
                for f in (1.0, 1 - 1e-9, 1 + 1e-9, 1 - 3e-5, 1 + 3e-5, 1 - 2e-4, 1 + 2e-4):
                    p = y.copy()
                    p[j] += s * r * f
                    pts.append(p)
    X = np.concatenate([np.array(pts), base + rng.normal(scale=0.7, size=(30, d))])
    mem = LSRMemory(X, radius=r)
    ref_mask = np.array([brute_gate(X, y, r) for y in Y])
    # the instance has teeth: the unrefined expansion gets memberships wrong, including
    # (for non-dyadic r) entries whose expanded value is not exactly r²
    naive_d2 = (Y * Y).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2.0 * Y @ X.T
    wrong = (naive_d2 <= r * r) != ref_mask
    assert wrong.any()
    if r != 1.0:
        assert (wrong & (naive_d2 != r * r)).any()
    _check_all_against_brute(mem, X, Y, r, rng)
    # the module-level function with the caller's squared norms, and the blocked path
    sq = np.einsum("ij,ij->i", X, X)
    np.testing.assert_array_equal(gate_pass(X, sq, Y, r).counts, ref_mask.sum(1))
    monkeypatch.setattr(dense_mod, "_BLOCK_ELEMS", 6 * 5)
    np.testing.assert_array_equal(gate_pass(X, sq, Y, r).counts, ref_mask.sum(1))
    _check_all_against_brute(LSRMemory(X, radius=r), X, Y, r, rng)


# ---------------------------------------------------------------- trajectory geometry


@pytest.mark.parametrize("seed", range(4))
def test_retrieve_shapes_and_trajectory_ball(seed):
    X, Y, r = random_instance(seed, n=40, d=3, Q=9)
    mem = LSRMemory(X, radius=r)
    T = 6
    traj = mem.retrieve(Y, T)
    assert traj.shape == (9, T + 1, 3) and traj.dtype == np.float64
    np.testing.assert_array_equal(traj[:, 0], Y)
    steps = np.linalg.norm(np.diff(traj, axis=1), axis=-1)
    assert (steps <= r + 1e-12).all()
    for t in range(T + 1):
        assert (np.linalg.norm(traj[:, t] - Y, axis=1) <= t * r + 1e-12).all()
    one = mem.retrieve(Y[2], T)
    assert one.shape == (T + 1, 3)
    # a query alone and in a batch: BLAS may order the gate sums differently (rounding only)
    np.testing.assert_allclose(one, traj[2], rtol=1e-14, atol=1e-14)
    assert mem.step(Y[2]).shape == (3,)
    assert mem.gate(Y[2]).shape == (40,)
    assert np.ndim(mem.gate(Y[2], counts=True)) == 0
    assert mem.gradient(Y[:3]).shape == (3, 3)
    assert mem.n_memories == 40 and mem.dim == 3


def test_retrieve_accepts_integral_float_steps_and_numpy_int():
    X, Y, r = random_instance(0, n=10, d=2, Q=3)
    mem = LSRMemory(X, radius=r)
    np.testing.assert_array_equal(mem.retrieve(Y, 2.0), mem.retrieve(Y, np.int64(2)))


# ------------------------------------------------------------------------- β vs radius


@pytest.mark.parametrize("r", [0.3, 0.5, 1.0, 2.7])
def test_beta_and_radius_give_same_memory(r):
    X, Y, _ = random_instance(3, n=30, d=3, Q=8)
    a = LSRMemory(X, radius=r)
    b = LSRMemory(X, beta=2.0 / r**2)
    assert b.radius_ == pytest.approx(r, rel=1e-15)
    assert a.beta_ == pytest.approx(2.0 / r**2, rel=1e-15)
    np.testing.assert_allclose(a.retrieve(Y, 3), b.retrieve(Y, 3), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(a.energy(Y), b.energy(Y), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.gradient(Y), b.gradient(Y), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(a.gate(Y), b.gate(Y))


@pytest.mark.parametrize("kw", [{}, {"beta": 2.0, "radius": 1.0}])
def test_exactly_one_of_beta_and_radius(kw):
    mem = LSRMemory(np.zeros((2, 2)), **kw)
    with pytest.raises(ValueError, match="exactly one of beta and radius"):
        mem.step(np.zeros(2))
    with pytest.raises(ValueError, match="exactly one of beta and radius"):
        mem.radius_  # noqa: B018


# -------------------------------------------------------------------------------- LSE


def test_lse_step_energy_gradient_match_scipy():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(40, 5))
    Z = rng.normal(size=(7, 5))
    beta = 2.3
    mem = LSEMemory(X, beta=beta)
    ref_step = np.array([softmax(beta * X @ z) @ X for z in Z])
    ref_E = np.array([-logsumexp(beta * X @ z) / beta for z in Z])
    np.testing.assert_allclose(mem.step(Z), ref_step, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mem.energy(Z), ref_E, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(mem.gradient(Z), -mem.step(Z))
    assert isinstance(mem.energy(Z[0]), float)
    assert mem.step(Z[0]).shape == (5,)
    traj = mem.retrieve(Z, 3)
    assert traj.shape == (7, 4, 5)
    np.testing.assert_array_equal(traj[:, 1], mem.step(Z))
    # gradient is the derivative of the energy
    h = 1e-6
    z = Z[0]
    fd = [(mem.energy(z + h * e) - mem.energy(z - h * e)) / (2 * h) for e in np.eye(5)]
    np.testing.assert_allclose(mem.gradient(z), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("scale", [1e3, 1e5])
def test_lse_no_overflow_at_large_beta_norm(scale, monkeypatch):
    rng = np.random.default_rng(int(scale))
    X = rng.normal(size=(50, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Z = X[:6] + 0.01 * rng.normal(size=(6, 4))
    beta = scale  # β·‖x‖·‖z‖ ≈ scale
    mem = LSEMemory(X, beta=beta)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow is benign
        s, E, g = mem.step(Z), mem.energy(Z), mem.gradient(Z)
    assert np.isfinite(s).all() and np.isfinite(E).all() and np.isfinite(g).all()
    ref_step = np.array([softmax(beta * X @ z) @ X for z in Z])
    ref_E = np.array([-logsumexp(beta * X @ z) / beta for z in Z])
    np.testing.assert_allclose(s, ref_step, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(E, ref_E, rtol=1e-12, atol=1e-12)
    # streaming log-sum-exp across several blocks gives the same answer
    monkeypatch.setattr(dense_mod, "_BLOCK_ELEMS", 6 * 7)
    assert dense_mod._block_size(6, 50) == 7
    np.testing.assert_allclose(mem.step(Z), ref_step, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mem.energy(Z), ref_E, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------- dtypes and caching


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float32, np.float16])
def test_integer_and_low_precision_inputs_computed_in_float64(dtype):
    rng = np.random.default_rng(5)
    Xi = rng.integers(0, 6, size=(30, 3)).astype(dtype)
    Yi = rng.integers(0, 6, size=(5, 3)).astype(dtype)
    X64, Y64 = Xi.astype(np.float64), Yi.astype(np.float64)
    for cls, kw in ((LSRMemory, {"radius": 2.0}), (LSEMemory, {"beta": 0.7})):
        a, b = cls(Xi, **kw), cls(X64, **kw)
        for name in ("step", "energy", "gradient"):
            got, ref = getattr(a, name)(Yi), getattr(b, name)(Y64)
            assert got.dtype == np.float64
            np.testing.assert_array_equal(got, ref)
        got = a.retrieve(Yi, 3)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, b.retrieve(Y64, 3))
    # float32 values that are not integers
    Xf = rng.normal(size=(30, 3)).astype(np.float32)
    Yf = rng.normal(size=(5, 3)).astype(np.float32)
    got = LSRMemory(Xf, radius=1.0).retrieve(Yf, 3)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(
        got, LSRMemory(Xf.astype(np.float64), radius=1.0).retrieve(Yf.astype(np.float64), 3)
    )
    # python lists work too
    np.testing.assert_array_equal(
        LSRMemory(Xi.tolist(), radius=2.0).step(Yi.tolist()),
        LSRMemory(X64, radius=2.0).step(Y64),
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("index", ["brute", "kdtree"])
def test_in_place_edit_of_bank_is_detected_not_used(dtype, index):
    """No private copy (docs/scale.md): an in-place edit after validation is refused by
    every entry point, one changed bit is enough, and assigning a new bank is seen."""
    X, Y, r = random_instance(1, n=30, d=3, Q=5)
    X = X.astype(dtype)
    mem = LSRMemory(X, radius=r, index=index)
    before = mem.retrieve(Y, 3)
    assert np.shares_memory(mem._bank()[0], X)  # no copy
    assert not mem._bank()[0].flags.writeable  # the memory's view is read-only
    bits = X.view(np.uint32 if dtype == np.float32 else np.uint64)
    bits[7, 1] ^= 1  # flip the last mantissa bit of one entry
    for call in (lambda: mem.retrieve(Y, 3), lambda: mem.step(Y), lambda: mem.gate(Y),
                 lambda: mem.gate(Y, counts=True), lambda: mem.energy(Y[0]),
                 lambda: mem.gate_pass(Y), lambda: mem._bank()):
        with pytest.raises(memory_mod.BankMutatedError, match=r"modified .*mem.bank = new"):
            call()
    bits[7, 1] ^= 1  # restored: the same bytes are accepted again
    np.testing.assert_array_equal(mem.retrieve(Y, 3), before)
    X += 100.0
    X[0, 0] = np.nan
    with pytest.raises(memory_mod.BankMutatedError):
        mem.step(Y)
    # assigning a new bank is seen (and validated)
    with pytest.raises(ValueError, match="bank"):
        LSRMemory(X, radius=r).step(Y)
    mem.bank = np.nan_to_num(X)
    np.testing.assert_allclose(
        mem.step(Y + 100.0), brute_step(mem.bank.astype(np.float64), Y + 100.0, r),
        rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-9,
    )


# ------------------------------------------------------------------------ bad input

BANK = np.arange(12.0).reshape(4, 3)


def _lsr(bank=BANK, **kw):
    kw = kw or {"radius": 1.0}
    return LSRMemory(bank, **kw)


BAD_BANKS = [
    (np.array([[0.0, np.nan, 1.0], [1.0, 2.0, 3.0]]), ValueError, "bank contains 1 non-finite"),
    (np.array([[np.inf, 0.0, 0.0]]), ValueError, "bank contains 1 non-finite"),
    (np.array([[-np.inf, np.nan, 0.0]]), ValueError, "bank contains 2 non-finite"),
    (np.float64(1.0), ValueError, r"bank must be a 2-D array .* got shape \(\)"),
    (np.zeros(3), ValueError, r"bank must be a 2-D array .* got shape \(3,\)"),
    (np.zeros((2, 3, 1)), ValueError, r"bank must be a 2-D array .* got shape \(2, 3, 1\)"),
    (np.zeros((0, 3)), ValueError, "bank is empty"),
    (np.zeros((0, 0)), ValueError, "bank is empty"),
    (np.zeros((3, 0)), ValueError, "dimension d = 0"),
    (np.ones((2, 3), dtype=bool), TypeError, "bank must hold real numbers; got a boolean"),
    (np.ones((2, 3), dtype=complex), TypeError, "got dtype complex128"),
    (np.ones((2, 3), dtype=object), TypeError, "got dtype object"),
    (np.array([["a", "b", "c"]]), TypeError, "got dtype <U1"),
    ([["1", "2", "3"]], TypeError, "must hold real numbers"),
]


@pytest.mark.parametrize(("bank", "exc", "msg"), BAD_BANKS)
@pytest.mark.parametrize("method", ["step", "retrieve", "gate", "counts", "energy", "lse"])
def test_bad_bank_refused(bank, exc, msg, method):
    q = np.zeros(3)
    with pytest.raises(exc, match=msg):
        if method == "step":
            _lsr(bank).step(q)
        elif method == "retrieve":
            _lsr(bank).retrieve(q, 2)
        elif method == "gate":
            _lsr(bank).gate(q)
        elif method == "counts":
            _lsr(bank).gate(q, counts=True)
        elif method == "energy":
            _lsr(bank).energy(q)
        else:
            LSEMemory(bank, beta=1.0).step(q)


BAD_QUERIES = [
    (np.array([0.0, np.nan, 0.0]), ValueError, "{name} contains 1 non-finite"),
    (np.array([[0.0, 0.0, np.inf]]), ValueError, "{name} contains 1 non-finite"),
    (np.float64(0.0), ValueError, r"{name} must have shape \(Q, d\) or \(d,\); got shape \(\)"),
    (np.zeros((1, 2, 3)), ValueError, r"{name} must have shape \(Q, d\) or \(d,\)"),
    (np.zeros(2), ValueError, "dimension mismatch: {name} have d = 2 but the bank has d = 3"),
    (np.zeros((5, 4)), ValueError, "dimension mismatch: {name} have d = 4"),
    (np.zeros((0, 3)), ValueError, "{name} is empty"),
    (np.zeros(3, dtype=bool), TypeError, "{name} must hold real numbers; got a boolean"),
    (np.zeros(3, dtype=complex), TypeError, "{name} must hold real numbers .* complex128"),
    (np.array([1, "a", None], dtype=object), TypeError, "{name} .* got dtype object"),
    (np.array(["1", "2", "3"]), TypeError, "{name} .* got dtype <U1"),
]


@pytest.mark.parametrize(("y", "exc", "msg"), BAD_QUERIES)
@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("step", "y"),
        ("gate", "y"),
        ("counts", "y"),
        ("retrieve", "queries"),
        ("energy", "z"),
        ("gradient", "z"),
        ("lse_step", "y"),
        ("lse_energy", "z"),
    ],
)
def test_bad_queries_refused(y, exc, msg, method, name):
    mem = _lsr()
    lse = LSEMemory(BANK, beta=1.0)
    call = {
        "step": lambda: mem.step(y),
        "gate": lambda: mem.gate(y),
        "counts": lambda: mem.gate(y, counts=True),
        "retrieve": lambda: mem.retrieve(y, 2),
        "energy": lambda: mem.energy(y),
        "gradient": lambda: mem.gradient(y),
        "lse_step": lambda: lse.step(y),
        "lse_energy": lambda: lse.energy(y),
    }[method]
    with pytest.raises(exc, match=msg.format(name=name)):
        call()


@pytest.mark.parametrize(
    ("kw", "exc", "msg"),
    [
        ({"beta": 0.0}, ValueError, r"beta must be > 0\. Found 0\.0"),
        ({"beta": -1.0}, ValueError, r"beta must be > 0\. Found -1\.0"),
        ({"beta": float("nan")}, ValueError, "beta must not be NaN"),
        ({"beta": float("inf")}, ValueError, "beta must be finite"),
        ({"beta": 1e-320}, ValueError, "sqrt\\(2/beta\\) = inf, which is out of range"),
        ({"beta": "1"}, TypeError, "beta must be a real number"),
        ({"beta": True}, TypeError, "beta must be a real number"),
        ({"beta": 1 + 0j}, TypeError, "beta must be a real number"),
        ({"radius": 0.0}, ValueError, r"radius must be > 0\. Found 0\.0"),
        ({"radius": -0.5}, ValueError, r"radius must be > 0\. Found -0\.5"),
        ({"radius": float("nan")}, ValueError, "radius must not be NaN"),
        ({"radius": float("inf")}, ValueError, "radius must be finite"),
        ({"radius": 1e-170}, ValueError, "radius = 1e-170 is out of range"),
        ({"radius": 1e170}, ValueError, "radius = 1e\\+170 is out of range"),
        ({"radius": None, "beta": None}, ValueError, "exactly one of beta and radius"),
        ({"radius": 1.0, "beta": 2.0}, ValueError, "exactly one of beta and radius"),
    ],
)
@pytest.mark.parametrize("method", ["step", "retrieve", "energy", "gradient", "gate"])
def test_bad_beta_radius_refused(kw, exc, msg, method):
    mem = LSRMemory(BANK, **kw)
    q = np.zeros(3)
    with pytest.raises(exc, match=msg):
        if method == "retrieve":
            mem.retrieve(q, 2)
        else:
            getattr(mem, method)(q)


@pytest.mark.parametrize(
    ("beta", "exc", "msg"),
    [
        (0.0, ValueError, "beta must be > 0"),
        (-2.0, ValueError, "beta must be > 0"),
        (float("nan"), ValueError, "beta must not be NaN"),
        (None, TypeError, "beta must be a real number"),
    ],
)
def test_lse_bad_beta_refused(beta, exc, msg):
    with pytest.raises(exc, match=msg):
        LSEMemory(BANK, beta=beta).step(np.zeros(3))


@pytest.mark.parametrize(
    ("steps", "exc", "msg"),
    [
        (0, ValueError, r"steps must be >= 1\. Found 0"),
        (-3, ValueError, r"steps must be >= 1\. Found -3"),
        (2.5, TypeError, r"steps must be an integer\. Found 2\.5"),
        (float("nan"), TypeError, "steps must be an integer"),
        (float("inf"), TypeError, "steps must be an integer"),
        (True, TypeError, "steps must be an integer. Found True"),
        ("3", TypeError, "steps must be an integer. Found '3'"),
        (None, TypeError, "steps must be an integer. Found None"),
    ],
)
@pytest.mark.parametrize("cls", ["lsr", "lse"])
def test_bad_steps_refused(steps, exc, msg, cls):
    mem = _lsr() if cls == "lsr" else LSEMemory(BANK, beta=1.0)
    with pytest.raises(exc, match=msg):
        mem.retrieve(np.zeros(3), steps)


def test_scalar_query_refused_even_for_d1_bank():
    mem = LSRMemory(np.zeros((3, 1)), radius=1.0)
    np.testing.assert_array_equal(mem.step(np.array([0.5])), [0.0])
    with pytest.raises(ValueError, match=r"y must have shape \(Q, d\) or \(d,\); got shape \(\)"):
        mem.step(0.5)
    with pytest.raises(ValueError, match=r"queries must have shape .* got shape \(\)"):
        mem.retrieve(np.float64(0.5), 1)


@pytest.mark.parametrize("offset", [0.0, 1e3, 1e6])
def test_near_distances_within_tolerance(offset):
    """With ``near_tolerance`` the near distances may come from the expansion, but each is
    within the tolerance of the direct distance, and the set is the same."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 5)) + offset
    C = X[:6] + rng.normal(0, 0.3, (6, 5))
    r, tol = 0.9, 1e-9
    mem = LSRMemory(X, radius=r)
    exact = mem.gate_pass(C, near_centres=np.arange(6), near_radius=2 * r)
    fast = mem.gate_pass(C, near_centres=np.arange(6), near_radius=2 * r, near_tolerance=tol)
    for i in range(6):
        a = np.sort(exact.near_dist[exact.near_rows == i])
        b = np.sort(fast.near_dist[fast.near_rows == i])
        d = np.sqrt(((X - C[i]) ** 2).sum(1))
        assert len(a) == len(b) == np.count_nonzero(d <= 2 * r)
        np.testing.assert_allclose(b, np.sort(d[d <= 2 * r]), rtol=0, atol=tol)
