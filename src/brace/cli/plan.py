"""``brace plan``: what ``brace retrieve`` would release and spend, from public values.

The command-line face of :func:`brace.plan_release`: from the bank's public size ``n``
and dimension ``d``, the radius, the horizon, the number of queries and the mechanism's
flags (the same flags, with the same defaults, as ``brace retrieve``), it prints the
release mode, γ and the rules that chose them, the calibration (per-step ρ, noise
multiplier), the per-query (ε, δ) and the ε of all queries composed. No bank is read.
``brace account`` prints the spend of the same plan.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._args import add_mechanism_arguments, finite_float

__all__ = ["add_parser", "add_public_arguments", "plan_from_args", "reads_n", "run"]

METHODS = ("brace", "global", "endpoint", "naive")


def add_parser(sub) -> None:
    """Register ``brace plan``."""
    p = sub.add_parser(
        "plan",
        help="what 'brace retrieve' would release and spend (public values only; no bank)",
        description="Plan a release without running it (brace.plan_release): the release "
        "mode, gamma and the rules that chose them, the calibrated noise (per-step rho, "
        "noise multiplier), the per-query (epsilon, delta) and the epsilon of all queries "
        "composed. Takes the flags of 'brace retrieve', with the same defaults, and the "
        "bank's public size and dimension instead of the bank; nothing is read or spent.",
    )
    add_public_arguments(p, n_required=True, radius=True)
    add_mechanism_arguments(p, methods=METHODS, default="brace", epsilon_required=True)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def add_public_arguments(p: argparse.ArgumentParser, *, n_required: bool,
                         radius: bool) -> None:
    """``--n``, ``--dim``, ``--steps``, ``--queries`` (a count) and, with ``radius``,
    ``--beta | --radius``."""
    p.add_argument("--n", type=int, required=n_required,
                   help="number of memories n in the bank (public)" + (
                       "" if n_required else " (no default: required when the choice "
                       "reads it: BRACE's default release without --gamma, or --gamma "
                       "gates)"))
    p.add_argument("--dim", type=int, required=True, help="dimension d of the bank's rows")
    p.add_argument("--steps", type=int, required=True, help="horizon T >= 1")
    p.add_argument("--queries", type=int, default=1,
                   help="number of queries the call answers (ε of all of them composed)")
    if radius:
        g = p.add_mutually_exclusive_group(required=True)
        g.add_argument("--beta", type=finite_float, help="inverse temperature β > 0 (give --beta "
                       "or --radius; no default)")
        g.add_argument("--radius", type=finite_float, help="support radius r = sqrt(2/β) (give "
                       "--beta or --radius; no default)")


def reads_n(method: str, accounting: str, release: str | None, gamma: Any) -> bool:
    """Whether :func:`brace.plan_release` reads the bank size ``n`` for these choices.

    It does for BRACE with RDP accounting where ``release="auto"`` (None is auto) has no γ
    from the caller (:func:`brace.accounting.choose_release` weighs gate sizes up to n),
    and where ``gamma="gates"`` sets the smooth release's γ; nowhere else (the
    calibration depends on ε, δ, T, d and γ only).
    """
    if method != "brace" or accounting != "rdp":
        return False
    if release in (None, "auto"):
        return gamma is None or gamma == "gates"
    return release == "smooth" and gamma == "gates"


def plan_from_args(args: argparse.Namespace, *, n: int, radius: float) -> Any:
    """:func:`brace.plan_release` for the parsed mechanism flags of ``args``."""
    from ..plan import plan_release

    return plan_release(
        (n, args.dim), radius=radius, method=args.method, epsilon=args.epsilon,
        delta=args.delta, steps=args.steps, kappa=args.kappa, gamma=args.gamma,
        accounting=args.accounting, output_projection=not args.no_output_projection,
        release=args.release_mode, queries=args.queries,
    )


def warn_if_not_private(plan: Any) -> None:
    if not plan.is_private:
        print(f"brace: WARNING: method {plan.method!r} is NOT differentially private: the "
              "epsilon shown is the nominal budget its noise is scaled from.", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace plan`` for parsed ``args``."""
    from .._io import dumps_strict
    from .._validation import check_radius_beta

    plan = plan_from_args(args, n=args.n, radius=check_radius_beta(args.beta, args.radius))
    warn_if_not_private(plan)
    print(dumps_strict(plan.to_dict(), indent=2) if args.json else plan)
    return 0
