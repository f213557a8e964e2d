"""Differentially private clustering peers for ``bench_real.py`` (benchmark code).

* :func:`diffprivlib_kmeans`: IBM diffprivlib's ``KMeans`` (Su et al. 2016, pure ε-DP;
  ``peers`` extra), with public ``bounds``.
* :func:`dp_grams`: DP-GRAMS, private mean shift by per-sample clipping (public, box or
  — outside the guarantee — private-row starting points), written from
  the description in A. Bhattacharjee and A. Auddy, *Differentially Private
  Nonparametric Modal Learning with Applications to Regression and Clustering*
  (arXiv:2607.29675) and its repository https://github.com/ArkaB-DS/DP-GRAMS; no code is
  taken from either. :func:`grams_noise_multiplier` calibrates its Gaussian noise.

Both take the bank as a numpy array and return released centres; nothing else they
compute leaves them.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

__all__ = ["diffprivlib_kmeans", "diffprivlib_unavailable", "dp_grams", "grams_epsilon",
           "grams_noise_multiplier", "merge_points"]


def diffprivlib_unavailable() -> str | None:
    """Why diffprivlib's ``KMeans`` cannot run here (``None`` where it can): not
    installed, or installed beside a scikit-learn it cannot import with (diffprivlib
    0.6.6 needs scikit-learn < 1.7, as the ``peers`` extra pins)."""
    try:
        from diffprivlib.models import KMeans  # noqa: F401
    except ModuleNotFoundError:
        return "diffprivlib not installed (pip install 'brace-dam[peers]')"
    except ImportError as e:
        from importlib.metadata import version

        try:
            sk, dp = version("scikit-learn"), version("diffprivlib")
        except Exception:  # noqa: BLE001 - the versions only decorate the reason
            sk, dp = "?", "?"
        return (f"diffprivlib {dp} cannot import with scikit-learn {sk} ({e}); the "
                f"'peers' extra pins scikit-learn < 1.7")
    return None


def diffprivlib_kmeans(X: Any, k: int, *, epsilon: float, bounds: tuple[Any, Any],
                       seed: int | None = None) -> np.ndarray:
    """Centres ``(k, d)`` of diffprivlib's ε-DP k-means (``diffprivlib.models.KMeans``).

    ``bounds = (lower, upper)`` is the public box (scalars or ``(d,)`` arrays); diffprivlib
    clips the rows to it, so the release is ε-DP (δ = 0) whatever the data. ``seed`` is
    passed as ``random_state``. Raises ImportError without diffprivlib (``peers`` extra).
    """
    from diffprivlib.models import KMeans

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"X must be a non-empty 2-D array; got shape {X.shape}.")
    if not (isinstance(k, int | np.integer) and k >= 1):
        raise ValueError(f"k must be a positive integer; got {k!r}.")
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0; got {epsilon!r}.")
    lo = np.broadcast_to(np.asarray(bounds[0], dtype=np.float64), (X.shape[1],)).copy()
    hi = np.broadcast_to(np.asarray(bounds[1], dtype=np.float64), (X.shape[1],)).copy()
    if not np.all(hi > lo):
        raise ValueError("bounds must satisfy lower < upper in every coordinate.")
    km = KMeans(n_clusters=int(k), epsilon=float(epsilon), bounds=(lo, hi),
                random_state=seed)
    km.fit(X)
    return np.asarray(km.cluster_centers_, dtype=np.float64)


# --------------------------------------------------------------------------- DP-GRAMS

_SWOR_ORDERS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)


def grams_epsilon(noise_multiplier: float, *, delta: float, iters: int, n: int,
                  batch: int) -> float:
    """ε at ``delta`` of ``iters`` DP-GRAMS iterations with noise multiplier ``z``.

    One iteration releases the sum over a batch of the clipped per-sample vectors (norm
    ≤ C) plus ``N(0, (2Cz)² I)``. Neighbouring banks replace one row, so the sum moves by
    at most ``2C`` (L2): a Gaussian mechanism with noise multiplier ``z``. With
    ``batch == n`` the iterations are ``iters`` adaptive Gaussian releases, each
    ``1/(2z²)``-zCDP, composed by brace's Rényi accountant
    (``brace.accounting.RdpAccountant``). With ``batch < n`` each iteration draws a
    fresh batch of ``batch`` rows uniformly without replacement, and dp-accounting's
    Rényi accountant (``NeighboringRelation.REPLACE_ONE``,
    ``SampledWithoutReplacementDpEvent``; Wang, Balle & Kasiviswanathan 2019) gives the
    amplified composition, over the integer orders ``_SWOR_ORDERS`` (a valid bound at
    any set of orders; these keep one evaluation at a few tens of milliseconds).
    """
    if not (noise_multiplier > 0):
        raise ValueError(f"noise_multiplier must be > 0; got {noise_multiplier!r}.")
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1); got {delta!r}.")
    if not (1 <= batch <= n):
        raise ValueError(f"batch must lie in [1, n = {n}]; got {batch!r}.")
    if iters < 1:
        raise ValueError(f"iters must be >= 1; got {iters!r}.")
    if batch == n:
        from brace.accounting import GaussianStep, RdpAccountant

        acc = RdpAccountant().compose(GaussianStep(0.5 / noise_multiplier**2), count=iters)
        return float(acc.get_epsilon(delta))
    import dp_accounting as dpa
    from dp_accounting import rdp

    acc = rdp.RdpAccountant(orders=_SWOR_ORDERS,
                            neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    ev = dpa.SampledWithoutReplacementDpEvent(int(n), int(batch),
                                              dpa.GaussianDpEvent(float(noise_multiplier)))
    acc.compose(dpa.SelfComposedDpEvent(ev, int(iters)))
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=256)
def grams_noise_multiplier(epsilon: float, delta: float, *, iters: int, n: int,
                           batch: int, rtol: float = 1e-4) -> float:
    """The smallest noise multiplier ``z`` (to ``rtol``) whose ``iters`` iterations are
    ``(epsilon, delta)``-DP by :func:`grams_epsilon`: bisection on ``log z`` (ε falls as
    z grows). The returned ``z`` always satisfies ``grams_epsilon(z) <= epsilon``."""
    if not (np.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0; got {epsilon!r}.")

    def eps(z: float) -> float:
        return grams_epsilon(z, delta=delta, iters=iters, n=n, batch=batch)

    hi = 1.0
    while eps(hi) > epsilon:
        hi *= 2.0
        if hi > 1e9:
            raise ValueError(f"no noise multiplier reaches epsilon = {epsilon}.")
    lo = hi / 2.0
    while eps(lo) <= epsilon and lo > 1e-9:
        hi, lo = lo, lo / 2.0
    while hi / lo > 1.0 + rtol:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def merge_points(points: Any, radius: float, order: Any = None) -> np.ndarray:
    """Modes ``(k, d)`` by leader clustering (no chaining): points are visited in
    ``order`` (default: as given); each joins the nearest leader within ``radius``, or
    becomes a new leader; a mode is the mean of its leader's members, modes in the order
    their leaders were made."""
    P = np.asarray(points, dtype=np.float64)
    if P.shape[0] <= 1:
        return P.copy()
    idx = np.arange(P.shape[0]) if order is None else np.asarray(order)
    r2 = float(radius) ** 2
    leaders: list[int] = []
    owner = np.empty(P.shape[0], dtype=np.int64)
    for i in idx:
        if leaders:
            d2 = np.sum((P[leaders] - P[i]) ** 2, axis=1)
            j = int(np.argmin(d2))
            if d2[j] <= r2:
                owner[i] = j
                continue
        owner[i] = len(leaders)
        leaders.append(int(i))
    sums = np.zeros((len(leaders), P.shape[1]))
    np.add.at(sums, owner, P)
    return sums / np.bincount(owner, minlength=len(leaders))[:, None]


def dp_grams(X: Any, *, epsilon: float, delta: float, bandwidth: float,
             n_inits: int | None = None, iters: int | None = None,
             sample_rate: float | None = None, clip: float = 1.0,
             init: Any = "box", bounds: tuple[Any, Any] | None = None,
             merge_radius: float | None = None, seed: int | None = None,
             init_seed: int | None = None, return_info: bool = False) -> Any:
    """DP-GRAMS modes ``(k, d)``: ``(epsilon, delta)``-DP mean shift (replace-one rows).

    After Bhattacharjee & Auddy (arXiv:2607.29675; github.com/ArkaB-DS/DP-GRAMS), who
    read one mean-shift step with a Gaussian kernel of bandwidth ``h`` as a gradient step
    on the log kernel density, ``x + h·ĝ(x)/p̂(x)`` with ``p̂(x) = Σ_i K_i(x)``,
    ``ĝ(x) = Σ_i K_i(x)·u_i(x)``, ``u_i(x) = (X_i − x)/h``, ``K_i(x) = exp(−‖u_i‖²/2)``,
    and privatise it DP-SGD style: per-sample contributions clipped, summed over a random
    batch, Gaussian noise added, for ``iters`` iterations from ``n_inits`` starting points.

    One iteration, for the current points ``x_1..x_k``:

    1. a batch ``B`` of ``m = round(sample_rate·n)`` rows, uniformly without replacement
       (all rows when ``sample_rate = 1``);
    2. row ``i``'s contribution is the vector ``v_i = (K_i(x_j), K_i(x_j)·u_i(x_j))_{j≤k}``
       of length ``k(d+1)``; each block has norm ``e^{−s/2}·sqrt(1+s) ≤ 1``
       (``s = ‖u‖²``), and ``v_i`` is clipped to norm ``clip = C`` as a whole;
    3. release ``S = Σ_{i∈B} v_i + N(0, σ² I)``, ``σ = 2C·z``: replacing one row moves
       the sum by at most ``2C``;
    4. ``x_j ← x_j + h·S_g,j / max(S_p,j, 2σ)`` (post-processing; the floor keeps the
       ratio finite where the noisy mass is at the noise level).

    Accounting (:func:`grams_epsilon`): ``iters`` adaptive (subsampled) Gaussian releases
    with noise multiplier ``z``, calibrated by :func:`grams_noise_multiplier` so the
    whole run is ``(epsilon, delta)``-DP (brace's Rényi accountant at ``sample_rate = 1``;
    dp-accounting's, sampling without replacement, below). ``n`` and every argument are
    public.

    Starting points (``init``):

    * an ``(S, d)`` array of public points (e.g. from a public split);
    * ``"box"``: ``n_inits`` points uniform in the public ``bounds``, drawn from the
      public seed ``init_seed`` (default: the noise stream of ``seed``) — no public data;
    * ``"rows"``: ``n_inits`` **private rows** of ``X``, uniformly without replacement
      (from ``init_seed``, default the noise stream): the paper's own start, a share of
      the data (its repository's default share is 0.1). **Not covered by the guarantee**:
      the starting points are bank rows and no budget is charged for them, so the release
      is not ``(epsilon, delta)``-DP; benchmarks must label it so
      (``dp_grams_private_seeds_uncharged``).

    Departures from the paper, all on the side of the peer's utility or of plain
    privacy: with public or box starts no budget is spent on them (the paper starts from
    a share of the private rows, which its repository can also filter by density); the
    kernel is the plain Gaussian (the paper's higher-order kernels reduce bias under
    extra smoothness); the noise is independent across starting points (the
    repository correlates it through an RBF kernel). The mass and gradient are both
    privatised, so the ratio is post-processing and the clipping bounds the sensitivity
    exactly (a step normalised by the non-private ``Σ_j K_j`` would not be).

    Merge: final points whose last noisy mass ``S_p`` is below ``2σ`` (noise level) are
    dropped (all are kept if none passes); the rest are merged by leader clustering
    (:func:`merge_points`, heaviest noisy mass first) at ``merge_radius`` (default
    ``bandwidth``), modes being the members' means — post-processing of released values.

    Defaults follow the paper: ``iters = ⌈log n⌉``, ``sample_rate = 1/log n`` (batch
    ``n/log n``). With ``return_info=True`` returns ``(modes, info)``, ``info`` a dict
    with ``starts`` (the starting points), ``points`` (final points, before the merge),
    ``mass``, ``noise_multiplier``, ``sigma``, ``batch``, ``iters``, ``accountant`` and
    ``seeds_charged`` (False for ``init="rows"``: the guarantee does not cover that run).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must be a 2-D array with at least 2 rows; got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("X must be finite.")
    n, d = X.shape
    if not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be finite and > 0; got {bandwidth!r}.")
    if not (np.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be finite and > 0; got {clip!r}.")
    T = int(math.ceil(math.log(n))) if iters is None else int(iters)
    if T < 1:
        raise ValueError(f"iters must be >= 1; got {iters!r}.")
    q = 1.0 / math.log(n) if sample_rate is None else float(sample_rate)
    if not (0 < q <= 1):
        raise ValueError(f"sample_rate must lie in (0, 1]; got {sample_rate!r}.")
    m = n if q == 1.0 else min(n, max(1, round(q * n)))
    rng = np.random.default_rng(seed)

    g_init = rng if init_seed is None else np.random.default_rng(init_seed)
    if isinstance(init, str):
        if init not in ("box", "rows"):
            raise ValueError(f"init must be an (S, d) array of public points, 'box' or "
                             f"'rows'; got {init!r}.")
        if n_inits is None or not (isinstance(n_inits, int | np.integer) and n_inits >= 1):
            raise ValueError(f"init={init!r} needs n_inits >= 1; got {n_inits!r}.")
        if init == "rows":
            if n_inits > n:
                raise ValueError(f"init='rows' needs n_inits <= n = {n}; got {n_inits}.")
            P = X[np.sort(g_init.choice(n, size=int(n_inits), replace=False))].copy()
        else:
            if bounds is None:
                raise ValueError("init='box' needs public bounds=(lo, hi).")
            lo = np.broadcast_to(np.asarray(bounds[0], dtype=np.float64), (d,))
            hi = np.broadcast_to(np.asarray(bounds[1], dtype=np.float64), (d,))
            if not np.all(hi > lo):
                raise ValueError("bounds must satisfy lower < upper in every coordinate.")
            P = lo + (hi - lo) * g_init.random((int(n_inits), d))
    else:
        P = np.array(init, dtype=np.float64)
        if P.ndim != 2 or P.shape[1] != d or P.shape[0] < 1:
            raise ValueError(f"init must have shape (S, {d}); got {P.shape}.")
        if n_inits is not None and n_inits != P.shape[0]:
            raise ValueError(f"n_inits = {n_inits} but init holds {P.shape[0]} points.")
    k = P.shape[0]
    starts = P.copy()

    z = grams_noise_multiplier(epsilon, delta, iters=T, n=n, batch=m)
    sigma = 2.0 * clip * z
    floor = 2.0 * sigma
    h = float(bandwidth)
    xsq = np.einsum("ij,ij->i", X, X)
    mass = np.zeros(k)
    for _ in range(T):
        idx = np.arange(n) if m == n else rng.choice(n, size=m, replace=False)
        B = X[idx]
        # s_ij = ‖X_i − x_j‖²/h²; K_ij = exp(−s/2); ‖block_ij‖² = K²(1 + s)
        s = np.maximum(xsq[idx, None] - 2.0 * B @ P.T + np.einsum("ij,ij->i", P, P), 0.0)
        s /= h * h
        K = np.exp(-0.5 * s)
        row_norm = np.sqrt(np.sum(K * K * (1.0 + s), axis=1))
        w = K * np.minimum(1.0, clip / np.maximum(row_norm, 1e-300))[:, None]  # (m, k)
        S_p = w.sum(axis=0) + sigma * rng.standard_normal(k)
        # Σ_i w_ij (X_i − x_j)/h  =  (wᵀB − (Σ_i w_ij) x_j)/h
        S_g = (w.T @ B - w.sum(axis=0)[:, None] * P) / h + sigma * rng.standard_normal((k, d))
        P = P + h * S_g / np.maximum(S_p, floor)[:, None]
        mass = S_p
    keep = mass >= floor
    if not np.any(keep):
        keep[:] = True
    kept = np.flatnonzero(keep)
    modes = merge_points(P[kept], h if merge_radius is None else float(merge_radius),
                         order=np.argsort(-mass[kept], kind="stable"))
    if not return_info:
        return modes
    info = {"starts": starts, "points": P, "mass": mass, "noise_multiplier": z,
            "sigma": sigma, "batch": m, "iters": T,
            "seeds_charged": not (isinstance(init, str) and init == "rows"),
            "accountant": "brace RdpAccountant" if m == n else "dp-accounting RDP (SWOR)"}
    return modes, info
