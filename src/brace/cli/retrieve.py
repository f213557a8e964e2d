"""``brace retrieve``: noiseless or private LSR retrieval, written to an ``.npz`` file."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from ._args import add_mechanism_arguments, add_memory_arguments

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    """Register ``brace retrieve``."""
    p = sub.add_parser(
        "retrieve",
        help="retrieve from an LSR memory (noiseless or private)",
        description="Run LSR retrieval for every query; write the trajectory (noiseless) or "
        "the private release to an .npz file.",
    )
    add_memory_arguments(p)
    p.add_argument("--out", required=True, help="output .npz path")
    add_mechanism_arguments(
        p, methods=("noiseless", "brace", "global", "endpoint", "naive"), default="noiseless"
    )
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="also write/print per-step diagnostics (gate counts, noise std, smooth "
        "sensitivity): data-dependent and NOT covered by epsilon",
    )
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the noise (default: fresh OS entropy, not reproducible)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace retrieve`` for parsed ``args``."""
    from .._io import load_npy, save_npz
    from ..mechanisms import NotPrivateWarning, private_retrieve
    from ..memory import LSRMemory

    bank = load_npy(args.bank, "bank")
    queries = load_npy(args.queries, "queries")
    mem = LSRMemory(bank, beta=args.beta, radius=args.radius)
    if args.method == "noiseless":
        traj = mem.retrieve(queries, args.steps)
        save_npz(args.out, trajectory=traj, radius=mem.radius_, method="noiseless")
        print(f"wrote noiseless trajectory {traj.shape} to {args.out}")
        return 0
    if args.epsilon is None:
        raise ValueError(f"--epsilon is required for --method {args.method}.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotPrivateWarning)
        res = private_retrieve(
            mem,
            queries,
            method=args.method,
            epsilon=args.epsilon,
            delta=args.delta,
            steps=args.steps,
            kappa=args.kappa,
            gamma=args.gamma,
            accounting=args.accounting,
            output_projection=not args.no_output_projection,
            seed=args.seed,
        )
    for w in caught:
        print(f"brace: WARNING: {w.message}", file=sys.stderr)
    arrays = {"outputs": res.outputs}
    if args.diagnostics:  # data-dependent, NOT covered by ε: clearly named
        arrays.update({f"diagnostic_not_private_{k}": v
                       for k, v in res.diagnostics().items() if v is not None})
    save_npz(
        args.out,
        **arrays,
        method=res.method,
        is_private=res.is_private,
        privacy=json.dumps(res.privacy.to_dict()),
        params=json.dumps(res.params),
    )
    print(res.summary(diagnostics=args.diagnostics))
    print(f"wrote {res.outputs.shape} released states to {args.out}")
    return 0
