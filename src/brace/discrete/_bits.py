"""The random bits of the exact samplers: every bit comes from :func:`os.urandom` through
:func:`_words` (the kernel's CSPRNG; no seed, no generator state, numpy's generators never
used), and a uniform real ``W ∈ [0, 1)`` drawn lazily, a prefix of bits at a time
(:class:`_Lazy`)."""

from __future__ import annotations

import os

import numpy as np


def _words(n: int) -> np.ndarray:
    """``n`` uniform 64-bit words from the operating system's CSPRNG: the only source of
    randomness in this module."""
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def _randbits(k: int) -> int:
    """A uniform integer in ``[0, 2^k)`` (Python int)."""
    if k <= 0:
        return 0
    w = _words((k + 63) // 64)
    r = 0
    for x in w.tolist():
        r = (r << 64) | x
    return r >> (64 * w.size - k)


def _randbelow(n: int) -> int:
    """A uniform integer in ``[0, n)``, ``n ≥ 1``, by rejection (acceptance > 1/2)."""
    k = (n - 1).bit_length()
    while True:
        r = _randbits(k)
        if r < n:
            return r


class _Lazy:
    """A uniform real ``W ∈ [0, 1)`` of which the first ``bits`` bits ``num`` are drawn:
    ``W ∈ [num·2^{−bits}, (num + 1)·2^{−bits})``; :meth:`extend` draws 64 more bits (all
    from :func:`_words`)."""

    __slots__ = ("bits", "num")

    def __init__(self, num: int = 0, bits: int = 0):
        self.num = int(num)
        self.bits = int(bits)

    def extend(self) -> None:
        self.num = (self.num << 64) | int(_words(1)[0])
        self.bits += 64
