"""Unit tests of the input-validation helpers in ``brace._validation``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace._validation import (
    as_float_array,
    check_bank,
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_queries,
    check_radius_beta,
    check_rng,
    check_steps,
)

# ------------------------------------------------------------------------- check_rng


@pytest.mark.parametrize(
    "seed", [None, 0, 7, 2**63, np.int64(5), np.uint32(3), np.random.SeedSequence(42)]
)
def test_check_rng_accepts(seed):
    g = check_rng(seed)
    assert isinstance(g, np.random.Generator)
    assert np.isfinite(g.standard_normal(3)).all()


def test_check_rng_default_argument_is_fresh_entropy():
    a, b = check_rng(), check_rng(None)
    assert isinstance(a, np.random.Generator)
    assert not np.array_equal(a.integers(0, 2**62, 4), b.integers(0, 2**62, 4))


def test_check_rng_same_int_seed_same_draws():
    np.testing.assert_array_equal(check_rng(123).normal(size=10), check_rng(123).normal(size=10))
    np.testing.assert_array_equal(
        check_rng(123).normal(size=10), check_rng(np.int64(123)).normal(size=10)
    )
    np.testing.assert_array_equal(
        check_rng(123).normal(size=10), np.random.default_rng(123).normal(size=10)
    )
    assert not np.array_equal(check_rng(123).normal(size=10), check_rng(124).normal(size=10))


def test_check_rng_seed_sequence_reproducible():
    a = check_rng(np.random.SeedSequence(9)).random(5)
    b = check_rng(np.random.SeedSequence(9)).random(5)
    np.testing.assert_array_equal(a, b)


def test_check_rng_generator_returned_as_is():
    g = np.random.default_rng(1)
    assert check_rng(g) is g
    first = check_rng(g).random()
    second = check_rng(g).random()  # the stream continues, it is not reseeded
    ref = np.random.default_rng(1)
    assert (first, second) == (ref.random(), ref.random())


@pytest.mark.parametrize(
    ("seed", "exc", "msg"),
    [
        (-1, ValueError, r"seed must be >= 0\. Found -1"),
        (np.int64(-5), ValueError, r"seed must be >= 0\. Found -5"),
        (1.0, TypeError, r"seed must be None, an int, a SeedSequence or a Generator\. Found 1\.0"),
        (0.5, TypeError, "seed must be None, an int"),
        (float("nan"), TypeError, "seed must be None, an int"),
        (True, TypeError, "seed must be None, an int.* Found True"),
        (False, TypeError, "Found False"),
        ("42", TypeError, "Found '42'"),
        ([1, 2], TypeError, r"Found \[1, 2\]"),
        (np.random.RandomState(0), TypeError, "legacy numpy RandomState is not accepted"),
    ],
)
def test_check_rng_refuses(seed, exc, msg):
    with pytest.raises(exc, match=msg):
        check_rng(seed)


# ---------------------------------------------------------------- epsilon and delta


@pytest.mark.parametrize("eps", [1e-9, 0.5, 1, 3.0, np.float32(2.0), np.int64(4), np.array(1.5)])
def test_check_epsilon_accepts(eps):
    v = check_epsilon(eps)
    assert isinstance(v, float) and v == float(eps)


@pytest.mark.parametrize(
    ("eps", "exc", "msg"),
    [
        (0, ValueError, r"epsilon must be > 0\. Found 0\.0"),
        (-1.0, ValueError, r"epsilon must be > 0\. Found -1\.0"),
        (float("inf"), ValueError, r"epsilon must be finite\. Found inf"),
        (float("-inf"), ValueError, r"epsilon must be finite\. Found -inf"),
        (float("nan"), ValueError, "epsilon must not be NaN"),
        (None, TypeError, r"epsilon must be a real number\. Found None"),
        (True, TypeError, "epsilon must be a real number. Found True"),
        ("1", TypeError, "epsilon must be a real number. Found '1'"),
        (1 + 0j, TypeError, "epsilon must be a real number"),
        (np.array([1.0]), TypeError, "epsilon must be a real number"),
    ],
)
def test_check_epsilon_refuses(eps, exc, msg):
    with pytest.raises(exc, match=msg):
        check_epsilon(eps)


def test_check_epsilon_custom_name():
    with pytest.raises(ValueError, match=r"eps_step must be > 0"):
        check_epsilon(0.0, name="eps_step")


@pytest.mark.parametrize("delta", [1e-12, 1e-5, 0.5, 0.999999, np.float64(1e-6)])
def test_check_delta_accepts(delta):
    assert check_delta(delta) == float(delta)


@pytest.mark.parametrize(
    ("delta", "exc", "msg"),
    [
        (0, ValueError, r"delta must lie in \(0, 1\)\. Found 0\.0"),
        (1, ValueError, r"delta must lie in \(0, 1\)\. Found 1\.0"),
        (-1e-6, ValueError, r"delta must lie in \(0, 1\)\. Found -1e-06"),
        (1.5, ValueError, r"delta must lie in \(0, 1\)\. Found 1\.5"),
        (float("inf"), ValueError, r"delta must lie in \(0, 1\)\. Found inf"),
        (float("nan"), ValueError, "delta must not be NaN"),
        (None, TypeError, "delta must be a real number"),
        (False, TypeError, "delta must be a real number"),
    ],
)
def test_check_delta_refuses(delta, exc, msg):
    with pytest.raises(exc, match=msg):
        check_delta(delta)


def test_check_delta_custom_name():
    with pytest.raises(ValueError, match=r"delta_0 must lie in \(0, 1\)"):
        check_delta(2.0, name="delta_0")


# ---------------------------------------------------------------- scalar checks


def test_check_positive_and_nonnegative():
    assert check_positive("x", 2) == 2.0
    assert check_positive("x", math.inf, allow_inf=True) == math.inf
    with pytest.raises(ValueError, match=r"x must be finite\. Found inf"):
        check_positive("x", math.inf)
    with pytest.raises(ValueError, match="x must be finite"):
        check_positive("x", -math.inf, allow_inf=True)
    with pytest.raises(ValueError, match=r"x must be > 0\. Found -0\.0"):
        check_positive("x", -0.0)
    assert check_nonnegative("x", 0) == 0.0
    assert check_nonnegative("x", math.inf, allow_inf=True) == math.inf
    with pytest.raises(ValueError, match=r"x must be >= 0\. Found -1e-300"):
        check_nonnegative("x", -1e-300)
    with pytest.raises(ValueError, match="x must be finite"):
        check_nonnegative("x", math.inf)
    with pytest.raises(ValueError, match="x must not be NaN"):
        check_nonnegative("x", math.nan)
    with pytest.raises(TypeError, match="x must be a real number"):
        check_nonnegative("x", np.array([0.0, 1.0]))


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), (np.int32(3), 3), (3.0, 3), (np.array(4), 4)]
)
def test_check_int_at_least_accepts(value, expected):
    out = check_int_at_least("k", value, 1)
    assert out == expected and type(out) is int


@pytest.mark.parametrize(
    ("value", "exc", "msg"),
    [
        (0, ValueError, r"k must be >= 1\. Found 0"),
        (-2.0, ValueError, r"k must be >= 1\. Found -2"),
        (1.5, TypeError, r"k must be an integer\. Found 1\.5"),
        (math.inf, TypeError, "k must be an integer"),
        (math.nan, TypeError, "k must be an integer"),
        (True, TypeError, "k must be an integer. Found True"),
        ("2", TypeError, "k must be an integer. Found '2'"),
        (None, TypeError, "k must be an integer. Found None"),
    ],
)
def test_check_int_at_least_refuses(value, exc, msg):
    with pytest.raises(exc, match=msg):
        check_int_at_least("k", value, 1)


def test_check_steps():
    assert check_steps(5) == 5
    with pytest.raises(ValueError, match=r"steps must be >= 1\. Found 0"):
        check_steps(0)
    with pytest.raises(TypeError, match=r"T must be an integer"):
        check_steps(0.5, name="T")


def test_check_radius_beta():
    assert check_radius_beta(None, 0.5) == 0.5
    assert check_radius_beta(8.0, None) == 0.5
    assert check_radius_beta(2.0, None) == 1.0
    for b, r in ((None, None), (1.0, 1.0)):
        with pytest.raises(ValueError, match="give exactly one of beta and radius"):
            check_radius_beta(b, r)
    with pytest.raises(ValueError, match="beta must be > 0"):
        check_radius_beta(-1.0, None)
    with pytest.raises(ValueError, match="radius must not be NaN"):
        check_radius_beta(None, math.nan)
    with pytest.raises(ValueError, match="is out of range"):
        check_radius_beta(None, 1e-200)
    with pytest.raises(ValueError, match="is out of range"):
        check_radius_beta(None, 1e200)
    with pytest.raises(ValueError, match=r"sqrt\(2/beta\) = inf, which is out of range"):
        check_radius_beta(1e-310, None)
    for r in (1e-125, 1e125):  # the stated range [2^-400, 2^400]
        with pytest.raises(ValueError, match=r"\[2\^-400, 2\^400\]"):
            check_radius_beta(None, r)
    assert check_radius_beta(None, 2.0**-400) == 2.0**-400
    assert check_radius_beta(None, 2.0**400) == 2.0**400


# ---------------------------------------------------------------- arrays


def test_as_float_array_casts_and_keeps_shape():
    for x in ([1, 2], np.array([1, 2], dtype=np.int8), np.array([1, 2], dtype=np.float32)):
        a = as_float_array("x", x)
        assert a.dtype == np.float64 and a.flags.c_contiguous
        np.testing.assert_array_equal(a, [1.0, 2.0])
    assert as_float_array("x", 3).shape == ()  # 0-d stays 0-d
    strided = np.arange(12.0).reshape(3, 4)[:, ::2]
    a = as_float_array("x", strided)
    assert a.flags.c_contiguous
    np.testing.assert_array_equal(a, strided)


@pytest.mark.parametrize(
    ("x", "exc", "msg"),
    [
        (np.array([True]), TypeError, "x must hold real numbers; got a boolean array"),
        (np.array([1j]), TypeError, "got dtype complex128"),
        (np.array([None]), TypeError, "got dtype object"),
        (np.array(["a"]), TypeError, "got dtype <U1"),
        (np.array([np.datetime64("2020-01-01")]), TypeError, "got dtype datetime64"),
        ([1.0, np.nan, np.inf], ValueError, r"x contains 2 non-finite value\(s\)"),
    ],
)
def test_as_float_array_refuses(x, exc, msg):
    with pytest.raises(exc, match=msg):
        as_float_array("x", x)


def test_check_bank_and_queries():
    X = check_bank([[1, 2], [3, 4]])
    assert X.shape == (2, 2) and X.dtype == np.float64
    with pytest.raises(ValueError, match=r"memories must be a 2-D array .* got shape \(\)"):
        check_bank(1.0, name="memories")
    with pytest.raises(ValueError, match="bank is empty"):
        check_bank(np.empty((0, 2)))
    with pytest.raises(ValueError, match="dimension d = 0"):
        check_bank(np.empty((2, 0)))
    Y, was_1d = check_queries([1, 2], 2)
    assert was_1d and Y.shape == (1, 2)
    Y, was_1d = check_queries([[1, 2]], 2)
    assert not was_1d and Y.shape == (1, 2)
    with pytest.raises(ValueError, match="dimension mismatch: q have d = 3 but the bank has d = 2"):
        check_queries([1, 2, 3], 2, name="q")
    with pytest.raises(ValueError, match=r"queries must have shape \(Q, d\) or \(d,\)"):
        check_queries(np.zeros((1, 1, 2)), 2)
    with pytest.raises(ValueError, match=r"got shape \(\)"):
        check_queries(1.0, 1)
    with pytest.raises(ValueError, match="queries is empty"):
        check_queries(np.zeros((0, 2)), 2)
