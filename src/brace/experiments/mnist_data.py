"""MNIST test split: locating, loading and checking the IDX files, splitting, 2-D PCA.

Numpy only (no torch), so everything here works without the ``mnist`` extra.

Only the MNIST **test split** (10,000 images) ships with this project (``docs/spec.md`` §7), so the
experiment draws its memory bank, development and test queries from it and trains the VAE
on what remains (:func:`split_indices`). The data files are never copied into the
repository; :func:`find_mnist_dir` locates them.

Checksums are pinned for the *uncompressed* IDX payload, so a gzipped or a plain copy of
the same data verifies alike (gzip output depends on the compressor; the payload does not).
The digests of the shipped ``.gz`` files are recorded too, for reference.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brace._validation import (
    as_float_array,
    check_int_at_least,
    check_nonnegative,
    check_rng,
)

__all__ = [
    "ENV_VAR",
    "IMAGES_FILE",
    "LABELS_FILE",
    "CHECKSUMS",
    "find_mnist_dir",
    "read_idx",
    "load_mnist_test",
    "split_indices",
    "PCA2D",
    "fit_pca_2d",
    "corrupt_queries",
]

ENV_VAR = "BRACE_MNIST_DIR"
IMAGES_FILE = "t10k-images-idx3-ubyte"
LABELS_FILE = "t10k-labels-idx1-ubyte"
N_TEST_SPLIT = 10_000


@dataclass(frozen=True)
class _Checksum:
    """Pinned digests of one IDX file: of its uncompressed payload, and of the shipped .gz."""

    sha256: str
    md5: str
    n_bytes: int
    gz_sha256: str


#: Pinned digests of the standard MNIST test-split files. ``md5`` is the
#: well-known digest of the uncompressed file (the one torchvision also checks).
CHECKSUMS: Mapping[str, _Checksum] = {
    IMAGES_FILE: _Checksum(
        sha256="0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        md5="2646ac647ad5339dbf082846283269ea",
        n_bytes=7_840_016,
        gz_sha256="167310007f03058885c7e95e6c0b19c20de5c7fd3031f4cbdadc9014a523d80b",
    ),
    LABELS_FILE: _Checksum(
        sha256="ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        md5="27ae3e4e09519cfbb04c329615203637",
        n_bytes=10_008,
        gz_sha256="fc607395669ec21321ea83e4b82c0544b7e8e63ff5b34337c06bc0a17cc0da3c",
    ),
}

# IDX type codes (third magic byte) -> big-endian numpy dtype.
_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


# --------------------------------------------------------------------------- locating


def _file_in(directory: Path, stem: str) -> Path | None:
    """``stem.gz`` if present, else plain ``stem``, else None."""
    for name in (stem + ".gz", stem):
        p = directory / name
        if p.is_file():
            return p
    return None


def _holds_mnist(directory: Path) -> bool:
    return (
        directory.is_dir()
        and _file_in(directory, IMAGES_FILE) is not None
        and _file_in(directory, LABELS_FILE) is not None
    )


def _not_found(tried: list[tuple[str, Path]]) -> FileNotFoundError:
    lines = "; ".join(f"{p} ({why})" for why, p in tried)
    return FileNotFoundError(
        f"MNIST test split not found (tried: {lines}). "
        "Pass --data-dir DIR (or data_dir=DIR in Python) or set "
        f"{ENV_VAR}=DIR, where DIR holds {IMAGES_FILE}.gz and {LABELS_FILE}.gz "
        "(uncompressed copies without .gz also work)."
    )


def find_mnist_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the directory holding the MNIST test-split IDX files.

    Lookup order: the ``data_dir`` argument; else the ``BRACE_MNIST_DIR`` environment
    variable. There is no built-in default location: with neither, or with one that does
    not hold the files, this is an error (no silent fallback to another copy).

    Raises
    ------
    FileNotFoundError
        Naming every path tried and how to point at the data (``--data-dir DIR`` or
        ``BRACE_MNIST_DIR=DIR``).
    """
    if data_dir is not None:
        p = Path(data_dir).expanduser()
        if _holds_mnist(p):
            return p.resolve()
        raise _not_found([("data_dir argument", p)])
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        if _holds_mnist(p):
            return p.resolve()
        raise _not_found([(f"{ENV_VAR} environment variable", p)])
    raise FileNotFoundError(
        f"MNIST test split: no data directory given (data_dir=None and {ENV_VAR} is not "
        f"set). Pass --data-dir DIR (or data_dir=DIR in Python) or set {ENV_VAR}=DIR, "
        f"where DIR holds {IMAGES_FILE}.gz and {LABELS_FILE}.gz (uncompressed copies "
        "without .gz also work)."
    )


# --------------------------------------------------------------------------- reading


def _read_bytes(path: Path) -> bytes:
    """The file's payload, gunzipped when it starts with the gzip magic bytes."""
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(
            f"{path}: corrupt or truncated gzip file ({type(exc).__name__}: {exc}). "
            "Replace it with an intact copy."
        ) from exc


def _parse_idx(payload: bytes, source: str) -> np.ndarray:
    if len(payload) < 4:
        raise ValueError(
            f"{source}: truncated IDX file: {len(payload)} byte(s), shorter than the 4-byte "
            "magic number."
        )
    zero0, zero1, code, ndim = payload[0], payload[1], payload[2], payload[3]
    if zero0 != 0 or zero1 != 0 or code not in _IDX_DTYPES or ndim == 0:
        raise ValueError(
            f"{source}: not an IDX file: bad magic number 0x{payload[:4].hex()} "
            "(expected 0x0000 then a type code in {08,09,0B,0C,0D,0E} and ndim >= 1)."
        )
    header = 4 + 4 * ndim
    if len(payload) < header:
        raise ValueError(
            f"{source}: truncated IDX header: need {header} bytes for {ndim} dimension(s), "
            f"found {len(payload)}."
        )
    dims = tuple(int(d) for d in np.frombuffer(payload, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(payload) != expected:
        what = "truncated" if len(payload) < expected else "has trailing bytes"
        raise ValueError(
            f"{source}: corrupt IDX file ({what}): dims {dims} of {dtype} need {expected} "
            f"bytes, found {len(payload)}."
        )
    arr = np.frombuffer(payload, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one IDX file (gzipped or plain) into a native-endian numpy array.

    Raises :class:`ValueError` on a corrupt gzip stream, a bad magic number, or a payload
    whose length does not match its header.
    """
    p = Path(path)
    return _parse_idx(_read_bytes(p), str(p))


def _verify(stem: str, path: Path, payload: bytes) -> None:
    want = CHECKSUMS[stem].sha256
    got = hashlib.sha256(payload).hexdigest()
    if got != want:
        raise ValueError(
            f"{path}: checksum mismatch for the uncompressed {stem}: "
            f"expected sha256 {want}, got {got}. The file is corrupt or not the MNIST "
            "test split; replace it (or pass verify=False to skip the check)."
        )


def load_mnist_test(
    data_dir: str | os.PathLike[str] | None = None, verify: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Load the MNIST test split: ``(images uint8 (10000, 28, 28), labels uint8 (10000,))``.

    ``data_dir`` is resolved by :func:`find_mnist_dir`. With ``verify`` (default) the
    SHA-256 of each uncompressed payload must match :data:`CHECKSUMS`.
    """
    directory = find_mnist_dir(data_dir)
    arrays = {}
    for stem in (IMAGES_FILE, LABELS_FILE):
        path = _file_in(directory, stem)
        assert path is not None  # find_mnist_dir checked
        payload = _read_bytes(path)
        if verify:
            _verify(stem, path, payload)
        arrays[stem] = _parse_idx(payload, str(path))
    images, labels = arrays[IMAGES_FILE], arrays[LABELS_FILE]
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"{directory}: images must be uint8 of shape (N, 28, 28); "
            f"got {images.dtype} {images.shape}."
        )
    if labels.dtype != np.uint8 or labels.shape != (images.shape[0],):
        raise ValueError(
            f"{directory}: labels must be uint8 of shape ({images.shape[0]},); "
            f"got {labels.dtype} {labels.shape}."
        )
    if labels.size and int(labels.max()) > 9:
        raise ValueError(f"{directory}: labels must lie in 0..9; found {int(labels.max())}.")
    return images, labels


# --------------------------------------------------------------------------- splitting


def split_indices(
    n_total: int,
    *,
    n_bank: int = 1000,
    n_dev: int = 128,
    n_test: int = 256,
    seed: Any,
) -> dict[str, np.ndarray]:
    """Seeded disjoint split of ``range(n_total)`` into bank, dev, test and train.

    One permutation is drawn from ``check_rng(seed)``; its first ``n_bank`` entries are the
    memory bank, the next ``n_dev`` the development queries, the next ``n_test`` the test
    queries, and the rest (``docs/spec.md`` §7: what remains) the VAE training set. Each array keeps
    the drawn order, so ``train[:m]`` is itself a uniformly random subset.

    Returns
    -------
    dict with keys ``"bank"``, ``"dev"``, ``"test"``, ``"train"`` mapping to int64 arrays.
    """
    n_total = check_int_at_least("n_total", n_total, 0)
    n_bank = check_int_at_least("n_bank", n_bank, 0)
    n_dev = check_int_at_least("n_dev", n_dev, 0)
    n_test = check_int_at_least("n_test", n_test, 0)
    need = n_bank + n_dev + n_test
    if need > n_total:
        raise ValueError(
            f"n_bank + n_dev + n_test = {n_bank} + {n_dev} + {n_test} = {need} exceeds "
            f"n_total = {n_total}."
        )
    perm = check_rng(seed).permutation(n_total).astype(np.int64)
    cuts = np.cumsum([n_bank, n_dev, n_test])
    bank, dev, test, train = np.split(perm, cuts)
    return {"bank": bank, "dev": dev, "test": test, "train": train}


# --------------------------------------------------------------------------- PCA


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class PCA2D:
    """A fitted 2-component PCA (centred, not whitened).

    Attributes
    ----------
    mean_ : (d,) array, the mean of the fitted data.
    components_ : (2, d) array with orthonormal rows, the two leading principal axes.
        Sign convention: the largest-magnitude entry of each row is positive.
    explained_variance_ratio_ : (2,) array, share of the total variance per axis.
    """

    mean_: np.ndarray
    components_: np.ndarray
    explained_variance_ratio_: np.ndarray

    def transform(self, Z: Any) -> np.ndarray:
        """Project ``(N, d)`` points to ``(N, 2)`` features: ``(Z - mean_) @ components_.T``."""
        Z = as_float_array("Z", Z)
        d = self.mean_.shape[0]
        if Z.ndim != 2 or Z.shape[1] != d:
            raise ValueError(f"Z must have shape (N, {d}); got {Z.shape}.")
        return (Z - self.mean_) @ self.components_.T

    def inverse_transform(self, F: Any) -> np.ndarray:
        """Map ``(N, 2)`` features back to ``(N, d)``: ``F @ components_ + mean_``."""
        F = as_float_array("F", F)
        if F.ndim != 2 or F.shape[1] != 2:
            raise ValueError(f"F must have shape (N, 2); got {F.shape}.")
        return F @ self.components_ + self.mean_


def fit_pca_2d(latent_means: Any) -> PCA2D:
    """Fit a 2-component PCA (no whitening) by SVD of the centred ``(n, d)`` data.

    Requires ``n >= 2``, ``d >= 2`` and non-zero total variance.
    """
    Z = as_float_array("latent_means", latent_means)
    if Z.ndim != 2 or Z.shape[0] < 2 or Z.shape[1] < 2:
        raise ValueError(f"latent_means must have shape (n, d) with n, d >= 2; got {Z.shape}.")
    mean = Z.mean(axis=0)
    Zc = Z - mean
    _, s, vt = np.linalg.svd(Zc, full_matrices=False)
    total = float(np.sum(s**2))
    if not total > 0:
        raise ValueError("latent_means has zero variance: every row is identical.")
    comps = vt[:2].copy()
    # Deterministic signs (SVD signs are arbitrary): largest-|entry| of each axis positive.
    pivots = np.argmax(np.abs(comps), axis=1)
    comps *= np.sign(comps[np.arange(2), pivots])[:, None]
    return PCA2D(
        mean_=_frozen(mean),
        components_=_frozen(comps),
        explained_variance_ratio_=_frozen(s[:2] ** 2 / total),
    )


# --------------------------------------------------------------------------- queries


def corrupt_queries(features: Any, *, scale: float = 3.0, seed: Any) -> np.ndarray:
    """Strongly corrupted queries (``docs/spec.md`` §7).

    ``q_i = x_i + scale * u_i``, ``u_i ~ N(0, I)``.

    ``features`` is ``(N, d)``; the noise is drawn from ``check_rng(seed)``.
    """
    X = as_float_array("features", features)
    if X.ndim != 2:
        raise ValueError(f"features must have shape (N, d); got {X.shape}.")
    scale = check_nonnegative("scale", scale)
    return X + scale * check_rng(seed).standard_normal(X.shape)
