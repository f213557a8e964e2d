"""Private seeds: a synopsis without public data (``docs/privacy-accounting.md`` §15,
``docs/spec.md`` §8.1).

:meth:`brace.PrivateMemory.snapshot` without ``seeds`` finds its own centres inside a
public domain — a box ``bounds=(lo, hi)`` or a ball ``ball=(centre, radius)`` — by a short
sequence of private releases, each one Gaussian release over *disjoint* cells (so its
sensitivity does not grow with the number of cells):

0. every row is first mapped into the domain by a fixed public map (:class:`Domain`:
   coordinatewise clamping to the box, radial projection onto the ball): nothing about
   the bank is learnt for free, and a row outside the domain counts as its clipped self;
1. the **centre release**: one Voronoi round with the single centre ``c₀`` (the domain's
   centre) and clip ``R₀`` (the domain's radius): the noisy sum of the rows' offsets,
   hence their mean ``μ``, clamped into the domain (post-processing; ``n`` is public
   for replace-one neighbours);
2. a **radii release** after each move: the noisy histogram of every row's distance to
   its nearest current centre on a public geometric grid of radii (L2 sensitivity
   ``√2``); its median is the private *scale* ``s``: the next round's clip, the merge
   radius ``s/2`` and the split offset;
3. ``R`` **Voronoi rounds**: every row joins the cell of its nearest centre (no
   cut-off); one Gaussian release gives every cell's sum of offsets clipped to norm
   ``c = s`` (rounded to a public grid) and ``c`` times its count: L2 sensitivity
   ``2a``, ``a ≈ c`` (Lemma 11). Post-processing moves each centre by its shrunk noisy
   clipped mean, drops cells whose noisy count is below the threshold, splits (at the
   public split rounds) every cell whose noisy count can feed two children — the
   children sit at ``±s/4`` along a public random direction, so a cell that holds two
   clusters is cut between them — and merges centres closer than ``s/2``.

Round 1 starts from ``k₀`` centres at ``μ`` plus ``s/2`` along public random directions
(drawn from ``public_seed``). Every public number — the shares of the budget, ``k₀``, the
split threshold — is a function of ``(ρ, n, d, R)`` only (:class:`SeedingPlan`).

Every statistic is an exact integer (grid units, int64 sums), formed row by row from the
row and public values only; with ``noise="secure"`` the noise is the exact discrete
Gaussian from the operating system (:mod:`brace.discrete`), with ``noise="plain"`` a
numpy Gaussian of the same σ (seeded, reproducible).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ._exact import noisy_integers
from ._validation import MAX_RADIUS, MIN_RADIUS, check_bounds, check_int_at_least
from .gates.contract import MAX_COORD
from .synopsis import cell_sensitivity, cell_unit, default_min_count, merge_centres, next_centres

__all__ = [
    "CENTRE_SHARE",
    "DOMAIN_RADIUS_RANGE",
    "MAX_ROUNDS",
    "PAIRS_SHARE",
    "PAIR_NEAR",
    "RADII_SHARE",
    "SCALE_FLOOR",
    "RADII_SENSITIVITY",
    "Domain",
    "SeedingPlan",
    "centre_and_scale",
    "check_clip",
    "check_rounds",
    "clamp_scale",
    "nearest_centres",
    "noisy_integers",
    "pair_histogram",
    "parse_domain",
    "radii_edges",
    "release_pairs",
    "radii_histogram",
    "release_radii",
    "release_voronoi_round",
    "scale_from_radii",
    "voronoi_sensitivity",
    "voronoi_stats",
    "voronoi_unit",
]

CENTRE_SHARE = 0.05  # share of the zCDP budget spent on the centre release
RADII_SHARE = 0.05  # share spent on the R radii releases together
PAIRS_SHARE = 0.05  # share spent on the pair release (§15.2); the rest: the rounds
PAIR_NEAR = 0.25  # a row counts for its pair when its position along the pair is >= this
RADII_OCTAVES = 12  # the radii grid spans R₀·2^-12 .. R₀
RADII_PER_OCTAVE = 4
RADII_SENSITIVITY = math.sqrt(2.0) * (1.0 + 1e-12)  # a radii histogram's L2 sensitivity
_TILE = 1 << 22  # entries of one (rows × centres) block
#: the stated range of a domain's radius (the ball's radius, the box's half-diagonal):
#: with it every scale after admission stays in float64's normal range (privacy.md §8)
DOMAIN_RADIUS_RANGE = (MIN_RADIUS, MAX_RADIUS)  # the support radius's range
#: every released scale ``s`` (a Voronoi round's clip) is clamped into ``[R₀·2^-48, 2R₀]``
SCALE_FLOOR = 2.0**-48
#: at most this many Voronoi rounds (cell rounds, with seeds): each reads the whole bank
MAX_ROUNDS = 64
#: the clips a Voronoi round accepts (public; always met: :data:`SCALE_FLOOR`): ``c²``
#: and ``(unit)²`` normal, every squared distance finite (``privacy-accounting.md`` §15)
CLIP_RANGE = (2.0**-470, 2.0**402)
_U = 2.0 ** -53


# --------------------------------------------------------------------------- the domain


@dataclasses.dataclass(frozen=True)
class Domain:
    """A public domain: a box ``[lo, hi]`` or a ball ``B̄(centre, radius)``.

    ``clip(X)`` is the per-row public map into it (coordinatewise clamping; radial
    projection onto the ball); ``centre`` ``c₀`` and ``radius`` ``R₀`` bound every
    clipped row: ``‖clip(x) − c₀‖ ≤ R₀`` (for the box, ``R₀`` is its half-diagonal from
    the computed centre, rounded up)."""

    kind: str
    lo: np.ndarray | None
    hi: np.ndarray | None
    centre: np.ndarray
    radius: float

    def clip(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if self.kind == "box":
            return np.minimum(np.maximum(X, self.lo), self.hi)
        off = X - self.centre
        with np.errstate(over="ignore", invalid="ignore"):
            nrm = np.sqrt((off * off).sum(axis=1))
        if not np.all(np.isfinite(nrm)):  # a row far beyond float64's range of squares
            big = ~np.isfinite(nrm)
            m = np.abs(off[big]).max(axis=1, keepdims=True)
            nrm[big] = m[:, 0] * np.sqrt(((off[big] / m) ** 2).sum(axis=1))
        with np.errstate(over="ignore"):  # R/tiny: the branch not taken
            f = np.where(nrm > self.radius, self.radius / np.maximum(nrm, 1e-300), 1.0)
        return self.centre + off * f[:, None]

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "box":
            return {"kind": "box", "lo": self.lo.tolist(), "hi": self.hi.tolist()}
        return {"kind": "ball", "centre": self.centre.tolist(), "radius": self.radius}


_MAX_DOMAIN = MAX_COORD[np.dtype(np.float64)]
_DOMAIN_RANGE = ("the domain must lie within the bank's input range |x| <= 2^400 (about "
                 "2.6e120) per coordinate (docs/privacy.md §8); rescale the bank.")


def _check_domain_radius(size: float, what: str) -> None:
    lo, hi = DOMAIN_RADIUS_RANGE
    if not lo <= size <= hi:
        raise ValueError(
            f"the domain's {what} is {size:.6g}; it must be in [2^-400, 2^400] (about "
            "[3.9e-121, 2.6e120]) so that no scale of the snapshot can underflow or "
            "overflow after admission (docs/privacy.md §8); rescale the bank and the "
            "domain.")


def check_rounds(rounds: Any) -> int:
    """A snapshot's number of rounds: an int in ``[1, MAX_ROUNDS]`` (each reads the whole
    bank; refused before admission)."""
    R = check_int_at_least("rounds", rounds, 1)
    if R > MAX_ROUNDS:
        raise ValueError(f"rounds must be at most {MAX_ROUNDS} (each round reads the whole "
                         f"bank); got {R}.")
    return R


def check_clip(clip: float) -> float:
    """A Voronoi round's clip (public) within :data:`CLIP_RANGE`; never refused inside a
    snapshot (its scales are clamped into ``[R₀·2^-48, 2R₀]``, ``R₀`` in range)."""
    c = float(clip)
    if not CLIP_RANGE[0] <= c <= CLIP_RANGE[1]:
        raise ValueError(f"a Voronoi round's clip must be in [2^-470, 2^402]; got {clip!r}.")
    return c


def ball_domain(centre: np.ndarray, radius: float) -> Domain:
    """The ball ``B̄(centre, radius)`` as a :class:`Domain`, without the range checks of
    :func:`parse_domain` (a projected snapshot's subspace, whose radius ``c_p`` is in
    ``[0.75·2^-412, 0.75·2^400]`` by construction, ``brace.projection``)."""
    c = np.asarray(centre, dtype=np.float64)
    return Domain("ball", None, None, c, float(radius) * (1.0 + 1e-9))


def parse_domain(bounds: Any, ball: Any, dim: int) -> Domain:
    """The public domain of a snapshot without seeds: ``bounds=(lo, hi)`` (scalars or
    arrays of length ``d``, finite, ``lo < hi``) or ``ball=(centre, radius)`` (a point of
    ``ℝ^d`` or a scalar broadcast to it, a finite radius ``> 0``) — exactly one. Every
    point of the domain must lie within the bank's input range, ``|x| ≤ 2^400`` per
    coordinate, and its size — the ball's radius, the box's half-diagonal — in
    :data:`DOMAIN_RADIUS_RANGE` ``[2^-400, 2^400]`` (``docs/privacy.md`` §8): refused
    here, from public values, so that no step after admission can underflow or overflow
    (squared distances and clips, the moments' grid, the noise's variance)."""
    if (bounds is None) == (ball is None):
        raise ValueError("a snapshot without seeds needs its public domain: bounds=(lo, hi) "
                         "(a box) or ball=(centre, radius), exactly one of them.")
    if bounds is not None:
        lo, hi = check_bounds(bounds, dim)
        c = lo + 0.5 * (hi - lo)
        half = np.maximum(hi - c, c - lo)
        if max(float(np.abs(lo).max()), float(np.abs(hi).max())) > _MAX_DOMAIN:
            raise ValueError(_DOMAIN_RANGE)
        H = float(np.sqrt(np.sum(half * half)))  # 0 if it underflows: refused
        _check_domain_radius(H, "half-diagonal")
        return Domain("box", lo, hi, c, H * (1.0 + 1e-9))
    try:
        centre, radius = ball
        c = np.broadcast_to(np.asarray(centre, dtype=np.float64), (dim,)).copy()
        R = float(radius)
    except (TypeError, ValueError):
        raise ValueError(f"ball must be (centre, radius), the centre a number or an array of "
                         f"length {dim}; got {ball!r}.") from None
    if not (np.all(np.isfinite(c)) and math.isfinite(R) and R > 0):
        raise ValueError(f"ball must have a finite centre and a finite radius > 0; got "
                         f"{ball!r}.")
    if not float(np.abs(c).max()) + R <= _MAX_DOMAIN:
        raise ValueError(_DOMAIN_RANGE)
    _check_domain_radius(R, "radius")
    return ball_domain(c, R)


# --------------------------------------------------------------------------- one row's cell


def nearest_centres(Z: np.ndarray, C: np.ndarray, Cn2: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row of ``Z`` ``(b, d)``: the index of its nearest centre (lowest index on a
    tie of the *direct* squared distances ``Σ_i fl(z_i − c_i)²``), that distance, and the
    offset ``fl(z − c_j)`` — each a fixed function of the row and the centres.

    A matrix product proposes candidates: ``S_j = ‖c_j‖² − 2 z·c_j`` (any summation
    order: ``|S_j − (‖z − c_j‖² − ‖z‖²)| ≤ e``), and every centre within ``M = 2(e + e')``
    of the smallest ``S`` is a candidate (``e'`` bounds the direct distance's error); the
    direct distances decide among the candidates. Every minimiser of the direct distance
    is a candidate (``docs/privacy-accounting.md`` §15, Lemma 11 (i)), so the answer does
    not depend on how the product was blocked or on the other rows."""
    b, d = Z.shape
    with np.errstate(over="ignore", invalid="ignore"):
        S = Z @ C.T
        S *= -2.0
        S += Cn2[None, :]
        zn = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    cmax = math.sqrt(float(Cn2.max()))
    margin = 16.0 * (d + 4) * _U * (zn * (1.0 + 1e-6) + cmax * (1.0 + 1e-6)) ** 2
    j = np.argmin(S, axis=1)  # the first smallest S
    smin = S[np.arange(b), j]
    if not (np.all(np.isfinite(smin)) and np.all(np.isfinite(margin))):
        raise ValueError("a squared distance between a bank row and a centre is not finite: "
                         "the bank or the centres are out of the float64 range.")
    cand = S <= (smin + margin)[:, None]
    multi = np.flatnonzero(np.count_nonzero(cand, axis=1) > 1)
    if multi.size:  # decide by the direct distances (rare: near-ties within the margin)
        rr, cc = np.nonzero(cand[multi])
        diff = Z[multi[rr]] - C[cc]
        dd = (diff * diff).sum(axis=1)
        best = np.full(multi.size, np.inf)
        np.minimum.at(best, rr, dd)
        first = np.full(multi.size, C.shape[0], dtype=np.int64)
        hit = dd == best[rr]
        np.minimum.at(first, rr[hit], cc[hit])
        j[multi] = first
    off = Z - C[j]
    d2 = (off * off).sum(axis=1)
    return j, d2, off


def _check_range(C: np.ndarray, domain: Domain) -> None:
    """Refuse, from public values only, centres so far out that a squared distance to a
    row of the domain could leave float64's range (no row can then trigger an error)."""
    with np.errstate(over="ignore", invalid="ignore"):
        big = (float(np.abs(C).max(initial=0.0)) + float(np.abs(domain.centre).max())
               + domain.radius) ** 2 * (C.shape[1] + 4) * 4.0
    if not (np.all(np.isfinite(C)) and math.isfinite(big)):
        raise ValueError("the centres are out of float64's range of squared distances; "
                         "rescale the bank and the domain.")


def _tiles(bank: Any, k: int, domain: Domain):
    """The bank's rows, mapped into the domain, in fixed tiles (an array or an
    :class:`~brace.LSRMemory`, read by its verified blocks)."""
    if hasattr(bank, "_blocks"):
        blocks = (Xb for _, Xb in bank._blocks())
    else:
        blocks = (bank,)
    step = max(1, _TILE // max(1, k))
    for B in blocks:
        for i in range(0, B.shape[0], step):
            yield domain.clip(np.asarray(B[i:i + step], dtype=np.float64))


def bank_size(bank: Any) -> int:
    return int(bank.n_memories if hasattr(bank, "n_memories") else bank.shape[0])


# --------------------------------------------------------------------------- the statistics


# A Voronoi round's grid and sensitivity are a cell round's (§14, Lemma 9): the same
# rounded, clipped offset of norm at most ``c`` per row (Lemma 11), the grid capped by
# ``ρ`` as for secure noise. One implementation, in :mod:`brace.synopsis`.
voronoi_unit = cell_unit
voronoi_sensitivity = cell_sensitivity


def voronoi_stats(bank: Any, centres: np.ndarray, clip: float, unit: float,
                  domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """The exact statistic of a Voronoi round: ``(counts (k,) int64, sums (k, d) int64 in
    grid units)``. Row ``x`` is mapped into the domain (``z = domain.clip(x)``), joins
    the cell ``j`` of its nearest centre (:func:`nearest_centres`), and adds
    ``round(o/unit)`` where ``o = fl(z − c_j)``, scaled by ``c/sqrt(Σ o_i²)`` when that
    norm exceeds ``c``; the sums are exact integer additions (every sum below ``2^53``
    units: :func:`voronoi_unit`), so no sum depends on the order of the rows."""
    C = np.asarray(centres, dtype=np.float64)
    _check_range(C, domain)
    k, d = C.shape
    Cn2 = (C * C).sum(axis=1)
    c2 = check_clip(clip) ** 2  # normal: a row beyond the clip is clipped (Lemma 11)
    counts = np.zeros(k, dtype=np.int64)
    sums = np.zeros((k, d), dtype=np.int64)
    for Z in _tiles(bank, k, domain):
        j, d2, off = nearest_centres(Z, C, Cn2)
        big = d2 > c2
        if np.any(big):
            off[big] *= (float(clip) / np.sqrt(d2[big]))[:, None]
        u = np.rint(off / unit).astype(np.int64)
        _add_rows(sums, j, u)
        counts += np.bincount(j, minlength=k)
    return counts, sums


def _add_rows(sums: np.ndarray, j: np.ndarray, u: np.ndarray) -> None:
    """``sums[j[i]] += u[i]`` for every row ``i``, in int64 (exact, any order)."""
    order = np.argsort(j, kind="stable")
    js = j[order]
    starts = np.flatnonzero(np.r_[True, js[1:] != js[:-1]])
    sums[js[starts]] += np.add.reduceat(u[order], starts, axis=0)


def radii_edges(domain_radius: float, around: float | None = None) -> np.ndarray:
    """The public grid of a radii histogram (increasing edges ``e₀ < … < e_L``; bins
    ``[0, e₀), [e₀, e₁), …, [e_L, ∞)``): the first, ``R₀·2^(−i/4)`` for ``i = 48 … 0``;
    a later one, ``around`` (the previous released scale) times ``2^(i/4)``,
    ``i = −8 … 8`` — fewer bins, so less noise accumulates below the median."""
    if around is None:
        i = np.arange(RADII_OCTAVES * RADII_PER_OCTAVE, -1, -1, dtype=np.float64)
        return float(domain_radius) * 2.0 ** (-i / RADII_PER_OCTAVE)
    i = np.arange(-2 * RADII_PER_OCTAVE, 2 * RADII_PER_OCTAVE + 1, dtype=np.float64)
    return float(around) * 2.0 ** (i / RADII_PER_OCTAVE)


def radii_histogram(bank: Any, centres: np.ndarray, edges: np.ndarray,
                    domain: Domain) -> np.ndarray:
    """The exact radii histogram ``(len(edges) + 1,)`` int64: how many rows (mapped into
    the domain) have their direct squared distance to their nearest centre in each bin
    (compared with the squared edges)."""
    C = np.asarray(centres, dtype=np.float64)
    _check_range(C, domain)
    Cn2 = (C * C).sum(axis=1)
    e2 = np.asarray(edges, dtype=np.float64) ** 2
    hist = np.zeros(e2.size + 1, dtype=np.int64)
    for Z in _tiles(bank, C.shape[0], domain):
        _, d2, _ = nearest_centres(Z, C, Cn2)
        hist += np.bincount(np.searchsorted(e2, d2, side="right"), minlength=e2.size + 1)
    return hist


def pair_index(i: np.ndarray, j: np.ndarray, k: int) -> np.ndarray:
    """The position of the unordered pair ``{i, j}`` (``i ≠ j``) in the upper triangle of
    a ``k × k`` matrix, row by row (numpy's ``triu_indices(k, 1)`` order)."""
    a, b = np.minimum(i, j), np.maximum(i, j)
    return a * (2 * k - a - 1) // 2 + (b - a - 1)


def pair_histogram(bank: Any, centres: np.ndarray, domain: Domain,
                   near: float = PAIR_NEAR) -> np.ndarray:
    """The exact pair statistic of §15.2 (``docs/privacy-accounting.md``): ``(k(k−1)/2,)``
    int64, one count per unordered pair of centres (:func:`pair_index` order). Row ``x``
    is mapped into the domain (``z = π_D(x)``); its direct squared distances
    ``D_j = Σ_i fl(z_i − c_{j,i})²`` to every centre (elementwise, summed row by row,
    never by a matrix product) give its nearest centre ``j₁`` and its second nearest
    ``j₂`` (lowest index on a tie); its position along the pair,
    ``t = Σ_i fl(z_i − c_{j₁,i})·fl(c_{j₂,i} − c_{j₁,i}) / Σ_i fl(c_{j₂,i} − c_{j₁,i})²``
    (at most ``1/2`` up to rounding: ``j₁`` is nearer), decides: the row adds 1 to the
    pair ``{j₁, j₂}`` when ``t ≥ near`` (it lies in the half of the segment around the
    bisector), nothing otherwise. Each row adds 1 to at most one entry, a function of
    the row and the public centres only."""
    C = np.asarray(centres, dtype=np.float64)
    _check_range(C, domain)
    k, d = C.shape
    hist = np.zeros(k * (k - 1) // 2, dtype=np.int64)
    if k < 2:
        return hist
    for Z in _tiles(bank, k * d, domain):  # (rows, k, d) differences per tile
        with np.errstate(over="ignore", invalid="ignore"):
            diff = Z[:, None, :] - C[None, :, :]
            d2 = (diff * diff).sum(axis=2)
        rows = np.arange(Z.shape[0])
        j1 = np.argmin(d2, axis=1)  # the first minimum: the lowest index on a tie
        d2[rows, j1] = np.inf
        j2 = np.argmin(d2, axis=1)
        ax = C[j2] - C[j1]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # two equal centres (no axis): nan, never counted; no warning either way
            t = (diff[rows, j1] * ax).sum(axis=1) / (ax * ax).sum(axis=1)
        hit = t >= near
        if np.any(hit):
            hist += np.bincount(pair_index(j1[hit], j2[hit], k), minlength=hist.size)
    return hist


# --------------------------------------------------------------------------- the noise


def release_voronoi_round(bank: Any, centres: np.ndarray, clip: float, rho: float,
                          domain: Domain, noise: str, rng: np.random.Generator | None,
                          n: int | None = None) -> tuple[np.ndarray, float, float]:
    """One Voronoi round: ``(released (k, d + 1), σ, unit)``: every cell's noisy clipped
    offset sum and ``c`` × its noisy count, in the units of the data; ``ρ``-zCDP whatever
    ``k`` (Lemma 11). The noise is added to the exact statistic in grid units; the
    product by the unit comes after it (post-processing)."""
    C = np.asarray(centres, dtype=np.float64)
    n = bank_size(bank) if n is None else n
    unit = voronoi_unit(clip, n, rho)
    sens = voronoi_sensitivity(clip, unit, C.shape[1])
    cnt, sums = voronoi_stats(bank, C, clip, unit, domain)
    per = int(round(float(clip) / unit))  # c/unit = 2^b, an integer
    stacked = np.concatenate([sums, cnt[:, None] * per], axis=1)
    noisy, sigma_u = noisy_integers(stacked, sens / unit, rho, noise, rng)
    return noisy * unit, sigma_u * unit, unit


def release_radii(bank: Any, centres: np.ndarray, edges: np.ndarray, rho: float,
                  domain: Domain, noise: str, rng: np.random.Generator | None
                  ) -> tuple[np.ndarray, float]:
    """One radii release: the noisy radii histogram (L2 sensitivity ``√2``: a replaced
    row leaves one bin and enters one) and its σ; ``ρ``-zCDP."""
    hist = radii_histogram(bank, centres, edges, domain)
    return noisy_integers(hist, RADII_SENSITIVITY, rho, noise, rng)


def release_pairs(bank: Any, centres: np.ndarray, rho: float, domain: Domain, noise: str,
                  rng: np.random.Generator | None) -> tuple[np.ndarray, float]:
    """The pair release (§15.2, Lemma 16): the noisy :func:`pair_histogram` (L2
    sensitivity ``√2``: a replaced row leaves at most one entry and enters at most one)
    and its σ; ``ρ``-zCDP whatever the number of pairs."""
    hist = pair_histogram(bank, centres, domain)
    return noisy_integers(hist, RADII_SENSITIVITY, rho, noise, rng)


def scale_from_radii(noisy: np.ndarray, edges: np.ndarray, n: int) -> float:
    """Post-processing: the median radius from a noisy radii histogram: the upper edge of
    the first bin where the noisy cumulative count reaches ``n/2`` (``n`` is public),
    kept within ``[edges[0], edges[-1]]``."""
    c = np.cumsum(np.asarray(noisy, dtype=np.float64))
    i = int(np.searchsorted(c, 0.5 * n, side="left"))
    return float(edges[min(max(i, 0), edges.size - 1)])


def clamp_scale(scale: float, domain: Domain) -> float:
    """Post-processing of a released scale: clamped into the public ``[R₀·2^-48, 2R₀]``
    (no two points of the domain are farther apart than ``2R₀``; the floor keeps every
    later clip, grid and squared clip in float64's normal range, ``R₀ ≥ 2^-400``)."""
    return min(max(float(scale), SCALE_FLOOR * domain.radius), 2.0 * domain.radius)


def centre_and_scale(bank: Any, domain: Domain, rho_centre: float, rho_radii: float,
                     noise: str, rng: np.random.Generator | None, n: int
                     ) -> tuple[np.ndarray, float, list[dict[str, Any]]]:
    """The first two releases of a snapshot without seeds (module docstring, steps 1 and
    2; also the full-space ones of a projected snapshot, :mod:`brace.projection`):
    ``(μ, s₀, releases)``. The **centre release** (``ρ_centre``): one Voronoi round with
    the single centre ``c₀`` and clip ``R₀``, hence the private mean
    ``μ = π_D(c₀ + V₀/n)``, clamped into the domain (post-processing: every later
    centre then stays within public reach of the domain, so :func:`_check_range` can
    only refuse before the bank is read); the first **radii release** (``ρ_radii``)
    around ``μ`` on the grid :func:`radii_edges` ``(R₀)``, whose median, at most
    ``2R₀`` (no two points of the domain are farther apart), is the scale ``s₀``.
    ``releases`` holds one dict per release, as :func:`private_seeds` records them."""
    d = domain.centre.shape[0]
    c0 = domain.centre[None, :]
    noisy, sigma, unit = release_voronoi_round(bank, c0, domain.radius, rho_centre, domain,
                                               noise, rng, n)
    releases = [{"kind": "centre", "centres": c0, "values": noisy, "rho": rho_centre,
                 "sigma": sigma, "clip": domain.radius, "unit": unit,
                 "sensitivity": voronoi_sensitivity(domain.radius, unit, d)}]
    mu = domain.clip((domain.centre + noisy[0, :-1] / n)[None, :])[0]  # post-processing
    edges = radii_edges(domain.radius)
    h, sigma = release_radii(bank, mu[None, :], edges, rho_radii, domain, noise, rng)
    releases.append({"kind": "radii", "centres": mu[None, :], "values": h,
                     "rho": rho_radii, "sigma": sigma, "edges": edges,
                     "sensitivity": RADII_SENSITIVITY})
    return mu, clamp_scale(scale_from_radii(h, edges, n), domain), releases


# --------------------------------------------------------------------------- the public plan


@dataclasses.dataclass(frozen=True)
class SeedingPlan:
    """The public plan of a snapshot without seeds, a function of ``(ρ, n, d)`` and the
    stated knobs only: the number of Voronoi rounds ``R``; the zCDP of the centre
    release, of each radii release and of each Voronoi round; the count ``m*`` a cell
    needs for its noisy mean to move it by less than about half its clip
    (``m* = c_min·√d·2/sqrt(2ρ_round)``: the sums' noise is ``2/sqrt(2ρ_round)`` clips
    per coordinate); ``k₀ = min(k_cap, ⌊n/m*⌋)`` starting centres (at least 1); the rounds
    after which cells with noisy count ``≥ 2m*`` split.

    Without ``rounds`` (and ``c_min``) the budget decides (:meth:`make`): with ``k₈``
    the starting centres that 8 rounds at ``c_min = 1.5`` afford, ``R = 8`` (``c_min
    = 1.5``) when ``k₈ ≥ 16``, ``R = 5`` when ``k₈ ≥ 8`` and ``R = 3`` below (both at
    ``c_min = 1``): a small budget buys a few accurate rounds rather than many noisy
    ones."""

    rho: float
    rounds: int
    rho_centre: float
    rho_radii: float
    rho_round: float
    m_star: float
    k0: int
    split_rounds: tuple[int, ...]
    c_min: float = 1.5
    rho_pairs: float = 0.0

    @classmethod
    def make(cls, rho: float, n: int, dim: int, rounds: int | None = None, *,
             c_min: float | None = None, k_cap: int = 64,
             split_rounds: tuple[int, ...] | None = None) -> SeedingPlan:
        if rounds is None:
            k8 = cls.make(rho, n, dim, 8, c_min=1.5, k_cap=k_cap).k0
            rounds, auto_c = (8, 1.5) if k8 >= 16 else (5, 1.0) if k8 >= 8 else (3, 1.0)
            c_min = auto_c if c_min is None else c_min
        c_min = 1.5 if c_min is None else float(c_min)
        R = int(rounds)
        rho_c = CENTRE_SHARE * rho
        rho_h = RADII_SHARE * rho / R
        rho_p = PAIRS_SHARE * rho
        rho_r = (1.0 - CENTRE_SHARE - RADII_SHARE - PAIRS_SHARE) * rho / R
        m_star = c_min * math.sqrt(dim) * 2.0 / math.sqrt(2.0 * rho_r)
        k0 = int(max(1, min(k_cap, n // max(m_star, 1.0))))
        if split_rounds is None:  # after rounds 2 and 4 (of 8), scaled to R
            split_rounds = tuple(sorted({max(1, round(R * f)) for f in (0.25, 0.5)}
                                        - {R})) if R >= 3 else ()
        return cls(float(rho), R, rho_c, rho_h, rho_r, float(m_star), k0,
                   tuple(int(t) for t in split_rounds), c_min, rho_p)

    def events(self) -> list[float]:
        """The zCDP of every release of the plan, in order: the centre release, the
        first radii release, then each round followed by its radii release (none after
        the last round), then the pair release (§15.2)."""
        out = [self.rho_centre, self.rho_radii]
        for t in range(self.rounds):
            out.append(self.rho_round)
            if t < self.rounds - 1:
                out.append(self.rho_radii)
        if self.rho_pairs > 0.0:
            out.append(self.rho_pairs)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["split_rounds"] = list(self.split_rounds)
        return d


# --------------------------------------------------------------------------- the pipeline


def merge_weighted(C: np.ndarray, m: np.ndarray, merge_radius: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Post-processing: leader clustering at ``merge_radius`` (heaviest first,
    :func:`brace.synopsis.merge_centres`); count-weighted means, counts added."""
    labels = merge_centres(C, m, merge_radius)
    g = int(labels.max()) + 1
    w = np.maximum(m, 1e-3)
    out = np.zeros((g, C.shape[1]))
    np.add.at(out, labels, C * w[:, None])
    ws = np.zeros(g)
    np.add.at(ws, labels, w)
    cnt = np.zeros(g)
    np.add.at(cnt, labels, m)
    return out / ws[:, None], cnt


def _unit_directions(rng: np.random.Generator, k: int, d: int) -> np.ndarray:
    v = rng.standard_normal((k, d))
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-300)


def private_seeds(bank: Any, domain: Domain, plan: SeedingPlan, *, noise: str,
                  rng: np.random.Generator | None, public_seed: int = 0,
                  merge_radius: float | None = None, min_count: float | None = None,
                  n: int | None = None) -> dict[str, Any]:
    """Run the releases of a snapshot without seeds under ``plan`` (module docstring) and
    their post-processing. Returns ``attractors``, ``counts`` (noisy, merged), ``scale``
    (the last private median radius), ``clip`` (the last round's), ``releases`` (one dict
    per release, in order: ``kind``, the public ``centres`` it used, the noisy
    ``values``, ``rho``, ``sigma``, ``sensitivity``, ``unit``/``edges``) and
    ``trace`` (the number of centres after each round). The caller admits the plan
    through the filter before calling this."""
    n = bank_size(bank) if n is None else int(n)
    d = domain.centre.shape[0]
    prg = np.random.default_rng(public_seed)  # public directions only
    # 1. the centre release (μ, clamped into the domain); 2. the first scale: the median
    # distance to μ
    mu, scale, releases = centre_and_scale(bank, domain, plan.rho_centre, plan.rho_radii,
                                           noise, rng, n)

    def voronoi(C: np.ndarray, clip: float, rho: float) -> tuple[np.ndarray, float]:
        noisy, sigma, unit = release_voronoi_round(bank, C, clip, rho, domain, noise, rng, n)
        releases.append({"kind": "voronoi", "centres": C, "values": noisy, "rho": rho,
                         "sigma": sigma, "clip": clip, "unit": unit,
                         "sensitivity": voronoi_sensitivity(clip, unit, d)})
        return noisy, sigma

    def radii(C: np.ndarray, around: float | None) -> float:
        edges = radii_edges(domain.radius, around)
        h, sigma = release_radii(bank, C, edges, plan.rho_radii, domain, noise, rng)
        releases.append({"kind": "radii", "centres": C, "values": h, "rho": plan.rho_radii,
                         "sigma": sigma, "edges": edges,
                         "sensitivity": RADII_SENSITIVITY})
        return clamp_scale(scale_from_radii(h, edges, n), domain)

    C = mu + 0.5 * scale * _unit_directions(prg, plan.k0, d)
    m = np.full(plan.k0, n / plan.k0)
    trace = []
    thr = 0.0
    for t in range(plan.rounds):
        clip = scale
        if t in plan.split_rounds:
            big = m >= 2.0 * plan.m_star
            if np.any(big):
                v = 0.25 * clip * _unit_directions(prg, int(big.sum()), d)
                C = np.concatenate([C[~big], C[big] + v, C[big] - v])
                m = np.concatenate([m[~big], m[big] / 2, m[big] / 2])
        noisy, sigma = voronoi(C, clip, plan.rho_round)
        thr = (default_min_count(sigma / clip, C.shape[0]) if min_count is None
               else float(min_count))
        C, m = next_centres(C, noisy, clip, 0.0, thr, sigma)
        if t < plan.rounds - 1:
            scale = radii(C, scale)
        mr = 0.5 * scale if merge_radius is None else float(merge_radius)
        C, m = merge_weighted(C, m, mr)
        trace.append(int(C.shape[0]))
    pairs, pairs_sigma = None, None
    if plan.rho_pairs > 0.0:  # the pair release at the final centres (§15.2)
        pairs, pairs_sigma = release_pairs(bank, C, plan.rho_pairs, domain, noise, rng)
        releases.append({"kind": "pairs", "centres": C, "values": pairs,
                         "rho": plan.rho_pairs, "sigma": pairs_sigma,
                         "sensitivity": RADII_SENSITIVITY})
    return {"attractors": C, "counts": m, "scale": scale, "clip": clip, "mean": mu,
            "pairs": pairs, "pairs_sigma": pairs_sigma,
            "releases": releases, "trace": trace, "min_count": thr,
            "merge_radius": 0.5 * scale if merge_radius is None else float(merge_radius)}
