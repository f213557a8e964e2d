"""The smooth-sensitivity certificate of BRACE (spec §5; proof in ``docs/privacy.md``).

At step ``t`` with public history ``y_{<t}`` (centre ``y = Y_{t-1}``) the pre-noise
output is ``Q_t(D) = Π_{B̄(y, r)}(a_t + H_t R_t)``. This module computes

    Δ̄_t(D) = max_{k ≥ 0} e^{-γk} · G_D(k),

where ``G_D(k)`` bounds the local sensitivity of ``Q_t`` at every bank within
replacement distance ``k`` of ``D`` and is neighbour-consistent,
``G_{D'}(k) ≤ G_D(k+1)``. Then ``Δ̄_t(D) ≥ LS(D)`` and ``Δ̄_t(D') ≤ e^γ Δ̄_t(D)``
(Nissim, Raskhodnikova & Smith 2007, Def. 2.1 / Prop. 2.2 style construction).

Pieces, all vectorised over queries (rows) and ``k = 0..K`` (columns):

(a) fixed centre      ``F_D(k) = 2r / max(m - k, 1)``, ``m = |I(D, y)|``;
(b) clean trajectory  ``A_s(k)``, ``R_s(k) = Σ_{j<k} A_s(j)`` (recursion over s = 1..t,
                      counts from sorted distances to ``z_{s-1}(D)``);
(c) activation        ``U_D(k)``: some bank within ``k+1`` might have ``H_t = 1``;
(d) combination       ``G = F`` if not ``U`` else ``min(2r, max(F, sqrt(κT)·r + A_t))``.

Floating point: counts use an additive margin ``τ = TAU_REL · r`` (inner counts shrink,
annulus counts grow), which keeps both validity and consistency (the margin cancels in
the consistency argument) and absorbs rounding of directly computed distances; the
activation test uses a threshold lowered by a relative ``1e-12``. Both only enlarge Δ̄.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "TAU_REL",
    "K_CAP",
    "n_terms",
    "fixed_centre_bound",
    "count_le",
    "sorted_segments",
    "clean_step_bound",
    "prefix_sums",
    "activation_possible",
    "combine",
    "smooth_max",
    "CleanTrajectoryBound",
]

TAU_REL = 1e-9
K_CAP = 4096  # columns beyond this are bounded by 2r (valid and consistent; see docs)


def n_terms(n: int, gamma: float) -> int:
    """Largest ``k`` evaluated, ``K = min(n - 1, ceil(log(n)/γ), K_CAP)``.

    For ``k > ceil(log n / γ)``: ``e^{-γk}·2r < 2r/n ≤ F_D(0) ≤ Δ̄``, so those terms
    never attain the max. For ``k ≥ n - 1``: ``F_D(k) = 2r = G_D(k)``. Beyond ``K_CAP``
    the bound ``G ≤ 2r`` is used (see :func:`smooth_max`).
    """
    if gamma <= 0:
        return max(0, n - 1)
    return int(max(0, min(n - 1, math.ceil(math.log(max(n, 1)) / gamma), K_CAP)))


def fixed_centre_bound(m: np.ndarray, K: int, r: float) -> np.ndarray:
    """(a) ``F_D(k) = 2r / max(m - k, 1)`` for ``k = 0..K``; shape ``(Q, K+1)``.

    Local sensitivity of the gate mean at a public centre for a bank whose gate has
    ``m_B ≥ m - k`` members: in/in ``≤ 2r/m_B``, removal ``≤ 2r/m_B`` (the removed point
    is within ``2r·(m_B-1)/m_B`` of the mean), addition ``≤ 2r/(m_B+1)``, and
    ``≤ r`` from/to an empty gate.
    """
    k = np.arange(K + 1)
    return 2.0 * r / np.maximum(np.asarray(m, dtype=np.float64)[:, None] - k[None, :], 1.0)


def sorted_segments(rows: np.ndarray, dist: np.ndarray, n_rows: int) -> list[np.ndarray]:
    """Group ``(row, distance)`` pairs into one sorted distance array per row."""
    grouped = dist[np.argsort(rows, kind="stable")]  # integer keys: a radix sort
    bounds = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n_rows))))
    return [np.sort(grouped[bounds[i] : bounds[i + 1]]) for i in range(n_rows)]


def count_le(segments: list[np.ndarray], thresholds: np.ndarray) -> np.ndarray:
    """``#{dist ≤ θ}`` per row for a ``(Q, K)`` array of thresholds (exact, ties counted)."""
    out = np.empty(thresholds.shape, dtype=np.int64)
    for i, seg in enumerate(segments):  # one binary search per query, vectorised over k
        out[i] = np.searchsorted(seg, thresholds[i], side="right")
    return out


def prefix_sums(A: np.ndarray) -> np.ndarray:
    """``P(k) = Σ_{j<k} A(j)`` for ``k = 0..K+1``; shape ``(Q, K+2)``. Never capped."""
    out = np.zeros((A.shape[0], A.shape[1] + 1))
    np.cumsum(A, axis=1, out=out[:, 1:])
    return out


def clean_step_bound(
    A_prev: np.ndarray,
    segments: list[np.ndarray],
    s: int,
    r: float,
) -> np.ndarray:
    """(b) One step of the clean-trajectory recursion: ``A_s`` from ``A_{s-1}``.

    With ``a = A_{s-1}(k)``, ``R = R_{s-1}(k)`` and the distances of ``D``'s rows to
    ``c = z_{s-1}(D)`` (``segments``, all distances ≤ 2r + τ suffice)::

        L   = #{‖X_i - c‖ ≤ r - a - R - τ}
        W   = #{r - a - R - τ < ‖X_i - c‖ ≤ r + a + R + τ} + k·1{a + R > 0}
        n_c = L - k - 1
        A_s(k) = min(2r + a, 2sr, 2(r + a)(W + 1)/(n_c + 1))   if n_c ≥ 1
                 min(2r + a, 2sr)                               otherwise.
    """
    Q, K1 = A_prev.shape
    k = np.arange(K1)[None, :]
    a = A_prev
    R = prefix_sums(A_prev)[:, :K1]
    tau = TAU_REL * r
    aR = a + R
    thr_in = r - aR - tau
    thr_out = r + aR + tau
    L = count_le(segments, thr_in)
    L[thr_in < 0] = 0
    W = count_le(segments, thr_out) - L + k * (aR > 0)
    nc = L - k - 1
    A = np.minimum(2.0 * r + a, 2.0 * s * r)
    ok = nc >= 1
    walk = 2.0 * (r + a) * (W + 1) / np.maximum(nc + 1, 1)
    return np.where(ok, np.minimum(A, walk), A)


def activation_possible(
    *,
    F: np.ndarray,
    A_t: np.ndarray,
    dist_z_a: np.ndarray,
    dist_z_y: np.ndarray,
    dist_q_y: np.ndarray,
    t: int,
    r: float,
    threshold: float,
) -> np.ndarray:
    """(c) ``U_D(k)``: can a bank within ``k + 1`` of ``D`` have ``‖z_t - a_t‖ > θ``?

    ``θ = sqrt(κT)·r``. True iff the minimum of three consistent upper bounds on
    ``‖z_t(B) - a_t(B)‖`` over ``d(B, D) ≤ k + 1`` exceeds ``θ``::

        ‖z_t(D) - a_t(D)‖ + R_t(k+1) + α(k+1),   α(K) = Σ_{j<K} F_D(j)
        ‖z_t(D) - y‖      + R_t(k+1) + r
        t·r + ‖q - y‖ + r                          (public)
    """
    Rt = prefix_sums(A_t)[:, 1:]  # R_t(k+1), k = 0..K
    alpha = prefix_sums(F)[:, 1:]
    b1 = dist_z_a[:, None] + Rt + alpha
    b2 = dist_z_y[:, None] + Rt + r
    b3 = (t * r + dist_q_y + r)[:, None]
    bound = np.minimum(np.minimum(b1, b2), b3)
    return bound > threshold * (1.0 - 1e-12)


def combine(F: np.ndarray, U: np.ndarray, A_t: np.ndarray | None, threshold: float, r: float):
    """(d) ``G = F`` where ``U`` is false, else ``min(2r, max(F, θ + A_t))``."""
    if A_t is None or not U.any():
        return F
    return np.where(U, np.minimum(2.0 * r, np.maximum(F, threshold + A_t)), F)


def smooth_max(G: np.ndarray, gamma: float, r: float) -> np.ndarray:
    """``Δ̄ = max(max_{k≤K} e^{-γk} G(k), e^{-γ(K+1)}·2r)``.

    The tail term covers every ``k > K`` using only ``G ≤ 2r``; replacing ``G(k)`` by
    ``2r`` for ``k > K`` keeps the bound valid and consistent.
    """
    K1 = G.shape[1]
    w = np.exp(-gamma * np.arange(K1))
    tail = math.exp(-gamma * K1) * 2.0 * r
    return np.maximum((G * w[None, :]).max(axis=1), tail)


@dataclass
class CleanTrajectoryBound:
    """State of recursion (b) across steps: ``A_{s}`` for the last processed ``s``.

    Depends only on ``D`` and ``q`` (never on the released history), so it is computed
    once per query and reused by every step.
    """

    n_queries: int
    K: int
    r: float
    s: int = 0
    A: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.A = np.zeros((self.n_queries, self.K + 1))  # A_0 ≡ 0

    def advance(self, segments: list[np.ndarray]) -> np.ndarray:
        """Process step ``s + 1`` given sorted distances to ``z_s(D)``; returns ``A_{s+1}``."""
        self.s += 1
        self.A = clean_step_bound(self.A, segments, self.s, self.r)
        return self.A
