"""The vectorised ``secure.sigma2_params`` against the per-row ``Fraction`` loop it replaced
(kept here as the slow reference): every output equal, on random and edge inputs."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brace import secure as S
from brace.discrete import discrete_gaussian_scale


def _reference(sensitivity, g, rho, d, *, data_dependent):
    """The former implementation: one exact ``Fraction`` per row."""
    sens = np.atleast_1d(np.asarray(sensitivity, dtype=np.float64))
    gg = np.broadcast_to(np.asarray(g, dtype=np.float64), sens.shape)
    factor = (1 + S.SMOOTH_INFLATION if data_dependent else Fraction(1)) / (2 * Fraction(rho))
    root_d = Fraction(math.isqrt(d << 60) + 1, 1 << 30)
    rows = []
    for x, y in zip(sens.ravel().tolist(), gg.ravel().tolist(), strict=True):
        s = Fraction(x) / Fraction(y) + root_d
        rows.append(discrete_gaussian_scale(s * s * factor))
    cols = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return tuple(cols[:, k].reshape(sens.shape) for k in range(3))


def _same(sens, g, rho, d, dd):
    got = S.sigma2_params(sens, g, rho, d, data_dependent=dd)
    ref = _reference(sens, g, rho, d, data_dependent=dd)
    for a, b in zip(got, ref, strict=True):
        assert a.dtype == np.int64 and a.shape == b.shape
        assert np.array_equal(a, b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), Q=st.integers(1, 40),
       d=st.sampled_from([1, 2, 3, 7, 64, 384, 4097]),
       rho=st.sampled_from([1e-6, 0.0123, 0.5, 3.1, 1e4]),
       log_ratio=st.integers(-40, 60), spread=st.integers(0, 30),
       pow2=st.booleans(), dd=st.booleans())
def test_random_inputs_equal_the_fraction_loop(seed, Q, d, rho, log_ratio, spread, pow2, dd):
    """Δ/g from 2^-40 to 2^90 (σ up to the sampler's limit), grids that are powers of two
    (as in a release) or any float, scalar or per-row grids."""
    rng = np.random.default_rng(seed)
    sens = np.ldexp(rng.uniform(0.5, 1.0, Q), rng.integers(-spread, spread + 1, Q))
    g = np.ldexp(1.0, -log_ratio + rng.integers(-3, 4, Q))
    if not pow2:
        g = g * rng.uniform(0.5, 1.0, Q)
    try:
        ref = _reference(sens, g, rho, d, data_dependent=dd)
    except ValueError as exc:  # beyond the sampler's range: the same refusal
        with pytest.raises(ValueError, match="too large for the exact sampler"):
            S.sigma2_params(sens, g, rho, d, data_dependent=dd)
        assert "too large" in str(exc)
        return
    got = S.sigma2_params(sens, g, rho, d, data_dependent=dd)
    for a, b in zip(got, ref, strict=True):
        assert np.array_equal(a, b)
    _same(sens, float(g.max()), rho, d, dd)  # one grid for every row (σ² no larger)


@pytest.mark.parametrize("dd", [False, True])
def test_edge_inputs_equal_the_fraction_loop(dd):
    tiny = np.nextafter(0.0, 1.0)
    sens = np.array([0.0, tiny, 2.0**-1060, 1e-300, 1.0, 3.0, 1.0 / 3.0, 2.0**40, 1e15,
                     np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0), 0.1, 7.0 * 2.0**-20])
    for g in (2.0**-20, 2.0**-50, 1.0, 0.1, 2.0**-1074, 3.0):
        for d in (1, 2, 10, 384):
            try:
                ref = _reference(sens, g, 0.05, d, data_dependent=dd)
            except ValueError:
                with pytest.raises(ValueError, match="too large"):
                    S.sigma2_params(sens, g, 0.05, d, data_dependent=dd)
                continue
            got = S.sigma2_params(sens, g, 0.05, d, data_dependent=dd)
            for a, b in zip(got, ref, strict=True):
                assert np.array_equal(a, b), (g, d)
    # σ beyond 2^33 (M ≥ 2^63 takes the object path) and just inside / beyond 2^104
    _same(np.array([1.0, 2.0**-5]), 2.0**-40, 1e-3, 5, dd)
    lim = math.sqrt(2.0 * 0.5) * 2.0**52
    _same(np.array([lim * (1 - 2.0**-20)]), 1.0, 0.5, 1, dd)
    with pytest.raises(ValueError, match="too large for the exact sampler"):
        S.sigma2_params(np.array([1.0, lim * 1.01]), 1.0, 0.5, 1, data_dependent=dd)
    # shapes: empty, 0-d, 2-d
    for shape in ((0,), (), (3, 4)):
        s = np.full(shape, 0.25)
        got = S.sigma2_params(s, 2.0**-10, 0.3, 3, data_dependent=dd)
        assert all(a.shape == np.atleast_1d(s).shape for a in got)
        if s.size:
            _same(s, 2.0**-10, 0.3, 3, dd)


def test_integer_square_root_at_its_boundaries():
    """``_isqrt_exact`` equals ``math.isqrt`` at perfect squares, either side of them and
    at the range's ends (where the float square root is off by one)."""
    ks = [0, 1, 2, 3, 2**26 - 1, 2**26, 2**40 + 12345, 2**52 - 1, 2**52]
    cs = [0, 1, 2, 3, 2**104]
    for k in ks:
        cs += [k * k, k * k + 2 * k, max(k * k - 1, 0)]
    rng = np.random.default_rng(7)
    cs += [int(x) for x in rng.integers(0, 2**62, 200)]
    cs += [int(x) << int(s) for x, s in zip(rng.integers(1, 2**62, 200),
                                            rng.integers(0, 42, 200), strict=True)]
    cs = [c for c in cs if c <= 2**104]
    got = S._isqrt_exact(np.array(cs, dtype=object))
    assert got.tolist() == [math.isqrt(c) for c in cs]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="sensitivity must be finite"):
        S.sigma2_params(np.array([1.0, np.nan]), 1.0, 0.1, 2, data_dependent=False)
    with pytest.raises(ValueError, match="grid unit"):
        S.sigma2_params(np.array([1.0]), 0.0, 0.1, 2, data_dependent=False)
    with pytest.raises(ValueError, match="rho must be"):
        S.sigma2_params(np.array([1.0]), 1.0, -0.1, 2, data_dependent=False)
