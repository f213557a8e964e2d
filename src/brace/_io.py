"""Atomic file output: write to a temporary file in the target directory, then
``os.replace`` it into place, so a reader never sees a half-written file and a failure
leaves nothing behind."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_write_bytes", "atomic_write_text", "write_json", "save_npz", "load_npy"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (same-directory temp file + ``os.replace``)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"output directory does not exist: {parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual file mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON."""
    return atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def save_npz(path: str | os.PathLike, **arrays: Any) -> Path:
    """Atomically write a compressed ``.npz``."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


def load_npy(path: str | os.PathLike, name: str) -> np.ndarray:
    """Load a ``.npy`` (or the single array of a ``.npz``) with a clear error message."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{name} file not found: {p}; pass the path of an existing "
                                ".npy file.")
    try:
        obj = np.load(p, allow_pickle=False)
    except Exception as exc:  # numpy raises several types for corrupt files
        raise ValueError(f"cannot read {name} file {p} as .npy/.npz: {exc}") from None
    if isinstance(obj, np.lib.npyio.NpzFile):
        with obj:
            keys = list(obj.keys())
            if len(keys) != 1:
                raise ValueError(f"{name} file {p} must hold exactly one array; found {keys}.")
            return obj[keys[0]]
    return obj
