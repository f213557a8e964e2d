"""Atomic file output: write to a temporary file in the target directory, then
``os.replace`` it into place, so a reader never sees a half-written file and a failure
leaves nothing behind."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "write_json",
    "save_npz",
    "load_npy",
    "load_csv",
    "strict_json",
    "dumps_strict",
    "check_output_path",
]


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


def strict_json(obj: Any) -> Any:
    """``obj`` with every NaN/∞ float replaced by None (JSON has neither). In a dict the
    key ``<key>_null_reason`` says why ("infinite" or "undefined (NaN)") unless the
    caller gives one;
    numpy scalars and arrays become plain Python values."""
    if isinstance(obj, np.ndarray):
        obj = obj.tolist()
    elif isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(v, np.generic):
                v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                out.setdefault(f"{k}_null_reason",
                               "infinite" if math.isinf(v) else "undefined (NaN)")
            else:
                out[k] = strict_json(v)
                if _has_non_finite(v):
                    out.setdefault(f"{k}_null_reason",
                                   "null entries were undefined (NaN) or infinite")
        return out
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    return obj


def _has_non_finite(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "fc" and not bool(np.all(np.isfinite(v)))
    if isinstance(v, list | tuple):
        return any(
            (isinstance(x, float | np.floating) and not math.isfinite(x))
            or (isinstance(x, list | tuple | np.ndarray) and _has_non_finite(x))
            for x in v
        )
    return False


def dumps_strict(obj: Any, **kw: Any) -> str:
    """``json.dumps`` of :func:`strict_json` (``allow_nan=False``: never bare NaN)."""
    return json.dumps(strict_json(obj), allow_nan=False, default=_json_default, **kw)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented, strict JSON (NaN/∞ → null plus a reason)."""
    return atomic_write_text(path, dumps_strict(obj, indent=2) + "\n")


def save_npz(path: str | os.PathLike, **arrays: Any) -> Path:
    """Atomically write a compressed ``.npz``."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def load_csv(path: str | os.PathLike, name: str) -> np.ndarray:
    """Read a numeric CSV: comma-separated numbers, one row per line, no header (lines
    starting with ``#`` are comments). Every entry is parsed as float64; a non-numeric
    entry is an error naming the file and line, never a silent NaN."""
    p = Path(path)
    rows = []
    with open(p, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                rows.append([float(x) for x in text.split(",")])
            except ValueError:
                raise ValueError(
                    f"{name} file {p}, line {lineno}: not a comma-separated list of numbers "
                    f"({text[:60]!r}). CSV input must be numeric, without a header."
                ) from None
    if not rows:
        raise ValueError(f"{name} file {p} holds no rows.")
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        raise ValueError(f"{name} file {p}: rows have different lengths {sorted(widths)}.")
    return np.asarray(rows, dtype=np.float64)


def load_npy(path: str | os.PathLike, name: str) -> np.ndarray:
    """Load a ``.npy``, the single array of a ``.npz``, or a numeric ``.csv``
    (:func:`load_csv`), with a clear error message for anything else."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{name} file not found: {p}; pass the path of an existing "
                                ".npy file.")
    if p.suffix.lower() == ".csv":
        return load_csv(p, name)
    with open(p, "rb") as fh:
        head = fh.read(6)
    if not (head.startswith(_NPY_MAGIC) or head.startswith(_ZIP_MAGIC)):
        raise ValueError(
            f"{name} file {p} is not a .npy or .npz file (it does not start with the numpy "
            "header). Save it with numpy.save, or give a numeric CSV with a .csv name."
        )
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


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_output_path(
    path: str | os.PathLike,
    *,
    inputs: dict[str, str | os.PathLike | None] | None = None,
    overwrite: bool = False,
    suffixes: tuple[str, ...] | None = None,
    name: str = "--out",
    is_dir: bool = False,
) -> Path:
    """Check an output path *before* anything is computed.

    Refuses a path that is one of the ``inputs`` (by name: ``{"--bank": path, …}``), a
    wrong suffix, a missing parent directory, and an existing file unless ``overwrite``
    (the message says to pass ``--overwrite``). ``is_dir``: the output is a directory
    (it may exist; files in it are replaced atomically).
    """
    p = Path(path)
    for label, other in (inputs or {}).items():
        if other is not None and _same_file(p, Path(other)):
            raise ValueError(
                f"{name} {str(p)!r} is the same file as {label} {str(other)!r}: writing it "
                "would destroy an input. Choose another output path."
            )
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise ValueError(
            f"{name} must end in {' or '.join(suffixes)}; got {str(p)!r}."
        )
    if is_dir:
        if p.exists() and not p.is_dir():
            raise ValueError(f"{name} {str(p)!r} exists and is not a directory.")
        anc = p
        while not anc.exists():
            anc = anc.parent
        if not anc.is_dir():
            raise ValueError(f"{name} {str(p)!r}: {str(anc)!r} is a file, not a directory.")
        if not os.access(anc, os.W_OK):
            raise PermissionError(f"{name} {str(p)!r}: cannot write in {str(anc)!r}.")
        return p
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"{name}: output directory does not exist: {parent}")
    if p.is_dir():
        raise ValueError(f"{name} {str(p)!r} is a directory; give a file path.")
    if p.exists() and not overwrite:
        raise ValueError(
            f"{name} {str(p)!r} already exists; pass --overwrite to replace it, or choose "
            "another path."
        )
    return p
