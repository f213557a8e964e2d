"""Input validation shared by every public entry point.

Every check raises :class:`ValueError` (or :class:`TypeError` for dtype problems) with a
message that names the argument and echoes the offending value or shape, so bad input
never turns into a wrong answer.

Dtype policy (documented in the README): real integer and floating inputs are cast to
``float64``; booleans, complex numbers, objects and strings are refused.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "as_float_array",
    "check_bank",
    "check_queries",
    "check_epsilon",
    "check_delta",
    "PRIVACY_FLOOR",
    "check_privacy_epsilon",
    "check_privacy_delta",
    "check_budget",
    "check_steps",
    "MAX_STEPS",
    "check_positive",
    "check_nonnegative",
    "check_int_at_least",
    "check_radius_beta",
    "check_rng",
    "check_bool",
    "rng_and_record",
    "rng_from_record",
    "check_output_size",
    "check_bounds",
]


def _is_real_scalar(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _scalar(name: str, value: Any) -> float:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if not _is_real_scalar(value):
        raise TypeError(f"{name} must be a real number. Found {value!r}.")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN. Found {value}.")
    return value


def check_positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, requiring ``value > 0`` (and finite unless allowed)."""
    v = _scalar(name, value)
    if math.isinf(v) and not (allow_inf and v > 0):
        raise ValueError(f"{name} must be finite. Found {v}.")
    if not v > 0:
        raise ValueError(f"{name} must be > 0. Found {v}.")
    return v


def check_nonnegative(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, requiring ``value >= 0`` (and finite unless allowed)."""
    v = _scalar(name, value)
    if math.isinf(v) and not (allow_inf and v > 0):
        raise ValueError(f"{name} must be finite. Found {v}.")
    if v < 0:
        raise ValueError(f"{name} must be >= 0. Found {v}.")
    return v


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """ε must be finite and > 0."""
    return check_positive(name, epsilon)


def check_delta(delta: Any, name: str = "delta") -> float:
    """δ must lie in the open interval (0, 1)."""
    v = _scalar(name, delta)
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must lie in (0, 1). Found {v}.")
    return v


#: The smallest ε and δ that a release may ask for, a budget may hold and a ledger
#: records (``docs/ledger.md``, "What a record holds"): below it a value is subnormal or
#: nearly so, and ``1/δ`` or ``log(1/δ)/ε`` overflow. The same two checks run before a
#: call is admitted and when a ledger is read, so nothing is recorded that cannot be read.
PRIVACY_FLOOR = 1e-300


#: The smallest budget ε: the smallest per-query ε a call may ask for
#: (:data:`brace.accounting.EPSILON_RANGE`); a smaller budget admits nothing.
BUDGET_EPSILON_MIN = 1e-6


def check_privacy_epsilon(epsilon: Any, name: str = "epsilon", *,
                          lo: float = PRIVACY_FLOOR) -> float:
    """ε of a release, a budget (``lo = BUDGET_EPSILON_MIN``) or a ledger record:
    finite and ``≥ lo`` (default ``PRIVACY_FLOOR``)."""
    v = check_epsilon(epsilon, name)
    if v < lo:
        raise ValueError(f"{name} must be at least {lo:g}"
                         + (" (the smallest epsilon a ledger records)"
                            if lo == PRIVACY_FLOOR else "") + f". Found {v!r}.")
    return v


def check_budget(budget: Any) -> tuple[float, float]:
    """A budget ``(ε, δ)``: ``ε`` finite and ``≥ BUDGET_EPSILON_MIN``, ``δ`` in
    ``[PRIVACY_FLOOR, 1)``. The same check admits a budget and reads it from a ledger."""
    try:
        eps, delta = budget
    except (TypeError, ValueError):
        raise TypeError(
            f"budget must be a pair (epsilon, delta), e.g. (8.0, 1e-5). Found {budget!r}."
        ) from None
    return (check_privacy_epsilon(eps, "budget epsilon", lo=BUDGET_EPSILON_MIN),
            check_privacy_delta(delta, "budget delta"))


def check_privacy_delta(delta: Any, name: str = "delta") -> float:
    """δ of a release, a budget or a ledger record: in ``[PRIVACY_FLOOR, 1)``."""
    v = check_delta(delta, name)
    if v < PRIVACY_FLOOR:
        raise ValueError(f"{name} must lie in [{PRIVACY_FLOOR:g}, 1) (the smallest delta a "
                         f"ledger records; smaller values underflow). Found {v!r}.")
    return v


def check_int_at_least(name: str, value: Any, minimum: int) -> int:
    """Return ``value`` as an int, requiring an integer ``>= minimum``."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            fv = float(value)
            if math.isfinite(fv) and fv == int(fv):
                value = int(fv)
            else:
                raise TypeError(f"{name} must be an integer. Found {value!r}.")
        else:
            raise TypeError(f"{name} must be an integer. Found {value!r}.")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}. Found {value}.")
    return value


MAX_STEPS = 10_000  # horizons above this are refused (the certificate's floating-point proof)


def check_steps(steps: Any, name: str = "steps") -> int:
    """The horizon T must be an integer with ``1 <= T <= MAX_STEPS``.

    ``MAX_STEPS = 10_000`` bounds the integer prefix sums of the certificate
    (``docs/privacy.md``, floating point) and keeps every run finite.
    """
    t = check_int_at_least(name, steps, 1)
    if t > MAX_STEPS:
        raise ValueError(
            f"{name} must be at most {MAX_STEPS} (the supported horizon). Found {t}; "
            "use a shorter horizon."
        )
    return t


def as_float_array(name: str, x: Any) -> np.ndarray:
    """Convert ``x`` to a C-contiguous float64 array, refusing non-real dtypes and
    non-finite values."""
    arr = np.asarray(x)
    if arr.dtype == bool:
        raise TypeError(f"{name} must hold real numbers; got a boolean array.")
    if arr.dtype.kind not in "iuf":
        raise TypeError(
            f"{name} must hold real numbers (integer or float); got dtype {arr.dtype}."
        )
    # np.asarray(order="C") keeps a 0-d input 0-d (np.ascontiguousarray would turn it into
    # shape (1,), so a scalar could pass as a 1-d query against a d = 1 bank).
    arr = np.asarray(arr, dtype=np.float64, order="C")
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(
            f"{name} contains {bad} non-finite value(s) (NaN or inf); every value must be "
            "finite (drop or impute those rows)."
        )
    return arr


def check_bank(bank: Any, name: str = "bank") -> np.ndarray:
    """A memory bank is a non-empty ``(n, d)`` real array with finite entries."""
    arr = as_float_array(name, bank)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d); got shape {arr.shape}.")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: it must hold at least one memory (n >= 1).")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has dimension d = 0; need d >= 1.")
    return arr


def check_queries(queries: Any, dim: int, name: str = "queries") -> tuple[np.ndarray, bool]:
    """Queries: ``(Q, d)`` or a single ``(d,)`` vector. Returns ``(array_2d, was_1d)``."""
    arr = as_float_array(name, queries)
    was_1d = arr.ndim == 1
    if was_1d:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must have shape (Q, d) or (d,); got shape {np.shape(queries)}."
        )
    if arr.shape[1] != dim:
        raise ValueError(
            f"dimension mismatch: {name} have d = {arr.shape[1]} but the bank has d = {dim}; "
            f"{name} need one coordinate per bank column."
        )
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: need at least one query.")
    return arr, was_1d


#: the radius range (docs/privacy.md §8, "Input range")
MIN_RADIUS, MAX_RADIUS = 2.0**-400, 2.0**400


def check_radius_beta(beta: Any, radius: Any) -> float:
    """Exactly one of β and r; returns the radius ``r = sqrt(2/β)``."""
    if (beta is None) == (radius is None):
        raise ValueError(
            "give exactly one of beta and radius (r = sqrt(2/beta)); "
            f"got beta={beta!r}, radius={radius!r}."
        )
    if beta is not None:
        b = check_positive("beta", beta)
        r = math.sqrt(2.0 / b)
        what = f"beta = {b} gives the radius sqrt(2/beta) = {r}, which"
    else:
        r = check_positive("radius", radius)
        what = f"radius = {r}"
    if not MIN_RADIUS <= r <= MAX_RADIUS:
        raise ValueError(
            f"{what} is out of range: the radius must lie in [2^-400, 2^400] (about "
            f"[{MIN_RADIUS:.3g}, {MAX_RADIUS:.3g}]), so that every squared distance the "
            "certificate compares with r**2 is a normal float64 (rescale the bank)."
        )
    return r


MAX_OUTPUT_BYTES = 8 * 2**30


def check_output_size(shape: tuple[int, ...], what: str) -> None:
    """Refuse a float64 result larger than ``MAX_OUTPUT_BYTES`` (8 GiB) up front, instead
    of failing (or swapping) half-way through a long computation."""
    nbytes = 8 * math.prod(int(s) for s in shape)
    if nbytes > MAX_OUTPUT_BYTES:
        raise ValueError(
            f"{what} of shape {tuple(shape)} would need {nbytes / 2**30:.1f} GiB "
            f"(limit {MAX_OUTPUT_BYTES / 2**30:.0f} GiB); use fewer steps or queries per call."
        )


def check_rng(seed: Any = None) -> np.random.Generator:
    """The one place a ``seed``/``rng`` argument becomes a :class:`numpy.random.Generator`.

    Accepts ``None`` (fresh OS entropy), an int, a :class:`numpy.random.SeedSequence`,
    or an existing Generator (returned as is, so draws continue its stream).
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        raise TypeError(
            "legacy numpy RandomState is not accepted; pass a Generator or an int seed."
        )
    if seed is None or isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"seed must be None, an int, a SeedSequence or a Generator. Found {seed!r}."
        )
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0. Found {seed}.")
    return np.random.default_rng(int(seed))


def check_bool(name: str, value: Any) -> bool:
    """Flags must be ``bool`` (or ``numpy.bool_``): ``"no"``, 0 or None are refused, not
    read as truthy/falsy."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False. Found {value!r}.")


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def rng_and_record(seed: Any = None) -> tuple[np.random.Generator, int | dict | None]:
    """:func:`check_rng`, plus a JSON-able record of the seed **the caller passed**, from
    which :func:`rng_from_record` rebuilds a generator that makes the same draws.

    * an int is recorded as itself;
    * a :class:`numpy.random.SeedSequence` as ``{"entropy", "spawn_key", "pool_size"}``;
    * a Generator by its bit generator's name and state *before* any draw;
    * ``None`` (no seed): fresh OS entropy, and the record is ``None``. The entropy
      regenerates the noise, so a result never carries a seed its caller did not pass
      (``docs/privacy.md``, "What leaves a call").
    """
    if seed is None:
        return np.random.default_rng(), None
    if isinstance(seed, np.random.SeedSequence):
        rec = {
            "entropy": _plain(seed.entropy),
            "spawn_key": [int(k) for k in seed.spawn_key],
            "pool_size": int(seed.pool_size),
        }
        return np.random.default_rng(seed), rec
    rng = check_rng(seed)
    if isinstance(seed, np.random.Generator):
        bg = seed.bit_generator
        return rng, {"bit_generator": type(bg).__name__, "state": _plain(bg.state)}
    return rng, int(seed)


def rng_from_record(record: Any) -> np.random.Generator:
    """The generator described by a record of :func:`rng_and_record`."""
    if isinstance(record, dict) and "entropy" in record:
        return np.random.default_rng(
            np.random.SeedSequence(
                record["entropy"],
                spawn_key=tuple(record.get("spawn_key", ())),
                pool_size=record.get("pool_size", 4),
            )
        )
    if isinstance(record, dict) and "state" in record:
        name = record.get("bit_generator", "")
        cls = getattr(np.random, name, None)
        if not (isinstance(cls, type) and issubclass(cls, np.random.BitGenerator)):
            raise ValueError(f"unknown bit generator in seed record: {name!r}.")
        bg = cls()
        state = dict(record["state"])
        if name == "MT19937":
            state["state"] = dict(state["state"])
            state["state"]["key"] = np.asarray(state["state"]["key"], dtype=np.uint32)
        bg.state = state
        return np.random.Generator(bg)
    return check_rng(record)


def check_bounds(bounds: Any, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A public box ``bounds=(lo, hi)`` (scalars or arrays of length ``dim``), finite with
    ``lo < hi`` in every coordinate, as two float64 arrays of length ``dim``."""
    try:
        lo, hi = bounds
        lo = np.broadcast_to(np.asarray(lo, dtype=np.float64), (dim,)).copy()
        hi = np.broadcast_to(np.asarray(hi, dtype=np.float64), (dim,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be (lo, hi), each a number or an array of length "
                         f"{dim}; got {bounds!r}.") from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError(f"bounds must be finite with lo < hi in every coordinate; got "
                         f"{bounds!r}.")
    return lo, hi
