"""Memory-mapped banks: the file-size guard and page release of a row block
(docs/scale.md).

A ``numpy.memmap`` bank is read block by block by every pass. :func:`_mmap_release`
gives the pass's ``after_block`` callback: it drops the processed block's pages (the
resident set stays about one block) and checks that the file still holds every mapped
row, as :meth:`_MappedBank.check` does before a pass. Reading a page past the end of a
truncated file kills the process with ``SIGBUS``; the check turns that into
:class:`BankMutatedError` before the read (a truncation in the microseconds between a
check and the read it guards is not caught).
"""

from __future__ import annotations

import mmap as _mmap
import os
from typing import Any

import numpy as np
from numpy.lib.array_utils import byte_bounds

from .contract import _mutated


class _MappedBank:
    """``after_block(b0, b1)`` for a ``numpy.memmap`` bank: :meth:`check`, then (for a
    C-contiguous shared map) drop the rows' pages from this process's resident set."""

    def __init__(self, X: np.ndarray, mm: Any, base: int, need: int) -> None:
        self._mm, self._need = mm, need
        self._name = os.fspath(getattr(X, "filename", None) or "?")
        # only shared mappings: dropping the pages of a private ("c") map would lose edits
        self._drop = hasattr(mm, "madvise") and X.flags.c_contiguous \
            and getattr(X, "mode", None) in ("r", "r+")
        self._row, self._start0 = X.strides[0], X.ctypes.data - base
        self.check()

    def check(self) -> None:
        """Raise :class:`BankMutatedError` unless the file still holds every mapped row
        (its size, from ``fstat`` on the map's own descriptor, against the rows' end)."""
        try:
            size = self._mm.size()
        except (OSError, ValueError):  # pragma: no cover - a closed map or descriptor
            size = -1
        if size < self._need:
            raise _mutated(
                f"its file {self._name!r} now holds {max(size, 0)} bytes but the mapped "
                f"rows end at byte {self._need}: it was truncated; reading past the end "
                "of a mapped file would kill the process, so nothing was read")

    def __call__(self, b0: int, b1: int) -> None:
        self.check()
        if not self._drop:
            return
        page = _mmap.PAGESIZE
        lo = (self._start0 + b0 * self._row) // page * page
        hi = self._start0 + b1 * self._row
        try:
            self._mm.madvise(_mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):  # pragma: no cover - best effort
            pass


def _mmap_release(X: np.ndarray) -> _MappedBank | None:
    """The guard and page release of a ``numpy.memmap`` bank (:class:`_MappedBank`), or
    None where the map is not a file ``mmap`` of known offset. Raises
    :class:`BankMutatedError` if the file is already too short."""
    mm = getattr(X, "_mmap", None)
    off = getattr(X, "offset", None)
    if not isinstance(mm, _mmap.mmap) or not isinstance(off, int):
        return None
    try:
        probe = np.frombuffer(mm, dtype=np.uint8)
        base = probe.ctypes.data
        del probe
    except (TypeError, ValueError, BufferError):  # pragma: no cover - platform specific
        return None
    # numpy maps from the offset rounded down to the allocation granularity
    start = off - off % _mmap.ALLOCATIONGRANULARITY
    return _MappedBank(X, mm, base, start + (byte_bounds(X)[1] - base))
