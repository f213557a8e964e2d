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

from ._io import atomic_write_text, save_npz, strict_json
from ._runners import _iterative, endpoint_sensitivity
from ._validation import check_queries, check_steps
from .accounting import PrivacySpent
from .mechanisms import (
    DIAGNOSTIC_FIELDS,
    METHODS,
    RESULT_SCHEMA,
    NotPrivateWarning,
    PrivateRetrievalResult,
)
from .memory import LSRMemory
from .plan import plan_release

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
        from . import __version__

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
) -> Path:
    """Write ``result`` atomically as ``.npz`` or ``.json`` in the one schema.

    The seed record is withheld unless ``include_seed`` (it regenerates the noise: a
    file that holds it must not be published); diagnostics only if asked."""
    if not isinstance(result, PrivateRetrievalResult | NoiselessResult):
        raise TypeError(f"result must be a PrivateRetrievalResult or NoiselessResult; got "
                        f"{type(result).__name__}.")
    p = Path(path)
    fmt = _format(p)
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
            doc[k] = json.loads(str(v), parse_constant=_no_constants)
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
    or a :class:`NoiselessResult` for ``method="none"``. A file that is not in the
    schema is a clear ``ValueError`` naming what is missing.
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
    outputs = np.asarray(doc["outputs"], dtype=np.float64)
    queries = np.asarray(doc["queries"], dtype=np.float64)
    if outputs.ndim != 3 or queries.ndim != 2 or queries.shape[0] != outputs.shape[0] \
            or queries.shape[1] != outputs.shape[2]:
        raise ValueError(f"{p}: outputs {outputs.shape} and queries {queries.shape} do not "
                         "form (Q, T, d) and (Q, d).")
    params = dict(doc["params"])
    if method == "none":
        return NoiselessResult(outputs, queries, params)
    if method not in METHODS:
        raise ValueError(f"{p}: unknown method {method!r}.")
    privacy = PrivacySpent.from_dict(doc["privacy"])
    is_private = bool(doc["is_private"])
    if is_private and not (privacy.is_private and method != "naive"):
        raise ValueError(f"{p} claims is_private=True for a release without a guarantee "
                         f"(method {method!r}); the file is inconsistent.")
    fields = {k: diags.get(k) for k in DIAGNOSTIC_FIELDS}
    counts = doc.get("released_counts")
    if counts is not None:
        fields["released_counts"] = np.asarray(counts, dtype=np.int64)
    grid = doc.get("grid")
    if grid is not None:
        fields["grid"] = np.asarray(grid, dtype=np.float64)
    return PrivateRetrievalResult(
        method=method,
        is_private=is_private,
        outputs=outputs,
        privacy=privacy,
        params=params,
        queries=queries,
        **fields,
    )


def _kappa(params: dict) -> float:
    """The recorded κ (null in a file means κ = ∞)."""
    k = params.get("kappa", 128.0)
    return math.inf if k is None else float(k)


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
                            steps=T, kappa=_kappa(prm),
                            release="auto" if auto else "count", output_projection=proj,
                            accounting=p.accounting, queries=q.shape[0])
        if plan.release != "count" or plan.noise_multiplier != mult:
            raise ValueError("cannot reproduce the count release's plan from its record "
                             "(a different brace version?); save it with "
                             "include_diagnostics=True.")
        diag = _iterative(memory, q, plan, None, history=hist,
                          counts=np.asarray(result.released_counts, dtype=np.int64))
        return replace(result, **{k: diag[k] for k in DIAGNOSTIC_FIELDS})
    # the release's plan along its own history, with the release's noise multiplier
    plan = replace(plan_release(memory, method=result.method, epsilon=None, delta=None,
                                steps=T, kappa=_kappa(prm),
                                gamma=p.gamma, output_projection=proj, queries=q.shape[0]),
                   noise_multiplier=mult, spent=p)
    diag = _iterative(memory, q, plan, None, history=hist)
    return replace(result, **{k: diag[k] for k in DIAGNOSTIC_FIELDS})
