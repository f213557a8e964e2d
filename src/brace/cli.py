"""Command-line interface: ``brace retrieve | account | experiment …``.

Every error is reported as one line ``brace: error: …`` on stderr with exit status 2;
no traceback, and no partial output file (all outputs are written atomically).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import warnings
from collections.abc import Sequence

import numpy as np

from . import __version__

_PLUGIN_COMMANDS = ("brace.experiments.cli", "brace.uq", "brace.audit")

EXPECTED_ERRORS = (ValueError, TypeError, FileNotFoundError, PermissionError, OSError)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(v):
        raise argparse.ArgumentTypeError(f"NaN is not allowed: {text!r}")
    return v


def _gamma_arg(text: str) -> float | None:
    return None if text.strip().lower() == "auto" else _finite_float(text)


def add_memory_arguments(p: argparse.ArgumentParser) -> None:
    """``--bank``, ``--queries``, ``--beta | --radius`` and ``--steps``."""
    p.add_argument("--bank", required=True, help="(n, d) memory bank, .npy")
    p.add_argument("--queries", required=True, help="(Q, d) or (d,) queries, .npy")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--beta", type=_finite_float, help="inverse temperature β > 0")
    g.add_argument("--radius", type=_finite_float, help="support radius r = sqrt(2/β)")
    p.add_argument("--steps", type=int, required=True, help="horizon T >= 1")


def add_mechanism_arguments(
    p: argparse.ArgumentParser, *, methods: Sequence[str], default: str,
    epsilon_required: bool = False,
) -> None:
    """``--method`` and the private-retrieval parameters of :func:`private_retrieve`."""
    p.add_argument("--method", default=default, choices=list(methods),
                   help="'naive' is NOT differentially private (baseline only)")
    p.add_argument("--epsilon", type=_finite_float, required=epsilon_required,
                   help="ε > 0 (private methods)")
    p.add_argument("--delta", type=_finite_float, default=1e-5, help="δ in (0, 1)")
    p.add_argument("--kappa", type=_finite_float, default=128.0,
                   help="BRACE activation κ >= 0 (default 128; 0: correct whenever gates differ)")
    p.add_argument("--gamma", type=_gamma_arg, default=None,
                   help="BRACE smoothness γ > 0 (default 'auto': data-independent rule)")
    p.add_argument("--accounting", choices=["rdp", "paper"], default="rdp")
    p.add_argument("--no-output-projection", action="store_true")


def _add_retrieve(sub) -> None:
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
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=_cmd_retrieve)


def _cmd_retrieve(args: argparse.Namespace) -> int:
    from ._io import load_npy, save_npz
    from .mechanisms import NotPrivateWarning, private_retrieve
    from .memory import LSRMemory

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


def _add_account(sub) -> None:
    p = sub.add_parser(
        "account",
        help="calibrate per-step noise for a target (ε, δ) and print what is spent",
    )
    p.add_argument("--epsilon", type=_finite_float, required=True)
    p.add_argument("--delta", type=_finite_float, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument(
        "--gamma",
        type=_gamma_arg,
        default=0.0,
        help="smoothness γ of the noise scale (0: fixed sensitivity; 'auto': the "
        "data-independent rule of brace.accounting.choose_gamma)",
    )
    p.add_argument("--accounting", choices=["rdp", "paper"], default="rdp")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_account)


def _cmd_account(args: argparse.Namespace) -> int:
    from .accounting import calibrate

    spent = calibrate(args.epsilon, args.delta, args.steps, dim=args.dim, gamma=args.gamma,
                      accounting=args.accounting)
    print(json.dumps(spent.to_dict(), indent=2) if args.json else spent)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="brace",
        description="Differentially private retrieval from dense associative memories (BRACE).",
    )
    parser.add_argument("--version", action="version", version=f"brace-dam {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_retrieve(sub)
    _add_account(sub)
    add_plugins(sub, _PLUGIN_COMMANDS, "add_cli")
    return parser


def add_plugins(sub, modules: Sequence[str], hook: str) -> None:
    """Let each module in ``modules`` that is installed add its sub-command via ``hook``."""
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        getattr(module, hook)(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    np.seterr(all="ignore")
    try:
        return int(args.func(args) or 0)
    except EXPECTED_ERRORS as exc:
        print(f"brace: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("brace: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
