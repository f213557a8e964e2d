"""Plumbing shared by the experiments: atomic JSON-lines, intervals, plotting.

``NOT_DP_LABEL``, ``versions`` and ``metadata`` live in :mod:`brace._meta` and are
re-exported here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .._io import _json_default, atomic_write_text
from .._meta import NOT_DP_LABEL, metadata, versions

__all__ = [
    "versions",
    "metadata",
    "mean_ci95",
    "read_jsonl",
    "read_resumable",
    "append_jsonl",
    "pyplot",
    "NOT_DP_LABEL",
]


def mean_ci95(values: Any, *, nonnegative: bool | None = None) -> dict[str, float]:
    """Mean and a 95% confidence interval of the mean; ``{"mean", "lo", "hi", "n"}``.

    With ``s`` the sample standard deviation, ``se = s/√n`` and ``t = t_{0.975, n−1}``:

    * signed data: the t-interval ``mean ± t·se``;
    * non-negative data (squared errors; the default whenever every value is ≥ 0): the
      t-interval on the log scale of the mean (delta method, ``se(log m̄) ≈ se/m̄``),
      ``[m̄·exp(−t·se/m̄), m̄·exp(t·se/m̄)]``. Both ends are > 0, the interval is
      asymmetric like the sampling law of a mean of skewed non-negative values, and it
      agrees with the t-interval to first order when ``se ≪ m̄``. A mean of exactly 0
      (all values 0) gives ``[0, 0]``.

    ``nonnegative=True`` insists on the log-scale interval (negative values are an error);
    ``False`` forces the t-interval. Fewer than two values give NaN bounds.
    """
    from scipy import stats

    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise ValueError("values must hold at least one number; got an empty array.")
    m = float(v.mean())
    if nonnegative is None:
        nonnegative = bool(np.all(v >= 0))
    elif nonnegative and np.any(v < 0):
        raise ValueError(f"nonnegative=True needs values >= 0; got a minimum of {v.min():g}. "
                         "Pass nonnegative=False for signed quantities.")
    if v.size < 2:
        return {"mean": m, "lo": math.nan, "hi": math.nan, "n": int(v.size)}
    half = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    if not nonnegative:
        return {"mean": m, "lo": m - half, "hi": m + half, "n": int(v.size)}
    if m == 0.0:
        return {"mean": 0.0, "lo": 0.0, "hi": 0.0, "n": int(v.size)}
    f = math.exp(min(half / m, 700.0))
    return {"mean": m, "lo": m / f, "hi": m * f, "n": int(v.size)}


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSON-lines file (missing file: empty list)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_resumable(path: Path, run_hash: str) -> list[dict]:
    """The records of a resumable ``results.jsonl``; refuses a file written by another
    configuration (another ``run_hash``)."""
    existing = read_jsonl(path)
    foreign = {r.get("run_hash") for r in existing} - {run_hash}
    if foreign:
        raise ValueError(
            f"{path} holds results of a different configuration (run hash "
            f"{sorted(map(str, foreign))[0][:12]}… ≠ {run_hash[:12]}…); pass another --out "
            "or delete that file.")
    return existing


def append_jsonl(path: Path, records: list[dict]) -> None:
    """Append records by rewriting the whole file atomically (never half a line)."""
    old = path.read_text() if path.exists() else ""
    new = "".join(json.dumps(r, default=_json_default) + "\n" for r in records)
    atomic_write_text(path, old + new)


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> Path:
    """Save a figure atomically as PNG, then close it."""
    import io

    import matplotlib.pyplot as plt

    from .._io import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
