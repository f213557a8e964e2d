"""The population model: a known Gaussian mixture ``P`` and its trajectory (``docs/spec.md`` §6)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import as_float_array, check_int_at_least, check_positive, check_rng, check_steps
from ..datasets import MixtureSpec
from ._common import _propagator

__all__ = ["MixturePopulation"]

@dataclass(frozen=True)
class MixturePopulation:
    """A known 2-D axis-aligned Gaussian mixture as the population ``P`` (``docs/spec.md`` §6).

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
        from ..datasets import sample_mixture

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
