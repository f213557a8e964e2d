"""Built-in synthetic data (``docs/spec.md`` §7): the three-component mixture of paper §6.1.

Two dominant Gaussian modes at ``(±1, 0)`` and a broader central component between
them. The paper does not give the weights and spreads; the values below are this
library's choice and are recorded with every experiment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ._validation import check_int_at_least, check_rng

__all__ = ["MixtureSpec", "PAPER_MIXTURE", "sample_mixture"]


@dataclass(frozen=True)
class MixtureSpec:
    """An axis-aligned Gaussian mixture in ``R^d``: weights, means ``(K, d)``, stds ``(K, d)``."""

    weights: tuple = (0.4, 0.4, 0.2)
    means: tuple = ((-1.0, 0.0), (1.0, 0.0), (0.0, 0.0))
    stds: tuple = ((0.25, 0.25), (0.25, 0.25), (0.55, 0.2))
    extra: dict = field(default_factory=dict)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = np.asarray(self.weights, dtype=np.float64)
        mu = np.asarray(self.means, dtype=np.float64)
        sd = np.asarray(self.stds, dtype=np.float64)
        if w.ndim != 1 or mu.shape != sd.shape or mu.shape[0] != w.size:
            raise ValueError(
                f"mixture shapes disagree: weights {w.shape}, means {mu.shape}, stds {sd.shape}."
            )
        if np.any(w < 0) or not np.isclose(w.sum(), 1.0):
            raise ValueError(f"mixture weights must be >= 0 and sum to 1; got {w.tolist()}.")
        if np.any(sd <= 0):
            raise ValueError(f"mixture stds must be > 0; got {sd.tolist()}.")
        return w, mu, sd

    def to_dict(self) -> dict:
        return asdict(self)


PAPER_MIXTURE = MixtureSpec()


def sample_mixture(
    n: int, *, spec: MixtureSpec = PAPER_MIXTURE, seed: Any = None, return_labels: bool = False
):
    """Draw ``n`` points (rows) from ``spec``; optionally also the component labels."""
    n = check_int_at_least("n", n, 1)
    rng = check_rng(seed)
    w, mu, sd = spec.arrays()
    lab = rng.choice(w.size, size=n, p=w)
    X = mu[lab] + sd[lab] * rng.standard_normal((n, mu.shape[1]))
    return (X, lab) if return_labels else X
