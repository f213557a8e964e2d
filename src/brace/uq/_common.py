"""Pieces every part of the UQ shares: the warning, the targets, block linear algebra."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_positive

__all__ = ["UQWarning"]

TARGETS = ("bank", "population")


KINDS = ("step", "joint", "bonferroni", "interval", "box")


class UQWarning(UserWarning):
    """An uncertainty statement is unreliable (e.g. a gate holds too few memories)."""


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


def _mahalanobis2_many(cov: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``xᵀ C⁻¹ x`` for (Q, k, k) covariances and (Q, M, k) points -> (Q, M)."""
    Q, M, k = x.shape
    C = np.repeat(cov, M, axis=0)
    return _mahalanobis2(C, x.reshape(Q * M, k)).reshape(Q, M)
