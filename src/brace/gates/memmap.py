"""Memory-mapped banks: releasing the pages of a processed row block (docs/scale.md).

A ``numpy.memmap`` bank is read block by block by every pass; :func:`_mmap_release` is
the pass's ``after_block`` callback, so the resident set stays about one block.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _mmap_release(X: np.ndarray) -> Any:
    """``after_block`` for a C-contiguous ``numpy.memmap``: drop the block's pages from
    this process's resident set (they are re-read from the file when needed)."""
    import mmap as _mmap

    mm = getattr(X, "_mmap", None)
    # only shared mappings: dropping the pages of a private ("c") map would lose edits
    if mm is None or not hasattr(mm, "madvise") or not X.flags.c_contiguous \
            or getattr(X, "mode", None) not in ("r", "r+"):
        return None
    try:
        probe = np.frombuffer(mm, dtype=np.uint8)
        base = probe.ctypes.data
        del probe
    except (TypeError, ValueError, BufferError):  # pragma: no cover - platform specific
        return None
    page = _mmap.PAGESIZE
    row = X.strides[0]
    start0 = X.ctypes.data - base

    def release(b0: int, b1: int) -> None:
        lo = (start0 + b0 * row) // page * page
        hi = start0 + b1 * row
        try:
            mm.madvise(_mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):  # pragma: no cover - best effort
            pass

    return release
