"""Built-in synthetic data (``docs/spec.md`` §7).

* :func:`sample_mixture`: the three-component mixture of paper §6.1: two dominant
  Gaussian modes at ``(±1, 0)`` and a broader central component between them. The paper
  does not give the weights and spreads; the values below are this library's choice and
  are recorded with every experiment.
* :func:`sample_clusters`: a high-dimensional bank of many clusters of unequal sizes with
  heavy-tailed spread inside a public box (:class:`ClusterSpec`), the benchmark bank of
  ``benchmarks/bench_peers_nopublic.py``; lean enough for ``n = 10^6`` rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ._validation import (
    MAX_OUTPUT_BYTES,
    check_bool,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_rng,
)

__all__ = ["MixtureSpec", "PAPER_MIXTURE", "sample_mixture", "ClusterSpec", "sample_clusters"]


@dataclass(frozen=True)
class MixtureSpec:
    """An axis-aligned Gaussian mixture in ``R^d``: weights, means ``(K, d)``, stds ``(K, d)``."""

    weights: tuple = (0.4, 0.4, 0.2)
    means: tuple = ((-1.0, 0.0), (1.0, 0.0), (0.0, 0.0))
    stds: tuple = ((0.25, 0.25), (0.25, 0.25), (0.55, 0.2))
    extra: dict = field(default_factory=dict)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = np.asarray(self.weights, dtype=np.float64)
        mu = np.asarray(self.means, dtype=np.float64)
        sd = np.asarray(self.stds, dtype=np.float64)
        if w.ndim != 1 or mu.shape != sd.shape or mu.shape[0] != w.size:
            raise ValueError(
                f"mixture shapes disagree: weights {w.shape}, means {mu.shape}, stds {sd.shape}."
            )
        if np.any(w < 0) or not np.isclose(w.sum(), 1.0):
            raise ValueError(f"mixture weights must be >= 0 and sum to 1; got {w.tolist()}.")
        if np.any(sd <= 0):
            raise ValueError(f"mixture stds must be > 0; got {sd.tolist()}.")
        return w, mu, sd

    def to_dict(self) -> dict:
        return asdict(self)


PAPER_MIXTURE = MixtureSpec()


def sample_mixture(
    n: int, *, spec: MixtureSpec = PAPER_MIXTURE, seed: Any = None, return_labels: bool = False
):
    """Draw ``n`` points (rows) from ``spec``; optionally also the component labels."""
    n = check_int_at_least("n", n, 1)
    rng = check_rng(seed)
    w, mu, sd = spec.arrays()
    lab = rng.choice(w.size, size=n, p=w)
    X = mu[lab] + sd[lab] * rng.standard_normal((n, mu.shape[1]))
    return (X, lab) if return_labels else X


# --------------------------------------------------------------------------------------
# many clusters in high dimension
# --------------------------------------------------------------------------------------

_WEIGHTS = ("zipf", "dirichlet", "equal")
_DTYPES = ("float64", "float32")
_CHUNK = 16_384  # rows drawn per block: fixed, so the draws do not depend on memory


@dataclass(frozen=True)
class ClusterSpec:
    """Parameters of :func:`sample_clusters`; recorded with every run (:meth:`to_dict`).

    The public domain is the box ``[-box, box]^d``. Cluster ``j`` has centre ``c_j``
    uniform in the smaller box ``[-(1 - centre_margin)·box, (1 - centre_margin)·box]^d``
    and weight ``w_j``; a row of cluster ``j`` is ``c_j + spread·z·sqrt(df/u)`` with
    ``z ~ N(0, I_d)`` and ``u ~ χ²_df`` independent: a multivariate Student-t of ``df``
    degrees of freedom and scale ``spread`` per coordinate (covariance
    ``spread²·df/(df − 2)·I`` for ``df > 2``; ``df = inf`` gives the Gaussian). With
    ``clip`` the rows are clipped coordinatewise into the public box, so every row lies
    in the domain a private method is told about.

    Weights (``weights``):

    * ``"zipf"`` (default): ``w_j ∝ (j + 1)^(−zipf_exponent)``, exponent 1 by default:
      cluster 0 is the largest, and with ``k = 100`` the largest holds 19 % of the rows
      and the smallest 0.19 % (``1/(k·H_k)``);
    * ``"dirichlet"``: ``w ~ Dirichlet(dirichlet_alpha·1_k)``, drawn from the seed;
    * ``"equal"``: ``w_j = 1/k``.

    Row labels are drawn i.i.d. from ``w``, so cluster sizes are multinomial (a small
    cluster may even be empty).
    """

    n: int
    d: int
    k: int
    weights: str = "zipf"
    zipf_exponent: float = 1.0
    dirichlet_alpha: float = 1.0
    df: float = 3.0
    spread: float = 0.15
    box: float = 1.0
    centre_margin: float = 0.2
    clip: bool = True
    dtype: str = "float64"

    def __post_init__(self) -> None:
        n = check_int_at_least("n", self.n, 1)
        d = check_int_at_least("d", self.d, 1)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "d", d)
        object.__setattr__(self, "k", check_int_at_least("k", self.k, 1))
        if self.weights not in _WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(_WEIGHTS)}; "
                             f"got {self.weights!r}.")
        object.__setattr__(self, "zipf_exponent",
                           check_nonnegative("zipf_exponent", self.zipf_exponent))
        object.__setattr__(self, "dirichlet_alpha",
                           check_positive("dirichlet_alpha", self.dirichlet_alpha))
        object.__setattr__(self, "df", check_positive("df", self.df, allow_inf=True))
        object.__setattr__(self, "spread", check_positive("spread", self.spread))
        object.__setattr__(self, "box", check_positive("box", self.box))
        m = check_nonnegative("centre_margin", self.centre_margin)
        if not m < 1:
            raise ValueError(f"centre_margin must lie in [0, 1); got {m:g}.")
        object.__setattr__(self, "centre_margin", m)
        object.__setattr__(self, "clip", check_bool("clip", self.clip))
        dt = np.dtype(self.dtype).name if not isinstance(self.dtype, str) else self.dtype
        if dt not in _DTYPES:
            raise ValueError(f"dtype must be float64 or float32; got {self.dtype!r}.")
        object.__setattr__(self, "dtype", dt)
        nbytes = n * d * np.dtype(dt).itemsize
        if nbytes > MAX_OUTPUT_BYTES:
            raise ValueError(
                f"a bank of {n} × {d} {dt} would need {nbytes / 2**30:.1f} GiB (limit "
                f"{MAX_OUTPUT_BYTES / 2**30:.0f} GiB); use float32, fewer rows or fewer "
                "dimensions.")

    @property
    def bounds(self) -> tuple[float, float]:
        """The public box ``(−box, box)`` (the same in every coordinate)."""
        return (-self.box, self.box)

    def to_dict(self) -> dict:
        return asdict(self)


def _cluster_weights(spec: ClusterSpec, rng: np.random.Generator) -> np.ndarray:
    k = spec.k
    if spec.weights == "zipf":
        w = np.arange(1, k + 1, dtype=np.float64) ** -spec.zipf_exponent
    elif spec.weights == "dirichlet":
        w = rng.dirichlet(np.full(k, spec.dirichlet_alpha))
    else:
        w = np.ones(k)
    return w / w.sum()


def sample_clusters(n: int, d: int, k: int, *, weights: str = "zipf",
                    zipf_exponent: float = 1.0, dirichlet_alpha: float = 1.0,
                    df: float = 3.0, spread: float = 0.15, box: float = 1.0,
                    centre_margin: float = 0.2, clip: bool = True,
                    dtype: Any = np.float64, seed: Any = None,
                    return_centres: bool = False) -> tuple[np.ndarray, ...]:
    """Draw ``n`` rows in ``R^d`` from ``k`` heavy-tailed clusters of unequal sizes.

    The model and every parameter are described by :class:`ClusterSpec` (record
    ``ClusterSpec(n, d, k, ...).to_dict()`` with a run). Defaults: Zipf weights of
    exponent 1, multivariate Student-t with ``df = 3`` and per-coordinate scale
    ``spread = 0.15``, centres uniform in ``[-0.8, 0.8]^d``, rows clipped into the public
    box ``[-1, 1]^d``, float64.

    Returns ``(X, labels)``: ``X`` of shape ``(n, d)`` and ``dtype`` (float64 or float32),
    ``labels`` ``(n,)`` int64 in ``[0, k)``; with ``return_centres=True`` also the float64
    centres ``(k, d)``. ``seed`` is an int, SeedSequence or Generator
    (:func:`brace._validation.check_rng`); the same seed gives the same bank for either
    dtype up to rounding. Memory: the output plus about ``16,384·d`` float64 of working
    space (1e6 × 128 float64 is 1 GiB; float32 halves it).

    Raises ``ValueError``/``TypeError`` naming the bad argument.
    """
    spec = ClusterSpec(n=n, d=d, k=k, weights=weights, zipf_exponent=zipf_exponent,
                       dirichlet_alpha=dirichlet_alpha, df=df, spread=spread, box=box,
                       centre_margin=centre_margin, clip=clip,
                       dtype=np.dtype(dtype).name if not isinstance(dtype, str) else dtype)
    return _sample(spec, seed, bool(return_centres))


def _sample(spec: ClusterSpec, seed: Any, return_centres: bool) -> tuple[np.ndarray, ...]:
    rng = check_rng(seed)
    n, d = spec.n, spec.d
    w = _cluster_weights(spec, rng)
    half = (1.0 - spec.centre_margin) * spec.box
    centres = half * (2.0 * rng.random((spec.k, d)) - 1.0)
    labels = rng.choice(spec.k, size=n, p=w).astype(np.int64, copy=False)
    X = np.empty((n, d), dtype=spec.dtype)
    heavy = math.isfinite(spec.df)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        z = rng.standard_normal((hi - lo, d))
        scale = np.full(hi - lo, spec.spread)
        if heavy:
            scale *= np.sqrt(spec.df / rng.chisquare(spec.df, size=hi - lo))
        z *= scale[:, None]
        z += centres[labels[lo:hi]]
        if spec.clip:
            np.clip(z, -spec.box, spec.box, out=z)
        X[lo:hi] = z
    return (X, labels, centres) if return_centres else (X, labels)
