"""The sampling part: covariance of ``√n (z_{1:T} − z̄_{1:T})`` from the bank.

Definitions: ``docs/spec.md`` §6; the method: ``docs/uq.md`` §2–§3.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import check_int_at_least, check_positive, check_queries, check_rng, check_steps
from ..memory import LSRMemory, pins_bank
from ._bankstats import bank_reduce, bootstrap_partials, delta_partials
from ._common import UQWarning, _blocks, _propagator

__all__ = ["SamplingCovariance", "default_bandwidth", "sampling_covariance"]

BANDWIDTH_CONSTANT = 1.0  # b = BANDWIDTH_CONSTANT · r · n^{-1/5} (docs/uq.md §3)


_BLOCK_ELEMS = 1 << 21


def default_bandwidth(n: int, radius: float) -> float:
    """Radial bandwidth of the Jacobian's sphere-kernel estimator,
    ``b = BANDWIDTH_CONSTANT · r · n^{-1/5}``, capped at ``r/2`` (docs/uq.md §3)."""
    return min(BANDWIDTH_CONSTANT * radius * n ** (-0.2), 0.5 * radius)


@dataclass(frozen=True)
class SamplingCovariance:
    """Estimated covariance of ``√n (z_{1:T} − z̄_{1:T})`` for each query (``docs/spec.md`` §6).

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
    memory: LSRMemory, z: np.ndarray, r: float, b: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For queries ``z`` (Q, T+1, d): plug-in ``Γ̂`` (Q, Td, Td), ``Ĵ`` (Q, T, d, d),
    counts (Q, T) and the boundary moment ``(1/n) Σ K_b(ρ_i − r)‖X_i − z_t‖²`` (Q, T).
    One blocked pass over the bank (:func:`._bankstats.delta_partials`; Dask banks on
    their workers), then ``Γ̂_{st} = n·A_{st}/(m_s m_t)`` from the unscaled sums."""
    n = memory.n_memories
    d = z.shape[2]
    A, Jr, m, hr = bank_reduce(memory, delta_partials, z, r, b)
    m = np.asarray(m, dtype=np.int64)
    scale = np.repeat(n / np.maximum(m, 1), d, axis=1)  # (Q, Td): n/m_t per coordinate
    G = A * scale[:, :, None] * scale[:, None, :] / n
    J = Jr / np.maximum(m, 1)[:, :, None, None]
    return G, J, m, hr / n


def _bootstrap(memory: LSRMemory, q: np.ndarray, r: float, T: int, B: int, rng,
               ) -> np.ndarray:
    """Bootstrap clean trajectories (Q, B, T, d): rows resampled with replacement, the
    retrieval map run on each resample (vectorised over resamples, blocked over rows)."""
    n, d = memory.n_memories, memory.dim
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
                cnt, s = bank_reduce(memory, bootstrap_partials, W, c, r)
                c = np.where(cnt[:, None] > 0, s / np.maximum(cnt, 1.0)[:, None], c)
                out[i, b0 : b0 + nb, t] = c
    return out


@pins_bank
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
    """Estimate ``Σ`` of ``√n (z_{1:T} − z̄_{1:T}) ⇒ N(0, Σ)`` from the bank (§6).

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
    n, d = memory.n_memories, memory.dim
    r = memory.radius_
    q, _ = check_queries(queries, d, name="queries")
    T = check_steps(steps)
    b = default_bandwidth(n, r) if bandwidth is None else check_positive("bandwidth", bandwidth)
    if estimator == "bootstrap" and memory._state().kind == "dask":
        raise ValueError(
            "estimator='bootstrap' is not supported on a Dask bank (each resample would "
            "need its own pass over the bank with per-row weights); use "
            "estimator='delta', or an in-memory or memory-mapped bank."
        )
    z = memory.retrieve(q, T)
    G, J, m, h = _jacobians_and_scores(memory, z, r, b)
    bad = (m < 2).any(axis=1)
    if estimator == "delta":
        L = _propagator(J)
        cov = L @ G @ np.swapaxes(L, 1, 2)
        B = None
    else:
        B = check_int_at_least("n_boot", n_boot, 2)
        boot = _bootstrap(memory, q, r, T, B, check_rng(seed)).reshape(q.shape[0], B, T * d)
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
