"""Gate passes: one pass over a bank for many centres (``docs/spec.md`` §1, docs/scale.md).

A pass returns, for each centre ``c``, the gate size ``|I(D, c)|`` and the float64 gate
sum (and on request pair counts and near-boundary distances) as a :class:`GatePass`.
Membership is always ``direct_sqdist(X_i, c) ≤ fl(r²)``, so every backend gives the same
counts and memberships:

* :mod:`.contract`: :class:`GatePass`, the validated bank state the backends read,
  :class:`BankMutatedError`;
* :mod:`.dense`: blocked matrix-product tiles (any bank) and :func:`direct_sqdist`;
* :mod:`.kdtree`: KD-tree candidates for low-dimensional in-memory banks;
* :mod:`.memmap`: page release for memory-mapped banks;
* :mod:`.dask`: a map-reduce over the row chunks of a Dask bank;
* :mod:`.torch`: the blocked pass on a torch tensor's own device (torch is imported only
  when a tensor is given).

The package never imports :mod:`brace.memory`; the memory chooses a backend per pass.
"""

from .contract import BANK_DTYPES, BankMutatedError, GatePass
from .dense import band_coefficients, direct_sqdist, gate_pass, mean_rounding_bound

__all__ = [
    "BANK_DTYPES",
    "BankMutatedError",
    "GatePass",
    "band_coefficients",
    "direct_sqdist",
    "gate_pass",
    "mean_rounding_bound",
]
