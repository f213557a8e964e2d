"""Default BRACE at scale: time and peak RSS against the bank's size.

Bank: ``n × d`` seeded 16-component Gaussian mixture generated block by block directly
in ``--dtype`` (default float32; no float64 copy is ever made), queries: ``Q`` bank rows
plus N(0, 0.5² I) noise, radius: median distance to the ⌈1 %·n⌉-th neighbour over 64 of
the queries. Timed: noiseless ``LSRMemory.retrieve`` and default BRACE
(``private_retrieve(method="brace")`` with its default κ, ``--epsilon`` (default 64, as
``bench_private.py``; at small ε the released states are far from the data, their gates
are empty and BRACE looks cheaper than noiseless), δ = 1e-5), each on a fresh memory
(validation and fingerprint included) after a small warm-up call. Peak RSS is sampled
every 10 ms (psutil) and reported beside the bank's size; the targets of the scale
issue are BRACE < 2 min and peak RSS ≤ bank + 1 GiB at n = 1e6, d = 384, Q = 1000, T = 5.

Usage::

    python benchmarks/bench_scale.py                 # n = 1e6, d = 384, Q = 1000, T = 5
    python benchmarks/bench_scale.py --quick         # n = 1e5, Q = 256
    python benchmarks/bench_scale.py --mmap DIR      # bank as a memory-mapped .npy in DIR
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from typing import Any

import numpy as np


def make_bank(n: int, d: int, dtype: str, seed: int = 0, out: Any = None) -> np.ndarray:
    rng = np.random.default_rng([seed, d])
    centres = rng.normal(scale=4.0, size=(16, d))
    X = np.empty((n, d), dtype=dtype) if out is None else out
    step = 1 << 16
    for b0 in range(0, n, step):
        g = np.random.default_rng([seed, d, b0])
        m = min(step, n - b0)
        X[b0 : b0 + m] = centres[g.integers(0, 16, size=m)] + g.normal(size=(m, d))
    return X


def _radius(X: np.ndarray, q: np.ndarray, frac: float) -> float:
    k = max(1, math.ceil(frac * X.shape[0]))
    from brace.gates.dense import direct_sqdist

    step = 1 << 15  # row blocks: no n × d temporary

    def sq(y: np.ndarray) -> np.ndarray:
        return np.concatenate([direct_sqdist(X[b0 : b0 + step], y)
                               for b0 in range(0, X.shape[0], step)])

    kth = [np.partition(sq(y), k - 1)[k - 1] for y in q[:64]]
    return float(np.sqrt(np.median(kth)))


class PeakRSS:
    """Peak resident set size of this process while the context is open (psutil)."""

    def __enter__(self) -> PeakRSS:
        import psutil

        self._p = psutil.Process()
        self.peak = self._p.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._p.memory_info().rss)
            time.sleep(0.01)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._p.memory_info().rss)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=float, default=None)
    p.add_argument("--d", type=int, default=384)
    p.add_argument("--Q", type=int, default=None)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epsilon", type=float, default=64.0)
    p.add_argument("--mmap", default=None, help="directory for a memory-mapped bank file")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    n = int(args.n or (1e5 if args.quick else 1e6))
    Q = args.Q or (256 if args.quick else 1000)
    import psutil

    from brace import LSRMemory, private_retrieve
    from brace._io import write_json

    if args.mmap:
        path = os.path.join(args.mmap, f"bank_{n}_{args.d}_{args.dtype}.npy")
        if not os.path.exists(path):
            mm = np.lib.format.open_memmap(path, mode="w+", dtype=args.dtype, shape=(n, args.d))
            make_bank(n, args.d, args.dtype, out=mm)
            mm.flush()
            del mm
        X = np.load(path, mmap_mode="r")
    else:
        X = make_bank(n, args.d, args.dtype)
    rng = np.random.default_rng(1)
    q = np.asarray(X[rng.integers(0, n, size=Q)], dtype=np.float64)
    q += 0.5 * rng.normal(size=q.shape)
    r = _radius(X, q, 0.01)
    bank_mib = X.nbytes / 2**20
    rss0 = psutil.Process().memory_info().rss / 2**20
    out: dict[str, Any] = {"n": n, "d": args.d, "Q": Q, "T": args.steps, "dtype": args.dtype,
                           "mmap": bool(args.mmap), "radius": r, "bank_mib": bank_mib,
                           "rss_before_mib": rss0, "threads": args.threads,
                           "epsilon": args.epsilon}
    LSRMemory(X[:4096], radius=r, threads=args.threads).retrieve(q[:4], 1)  # warm-up
    for label, fn in (
        ("noiseless", lambda: LSRMemory(X, radius=r, threads=args.threads).retrieve(
            q, args.steps)),
        ("brace", lambda: private_retrieve(LSRMemory(X, radius=r, threads=args.threads), q,
                                           method="brace", epsilon=args.epsilon, delta=1e-5,
                                           steps=args.steps, seed=0)),
    ):
        with PeakRSS() as pk:
            t0 = time.perf_counter()
            fn()
            out[f"{label}_s"] = time.perf_counter() - t0
        out[f"{label}_peak_rss_mib"] = pk.peak / 2**20
        print(f"{label}: {out[f'{label}_s']:.1f} s, peak RSS {pk.peak / 2**20:.0f} MiB "
              f"(bank {bank_mib:.0f} MiB, RSS before {rss0:.0f} MiB)", flush=True)
    out["brace_over_noiseless"] = out["brace_s"] / out["noiseless_s"]
    print(f"BRACE / noiseless = {out['brace_over_noiseless']:.2f}")
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
