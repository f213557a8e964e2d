"""``pm.recommend(Q, public_rows=p)`` against every measured comparison of a public
sample with the synopsis without public seeds (``docs/benchmarks.md``, "When private
pays", the table of agreements). It runs no release: the measured scores below are
copied from the runs that produced them, and the advice is the library's own, asked of a
``PrivateMemory`` of each case's shape and budget ``(ε, 10⁻⁵)`` (the advice reads only
``n``, ``d`` and the budget, so the bank is a placeholder of that shape).

Sources of the scores (public / synopsis):

* ``shape``: ``benchmarks/bench_shapes.py``, ARI of k-means on a 1 % public sample (k
  given) against the default call ``brace.private_synopsis`` (its clusters), 3 seeds
  (the run of 2026-12-05 after the merge's second pass);
* ``bank n``: ``benchmarks/bench_private_n.py`` (``sample_clusters``, d = 64, ε = 1),
  completion accuracy of the 50-row public floor against the synopsis (re-run
  2026-12-05);
* ``digits`` / ``MNIST-5k`` / ``MNIST-7k``: ``brace experiment real`` (``docs/experiments.md``
  §6.1), label accuracy of the 50-row floor (``--settings sample --methods public_only``)
  against the synopsis in a private subspace (``--settings none --methods
  synopsis_private_pca``), Q = 1,000, 3 repetitions; both re-run 2026-12-05 (the floor
  reproduced bit for bit).

A difference of at most :data:`TIE` is a tie: either advice agrees.

Usage::

    python benchmarks/recommend_public.py [--old]    # --old: also the rule 1.5 · cells
"""

from __future__ import annotations

import argparse

import numpy as np

from brace import PrivateMemory

TIE = 0.03

#: (case, source, n, d, ε, public rows, public score, synopsis score)
CASES = [
    ("aniso", "shape", 20_000, 16, 1, 200, 1.000, 1.000),
    ("aniso", "shape", 20_000, 16, 4, 200, 1.000, 1.000),
    ("manifold", "shape", 50_000, 256, 1, 500, 1.000, 0.995),
    ("manifold", "shape", 50_000, 256, 4, 500, 1.000, 1.000),
    ("zipf", "shape", 50_000, 32, 1, 500, 0.917, 1.000),
    ("zipf", "shape", 50_000, 32, 4, 500, 0.917, 1.000),
    ("background", "shape", 30_000, 64, 1, 300, 0.987, 1.000),
    ("background", "shape", 30_000, 64, 4, 300, 0.987, 1.000),
    ("digits", "shape", 1_797, 64, 1, 17, 0.379, 0.508),
    ("digits", "shape", 1_797, 64, 4, 17, 0.379, 0.629),
    ("MNIST", "shape", 10_000, 784, 1, 100, 0.268, 0.372),
    ("MNIST", "shape", 10_000, 784, 4, 100, 0.268, 0.428),
    ("round", "shape", 100_000, 64, 1, 1_000, 0.970, 0.988),
    ("round", "shape", 100_000, 64, 4, 1_000, 0.970, 0.994),
    ("bank 1,000", "private_n", 1_000, 64, 1, 50, 0.527, 0.166),
    ("bank 3,000", "private_n", 3_000, 64, 1, 50, 0.554, 0.276),
    ("bank 10,000", "private_n", 10_000, 64, 1, 50, 0.522, 0.486),
    ("bank 30,000", "private_n", 30_000, 64, 1, 50, 0.550, 0.730),
    ("bank 100,000", "private_n", 100_000, 64, 1, 50, 0.560, 0.890),
    ("bank 300,000", "private_n", 300_000, 64, 1, 50, 0.550, 0.887),
    ("bank 1,000,000", "private_n", 1_000_000, 64, 1, 50, 0.641, 0.865),
    ("digits", "real", 1_397, 64, 1, 50, 0.605, 0.393),
    ("digits", "real", 1_397, 64, 2, 50, 0.605, 0.503),
    ("digits", "real", 1_397, 64, 4, 50, 0.605, 0.660),
    ("digits", "real", 1_397, 64, 8, 50, 0.605, 0.694),
    ("MNIST-5k", "real", 5_000, 784, 1, 50, 0.565, 0.322),
    ("MNIST-5k", "real", 5_000, 784, 2, 50, 0.565, 0.496),
    ("MNIST-5k", "real", 5_000, 784, 4, 50, 0.565, 0.627),
    ("MNIST-5k", "real", 5_000, 784, 8, 50, 0.565, 0.671),
    ("MNIST-7k", "real", 7_000, 784, 1, 50, 0.557, 0.422),
    ("MNIST-7k", "real", 7_000, 784, 2, 50, 0.557, 0.567),
    ("MNIST-7k", "real", 7_000, 784, 4, 50, 0.557, 0.626),
    ("MNIST-7k", "real", 7_000, 784, 8, 50, 0.557, 0.696),
]


def advice(n: int, d: int, eps: float, p: int) -> tuple[str, float, str | None]:
    """``(use, cells, project)`` of ``pm.recommend(1000, public_rows=p)`` on an ``n × d``
    bank with budget ``(eps, 1e-5)`` (global accounting)."""
    bank = np.zeros((n, d), dtype=np.float32)
    bank[:, 0] = np.arange(n) % 7
    pm = PrivateMemory(bank, radius=0.5, budget=(float(eps), 1e-5), accounting="global")
    rec = pm.recommend(1000, public_rows=p)
    return rec.use, float(rec.cells), rec.project


def agrees(pub: float, syn: float, nothing: bool) -> bool:
    """Whether advising nothing (``nothing``) or the synopsis agrees with the measured
    scores: a tie (at most :data:`TIE` apart) agrees with either."""
    return abs(pub - syn) <= TIE or (pub > syn) == nothing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", action="store_true",
                    help="also the earlier rule: nothing where public rows >= 1.5 * cells")
    args = ap.parse_args()
    print("| case | ε | public rows | cells (n/m*) | rows per cell | advice | "
          "public / synopsis | agrees? |" + (" earlier rule |" if args.old else ""))
    print("|---|---:|---:|---:|---:|---|---|---|" + ("---|" if args.old else ""))
    wrong = old_wrong = 0
    for name, src, n, d, eps, p, pub, syn in CASES:
        use, cells, project = advice(n, d, eps, p)
        said = "nothing" if use == "nothing" else "synopsis" + (
            " (subspace)" if project else "")
        tie = abs(pub - syn) <= TIE
        ok = agrees(pub, syn, use == "nothing")
        wrong += not ok
        row = (f"| {name} ({src}) | {eps:g} | {p:,} | {cells:,.1f} | {p / cells:.2f} | "
               f"{said} | {pub:.3f} / {syn:.3f} | "
               f"{('yes (tie)' if tie else 'yes') if ok else '**no**'} |")
        if args.old:
            was = agrees(pub, syn, p >= 1.5 * cells)
            old_wrong += not was
            row += f" {'nothing' if p >= 1.5 * cells else 'synopsis'}" \
                   f"{'' if was else ' (**no**)'} |"
        print(row)
    print(f"\n{len(CASES) - wrong} of {len(CASES)} agree"
          + (f" (the earlier rule: {len(CASES) - old_wrong})" if args.old else ""))


if __name__ == "__main__":
    main()
