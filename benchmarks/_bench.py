"""What the benchmark scripts share: thread limits, the environment record, arguments,
atomic JSON output and tables, timing, memory probes, the seeded banks and queries, and
a throw-away PostgreSQL server.

A script runs as ``python benchmarks/X.py``; it puts this directory on ``sys.path`` (as
for ``peers_dp.py``) and imports this module **before numpy**, so that ``--threads``
acts before a BLAS library loads::

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _bench  # noqa: E402

    if __name__ == "__main__":
        _bench.limit_threads(sys.argv[1:])

    import numpy as np  # noqa: E402

So nothing here imports numpy or brace at module level.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# ------------------------------------------------------------------ threads, environment


def limit_threads(argv: Sequence[str]) -> None:
    """Apply ``--threads N`` of ``argv`` to the BLAS/OpenMP variables; it must run before
    numpy (and its BLAS) is imported."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--threads", type=int, default=None)
    ns, _ = pre.parse_known_args(argv)
    if ns.threads is not None and ns.threads >= 1:
        for var in THREAD_VARS:
            os.environ[var] = str(ns.threads)


def threads_info() -> str:
    """The thread variables that are set (``VAR=N, …``), or "library default"."""
    set_ = {v: os.environ[v] for v in THREAD_VARS if os.environ.get(v) is not None}
    return ", ".join(f"{k}={v}" for k, v in set_.items()) or "library default"


def now() -> str:
    """The time in UTC, to the second (ISO 8601)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """What a result was measured with: library versions (Python, the platform, numpy,
    scipy, brace …), the CPU count and the thread variables."""
    from brace._meta import versions

    return {"versions": versions(), "cpus": os.cpu_count(), "threads": threads_info()}


# ------------------------------------------------------------------ arguments, output


def parser(doc: str | None, *, quick: str | None = "a small smoke run",
           threads: bool = True, json: bool = True) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of ``doc``, with the options
    the scripts share: ``--quick``, ``--threads`` (read again by :func:`limit_threads`
    before numpy loads) and ``--json PATH`` (also spelled ``--out``; ``args.json``)."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    if quick:
        p.add_argument("--quick", action="store_true", help=quick)
    if threads:
        p.add_argument("--threads", type=int, default=None,
                       help="BLAS/OpenMP threads (set before numpy loads; default: leave "
                       "the environment alone)")
    if json:
        p.add_argument("--json", "--out", dest="json", metavar="PATH",
                       help="write the results as JSON (atomically)")
    return p


def save_json(path: str | os.PathLike | None, obj: Any) -> None:
    """Write ``obj`` to ``path`` as strict JSON, atomically (``brace._io.write_json``),
    and say so on stderr; nothing when ``path`` is None."""
    if path is None:
        return
    from brace._io import write_json

    write_json(path, obj)
    print(f"wrote {path}", file=sys.stderr)


def markdown(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A markdown table (``str`` of each cell); ``align`` has an ``r`` for each column to
    align right (``"llrr"``), the others align left."""
    rule = "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header), "l"))
    body = ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(["| " + " | ".join(header) + " |", "|" + rule, *body])


def ci95(values: Any) -> dict[str, float]:
    """Mean and 95 % t-interval of the mean, ``{"mean", "lo", "hi", "n"}``
    (``brace.experiments._common.mean_ci95`` for signed data)."""
    from brace.experiments._common import mean_ci95

    return mean_ci95(values, nonnegative=False)


def fmt_ci(s: dict[str, float], digits: int = 3) -> str:
    """``mean ± half-width`` of :func:`ci95` (the mean alone for one value)."""
    if not math.isfinite(s["lo"]):
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ± {(s['hi'] - s['lo']) / 2:.{digits}f}"


class Log:
    """Progress lines on stderr, stamped with the seconds since the log was made."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def __call__(self, msg: str) -> None:
        print(f"[{self.elapsed:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ timing


@dataclass(frozen=True)
class Times:
    """Wall-clock and CPU seconds of repeated calls."""

    wall: list[float]
    cpu: list[float]

    @property
    def best(self) -> float:
        """The fastest call: on a shared machine, the figure least disturbed by others."""
        return min(self.wall)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def timed(fn: Callable[[], Any], repeats: int = 1, *, warmup: int = 1,
          sync: Callable[[], Any] | None = None) -> Times:
    """Time ``repeats`` calls of ``fn`` after ``warmup`` untimed ones (caches, first
    passes); ``sync`` runs before and after each timed call (a GPU's queue)."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        if sync is not None:
            sync()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        if sync is not None:
            sync()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return Times(wall, cpu)


def percentile(xs: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (numpy's linear rule); NaN for no values."""
    import numpy as np

    return float(np.percentile(np.asarray(xs), p)) if len(xs) else math.nan


def latency(seconds: Sequence[float], ps: Sequence[float] = (50, 99)) -> dict[str, Any]:
    """``{"p50_ms": …, "p99_ms": …, "calls": n}`` of per-call times in seconds."""
    return {**{f"p{p:g}_ms": 1e3 * percentile(seconds, p) for p in ps},
            "calls": len(seconds)}


# ------------------------------------------------------------------ memory probes


class Peak:
    """The peak of ``read()`` (bytes), sampled every ``interval`` s while the context is
    open, and ``extra``: the peak above the level at entry (None if ``read`` is None)."""

    def __init__(self, read: Callable[[], int] | None, interval: float) -> None:
        self.read, self.interval = read, interval
        self.base = self.peak = 0
        self.extra: int | None = None

    def __enter__(self) -> Peak:
        if self.read is not None:
            self.base = self.peak = self.read()
            self._stop = threading.Event()
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            time.sleep(self.interval)

    def __exit__(self, *exc: Any) -> None:
        if self.read is not None:
            self._stop.set()
            self._t.join()
            self.peak = max(self.peak, self.read())
            self.extra = self.peak - self.base


def peak_rss(interval: float = 0.01) -> Peak:
    """Peak resident set size of this process (psutil)."""
    import psutil

    proc = psutil.Process()
    return Peak(lambda: int(proc.memory_info().rss), interval)


def peak_heap(interval: float = 0.0002) -> Peak:
    """Peak in-use heap bytes (glibc ``mallinfo2``: ``uordblks + hblkhd``; numpy's and
    torch's CPU allocations); ``extra`` stays None where ``mallinfo2`` is missing."""
    import ctypes

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return Peak(None, interval)
    fn.restype = _MallInfo2

    def read() -> int:
        m = fn()
        return int(m.uordblks + m.hblkhd)

    return Peak(read, interval)


# ------------------------------------------------------------------ banks and queries


def mixture_bank(n: int, d: int, rng: Any, components: int = 16) -> Any:
    """``n`` rows of a Gaussian mixture: ``components`` centres ~ N(0, 4² I), unit spread
    around them, all drawn from ``rng``."""
    centres = rng.normal(scale=4.0, size=(components, d))
    return centres[rng.integers(0, components, size=n)] + rng.normal(size=(n, d))


def make_bank(n: int, d: int, seed: int, components: int = 16) -> Any:
    """The seeded bank of ``bench_retrieve.py`` (:func:`mixture_bank`, seed ``[seed, n, d]``)."""
    import numpy as np

    return mixture_bank(n, d, np.random.default_rng([seed, n, d]), components)


def near_rows(X: Any, m: int, rng: Any, spread: float = 0.5) -> Any:
    """``m`` random rows of ``X`` (as float64) plus N(0, spread² I): distinct bit for bit
    (no free repeats)."""
    import numpy as np

    rows = np.asarray(X[rng.integers(0, X.shape[0], size=m)], dtype=np.float64)
    return rows + spread * rng.normal(size=(m, X.shape[1]))


def make_queries(X: Any, Q: int, seed: int) -> Any:
    """The seeded queries of ``bench_retrieve.py``: :func:`near_rows` at spread 0.5."""
    import numpy as np

    return near_rows(X, Q, np.random.default_rng([seed, 1, X.shape[0], X.shape[1]]))


def choose_radius(X: Any, queries: Any, frac: float) -> tuple[float, int]:
    """Median over queries of the distance to the k-th nearest bank point, k = ⌈frac·n⌉."""
    import numpy as np

    n = X.shape[0]
    k = max(1, math.ceil(frac * n))
    kth = np.empty(queries.shape[0])
    for i0 in range(0, queries.shape[0], 16):  # 16 × n distances at a time
        Y = queries[i0 : i0 + 16]
        if X.shape[1] <= 8:
            d2 = ((X[None, :, :] - Y[:, None, :]) ** 2).sum(-1)
        else:
            d2 = (Y * Y).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2.0 * Y @ X.T
        kth[i0 : i0 + 16] = np.partition(d2, k - 1, axis=1)[:, k - 1]
    return float(np.sqrt(max(np.median(kth), 0.0))), k


def pilot_radius(X: Any, pilot: Any, gate: float) -> tuple[float, float]:
    """The radius at which a gate at a pilot query holds about ``gate`` memories
    (:func:`choose_radius`; a public choice made from the bank, fine for a benchmark)
    and the median gate size it gives at the pilot queries."""
    import numpy as np

    from brace import LSRMemory

    r, _ = choose_radius(X, pilot, gate / X.shape[0])
    return r, float(np.median(LSRMemory(X, radius=r).gate(pilot, counts=True)))


def nearest(points: Any, centres: Any, block: int = 4096) -> Any:
    """Index of the nearest centre of each point (blocks of ``block`` points; the
    argmin of ``‖c‖² − 2⟨p, c⟩``)."""
    import numpy as np

    out = np.empty(points.shape[0], dtype=np.int64)
    cc = (centres * centres).sum(1)
    for lo in range(0, points.shape[0], block):
        out[lo:lo + block] = np.argmin(cc[None] - 2.0 * points[lo:lo + block] @ centres.T,
                                       axis=1)
    return out


# ------------------------------------------------------------------ PostgreSQL


def pgserver() -> Any:
    """``tests/pgserver.py``: the throw-away PostgreSQL server of the tests."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import pgserver as mod

    return mod


@contextlib.contextmanager
def temp_postgres(enabled: bool = True) -> Iterator[Any]:
    """A started throw-away PostgreSQL server (removed at the end), or None — with a
    note on stderr — where it is not wanted or its binaries or psycopg are missing."""
    if not enabled:
        yield None
        return
    pg = pgserver()
    bindir = pg.find_binaries()
    why = None if bindir is not None else "PostgreSQL server binaries not found"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        why = "psycopg is not installed"
    if why is not None:
        print(f"{why}: the PostgreSQL parts are skipped", file=sys.stderr)
        yield None
        return
    server = pg.TempPostgres(bindir).start()
    try:
        yield server
    finally:
        server.cleanup()
