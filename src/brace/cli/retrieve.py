"""``brace retrieve``: private LSR retrieval (or, with ``--method none``, the noiseless
trajectory, labelled NOT PRIVATE), written in the result schema (docs/results.md);
with ``--ledger`` charged to a persistent budget (docs/ledger.md)."""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

from ._args import add_mechanism_arguments, add_memory_arguments, finite_float

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    """Register ``brace retrieve``."""
    p = sub.add_parser(
        "retrieve",
        help="private retrieval from an LSR memory (or, with --method none, noiseless)",
        description="Run private retrieval for every query and write the release to an .npz "
        "or .json file (schema: docs/results.md). The default method is brace (private; "
        "needs --epsilon). --method none writes the noiseless trajectory, which is NOT "
        "differentially private. With --ledger, the release is charged to a persistent "
        "budget (docs/ledger.md).",
    )
    add_memory_arguments(p)
    p.add_argument("--out", required=True, help="output .npz or .json path")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    add_mechanism_arguments(
        p, methods=("brace", "global", "endpoint", "naive", "none"), default="brace",
        epsilon_when="unless --method none",
    )
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="also write/print per-step diagnostics (gate counts, noise std, smooth "
        "sensitivity): data-dependent and NOT covered by epsilon",
    )
    p.add_argument("--seed", type=int, default=None,
                   help="seed of plain, reproducible noise for experiments (default: none, "
                   "and the noise is secure; refused with --noise secure)")
    p.add_argument("--noise", choices=("auto", "plain", "secure"), default="auto",
                   help="auto: secure without --seed, plain with one; secure: exact discrete "
                   "noise on a public grid, every bit from the OS CSPRNG, no seed; plain: "
                   "numpy noise in floating point (its low bits can reveal the data: "
                   "docs/audit.md); docs/deploying.md")
    p.add_argument("--ledger", default=None,
                   help="privacy ledger file or postgresql:// URL (create it first with "
                   "'brace ledger init'): "
                   "charge the release to its budget; refused if it does not fit "
                   "(default: no ledger)")
    p.add_argument("--ledger-accounting", choices=("local", "global"), default="local",
                   help="how the ledger charges releases (docs/ledger.md)")
    p.add_argument("--lock-timeout", type=finite_float, default=10.0,
                   help="seconds to wait for the ledger's write lock")
    p.add_argument("--fresh", action="store_true",
                   help="with --ledger: new noise for a call identical to a recorded one "
                   "(which is otherwise returned again, free)")
    p.set_defaults(func=run)


def _progress_bar(steps: int, queries: int):
    """A tqdm bar on stderr for long runs (``steps >= 100``), if tqdm is installed."""
    if steps < 100:
        return None, lambda: None
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:
        return None, lambda: None
    bar = tqdm(total=steps, desc=f"retrieve ({queries} queries)", unit="step",
               file=sys.stderr, leave=False)

    def update(t: int, T: int) -> None:
        bar.update(t - bar.n)

    return update, bar.close


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace retrieve`` for parsed ``args``."""

    from .._io import check_output_path, load_npy
    from .._validation import check_steps
    from ..budget import PrivateMemory
    from ..mechanisms import NotPrivateWarning, private_retrieve
    from ..memory import LSRMemory
    from ..results import noiseless_retrieve, save_result

    out = check_output_path(
        args.out, inputs={"--bank": args.bank, "--queries": args.queries,
                          "--ledger": args.ledger},
        overwrite=args.overwrite, suffixes=(".npz", ".json"),
    )
    check_steps(args.steps)  # before any work (and before a progress bar is shown)
    private = args.method != "none"
    if args.noise == "secure" and not private:
        raise ValueError("--noise secure is for the private methods; --method none adds no "
                         "noise.")
    if args.noise == "secure" and args.seed is not None:
        raise ValueError("--seed is refused with --noise secure: every random bit comes from "
                         "the operating system's CSPRNG, so that no seed can regenerate the "
                         "noise.")
    if args.ledger is not None:
        if not private:
            raise ValueError("--method none (the noiseless trajectory, NOT private) cannot "
                             "be charged to a ledger.")
        if args.method == "naive":
            raise ValueError("a ledger refuses --method naive: it is NOT differentially "
                             "private.")
        if args.diagnostics:
            raise ValueError("--diagnostics are not available through a ledger: they are "
                             "computed from the bank and not covered by epsilon.")
    if private and args.epsilon is None:
        raise ValueError(
            f"--epsilon is required for --method {args.method} (the default method is "
            "brace, private). For the noiseless trajectory, which is NOT differentially "
            "private, pass --method none."
        )
    budget = None
    if args.ledger is not None:
        from ..ledger.backend import ledger_class

        # a file or a postgresql:// URL, as 'serve' and 'ledger' take
        db = ledger_class(args.ledger).open(args.ledger, timeout=args.lock_timeout,
                                            write=False)
        budget = (db.meta["budget"]["epsilon"], db.meta["budget"]["delta"])
        db.close()
    elif args.fresh:
        raise ValueError("--fresh needs --ledger FILE.")
    bank = load_npy(args.bank, "bank")
    queries = load_npy(args.queries, "queries")
    mem = LSRMemory(bank, beta=args.beta, radius=args.radius)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotPrivateWarning)
        if not private:
            res = noiseless_retrieve(mem, queries, steps=args.steps)
        else:
            kw = dict(kappa=args.kappa, gamma=args.gamma, accounting=args.accounting,
                      release=args.release_mode,
                      output_projection=not args.no_output_projection, noise=args.noise)
            n_queries = 1 if np.ndim(queries) == 1 else len(queries)
            progress, close = _progress_bar(args.steps, n_queries)
            try:
                if args.ledger is not None:
                    pm = PrivateMemory(bank, radius=mem.radius_, budget=budget,
                                       ledger=args.ledger, lock_timeout=args.lock_timeout,
                                       accounting=args.ledger_accounting)
                    res = pm.retrieve(queries, steps=args.steps, epsilon=args.epsilon,
                                      delta=args.delta, method=args.method, seed=args.seed,
                                      progress=progress, fresh=args.fresh, **kw)
                else:
                    res = private_retrieve(mem, queries, method=args.method,
                                           epsilon=args.epsilon, delta=args.delta,
                                           steps=args.steps, seed=args.seed,
                                           progress=progress, **kw)
            finally:
                close()
    for w in caught:
        print(f"brace: WARNING: {w.message}", file=sys.stderr)
    save_result(res, out, include_diagnostics=args.diagnostics, overwrite=args.overwrite)
    print(res.summary(diagnostics=args.diagnostics) if private else res.summary())
    if args.ledger is not None:
        print(f"ledger {pm.ledger}: spent eps = {pm.spent:.6g} of {budget[0]:g} at delta = "
              f"{budget[1]:g} ({pm.accounting} accounting, worst pair of neighbouring "
              f"banks); remaining eps = {pm.remaining:.6g}")
    what = "released states" if res.is_private else "states (NOT PRIVATE)"
    print(f"wrote {res.outputs.shape} {what} to {out}")
    return 0
