"""``brace account``: calibrate the per-step noise for a target (ε, δ), print what is spent."""

from __future__ import annotations

import argparse
import json

from ..accounting import ACCOUNTING_RULES
from ._args import finite_float, gamma_arg

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    """Register ``brace account``."""
    p = sub.add_parser(
        "account",
        help="calibrate per-step noise for a target (ε, δ) and print what is spent",
    )
    p.add_argument("--epsilon", type=finite_float, required=True, help="target ε > 0")
    p.add_argument("--delta", type=finite_float, required=True, help="target δ in (0, 1)")
    p.add_argument("--steps", type=int, required=True, help="number of released steps T")
    p.add_argument("--dim", type=int, required=True, help="dimension d of each release")
    p.add_argument(
        "--gamma",
        type=gamma_arg,
        default=0.0,
        help="smoothness γ of the noise scale (0: fixed sensitivity, the default; 'auto': "
        "the data-independent rule of brace.policy.choose_gamma)",
    )
    p.add_argument("--accounting", choices=list(ACCOUNTING_RULES), default="rdp",
                   help="privacy accounting (default rdp)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace account`` for parsed ``args``."""
    from ..accounting import calibrate

    spent = calibrate(args.epsilon, args.delta, args.steps, dim=args.dim, gamma=args.gamma,
                      accounting=args.accounting)
    print(json.dumps(spent.to_dict(), indent=2) if args.json else spent)
    return 0
