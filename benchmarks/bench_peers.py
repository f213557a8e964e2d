"""Noiseless LSR retrieval against peers: the same T mean-shift steps with other tools.

Every cell (n, d, dtype) runs each peer in a fresh subprocess on the same bank, queries
and radius (``bench_retrieve``'s seeded 16-component mixture; radius so a typical gate
holds ≈1 % of the bank). A peer's run is: build whatever it needs from the bank, then
T = 5 steps of ``y ← mean{X_i : ‖X_i − y‖ ≤ r}`` (``y`` kept when the gate is empty)
for Q = 256 queries. Reported: wall time of build + steps (best of ``--repeats``, each
with a fresh build), its ratio to BRACE's time, the peak RSS above the loaded bank
(psutil, sampled every 2 ms), and the share of final states that match BRACE's to 1e-6.

Peers (``bench`` extra): ``brace`` (``LSRMemory``, automatic index), ``brace-nodedup``
(the same with the sharing of bit-identical centres turned off: what a pass costs when
no state has converged onto another, as with noisy centres; not in the default list),
``sk-kdtree``
(scikit-learn ``KDTree.query_radius``), ``sk-brute`` (``NearestNeighbors``,
``algorithm="brute"``), ``faiss`` (``IndexFlatL2.range_search``, float32 only: a float64
bank is cast), ``torch`` (CPU, matmul expansion, blocked) and ``numpy`` (matmul
expansion in the bank's dtype, blocked). Peers skip the exact-boundary handling BRACE
does; their match share shows where float rounding changed a gate.

Usage::

    python benchmarks/bench_peers.py --quick          # n ∈ {1e4, 1e5}, d ∈ {2, 64}
    python benchmarks/bench_peers.py                  # n ∈ {1e4,1e5,1e6}, d ∈ {2,64,384}
    python benchmarks/bench_peers.py --json peers.json --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
import numpy as np  # noqa: E402

PEERS = ("brace", "sk-kdtree", "sk-brute", "faiss", "torch", "numpy")
_BLOCK = 1 << 22  # entries of a peer's distance tile


def _means(X: np.ndarray, C: np.ndarray, owner: np.ndarray, idx: np.ndarray) -> np.ndarray:
    out = C.copy()
    if idx.size:
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        s = np.add.reduceat(np.asarray(X[idx], dtype=np.float64), starts, axis=0)
        cnt = np.diff(np.r_[starts, owner.size])
        out[owner[starts]] = s / cnt[:, None]
    return out


def _ragged(lists: Any) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([len(x) for x in lists])
    owner = np.repeat(np.arange(len(lists)), lens)
    idx = np.concatenate([np.asarray(x, dtype=np.int64) for x in lists]) if lens.sum() \
        else np.zeros(0, dtype=np.int64)
    return owner, idx


def run_peer(peer: str, X: np.ndarray, Y: np.ndarray, r: float, T: int, threads: int) -> np.ndarray:
    """Final states (Q, d) after T steps."""
    C = Y.copy()
    if peer in ("brace", "brace-nodedup"):
        from brace import memory

        memory._DEDUPE = peer == "brace"
        return memory.LSRMemory(X, radius=r, threads=threads).retrieve(Y, T)[:, -1]
    if peer in ("sk-kdtree", "sk-brute"):
        if peer == "sk-kdtree":
            from sklearn.neighbors import KDTree

            tree = KDTree(X)

            def query(c):
                return tree.query_radius(c, r)
        else:
            from sklearn.neighbors import NearestNeighbors

            nn = NearestNeighbors(radius=r, algorithm="brute", n_jobs=1).fit(X)

            def query(c):
                return nn.radius_neighbors(c.astype(X.dtype), return_distance=False)
        for _ in range(T):
            C = _means(X, C, *_ragged(query(C)))
        return C
    if peer == "faiss":
        import faiss

        faiss.omp_set_num_threads(threads)
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        index = faiss.IndexFlatL2(X.shape[1])
        index.add(X32)
        for _ in range(T):
            lims, _, I = index.range_search(np.ascontiguousarray(C, dtype=np.float32), r * r)
            owner = np.repeat(np.arange(C.shape[0]), np.diff(lims.astype(np.int64)))
            o = np.argsort(owner, kind="stable")
            C = _means(X, C, owner[o], I[o].astype(np.int64))
        return C
    if peer == "torch":
        import torch

        torch.set_num_threads(threads)
        Xt = torch.from_numpy(X)
        sq = (Xt * Xt).sum(1)
        bs = max(1, _BLOCK // C.shape[0])
        for _ in range(T):
            Ct = torch.from_numpy(C.astype(X.dtype))
            csq = (Ct * Ct).sum(1)
            cnt = torch.zeros(C.shape[0], dtype=Xt.dtype)
            s = torch.zeros(C.shape, dtype=Xt.dtype)
            for b0 in range(0, X.shape[0], bs):
                Xb = Xt[b0 : b0 + bs]
                m = (csq[:, None] + sq[None, b0 : b0 + bs] - 2.0 * Ct @ Xb.T) <= r * r
                mf = m.to(Xt.dtype)
                cnt += mf.sum(1)
                s += mf @ Xb
            c = cnt.numpy().astype(np.float64)
            C = np.where(c[:, None] > 0, s.numpy() / np.maximum(c, 1)[:, None], C)
        return C
    if peer == "numpy":
        sq = np.einsum("ij,ij->i", X, X)
        bs = max(1, _BLOCK // C.shape[0])
        for _ in range(T):
            Cw = C.astype(X.dtype)
            csq = np.einsum("ij,ij->i", Cw, Cw)
            cnt = np.zeros(C.shape[0])
            s = np.zeros(C.shape)
            for b0 in range(0, X.shape[0], bs):
                Xb = X[b0 : b0 + bs]
                m = (csq[:, None] + sq[None, b0 : b0 + bs] - 2.0 * (Cw @ Xb.T)) <= r * r
                cnt += m.sum(1)
                s += m.astype(X.dtype) @ Xb
            C = np.where(cnt[:, None] > 0, s / np.maximum(cnt, 1)[:, None], C)
        return C
    raise ValueError(f"unknown peer {peer!r}")


def _child(args: argparse.Namespace) -> None:
    from threadpoolctl import threadpool_limits

    X = np.load(args.bank)
    Y = np.load(args.queries)
    best = float("inf")
    peak_extra = 0
    out = None
    with threadpool_limits(args.threads):
        run_peer(args.peer, X[:1000], Y[:2], args.radius, 1, args.threads)  # imports, warm-up
        for _ in range(args.repeats):
            with _bench.peak_rss(0.002) as pk:  # a fresh build each time
                t0 = time.perf_counter()
                out = run_peer(args.peer, X, Y, args.radius, args.steps, args.threads)
                best = min(best, time.perf_counter() - t0)
            peak_extra = max(peak_extra, pk.extra)
    np.save(args.out, out)
    print(json.dumps({"time_s": best, "peak_extra_mib": peak_extra / 2**20}))


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick="n ∈ {1e4, 1e5}, d ∈ {2, 64}", threads=False, json=False)
    p.add_argument("--n", type=float, nargs="*", default=None)
    p.add_argument("--d", type=int, nargs="*", default=None)
    p.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    p.add_argument("--peers", nargs="*", default=list(PEERS))
    p.add_argument("--queries-per-cell", dest="Q", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="write all results here (atomically)")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--peer", help=argparse.SUPPRESS)
    p.add_argument("--bank", help=argparse.SUPPRESS)
    p.add_argument("--queries", help=argparse.SUPPRESS)
    p.add_argument("--radius", type=float, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        _child(args)
        return 0
    ns = [int(v) for v in (args.n or ([1e4, 1e5] if args.quick else [1e4, 1e5, 1e6]))]
    ds = args.d or ([2, 64] if args.quick else [2, 64, 384])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in ns:
            for d in ds:
                X64 = _bench.make_bank(n, d, 0)
                Y = _bench.make_queries(X64, args.Q, 0)
                r, _ = _bench.choose_radius(X64, Y, 0.01)
                for dt in args.dtypes:
                    X = X64.astype(dt)
                    bank, qf = os.path.join(tmp, "bank.npy"), os.path.join(tmp, "q.npy")
                    np.save(bank, X)
                    np.save(qf, Y)
                    row: dict[str, Any] = {"n": n, "d": d, "dtype": dt, "radius": r,
                                           "bank_mib": X.nbytes / 2**20, "peers": {}}
                    ref = None
                    for peer in args.peers:
                        outf = os.path.join(tmp, f"{peer}.npy")
                        cmd = [sys.executable, __file__, "--_child", "--peer", peer,
                               "--bank", bank, "--queries", qf, "--radius", repr(r),
                               "--out", outf, "--steps", str(args.steps),
                               "--repeats", str(args.repeats), "--threads", str(args.threads)]
                        res = subprocess.run(cmd, capture_output=True, text=True)
                        if res.returncode != 0:
                            err = (res.stderr.strip().splitlines() or ["failed"])[-1]
                            row["peers"][peer] = {"error": err}
                            print(f"n={n:.0e} d={d} {dt} {peer}: {err}", flush=True)
                            continue
                        rec = json.loads(res.stdout.strip().splitlines()[-1])
                        fin = np.load(outf)
                        if ref is None and peer == "brace":
                            ref = fin
                        if ref is not None:
                            rec["match"] = float(np.mean(np.all(
                                np.abs(fin - ref) <= 1e-6 * (1 + np.abs(ref)), axis=1)))
                        row["peers"][peer] = rec
                        print(f"n={n:.0e} d={d} {dt} {peer}: {rec}", flush=True)
                    rows.append(row)
    print()
    print(table(rows, args.peers))
    _bench.save_json(args.json, {"benchmark": "bench_peers", **_bench.environment(),
                                 "Q": args.Q, "T": args.steps, "threads": args.threads,
                                 "rows": rows})
    return 0


def table(rows: list[dict], peers: list[str]) -> str:
    """Markdown: time (s) and ratio to BRACE per peer; BRACE's peak RSS above the bank."""
    out = []
    for row in rows:
        pr = row["peers"]
        tb = pr.get("brace", {}).get("time_s")
        cells, others = [], []
        for p in peers:
            rec = pr.get(p, {})
            if "time_s" not in rec:
                cells.append("—")
                continue
            t = rec["time_s"]
            ratio = f" ({t / tb:.2f}×)" if tb and p != "brace" else ""
            cells.append(f"{t:.3g}{ratio}")
            if not p.startswith("brace"):
                others.append(t)
        best = f"{min(others) / tb:.2f}" if others and tb else "—"
        peak = pr.get("brace", {}).get("peak_extra_mib")
        peak_s = f"{peak:.0f}" if peak is not None else "—"
        out.append((f"{row['n']:.0e}", row["d"], row["dtype"], *cells, best, peak_s))
    return _bench.markdown(("n", "d", "dtype", *peers, "best peer / BRACE", "BRACE peak MiB"),
                           out)


if __name__ == "__main__":
    sys.exit(main())
