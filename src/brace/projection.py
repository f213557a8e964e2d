"""A private, charged dimension reduction before the synopsis without public data
(``snapshot(bounds=…, project=k or "auto")``; ``docs/privacy-accounting.md`` §15.1,
``docs/spec.md`` §8.1).

In high dimension a Voronoi round's noise per coordinate swamps the cell means (its norm
grows as ``√d``), so a synopsis without public data affords few cells. With ``project``
the snapshot first finds a private low-dimensional subspace and runs the synopsis there:

1. the **centre release** and the first **radii release** of :mod:`brace.seeding`, in the
   full space: the private mean ``μ`` (clamped into the domain: post-processing) and the
   private scale ``s₀`` (the median distance of the rows to ``μ``);
2. the **second-moment release** (Analyze Gauss; Dwork, Talwar, Thakurta & Zhang 2014):
   every row ``z = π_D(x)`` gives the integer vector ``u(z) = trunc(t)`` with
   ``t = fl(z − μ)/g`` scaled to norm at most ``2^b`` (``g = c_p·2^-b`` the public grid,
   ``c_p = 0.75·s₀`` the clip), then, exactly in integers, ``Σu² ≤ 4^b`` enforced; the
   statistic ``M = Σ_x u uᵀ`` (exact int64, its upper triangle) gets Gaussian noise of
   variance ``σ² = 16^b/(2ρ_P)`` off the diagonal and ``2σ²`` on it: ``ρ_P``-zCDP,
   because ``½‖uuᵀ − vvᵀ‖_F² ≤ 16^b`` (:func:`moments_weighted_change`);
3. post-processing: the top ``k`` eigenvectors ``V`` of the noisy matrix (``k`` given,
   or ``"auto"``: the number of noisy eigenvalues above the noise's spectral edge
   ``2σ√d``, at least 1 and at most :data:`K_MAX`), quantised to the public basis
   ``B = W·2^-30`` (``W`` integers);
4. the synopsis without public data (:func:`brace.seeding.private_seeds`) run on the
   projected rows ``y(x) = g·2^-30·(Wᵀu(x))`` — an exact integer product, a per-row map
   of released values — in the public ball ``B̄(0, c_p)`` of ``ℝ^k``;
5. post-processing: each attractor ``a`` is mapped back to ``π_D(μ + Bᵀa)``.

Every share of the budget, the clip factor, the grid and ``K_MAX`` are public constants
or functions of ``(ρ, n, d)``; the synopsis's number of rounds is fixed before the bank is
read (from ``k`` or ``K_MAX``), so the whole snapshot is one admission of the filter.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ._exact import noisy_integers
from .seeding import (
    CENTRE_SHARE,
    Domain,
    SeedingPlan,
    _tiles,
    ball_domain,
    bank_size,
    centre_and_scale,
    private_seeds,
)

__all__ = [
    "BASIS_BITS",
    "CLIP_FACTOR",
    "K_MAX",
    "MAX_DIM",
    "MOMENTS_SHARE",
    "SCALE_SHARE",
    "ProjectionPlan",
    "basis_integers",
    "check_project",
    "moments_bits",
    "moments_offsets",
    "moments_stat",
    "moments_weighted_change",
    "private_projected_seeds",
    "project_rows",
    "release_moments",
    "top_directions",
]

MOMENTS_SHARE = 0.5  # share of the zCDP budget spent on the second-moment release
SCALE_SHARE = 0.02  # the full-space radii release (the full-space centre: CENTRE_SHARE)
CLIP_FACTOR = 0.75  # the second moments' clip: this times the private scale s₀
K_MAX = 32  # "auto" keeps at most this many directions
BASIS_BITS = 30  # the basis's public grid: 2^-30
MAX_DIM = 4096  # the d × d matrix of a larger d is refused (memory, time)
#: the second moments' clip ``c_p = 0.75·s₀`` (public once released): ``s₀ ∈ [R₀·2^-12,
#: R₀]`` (the first radii grid) and ``R₀ ∈ [2^-400, 2^400]`` put it in
#: ``[0.75·2^-412, 0.75·2^400]``, so the grid ``g = c_p·2^-b ≥ 2^-433`` and ``g² ≥ 2^-866``
#: are normal and ``‖z − μ‖/g ≤ 2R₀/g < 2^35`` (``privacy-accounting.md`` §15.1)
CLIP_RANGE = (2.0**-413, 2.0**400)
_EXACT_SUM = 1 << 53


def check_project(project: Any, dim: int) -> int | str | None:
    """``None``, ``"auto"`` or an int ``1 ≤ k < d``; the bank's ``d`` at most
    :data:`MAX_DIM` (and at least 2)."""
    if project is None:
        return None
    if isinstance(project, str):
        if project != "auto":
            raise ValueError(f"project must be None, 'auto' or an int k with 1 <= k < d; "
                             f"got {project!r}.")
        k = "auto"
    elif isinstance(project, bool) or not isinstance(project, int | np.integer):
        raise ValueError(f"project must be None, 'auto' or an int k with 1 <= k < d; got "
                         f"{project!r}.")
    else:
        k = int(project)
        if not 1 <= k < dim:
            raise ValueError(f"project = {k} must satisfy 1 <= k < d = {dim} (the number "
                             "of directions kept).")
    if dim < 2:
        raise ValueError("project needs a bank of dimension d >= 2.")
    if dim > MAX_DIM:
        raise ValueError(f"project releases a d x d matrix: d = {dim} is above {MAX_DIM}; "
                         "reduce the dimension with a public map first.")
    return k


# --------------------------------------------------------------------------- the statistic


def moments_bits(n: int, rho: float) -> int:
    """The public grid of the second moments, ``g = c_p·2^-b`` with
    ``b = min(20, ⌊(51 − ⌈log2(n + 1)⌉)/2⌋, ⌊(27 + ⌊log2 sqrt(2ρ)⌋)/2⌋)`` (at least 1):
    ``n·4^b < 2^53`` (every sum of ``n`` products, and the noisy sums, exact in float64)
    and the off-diagonal noise ``σ = 4^b/sqrt(2ρ)`` below ``2^28`` units."""
    b = min(20, (51 - math.ceil(math.log2(n + 1))) // 2,
            (27 + math.floor(math.log2(math.sqrt(2.0 * float(rho))))) // 2)
    return max(int(b), 1)


def moments_offsets(Z: np.ndarray, mean: np.ndarray, clip: float, bits: int) -> np.ndarray:
    """``(b, d)`` int64: each row's integer offset ``u``, a function of the row alone
    (and the public ``mean``, ``clip``, ``bits``): ``t = fl(z − μ)/g`` (``g = clip·2^-b``)
    scaled by ``2^b(1 − 10⁻⁹)/sqrt(fl(Σt²))`` when that exceeds ``4^b``, truncated
    towards zero; then **exactly**, in integers: a row with ``Σu² > 4^b`` (which the
    float scaling already prevents) is replaced by ``sign(u)·⌊|u|·2^b/(⌊√Σu²⌋ + 1)⌋``.
    So ``Σu² ≤ 4^b`` for every row, checked in exact integer arithmetic."""
    A = 1 << bits
    g = float(clip) * 2.0 ** -bits
    with np.errstate(over="ignore", invalid="ignore"):
        t = (np.asarray(Z, dtype=np.float64) - mean) / g
        s = np.einsum("ij,ij->i", t, t)
    if not np.all(np.isfinite(s)):
        raise ValueError("a bank row's offset from the mean is out of float64's range; "
                         "rescale the bank and the domain.")
    big = s > float(A) * float(A)
    if np.any(big):
        t[big] *= (A * (1.0 - 1e-9) / np.sqrt(s[big]))[:, None]
    u = np.trunc(t).astype(np.int64)
    s_int = np.einsum("ij,ij->i", u, u)  # exact: |u_i| <= 2^b, d·4^b < 2^63
    over = np.flatnonzero(s_int > A * A)
    for i in over:  # exact integer rescaling (not reached in practice)
        r = math.isqrt(int(s_int[i])) + 1
        row = [int(v) for v in u[i]]
        u[i] = [(abs(v) * A // r) * (1 if v >= 0 else -1) for v in row]
    return u


def _exact_tile(bits: int) -> int:
    """Rows per float64 product: every partial sum of ``T`` products ``|u_i u_j| ≤ 4^b``
    stays below ``2^53``, so the product is exact whatever its summation order."""
    return max(1, min(4096, _EXACT_SUM // (1 << (2 * bits)) - 1))


def moments_stat(bank: Any, domain: Domain, mean: np.ndarray, clip: float, bits: int
                 ) -> np.ndarray:
    """The exact statistic ``M = Σ_x u(x) u(x)ᵀ`` ``(d, d)`` int64 (grid units ``g²``):
    float64 products of at most :func:`_exact_tile` rows (exact: integers below
    ``2^53``), added in int64."""
    d = domain.centre.shape[0]
    M = np.zeros((d, d), dtype=np.int64)
    T = _exact_tile(bits)
    for Z in _tiles(bank, d, domain):
        U = moments_offsets(Z, mean, clip, bits).astype(np.float64)
        for i in range(0, U.shape[0], T):
            Ub = U[i:i + T]
            M += (Ub.T @ Ub).astype(np.int64)
    return M


def moments_weighted_change(u: np.ndarray, v: np.ndarray) -> int:
    """``‖Δ‖_F² = ‖u‖⁴ + ‖v‖⁴ − 2(u·v)²``, ``Δ = uuᵀ − vvᵀ``, in exact integers: twice
    ``Σ_{i<j} Δ_ij² + ½ Σ_i Δ_ii²``, the quantity whose bound ``16^b`` makes the release
    ``ρ``-zCDP (Lemma 14; at most ``2·16^b`` when ``Σu², Σv² ≤ 4^b``)."""
    a = [int(x) for x in u]
    b = [int(x) for x in v]
    uu = sum(x * x for x in a)
    vv = sum(x * x for x in b)
    uv = sum(x * y for x, y in zip(a, b, strict=True))
    return uu * uu + vv * vv - 2 * uv * uv


def release_moments(bank: Any, domain: Domain, mean: np.ndarray, clip: float, rho: float,
                    noise: str, rng: np.random.Generator | None, n: int
                    ) -> tuple[np.ndarray, dict[str, Any]]:
    """The second-moment release: ``(S, info)``, ``S`` the noisy symmetric ``(d, d)``
    matrix in data units (``g²`` times the noisy integers), ``info`` its public
    parameters (``bits``, ``unit`` g, ``sigma`` off the diagonal and ``sigma_diag``, in
    grid units, the bound ``4^b``). ``ρ``-zCDP (Lemma 14): the upper triangle's integers
    get the discrete Gaussian (``noise="secure"``) or numpy's (``"plain"``) of variance
    ``≥ 16^b/(2ρ)`` off the diagonal and ``≥ 16^b/ρ`` on it."""
    d = domain.centre.shape[0]
    if not CLIP_RANGE[0] <= float(clip) <= CLIP_RANGE[1]:  # public; met inside a snapshot
        raise ValueError(f"the second moments' clip must be in [2^-413, 2^400]; got {clip!r}.")
    bits = moments_bits(n, rho)
    A2 = float(1 << (2 * bits))  # 4^b: the bound on Σu², exact in float64
    M = moments_stat(bank, domain, mean, clip, bits)
    iu = np.triu_indices(d, 1)
    off, s_off = noisy_integers(M[iu], A2, rho, noise, rng)
    diag, s_diag = noisy_integers(np.diagonal(M).copy(), A2, 0.5 * rho, noise, rng)
    S = np.zeros((d, d))
    S[iu] = off
    S = S + S.T
    S[np.diag_indices(d)] = diag
    g = float(clip) * 2.0 ** -bits
    return S * (g * g), {"bits": bits, "unit": g, "sigma": s_off, "sigma_diag": s_diag,
                         "bound": A2}


# --------------------------------------------------------------------------- the subspace


def top_directions(S: np.ndarray, sigma: float, project: int | str, k_max: int
                   ) -> tuple[np.ndarray, np.ndarray, float]:
    """Post-processing of the noisy matrix ``S`` (grid units): ``(V (d, k), eigenvalues
    (k,), edge)``, the top ``k`` eigenvectors (each signed so that its largest-magnitude
    entry is positive), their eigenvalues, and the noise's spectral edge ``2σ√d``;
    ``k = project`` or, for ``"auto"``, the number of eigenvalues above the edge, in
    ``[1, k_max]``."""
    d = S.shape[0]
    w, V = np.linalg.eigh(S)
    w, V = w[::-1], V[:, ::-1]
    edge = 2.0 * float(sigma) * math.sqrt(d)
    k = (int(min(k_max, max(1, int(np.sum(w > edge))))) if project == "auto"
         else int(project))
    V = V[:, :k].copy()
    piv = np.argmax(np.abs(V), axis=0)
    V *= np.where(V[piv, np.arange(k)] < 0, -1.0, 1.0)[None, :]
    return V, w[:k].copy(), edge


def basis_integers(V: np.ndarray) -> np.ndarray:
    """The public integer basis ``W = round(V·2^30)`` ``(d, k)`` int64."""
    return np.rint(np.asarray(V, dtype=np.float64) * 2.0 ** BASIS_BITS).astype(np.int64)


def project_rows(bank: Any, domain: Domain, mean: np.ndarray, clip: float, bits: int,
                 W: np.ndarray) -> np.ndarray:
    """``(n, k)``: every row's projection ``y = g·2^-30·(Wᵀu)``, ``u`` its integer offset
    (:func:`moments_offsets`): ``Wᵀu`` is a float64 product of integers whose partial
    sums stay below ``‖u‖·‖W_j‖ ≤ 2^b(2^30 + √d/2) < 2^53`` — exact, whatever the
    order — so each ``y`` is a function of its row and public values only."""
    Wf = np.asarray(W, dtype=np.float64)
    scale = float(clip) * 2.0 ** -bits * 2.0 ** -BASIS_BITS
    out = [moments_offsets(Z, mean, clip, bits).astype(np.float64) @ Wf
           for Z in _tiles(bank, W.shape[0], domain)]
    return np.concatenate(out, axis=0) * scale


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class ProjectionPlan:
    """The public plan of a projected snapshot, a function of ``(ρ, n, d)``, ``project``
    and the stated knobs: the full-space centre release ``ρ₀ = 0.05ρ``, radii release
    ``ρ_s = 0.02ρ``, second-moment release ``ρ_P = 0.5ρ``; the synopsis in the subspace
    gets ``ρ_S = 0.43ρ`` under a :class:`~brace.seeding.SeedingPlan` whose rounds, shares
    and ``c_min`` are fixed now, at ``k_ref`` = ``k`` (or :data:`K_MAX` for
    ``"auto"``): the events do not depend on the released ``k``; only ``m*`` and ``k₀``
    are recomputed for it (:meth:`at`)."""

    rho: float
    n: int
    rho_centre: float
    rho_scale: float
    rho_moments: float
    rho_synopsis: float
    project: int | str
    k_ref: int
    k_cap: int
    seeding: SeedingPlan

    @classmethod
    def make(cls, rho: float, n: int, dim: int, project: int | str,
             rounds: int | None = None, *, c_min: float | None = None,
             k_cap: int = 64) -> ProjectionPlan:
        rho = float(rho)
        k_ref = min(K_MAX, dim - 1) if project == "auto" else int(project)
        r0, rs, rp = CENTRE_SHARE * rho, SCALE_SHARE * rho, MOMENTS_SHARE * rho
        r_syn = rho - r0 - rs - rp
        plan = SeedingPlan.make(r_syn, n, k_ref, rounds, c_min=c_min, k_cap=k_cap)
        return cls(rho, int(n), r0, rs, rp, r_syn, project, k_ref, int(k_cap), plan)

    def events(self) -> list[float]:
        """The zCDP of every release, in order: the full-space centre and radii
        releases, the second moments, then the synopsis's in the subspace."""
        return [self.rho_centre, self.rho_scale, self.rho_moments, *self.seeding.events()]

    def at(self, k: int) -> SeedingPlan:
        """The synopsis's plan in the released dimension ``k``: the same rounds, zCDP
        shares, ``c_min`` and split rounds (the same events); ``m*`` and ``k₀`` for
        ``k``."""
        p = self.seeding
        return SeedingPlan.make(p.rho, self.n, int(k), p.rounds, c_min=p.c_min,
                                k_cap=self.k_cap, split_rounds=p.split_rounds)

    def to_dict(self) -> dict[str, Any]:
        return {"rho": self.rho, "rho_centre": self.rho_centre,
                "rho_scale": self.rho_scale, "rho_moments": self.rho_moments,
                "rho_synopsis": self.rho_synopsis, "project": self.project,
                "k_ref": self.k_ref, "seeding": self.seeding.to_dict()}


# --------------------------------------------------------------------------- the pipeline


def private_projected_seeds(bank: Any, domain: Domain, plan: ProjectionPlan, *,
                            noise: str, rng: np.random.Generator | None,
                            public_seed: int = 0, merge_radius: float | None = None,
                            min_count: float | None = None, n: int | None = None
                            ) -> dict[str, Any]:
    """Run the releases of a projected snapshot (module docstring) and their
    post-processing. Returns what :func:`brace.seeding.private_seeds` returns (its
    ``attractors`` mapped back into the full space, ``releases`` lifted into it: see
    ``space``) and ``projection``: the public ``mean``, ``clip``, ``bits``, ``basis``
    ``(k, d)``, ``eigenvalues`` (the noisy top ``k``, data units² summed over the rows),
    ``edge``, ``k``, ``residual`` (the noisy mean squared distance of a clipped row from
    the subspace) and the sub-synopsis's ``scale``. The caller admits ``plan.events()``
    through the filter before calling this."""
    n = bank_size(bank) if n is None else int(n)
    # 1. the full-space centre release and radii release (brace.seeding, Lemmas 11, 12)
    mu, s0, releases = centre_and_scale(bank, domain, plan.rho_centre, plan.rho_scale,
                                        noise, rng, n)
    clip = CLIP_FACTOR * s0
    # 2. the second-moment release (Lemma 14)
    S, info = release_moments(bank, domain, mu, clip, plan.rho_moments, noise, rng, n)
    releases.append({"kind": "moments", "centres": mu[None, :], "values": S,
                     "rho": plan.rho_moments, "sigma": info["sigma"],
                     "sigma_diag": info["sigma_diag"], "clip": clip, "unit": info["unit"],
                     "bits": info["bits"], "sensitivity": info["bound"]})
    # 3. post-processing: the subspace
    g2 = info["unit"] ** 2
    V, w, edge = top_directions(S / g2, info["sigma"], plan.project, plan.k_ref)
    k = V.shape[1]
    W = basis_integers(V)
    B = W.T.astype(np.float64) * 2.0 ** -BASIS_BITS  # (k, d): the public basis
    # 4. the synopsis in the subspace, on the projected rows (Theorem 13)
    Y = project_rows(bank, domain, mu, clip, info["bits"], W)
    sub = ball_domain(np.zeros(k), clip)  # radius c_p: in CLIP_RANGE, every scale safe
    out = private_seeds(Y, sub, plan.at(k), noise=noise, rng=rng, public_seed=public_seed,
                        merge_radius=merge_radius, min_count=min_count, n=n)
    # 5. post-processing: back into the full space, and into the domain
    att = domain.clip(mu[None, :] + out["attractors"] @ B)
    for rel in out["releases"]:  # lifted into the full space for the record
        C = np.asarray(rel["centres"])
        lifted = {**rel, "centres": mu[None, :] + C @ B, "space": "projected",
                  "dim": k}
        if rel["kind"] not in ("radii", "pairs"):
            v = np.asarray(rel["values"])
            lifted["values"] = np.concatenate([v[:, :-1] @ B, v[:, -1:]], axis=1)
        releases.append(lifted)
    total = float(np.trace(S))  # Σ‖clip offset‖² (noisy), data units
    residual = max(0.0, (total - float(np.sum(w)) * g2) / n)
    return {**out, "attractors": att, "releases": releases,
            "projection": {"k": k, "mean": mu, "clip": clip, "bits": info["bits"],
                           "basis": B, "eigenvalues": w * g2, "edge": edge * g2,
                           "residual": residual, "scale_full": s0,
                           "sub_scale": out["scale"]}}
