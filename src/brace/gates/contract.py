"""The gate-pass contract: what a pass returns and the bank state every backend reads.

A *gate pass* visits a validated bank once for ``m`` centres and returns
:class:`GatePass` (gate sizes, float64 gate sums and, on request, pair counts and
near-boundary distances; ``docs/spec.md`` §1, ``docs/scale.md``). The backends
(:mod:`brace.gates.dense`, :mod:`brace.gates.kdtree`, :mod:`brace.gates.dask`) give the
same counts and memberships; they receive the bank as a :class:`_BankState` built by the
memory (:mod:`brace.memory`) and report a changed bank with :func:`_mutated`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["GatePass", "BankMutatedError", "BANK_DTYPES", "MAX_COORD", "count_out_of_range",
           "range_error"]

BANK_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: The input range of a bank, by dtype: every coordinate finite with ``|x| ≤ MAX_COORD``.
#: It is checked once, when the memory is built (the owner's act), never in answer to a
#: query: inside it no pass over the bank can overflow (squared distances stay below
#: ``2^910`` in float64; a float32 bank is exact in float64, and its rows whose norms
#: would overflow a float32 tile are decided in float64, ``dense._BIG32``), so whether a
#: call returns never depends on a row (``docs/privacy.md`` §8, "Input range").
MAX_COORD = {np.dtype(np.float64): 2.0**400, np.dtype(np.float32): math.inf}


def count_out_of_range(block: np.ndarray) -> int:
    """How many entries of ``block`` are not finite or exceed ``MAX_COORD`` in magnitude."""
    lim = MAX_COORD.get(block.dtype, MAX_COORD[np.dtype(np.float64)])
    ok = np.isfinite(block) if math.isinf(lim) else np.abs(block) <= lim  # NaN: not ok
    return int(block.size - np.count_nonzero(ok))


def range_error(bad: int, dtype: Any) -> ValueError:
    """The construction-time refusal of a bank with ``bad`` out-of-range entries."""
    dt = np.dtype(dtype)
    lim = MAX_COORD.get(dt, MAX_COORD[np.dtype(np.float64)])
    bound = (f", or beyond {lim:.4g} = 2^{int(np.log2(lim))} in magnitude for a {dt} bank"
             if math.isfinite(lim) else "")
    return ValueError(
        f"bank contains {bad} non-finite or out-of-range value(s) (NaN, inf{bound}): every "
        "value must be finite and within that range, so that no pass over the bank can "
        "overflow. Drop or impute non-finite rows, and centre or rescale the bank "
        "(docs/privacy.md §8).")


@dataclass(frozen=True)
class GatePass:
    """Statistics of one pass over the bank for ``m`` centres.

    Attributes
    ----------
    counts : (m,) int64 — ``|I(D, c)|`` per centre (membership by :func:`.dense.direct_sqdist`).
    sums : (m, d) float64 — ``Σ_{i ∈ I(D, c)} X_i``, accumulated in float64 (CSR
        or dense mask products over fixed row blocks; with ``group_size`` the centres of
        each group are processed on their own, so a group's sums are bit-identical to a
        pass over that group alone).
    pair_counts : (p,) int64 or None — ``|I(D, c_a) ∩ I(D, c_b)|`` for requested pairs.
    near_rows, near_dist : int64 / float64 arrays or None — for the requested centres,
        every (centre row, distance) with distance ≤ the requested near radius; each
        distance is within ``near_tolerance`` of the exact one (computed directly where
        the expansion's per-row rounding bound does not guarantee that).
    """

    counts: np.ndarray
    sums: np.ndarray
    pair_counts: np.ndarray | None = None
    near_rows: np.ndarray | None = None
    near_dist: np.ndarray | None = None

    def means(self, centres: np.ndarray) -> np.ndarray:
        """``Φ_D(c)`` for each centre: the gate mean, or the centre when the gate is empty."""
        out = centres.copy()
        nz = self.counts > 0
        out[nz] = self.sums[nz] / self.counts[nz, None]
        return out


class BankMutatedError(RuntimeError):
    """The bank changed after the memory validated it (docs/scale.md, "No copies")."""


def _mutated(what: str) -> BankMutatedError:
    return BankMutatedError(
        f"the bank was modified after this memory validated it ({what}); the memory does "
        "not copy the bank, so it must not change while in use. Assign the new array to "
        "`bank` (mem.bank = new_bank) to use new contents."
    )


def _check_shape(shape: tuple[int, ...], name: str = "bank") -> None:
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d); got shape {shape}.")
    if shape[0] == 0:
        raise ValueError(f"{name} is empty: it must hold at least one memory (n >= 1).")
    if shape[1] == 0:
        raise ValueError(f"{name} has dimension d = 0; need d >= 1.")


@dataclass
class _BankState:
    """A validated bank: the caller's array (read-only view, never copied when float32 or
    float64), its cached float64 squared norms (in-memory banks only) and fingerprint."""

    source: Any
    X: Any
    sq: np.ndarray | None
    kind: str  # "memory" | "mmap" | "dask"
    digest: str
    release: Any = None  # mmap: callback dropping a processed block's pages
    extra: dict | None = None  # backend caches (KD-tree, Dask chunk digests)


_CONTROLLER: Any = None


def _blas_threads(threads: int | None) -> Any:
    """A context limiting BLAS to ``threads`` threads (threadpoolctl); ``None``: as is."""
    global _CONTROLLER
    if threads is None:
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=threads, user_api="blas")
