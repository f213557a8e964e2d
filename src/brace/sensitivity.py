"""The smooth-sensitivity certificate of BRACE (``docs/spec.md`` §5; proof in ``docs/privacy.md``).

At step ``t`` with public history ``y_{<t}`` (centre ``y = Y_{t-1}``) the pre-noise
output is ``Q_t(D) = Π_{B̄(y, r)}(a_t + H_t R_t)``. This module computes

    Δ̄_t(D) = max_{k ≥ 0} e^{-γk} · G_D(k),

where ``G_D(k)`` bounds the local sensitivity of the *computed* ``Q_t`` at every bank
within replacement distance ``k`` of ``D`` and is neighbour-consistent,
``G_{D'}(k) ≤ G_D(k+1)``. Then ``Δ̄_t(D) ≥ LS(D)`` and ``Δ̄_t(D') ≤ e^γ Δ̄_t(D)``
(Nissim, Raskhodnikova & Smith 2007).

Pieces, all vectorised over queries (rows) and ``k = 0..K`` (columns):

(a) fixed centre      ``F_D(k) = 2r / max(m - k, 1) + σ_y``, ``m = |I(D, y)|``;
(b) clean trajectory  ``A_1 = 2r / max(m_q - k, 1) + σ`` (fixed centre at the public
                      ``q``), then for ``s ≥ 2`` the smaller of the walk and the
                      switch bounds from counts around ``z_{s-1}(D)``;
                      ``R_s(k) = Σ_{j<k} A_s(j)``;
(c) activation        ``U_D(k)``: some bank within ``k+1`` might have ``H_t = 1``;
(d) combination       ``G = F`` if not ``U`` else ``min(cap, max(F, θ⁺ + A_t))``.

**Floating point is part of the proof** (``docs/privacy.md`` §8). Every bound carries a
public slack ``σ`` (:meth:`Numerics.slack`) that covers the rounding of computed gate
means, distances, norms and projections; counts use a margin ``τ``; and every quantity
that is summed over ``k`` (``A``, ``F``) or compared in the activation test is rounded
*up* to an integer number of grid units ``g = 2^(⌊log2 r⌋ - 30)``, so that prefix sums
and the consistency inequalities between them are exact integer arithmetic. The
supported inputs are stated (and the rest refused) by :meth:`Numerics.check`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .gates.dense import mean_rounding_bound

__all__ = [
    "TAU_REL",
    "K_CAP",
    "GRID_BITS",
    "SLACK_MAX_REL",
    "Numerics",
    "n_terms",
    "fixed_centre_bound",
    "count_le",
    "sorted_segments",
    "clean_step_bound",
    "prefix_sums",
    "activation_possible",
    "combine",
    "proposed_units",
    "smooth_max",
    "smoothing_rate",
    "RATE_MARGIN",
    "CleanTrajectoryBound",
]

TAU_REL = 1e-9  # count margin τ = TAU_REL · r
K_CAP = 4096  # columns beyond this are bounded by the cap (valid and consistent; see docs)
GRID_BITS = 30  # grid g = 2^(⌊log2 r⌋ − GRID_BITS) for the integer sums
CENTRED_PASSES = 2  # refinements of the centred switch bound per step (each one valid)
SLACK_MAX_REL = 1e-3  # inputs whose floating-point slack exceeds this · r are refused
_U = float(np.finfo(np.float64).eps) / 2.0  # unit roundoff


@dataclass(frozen=True)
class Numerics:
    """Public floating-point constants of one certificate evaluation (``docs/privacy.md`` §8).

    Depends only on public values: the bank size ``n``, the dimension ``d``, the radius
    ``r`` and the horizon ``T``.
    """

    n: int
    d: int
    r: float
    T: int

    @property
    def g(self) -> float:
        """Grid unit, a power of two: ``x / g`` and ``u · g`` are exact."""
        return math.ldexp(1.0, math.frexp(self.r)[1] - 1 - GRID_BITS)

    @property
    def tau(self) -> float:
        """Margin of the counts; also the tolerance budget of the near distances (τ/4)."""
        return TAU_REL * self.r

    @property
    def near_tolerance(self) -> float:
        """Every near distance is within ``τ/4`` of the exact distance."""
        return 0.25 * self.tau

    @property
    def norm_margin(self) -> float:
        """Relative margin of the activation test (rounding of norms and squares)."""
        return 1e-12 + 8.0 * (self.d + 2) * _U

    def slack(self, scale: np.ndarray | float) -> np.ndarray:
        """``σ(scale)``: added to every bound whose means sit at centres ``‖c‖_∞ ≤ scale``.

        ``σ = 2·mean_rounding_bound + τ + 8(d+3)u(2T+3)r + 8u√d(scale + 3r) + 2g``:
        two computed gate means, twice the near-distance error plus the rounding of the
        count thresholds (``≤ τ``), the rounding of norms in the activation test, the
        rounding of the projection and of ``a + R``, and the grid.
        """
        scale = np.asarray(scale, dtype=np.float64)
        # mean_rounding_bound is affine in the scale: c·(scale + r⁺)
        c = mean_rounding_bound(self.n, self.d, self.r, 0.0) / (
            self.r * (1.0 + 4.0 * (self.d + 2) * _U))
        mb = c * (scale + self.r * (1.0 + 4.0 * (self.d + 2) * _U))
        norms = 8.0 * (self.d + 3) * _U * (2 * self.T + 3) * self.r
        proj = 8.0 * _U * math.sqrt(self.d) * (scale + 3.0 * self.r)
        return 1.001 * (2.0 * mb + self.tau + norms + proj) + 2.0 * self.g

    def max_scale(self) -> float:
        """The largest ``‖c‖_∞`` whose slack is at most ``SLACK_MAX_REL · r`` (the slack is
        increasing in the scale; bisection on public values, rounded down), or 0."""
        limit = SLACK_MAX_REL * self.r
        if not float(self.slack(0.0)) <= limit:
            return 0.0
        lo, hi = 0.0, self.r
        while float(self.slack(hi)) <= limit and hi < 1e300:
            lo, hi = hi, hi * 2.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            lo, hi = (mid, hi) if float(self.slack(mid)) <= limit else (lo, mid)
        return lo

    def check(self, scale: np.ndarray | float, what: str = "the queries") -> None:
        """Refuse inputs whose floating-point slack exceeds ``SLACK_MAX_REL · r``."""
        s = float(np.max(self.slack(scale)))
        if not s <= SLACK_MAX_REL * self.r:
            raise ValueError(
                f"coordinates are too large relative to the radius for float64: the "
                f"rounding slack of the certificate is {s:.3g} > {SLACK_MAX_REL:g}·r at "
                f"{what} (max |coordinate| {float(np.max(scale)):.3g}, r = {self.r:.3g}, "
                f"n = {self.n}). Centre the bank and the queries (subtract a common "
                f"offset) or rescale them."
            )
        if (self.d + 3) * _U * 12.0 > 0.25 * TAU_REL:
            raise ValueError(
                f"dim must be at most about 10^6 for the certificate's distance margin; "
                f"got d = {self.d}. Reduce the dimension (e.g. project the bank)."
            )

    def up(self, x: np.ndarray | float) -> np.ndarray:
        """``⌈x / g⌉`` as int64 (an upper bound in grid units; ``x / g`` is exact)."""
        return np.ceil(np.asarray(x, dtype=np.float64) / self.g).astype(np.int64)

    def down(self, x: np.ndarray | float) -> np.ndarray:
        """``⌊x / g⌋`` as int64."""
        return np.floor(np.asarray(x, dtype=np.float64) / self.g).astype(np.int64)

    def value(self, units: np.ndarray) -> np.ndarray:
        """Grid units back to a float (exact below ``2^53`` units; monotone always)."""
        return units.astype(np.float64) * self.g


def n_terms(n: int, gamma: float) -> int:
    """Largest ``k`` evaluated, ``K = min(n - 1, ceil(log(n)/γ), K_CAP)``.

    For ``k > ceil(log n / γ)`` the weight ``e^{-γk}`` times the cap is below
    ``2r/n ≤ F_D(0) ≤ Δ̄``, so those terms never attain the max; for ``k ≥ n - 1``,
    ``F_D(k)`` is at its largest value. Beyond ``K`` the cap is used (see
    :func:`smooth_max`), which is valid and consistent whatever ``K`` is.
    """
    if gamma <= 0:
        return max(0, min(n - 1, K_CAP))
    return int(max(0, min(n - 1, math.ceil(math.log(max(n, 1)) / gamma), K_CAP)))


def fixed_centre_bound(m: np.ndarray, K: int, r: float) -> np.ndarray:
    """(a) exact arithmetic: ``2r / max(m - k, 1)`` for ``k = 0..K``; shape ``(Q, K+1)``.

    Local sensitivity of the gate mean at a public centre for a bank whose gate has
    ``m_B ≥ m - k`` members: in/in ``≤ 2r/m_B``, removal ``≤ 2r/m_B`` (the removed point
    is within ``2r·(m_B-1)/m_B`` of the mean), addition ``≤ 2r/(m_B+1)``, and
    ``≤ r`` from/to an empty gate. :func:`fixed_centre_units` adds the slack.
    """
    k = np.arange(K + 1)
    return 2.0 * r / np.maximum(np.asarray(m, dtype=np.float64)[:, None] - k[None, :], 1.0)


def fixed_centre_units(m: np.ndarray, K: int, num: Numerics, slack: np.ndarray) -> np.ndarray:
    """``F`` in grid units: ``⌈(2r/max(m − k, 1)·(1 + 4u) + σ) / g⌉``."""
    F = fixed_centre_bound(m, K, num.r) * (1.0 + 4.0 * _U)
    return num.up(F + np.asarray(slack, dtype=np.float64).reshape(-1, 1))


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
    """``P(k) = Σ_{j<k} A(j)`` for ``k = 0..K+1``; shape ``(Q, K+2)``. Never capped.

    On int64 grid units the sums are exact (the bounds of :class:`Numerics` keep them
    below ``2^63``).
    """
    out = np.zeros((A.shape[0], A.shape[1] + 1), dtype=A.dtype)
    np.cumsum(A, axis=1, out=out[:, 1:])
    return out


def clean_step_bound(
    A_prev: np.ndarray,
    segments: list[np.ndarray],
    s: int,
    num: Numerics,
    slack: np.ndarray,
    step_length: np.ndarray | None = None,
    passes: int = CENTRED_PASSES,
) -> np.ndarray:
    """(b) One step ``s ≥ 2`` of the clean-trajectory recursion, in grid units.

    With ``a = A_{s-1}(k)``, ``R = R_{s-1}(k)`` (values of the integer units) and the
    distances of ``D``'s rows to ``c = z_{s-1}(D)`` (``segments``: every distance ≤ 2r,
    each within ``τ/4`` of the exact one)::

        L   = #{‖X_i - c‖ ≤ r - a - R - τ}
        W   = #{r - a - R - τ < ‖X_i - c‖ ≤ r + a + R + τ} + k
        n_c = L - k - 1
        cap    = min(2(r + τ) + a, 2s(r + τ + σ))
        walk   = 2(r + τ + a)(W + 1)/(n_c + 1)
        switch = (2(r + τ) + a)/(1 + n_c/(W + 2))      # = (2(r+τ) + a)(W + 2)/(n_c + W + 2)
        A_s(k) = ⌈(min(cap, walk, switch)·(1 + 8u) + σ) / g⌉  if n_c ≥ 1
                 ⌈(cap·(1 + 8u) + σ) / g⌉                     otherwise.

    ``walk`` moves from one gate to the other one row at a time; ``switch`` charges each
    row that switches its distance to the centre of its own gate, through the exact
    identity ``|S'|(μ' − μ) = Σ_{E'}(u − p) − Σ_E(u − p) − (e' − e)(μ − p)``
    (``docs/privacy.md`` §3), and never exceeds ``2(r + τ) + a``. Given the computed
    step length ``step_length = ‖z_s(D) − z_{s-1}(D)‖`` the *centred* switch bound
    (``p = μ``) is added to the min, refined ``passes`` times::

        ℓ       = min(λ̃(1 + μ_n) + σ + R_s(k) + R_{s-1}(k), r + τ)
        centred = max((r + τ + ℓ)(W + 2)/n_c, (r + τ + ℓ + a)/(1 + n_c/(W + 2)))

    with ``R_s`` the prefix sums of the previous pass. Every term is valid, so is the
    min; each is monotone in ``(a, W, n_c, ℓ)`` *as computed* (every argument enters
    one monotone floating-point operation), which the consistency proof needs.

    ``a + R ≥ σ > 0`` at every ``s ≥ 2`` (``A_1 ≥ σ``), so the ``k`` modified rows are
    always counted: the thin-shell case of the old rule cannot arise.
    """
    if s < 2:
        raise ValueError("clean_step_bound is for s >= 2; A_1 is the fixed-centre bound at q.")
    Q, K1 = A_prev.shape
    r, tau = num.r, num.tau
    k = np.arange(K1)[None, :]
    a = num.value(A_prev)
    aR = num.value(A_prev + prefix_sums(A_prev)[:, :K1])
    thr_in = r - aR - tau
    thr_out = r + aR + tau
    L = count_le(segments, thr_in)
    L[thr_in < 0] = 0
    W = count_le(segments, thr_out) - L + k
    nc = L - k - 1
    sig = np.asarray(slack, dtype=np.float64).reshape(-1, 1)
    cap = np.minimum(2.0 * (r + tau) + a, 2.0 * s * (r + tau + sig))
    walk = 2.0 * (r + tau + a) * (W + 1) / np.maximum(nc + 1, 1)
    switch = (2.0 * (r + tau) + a) / (1.0 + np.maximum(nc, 0) / (W + 2))
    A = np.where(nc >= 1, np.minimum(cap, np.minimum(walk, switch)), cap)
    units = num.up(A * (1.0 + 8.0 * _U) + sig)
    if step_length is None:
        return units
    # The centred switch bound (docs/privacy.md §3): each switching row costs its
    # distance to the exact mean μ of B's gate, ``≤ r⁺ + ℓ`` (``+ a`` for rows of the
    # gate of B′), with ``ℓ = λ̃(1 + μ_n) + σ + R_s(k) + R_{s−1}(k) ≥ ‖μ − z_{s−1}(B)‖`` (λ̃ the
    # computed step length of D), capped at ``r + τ``. ``R_s`` is the prefix sum of the
    # previous pass's bound, which is valid and consistent, so every pass is.
    ok = nc >= 1
    ncp = np.maximum(nc, 1)
    lam = num.up(np.asarray(step_length, dtype=np.float64) * (1.0 + num.norm_margin)
                 + sig[:, 0])[:, None]
    R_prev = prefix_sums(A_prev)[:, :K1]
    ell_cap = num.up(r + tau)
    for _ in range(passes):
        ell = num.value(np.minimum(lam + prefix_sums(units)[:, :K1] + R_prev, ell_cap))
        near = ((r + tau) + ell) * (W + 2) / ncp
        far = ((r + tau) + ell + a) / (1.0 + np.maximum(nc, 0) / (W + 2))
        centred = num.up(np.maximum(near, far) * (1.0 + 8.0 * _U) + sig)
        units = np.where(ok, np.minimum(units, centred), units)
    return units


def activation_possible(
    *,
    F: np.ndarray,
    A_t: np.ndarray,
    dist_z_a: np.ndarray,
    dist_z_y: np.ndarray,
    dist_q_y: np.ndarray,
    t: int,
    num: Numerics,
    slack_y: np.ndarray,
    threshold: float,
) -> np.ndarray:
    """(c) ``U_D(k)``: can a bank within ``k + 1`` of ``D`` have ``‖z_t - a_t‖ > θ``?

    ``θ = sqrt(κT)·r``. In grid units (``F``, ``A_t`` are units), true iff the minimum of
    three consistent upper bounds on ``‖z_t(B) - a_t(B)‖`` over ``d(B, D) ≤ k + 1``
    exceeds ``⌊θ(1 − margin)/g⌋``::

        ⌈‖z_t(D) - a_t(D)‖⁺⌉ + R_t(k+1) + α(k+1),   α(K) = Σ_{j<K} F_D(j)
        ⌈‖z_t(D) - y‖⁺⌉      + R_t(k+1) + ⌈r + σ_y⌉
        ⌈t(r + τ + σ_y) + ‖q - y‖⁺ + r + σ_y⌉           (public)

    (``x⁺ = x(1 + margin)`` covers the rounding of the computed norms.)
    """
    mg = 1.0 + num.norm_margin
    sy = np.asarray(slack_y, dtype=np.float64)
    Rt = prefix_sums(A_t)[:, 1:]  # R_t(k+1), k = 0..K
    alpha = prefix_sums(F)[:, 1:]
    b1 = num.up(dist_z_a * mg)[:, None] + Rt + alpha
    b2 = num.up(dist_z_y * mg)[:, None] + Rt + num.up(num.r + sy)[:, None]
    b3 = num.up(t * (num.r + num.tau + sy) + dist_q_y * mg + num.r + sy)[:, None]
    bound = np.minimum(np.minimum(b1, b2), b3)
    return bound > num.down(threshold * (1.0 - num.norm_margin))


def combine(
    F: np.ndarray,
    U: np.ndarray,
    A_t: np.ndarray | None,
    threshold: float,
    num: Numerics,
    slack_y: np.ndarray,
) -> np.ndarray:
    """(d) In grid units: ``G = F`` where ``U`` is false, else ``min(cap, max(F, θ⁺ + A_t))``.

    ``cap = ⌈2r + σ_y⌉`` (both outputs lie in ``B̄(y, r)`` up to rounding),
    ``θ⁺ = ⌈θ(1 + margin) + σ_y⌉`` (a bank that does not activate has
    ``‖z_t − a_t‖ ≤ θ(1 + margin)``; ``σ_y`` covers the projection's rounding).
    """
    if A_t is None or not U.any():
        return F
    sy = np.asarray(slack_y, dtype=np.float64)
    cap = cap_units(num, sy)[:, None]
    th = num.up(threshold * (1.0 + num.norm_margin) + sy)[:, None]
    return np.where(U, np.minimum(cap, np.maximum(F, th + A_t)), F)


def proposed_units(num: Numerics, noisy_counts: np.ndarray, margin: int,
                   slack_y: np.ndarray) -> np.ndarray:
    """The count release's public sensitivity ``b`` in grid units
    (``docs/privacy-accounting.md`` §9): ``min(F(m_p, k = 0), cap)`` with the proposal
    ``m_p = max(m̃ − M, 1)`` — a function of the released counts and the centre only."""
    m_prop = np.maximum(np.asarray(noisy_counts, dtype=np.int64) - margin, 1)
    return np.minimum(fixed_centre_units(m_prop, 0, num, slack_y)[:, 0],
                      cap_units(num, slack_y))


def cap_units(num: Numerics, slack_y: np.ndarray) -> np.ndarray:
    """``⌈(2r + σ_y)/g⌉``: no output moves by more (both lie in ``B̄(y, r)``)."""
    return num.up(2.0 * num.r + np.asarray(slack_y, dtype=np.float64))


#: the default gap ``γ − γ'`` of the smoothing rate (plain noise; secure noise asks more)
RATE_MARGIN = 2e-15


def smoothing_rate(gamma: float, margin: float = RATE_MARGIN) -> float:
    """The rate ``γ'`` used in the weights ``e^{-γ'k}``: ``γ − margin`` (0 if smaller).

    The computed weights and the noise std ``Δ̄·multiplier`` carry a few roundings; a
    rate ``2·10⁻¹⁵`` below γ keeps the realised ratio of noise scales ≤ ``e^γ``. Secure
    noise rounds σ² up to a rational, and asks ``2^-30`` (``docs/privacy-accounting.md``
    §13, Theorem 11).
    """
    return max(0.0, float(gamma) - margin)


def smooth_max(G: np.ndarray, gamma: float, cap: np.ndarray | float,
               margin: float = RATE_MARGIN) -> np.ndarray:
    """``Δ̄ = max(max_{k≤K} e^{-γ'k} G(k), e^{-γ'(K+1)}·cap)`` (``G``, ``cap`` as floats),
    ``γ' = γ − margin``.

    The tail term covers every ``k > K`` using only ``G ≤ cap``; replacing ``G(k)`` by
    the cap for ``k > K`` keeps the bound valid and consistent.
    """
    g = smoothing_rate(gamma, margin)
    K1 = G.shape[1]
    w = np.exp(-g * np.arange(K1))
    tail = math.exp(-g * K1) * np.asarray(cap, dtype=np.float64)
    return np.maximum((G * w[None, :]).max(axis=1), tail)


@dataclass
class CleanTrajectoryBound:
    """State of recursion (b) across steps: ``A_s`` (grid units) for the last processed ``s``.

    Depends only on ``D`` and ``q`` (never on the released history), so it is computed
    once per query and reused by every step.
    """

    n_queries: int
    K: int
    num: Numerics
    query_scale: np.ndarray  # ‖q‖_∞ per query
    s: int = 0
    A: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.A = np.zeros((self.n_queries, self.K + 1), dtype=np.int64)  # A_0 ≡ 0

    def slack(self, s: int) -> np.ndarray:
        """``σ`` of step ``s``: centres ``z_{s-1}`` satisfy ``‖z_{s-1}‖_∞ ≤ ‖q‖_∞ + 1.01(s−1)r``."""
        return self.num.slack(self.query_scale + 1.01 * (s - 1) * self.num.r)

    def advance(self, *, clean_counts: np.ndarray | None = None,
                segments: list[np.ndarray] | None = None,
                step_length: np.ndarray | None = None) -> np.ndarray:
        """Process step ``s + 1``; returns ``A_{s+1}`` (grid units).

        Step 1 needs ``clean_counts = |I(D, q)|`` (the centre ``z_0 = q`` is public, so
        ``A_1`` is the fixed-centre bound there); later steps need ``segments``, the
        sorted distances to ``z_s(D)``, and ``step_length``, the computed
        ``‖z_{s+1}(D) − z_s(D)‖`` of the centred switch bound (omitted: that bound is
        left out, which is still valid).
        """
        self.s += 1
        sig = self.slack(self.s)
        if self.s == 1:
            self.A = fixed_centre_units(np.asarray(clean_counts), self.K, self.num, sig)
        else:
            self.A = clean_step_bound(self.A, segments, self.s, self.num, sig, step_length)
        return self.A
