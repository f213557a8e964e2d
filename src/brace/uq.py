"""Uncertainty quantification for private retrieval (spec §6; paper §5.3, Thm 4–5).

Derivation, assumptions and what an interval reveals: ``docs/uq.md``. Symbols follow the
spec: bank ``D = (X_1..X_n)`` i.i.d. from ``P`` (density ``f``), radius ``r``, query ``q``,
gate ``B_t = B̄(z_{t-1}, r)``, clean trajectory ``z_t = Φ_D(z_{t-1})``, released ``Y_t``.

Two targets, two error sources, reported separately:

* **bank** ``z_t`` (noiseless retrieval on this bank). ``Y_t − z_t`` given ``D`` is the
  privacy error (the paper's ``−C_t + ξ_t``): Gaussian noise with the released per-step
  std, propagated through non-corrected steps by the Jacobian ``J_t`` of the gate mean
  (:func:`privacy_covariance`). Exact (no linearisation) for ``T = 1``, the endpoint
  method, BRACE with ``κ = 0`` and every activated BRACE step, as long as neither
  projection is active. Where the linear model is unreliable (projections; privacy noise
  so small that the lumps of the empirical map matter), :func:`analyze` simulates the
  exact conditional law by re-running the mechanism on the bank and calibrates the
  regions by conformal ranks (``privacy="auto"``, the default).
* **population** ``z̄_t`` (``z̄_0 = q``, ``z̄_t = E[X | ‖X − z̄_{t-1}‖ ≤ r]``).
  ``Y_t − z̄_t = (Y_t − z_t) + (z_t − z̄_t)``; the sampling part satisfies
  ``√n (z_{1:T} − z̄_{1:T}) ⇒ N(0, Σ)`` with ``Σ = L Γ Lᵀ`` (delta method,
  :func:`sampling_covariance`): ``Γ_{st} = E[ψ_s ψ_tᵀ]``,
  ``ψ_t(x) = 1{‖x − z̄_{t-1}‖ ≤ r}(x − z̄_t)/p_t``, ``L_{ts} = J_t J_{t-1} ⋯ J_{s+1}`` and

      J_t = (1/p_t) ∮_{‖x − z̄_{t-1}‖ = r} f(x) (x − z̄_t) ν(x)ᵀ dS(x),   ν = (x − z̄_{t-1})/r,

  the boundary-surface term of the moving gate. A nonparametric bootstrap estimates the
  same ``Σ`` independently.

:class:`MixturePopulation` gives the exact ``z̄_t``, ``J_t`` and ``Σ`` for a 2-D Gaussian
mixture (polar quadrature); :func:`analyze` turns a :class:`~brace.PrivateRetrievalResult`
and its memory into a :class:`RetrievalUQ`, whose ``confidence_region(target, level)``
returns per-step and simultaneous regions; :func:`public_region` is the variant computed
from the released ``Y`` and public parameters only.
"""

from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validation import (
    as_float_array,
    check_int_at_least,
    check_positive,
    check_queries,
    check_rng,
    check_steps,
)
from .datasets import MixtureSpec
from .mechanisms import PrivateRetrievalResult
from .memory import LSRMemory

__all__ = [
    "UQWarning",
    "MixturePopulation",
    "SamplingCovariance",
    "sampling_covariance",
    "privacy_covariance",
    "ConfidenceRegion",
    "RetrievalUQ",
    "analyze",
    "public_region",
    "default_bandwidth",
    "add_cli",
]

TARGETS = ("bank", "population")
KINDS = ("step", "joint", "bonferroni", "interval", "box")
BANDWIDTH_CONSTANT = 1.0  # b = BANDWIDTH_CONSTANT · r · n^{-1/5} (docs/uq.md §3)
_BLOCK_ELEMS = 1 << 21


class UQWarning(UserWarning):
    """An uncertainty statement is unreliable (e.g. a gate holds too few memories)."""


# ============================================================================ population


@dataclass(frozen=True)
class MixturePopulation:
    """A known 2-D axis-aligned Gaussian mixture as the population ``P`` (spec §6).

    Every ball and sphere integral is computed in polar coordinates around the ball's
    centre: the angle by the trapezoid rule (the integrand is periodic and analytic, so
    it converges geometrically), the radius by Gauss–Legendre. Integrals over the
    intersection of two balls clip each ray to the second ball analytically; the angular
    integrand then has kinks, so those use ``n_angular_clip`` nodes (error O(N⁻²)).

    Parameters
    ----------
    spec : MixtureSpec
        Weights, means and per-axis stds (``d = 2``).
    n_radial, n_angular, n_angular_clip : int
        Quadrature nodes (defaults give ≈ 1e-12 relative accuracy for the ball moments
        of the paper's mixture; ``tests/test_uq.py`` checks convergence by doubling).

    Examples
    --------
    >>> from brace.datasets import PAPER_MIXTURE
    >>> pop = MixturePopulation(PAPER_MIXTURE)
    >>> pop.trajectory([0.4, 0.25], radius=0.8, steps=2).round(4).tolist()
    [[0.4, 0.25], [0.6461, 0.0397], [0.8226, 0.0032]]
    """

    spec: MixtureSpec
    n_radial: int = 64
    n_angular: int = 256
    n_angular_clip: int = 4096

    # ---------------------------------------------------------------- basic pieces
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w, mu, sd = self.spec.arrays()
        if mu.shape[1] != 2:
            raise ValueError(
                "MixturePopulation integrates in polar coordinates and needs d = 2; "
                f"the mixture has d = {mu.shape[1]}."
            )
        return w, mu, sd

    @property
    def dim(self) -> int:
        return 2

    def density(self, x: Any) -> np.ndarray:
        """Mixture density ``f(x)`` at points ``x`` of shape ``(..., 2)``."""
        w, mu, sd = self._arrays()
        x = as_float_array("x", x)
        if x.shape[-1] != 2:
            raise ValueError(f"x must have shape (..., 2); got {x.shape}.")
        out = np.zeros(x.shape[:-1])
        for k in range(w.size):
            u = (x - mu[k]) / sd[k]
            out += w[k] * np.exp(-0.5 * (u * u).sum(-1)) / (2.0 * math.pi * sd[k].prod())
        return out

    def sample(self, n: int, *, seed: Any = None) -> np.ndarray:
        """``n`` i.i.d. rows from ``P`` (via :func:`brace.datasets.sample_mixture`)."""
        from .datasets import sample_mixture

        self._arrays()
        return sample_mixture(n, spec=self.spec, seed=seed)

    def _centre(self, c: Any, name: str = "centre") -> np.ndarray:
        self._arrays()  # the mixture's own dimension is checked first
        c = as_float_array(name, c)
        if c.shape != (2,):
            raise ValueError(f"{name} must have shape (2,); got {c.shape}.")
        return c

    def ball_moments(
        self, centre: Any, radius: float, *, clip: tuple[Any, float] | None = None
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """``(M0, M1, M2) = ∫_A f(x)·(1, x, x xᵀ) dx`` over ``A = B̄(centre, radius)``,
        or over ``A = B̄(centre, radius) ∩ B̄(clip[0], clip[1])`` when ``clip`` is given."""
        self._arrays()
        c = self._centre(centre)
        r = check_positive("radius", radius)
        if clip is None:
            n_ang = self.n_angular
        else:
            n_ang = self.n_angular_clip
            c2 = self._centre(clip[0], "clip centre")
            r2 = check_positive("clip radius", clip[1])
        theta = 2.0 * math.pi * np.arange(n_ang) / n_ang
        u = np.stack([np.cos(theta), np.sin(theta)], axis=1)  # (A, 2)
        lo = np.zeros(n_ang)
        hi = np.full(n_ang, r)
        if clip is not None:
            # ray c + ρu inside B̄(c2, r2)  ⇔  ρ² + 2ρ b + e ≤ 0, b = u·(c − c2)
            b = u @ (c - c2)
            e = float((c - c2) @ (c - c2)) - r2 * r2
            disc = b * b - e
            root = np.sqrt(np.maximum(disc, 0.0))
            lo = np.maximum(lo, -b - root)
            hi = np.where(disc >= 0.0, np.minimum(hi, -b + root), 0.0)
            hi = np.maximum(hi, lo)
        g, gw = np.polynomial.legendre.leggauss(self.n_radial)
        half = 0.5 * (hi - lo)
        rho = lo[:, None] + half[:, None] * (g[None, :] + 1.0)  # (A, R)
        wts = half[:, None] * gw[None, :] * rho * (2.0 * math.pi / n_ang)
        pts = c + rho[..., None] * u[:, None, :]  # (A, R, 2)
        fw = self.density(pts) * wts
        m0 = float(fw.sum())
        m1 = np.einsum("ar,ari->i", fw, pts)
        m2 = np.einsum("ar,ari,arj->ij", fw, pts, pts)
        return m0, m1, m2

    def sphere_moments(self, centre: Any, radius: float) -> tuple[np.ndarray, np.ndarray]:
        """``(S0, S1) = ∮_{‖x − c‖ = r} f(x) (ν, x νᵀ) dS`` with outward normal
        ``ν = (x − c)/r`` (trapezoid rule in the angle)."""
        self._arrays()
        c = self._centre(centre)
        r = check_positive("radius", radius)
        n_ang = self.n_angular
        theta = 2.0 * math.pi * np.arange(n_ang) / n_ang
        u = np.stack([np.cos(theta), np.sin(theta)], axis=1)
        pts = c + r * u
        fw = self.density(pts) * (r * 2.0 * math.pi / n_ang)
        s0 = (fw[:, None] * u).sum(0)
        s1 = np.einsum("a,ai,aj->ij", fw, pts, u)
        return s0, s1

    # ------------------------------------------------------------------ the map Φ
    def gate_probability(self, centre: Any, radius: float) -> float:
        """``p(c) = P(‖X − c‖ ≤ r)``."""
        return self.ball_moments(centre, radius)[0]

    def phi(self, centre: Any, radius: float) -> np.ndarray:
        """Population gate mean ``Φ(c) = E[X | ‖X − c‖ ≤ r]``."""
        m0, m1, _ = self.ball_moments(centre, radius)
        if not m0 > 0:
            raise ValueError(f"the population gate at {centre} has probability 0.")
        return m1 / m0

    def jacobian(self, centre: Any, radius: float) -> np.ndarray:
        """``∂Φ/∂c = (1/p) ∮ f(x)(x − Φ(c)) νᵀ dS`` — the boundary-surface term
        (docs/uq.md §2); entry ``[j, k] = ∂Φ_j/∂c_k``."""
        m0, m1, _ = self.ball_moments(centre, radius)
        s0, s1 = self.sphere_moments(centre, radius)
        mean = m1 / m0
        return (s1 - np.outer(mean, s0)) / m0

    def trajectory(self, query: Any, *, radius: float, steps: int) -> np.ndarray:
        """``z̄_0 = q, z̄_t = Φ(z̄_{t-1})``, shape ``(steps + 1, 2)``."""
        T = check_steps(steps)
        z = [self._centre(query, "query")]
        for _ in range(T):
            z.append(self.phi(z[-1], radius))
        return np.array(z)

    def gate_probabilities(self, query: Any, *, radius: float, steps: int) -> np.ndarray:
        """``p_t = P(‖X − z̄_{t-1}‖ ≤ r)`` for ``t = 1..T``."""
        z = self.trajectory(query, radius=radius, steps=steps)
        return np.array([self.gate_probability(c, radius) for c in z[:-1]])

    def jacobians(self, query: Any, *, radius: float, steps: int) -> np.ndarray:
        """``J_t = ∂Φ/∂c`` at ``z̄_{t-1}``, shape ``(T, 2, 2)``."""
        z = self.trajectory(query, radius=radius, steps=steps)
        return np.array([self.jacobian(c, radius) for c in z[:-1]])

    def sampling_covariance(self, query: Any, *, radius: float, steps: int) -> np.ndarray:
        """Exact asymptotic covariance ``Σ`` of ``√n (z_{1:T} − z̄_{1:T})``, ``(2T, 2T)``
        (stacked by step): ``Σ = L Γ Lᵀ`` (docs/uq.md §2)."""
        T = check_steps(steps)
        z = self.trajectory(query, radius=radius, steps=T)
        r = float(radius)
        d = 2
        p = np.empty(T)
        G = np.zeros((T * d, T * d))
        for s in range(1, T + 1):
            for t in range(s, T + 1):
                clip = None if s == t else (z[t - 1], r)
                m0, m1, m2 = self.ball_moments(z[s - 1], r, clip=clip)
                if s == t:
                    p[t - 1] = m0
                zs, zt = z[s], z[t]
                blk = m2 - np.outer(m1, zt) - np.outer(zs, m1) + m0 * np.outer(zs, zt)
                G[(s - 1) * d : s * d, (t - 1) * d : t * d] = blk
                G[(t - 1) * d : t * d, (s - 1) * d : s * d] = blk.T
        scale = np.repeat(1.0 / p, d)
        G *= scale[:, None] * scale[None, :]
        J = np.array([self.jacobian(c, r) for c in z[:-1]])
        L = _propagator(J[None])[0]
        return L @ G @ L.T

    def monte_carlo_trajectory(
        self,
        query: Any,
        *,
        radius: float,
        steps: int,
        n_samples: int = 10_000_000,
        chunk: int = 1_000_000,
        seed: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Monte Carlo ``(z̄_{0..T}, p_{1..T})`` from ``n_samples`` draws, in chunks of
        ``chunk`` rows (the same draws are regenerated at every step, so memory stays
        ``O(chunk)``). Used to validate the quadrature."""
        T = check_steps(steps)
        N = check_int_at_least("n_samples", n_samples, 1)
        C = check_int_at_least("chunk", chunk, 1)
        r2 = check_positive("radius", radius) ** 2
        root = np.random.SeedSequence(check_rng(seed).integers(0, 2**63))
        seeds = root.spawn((N + C - 1) // C)
        z = [self._centre(query, "query")]
        p = []
        for _ in range(T):
            cnt = 0
            acc = np.zeros(2)
            for i, ss in enumerate(seeds):
                X = self.sample(min(C, N - i * C), seed=ss)
                diff = X - z[-1]
                mask = np.einsum("ij,ij->i", diff, diff) <= r2
                cnt += int(mask.sum())
                acc += X[mask].sum(0)
            z.append(acc / cnt if cnt else z[-1])
            p.append(cnt / N)
        return np.array(z), np.array(p)


# ============================================================================ helpers


def _propagator(F: np.ndarray) -> np.ndarray:
    """Block lower-triangular ``L`` (Q, Td, Td) of the recursion ``e_t = F_t e_{t-1} + w_t``:
    ``e_{1:T} = L w_{1:T}``, ``L_{tt} = I``, ``L_{ts} = F_t F_{t-1} ⋯ F_{s+1}`` (s < t)."""
    Q, T, d, _ = F.shape
    L = np.zeros((Q, T * d, T * d))
    eye = np.broadcast_to(np.eye(d), (Q, d, d))
    for t in range(T):
        L[:, t * d : (t + 1) * d, t * d : (t + 1) * d] = eye
        for s in range(t):
            prev = L[:, (t - 1) * d : t * d, s * d : (s + 1) * d]
            L[:, t * d : (t + 1) * d, s * d : (s + 1) * d] = F[:, t] @ prev
    return L


def default_bandwidth(n: int, radius: float) -> float:
    """Radial bandwidth of the Jacobian's sphere-kernel estimator,
    ``b = BANDWIDTH_CONSTANT · r · n^{-1/5}``, capped at ``r/2`` (docs/uq.md §3)."""
    return min(BANDWIDTH_CONSTANT * radius * n ** (-0.2), 0.5 * radius)


def _epanechnikov(u: np.ndarray) -> np.ndarray:
    return 0.75 * np.maximum(1.0 - u * u, 0.0)


def _check_level(level: Any) -> float:
    v = check_positive("level", level)
    if not v < 1.0:
        raise ValueError(f"level must lie in (0, 1). Found {v}.")
    return v


def _check_target(target: Any) -> str:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}; got {target!r}.")
    return target


def _blocks(cov: np.ndarray, S: int, d: int) -> np.ndarray:
    """Diagonal (per-step) blocks (Q, S, d, d) of a stacked (Q, Sd, Sd) covariance."""
    Q = cov.shape[0]
    c = cov.reshape(Q, S, d, S, d)
    return np.stack([c[:, s, :, s, :] for s in range(S)], axis=1)


def _select(cov: np.ndarray, idx: list[int], d: int) -> np.ndarray:
    """Sub-covariance of the steps ``idx`` (0-based) of a stacked covariance."""
    cols = np.concatenate([np.arange(i * d, (i + 1) * d) for i in idx])
    return cov[:, cols[:, None], cols[None, :]]


def _mahalanobis2(cov: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``xᵀ C⁻¹ x`` per row, (Q, k, k) and (Q, k) -> (Q,). NaN where ``C`` has NaN; a
    singular ``C`` uses the pseudo-inverse (a degenerate, flat region)."""
    out = np.full(x.shape[0], np.nan)
    ok = np.all(np.isfinite(cov), axis=(1, 2)) & np.all(np.isfinite(x), axis=1)
    if not ok.any():
        return out
    C, v = cov[ok], x[ok]
    try:
        Lc = np.linalg.cholesky(C)
        w = np.linalg.solve(Lc, v[..., None])[..., 0]
        out[ok] = (w * w).sum(-1)
    except np.linalg.LinAlgError:
        Ci = np.linalg.pinv(C, hermitian=True)
        out[ok] = np.einsum("qi,qij,qj->q", v, Ci, v)
    return out


# ============================================================================ sampling part


@dataclass(frozen=True)
class SamplingCovariance:
    """Estimated covariance of ``√n (z_{1:T} − z̄_{1:T})`` for each query (spec §6).

    Attributes
    ----------
    estimator : {"delta", "bootstrap"}
    n : int — bank size.
    trajectory : (Q, T+1, d) the clean trajectory ``z_{0..T}`` of the bank — **not
        private**: never release it.
    cov : (Q, Td, Td) ``Σ̂`` on the root-n scale, stacked by step (``Var(z_t − z̄_t)`` is
        ``cov / n``). NaN for queries whose gate holds fewer than 2 memories.
    jacobians : (Q, T, d, d) sphere-kernel estimates ``Ĵ_t`` (used by both estimators'
        callers for the privacy propagation).
    gate_counts : (Q, T) ``m_t = |I(D, z_{t-1})|``.
    boundary_moment : (Q, T) sphere-kernel estimate of ``∮ f(x) ‖x − z_t‖² dS`` on
        ``{‖x − z_{t-1}‖ = r}`` (drives the non-linearity diagnostic of :func:`analyze`).
    bandwidth : float — radial kernel bandwidth ``b`` of ``Ĵ_t``.
    n_boot : int or None — bootstrap resamples.
    """

    estimator: str
    n: int
    trajectory: np.ndarray
    cov: np.ndarray
    jacobians: np.ndarray
    gate_counts: np.ndarray
    boundary_moment: np.ndarray
    bandwidth: float
    n_boot: int | None = None

    @property
    def steps(self) -> int:
        return self.trajectory.shape[1] - 1

    def block(self, t: int, s: int | None = None) -> np.ndarray:
        """``Σ̂_{ts}`` (Q, d, d) for 1-based steps (``s = t`` by default)."""
        s = t if s is None else s
        d = self.trajectory.shape[2]
        return self.cov[:, (t - 1) * d : t * d, (s - 1) * d : s * d]

    def relative_difference(self, other: SamplingCovariance) -> dict[str, np.ndarray]:
        """Relative Frobenius distance ``‖A − B‖_F / ‖B‖_F`` to ``other`` (= B): per step
        (diagonal blocks, (Q, T)), on the whole stacked matrix ((Q,)), and per entry of the
        diagonal (variances, (Q, Td))."""
        if other.cov.shape != self.cov.shape:
            raise ValueError(
                f"covariance shapes differ: {self.cov.shape} vs {other.cov.shape}."
            )
        T = self.steps
        d = self.trajectory.shape[2]
        a, b = _blocks(self.cov, T, d), _blocks(other.cov, T, d)
        per_step = np.linalg.norm(a - b, axis=(2, 3)) / np.linalg.norm(b, axis=(2, 3))
        joint = np.linalg.norm(self.cov - other.cov, axis=(1, 2)) / np.linalg.norm(
            other.cov, axis=(1, 2)
        )
        da = np.diagonal(self.cov, axis1=1, axis2=2)
        db = np.diagonal(other.cov, axis1=1, axis2=2)
        return {"per_step": per_step, "joint": joint, "variances": np.abs(da - db) / db}

    def to_dict(self, *, include_trajectory: bool = False) -> dict:
        out = {
            "estimator": self.estimator,
            "n": self.n,
            "cov_root_n": self.cov.tolist(),
            "jacobians": self.jacobians.tolist(),
            "gate_counts": self.gate_counts.tolist(),
            "bandwidth": self.bandwidth,
            "n_boot": self.n_boot,
        }
        if include_trajectory:
            out["trajectory_NOT_PRIVATE"] = self.trajectory.tolist()
        return out


def _jacobians_and_scores(
    X: np.ndarray, z: np.ndarray, r: float, b: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For queries ``z`` (Q, T+1, d): plug-in ``Γ̂`` (Q, Td, Td), ``Ĵ`` (Q, T, d, d),
    counts (Q, T) and the boundary moment ``(1/n) Σ K_b(ρ_i − r)‖X_i − z_t‖²`` (Q, T).
    Vectorised over memories; blocks of queries bound the memory."""
    n, d = X.shape
    Q, T1, _ = z.shape
    T = T1 - 1
    G = np.empty((Q, T * d, T * d))
    J = np.empty((Q, T, d, d))
    m = np.empty((Q, T), dtype=np.int64)
    h = np.empty((Q, T))
    bs = max(1, _BLOCK_ELEMS // (n * max(T * d, 1)))
    r2 = r * r
    for q0 in range(0, Q, bs):
        zb = z[q0 : q0 + bs]
        nb = zb.shape[0]
        Psi = np.zeros((nb, n, T * d))
        for t in range(1, T + 1):
            diff = X[None] - zb[:, t - 1, None, :]  # (nb, n, d)
            rho2 = np.einsum("bnd,bnd->bn", diff, diff)
            mask = rho2 <= r2  # closed ball, direct formula (as LSRMemory.gate)
            cnt = mask.sum(1)
            m[q0 : q0 + nb, t - 1] = cnt
            dev = X[None] - zb[:, t, None, :]
            scale = n / np.maximum(cnt, 1)
            Psi[:, :, (t - 1) * d : t * d] = mask[..., None] * dev * scale[:, None, None]
            rho = np.sqrt(rho2)
            K = _epanechnikov((rho - r) / b) / b
            nu = diff / np.where(rho > 0, rho, 1.0)[..., None]
            h[q0 : q0 + nb, t - 1] = np.einsum("bn,bnd,bnd->b", K, dev, dev) / n
            J[q0 : q0 + nb, t - 1] = np.einsum("bn,bnj,bnk->bjk", K, dev, nu) / np.maximum(
                cnt, 1
            )[:, None, None]
        G[q0 : q0 + nb] = np.einsum("bni,bnj->bij", Psi, Psi) / n
    return G, J, m, h


def _bootstrap(X: np.ndarray, q: np.ndarray, r: float, T: int, B: int, rng) -> np.ndarray:
    """Bootstrap clean trajectories (Q, B, T, d): rows resampled with replacement, the
    retrieval map run on each resample (vectorised over resamples and memories)."""
    n, d = X.shape
    sq = np.einsum("ij,ij->i", X, X)
    r2 = r * r
    out = np.empty((q.shape[0], B, T, d))
    chunk = max(1, _BLOCK_ELEMS // n)
    for i in range(q.shape[0]):
        for b0 in range(0, B, chunk):
            nb = min(chunk, B - b0)
            idx = rng.integers(0, n, (nb, n))
            flat = (np.arange(nb)[:, None] * n + idx).ravel()
            W = np.bincount(flat, minlength=nb * n).reshape(nb, n).astype(np.float64)
            c = np.repeat(q[i][None], nb, axis=0)
            for t in range(T):
                d2 = sq[None, :] + np.einsum("ij,ij->i", c, c)[:, None] - 2.0 * (c @ X.T)
                wm = W * (d2 <= r2)
                cnt = wm.sum(1)
                s = wm @ X
                c = np.where(cnt[:, None] > 0, s / np.maximum(cnt, 1.0)[:, None], c)
                out[i, b0 : b0 + nb, t] = c
    return out


def sampling_covariance(
    memory: LSRMemory,
    queries: Any,
    steps: int,
    *,
    estimator: str = "delta",
    bandwidth: float | None = None,
    n_boot: int = 1000,
    seed: Any = None,
) -> SamplingCovariance:
    """Estimate ``Σ`` of ``√n (z_{1:T} − z̄_{1:T}) ⇒ N(0, Σ)`` from the bank (spec §6).

    ``estimator="delta"``: the plug-in delta method of docs/uq.md §3,
    ``Σ̂ = L̂ Γ̂ L̂ᵀ`` with ``Γ̂_{st} = (1/n) Σ_i ψ̂_s(X_i) ψ̂_t(X_i)ᵀ``,
    ``ψ̂_t(x) = 1{‖x − z_{t-1}‖ ≤ r}(x − z_t)·n/m_t``, and the sphere-kernel Jacobian

        Ĵ_t = (1/m_t) Σ_i K_b(‖X_i − z_{t-1}‖ − r) (X_i − z_t) ν_iᵀ,
        ν_i = (X_i − z_{t-1})/‖X_i − z_{t-1}‖,  K_b(u) = (3/(4b))(1 − u²/b²)_+,

    which estimates the surface integral ``(1/p_t)∮ f (x − z̄_t) νᵀ dS`` (a kernel density
    estimate in the radial direction, bias O(b²), variance O(1/(n b))).
    ``estimator="bootstrap"``: ``n · Cov*`` of the clean trajectory over ``n_boot``
    nonparametric resamples of the bank (``seed`` drives the resampling).

    Parameters
    ----------
    memory : LSRMemory
    queries : array_like, (Q, d) or (d,)
    steps : int — horizon ``T``.
    bandwidth : float, optional — ``b > 0``; default :func:`default_bandwidth`.
    """
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    if estimator not in ("delta", "bootstrap"):
        raise ValueError(f"estimator must be 'delta' or 'bootstrap'; got {estimator!r}.")
    X, _ = memory._bank()
    n, d = X.shape
    r = memory.radius_
    q, _ = check_queries(queries, d, name="queries")
    T = check_steps(steps)
    b = default_bandwidth(n, r) if bandwidth is None else check_positive("bandwidth", bandwidth)
    z = memory.retrieve(q, T)
    G, J, m, h = _jacobians_and_scores(X, z, r, b)
    bad = (m < 2).any(axis=1)
    if estimator == "delta":
        L = _propagator(J)
        cov = L @ G @ np.swapaxes(L, 1, 2)
        B = None
    else:
        B = check_int_at_least("n_boot", n_boot, 2)
        boot = _bootstrap(X, q, r, T, B, check_rng(seed)).reshape(q.shape[0], B, T * d)
        dev = boot - boot.mean(axis=1, keepdims=True)
        cov = n * np.einsum("qbi,qbj->qij", dev, dev) / (B - 1)
    if bad.any():
        warnings.warn(
            f"the clean gate holds fewer than 2 memories for queries {np.flatnonzero(bad)[:10]}"
            "; the CLT does not apply there and their sampling covariance is NaN.",
            UQWarning,
            stacklevel=2,
        )
        cov[bad] = np.nan
    return SamplingCovariance(estimator, n, z, cov, J, m, h, b, B)


# ============================================================================ privacy part


def _released_steps(result: PrivateRetrievalResult) -> tuple[int, ...]:
    T = int(result.params["steps"])
    return (T,) if result.method == "endpoint" else tuple(range(1, T + 1))


def privacy_covariance(
    result: PrivateRetrievalResult, jacobians: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Covariance of ``Y − z`` given the bank over the released steps, and exactness flags.

    Linear-Gaussian model of docs/uq.md §4: ``e_t = F_t e_{t-1} + ξ_t``, ``e_0 = 0``,
    ``ξ_t ~ N(0, s_t² I)`` with the released per-step std ``s_t``, and

    * BRACE, κ = 0: ``F_t = 0`` (a step is either corrected, ``Q_t = z_t``, or has
      ``R_t = 0``, so ``a_t = z_t``);
    * BRACE, κ > 0: ``F_t = (1 − H_t) Ĵ_t`` (``H_t`` the activation; non-corrected steps
      carry ``−R_t = Φ_D(Y_{t-1}) − Φ_D(z_{t-1}) ≈ Ĵ_t (Y_{t-1} − z_{t-1})``);
    * global / naive: ``F_t = Ĵ_t``; endpoint: one release, ``Y = z_T + ξ``.

    Returns ``(cov (Q, Sd, Sd), exact (Q, S))``: ``exact`` marks steps whose law needs no
    linearisation (``F_t = 0`` or ``t = 1``); projections are flagged separately by
    :func:`analyze`.
    """
    if not isinstance(result, PrivateRetrievalResult):
        raise TypeError(f"result must be a PrivateRetrievalResult; got {type(result).__name__}.")
    s = np.asarray(result.noise_std, dtype=np.float64)
    Q, S = s.shape
    d = result.outputs.shape[2]
    if result.method == "endpoint":
        cov = (s[:, 0] ** 2)[:, None, None] * np.eye(d)[None]
        return cov, np.ones((Q, 1), dtype=bool)
    J = as_float_array("jacobians", jacobians)
    if J.shape != (Q, S, d, d):
        raise ValueError(
            f"jacobians must have shape (Q, T, d, d) = {(Q, S, d, d)}; got {J.shape}."
        )
    if result.method == "brace":
        kappa = float(result.params.get("kappa", 0.0))
        active = np.asarray(result.activated, dtype=bool)
        keep = np.zeros((Q, S)) if kappa == 0.0 else (~active).astype(np.float64)
    else:
        keep = np.ones((Q, S))
    keep[:, 0] = 0.0  # e_0 = Y_0 − z_0 = 0
    F = J * keep[:, :, None, None]
    L = _propagator(F)
    noise = np.repeat(s**2, d, axis=1)
    cov = np.einsum("qij,qj,qkj->qik", L, noise, L)
    return cov, keep == 0.0


def _mahalanobis2_many(cov: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``xᵀ C⁻¹ x`` for (Q, k, k) covariances and (Q, M, k) points -> (Q, M)."""
    Q, M, k = x.shape
    C = np.repeat(cov, M, axis=0)
    return _mahalanobis2(C, x.reshape(Q * M, k)).reshape(Q, M)


def _rank_cutoff(sorted_stat: np.ndarray, level: float) -> np.ndarray:
    """Conformal cut-off along axis 1 of sorted statistics: the ``⌈(M+1)·level⌉``-th
    smallest of ``M`` (``inf`` if that exceeds ``M``: too few simulations for the level)."""
    M = sorted_stat.shape[1]
    k = math.ceil((M + 1) * level - 1e-12)
    if k > M:
        return np.full(sorted_stat.shape[:1] + sorted_stat.shape[2:], np.inf)
    return sorted_stat[:, k - 1]


def _rank_level(sorted_stat: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``#{simulated < value} / (M + 1)`` along axis 1: the region of level ℓ contains
    ``value`` iff this is ``< ℓ``."""
    M = sorted_stat.shape[1]
    less = (sorted_stat < np.expand_dims(value, 1)).sum(axis=1)
    return np.where(np.isnan(value), np.nan, less / (M + 1))


def _calibration_stats(draws: np.ndarray, cov: np.ndarray) -> dict[str, np.ndarray]:
    """Sorted simulated statistics of every region kind from error draws (Q, M, S, d)."""
    Q, M, S, d = draws.shape
    blocks = _blocks(cov, S, d)
    per = np.stack([_mahalanobis2_many(blocks[:, s], draws[:, :, s]) for s in range(S)], -1)
    joint = _mahalanobis2_many(cov, draws.reshape(Q, M, S * d))
    sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2)).reshape(Q, 1, S, d)
    z = np.abs(draws) / sd
    return {
        "step": np.sort(per, axis=1),
        "joint": np.sort(joint, axis=1),
        "interval": np.sort(z, axis=1),
        "box": np.sort(z.reshape(Q, M, S * d).max(-1), axis=1),
    }


# ============================================================================ regions


@dataclass(frozen=True)
class ConfidenceRegion:
    """Gaussian confidence regions for a trajectory target, centred at the release.

    The model is ``centre − target ≈ N(0, cov)`` (stacked by step). Kinds:

    * ``"step"``: per step ``t``, the ellipsoid ``(x − Y_t)ᵀ C_t⁻¹ (x − Y_t) ≤ χ²_d(1−α)``;
    * ``"bonferroni"``: all per-step ellipsoids at level ``1 − α/S`` (simultaneous);
    * ``"joint"``: the stacked ellipsoid ``≤ χ²_{Sd}(1−α)`` (simultaneous);
    * ``"interval"``: per coordinate ``Y_{tj} ± z_{1−α/2} σ_{tj}``;
    * ``"box"``: every coordinate at ``z_{1−α/(2Sd)}`` (simultaneous, Bonferroni).

    For a ``public`` region ``cov`` holds per-step isotropic upper bounds ``τ_t² I`` (in
    the Loewner order) and the cross-step covariance is unknown: every kind but
    ``"joint"`` stays valid (conservative); ``"joint"`` is refused.

    A *calibrated* region (``calibration`` given; ``privacy="simulate"`` in
    :func:`analyze`) keeps the shapes but takes every cut-off from ``n_calibration``
    simulated errors instead of χ²/normal quantiles: the ``k``-th smallest simulated
    statistic with ``k = ⌈(M+1)(1−α)⌉`` (conformal rank, so coverage is at least
    ``1 − α`` and at most ``1 − α + 1/(M+1)`` when the simulated and the actual error are
    exchangeable). Then ``"box"`` is calibrated on the maximum coordinate statistic itself
    (exact simultaneous coverage, no Bonferroni).

    Attributes
    ----------
    target : {"bank", "population"}
    level : float — ``1 − α``.
    centre : (Q, S, d) — the released ``Y_t``.
    cov : (Q, Sd, Sd)
    steps : tuple of int — the released steps (1-based) the ``S`` columns refer to.
    public : bool — computed from the release and public parameters only.
    method, is_private : the release's mechanism (naive is NOT DP).
    note : str
    calibration : dict or None — sorted simulated statistics, along axis 1: ``"step"``
        (Q, M, S) squared step distances, ``"joint"`` (Q, M), ``"interval"`` (Q, M, S, d)
        standardized absolute coordinates and ``"box"`` (Q, M) their maximum.
    n_calibration : int — simulated errors behind ``calibration`` (``M``).
    """

    target: str
    level: float
    centre: np.ndarray
    cov: np.ndarray
    steps: tuple
    public: bool = False
    method: str = ""
    is_private: bool = True
    note: str = ""
    calibration: dict | None = None
    n_calibration: int = 0

    @property
    def alpha(self) -> float:
        return 1.0 - self.level

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.centre.shape

    def step_cov(self) -> np.ndarray:
        """Per-step covariance blocks (Q, S, d, d)."""
        Q, S, d = self.centre.shape
        return _blocks(self.cov, S, d)

    def sd(self) -> np.ndarray:
        """Per-coordinate standard deviations (Q, S, d)."""
        Q, S, d = self.centre.shape
        return np.sqrt(np.diagonal(self.cov, axis1=1, axis2=2)).reshape(Q, S, d)

    def _kind(self, kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {kind!r}.")
        if kind == "joint" and self.public:
            raise ValueError(
                "kind='joint' needs the cross-step covariance, which a public region does "
                "not know; use 'bonferroni' or 'box' for a simultaneous public region."
            )
        return kind

    def radius2(self, kind: str = "step") -> float | np.ndarray:
        """The cut-off of an ellipsoid kind (``"step"``, ``"bonferroni"``, ``"joint"``): a
        χ² quantile, or per-query simulated cut-offs ((Q, S) / (Q,)) when calibrated."""
        from scipy import stats

        kind = self._kind(kind)
        _, S, d = self.centre.shape
        if kind not in ("step", "bonferroni", "joint"):
            raise ValueError(f"radius2 is defined for ellipsoid kinds; got {kind!r}.")
        if self.calibration is not None:
            if kind == "bonferroni":
                return _rank_cutoff(self.calibration["step"], 1.0 - self.alpha / S)
            return _rank_cutoff(self.calibration[kind], self.level)
        if kind == "step":
            return float(stats.chi2.ppf(self.level, d))
        if kind == "bonferroni":
            return float(stats.chi2.ppf(1.0 - self.alpha / S, d))
        return float(stats.chi2.ppf(self.level, S * d))

    def halfwidth(self, kind: str = "interval") -> np.ndarray:
        """Per-coordinate half-widths (Q, S, d) of ``"interval"`` or ``"box"``."""
        from scipy import stats

        kind = self._kind(kind)
        _, S, d = self.centre.shape
        if self.calibration is not None and kind in ("interval", "box"):
            zq = _rank_cutoff(self.calibration[kind], self.level)
            return (zq if kind == "interval" else zq[:, None, None]) * self.sd()
        if kind == "interval":
            zq = stats.norm.ppf(1.0 - self.alpha / 2.0)
        elif kind == "box":
            zq = stats.norm.ppf(1.0 - self.alpha / (2.0 * S * d))
        else:
            raise ValueError(f"halfwidth is defined for 'interval' and 'box'; got {kind!r}.")
        return zq * self.sd()

    def bounds(self, kind: str = "interval") -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends (Q, S, d) of ``"interval"`` or ``"box"``."""
        h = self.halfwidth(kind)
        return self.centre - h, self.centre + h

    def _points(self, points: Any) -> np.ndarray:
        x = as_float_array("points", points)
        Q, S, d = self.centre.shape
        if x.ndim == 3 and x.shape[0] == Q and x.shape[2] == d:
            if x.shape[1] == S:
                return x
            T = max(self.steps)
            if x.shape[1] >= T + 1:  # a trajectory z_0..z_T' (index 0 = query), T' ≥ T
                return x[:, list(self.steps)]
        raise ValueError(
            f"points must have shape (Q, S, d) = {(Q, S, d)} (the released steps) or "
            f"(Q, T'+1, d) with T' >= {max(self.steps)} (a trajectory from the query); "
            f"got {x.shape}."
        )

    def standardized(self, points: Any) -> np.ndarray:
        """``(points − centre) / sd`` per coordinate, (Q, S, d)."""
        return (self._points(points) - self.centre) / self.sd()

    def distance2(self, points: Any) -> tuple[np.ndarray, np.ndarray]:
        """Squared Mahalanobis distances of ``points − centre``: per step (Q, S) and joint
        (Q,) (NaN for a public region, whose cross-step covariance is unknown)."""
        x = self._points(points) - self.centre
        Q, S, d = x.shape
        blocks = self.step_cov()
        per = np.stack([_mahalanobis2(blocks[:, s], x[:, s]) for s in range(S)], axis=1)
        joint = (
            np.full(Q, np.nan) if self.public else _mahalanobis2(self.cov, x.reshape(Q, S * d))
        )
        return per, joint

    def entry_level(self, points: Any, kind: str = "step") -> np.ndarray:
        """The smallest nominal level whose region of this ``kind`` contains ``points``:
        the region at level ℓ contains them iff this is ≤ ℓ (Gaussian) or < ℓ (calibrated).
        Shapes as :meth:`contains`. Used to read coverage at every level at once."""
        from scipy import stats

        kind = self._kind(kind)
        Q, S, d = self.centre.shape
        cal = self.calibration
        if kind in ("interval", "box"):
            z = np.abs(self.standardized(points))
            if kind == "interval":
                if cal is not None:
                    return _rank_level(cal["interval"], z)
                return 2.0 * stats.norm.cdf(z) - 1.0
            zmax = z.reshape(Q, S * d).max(-1)
            if cal is not None:
                return _rank_level(cal["box"], zmax)
            return np.clip(1.0 - 2.0 * S * d * stats.norm.sf(zmax), 0.0, 1.0)
        per, joint = self.distance2(points)
        if kind == "joint":
            if cal is not None:
                return _rank_level(cal["joint"], joint)
            return stats.chi2.cdf(joint, S * d)
        u = _rank_level(cal["step"], per) if cal is not None else stats.chi2.cdf(per, d)
        if kind == "step":
            return u
        return np.clip(1.0 - S * (1.0 - u.max(axis=1)), 0.0, 1.0)

    def contains(self, points: Any, kind: str = "step") -> np.ndarray:
        """Whether ``points`` (the target trajectory) lie in the region.

        Returns (Q, S) for ``"step"``, (Q, S, d) for ``"interval"``, and (Q,) for the
        simultaneous kinds ``"bonferroni"``, ``"joint"`` and ``"box"``.
        """
        kind = self._kind(kind)
        if kind in ("interval", "box"):
            x = self._points(points)
            inside = np.abs(x - self.centre) <= self.halfwidth(kind)
            return inside if kind == "interval" else inside.all(axis=(1, 2))
        per, joint = self.distance2(points)
        if kind == "joint":
            return joint <= self.radius2("joint")
        inside = per <= self.radius2(kind)
        return inside if kind == "step" else inside.all(axis=1)

    def to_dict(self) -> dict:
        def lst(v: Any) -> Any:
            return v.tolist() if isinstance(v, np.ndarray) else v

        out = {
            "target": self.target,
            "level": self.level,
            "steps": list(self.steps),
            "public": self.public,
            "method": self.method,
            "is_private_release": self.is_private,
            "centre": self.centre.tolist(),
            "cov": self.cov.tolist(),
            "interval_halfwidth": self.halfwidth("interval").tolist(),
            "box_halfwidth": self.halfwidth("box").tolist(),
            "radius2_step": lst(self.radius2("step")),
            "radius2_bonferroni": lst(self.radius2("bonferroni")),
            "calibrated_by_simulation": self.n_calibration,
            "note": self.note,
        }
        if not self.public:
            out["radius2_joint"] = lst(self.radius2("joint"))
        return out


# ============================================================================ result


_DISCLOSURE = (
    "computed from the private bank (noise std, gate counts, local covariance, Jacobian, "
    "clean trajectory): NOT covered by the release's (epsilon, delta); see docs/uq.md §6"
)


@dataclass(frozen=True)
class RetrievalUQ:
    """Uncertainty of a private retrieval, privacy part and sampling part separately.

    Attributes
    ----------
    method, is_private : the release's mechanism (``"naive"`` is NOT DP).
    steps : tuple of int — released steps (1..T, or (T,) for the endpoint method).
    n, radius : bank size and gate radius.
    queries : (Q, d); released : (Q, S, d) ``Y_t``; noise_std : (Q, S) ``s_t``.
    privacy_cov : (Q, Sd, Sd) ``E[(Y − z)(Y − z)ᵀ | D]``: the linear-Gaussian model
        (docs/uq.md §4), or the simulated second moment when ``privacy_model`` is
        ``"simulate"``.
    sampling_cov : (Q, Sd, Sd) ``Var(z − z̄) ≈ Σ̂/n`` (absolute scale).
    sampling : :class:`SamplingCovariance` the estimate came from (root-n scale, Ĵ, …).
    privacy_model : {"linear", "simulate"} — how the privacy part was obtained.
    privacy_exact : (Q, S) — the step's privacy law needs no linearisation.
    projection_active : (Q, S) — a projection (output ball, or BRACE's ``B̄(Y_{t-1}, r)``
        on a corrected step) moved the release: the Gaussian model is then conservative
        for the output ball and approximate for the inner one.
    projection_risk : (Q, S) — a projection can move the release with non-negligible
        probability (from ``z``, ``q`` and the modelled noise, not from the realised
        ``Y``, so that choosing the model does not select on the error).
    linearization_error : (Q, S) — estimated relative error of the step's modelled privacy
        variance: the empirical map is piecewise constant, and at the noise scale its
        local slope and lumps differ from ``Ĵ_t`` (docs/uq.md §4.2); large
        (> ``max_linearization_error``) sends ``"auto"`` to simulation.
    privacy_draws : (Q, M, S, d) or None — simulated ``Y − z`` (conditional law given D).
    sampling_draws : (Q, M, S, d) or None — ``N(0, sampling_cov)`` draws paired with them.
    """

    method: str
    is_private: bool
    steps: tuple
    n: int
    radius: float
    queries: np.ndarray
    released: np.ndarray
    noise_std: np.ndarray
    privacy_cov: np.ndarray
    sampling_cov: np.ndarray
    sampling: SamplingCovariance
    privacy_exact: np.ndarray
    projection_active: np.ndarray
    projection_risk: np.ndarray | None = None
    privacy_model: str = "linear"
    linearization_error: np.ndarray | None = None
    privacy_draws: np.ndarray | None = None
    sampling_draws: np.ndarray | None = None

    def confidence_region(self, target: str = "bank", level: float = 0.95) -> ConfidenceRegion:
        """Regions for ``z_t`` (``target="bank"``: privacy part only) or ``z̄_t``
        (``"population"``: privacy + sampling), at level ``1 − α``.

        Linear model: Gaussian regions with covariance ``P`` (bank) or ``P + Σ̂/n``
        (population). Simulated model: the first half of the simulated errors gives the
        shape (second moment), the second half calibrates the cut-offs
        (:class:`ConfidenceRegion`, conformal ranks); the population target adds the
        paired ``N(0, Σ̂/n)`` draws.
        """
        target = _check_target(target)
        lv = _check_level(level)
        common = dict(target=target, level=lv, centre=self.released, steps=self.steps,
                      public=False, method=self.method, is_private=self.is_private,
                      note=_DISCLOSURE)
        if self.privacy_draws is None:
            cov = self.privacy_cov if target == "bank" else self.privacy_cov + self.sampling_cov
            return ConfidenceRegion(cov=cov, **common)
        draws = self.privacy_draws
        if target == "population":
            draws = draws + self.sampling_draws
        Q, M, S, d = draws.shape
        M1 = M // 2
        flat = draws[:, :M1].reshape(Q, M1, S * d)
        shape = np.einsum("qmi,qmj->qij", flat, flat) / M1
        cal = _calibration_stats(draws[:, M1:], shape)
        return ConfidenceRegion(cov=shape, calibration=cal, n_calibration=M - M1, **common)

    @property
    def privacy_sd(self) -> np.ndarray:
        """Per-coordinate sd (Q, S, d) of the privacy error ``Y_t − z_t``."""
        Q, S, d = self.released.shape
        return np.sqrt(np.diagonal(self.privacy_cov, axis1=1, axis2=2)).reshape(Q, S, d)

    @property
    def sampling_sd(self) -> np.ndarray:
        """Per-coordinate sd (Q, S, d) of the sampling error ``z_t − z̄_t``."""
        Q, S, d = self.released.shape
        return np.sqrt(np.diagonal(self.sampling_cov, axis1=1, axis2=2)).reshape(Q, S, d)

    @property
    def privacy_share(self) -> np.ndarray:
        """``tr P_t / (tr P_t + tr Σ_t/n)`` (Q, S): the privacy part's share of the
        population-target variance. Near 0: privacy negligible at the root-n scale
        (``m̂_t ≫ √n``); near 1: privacy dominates (``m̂_t ≪ √n``); paper Thm 5."""
        p = (self.privacy_sd**2).sum(-1)
        s = (self.sampling_sd**2).sum(-1)
        return p / (p + s)

    def summary(self) -> str:
        Q, S, d = self.released.shape
        tag = "" if self.is_private else "  [NOT DIFFERENTIALLY PRIVATE]"
        lines = [
            f"RetrievalUQ(method={self.method!r}{tag}, n={self.n}, queries={Q}, "
            f"steps={list(self.steps)}, sampling={self.sampling.estimator}, "
            f"privacy={self.privacy_model})",
            "  mean per-coordinate sd by step: privacy (Y - z) | sampling (z - zbar) | "
            "privacy share",
        ]
        for j, t in enumerate(self.steps):
            lines.append(
                f"    t={t}: {self.privacy_sd[:, j].mean():.6g} | "
                f"{self.sampling_sd[:, j].mean():.6g} | {self.privacy_share[:, j].mean():.3f}"
            )
        if self.projection_active.any():
            lines.append(f"  projection active in {int(self.projection_active.sum())} step(s)")
        lines.append(f"  note: intervals are {_DISCLOSURE}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "is_private_release": self.is_private,
            "steps": list(self.steps),
            "n": self.n,
            "radius": self.radius,
            "queries": self.queries.tolist(),
            "released": self.released.tolist(),
            "noise_std": self.noise_std.tolist(),
            "privacy_cov": self.privacy_cov.tolist(),
            "sampling_cov": self.sampling_cov.tolist(),
            "privacy_sd": self.privacy_sd.tolist(),
            "sampling_sd": self.sampling_sd.tolist(),
            "privacy_share": self.privacy_share.tolist(),
            "privacy_exact": self.privacy_exact.tolist(),
            "projection_active": self.projection_active.tolist(),
            "privacy_model": self.privacy_model,
            "linearization_error": None if self.linearization_error is None
            else self.linearization_error.tolist(),
            "sampling": self.sampling.to_dict(),
            "note": _DISCLOSURE,
        }


def _check_result(result: Any) -> PrivateRetrievalResult:
    if not isinstance(result, PrivateRetrievalResult):
        raise TypeError(f"result must be a PrivateRetrievalResult; got {type(result).__name__}.")
    return result


def analyze(
    memory: LSRMemory,
    result: PrivateRetrievalResult,
    queries: Any = None,
    *,
    sampling: str | SamplingCovariance = "delta",
    privacy: str = "auto",
    bandwidth: float | None = None,
    n_boot: int = 1000,
    n_sim: int = 400,
    max_linearization_error: float = 0.3,
    seed: Any = None,
) -> RetrievalUQ:
    """Uncertainty of a private release ``result`` computed on ``memory`` for ``queries``.

    Parameters
    ----------
    memory : LSRMemory — the bank the release was computed on (private).
    result : PrivateRetrievalResult — from :func:`brace.private_retrieve`.
    queries : (Q, d) or (d,), optional — the queries of the release; default
        ``result.queries``. If given, they must equal the stored queries.
    sampling : "delta", "bootstrap" or a precomputed :class:`SamplingCovariance` (same
        queries, horizon ≥ T), e.g. to share one estimate between several releases.
    privacy : "linear", "simulate" or "auto"
        ``"linear"``: the linear-Gaussian model of :func:`privacy_covariance` (the
        paper's CLT form). ``"simulate"``: the conditional law of ``Y − z`` given the
        bank by Monte Carlo — ``n_sim`` fresh runs of the same mechanism on the same
        bank and queries — exact up to simulation error, whatever the projections and
        the non-linearity. ``"auto"``: simulate only when the linear model is
        unreliable: a projection risk, or ``linearization_error > max_linearization_error``
        on some step.
    bandwidth, n_boot : passed to :func:`sampling_covariance`.
    n_sim : int — simulated releases (half shape the regions, half calibrate them).
    max_linearization_error : float — ``"auto"`` simulates above it (docs/uq.md §4.2).
    seed : drives the bootstrap and the simulations.

    Returns
    -------
    RetrievalUQ — ``.confidence_region(target="bank"|"population", level)``.

    Everything here is computed from the private bank; see docs/uq.md §6 for what the
    output reveals, and :func:`public_region` for the variant that uses only the release.
    """
    if not isinstance(memory, LSRMemory):
        raise TypeError(f"memory must be an LSRMemory; got {type(memory).__name__}.")
    res = _check_result(result)
    X, _ = memory._bank()
    n, d = X.shape
    r = memory.radius_
    stored = getattr(res, "queries", None)
    if queries is None:
        if stored is None:
            raise ValueError("queries are required: the result does not store them.")
        queries = stored
    q, _ = check_queries(queries, d, name="queries")
    if stored is not None and (stored.shape != q.shape or not np.array_equal(stored, q)):
        raise ValueError("queries differ from the queries the release was computed for.")
    Q = q.shape[0]
    Y = np.asarray(res.outputs, dtype=np.float64)
    T = int(res.params["steps"])
    steps = _released_steps(res)
    S = len(steps)
    if Y.ndim != 3 or Y.shape != (Q, S, d):
        raise ValueError(
            f"mismatched shapes: the release holds outputs of shape {Y.shape} but "
            f"{Q} queries of d = {d} with {S} released step(s) need {(Q, S, d)}."
        )
    r_res = float(res.params["radius"])
    if not math.isclose(r_res, r, rel_tol=1e-12):
        raise ValueError(
            f"the release was computed with radius {r_res} but the memory has radius {r}."
        )
    if res.clean is not None and not np.allclose(res.clean[:, 0], q, rtol=0, atol=1e-12):
        raise ValueError("queries differ from those of the release (result.clean[:, 0]).")
    if privacy not in ("linear", "simulate", "auto"):
        raise ValueError(f"privacy must be 'linear', 'simulate' or 'auto'; got {privacy!r}.")
    max_err = check_positive("max_linearization_error", max_linearization_error)
    rng = check_rng(seed)
    if isinstance(sampling, SamplingCovariance):
        sc = sampling
        if sc.n != n or sc.trajectory.shape[0] != Q or sc.trajectory.shape[2] != d:
            raise ValueError(
                f"the sampling estimate is for n = {sc.n}, {sc.trajectory.shape[0]} queries, "
                f"d = {sc.trajectory.shape[2]}; the release needs n = {n}, {Q}, d = {d}."
            )
        if sc.steps < T:
            raise ValueError(f"the sampling estimate covers {sc.steps} steps; need T = {T}.")
        if not np.allclose(sc.trajectory[:, 0], q, rtol=0, atol=1e-12):
            raise ValueError("the sampling estimate was computed for other queries.")
    elif sampling in ("delta", "bootstrap"):
        sc = sampling_covariance(
            memory, q, T, estimator=sampling, bandwidth=bandwidth, n_boot=n_boot, seed=rng
        )
    else:
        raise ValueError(
            f"sampling must be 'delta', 'bootstrap' or a SamplingCovariance; got {sampling!r}."
        )
    idx = [t - 1 for t in steps]
    samp = _select(sc.cov[:, : T * d, : T * d], idx, d) / n
    P, exact = privacy_covariance(res, sc.jacobians[:, :T] if res.method != "endpoint" else None)
    # projections: the public output ball, and BRACE's inner ball on corrected steps
    proj = np.zeros((Q, S), dtype=bool)
    if res.params.get("output_projection", True):
        for j, t in enumerate(steps):
            dist = np.linalg.norm(Y[:, j] - q, axis=1)
            proj[:, j] = dist >= (t + 1) * r * (1.0 - 1e-9)
    if res.method == "brace":
        z = sc.trajectory
        kappa = float(res.params.get("kappa", 0.0))
        corr = np.asarray(res.activated, dtype=bool) | (kappa == 0.0)
        prev = np.concatenate([q[:, None], Y[:, :-1]], axis=1)
        far = np.linalg.norm(z[:, 1 : T + 1] - prev, axis=2) > r
        proj |= corr & far
    risk = _projection_risk(res, sc.trajectory, q, P, steps, r, d)
    lin_err = _linearization_error(sc, P, exact, steps, n, d)
    model = privacy
    if privacy == "auto":
        model = "simulate" if (risk.any() or (lin_err > max_err).any()) else "linear"
    pdraws = sdraws = None
    if model == "simulate":
        M = check_int_at_least("n_sim", n_sim, 2)
        sims = _simulate_release(memory, res, q, M, rng)
        pdraws = sims - sc.trajectory[:, None, list(steps)]
        flat = pdraws.reshape(Q, M, S * d)
        P = np.einsum("qmi,qmj->qij", flat, flat) / M
        sdraws = _gaussian_draws(samp, M, rng).reshape(Q, M, S, d)
    return RetrievalUQ(
        method=res.method,
        is_private=res.is_private,
        steps=steps,
        n=n,
        radius=r,
        queries=q,
        released=Y,
        noise_std=np.asarray(res.noise_std, dtype=np.float64),
        privacy_cov=P,
        sampling_cov=samp,
        sampling=sc,
        privacy_exact=exact,
        projection_active=proj,
        projection_risk=risk,
        privacy_model=model,
        linearization_error=lin_err,
        privacy_draws=pdraws,
        sampling_draws=sdraws,
    )


def _projection_risk(
    res: PrivateRetrievalResult, z: np.ndarray, q: np.ndarray, P: np.ndarray, steps: tuple,
    r: float, d: int,
) -> np.ndarray:
    """Whether a projection can act with probability above ~1e-4 (Q, S).

    Output ball: ``(t+1) r − ‖z_t − q‖ < c·σ_t``; BRACE's inner ball on steps that may be
    corrected (κ < ∞): ``‖z_t − z_{t-1}‖ + c·σ_{t-1} > r``; ``σ`` the modelled per-coordinate
    sd of ``Y − z`` and ``c² = χ²_d(1 − 10⁻⁴)``. Uses the clean trajectory and the model,
    never the realised release: a rule that looked at ``Y`` would pick the model by the
    size of the very error it is meant to cover.
    """
    from scipy import stats

    Q = P.shape[0]
    S = len(steps)
    c = math.sqrt(stats.chi2.ppf(1.0 - 1e-4, d))
    sd = np.sqrt(np.diagonal(P, axis1=1, axis2=2).reshape(Q, S, d).mean(-1))
    risk = np.zeros((Q, S), dtype=bool)
    if res.params.get("output_projection", True):
        for j, t in enumerate(steps):
            room = (t + 1) * r - np.linalg.norm(z[:, t] - q, axis=1)
            risk[:, j] = room < c * sd[:, j]
    kappa = float(res.params.get("kappa", 0.0))
    if res.method == "brace" and math.isfinite(kappa):
        for j in range(1, S):
            t = steps[j]
            step_len = np.linalg.norm(z[:, t] - z[:, t - 1], axis=1)
            risk[:, j] |= step_len + c * sd[:, j - 1] > r
    return risk


def _linearization_error(
    sc: SamplingCovariance, P: np.ndarray, exact: np.ndarray, steps: tuple, n: int, d: int
) -> np.ndarray:
    """Relative error of the modelled privacy variance of each step (docs/uq.md §4.2).

    A displacement ``δ ~ N(0, s_e² I)`` of the gate centre flips the membership of about
    ``n ∮ f |⟨δ, ν⟩| dS`` memories, each moving the gate mean by ``(X_i − z_t)/m_t``. Around
    ``Ĵ_t δ`` this leaves, per coordinate, the variance
    ``v = (n/m_t²) · s_e √(2/π) · ∮ f ‖x − z_t‖² dS / d``; the same flips make the bank's
    slope at the noise scale deviate from ``Ĵ_t`` by about ``√v / s_e``, which changes the
    carried variance ``‖Ĵ_t‖² s_e²`` by up to ``2‖Ĵ_t‖ √v s_e``. Returned:
    ``(2‖Ĵ_t‖₂ √v s_e + v) / (tr P_tt / d)``; 0 where the step carries no error.
    """
    Q = P.shape[0]
    S = len(steps)
    out = np.zeros((Q, S))
    if S < 2:
        return out
    var = np.diagonal(P, axis1=1, axis2=2).reshape(Q, S, d).mean(-1)
    for j in range(1, S):
        t = steps[j]
        m = np.maximum(sc.gate_counts[:, t - 1], 1).astype(np.float64)
        s_e = np.sqrt(var[:, j - 1])
        v = (n / m**2) * s_e * math.sqrt(2.0 / math.pi) * sc.boundary_moment[:, t - 1] / d
        jn = np.linalg.norm(sc.jacobians[:, t - 1], ord=2, axis=(1, 2))
        err = (2.0 * jn * np.sqrt(v) * s_e + v) / np.maximum(var[:, j], 1e-300)
        out[:, j] = np.where(exact[:, j], 0.0, err)
    return out


def _gaussian_draws(cov: np.ndarray, M: int, rng: np.random.Generator) -> np.ndarray:
    """``M`` draws of ``N(0, cov)`` per query, (Q, M, k); NaN where ``cov`` is NaN."""
    Q, k, _ = cov.shape
    w = rng.standard_normal((Q, M, k))
    out = np.full((Q, M, k), np.nan)
    for i in range(Q):
        if not np.all(np.isfinite(cov[i])):
            continue
        vals, vecs = np.linalg.eigh(cov[i])
        root = vecs * np.sqrt(np.maximum(vals, 0.0))
        out[i] = w[i] @ root.T
    return out


def _simulate_release(
    memory: LSRMemory, res: PrivateRetrievalResult, q: np.ndarray, M: int, rng
) -> np.ndarray:
    """``M`` fresh releases (Q, M, S, d) of the same mechanism, parameters, bank and
    queries (the conditional law of ``Y`` given ``D``)."""
    from .mechanisms import NotPrivateWarning, private_retrieve

    Q, S, d = res.outputs.shape
    priv, params = res.privacy, res.params
    out = np.empty((Q, M, S, d))
    chunk = max(1, 256 // Q)
    for m0 in range(0, M, chunk):
        mm = min(chunk, M - m0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            sim = private_retrieve(
                memory, np.repeat(q, mm, axis=0), method=res.method, epsilon=priv.epsilon,
                delta=priv.delta, steps=int(params["steps"]), kappa=params["kappa"],
                gamma=priv.gamma if res.method == "brace" else None,
                accounting=priv.accounting,
                output_projection=params.get("output_projection", True), seed=rng,
            )
        if not math.isclose(sim.privacy.rho_per_step, priv.rho_per_step, rel_tol=1e-9):
            raise ValueError(
                "cannot reproduce the release's noise calibration for the simulation "
                f"(rho per step {sim.privacy.rho_per_step} vs {priv.rho_per_step})."
            )
        out[:, m0 : m0 + mm] = sim.outputs.reshape(Q, mm, S, d)
    return out


def public_region(
    result: PrivateRetrievalResult,
    *,
    target: str = "bank",
    level: float = 0.95,
    n: int | None = None,
    min_gate_fraction: float | None = None,
    jacobian_bound: float | None = None,
) -> ConfidenceRegion:
    """A region computed from the released ``Y`` and public parameters only (docs/uq.md §6).

    Reads ``result.outputs``, ``result.method``, ``result.privacy`` (ε, δ, T, d, γ and the
    calibrated ρ — functions of public inputs) and ``result.params`` (r, κ, T, projection);
    never the noise std, gate counts, activations or any other field computed from the
    bank. Post-processing of the release, so it is covered by the release's (ε, δ).

    The per-step noise std is bounded by its public maximum ``σ̄ = 2r/√(2ρ)`` (``Δ̄_t ≤ 2r``;
    endpoint: ``2Tr/√(2ρ)``). Steps that may carry the previous error (BRACE with κ > 0,
    global, naive) need a public bound ``jacobian_bound ≥ ‖J_t‖₂``; the population target
    also needs the bank size ``n`` and a public lower bound ``min_gate_fraction ≤ p_t``,
    since ``Cov(X | gate) ⪯ r² I``. The region then uses per-step bounds ``τ_t² I`` with

        τ_t² = Σ_{s≤t} L^{2(t−s)} σ̄_s²  +  (Σ_{s≤t} L^{t−s})² r² / (n p_min),

    (second term for the population only; ``L`` the Jacobian bound, propagation only
    where it can occur), valid kinds: ``"step"``, ``"bonferroni"``, ``"interval"``,
    ``"box"``.
    """
    res = _check_result(result)
    target = _check_target(target)
    lv = _check_level(level)
    Y = np.asarray(res.outputs, dtype=np.float64)
    Q, S, d = Y.shape
    r = float(res.params["radius"])
    T = int(res.params["steps"])
    steps = _released_steps(res)
    mult = 1.0 / math.sqrt(2.0 * float(res.privacy.rho_per_step))
    sigma = (2.0 * T * r if res.method == "endpoint" else 2.0 * r) * mult
    kappa = float(res.params.get("kappa", 0.0))
    carries = res.method in ("global", "naive") or (res.method == "brace" and kappa > 0.0)
    needs_L = (carries and S > 1) or (target == "population" and T > 1)
    if needs_L:
        if jacobian_bound is None:
            raise ValueError(
                "this release can carry errors from step to step: pass a public "
                "jacobian_bound >= ||J_t|| (an assumption about the population, not "
                "computed from the bank)."
            )
        Lb = float(check_positive("jacobian_bound", jacobian_bound))
    else:
        Lb = 0.0
    tau2 = np.empty(S)
    for j, t in enumerate(steps):
        if res.method == "endpoint" or not carries:
            v_priv = sigma**2
        else:
            v_priv = sum(Lb ** (2 * (t - s)) * sigma**2 for s in range(1, t + 1))
        tau2[j] = v_priv
    note = "public: uses only the released Y and public parameters"
    if target == "population":
        if n is None or min_gate_fraction is None:
            raise ValueError(
                "target='population' needs the public bank size n and a public "
                "min_gate_fraction (a lower bound on the gate probability p_t)."
            )
        nn = check_int_at_least("n", n, 1)
        p = check_positive("min_gate_fraction", min_gate_fraction)
        if p > 1.0:
            raise ValueError(f"min_gate_fraction must lie in (0, 1]. Found {p}.")
        for j, t in enumerate(steps):
            amp = sum(Lb ** (t - s) for s in range(1, t + 1))  # 0.0 ** 0 == 1.0
            tau2[j] += amp**2 * r * r / (nn * p)
        note += f"; assumes p_t >= {p}" + (f" and ||J_t|| <= {Lb}" if needs_L else "")
    elif needs_L:
        note += f"; assumes ||J_t|| <= {Lb}"
    cov = np.zeros((Q, S * d, S * d))
    diag = np.repeat(tau2, d)
    cov[:, np.arange(S * d), np.arange(S * d)] = diag
    return ConfidenceRegion(
        target=target, level=lv, centre=Y, cov=cov, steps=steps, public=True,
        method=res.method, is_private=res.is_private, note=note,
    )


# ============================================================================ CLI


def add_cli(sub) -> None:
    """Register ``brace uq``."""
    from .cli import _finite_float, add_mechanism_arguments, add_memory_arguments

    p = sub.add_parser(
        "uq",
        help="run a private retrieval and report confidence regions for the bank's and the "
        "population's trajectory (privacy and sampling parts separately)",
        description="Run private_retrieve on BANK for QUERIES, then report per-step and "
        "simultaneous Gaussian confidence regions for the noiseless trajectory on this bank "
        "(target 'bank', privacy part) and for the population trajectory (target "
        "'population', privacy + sampling part); also the public variant where it can be "
        "formed. The private regions are computed from the bank and are NOT covered by "
        "the release's (epsilon, delta): see docs/uq.md.",
    )
    add_memory_arguments(p, queries_required=False)
    add_mechanism_arguments(p, methods=("brace", "global", "endpoint", "naive"),
                            default="brace")
    p.add_argument("--release", default=None,
                   help="a saved release (.npz/.json from 'brace retrieve --out') to analyse "
                   "instead of running a new one; its queries, steps and mechanism are used")
    p.add_argument("--seed", type=int, default=None, help="seed of the noise and bootstrap")
    p.add_argument("--level", type=_finite_float, default=0.95, help="1 - α, in (0, 1)")
    p.add_argument("--sampling", choices=["delta", "bootstrap"], default="delta")
    p.add_argument("--privacy", choices=["auto", "linear", "simulate"], default="auto",
                   help="privacy part: linear-Gaussian model, simulated conditional law, or "
                   "auto (simulate only where the linear model is unreliable)")
    p.add_argument("--n-sim", type=int, default=400, help="simulated releases")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--bandwidth", type=_finite_float, default=None,
                   help="radial kernel bandwidth of the Jacobian (default r·n^(-1/5))")
    p.add_argument("--min-gate-fraction", type=_finite_float, default=None,
                   help="public lower bound on p_t (public population region)")
    p.add_argument("--jacobian-bound", type=_finite_float, default=None,
                   help="public bound on ||J_t|| (public regions when errors propagate)")
    p.add_argument("--out", default=None, help="write every region to this JSON file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=_cmd_uq)


def _fmt(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.5g}" for x in v) + "]"


def _cmd_uq(args: argparse.Namespace) -> int:
    import sys

    from ._io import check_output_path, load_npy, write_json
    from .mechanisms import NotPrivateWarning, private_retrieve
    from .results import NoiselessResult, load_result, with_diagnostics

    level = _check_level(args.level)
    if args.out is not None:  # before anything is computed
        check_output_path(args.out, inputs={"--bank": args.bank, "--queries": args.queries,
                                            "--release": args.release},
                          overwrite=args.overwrite, suffixes=(".json",))
    if args.release is None:
        for flag, v in (("--queries", args.queries), ("--steps", args.steps),
                        ("--epsilon", args.epsilon)):
            if v is None:
                raise ValueError(f"{flag} is required (or analyse a saved --release).")
    saved = None
    if args.release is not None:
        saved = load_result(args.release)
        if isinstance(saved, NoiselessResult):
            raise ValueError(f"--release {args.release} is the noiseless trajectory (method "
                             "none): there is no privacy noise to analyse.")
        if args.steps is not None and args.steps != saved.params["steps"]:
            raise ValueError(f"--steps {args.steps} differs from the release's "
                             f"{saved.params['steps']}; omit --steps.")
    bank = load_npy(args.bank, "bank")
    queries = load_npy(args.queries, "queries") if args.queries is not None else None
    mem = LSRMemory(bank, beta=args.beta, radius=args.radius)
    rng = check_rng(args.seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotPrivateWarning)
        warnings.simplefilter("always", UQWarning)
        if saved is not None:
            res = saved if saved.noise_std is not None else with_diagnostics(mem, saved)
            if queries is None:
                queries = res.queries
        else:
            res = private_retrieve(
                mem, queries, method=args.method, epsilon=args.epsilon, delta=args.delta,
                steps=args.steps, kappa=args.kappa, gamma=args.gamma,
                accounting=args.accounting, output_projection=not args.no_output_projection,
                seed=rng,
            )
        uq = analyze(mem, res, queries, sampling=args.sampling, privacy=args.privacy,
                     n_boot=args.n_boot, n_sim=args.n_sim, bandwidth=args.bandwidth, seed=rng)
    regions = {t: uq.confidence_region(t, level) for t in TARGETS}
    public: dict[str, Any] = {}
    for t in TARGETS:
        try:
            public[t] = public_region(
                res, target=t, level=level, n=mem.n_memories,
                min_gate_fraction=args.min_gate_fraction, jacobian_bound=args.jacobian_bound,
            )
        except ValueError as exc:
            public[t] = str(exc)
    for w in caught:
        print(f"brace: WARNING: {w.message}", file=sys.stderr)
    print(res)
    print(uq)
    pct = f"{100 * level:g}%"
    Q = uq.released.shape[0]
    hb = regions["bank"].halfwidth()
    hp = regions["population"].halfwidth()
    hpub = public["bank"].halfwidth() if isinstance(public["bank"], ConfidenceRegion) else None
    for i in range(min(Q, 10)):
        print(f"query {i}: per-coordinate {pct} half-widths (bank = privacy only; population "
              "= privacy + sampling)")
        for j, t in enumerate(uq.steps):
            extra = f"  public bank ±{_fmt(hpub[i, j])}" if hpub is not None else ""
            print(f"  t={t}: Y={_fmt(uq.released[i, j])}  bank ±{_fmt(hb[i, j])}  "
                  f"population ±{_fmt(hp[i, j])}{extra}")
    if Q > 10:
        print(f"  … {Q - 10} more queries in --out")
    for t, v in public.items():
        if isinstance(v, str):
            print(f"public {t} region: not formed ({v})")
    if args.out:
        write_json(args.out, {
            "release": res.to_dict(),
            "uq": uq.to_dict(),
            "regions": {t: r.to_dict() for t, r in regions.items()},
            "public_regions": {
                t: (v.to_dict() if isinstance(v, ConfidenceRegion) else {"not_formed": v})
                for t, v in public.items()
            },
        })
        print(f"wrote {args.out}")
    return 0
