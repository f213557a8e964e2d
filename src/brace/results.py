"""Results you can load back: one schema for every method, NPZ or JSON (``docs/results.md``).

Every saved result — private, naive or noiseless — has the keys

==============  ==============================================================
``schema``      ``"brace-result/1"``
``version``     the brace version that wrote it
``method``      ``brace | global | endpoint | naive | none`` (``none``: noiseless)
``is_private``  True only for a differentially private release
``outputs``     (Q, T, d) released states (endpoint: (Q, 1, d); none: ``z_1..z_T``)
``queries``     (Q, d) the public queries
``privacy``     :class:`brace.accounting.PrivacySpent` as a dict; null for ``none``
``params``      radius, steps, kappa, gamma, output_projection, seed, accounting
==============  ==============================================================

Diagnostics (data-dependent, **not** covered by ε) are written only when asked, under
names that say so (``diagnostics_not_private`` in JSON, ``diagnostic_not_private_<name>``
arrays in NPZ). JSON is strict: no NaN or ∞ (null plus a ``<key>_null_reason``).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import steps as _steps
from ._io import atomic_write_text, save_npz, strict_json
from ._validation import (
    check_bool,
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_queries,
    check_steps,
)
from .accounting import ACCOUNTING_RULES, PrivacySpent
from .mechanisms import (
    DIAGNOSTIC_FIELDS,
    METHODS,
    PRIVATE_METHODS,
    RESULT_SCHEMA,
    NotPrivateWarning,
    PrivateRetrievalResult,
)
from .memory import LSRMemory
from .plan import plan_release, recorded_kappa
from .steps import endpoint_sensitivity

__all__ = [
    "RESULT_KEYS",
    "NoiselessResult",
    "noiseless_retrieve",
    "save_result",
    "load_result",
    "with_diagnostics",
]

RESULT_KEYS = ("schema", "version", "method", "is_private", "outputs", "queries", "privacy",
               "params")
NOISELESS_REASON = "noiseless trajectory (method 'none'): NOT differentially private"
_DIAG_PREFIX = "diagnostic_not_private_"


@dataclass(frozen=True)
class NoiselessResult:
    """The noiseless trajectory ``z_1..z_T`` in the result schema: **NOT private**.

    ``method`` is ``"none"``, ``is_private`` False, ``privacy`` None.
    """

    outputs: np.ndarray
    queries: np.ndarray
    params: dict = field(default_factory=dict)
    method: str = "none"
    is_private: bool = False
    privacy: None = None

    @property
    def final(self) -> np.ndarray:
        return self.outputs[:, -1]

    @property
    def not_private_reason(self) -> str:
        return NOISELESS_REASON

    def to_dict(self, **_: Any) -> dict[str, Any]:
        from ._version import __version__

        return {
            "schema": RESULT_SCHEMA,
            "version": __version__,
            "method": self.method,
            "is_private": False,
            "outputs": self.outputs.tolist(),
            "queries": self.queries.tolist(),
            "privacy": None,
            "privacy_null_reason": NOISELESS_REASON,
            "params": dict(self.params),
            "warning": f"NOT differentially private: {NOISELESS_REASON}",
        }

    def summary(self, **_: Any) -> str:
        Q, T, d = self.outputs.shape
        return "\n".join([
            "NoiselessResult(method='none')  [NOT DIFFERENTIALLY PRIVATE]",
            f"  queries={Q}, steps={T}, d={d}",
            "  privacy: NONE (the noiseless trajectory reveals the bank).",
        ])

    def __str__(self) -> str:
        return self.summary()


def noiseless_retrieve(memory: LSRMemory, queries: Any, *, steps: int) -> NoiselessResult:
    """The noiseless trajectory as a :class:`NoiselessResult` (warns NotPrivateWarning)."""
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    X, _ = memory._bank()
    q, _ = check_queries(queries, X.shape[1], name="queries")
    T = check_steps(steps)
    warnings.warn("method 'none' writes the noiseless trajectory: NOT differentially private.",
                  NotPrivateWarning, stacklevel=2)
    traj = memory.retrieve(q, T)
    return NoiselessResult(traj[:, 1:], q, {"radius": memory.radius_, "steps": T})


# --------------------------------------------------------------------------------------
# Save
# --------------------------------------------------------------------------------------


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".json"):
        raise ValueError(
            f"result path must end in .npz or .json; got {str(path)!r}. Choose one of them."
        )
    return suffix[1:]


def save_result(
    result: PrivateRetrievalResult | NoiselessResult,
    path: str | os.PathLike,
    *,
    include_diagnostics: bool = False,
    include_seed: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write ``result`` atomically as ``.npz`` or ``.json`` in the one schema.

    The seed record is withheld unless ``include_seed`` (it regenerates the noise: a
    file that holds it must not be published); diagnostics only if asked. An existing
    file is replaced only with ``overwrite=True`` (the rule of ``brace retrieve
    --overwrite``); otherwise a ``FileExistsError`` names it."""
    if not isinstance(result, PrivateRetrievalResult | NoiselessResult):
        raise TypeError(f"result must be a PrivateRetrievalResult or NoiselessResult; got "
                        f"{type(result).__name__}.")
    p = Path(path)
    fmt = _format(p)
    if not check_bool("overwrite", overwrite) and p.exists():
        raise FileExistsError(f"result path {str(p)!r} already exists; pass overwrite=True "
                              "to replace it, or choose another path.")
    d = result.to_dict(include_seed=include_seed) if isinstance(
        result, PrivateRetrievalResult) else result.to_dict()
    if fmt == "json":
        if include_diagnostics and isinstance(result, PrivateRetrievalResult):
            d["diagnostics_not_private"] = {
                k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in result.diagnostics().items()
            }
        return atomic_write_text(p, json.dumps(strict_json(d), indent=1, allow_nan=False) + "\n")
    arrays: dict[str, Any] = {
        "schema": np.asarray(d["schema"]),
        "version": np.asarray(d["version"]),
        "method": np.asarray(d["method"]),
        "is_private": np.asarray(bool(d["is_private"])),
        "outputs": np.asarray(result.outputs),
        "queries": np.asarray(result.queries),
        "privacy": np.asarray(json.dumps(strict_json(d["privacy"]), allow_nan=False)),
        "params": np.asarray(json.dumps(strict_json(d["params"]), allow_nan=False)),
    }
    if "warning" in d:
        arrays["warning"] = np.asarray(d["warning"])
    if getattr(result, "released_counts", None) is not None:  # part of a count release
        arrays["released_counts"] = np.asarray(result.released_counts)
    if getattr(result, "grid", None) is not None:  # secure noise: the public grid per step
        arrays["grid"] = np.asarray(result.grid)
    if include_diagnostics and isinstance(result, PrivateRetrievalResult):
        for k, v in result.diagnostics().items():
            if v is not None:
                arrays[_DIAG_PREFIX + k] = v
    return save_npz(p, **arrays)


# --------------------------------------------------------------------------------------
# Load
# --------------------------------------------------------------------------------------


def _no_constants(name: str) -> Any:
    raise ValueError(f"result JSON holds the non-standard number {name}.")


def _read(p: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    fmt = _format(p)
    if not p.is_file():
        raise FileNotFoundError(f"result file not found: {p}")
    if fmt == "json":
        try:
            doc = json.loads(p.read_text(encoding="utf-8"), parse_constant=_no_constants)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read result {p} as JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"result {p} must hold a JSON object.")
        diags = doc.get("diagnostics_not_private") or {}
        return doc, {k: np.asarray(v) for k, v in diags.items() if v is not None}
    try:
        with np.load(p, allow_pickle=False) as z:
            raw = {k: z[k] for k in z.files}
    except Exception as exc:  # numpy raises several types for corrupt files
        raise ValueError(f"cannot read result {p} as .npz: {exc}") from None
    doc: dict[str, Any] = {}
    for k, v in raw.items():
        if k.startswith(_DIAG_PREFIX):
            continue
        if k in ("privacy", "params"):
            try:
                doc[k] = json.loads(str(v), parse_constant=_no_constants)
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                raise _field_error(p, k, f"is not valid JSON ({exc})") from None
        elif v.ndim == 0:
            doc[k] = v.item()
        else:
            doc[k] = v
    if "trajectory" in raw and "outputs" not in raw:
        raise ValueError(
            f"{p} is a noiseless trajectory in the pre-schema format (key 'trajectory'); "
            "write it again with this version (brace retrieve --method none)."
        )
    diags = {k[len(_DIAG_PREFIX):]: v for k, v in raw.items() if k.startswith(_DIAG_PREFIX)}
    return doc, diags


def load_result(path: str | os.PathLike) -> PrivateRetrievalResult | NoiselessResult:
    """Load a result written by :func:`save_result` (or ``brace retrieve --out``).

    Returns a :class:`PrivateRetrievalResult` (diagnostics None unless they were saved)
    or a :class:`NoiselessResult` for ``method="none"``.

    The file is checked, and refused with a ``ValueError`` that names it and the field,
    when it is not in the schema or not consistent (``docs/results.md``, "Loading"):
    non-finite outputs or queries, ``params`` that is not a mapping, ``privacy`` that is
    not a JSON object or holds an out-of-range value (ε ≤ 0, δ ∉ (0, 1), …), shapes that
    disagree with the record, a count release without its ``released_counts``, and a
    privacy record that its own noise does not imply: the calibration is recomputed from
    the saved (ε, δ, T, d, γ, accounting, method; for the count release its count
    budget) with :mod:`brace.accounting`, and ``rho_per_step``, the RDP-accounted ε and
    ``epsilon_total`` must agree (to 10⁻⁶ relative). An edited ε is refused.
    """
    p = Path(path)
    doc, diags = _read(p)
    missing = [k for k in RESULT_KEYS if k not in doc]
    if missing:
        raise ValueError(f"{p} is not a brace result: it lacks the key(s) {missing}.")
    if doc["schema"] != RESULT_SCHEMA:
        raise ValueError(
            f"{p} has result schema {doc['schema']!r}; this version reads {RESULT_SCHEMA!r}."
        )
    method = doc["method"]
    if not isinstance(method, str):
        raise _field_error(p, "method", f"must be a string; got {method!r}.")
    is_private = doc["is_private"]
    if not isinstance(is_private, bool):
        raise _field_error(p, "is_private", f"must be true or false; got {is_private!r}.")
    outputs = _finite_array(p, "outputs", doc["outputs"])
    queries = _finite_array(p, "queries", doc["queries"])
    if outputs.ndim != 3 or queries.ndim != 2 or queries.shape[0] != outputs.shape[0] \
            or queries.shape[1] != outputs.shape[2]:
        raise ValueError(f"{p}: outputs {outputs.shape} and queries {queries.shape} do not "
                         "form (Q, T, d) and (Q, d).")
    params = _params(p, doc["params"])
    if method == "none":
        if doc["privacy"] is not None or is_private:
            raise ValueError(f"{p}: method 'none' is the noiseless trajectory: its privacy "
                             "must be null and is_private false; the file is inconsistent.")
        return NoiselessResult(outputs, queries, params)
    if method not in METHODS:
        raise _field_error(p, "method", f"unknown method {method!r}; expected one of "
                           f"{METHODS} or 'none'.")
    privacy = _privacy(p, doc["privacy"], method, outputs, params)
    if is_private != (privacy.is_private and method in PRIVATE_METHODS):
        raise ValueError(f"{p} claims is_private={is_private} for method {method!r} whose "
                         f"privacy record is_private={privacy.is_private}; the file is "
                         "inconsistent.")
    fields = {k: diags.get(k) for k in DIAGNOSTIC_FIELDS}
    fields["released_counts"] = _counts(p, doc.get("released_counts"), privacy, outputs)
    fields["grid"] = _grid(p, doc.get("grid"), params, outputs)
    _check_projection(p, method, params, outputs, queries)
    return PrivateRetrievalResult(
        method=method,
        is_private=is_private,
        outputs=outputs,
        privacy=privacy,
        params=params,
        queries=queries,
        **fields,
    )


def _field_error(p: Path, name: str, message: str) -> ValueError:
    return ValueError(f"{p}: field {name!r}: {message}")


def _finite_array(p: Path, name: str, value: Any) -> np.ndarray:
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise _field_error(p, name, f"must be an array of numbers ({exc}).") from None
    if not np.all(np.isfinite(a)):
        raise _field_error(p, name, "holds NaN or infinite values (null in JSON); a saved "
                           "release is finite.")
    return a


def _params(p: Path, value: Any) -> dict[str, Any]:
    """The ``params`` mapping, checked (``kappa`` None means κ = ∞, as in memory)."""
    if not isinstance(value, dict):
        raise _field_error(p, "params", "must be a mapping (a JSON object of the release's "
                           f"parameters); got {type(value).__name__}.")
    params = dict(value)
    for key, check in (("steps", check_steps),
                       ("radius", lambda v: check_positive("radius", v))):
        if key not in params:
            raise _field_error(p, f"params.{key}", "missing.")
        try:
            check(params[key])
        except (TypeError, ValueError) as exc:
            raise _field_error(p, f"params.{key}", str(exc)) from None
    if params.get("kappa") is not None:
        try:
            check_nonnegative("kappa", params["kappa"], allow_inf=True)
        except (TypeError, ValueError) as exc:
            raise _field_error(p, "params.kappa", str(exc)) from None
    return params


_PRIVACY_CHECKS: tuple[tuple[str, Any], ...] = (
    ("epsilon", check_epsilon),
    ("delta", check_delta),
    ("steps", check_steps),
    ("dim", lambda v: check_int_at_least("dim", v, 1)),
    ("queries", lambda v: check_int_at_least("queries", v, 1)),
    ("gamma", lambda v: check_nonnegative("gamma", v)),
    ("rho_per_step", lambda v: check_positive("rho_per_step", v)),
    ("eps_count", lambda v: check_nonnegative("eps_count", v)),
    ("delta_count", lambda v: check_nonnegative("delta_count", v)),
    ("count_margin", lambda v: check_int_at_least("count_margin", v, 0)),
)
_RTOL = 1e-6  # recomputed calibration vs the record (the bisection's tolerance is 1e-9)


def _privacy(p: Path, record: Any, method: str, outputs: np.ndarray,
             params: dict[str, Any]) -> PrivacySpent:
    """The saved privacy record, validated and checked against the calibration that its
    own parameters imply (recomputed with :mod:`brace.accounting`)."""
    if not isinstance(record, dict):
        raise _field_error(p, "privacy", "must be a JSON object (the PrivacySpent record); "
                           f"got {type(record).__name__}.")
    try:
        priv = PrivacySpent.from_dict(record)
    except (TypeError, ValueError) as exc:
        raise _field_error(p, "privacy", str(exc)) from None
    checked: dict[str, Any] = {}
    for name, check in _PRIVACY_CHECKS:
        try:
            checked[name] = check(getattr(priv, name))
        except (TypeError, ValueError) as exc:
            raise _field_error(p, f"privacy.{name}", str(exc)) from None
    priv = replace(priv, **checked)
    for name, allowed in (("accounting", ACCOUNTING_RULES), ("release", ("smooth", "count")),
                          ("mechanism", (method,))):
        if getattr(priv, name) not in allowed:
            raise _field_error(p, f"privacy.{name}", f"is {getattr(priv, name)!r}; expected "
                               f"one of {allowed} (method {method!r}).")
    if not isinstance(priv.not_private_reason, str):
        raise _field_error(p, "privacy.not_private_reason", "must be a string.")
    Q, R, d = outputs.shape
    T = int(params["steps"])
    for name, have, want in (("privacy.dim", priv.dim, d), ("privacy.queries", priv.queries, Q),
                             ("privacy.steps", priv.steps, 1 if method == "endpoint" else T),
                             ("outputs", R, priv.steps)):
        if have != want:
            raise _field_error(p, name, f"is {have}, but the release has {want} (outputs "
                               f"{outputs.shape}, params.steps = {T}); the file is "
                               "inconsistent.")
    for name, want in (("release", priv.release if method == "brace" else None),
                       ("accounting", priv.accounting)):
        if want is not None and name in params and params[name] != want:
            raise _field_error(p, f"params.{name}", f"is {params[name]!r}, but privacy.{name} "
                               f"is {want!r}; the file is inconsistent.")
    if "gamma" in params and not _same(params["gamma"], priv.gamma):
        raise _field_error(p, "params.gamma", f"is {params['gamma']!r}, but privacy.gamma is "
                           f"{priv.gamma!r}; the file is inconsistent.")
    _check_calibration(p, priv, method)
    return priv


def _same(a: Any, b: float) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=_RTOL, abs_tol=1e-300)
    except (TypeError, ValueError):
        return False


def _check_calibration(p: Path, priv: PrivacySpent, method: str) -> None:
    """Recompute the calibration from the record's own (ε, δ, T, d, γ, accounting, method)
    and refuse a record whose noise does not spend what it claims."""
    from ._version import __version__
    from .accounting import RdpAccountant, calibrate_count
    from .plan import _calibrate

    if priv.release == "count":
        if method != "brace" or priv.accounting != "rdp":
            raise _field_error(p, "privacy.release", "a count release is a BRACE release "
                               f"with accounting 'rdp'; got method {method!r}, accounting "
                               f"{priv.accounting!r}.")
        if not priv.eps_count > 0:
            raise _field_error(p, "privacy.eps_count", "must be > 0 for a count release.")
        if not 0 < priv.delta_count < priv.delta:
            raise _field_error(p, "privacy.delta_count", "must lie in (0, delta) for a count "
                               "release.")
    try:
        if priv.release == "count":
            # the count budget, from the record: δ_c = f·δ/T and
            # (ε_c + log(1/(1 − δ_c)))²/2 = share·ρ_s with ρ_G = (1 − share)·ρ_s
            f = priv.delta_count * priv.steps / priv.delta
            x = (priv.eps_count - math.log1p(-priv.delta_count)) ** 2 \
                / (2.0 * priv.rho_per_step)
            want = calibrate_count(priv.epsilon, priv.delta, priv.steps, dim=priv.dim,
                                   count_share=x / (1.0 + x), proposal_delta=f)
        else:
            want = _calibrate(priv.epsilon, priv.delta, priv.steps, priv.dim, priv.gamma,
                              priv.accounting, method)
        reason = ""
    except (TypeError, ValueError) as exc:  # no calibration reaches the claim
        want, reason = None, str(exc)
    names = ["rho_per_step", "epsilon_rdp"]
    if priv.release == "count":
        names += ["eps_count", "delta_count", "count_margin"]
    bad = names if want is None else [
        n for n in names if not _same(getattr(priv, n), getattr(want, n))]
    if bad:
        implied = ""
        if priv.is_private:
            spent = RdpAccountant().compose(priv.step_event, priv.steps).get_epsilon(priv.delta)
            implied = (f" The recorded noise (rho_per_step = {priv.rho_per_step:.8g}) spends "
                       f"epsilon = {spent:.6g} at delta = {priv.delta:g}.")
        detail = (f"no calibration reaches that claim ({reason})" if want is None else
                  f"its {', '.join(f'privacy.{n}' for n in bad)} do(es) not match the "
                  f"calibration of that claim "
                  f"({', '.join(f'{n} = {getattr(want, n):.8g}' for n in bad)})")
        raise _field_error(
            p, "privacy.epsilon",
            f"the record claims ({priv.epsilon:g}, {priv.delta:g})-DP, but {detail}."
            f"{implied} The file was edited or damaged (or written by another version: "
            f"this is brace {__version__}).")
    total = want.for_queries(priv.queries).epsilon_total if priv.is_private else math.inf
    if not (priv.epsilon_total == total or _same(priv.epsilon_total, total)):
        raise _field_error(p, "privacy.epsilon_total",
                           f"is {priv.epsilon_total:.8g}, but {priv.queries} queries composed "
                           f"spend {total:.8g}; the file is inconsistent.")


def _grid(p: Path, value: Any, params: dict[str, Any], outputs: np.ndarray
          ) -> np.ndarray | None:
    """Secure noise's public grid unit per query and step: present exactly when
    ``params.noise`` is ``"secure"``, (Q, T) powers of two no larger than the radius's
    bound, and every released coordinate a multiple of its grid (``docs/results.md``)."""
    from .secure import GRID_R_BITS

    secure = params.get("noise") == "secure"
    if value is None:
        if secure:
            raise _field_error(p, "grid", "missing: a release with secure noise "
                               "(params.noise = 'secure') releases its grid unit per step.")
        return None
    if not secure:
        raise _field_error(p, "grid", f"present, but params.noise is "
                           f"{params.get('noise')!r}: only secure noise has a grid; the "
                           "file is inconsistent.")
    g = _finite_array(p, "grid", value)
    Q, R, d = outputs.shape
    if g.shape != (Q, R):
        raise _field_error(p, "grid", f"has shape {g.shape}; the release needs {(Q, R)} "
                           "(one grid unit per query and released step).")
    r = float(params["radius"])
    bound = math.ldexp(1.0, math.frexp(r / math.sqrt(d))[1] - 1 - GRID_R_BITS)
    if not (np.all(g > 0) and np.all(np.frexp(g)[0] == 0.5) and np.all(g <= bound)):
        raise _field_error(p, "grid", f"must hold powers of two no larger than {bound:.6g} "
                           f"(2^(floor(log2(r/sqrt(d))) - {GRID_R_BITS}) for r = {r:g}, "
                           f"d = {d}); the file was edited or damaged.")
    units = outputs / g[:, :, None]
    if not np.all(units == np.rint(units)):
        raise _field_error(p, "grid", "does not match the outputs: a secure release's every "
                           "coordinate is a multiple of its grid unit; the file was edited or "
                           "damaged.")
    return g


def _check_projection(p: Path, method: str, params: dict[str, Any], outputs: np.ndarray,
                      queries: np.ndarray) -> None:
    """With the output projection, released step ``t`` lies in ``B̄(q, (t+1)r)`` (the
    endpoint in ``B̄(q, (T+1)r)``; ``docs/spec.md`` §2): an edited output or query that
    leaves that ball is refused."""
    if method not in PRIVATE_METHODS or params.get("output_projection", True) is not True:
        return
    Q, R, _ = outputs.shape
    r, T = float(params["radius"]), int(params["steps"])
    t = np.full(R, T + 1.0) if method == "endpoint" else np.arange(2.0, R + 2.0)
    dist = np.linalg.norm(outputs - queries[:, None, :], axis=2)
    over = dist > t * r * (1.0 + 1e-9)
    if np.any(over):
        i, j = np.argwhere(over)[0]
        raise _field_error(p, "outputs", f"step {j + 1} of query {i} lies {dist[i, j]:.6g} "
                           f"from its query, outside the projection ball of radius "
                           f"{t[j] * r:.6g} that every release with output_projection lies "
                           "in; the outputs or queries were edited.")


def _counts(p: Path, value: Any, priv: PrivacySpent, outputs: np.ndarray) -> np.ndarray | None:
    """The count release's noisy gate counts ``m̃_t``: (Q, T) integers, present exactly when
    the record is a count release."""
    if priv.release != "count":
        if value is not None:
            raise _field_error(p, "released_counts", f"present, but privacy.release is "
                               f"{priv.release!r}; the file is inconsistent.")
        return None
    if value is None:
        raise _field_error(p, "released_counts", "missing: a count release (privacy.release "
                           "= 'count') releases its noisy gate counts with the states.")
    try:
        c = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise _field_error(p, "released_counts", f"must be an array of integers ({exc}).") \
            from None
    want = outputs.shape[:2]
    if c.shape != want:
        raise _field_error(p, "released_counts", f"has shape {c.shape}; the release needs "
                           f"{want} (one noisy count per query and step).")
    if not (np.all(np.isfinite(c)) and np.all(c == np.round(c))):
        raise _field_error(p, "released_counts", "must hold integers (finite, no nulls).")
    return c.astype(np.int64)


def with_diagnostics(memory: LSRMemory, result: PrivateRetrievalResult) -> PrivateRetrievalResult:
    """``result`` with its diagnostics recomputed on ``memory`` along the released states
    (for a loaded release saved without them, e.g. one returned by PrivateMemory).

    The diagnostics are a deterministic function of the bank, the queries and the
    released history, so this reproduces what :func:`brace.private_retrieve` returned
    (up to floating-point rounding). They are **not** covered by ε: use them for
    evaluation (``brace uq``), never publish them with the release.
    """
    if not isinstance(result, PrivateRetrievalResult):
        raise TypeError(f"result must be a PrivateRetrievalResult; got {type(result).__name__}.")
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    X, _ = memory._bank()
    q, _ = check_queries(result.queries, X.shape[1], name="the release's queries")
    p, prm = result.privacy, result.params
    T = check_steps(prm["steps"])
    r = memory.radius_
    if r != float(prm["radius"]):
        raise ValueError(f"the release was computed with radius {prm['radius']}; this memory "
                         f"has radius {r}. Use the bank and radius of the release.")
    mult = p.noise_multiplier
    proj = bool(prm.get("output_projection", True))
    if result.method == "endpoint":
        Q = q.shape[0]
        zeros = np.zeros((Q, 1), dtype=np.int64)
        std = endpoint_sensitivity(memory.n_memories, r, T, q) * mult
        return replace(result, noise_std=np.asarray(std, dtype=np.float64).reshape(Q, 1),
                       activated=np.zeros((Q, 1), dtype=bool), gate_clean=zeros,
                       gate_released=zeros.copy(), left=zeros.copy(), entered=zeros.copy(),
                       correction_norm=np.zeros((Q, 1)), smooth_sensitivity=None)
    hist = np.concatenate([q[:, None], result.outputs], axis=1)
    if getattr(p, "release", "smooth") == "count":
        # the same plan (a public function of the release's parameters), along the released
        # states and noisy counts
        if result.released_counts is None:
            raise ValueError("this count release lacks its released_counts; load it from a "
                             "file written by brace.save_result.")
        auto = str(prm.get("release_rule", "")).startswith("auto")
        plan = plan_release(memory, method=result.method, epsilon=p.epsilon, delta=p.delta,
                            steps=T, kappa=recorded_kappa(prm),
                            release="auto" if auto else "count", output_projection=proj,
                            accounting=p.accounting, queries=q.shape[0],
                            noise=_noise_of(prm))
        if plan.release != "count" or plan.noise_multiplier != mult:
            raise ValueError("cannot reproduce the count release's plan from its record "
                             "(a different brace version?); save it with "
                             "include_diagnostics=True.")
        diag = _steps.run(memory, q, plan, None, history=hist,
                          counts=np.asarray(result.released_counts, dtype=np.int64))
        return replace(result, **{k: diag[k] for k in DIAGNOSTIC_FIELDS})
    # the release's plan along its own history, with the release's noise multiplier
    plan = replace(plan_release(memory, method=result.method, epsilon=None, delta=None,
                                steps=T, kappa=recorded_kappa(prm),
                                gamma=p.gamma, output_projection=proj, queries=q.shape[0],
                                noise=_noise_of(prm)),
                   noise_multiplier=mult, spent=p)
    diag = _steps.run(memory, q, plan, None, history=hist)
    return replace(result, **{k: diag[k] for k in DIAGNOSTIC_FIELDS})


def _noise_of(params: Any) -> str:
    """The noise mode a release's ``params`` record says it used (plain before 0.2)."""
    mode = params.get("noise", "plain")
    return mode if mode in ("plain", "secure") else "plain"
