"""Dask banks: the gate pass as a map-reduce over row chunks (docs/scale.md, "Dask").

``LSRMemory`` accepts a ``dask.array.Array`` of shape ``(n, d)``, dtype float32 or
float64, chunked by rows (column chunks are merged lazily). Each row chunk runs the
in-memory :func:`brace.gates.dense.gate_pass` on its worker and returns per-chunk counts,
float64 sums, pair counts, near-boundary distances and the chunk's SHA-256; partial
results are combined pairwise on the workers (a binary tree in chunk order), so the
client receives one ``O(m·d)`` result plus the near distances. Counts, memberships and
near distances equal the in-memory pass exactly (the per-row decision does not depend on
the blocking); sums differ only by float64 summation order, which
``brace.gates.dense.mean_rounding_bound`` covers.

The scheduler is whatever ``dask.compute`` uses: the default ``distributed.Client`` when
one is active, else the local threaded scheduler.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .._fingerprint import BankHasher
from .contract import (
    BANK_DTYPES,
    GatePass,
    _BankState,
    _blas_threads,
    _check_shape,
    _mutated,
    count_out_of_range,
    range_error,
)
from .dense import gate_pass


def _dask():
    try:
        import dask
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "a Dask bank needs the 'dask' extra: pip install 'brace-dam[dask]'."
        ) from exc
    return dask, da


def _chunk_check(Xc: np.ndarray) -> tuple[str, int]:
    h = BankHasher(Xc.shape, Xc.dtype)
    h.update(Xc)
    return h.hexdigest(), count_out_of_range(Xc)


def _combined_digest(shape: tuple[int, int], dtype: Any, digests: list[str]) -> str:
    h = hashlib.sha256(f"brace-dask-bank/1\0{list(shape)}\0{np.dtype(dtype)}\0".encode())
    for dg in digests:
        h.update(dg.encode())
    return h.hexdigest()


def _prepare(bank: Any) -> Any:
    _, da = _dask()
    if bank.dtype not in BANK_DTYPES:
        raise TypeError(
            f"a Dask bank must have dtype float32 or float64; got dtype {bank.dtype}. "
            "Convert it lazily with bank.astype(numpy.float64)."
        )
    _check_shape(tuple(bank.shape))
    if any(np.isnan(c) for c in bank.chunks[0]):
        raise ValueError(
            "the Dask bank has unknown chunk sizes; call bank.compute_chunk_sizes() first."
        )
    if len(bank.chunks[1]) > 1:
        bank = bank.rechunk({1: -1})  # row chunks only (lazy)
    return bank


def _checks(X: Any) -> list[tuple[str, int]]:
    dask, _ = _dask()
    parts = X.to_delayed().ravel()
    return list(dask.compute(*[dask.delayed(_chunk_check, pure=True)(p) for p in parts]))


def validate_dask(bank: Any) -> _BankState:
    """Validate a Dask bank on the workers: finiteness and per-chunk digests."""
    X = _prepare(bank)
    res = _checks(X)
    bad = sum(b for _, b in res)
    if bad:
        raise range_error(bad, X.dtype)
    digests = [dg for dg, _ in res]
    shape = (int(X.shape[0]), int(X.shape[1]))
    return _BankState(bank, X, None, "dask", _combined_digest(shape, X.dtype, digests),
                      None, {"chunk_digests": digests})


def verify_dask(st: _BankState) -> None:
    digests = [dg for dg, _ in _checks(st.X)]
    if digests != st.extra["chunk_digests"]:
        raise _mutated("a chunk's fingerprint changed")


def iter_blocks(st: _BankState):
    """``(offset, numpy block)`` per row chunk, each computed on its own and verified."""
    dask, _ = _dask()
    off = 0
    for k, p in enumerate(st.X.to_delayed().ravel()):
        Xc = np.asarray(dask.compute(p)[0])
        if _chunk_check(Xc)[0] != st.extra["chunk_digests"][k]:
            raise _mutated("a chunk's fingerprint changed")
        yield off, Xc
        off += Xc.shape[0]


def _chunk_pass(Xc: np.ndarray, centres: np.ndarray, radius: float, kw: dict,
                threads: int | None) -> tuple:
    Xc = np.asarray(Xc)
    h = BankHasher(Xc.shape, Xc.dtype)
    with _blas_threads(threads):
        gp = gate_pass(Xc, None, centres, radius, hasher=h, **kw)
    return (gp.counts, gp.sums, gp.pair_counts, gp.near_rows, gp.near_dist, [h.hexdigest()])


def _combine(a: tuple, b: tuple) -> tuple:
    def add(x, y):
        return None if x is None else x + y

    def cat(x, y):
        return None if x is None else np.concatenate([x, y])

    return (a[0] + b[0], a[1] + b[1], add(a[2], b[2]), cat(a[3], b[3]), cat(a[4], b[4]),
            a[5] + b[5])


def dask_gate_pass(st: _BankState, centres: np.ndarray, radius: float, *,
                   threads: int | None = None, **kw: Any) -> GatePass:
    """:func:`brace.gates.dense.gate_pass` over a Dask bank as a map-reduce (see module doc)."""
    dask, _ = _dask()
    parts = st.X.to_delayed().ravel()
    C = dask.delayed(np.asarray(centres), pure=True)
    K = dask.delayed(kw, pure=True)
    tasks = [dask.delayed(_chunk_pass, pure=True)(p, C, radius, K, threads) for p in parts]
    while len(tasks) > 1:  # pairwise, in chunk order (deterministic sums)
        nxt = [dask.delayed(_combine, pure=True)(tasks[i], tasks[i + 1])
               for i in range(0, len(tasks) - 1, 2)]
        if len(tasks) % 2:
            nxt.append(tasks[-1])
        tasks = nxt
    counts, sums, pc, nrow, ndist, digests = dask.compute(tasks[0])[0]
    if digests != st.extra["chunk_digests"]:
        raise _mutated("a chunk's fingerprint changed")
    return GatePass(np.asarray(counts, dtype=np.int64), sums, pc, nrow, ndist)


def _chunk_apply(Xc: np.ndarray, off: int, fn: Any, args: tuple) -> tuple:
    Xc = np.asarray(Xc)
    h = BankHasher(Xc.shape, Xc.dtype)
    h.update(Xc)
    return (*fn(Xc, off, *args), [h.hexdigest()])


def _add(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def map_reduce(st: _BankState, fn: Any, args: tuple) -> tuple:
    """``Σ_chunks fn(chunk, offset, *args)`` on the workers: ``fn`` returns a tuple of
    arrays, partials are added pairwise in chunk order (deterministic sums) and only the
    total reaches the client, with each chunk's digest (checked against validation)."""
    dask, _ = _dask()
    parts = st.X.to_delayed().ravel()
    offs = np.r_[0, np.cumsum(st.X.chunks[0])[:-1]].astype(int).tolist()
    A = dask.delayed(args, pure=True)
    tasks = [dask.delayed(_chunk_apply, pure=True)(p, o, fn, A)
             for p, o in zip(parts, offs, strict=True)]
    while len(tasks) > 1:
        nxt = [dask.delayed(_add, pure=True)(tasks[i], tasks[i + 1])
               for i in range(0, len(tasks) - 1, 2)]
        if len(tasks) % 2:
            nxt.append(tasks[-1])
        tasks = nxt
    *total, digests = dask.compute(tasks[0])[0]
    if digests != st.extra["chunk_digests"]:
        raise _mutated("a chunk's fingerprint changed")
    return tuple(total)
