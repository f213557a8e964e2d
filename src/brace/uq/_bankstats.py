"""The bank sums the UQ needs, as a blocked map-reduce over row blocks (docs/uq.md §3.4).

Every bank quantity of the sampling estimate is a sum over rows of a function of the
row and the (public to this computation) clean trajectory, so it is computed block by
block: in-memory and memory-mapped banks stream their row blocks
(``_MemoryBase._blocks``), Dask banks run the same block function on each chunk's
worker and the partials are added pairwise on the workers (``brace.gates.dask.map_reduce``).
Only ``O(Q·(Td)²)`` partials reach the client, never the bank. Counts are exact in any
blocking; float sums differ only by float64 summation order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..gates.dense import direct_sqdist

_BLOCK_ELEMS = 1 << 21  # entries of one (T, rows, d) difference array


def _epanechnikov(u: np.ndarray) -> np.ndarray:
    return 0.75 * np.maximum(1.0 - u * u, 0.0)


def delta_partials(Xb: np.ndarray, b0: int, z: np.ndarray, r: float, b: float) -> tuple:
    """Unnormalised delta-method sums over the rows ``Xb`` (starting at row ``b0``) for
    trajectories ``z`` (Q, T+1, d), with the gate
    ``m_{t,i} = 1{direct_sqdist(X_i, z_{t-1}) ≤ r²}``,
    ``dev_{t,i} = X_i − z_t``, ``ρ_{t,i} = ‖X_i − z_{t-1}‖`` and
    ``K_{t,i} = K_b(ρ_{t,i} − r)``:

    * ``A`` (Q, Td, Td): ``Σ_i φ_i φ_iᵀ``, ``φ_i = (m_{t,i} dev_{t,i})_{t=1..T}``;
    * ``Jr`` (Q, T, d, d): ``Σ_i K_{t,i} dev_{t,i} ν_{t,i}ᵀ``, ``ν = (X_i − z_{t-1})/ρ``;
    * ``cnt`` (Q, T) int64: ``Σ_i m_{t,i}``;
    * ``hr`` (Q, T): ``Σ_i K_{t,i} ‖dev_{t,i}‖²``.

    Only rows inside some gate enter ``A`` and only rows with ``|ρ − r| < b`` enter
    ``Jr`` and ``hr`` (the others contribute exact zeros).
    """
    Xb = np.asarray(Xb, dtype=np.float64)
    Q, T1, d = z.shape
    T = T1 - 1
    r2 = r * r
    A = np.zeros((Q, T * d, T * d))
    Jr = np.zeros((Q, T, d, d))
    cnt = np.zeros((Q, T), dtype=np.int64)
    hr = np.zeros((Q, T))
    step = max(1, _BLOCK_ELEMS // max(1, T * d))
    for s0 in range(0, Xb.shape[0], step):
        X = Xb[s0 : s0 + step]
        for k in range(Q):
            c = z[k, :T]  # the centres z_0 .. z_{T-1}
            rho2 = direct_sqdist(X[None], c[:, None, :])  # (T, rows)
            mask = rho2 <= r2
            cnt[k] += mask.sum(axis=1)
            rows = np.flatnonzero(mask.any(axis=0))
            if rows.size:
                dev = X[rows][None] - z[k, 1:, None, :]  # (T, rows, d)
                phi = (mask[:, rows, None] * dev).transpose(1, 0, 2).reshape(rows.size, -1)
                A[k] += phi.T @ phi
            rho = np.sqrt(rho2)
            ti, ri = np.nonzero(np.abs(rho - r) < b)
            if ti.size:
                Kw = _epanechnikov((rho[ti, ri] - r) / b) / b
                dev = X[ri] - z[k, ti + 1]
                nu = (X[ri] - c[ti]) / np.where(rho[ti, ri] > 0, rho[ti, ri], 1.0)[:, None]
                np.add.at(hr[k], ti, Kw * np.einsum("ij,ij->i", dev, dev))
                for t in np.unique(ti):
                    s = ti == t
                    Jr[k, t] += (Kw[s, None] * dev[s]).T @ nu[s]
    return A, Jr, cnt, hr


def bootstrap_partials(Xb: np.ndarray, b0: int, W: np.ndarray, c: np.ndarray, r: float,
                       ) -> tuple:
    """Weighted gate sums over the rows ``Xb`` for resample weights ``W`` (B, n) (its
    columns ``b0 …`` are the rows of ``Xb``) and centres ``c`` (B, d):
    ``(Σ_i W_bi 1{‖X_i − c_b‖² ≤ r²}, Σ_i W_bi 1{…} X_i)``, with the distance by
    the expansion ``‖X_i‖² + ‖c_b‖² − 2 c_bᵀX_i`` (as in 0.1.0)."""
    X = np.asarray(Xb, dtype=np.float64)
    W = W[:, b0 : b0 + X.shape[0]]
    d2 = np.einsum("ij,ij->i", X, X)[None, :] + np.einsum("ij,ij->i", c, c)[:, None] \
        - 2.0 * (c @ X.T)
    wm = W * (d2 <= r * r)
    return wm.sum(1), wm @ X


def bank_reduce(memory: Any, fn: Any, *args: Any) -> tuple:
    """``Σ_blocks fn(X_block, offset, *args)`` (a tuple of arrays, added element-wise) over the
    memory's bank: row blocks on the client for numpy and memory-mapped banks, chunk
    partials on the workers for Dask banks (verified by their chunk digests)."""
    st = memory._state()
    if st.kind == "dask":
        from ..gates.dask import map_reduce

        return map_reduce(st, fn, args)
    total = None
    for b0, Xb in memory._blocks():
        part = fn(Xb, b0, *args)
        total = part if total is None else tuple(a + p for a, p in zip(total, part, strict=True))
        if st.release is not None:
            st.release(b0, b0 + Xb.shape[0])
    return total
