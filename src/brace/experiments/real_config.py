"""The real-data experiment's configuration (:class:`RealConfig`, :data:`QUICK`), its
methods, settings and labels, and its grid of cells: which cells exist, their keys,
the run hash that a resumed run checks, and the seeds of each cell
(:mod:`brace.experiments.real`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import (
    check_delta,
    check_int_at_least,
    check_nonnegative,
    check_positive,
)
from .real_data import DOMAINS, NAMES

_FORMAT = "brace-real/1"
HORIZONS = (1, 3)  # T tried on public data (when RealConfig.steps is None)
GATES = (4.0, 8.0, 16.0, 32.0)  # gate sizes tried on public data (target_gate None)

#: Methods in table order; the last two are not private releases.
METHODS = ("brace_global", "brace_local", "global_noise", "synopsis", "synopsis_private",
           "synopsis_private_pca", "noiseless", "public_only")
#: Public-data settings (module docstring); "split" is the original setting.
SETTINGS = ("split", "none", "sample", "shifted")
SAMPLE_SIZE = 50  # rows of the "sample" setting's public data
SHIFT_CLASSES = 5  # the "shifted" setting's public rows are of the classes below this
NEW_SETTING_STEPS = 1  # T of the per-query methods in the settings other than "split"
NONE_SCALE_SHARE = 0.2  # "none": share of ε (and half of δ) spent on the private radius
PER_QUERY = {  # method -> (release method, accounting)
    "brace_global": ("brace", "global"),
    "brace_local": ("brace", "local"),
    "global_noise": ("global", "global"),
}
LABELS = {
    "brace_global": "BRACE, global acct.",
    "brace_local": "BRACE, local acct.",
    "global_noise": "global noise",
    "synopsis": "synopsis",
    "synopsis_private": "synopsis, no public data",
    "synopsis_private_pca": "synopsis, no public data, private PCA",
    "noiseless": "noiseless (NOT private)",
    "public_only": "public seeds only",
}
_DS_CODE = {name: i + 1 for i, name in enumerate(NAMES)}
#: the noise's entropy per method (fixed: a method added later draws its own)
_METHOD_CODE = {"brace_global": 1, "brace_local": 2, "global_noise": 3, "synopsis": 4,
                "synopsis_private": 5, "noiseless": 6, "public_only": 7,
                "synopsis_private_pca": 8}
_PRIVATE_SYNOPSES = ("synopsis_private", "synopsis_private_pca")
_SETTING_CODE = {s_: i for i, s_ in enumerate(SETTINGS)}  # "split": 0 (no extra entropy)
_DEFAULT_DATASETS = ("breast_cancer", "digits", "mnist16", "mnist64")
_DEFAULT_METHODS = ("brace_global", "brace_local", "global_noise", "synopsis", "noiseless",
                    "public_only")


@dataclass(frozen=True)
class RealConfig:
    """Settings of the real-data completion experiment (module docstring).

    ``noise`` is in units of the data set's public ``feature_scale``; ``mask`` is the
    fraction of features set to 0. ``seed`` drives the queries, corruption and noise
    (one :class:`numpy.random.SeedSequence` per cell and repetition, so a resumed run
    draws what an uninterrupted one would); ``split_seed`` the bank/public split.
    """

    datasets: tuple[str, ...] = _DEFAULT_DATASETS
    workloads: tuple[int, ...] = (1, 10, 100, 1000)
    epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    methods: tuple[str, ...] = _DEFAULT_METHODS
    settings: tuple[str, ...] = ("split",)
    delta: float = 1e-5
    steps: int | None = None
    repetitions: int = 3
    min_scored: int = 100
    noise: float = 0.5
    mask: float = 0.25
    target_gate: float | None = None
    n_seeds: int = 256
    seed: int = 0
    split_seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _one_of("datasets", "data set", self.datasets, NAMES)
        _nonempty_unique("workloads", self.workloads)
        for q in self.workloads:
            check_int_at_least("workloads", q, 1)
        _nonempty_unique("epsilons", self.epsilons)
        for e in self.epsilons:
            check_positive("epsilons", e)
        _one_of("methods", "method", self.methods, METHODS)
        _one_of("settings", "setting", self.settings, SETTINGS)
        check_delta(self.delta)
        if self.steps is not None:
            check_int_at_least("steps", self.steps, 1)
        check_int_at_least("repetitions", self.repetitions, 1)
        check_int_at_least("min_scored", self.min_scored, 1)
        check_nonnegative("noise", self.noise)
        if not 0 <= check_nonnegative("mask", self.mask) < 1:
            raise ValueError(f"mask is a fraction of the features, in [0, 1); got "
                             f"{self.mask!r}.")
        if self.target_gate is not None and not (
                math.isfinite(check_positive("target_gate", self.target_gate))
                and self.target_gate >= 1):
            raise ValueError(f"target_gate must be a finite number >= 1; got "
                             f"{self.target_gate!r}.")
        check_int_at_least("n_seeds", self.n_seeds, 1)
        check_int_at_least("seed", self.seed, 0)
        check_int_at_least("split_seed", self.split_seed, 0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _nonempty_unique(name: str, values: Any) -> None:
    if not isinstance(values, tuple) or not values:
        raise ValueError(f"{name} must be a non-empty tuple; got {values!r}.")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} holds duplicates: {values!r}.")


def _one_of(name: str, what: str, values: Any, allowed: tuple) -> None:
    """``values``: a non-empty tuple without duplicates, each one of ``allowed``."""
    _nonempty_unique(name, values)
    for v in values:
        if v not in allowed:
            raise ValueError(f"{name}: unknown {what} {v!r}; expected some of "
                             f"{', '.join(allowed)}.")


#: ``--quick``: Q ∈ {10, 100}, ε_total ∈ {1, 8}, R = 1, 20 scored queries per cell.
QUICK = RealConfig(workloads=(10, 100), epsilons=(1.0, 8.0), repetitions=1, min_scored=20,
                   quick=True)


# --------------------------------------------------------------------------- helpers


def _run_hash(cfg: RealConfig) -> str:
    """Hash of everything that changes a cell's numbers (not the grid or the method list)."""
    d = cfg.to_dict()
    for k in ("datasets", "workloads", "epsilons", "methods", "settings", "quick"):
        d.pop(k)
    blob = json.dumps({"format": _FORMAT, "config": d}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _key(rec: dict) -> tuple:
    e = rec["epsilon_total"]
    return (rec["dataset"], rec.get("setting", "split"), int(rec["n_queries"]),
            None if e is None else float(e), rec["method"])


def _has_eps(method: str) -> bool:
    return method not in ("noiseless", "public_only")


def _applies(ds: str, setting: str, method: str) -> bool:
    """Whether a (data set, setting, method) cell exists: the settings other than
    "split" need a public domain; "none" has no public seeds and no public radius for the
    noiseless ceiling."""
    if setting != "split" and ds not in DOMAINS:
        return False
    if method in _PRIVATE_SYNOPSES and ds not in DOMAINS:
        return False
    return not (setting == "none" and method in ("synopsis", "noiseless"))


def _grid(cfg: RealConfig, datasets: tuple[str, ...]) -> list[tuple]:
    keys = []
    for ds in datasets:
        for st_ in cfg.settings:
            for Q in cfg.workloads:
                for m in cfg.methods:
                    if not _applies(ds, st_, m):
                        continue
                    if _has_eps(m):
                        keys += [(ds, st_, int(Q), float(e), m) for e in cfg.epsilons]
                    else:
                        keys.append((ds, st_, int(Q), None, m))
    return keys


def _ss(*entropy: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(x) for x in entropy])


def _milli(eps: float | None) -> int:
    return 0 if eps is None else int(round(eps * 1000))
