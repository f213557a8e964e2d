"""Items 1–2 (dimension, horizon): the compared variants, the per-query risks and the
deterministic path bound ``max_t ‖Y_t − z_t‖ ≤ (2T+1)·r`` of the output projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._common import mean_ci95
from ._shared import _RTOL, _ci
from .config import TheoryConfig

# Items 1-2: (variant label, method, κ) — "max" is (2T+1)²/T, where no bank activates.
_VARIANTS = (("brace κ=0", "brace", 0.0), ("brace κ=(2T+1)²/T", "brace", "max"),
             ("global", "global", 0.0), ("endpoint", "endpoint", 0.0))


@dataclass(frozen=True)
class PathBoundCheck:
    """``max_t ‖Y_t − z_t‖ ≤ (2T+1)·r`` (and per step ``‖Y_t − z_t‖ ≤ (2t+1)·r``).

    ``dist`` (Q, T'): ``‖Y_t − z_t‖`` for each released step (endpoint: T' = 1, t = T);
    ``bound`` = ``(2T+1)r``; ``violations``: runs whose maximum exceeds it;
    ``step_violations``: (run, step) pairs exceeding ``(2t+1)r``.
    """

    dist: np.ndarray
    bound: float
    violations: int
    step_violations: int
    max_ratio: float

    def to_dict(self) -> dict:
        return {"bound": self.bound, "violations": self.violations,
                "step_violations": self.step_violations, "max_ratio": self.max_ratio,
                "runs": int(self.dist.shape[0]), "steps_checked": int(self.dist.size)}


def path_bound_check(result: Any, clean: np.ndarray) -> PathBoundCheck:
    """Check the deterministic path bound of the output projection (paper after Thm 5).

    With the projection, ``‖Y_t − q‖ ≤ (t+1)r`` and ``‖z_t − q‖ ≤ tr`` (``docs/spec.md`` §1), hence
    ``‖Y_t − z_t‖ ≤ (2t+1)r ≤ (2T+1)r``. ``clean`` is the (Q, T+1, d) noiseless trajectory.
    """
    r = float(result.params["radius"])
    T = int(result.params["steps"])
    Y = result.outputs
    if Y.shape[1] == 1 and T > 1:  # endpoint: one release of z_T
        z = clean[:, -1:, :]
        t = np.array([T])
    else:
        z = clean[:, 1:, :]
        t = np.arange(1, T + 1)
    dist = np.linalg.norm(Y - z, axis=-1)
    bound = (2 * T + 1) * r
    per_step = (2 * t + 1) * r
    return PathBoundCheck(
        dist=dist,
        bound=bound,
        violations=int((dist.max(axis=1) > bound * (1 + _RTOL)).sum()),
        step_violations=int((dist > per_step[None, :] * (1 + _RTOL)).sum()),
        max_ratio=float(dist.max() / bound),
    )


def _risks(res, clean: np.ndarray) -> dict:
    """Terminal and max-path squared errors (total and per coordinate) per query."""
    d = clean.shape[-1]
    final = ((res.final - clean[:, -1]) ** 2).sum(-1)
    if res.outputs.shape[1] == 1:  # endpoint: the only release is Y_T
        path = final
    else:
        path = ((res.outputs - clean[:, 1:]) ** 2).sum(-1).max(axis=1)
    return {
        "terminal_total": mean_ci95(final),
        "terminal_per_coord": mean_ci95(final / d),
        "max_path_total": mean_ci95(path),
        "max_path_per_coord": mean_ci95(path / d),
    }


def _risk_row(res, clean, **keys) -> dict:
    row = dict(keys)
    row.update(_risks(res, clean))
    row["path_bound"] = path_bound_check(res, clean).to_dict()
    row["gamma"] = res.privacy.gamma
    row["noise_multiplier"] = res.privacy.noise_multiplier
    row["mean_noise_std"] = float(res.noise_std.mean())
    if res.smooth_sensitivity is not None:
        row["mean_smooth_sensitivity"] = float(res.smooth_sensitivity.mean())
        row["activation_rate"] = float(res.activated.mean())
    return row


def _fmt_risks(out: dict, key: str, title: str, cfg: TheoryConfig) -> str:
    lines = [title, f"{key:>4} {'variant':<19} {'proj':<4} {'E|Y_T-z_T|^2 [95% CI]':<32} "
             f"{'per coord':<10} {'E max_t|Y_t-z_t|^2':<19} {'bound viol':>10} "
             f"{'max ratio':>9} {'gamma':>7} {'noise sd':>9} {'act.':>5}"]
    for r in out["rows"]:
        pb = r["path_bound"]
        viol = f"{pb['violations']}/{pb['runs']}"
        lines.append(
            f"{r[key]:>4} {r['variant']:<19} {'yes' if r['projection'] else 'no':<4} "
            f"{_ci(r['terminal_total']):<32} {r['terminal_per_coord']['mean']:<10.4g} "
            f"{r['max_path_total']['mean']:<19.4g} {viol:>10} {pb['max_ratio']:>9.3f} "
            f"{r['gamma']:>7.3g} {r['mean_noise_std']:>9.3g} "
            f"{r['activation_rate'] if 'activation_rate' in r else float('nan'):>5.2f}"
        )
    lines.append("bound viol: runs with max_t |Y_t - z_t| > (2T+1) r (guaranteed 0 with the "
                 "projection); max ratio = max_t |Y_t - z_t| / ((2T+1) r). Endpoint: one "
                 "release, so its max-path risk is its terminal risk. noise sd: mean per-"
                 "coordinate noise std; act.: BRACE activation share.")
    return "\n".join(lines)
