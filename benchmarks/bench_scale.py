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
    python benchmarks/bench_scale.py --backend torch [--device cuda]  # a torch bank

``--backend torch`` puts the bank in a torch tensor on ``--device`` (default: ``cuda`` when
available, else ``cpu``) and adds a plain torch brute-force mean shift on the same device
(float32 expansion tiles, mask products; no certified band, no canonical formula) as the
reference the torch backend is compared against; on a GPU the peak GPU memory is reported.
It then measures the extra memory of BRACE on a **fresh** torch bank (a copy never seen by
the library): the first call (validation, fingerprint and the passes) and a second call
on the same memory, each as the peak of the in-use heap (glibc ``mallinfo2``, sampled
every 0.2 ms: numpy's and torch's CPU allocations; on a GPU, torch's peak allocated
memory) above its level before the call, per byte of the bank (target: ≤ 0.25 for every
call, the first included).
``--repeats k`` runs each timing ``k`` times and reports the median (and every run).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
import numpy as np  # noqa: E402


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


def torch_bruteforce(Xt: Any, q: np.ndarray, r: float, steps: int) -> np.ndarray:
    """Plain mean shift with the flat kernel in torch on ``Xt``'s device: the gate by the
    float32 (bank dtype) expansion, sums by mask products, blocks of 65,536 rows."""
    import torch

    n = Xt.shape[0]
    z = torch.from_numpy(q).to(device=Xt.device, dtype=Xt.dtype)
    xsq = (Xt * Xt).sum(dim=1)
    r2 = r * r
    with torch.no_grad():
        for _ in range(steps):
            sums = torch.zeros_like(z)
            cnt = torch.zeros(z.shape[0], dtype=Xt.dtype, device=Xt.device)
            zsq = (z * z).sum(dim=1)
            for b0 in range(0, n, 1 << 16):
                Xb = Xt[b0 : b0 + (1 << 16)]
                d2 = zsq[:, None] + xsq[None, b0 : b0 + Xb.shape[0]] - 2.0 * (z @ Xb.T)
                mk = (d2 <= r2).to(Xt.dtype)
                sums += mk @ Xb
                cnt += mk.sum(dim=1)
            z = torch.where(cnt[:, None] > 0, sums / cnt.clamp(min=1.0)[:, None], z)
    return z.cpu().numpy()


def _sync(device: Any) -> None:
    if device is not None and device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def fresh_bank_memory(X: np.ndarray, q: np.ndarray, r: float, args: Any,
                      device: Any) -> dict[str, Any]:
    """BRACE's extra memory per bank byte on a fresh torch bank: the first call and a
    second call on the same memory (heap on the CPU, allocated memory on a GPU)."""
    import torch

    from brace import LSRMemory, private_retrieve

    bank = torch.from_numpy(np.array(X)).to(device)  # a new tensor: never validated
    nbytes = bank.numel() * bank.element_size()
    mem = LSRMemory(bank, radius=r, threads=args.threads)
    out: dict[str, Any] = {}
    for label in ("first", "second"):
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        with _bench.peak_heap() as ph:
            private_retrieve(mem, q, method="brace", epsilon=args.epsilon, delta=1e-5,
                             steps=args.steps, seed=0)
        if cuda:
            torch.cuda.synchronize(device)
            extra = torch.cuda.max_memory_allocated(device) - base
        else:
            extra = ph.extra
        out[f"fresh_bank_{label}_call_extra_share"] = (None if extra is None
                                                       else extra / nbytes)
        print(f"fresh bank, {label} call: extra "
              + ("n/a (no mallinfo2)" if extra is None else
                 f"{extra / 2**20:.1f} MiB = {extra / nbytes:.3f}x the bank "
                 f"({'GPU allocated' if cuda else 'heap in use'})"), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, threads=False)
    p.add_argument("--n", type=float, default=None)
    p.add_argument("--d", type=int, default=384)
    p.add_argument("--Q", type=int, default=None)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epsilon", type=float, default=64.0)
    p.add_argument("--mmap", default=None, help="directory for a memory-mapped bank file")
    p.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    p.add_argument("--device", default=None, help="torch device (default cuda if available)")
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args(argv)
    n = int(args.n or (1e5 if args.quick else 1e6))
    Q = args.Q or (256 if args.quick else 1000)
    import psutil

    from brace import LSRMemory, private_retrieve

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
    q = _bench.near_rows(X, Q, rng)
    r = _radius(X, q, 0.01)
    bank_mib = X.nbytes / 2**20
    rss0 = psutil.Process().memory_info().rss / 2**20
    out: dict[str, Any] = {"n": n, "d": args.d, "Q": Q, "T": args.steps, "dtype": args.dtype,
                           "mmap": bool(args.mmap), "radius": r, "bank_mib": bank_mib,
                           "rss_before_mib": rss0, "threads": args.threads,
                           "epsilon": args.epsilon}
    device = None
    bank: Any = X
    runs: list[tuple[str, Any]] = []
    if args.backend == "torch":
        import torch

        torch.set_num_threads(args.threads)
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        bank = torch.from_numpy(np.ascontiguousarray(X)).to(device)
        out.update(backend="torch", device=str(device))
        runs.append(("torch_bruteforce", lambda: torch_bruteforce(bank, q, r, args.steps)))
    else:
        out["backend"] = "numpy"
    LSRMemory(bank[:4096], radius=r, threads=args.threads).retrieve(q[:4], 1)  # warm-up
    runs += [
        ("noiseless", lambda: LSRMemory(bank, radius=r, threads=args.threads).retrieve(
            q, args.steps)),
        ("brace", lambda: private_retrieve(LSRMemory(bank, radius=r, threads=args.threads), q,
                                           method="brace", epsilon=args.epsilon, delta=1e-5,
                                           steps=args.steps, seed=0)),
    ]
    for label, fn in runs:
        if device is not None and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        with _bench.peak_rss() as pk:
            times = _bench.timed(fn, max(1, args.repeats), warmup=0,
                                 sync=lambda: _sync(device)).wall
        out[f"{label}_s"] = float(np.median(times))
        out[f"{label}_runs_s"] = times
        out[f"{label}_peak_rss_mib"] = pk.peak / 2**20
        # what the call added beyond the process's RSS with the bank loaded, per bank byte
        # (target for the torch pass with few centres: <= 0.25)
        out[f"{label}_extra_rss_share"] = (pk.peak / 2**20 - rss0) / bank_mib
        if device is not None and device.type == "cuda":
            out[f"{label}_peak_gpu_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        print(f"{label}: median {out[f'{label}_s']:.2f} s of {len(times)} "
              f"({', '.join(f'{t:.2f}' for t in times)}), peak RSS {pk.peak / 2**20:.0f} MiB "
              f"(bank {bank_mib:.0f} MiB, RSS before {rss0:.0f} MiB; extra "
              f"{out[f'{label}_extra_rss_share']:.3f}x the bank)", flush=True)
    if device is not None:
        out.update(fresh_bank_memory(X, q, r, args, device))
    out["brace_over_noiseless"] = out["brace_s"] / out["noiseless_s"]
    print(f"BRACE / noiseless = {out['brace_over_noiseless']:.2f}")
    if "torch_bruteforce_s" in out:
        out["brace_over_bruteforce"] = out["brace_s"] / out["torch_bruteforce_s"]
        print(f"BRACE / torch brute force = {out['brace_over_bruteforce']:.2f}")
    _bench.save_json(args.json, {"benchmark": "bench_scale", **_bench.environment(), **out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
