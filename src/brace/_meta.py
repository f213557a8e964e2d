"""Labels and run metadata shared by the audit, the experiments and the CLI."""

from __future__ import annotations

import dataclasses
import platform
import sys
from typing import Any

__all__ = ["NOT_DP_LABEL", "versions", "metadata"]

NOT_DP_LABEL = "naive (NOT DP)"


def versions() -> dict[str, str]:
    """Versions of Python and every library an experiment may use."""
    import numpy
    import scipy

    from ._version import __version__

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
