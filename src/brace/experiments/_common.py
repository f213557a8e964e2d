"""Plumbing shared by the experiments: metadata, atomic JSON-lines, intervals, plotting."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .._io import _json_default, atomic_write_text

__all__ = [
    "versions",
    "metadata",
    "mean_ci95",
    "read_jsonl",
    "append_jsonl",
    "pyplot",
    "NOT_DP_LABEL",
]

NOT_DP_LABEL = "naive (NOT DP)"


def versions() -> dict[str, str]:
    """Versions of Python and every library an experiment may use."""
    import numpy
    import scipy

    from .. import __version__

    out = {
        "brace-dam": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
    }
    from importlib import metadata as md

    for dist in ("matplotlib", "torch", "tqdm"):  # a fixed list, whatever is imported
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def metadata(config: Any) -> dict:
    """Full config (a dataclass or dict) plus versions, for writing beside results."""
    cfg = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return {"config": cfg, "versions": versions()}


def mean_ci95(values: Any) -> dict[str, float]:
    """Mean and a normal-approximation 95% interval of the mean (t quantile for small n)."""
    from scipy import stats

    v = np.asarray(values, dtype=np.float64).ravel()
    m = float(v.mean())
    if v.size < 2:
        return {"mean": m, "lo": math.nan, "hi": math.nan, "n": int(v.size)}
    half = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return {"mean": m, "lo": m - half, "hi": m + half, "n": int(v.size)}


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSON-lines file (missing file: empty list)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
