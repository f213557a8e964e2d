"""Real data sets for the completion experiment: public/private splits, nothing downloaded.

Every data set is split, by a seeded permutation, into a **bank** (the private memories)
and a disjoint **public** split. Whatever the experiment needs besides the bank comes
from the public split or from constants that do not depend on the data: the query
records, the seeds of a synopsis, the preprocessing constants and the support radius.
A bank row can then be replaced (the neighbouring relation of ``docs/privacy.md``)
without changing any of them, so the privacy guarantee of a release covers the whole
pipeline.

Data sets (:data:`NAMES`):

* ``"breast_cancer"``: scikit-learn's ``load_breast_cancer`` (569 × 30, two classes);
  split 419 bank / 150 public, stratified by label; each feature standardised with the
  mean and standard deviation of the **public** split.
* ``"digits"``: scikit-learn's ``load_digits`` (1,797 × 64, ten classes); split 1,397
  bank / 400 public, stratified by label; pixels divided by 16, their public range.
* ``"mnist16"``, ``"mnist64"``: the MNIST test split (10,000 images; located as
  :func:`brace.experiments.mnist_data.find_mnist_dir` does: ``data_dir`` or
  ``$BRACE_MNIST_DIR``); plain seeded split 5,000 bank / 3,000 public / 2,000 PCA-fit;
  pixels divided by 255, their public range, then projected on the leading ``d``
  principal axes of the **PCA-fit part** (disjoint from both bank and public split).
* ``"mnist784"``: the same split, raw pixels divided by 255 (no projection): the data
  set that needs no public data at all (its public domain is ``[0, 1]^784``).
* ``"mnist_rp64"``: the same split, pixels divided by 255, centred at 0.5 and projected
  by a **public** seeded Gaussian matrix ``G`` (784 × 64, entries ``N(0, 1/64)``, from
  the constant seed 784064): nothing is fitted; its public domain is the image of the
  cube, the box ``±0.5·Σ_j |G_jk|`` per coordinate.
* ``"mnist784_7k"``: raw pixels divided by 255 like ``mnist784``, with the largest bank
  a disjoint public split allows: the 5,000 bank images **and** the 2,000 images the
  raw set leaves unused, 7,000 in all; the same 3,000-image public split (its own
  seeded permutation: the experiment seeds each data set apart).

:data:`DOMAINS` gives the public domain (a box) of the sets whose preprocessing is a
data-independent constant — digits and raw MNIST — the ones a synopsis without public
data can use (``docs/privacy-accounting.md`` §15).

scikit-learn ships the two small data sets inside the package (no download); it is in
the ``experiments`` extra.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import as_float_array, check_int_at_least, check_nonnegative, check_rng

__all__ = [
    "NAMES",
    "DOMAINS",
    "FILL_VALUE",
    "RealData",
    "load_real",
    "corrupt",
    "public_radius",
]

NAMES = ("breast_cancer", "digits", "mnist16", "mnist64", "mnist784", "mnist_rp64",
         "mnist784_7k")


def _projection() -> np.ndarray:
    """The public random projection of ``mnist_rp64`` (a constant: seed 784064)."""
    return np.random.default_rng(784064).standard_normal((784, 64)) / 8.0


_HALF = 0.5 * np.abs(_projection()).sum(axis=0)

#: The public domain (a box, after the public scaling) of the sets preprocessed by a
#: constant only; the others are standardised or projected with public data.
DOMAINS: dict[str, tuple] = {"digits": (0.0, 1.0), "mnist784": (0.0, 1.0),
                             "mnist_rp64": (-_HALF, _HALF), "mnist784_7k": (0.0, 1.0)}

#: The value a masked feature is set to by :func:`corrupt`: the public mean after
#: standardisation (breast cancer), a blank pixel (digits), the PCA-fit part's mean image
#: (MNIST). It is a constant, so it reveals nothing about the bank.
FILL_VALUE = 0.0

#: ``(n_bank, n_public)`` of the scikit-learn sets; MNIST: ``(n_bank, n_public, n_pca)``.
SPLITS: dict[str, tuple[int, ...]] = {
    "breast_cancer": (419, 150),
    "digits": (1397, 400),
    "mnist": (5000, 3000, 2000),
}


def _frozen(a: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class RealData:
    """A data set split into a private bank and a disjoint public split.

    Attributes
    ----------
    name : str
        One of :data:`NAMES`.
    bank : (n, d) float64
        The private memories.
    bank_labels : (n,) int64
        Their class labels (used only to score a completion, never by a release).
    public : (m, d) float64
        The public split, disjoint from the bank: query records, seeds of a synopsis,
        radius selection. Preprocessed with the same public constants as the bank.
    public_labels : (m,) int64
    scale_note : str
        Which preprocessing constants are treated as public and where they come from.
    split_note : str
        How the rows were split.
    feature_scale : float
        ``sqrt(mean_j Var_j)`` of the public split: the typical per-feature spread, a
        public unit for the corruption noise (1 after standardisation).
    """

    name: str
    bank: np.ndarray
    bank_labels: np.ndarray
    public: np.ndarray
    public_labels: np.ndarray
    scale_note: str
    split_note: str = ""
    feature_scale: float = 1.0
    extra: dict = field(default_factory=dict)

    @property
    def dim(self) -> int:
        """Feature dimension ``d``."""
        return int(self.bank.shape[1])

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (sizes, notes; no data)."""
        return {
            "name": self.name,
            "n_bank": int(self.bank.shape[0]),
            "n_public": int(self.public.shape[0]),
            "dim": self.dim,
            "n_classes": int(np.unique(np.concatenate([self.bank_labels,
                                                       self.public_labels])).size),
            "feature_scale": float(self.feature_scale),
            "fill_value": FILL_VALUE,
            "scale_note": self.scale_note,
            "split_note": self.split_note,
            **self.extra,
        }


# --------------------------------------------------------------------------- splitting


def _stratified_split(labels: np.ndarray, n_public: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint ``(bank_idx, public_idx)``; each class gets its share of the public split
    (largest remainders), the rows of a class drawn by a seeded permutation."""
    classes, counts = np.unique(labels, return_counts=True)
    want = n_public * counts / labels.size
    quota = np.floor(want).astype(np.int64)
    short = n_public - int(quota.sum())
    quota[np.argsort(-(want - quota), kind="stable")[:short]] += 1
    pub, bank = [], []
    for c, k in zip(classes, quota, strict=True):
        idx = rng.permutation(np.flatnonzero(labels == c))
        pub.append(idx[:k])
        bank.append(idx[k:])
    return (rng.permutation(np.concatenate(bank)).astype(np.int64),
            rng.permutation(np.concatenate(pub)).astype(np.int64))


def _public_std(X: np.ndarray) -> np.ndarray:
    s = X.std(axis=0)
    return np.where(s > 0, s, 1.0)


def _feature_scale(public: np.ndarray) -> float:
    return float(np.sqrt(np.mean(public.var(axis=0))))


# --------------------------------------------------------------------------- loaders


def _load_sklearn(name: str, rng: np.random.Generator) -> RealData:
    try:
        from sklearn import datasets
    except ImportError as exc:  # pragma: no cover - the experiments extra has it
        raise ImportError(
            f"data set {name!r} needs scikit-learn: pip install 'brace-dam[experiments]'."
        ) from exc
    loader = datasets.load_breast_cancer if name == "breast_cancer" else datasets.load_digits
    X, y = loader(return_X_y=True)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    n_bank, n_public = SPLITS[name]
    assert n_bank + n_public == X.shape[0]
    bank_idx, pub_idx = _stratified_split(y, n_public, rng)
    split_note = (f"stratified by label, seeded permutation: {n_bank} bank / {n_public} "
                  "public rows, disjoint")
    if name == "breast_cancer":
        mu = X[pub_idx].mean(axis=0)
        sd = _public_std(X[pub_idx])
        Z = (X - mu) / sd
        note = ("each feature standardised with the mean and standard deviation of the "
                "PUBLIC split (bank rows do not enter them); the fill value 0 is the "
                "public mean")
        extra: dict[str, Any] = {}
    else:
        Z = X / 16.0
        note = ("pixels divided by 16, the public range of the 4-bit intensities "
                "(a data-independent constant); the fill value 0 is a blank pixel")
        extra = {}
    public = Z[pub_idx]
    return RealData(
        name=name, bank=_frozen(Z[bank_idx]), bank_labels=_frozen(y[bank_idx], np.int64),
        public=_frozen(public), public_labels=_frozen(y[pub_idx], np.int64),
        scale_note=note, split_note=split_note, feature_scale=_feature_scale(public),
        extra=extra,
    )


def _pca_axes(X: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, ``(dim, D)`` leading principal axes (largest-|entry| positive) and the share
    of variance they explain."""
    mean = X.mean(axis=0)
    _, s, vt = np.linalg.svd(X - mean, full_matrices=False)
    comps = vt[:dim].copy()
    pivots = np.argmax(np.abs(comps), axis=1)
    comps *= np.sign(comps[np.arange(dim), pivots])[:, None]
    share = float(np.sum(s[:dim] ** 2) / np.sum(s**2))
    return mean, comps, share


def _load_mnist(name: str, dim: int, rng: np.random.Generator,
                data_dir: str | os.PathLike[str] | None) -> RealData:
    from .mnist_data import load_mnist_test

    images, labels = load_mnist_test(data_dir)
    X = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0
    y = labels.astype(np.int64)
    n_bank, n_public, n_pca = SPLITS["mnist"]
    if n_bank + n_public + n_pca > X.shape[0]:
        raise ValueError(f"the MNIST test split holds {X.shape[0]} images; the split needs "
                         f"{n_bank + n_public + n_pca}.")
    perm = rng.permutation(X.shape[0]).astype(np.int64)
    bank_idx = perm[:n_bank]
    pub_idx = perm[n_bank:n_bank + n_public]
    pca_idx = perm[n_bank + n_public:n_bank + n_public + n_pca]
    if name == "mnist_rp64":  # a public random projection: nothing fitted
        G = _projection()
        return RealData(
            name=name, bank=_frozen((X[bank_idx] - 0.5) @ G),
            bank_labels=_frozen(y[bank_idx], np.int64),
            public=_frozen((X[pub_idx] - 0.5) @ G),
            public_labels=_frozen(y[pub_idx], np.int64),
            scale_note=("pixels divided by 255, centred at 0.5 and projected by a public "
                        "seeded Gaussian matrix (784 x 64, seed 784064); nothing fitted; the "
                        "fill value 0 is the projected mid-grey image"),
            split_note=(f"plain seeded permutation of the MNIST test split: {n_bank} bank "
                        f"/ {n_public} public images, disjoint ({n_pca} unused)"),
            feature_scale=_feature_scale((X[pub_idx] - 0.5) @ G))
    if name in ("mnist784", "mnist784_7k"):  # raw pixels: no projection, nothing fitted
        big = name == "mnist784_7k"
        if big:  # the bank takes the images the raw set does not use
            bank_idx = np.concatenate([bank_idx, pca_idx])
        return RealData(
            name=name, bank=_frozen(X[bank_idx]),
            bank_labels=_frozen(y[bank_idx], np.int64), public=_frozen(X[pub_idx]),
            public_labels=_frozen(y[pub_idx], np.int64),
            scale_note=("pixels divided by 255, their public range (a data-independent "
                        "constant); no projection; the fill value 0 is a blank pixel"),
            split_note=(f"plain seeded permutation of the MNIST test split: "
                        f"{bank_idx.size} bank / {n_public} public images, disjoint"
                        + ("" if big else f" ({n_pca} unused)")),
            feature_scale=_feature_scale(X[pub_idx]))
    mean, comps, share = _pca_axes(X[pca_idx], dim)
    public = (X[pub_idx] - mean) @ comps.T
    bank = (X[bank_idx] - mean) @ comps.T
    return RealData(
        name=name, bank=_frozen(bank), bank_labels=_frozen(y[bank_idx], np.int64),
        public=_frozen(public), public_labels=_frozen(y[pub_idx], np.int64),
        scale_note=(f"pixels divided by 255, their public range; PCA to d = {dim} fitted "
                    f"on a separate public part of {n_pca} images (disjoint from the bank "
                    "AND from the public query split); the fill value 0 is that part's "
                    "mean image"),
        split_note=(f"plain seeded permutation of the MNIST test split: {n_bank} bank / "
                    f"{n_public} public / {n_pca} PCA-fit images, disjoint"),
        feature_scale=_feature_scale(public),
        extra={"pca_explained_variance": share},
    )


def load_real(name: str, *, seed: Any, dim: int | None = None,
              data_dir: str | os.PathLike[str] | None = None) -> RealData:
    """Load data set ``name``, split into a private bank and a disjoint public split.

    Parameters
    ----------
    name : {"breast_cancer", "digits", "mnist16", "mnist64", "mnist784", "mnist_rp64",
            "mnist784_7k"}
        ``"mnist"`` with ``dim`` given is also accepted (any ``1 <= dim <= 784``: the PCA);
        ``"mnist784"`` is the raw pixels, ``"mnist_rp64"`` a public random projection.
    seed : int, SeedSequence or numpy Generator
        Drives the split (:func:`brace._validation.check_rng`).
    dim : int, optional
        MNIST only: the PCA dimension (must agree with the name's, when it carries one).
    data_dir : path, optional
        MNIST only: directory of the IDX files (else ``$BRACE_MNIST_DIR``).

    Raises
    ------
    ValueError
        An unknown name or a ``dim`` that does not fit it.
    FileNotFoundError
        MNIST data not found (the message says how to point at it).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}.")
    rng = check_rng(seed)
    if name in ("breast_cancer", "digits"):
        if dim is not None:
            native = 30 if name == "breast_cancer" else 64
            if check_int_at_least("dim", dim, 1) != native:
                raise ValueError(f"{name!r} has d = {native} features; dim = {dim} does "
                                 "not fit (dim applies to the MNIST PCA only).")
        return _load_sklearn(name, rng)
    if name == "mnist_rp64":
        if dim is not None and check_int_at_least("dim", dim, 1) != 64:
            raise ValueError(f"'mnist_rp64' is 64-d; dim = {dim} contradicts it.")
        return _load_mnist("mnist_rp64", 64, rng, data_dir)
    if name in ("mnist784", "mnist784_7k"):
        if dim is not None and check_int_at_least("dim", dim, 1) != 784:
            raise ValueError(f"{name!r} is the raw 784 pixels; dim = {dim} contradicts it.")
        return _load_mnist(name, 784, rng, data_dir)
    if name in ("mnist16", "mnist64", "mnist"):
        named = None if name == "mnist" else int(name[5:])
        if dim is None:
            if named is None:
                raise ValueError("name 'mnist' needs dim (the PCA dimension), or use "
                                 "'mnist16' / 'mnist64'.")
            dim = named
        dim = check_int_at_least("dim", dim, 1)
        if named is not None and dim != named:
            raise ValueError(f"{name!r} is d = {named}; dim = {dim} contradicts it.")
        if dim > 784:
            raise ValueError(f"dim must be at most 784 (28×28 pixels); got {dim}.")
        return _load_mnist(f"mnist{dim}", dim, rng, data_dir)
    raise ValueError(f"unknown data set {name!r}; expected one of {', '.join(NAMES)}.")


# --------------------------------------------------------------------------- queries


def corrupt(records: Any, *, noise: float, mask: float, rng: Any) -> np.ndarray:
    """Corrupted copies of ``records`` ``(Q, d)``: noise, then masking.

    ``q_i = x_i + noise · u_i`` with ``u_i ~ N(0, I_d)`` (``noise`` in the units of the
    features: 1 is one public standard deviation for the standardised breast-cancer
    features; the experiment multiplies by :attr:`RealData.feature_scale` for the
    others); then ``round(mask · d)`` features of each record, chosen uniformly without
    replacement and independently per record, are set to :data:`FILL_VALUE` (0: the
    public fill, see its note). ``rng`` is a seed or Generator
    (:func:`brace._validation.check_rng`).
    """
    X = as_float_array("records", records)
    if X.ndim != 2:
        raise ValueError(f"records must have shape (Q, d); got {X.shape}.")
    noise = check_nonnegative("noise", noise)
    mask = check_nonnegative("mask", mask)
    if mask > 1:
        raise ValueError(f"mask is a fraction of the features, in [0, 1]; got {mask:g}.")
    g = check_rng(rng)
    Q, d = X.shape
    out = X + noise * g.standard_normal(X.shape) if noise > 0 else X.copy()
    k = int(round(mask * d))
    if k and Q:
        cols = np.argsort(g.random((Q, d)), axis=1)[:, :k]
        out[np.arange(Q)[:, None], cols] = FILL_VALUE
    return out


# --------------------------------------------------------------------------- radius


def _sqdist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return np.maximum(d2, 0.0)


def public_radius(public: Any, *, n_bank: int | None = None, target_gate: float = 32.0,
                  queries: Any = None) -> float:
    """A support radius chosen from PUBLIC data only.

    The radius at which a ball around a typical point holds about ``target_gate`` bank
    memories, estimated on the public split: with ``m`` public rows and ``n`` bank rows
    drawn from the same distribution, a ball holding ``k = max(1, round(target_gate ·
    m / n))`` public points holds about ``target_gate`` bank points. The radius is the
    median, over the points of ``queries`` (default: the public rows themselves, each
    leaving itself out), of the distance to the ``k``-th nearest public row. Passing
    corrupted public records as ``queries`` sizes the first gate for corrupted queries.

    ``n_bank`` (the bank size, public under replace-one neighbours) defaults to ``m``.
    Neither the bank nor its labels enter: replacing a bank row leaves the radius as is.
    """
    P = as_float_array("public", public)
    if P.ndim != 2 or P.shape[0] < 2:
        raise ValueError(f"public must have shape (m, d) with m >= 2; got {P.shape}.")
    m = P.shape[0]
    n = m if n_bank is None else check_int_at_least("n_bank", n_bank, 1)
    target = float(target_gate)
    if not (np.isfinite(target) and target >= 1):
        raise ValueError(f"target_gate must be a finite number >= 1; got {target_gate!r}.")
    own = queries is None
    Qs = P if own else as_float_array("queries", queries)
    if Qs.ndim != 2 or Qs.shape[1] != P.shape[1] or Qs.shape[0] < 1:
        raise ValueError(f"queries must have shape (q, {P.shape[1]}) with q >= 1; "
                         f"got {Qs.shape}.")
    k = max(1, int(round(target * m / n)))
    k = min(k, m - 1 if own else m)
    kth = np.empty(Qs.shape[0])
    for lo in range(0, Qs.shape[0], 1024):
        D = _sqdist(Qs[lo:lo + 1024], P)
        if own:
            D[np.arange(D.shape[0]), np.arange(lo, lo + D.shape[0])] = np.inf
        kth[lo:lo + D.shape[0]] = np.partition(D, k - 1, axis=1)[:, k - 1]
    r = float(np.sqrt(np.median(kth)))
    if not r > 0:
        raise ValueError("the public rows coincide: the chosen radius is 0.")
    return r
