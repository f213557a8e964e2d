"""The replaced row of the edge sweeps (``test_private_seeds``, ``test_private_projection``):
one row of ``X`` moved, relative to a centre and a clip, to a place ``where``."""

from __future__ import annotations

import numpy as np

PLACES = ("inside", "sphere", "outside", "far", "subnormal")


def moved_row(X: np.ndarray, rng: np.random.Generator, centre: np.ndarray, clip: float,
              where: str) -> np.ndarray:
    """A copy of ``X`` with one row (chosen by ``rng``) replaced: inside the clip ball, on
    its sphere (to an ulp or so), outside it, far (1e250) or at a subnormal point."""
    d = X.shape[1]
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    Xp = X.copy()
    Xp[int(rng.integers(0, X.shape[0]))] = {
        "inside": centre + clip * float(rng.uniform(0, 1)) * u,
        "sphere": centre + clip * (1 + float(rng.choice([-1, 0, 1])) * 1e-15) * u,
        "outside": centre + clip * float(rng.uniform(1, 5)) * u,
        "far": centre + 1e250 * u, "subnormal": np.full(d, 5e-324)}[where]
    return Xp
