"""Number, vector and JSON formatting shared by the audit's results and report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def _fmt_num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:g}"


def _fmt_vec(v: Sequence[float]) -> str:
    return "(" + ", ".join(f"{x:.6g}" for x in v) + ")"


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return _jsonable(v.item())
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v
