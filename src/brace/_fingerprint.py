"""A bank's fingerprint: SHA-256 over its shape, dtype, radius and bytes (docs/scale.md).

The bytes are hashed in C (row-major) order, streamed in row blocks, so a memory-mapped
bank is never read whole into memory. ``BankHasher`` is the streaming form: feeding it
the bank's row blocks in order gives the same digest as :func:`bank_fingerprint`, which
lets a gate pass verify the bank while it reads it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import numpy as np

__all__ = ["bank_fingerprint", "BankHasher", "is_torch_tensor", "host_array", "numpy_dtype"]

_PREFIX = b"brace-bank-fingerprint/1\0"
_BLOCK_BYTES = 1 << 24  # 16 MiB of rows per update


def is_torch_tensor(x: Any) -> bool:
    """Whether ``x`` is a ``torch.Tensor``, without importing torch (a tensor can only
    exist once torch is imported)."""
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(x, mod.Tensor)


def numpy_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)``, also for a torch dtype (``torch.float32`` -> ``float32``)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        name = str(dtype)
        if name.startswith("torch."):
            return np.dtype(name[len("torch."):])
        raise


def host_array(block: Any) -> np.ndarray:
    """A row block as a numpy array on the host: a torch tensor is detached and copied
    from its device (a CPU tensor is viewed, not copied); anything else ``np.asarray``."""
    if is_torch_tensor(block):
        return block.detach().cpu().numpy()
    return np.asarray(block)


class BankHasher:
    """Streaming SHA-256 of an ``(n, d)`` bank: the header, then row blocks in order.

    ``radius=None`` leaves the radius out of the header (the memory's own integrity
    check, which must not change when only the radius does).
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any, radius: float | None = None):
        head: dict[str, Any] = {"shape": [int(s) for s in shape], "dtype": str(np.dtype(dtype))}
        if radius is not None:
            head["radius"] = float(radius).hex()
        self._h = hashlib.sha256(_PREFIX + json.dumps(head, sort_keys=True).encode() + b"\0")

    def update(self, rows: np.ndarray) -> None:
        """Hash the next rows (any strides; copied block-wise only if not C-contiguous)."""
        block = np.ascontiguousarray(rows)
        self._h.update(memoryview(block).cast("B"))

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def row_block(d: int, itemsize: int) -> int:
    """Rows per streamed block (about 16 MiB)."""
    return max(1, _BLOCK_BYTES // max(1, d * itemsize))


def bank_fingerprint(bank: Any, radius: float) -> str:
    """SHA-256 hex digest of ``bank`` (shape, dtype, bytes in C order) and ``radius``.

    The radius enters as its exact ``float.hex``, so radii one ulp apart differ. The bank
    is read in blocks of about 16 MiB of rows: a ``numpy.memmap`` is streamed, and a
    ``dask.array.Array`` is computed one block at a time on the client (for large Dask
    banks prefer the per-chunk digests of ``LSRMemory``, computed on the workers).
    """
    if not hasattr(bank, "shape") or not hasattr(bank, "dtype"):
        bank = np.asarray(bank)
    if len(bank.shape) != 2:
        raise ValueError(f"bank must be a 2-D array of shape (n, d); got shape {bank.shape}.")
    n, d = (int(s) for s in bank.shape)
    dtype = numpy_dtype(bank.dtype)
    h = BankHasher((n, d), dtype, float(radius))
    step = row_block(d, dtype.itemsize)
    for b0 in range(0, n, step):
        h.update(host_array(bank[b0 : b0 + step]))
    return h.hexdigest()
