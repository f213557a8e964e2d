"""``brace experiment NAME``: each experiment module provides ``add_parser(subparsers)``."""

from __future__ import annotations

EXPERIMENTS = ("synthetic", "mnist", "coverage", "theory")


def add_cli(sub) -> None:
    from ..cli import add_plugins

    p = sub.add_parser("experiment", help="run one of the paper's experiments")
    exp_sub = p.add_subparsers(dest="experiment", metavar="NAME", parser_class=type(p))
    exp_sub.required = True
    add_plugins(exp_sub, [f"brace.experiments.{name}" for name in EXPERIMENTS], "add_parser")
