"""What the theory checks share: the mixture embedded in ``R^d``, queries near memories,
releases with the config's budget, the floating-point slack of the checks.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ... import NotPrivateWarning, private_retrieve
from ..._validation import check_int_at_least, check_nonnegative
from ...datasets import PAPER_MIXTURE, MixtureSpec

# Relative slack of the floating-point inequality checks (the bounds are exact in reals).
_RTOL = 1e-9


def embedded_mixture(dim: int, *, off_plane_std: float = 0.1,
                     base: MixtureSpec = PAPER_MIXTURE) -> MixtureSpec:
    """The paper's 2-D mixture embedded in ``R^d``.

    Coordinates 1–2 are ``base``; the other ``d − 2`` coordinates are centred Gaussians
    with per-coordinate std ``off_plane_std/sqrt(d − 2)``, so the off-plane part adds the
    same ``off_plane_std²`` to every squared distance's expectation at every d: the gate
    geometry is (nearly) the same across d, and what changes with d is the noise.
    """
    d = check_int_at_least("dim", dim, 2)
    tau = check_nonnegative("off_plane_std", off_plane_std)
    _, mu, sd = base.arrays()
    if mu.shape[1] != 2:
        raise ValueError(f"base mixture must be 2-D; got means of shape {mu.shape}.")
    K = mu.shape[0]
    extra = d - 2
    per = tau / math.sqrt(extra) if extra else 0.0
    means = np.zeros((K, d))
    means[:, :2] = mu
    stds = np.full((K, d), max(per, 1e-12))
    stds[:, :2] = sd
    return MixtureSpec(
        weights=tuple(base.weights), means=tuple(map(tuple, means.tolist())),
        stds=tuple(map(tuple, stds.tolist())),
        extra={"embedded_from": "2-D base mixture", "off_plane_std_total": tau},
    )


def _queries_near_memories(X: np.ndarray, count: int, spread: float, rng) -> np.ndarray:
    """A random memory plus ``N(0, spread²)`` in the first two coordinates."""
    q = X[rng.integers(0, len(X), count)].copy()
    q[:, :2] += rng.normal(0.0, spread, (count, 2))
    return q


def _retrieve(mem, q, method, cfg, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)  # labelled in every output
        kw.setdefault("epsilon", cfg.epsilon)
        kw.setdefault("delta", cfg.delta)
        kw.setdefault("steps", cfg.steps)
        kw.setdefault("accounting", cfg.accounting)
        return private_retrieve(mem, q, method=method, **kw)


def _ci(c: dict, fmt: str = ".4g") -> str:
    return f"{c['mean']:{fmt}} [{c['lo']:{fmt}}, {c['hi']:{fmt}}]"
