"""Dense associative memories: LSR (log-sum-ReLU / Epanechnikov) and LSE energies.

``docs/spec.md`` §1. A bank ``D = (X_1, …, X_n)`` is an ``(n, d)`` float32 or float64
array (an in-memory array, a ``numpy.memmap``, a row-chunked ``dask.array.Array`` or a
``torch.Tensor`` on any device; docs/scale.md), used in place without a copy. Centres,
outputs and sums are float64.

* LSR energy, ``β > 0``, support radius ``r = sqrt(2/β)``::

      E_LSR(z; D) = -(1/β) · log( Σ_i ReLU(1 - (β/2)·‖z - X_i‖²) )

  The sum is zero outside the union of the support balls; there the log gets the floor
  ``LOG_FLOOR`` (the smallest positive float64), so the energy is a finite plateau
  ``-(1/β)·log(LOG_FLOOR)`` instead of ``+inf``.
* Gate (closed ball) ``I(D, y) = {i : ‖X_i - y‖ ≤ r}``.
* Retrieval map ``Φ_D(y)`` = unweighted mean of the gate, or ``y`` when the gate is empty
  (mean shift with the flat kernel; the stationary-point condition of ``E_LSR``).
* LSE energy ``E_LSE(z) = -(1/β) log Σ_i exp(β zᵀX_i)``, update ``z ← softmax(β X z)ᵀ X``.

The bank passes (gate sizes and sums for many centres at once) are the gate package
:mod:`brace.gates`: blocked distance tiles (:mod:`brace.gates.dense`), a KD-tree in low
dimension (:mod:`brace.gates.kdtree`, ``index=``) and a map-reduce over Dask chunks
(:mod:`brace.gates.dask`) and a pass on a torch tensor's device (:mod:`brace.gates.torch`);
membership is always the direct formula
:func:`brace.gates.dense.direct_sqdist` at the radius. This module holds the memories:
validating and fingerprinting the bank, choosing the backend, energies and retrieval.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any

import numpy as np

from ._fingerprint import BankHasher, is_torch_tensor, row_block
from ._validation import (
    check_int_at_least,
    check_output_size,
    check_positive,
    check_queries,
    check_radius_beta,
    check_steps,
)
from .gates.contract import (
    BANK_DTYPES,
    BankMutatedError,
    GatePass,
    _BankState,
    _blas_threads,
    _check_shape,
    _mutated,
    count_out_of_range,
    range_error,
)
from .gates.dask import dask_gate_pass, iter_blocks, validate_dask, verify_dask
from .gates.dense import _block_size, _row_sqnorm, direct_sqdist, gate_pass
from .gates.kdtree import dense_gates, kdtree_gate_pass
from .gates.memmap import _mmap_release
from .gates.torch import torch_blocks, torch_gate_pass, validate_torch, verify_torch

__all__ = [
    "LSRMemory",
    "LSEMemory",
    "LOG_FLOOR",
    "BankMutatedError",
    "frozen_bank",
    "pins_bank",
]

LOG_FLOOR = float(np.finfo(np.float64).tiny)
_DEDUPE = True  # LSRMemory.gate_pass passes bit-identical centres once (benchmarks turn it off)


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inv)``: indices of the first occurrence of each distinct row of ``a``
    (byte-wise, in order of appearance) and, for every row, its position in ``first``."""
    v = np.ascontiguousarray(a).view(np.dtype((np.void, a.dtype.itemsize * a.shape[1])))
    _, first, inv = np.unique(v.ravel(), return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[inv.ravel()]


def _is_dask(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")


def frozen_bank(bank: Any) -> np.ndarray:
    """A read-only copy of ``bank`` whose memory is an immutable ``bytes`` object
    (``docs/scale.md``, "No copies"): float32 and float64 kept, other real dtypes
    converted to float64, C order. Nothing written through numpy can change it
    (``setflags(write=True)`` raises), so a memory on it skips the per-call re-hash of
    the bank that guards a mutable array against edits: the fingerprint is computed
    once, at validation. Costs one copy of the bank (``n·d`` items) when made.

    >>> import numpy as np
    >>> X = frozen_bank(np.eye(3))
    >>> X.flags.writeable
    False
    """
    arr = bank if isinstance(bank, np.ndarray) else np.asarray(bank)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise TypeError(f"bank must hold real numbers (integer or float); got dtype "
                        f"{arr.dtype}.")
    _check_shape(arr.shape)
    dtype = arr.dtype if arr.dtype in BANK_DTYPES else np.dtype(np.float64)
    data = np.ascontiguousarray(arr, dtype=dtype).tobytes()  # the one copy
    return np.frombuffer(data, dtype=dtype).reshape(arr.shape)


def _is_frozen(arr: np.ndarray) -> bool:
    """The array's memory is an immutable ``bytes`` object (:func:`frozen_bank`); a
    memory map's is an ``mmap`` (its file can be rewritten), a writable array's its own."""
    base: Any = arr
    while isinstance(base, np.ndarray):
        base = base.base
    return type(base) is bytes


def _validate_numpy(bank: Any) -> _BankState:
    arr = bank if isinstance(bank, np.ndarray) else np.asarray(bank)
    if arr.dtype == bool:
        raise TypeError("bank must hold real numbers; got a boolean array.")
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"bank must hold real numbers (integer or float); got dtype {arr.dtype}.")
    _check_shape(arr.shape)
    kind = "mmap" if isinstance(arr, np.memmap) else "memory"
    if arr.dtype not in BANK_DTYPES:
        # integers and other float widths: one float64 conversion, owned by the memory
        arr = np.asarray(arr, dtype=np.float64, order="C")
        kind = "memory"
    X = arr.view()
    X.flags.writeable = False
    n, d = X.shape
    h = BankHasher((n, d), X.dtype)
    sq = np.empty(n) if kind == "memory" else None
    step = row_block(d, X.dtype.itemsize)
    release = _mmap_release(X) if kind == "mmap" else None
    bad = 0
    for b0 in range(0, n, step):
        Xb = X[b0 : b0 + step]
        bad += count_out_of_range(Xb)
        h.update(Xb)
        if sq is not None:
            sq[b0 : b0 + Xb.shape[0]] = _row_sqnorm(Xb)
        if release is not None:
            release(b0, b0 + Xb.shape[0])
    if bad:
        raise range_error(bad, X.dtype)
    extra = {"unchecked": True, "frozen": kind == "memory" and _is_frozen(X)}
    return _BankState(bank, X, sq, kind, h.hexdigest(), release, extra)


def _validate(bank: Any) -> _BankState:
    if _is_dask(bank):
        return validate_dask(bank)
    if is_torch_tensor(bank):
        return validate_torch(bank)
    return _validate_numpy(bank)


def _frozen(st: _BankState) -> bool:
    return bool(st.extra) and bool(st.extra.get("frozen"))


class _MemoryBase:
    """Shared validation and caching of the bank (validated at use, cached by identity).

    The bank is not copied (float32 and float64 arrays, memory maps and Dask arrays are
    used in place; docs/scale.md, "No copies"): the memory keeps a read-only view and a
    SHA-256 fingerprint, and every pass re-hashes the rows it reads; a bank edited in
    place after validation raises :class:`BankMutatedError` instead of being used. To
    change the bank, assign a new array to ``bank``. Inside :meth:`_pinned` (every
    public call) the bank is verified once at entry and once at exit instead.
    """

    bank: Any

    def _pin(self) -> _BankState | None:
        """The state pinned by this thread's enclosing :meth:`_pinned` scope, if any."""
        pins = getattr(self, "_pins", None)
        got = None if pins is None else pins.get(threading.get_ident())
        return None if got is None else got[0]

    def _is_pinned(self, st: _BankState) -> bool:
        """Passes on ``st`` may skip their own hashing: verified at the scope's exit, or
        never to be verified again (a :func:`frozen_bank`, which cannot change)."""
        return st.kind != "dask" and (self._pin() is st or _frozen(st))

    @contextlib.contextmanager
    def _pinned(self):
        """One public call's scope: the bank is verified at entry and at exit, and the
        passes inside skip their per-pass hashing (docs/scale.md, "No copies").

        A mutation during the call raises :class:`BankMutatedError` at exit, so the
        call's result is never returned. Scopes nest (only the outermost verifies) and
        are per thread. Dask banks keep their per-pass chunk digests (computed on the
        workers while they read the chunks), so their scope adds no check.
        """
        tid = threading.get_ident()
        pins = self.__dict__.setdefault("_pins", {})
        if tid in pins:
            st, depth = pins[tid]
            pins[tid] = (st, depth + 1)
            try:
                yield st
            finally:
                pins[tid] = (st, depth)
            return
        st = self._state()
        # the first scope after validation skips the entry hash: validation just computed
        # the digest, and the exit check compares against it
        if st.kind != "dask" and not st.extra.pop("unchecked", False):
            self._verify(st)
        pins[tid] = (st, 1)
        try:
            yield st
        finally:
            del pins[tid]
        if st.kind != "dask":
            self._verify(st)  # reached only when the body did not raise
        if st.source is not self.bank:
            raise _mutated("`bank` was reassigned during the call")

    def _state(self) -> _BankState:
        st = getattr(self, "_bank_cache", None)
        if st is None or st.source is not self.bank:
            st = _validate(self.bank)
            self._bank_cache = st
        elif st.kind == "mmap" and st.release is not None:
            st.release.check()  # a pass follows: its file must still hold every row
        return st

    def _verify(self, st: _BankState) -> None:
        """Re-hash the whole bank (passes that do not read every row, such as the KD-tree
        pass and the public ``_bank()`` accessor); a no-op inside a pinned scope."""
        if self._is_pinned(st):  # pinned scope or a frozen bank
            return
        if st.kind == "dask":
            verify_dask(st)
            return
        if st.kind == "torch":
            verify_torch(st)
            return
        h = BankHasher(st.X.shape, st.X.dtype)
        step = row_block(st.X.shape[1], st.X.dtype.itemsize)
        for b0 in range(0, st.X.shape[0], step):
            h.update(st.X[b0 : b0 + step])
            if st.release is not None:
                st.release(b0, min(b0 + step, st.X.shape[0]))
        if h.hexdigest() != st.digest:
            raise _mutated("fingerprint mismatch")

    def _bank(self) -> tuple[Any, np.ndarray | None]:
        """The validated bank (read-only, float32 or float64; a ``numpy.memmap`` or a
        ``dask.array.Array`` as given) and its float64 squared norms (``None`` for memory
        maps and Dask banks). Verifies the fingerprint."""
        st = self._state()
        self._verify(st)
        return st.X, st.sq

    @property
    def n_memories(self) -> int:
        return int(self._state().X.shape[0])

    @property
    def dim(self) -> int:
        return int(self._state().X.shape[1])

    def _points(self, y: Any, name: str = "y") -> tuple[np.ndarray, bool]:
        return check_queries(y, self.dim, name=name)

    def _blocks(self, step: int | None = None):
        """Yield ``(b0, block)`` numpy row blocks of the verified bank."""
        st = self._state()
        X = st.X
        n, d = X.shape
        if st.kind == "dask":
            yield from iter_blocks(st)
            return
        self._verify(st)
        if st.kind == "torch":
            yield from torch_blocks(st, step)
            return
        step = step or row_block(d, X.dtype.itemsize)
        for b0 in range(0, n, step):
            if st.release is not None:
                st.release.check()  # gates.memmap: the file still holds every row
            yield b0, X[b0 : b0 + step]

    def retrieve(self, queries: Any, steps: int) -> np.ndarray:
        """Noiseless retrieval ``z_0 = q``, ``z_t = Φ(z_{t-1})``.

        Returns an array of shape ``(Q, steps + 1, d)`` (``(steps + 1, d)`` for a single
        ``(d,)`` query) holding ``q`` at index 0.
        """
        Y, was_1d = self._points(queries, "queries")
        T = check_steps(steps)
        check_output_size((Y.shape[0], T + 1, Y.shape[1]), "the trajectory")
        out = np.empty((Y.shape[0], T + 1, Y.shape[1]))
        out[:, 0] = Y
        with self._pinned():
            for t in range(1, T + 1):
                out[:, t] = self._step_validated(out[:, t - 1])
        return out[0] if was_1d else out

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


def _check_threads(threads: Any) -> int | None:
    if threads is None:
        return None
    return check_int_at_least("threads", threads, 1)


INDEXES = ("auto", "brute", "kdtree")
KDTREE_MAX_DIM = 8  # index="auto" uses the KD-tree for in-memory banks with d ≤ this
KDTREE_MIN_ROWS = 4096  # ... and at least this many rows


def pins_bank(func: Any) -> Any:
    """Decorator: run a public call inside its memory's :meth:`_MemoryBase._pinned` scope.

    The memory is the first argument that is a memory, or whose ``_memory`` attribute is
    one (``PrivateMemory``); without one the call runs as is.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for a in (*args, *kwargs.values()):
            mem = a if isinstance(a, _MemoryBase) else getattr(a, "_memory", None)
            if isinstance(mem, _MemoryBase):
                with mem._pinned():
                    return func(*args, **kwargs)
        return func(*args, **kwargs)

    return wrapper


class LSRMemory(_MemoryBase):
    """Log-sum-ReLU (Epanechnikov) dense associative memory (``docs/spec.md`` §1).

    Parameters
    ----------
    bank : array_like, numpy.memmap, dask.array.Array or torch.Tensor, shape (n, d)
        Stored memories. float32 and float64 arrays are used in place, without a copy
        (read-only view plus fingerprint; editing the array afterwards is detected and
        refused, docs/scale.md); memory maps (``np.load(path, mmap_mode="r")``) are read
        block by block; a Dask array chunked by rows runs each pass as a map-reduce on
        the active scheduler; a float32/float64 ``torch.Tensor`` stays on its device and
        each pass runs there (docs/scale.md, "Torch banks"). Other integer and float
        dtypes of numpy arrays are cast to float64 once;
        other dtypes, non-finite values, an empty bank or a non-2-D array are refused.
    beta : float, optional
        Inverse temperature ``β > 0``.
    radius : float, optional
        Support radius ``r > 0``. Exactly one of ``beta`` and ``radius``; ``r = sqrt(2/β)``.
    index : {"auto", "brute", "kdtree"}, default "auto"
        How gate candidates are found. ``"kdtree"``: a ``scipy.spatial.cKDTree`` over the
        bank (built once, a float64 copy of the bank) proposes candidates within
        ``r(1 + 1e-9)``; ``"brute"``: blocked distance tiles. ``"auto"`` takes the tree for
        in-memory banks with ``d ≤ 8`` and ``n ≥ 4096``, pass by pass unless the gates
        look dense (a sampled share of the bank above ``0.08/d`` per gate, where brute
        force is faster). Results are identical either way (membership is always the
        direct formula); the choice only changes the run time.
    threads : int or None, default 1
        BLAS threads during a pass (threadpoolctl). One thread measured fastest on the
        2-core development machine (docs/benchmarks.md); ``None`` leaves BLAS as is.
    canonical_sums : bool, default False
        Every gate sum a function of its own members only (a sparse product in row order
        per row block, and the backend chosen from public values: no density estimate),
        so that a step reads nothing outside its footprint, bit for bit
        (``docs/privacy-accounting.md`` §12.1). :class:`brace.PrivateMemory` sets it;
        means differ from the default only in the last bits.

    Examples
    --------
    >>> import numpy as np
    >>> mem = LSRMemory(np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]]), radius=1.5)
    >>> mem.step(np.array([0.2, 0.0])).round(3).tolist()
    [0.5, 0.0]
    """

    def __init__(
        self,
        bank: Any,
        *,
        beta: float | None = None,
        radius: float | None = None,
        index: str = "auto",
        threads: int | None = 1,
        canonical_sums: bool = False,
    ):
        self.bank = bank
        self.beta = beta
        self.radius = radius
        self.index = index
        self.threads = threads
        self.canonical_sums = canonical_sums

    @property
    def radius_(self) -> float:
        """The validated support radius ``r``."""
        return check_radius_beta(self.beta, self.radius)

    @property
    def beta_(self) -> float:
        """The validated inverse temperature ``β = 2/r²``."""
        if self.beta is not None:
            return check_positive("beta", self.beta)
        return 2.0 / self.radius_**2

    def _index(self, st: _BankState) -> str:
        if self.index not in INDEXES:
            raise ValueError(f"index must be one of {INDEXES}; got {self.index!r}.")
        n, d = st.X.shape
        if self.index == "kdtree":
            if st.kind != "memory":
                raise ValueError(
                    f"index='kdtree' needs an in-memory bank; this bank is a {st.kind} bank "
                    "(a tree would load it whole). Use index='brute' or 'auto'."
                )
            return "kdtree"
        if self.index == "auto" and st.kind == "memory" and d <= KDTREE_MAX_DIM \
                and n >= KDTREE_MIN_ROWS:
            return "kdtree"
        return "brute"

    def gate_pass(self, centres: np.ndarray, **kw: Any) -> GatePass:
        """One bank pass for validated ``(m, d)`` float64 centres (see :func:`gate_pass`).

        The backend follows the bank and ``index``; every backend gives the same counts,
        memberships, pair counts and near-boundary rows (docs/scale.md). Without ``kw``,
        bit-identical centres (converged states) are passed once and their statistics
        shared (:func:`_distinct_rows`); membership is a function of the row and the
        centre, so counts are unchanged.
        """
        if not kw and _DEDUPE and centres.shape[0] > 1:
            first, inv = _distinct_rows(centres)
            if first.size < centres.shape[0]:
                gp = self.gate_pass(centres[first])
                return GatePass(gp.counts[inv], gp.sums[inv])
        st = self._state()
        r = self.radius_
        index = self._index(st)
        threads = _check_threads(self.threads)
        canonical = self.canonical_sums is True
        with _blas_threads(threads):
            if st.kind == "dask":
                return dask_gate_pass(st, centres, r, threads=threads, canonical=canonical,
                                      **kw)
            if st.kind == "torch":
                h = None if self._is_pinned(st) else BankHasher(st.X.shape, st.extra["dtype"])
                gp = torch_gate_pass(st, centres, r, hasher=h, canonical=canonical,
                                     threads=threads, **kw)
                if h is not None and h.hexdigest() != st.digest:
                    raise _mutated("fingerprint mismatch")
                return gp
            # the density estimate samples the whole bank: not with canonical sums, whose
            # backend is a public choice (docs/privacy-accounting.md §12.1)
            if index == "kdtree" and self.index == "auto" and not canonical:
                if dense_gates(st.X, centres, r):
                    index = "brute"
            if index == "kdtree":
                self._verify(st)
                return kdtree_gate_pass(st, centres, r, canonical=canonical, **kw)
            h = None if self._is_pinned(st) else BankHasher(st.X.shape, st.X.dtype)
            gp = gate_pass(st.X, st.sq, centres, r, hasher=h, after_block=st.release,
                           canonical=canonical, **kw)
            if h is not None and h.hexdigest() != st.digest:
                raise _mutated("fingerprint mismatch")
            return gp

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:
        return self.gate_pass(Y).means(Y)

    def step(self, y: Any) -> np.ndarray:
        """The retrieval map ``Φ_D(y)``: mean of the closed-ball gate, or ``y`` if empty."""
        Y, was_1d = self._points(y)
        out = self._step_validated(Y)
        return out[0] if was_1d else out

    def gate(self, y: Any, *, counts: bool = False) -> np.ndarray:
        """Gate ``I(D, y)`` as a boolean ``(Q, n)`` mask, or its sizes ``(Q,)`` if ``counts``.

        The mask form materialises ``Q × n`` booleans; use ``counts=True`` for large banks.
        """
        Y, was_1d = self._points(y)
        if counts:
            c = self.gate_pass(Y).counts
            return c[0] if was_1d else c
        r2 = self.radius_**2
        mask = np.empty((Y.shape[0], self.n_memories), dtype=bool)
        for b0, Xb in self._blocks():
            for i in range(Y.shape[0]):
                mask[i, b0 : b0 + Xb.shape[0]] = direct_sqdist(Xb, Y[i]) <= r2
        return mask[0] if was_1d else mask

    def _kernel_sum(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``S(y) = Σ_i ReLU(1 - (β/2)‖y - X_i‖²)``, ``Σ_{i∈I(y)} (y - X_i)`` and counts."""
        beta = self.beta_
        r2 = self.radius_**2
        S = np.zeros(Y.shape[0])
        cnt = np.zeros(Y.shape[0])
        msum = np.zeros_like(Y)
        for _, Xb in self._blocks(row_block(self.dim, 8)):
            X64 = np.asarray(Xb, dtype=np.float64)
            for i in range(Y.shape[0]):  # loop over queries, vectorised over memories
                d2 = direct_sqdist(X64, Y[i])
                S[i] += np.maximum(1.0 - 0.5 * beta * d2, 0.0).sum()
                mk = d2 <= r2
                cnt[i] += mk.sum()
                msum[i] += X64[mk].sum(axis=0)
        num = cnt[:, None] * Y - msum
        return S, num, cnt

    def energy(self, z: Any) -> np.ndarray | float:
        """``E_LSR(z; D) = -(1/β) log max(Σ_i ReLU(1 - (β/2)‖z - X_i‖²), LOG_FLOOR)``."""
        Z, was_1d = self._points(z, "z")
        S, _, _ = self._kernel_sum(Z)
        e = -np.log(np.maximum(S, LOG_FLOOR)) / self.beta_
        return float(e[0]) if was_1d else e

    def gradient(self, z: Any) -> np.ndarray:
        """``∇E_LSR(z) = Σ_{i ∈ I(D,z)} (z - X_i) / S(z)``.

        On the open support this is the exact gradient; at the kink ``‖z - X_i‖ = r``
        the closed-ball convention of the gate is used (a one-sided derivative), so the
        zeros of the gradient are exactly the fixed points of ``Φ``. Outside every
        support ball the energy is flat and the gradient is 0.
        """
        Z, was_1d = self._points(z, "z")
        S, num, cnt = self._kernel_sum(Z)
        g = np.where(cnt[:, None] > 0, num / np.maximum(S, LOG_FLOOR)[:, None], 0.0)
        return g[0] if was_1d else g


class LSEMemory(_MemoryBase):
    """Log-sum-exp (modern Hopfield) memory, for comparison (``docs/spec.md`` §1).

    ``E_LSE(z) = -(1/β) log Σ_i exp(β zᵀX_i)``; update ``z ← softmax(β X z)ᵀ X``,
    computed with a streaming (blockwise) log-sum-exp, so ``β·‖x‖`` of order 1e3 or
    more does not overflow. The bank is handled as for :class:`LSRMemory` (no copy).
    """

    def __init__(self, bank: Any, *, beta: float):
        self.bank = bank
        self.beta = beta

    @property
    def beta_(self) -> float:
        return check_positive("beta", self.beta)

    def _stream(self, Z: np.ndarray, want_mean: bool) -> tuple[np.ndarray, np.ndarray | None]:
        beta = self.beta_
        m = np.full(Z.shape[0], -np.inf)
        s = np.zeros(Z.shape[0])
        acc = np.zeros_like(Z) if want_mean else None
        step = min(_block_size(Z.shape[0], self.n_memories), row_block(self.dim, 8))
        for _, Xr in self._blocks(step):
            Xb = np.asarray(Xr, dtype=np.float64)
            logits = beta * (Z @ Xb.T)
            if not np.all(np.isfinite(logits)):
                raise ValueError(
                    "beta * z·x overflows float64 in the LSE energy; rescale the bank, "
                    "the queries or beta."
                )
            bm = logits.max(axis=1)
            new_m = np.maximum(m, bm)
            scale = np.exp(m - new_m)
            w = np.exp(logits - new_m[:, None])
            s = s * scale + w.sum(axis=1)
            if want_mean:
                acc = acc * scale[:, None] + w @ Xb
            m = new_m
        lse = m + np.log(s)
        return lse, (acc / s[:, None] if want_mean else None)

    def energy(self, z: Any) -> np.ndarray | float:
        """``E_LSE(z) = -(1/β) logsumexp(β X z)``."""
        Z, was_1d = self._points(z, "z")
        lse, _ = self._stream(Z, False)
        e = -lse / self.beta_
        return float(e[0]) if was_1d else e

    def gradient(self, z: Any) -> np.ndarray:
        """``∇E_LSE(z) = -softmax(β X z)ᵀ X``."""
        Z, was_1d = self._points(z, "z")
        _, mean = self._stream(Z, True)
        return -mean[0] if was_1d else -mean

    def _step_validated(self, Y: np.ndarray) -> np.ndarray:
        return self._stream(Y, True)[1]

    def step(self, y: Any) -> np.ndarray:
        """``softmax(β X y)ᵀ X``."""
        Y, was_1d = self._points(y)
        out = self._step_validated(Y)
        return out[0] if was_1d else out
