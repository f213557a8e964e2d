"""``brace account``: what a ``brace retrieve`` with the same flags would spend.

The spend of :func:`brace.plan_release` — the plan ``brace plan`` prints and
``brace retrieve`` runs — with ``brace retrieve``'s defaults (method brace, the default
release, γ chosen by it, κ = 128, δ = 1e-5). The bank's size ``n`` is needed only where
the choice reads it (:func:`brace.cli.plan.reads_n`); the radius never changes the spend.
"""

from __future__ import annotations

import argparse

from ._args import add_mechanism_arguments
from .plan import METHODS, add_public_arguments, plan_from_args, reads_n, warn_if_not_private

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    """Register ``brace account``."""
    p = sub.add_parser(
        "account",
        help="what 'brace retrieve' with the same flags would spend (calibrated noise, "
        "per-query and composed epsilon)",
        description="Calibrate the per-step noise for a target (epsilon, delta) exactly as "
        "'brace retrieve' would with the same flags and defaults (brace.plan_release; "
        "'brace plan' shows the whole plan), and print what it spends: per query, and all "
        "--queries composed.",
    )
    add_public_arguments(p, n_required=False, radius=False)
    add_mechanism_arguments(p, methods=METHODS, default="brace", epsilon_required=True)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace account`` for parsed ``args``."""
    from .._validation import check_delta, check_epsilon, check_steps

    check_epsilon(args.epsilon)  # bad values first, before asking for --n
    check_delta(args.delta)
    check_steps(args.steps)
    n = args.n
    if n is None:
        if reads_n(args.method, args.accounting, args.release_mode, args.gamma):
            raise ValueError(
                "--n (the bank's number of memories, public) is required: the default "
                "release chooses between the smooth and the count release from it (and "
                "--gamma gates reads it). Give --n, or a --gamma number, or --release-mode "
                "smooth or count.")
        n = 1  # not read by the plan for these choices (reads_n)
    # the spend does not depend on the radius (it only scales the sensitivity)
    plan = plan_from_args(args, n=n, radius=1.0)
    warn_if_not_private(plan)
    from .._io import dumps_strict

    spent = plan.spent
    print(dumps_strict(spent.to_dict(), indent=2) if args.json else spent)
    return 0
