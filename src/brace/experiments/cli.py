"""``brace experiment NAME``: each experiment module provides ``add_parser(subparsers)``."""

from __future__ import annotations

import importlib

EXPERIMENTS = ("synthetic", "mnist", "coverage", "theory")


def add_cli(sub) -> None:
    p = sub.add_parser("experiment", help="run one of the paper's experiments")
    exp_sub = p.add_subparsers(dest="experiment", metavar="NAME", parser_class=type(p))
    exp_sub.required = True
    for name in EXPERIMENTS:
        modname = f"brace.experiments.{name}"
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
            continue
        module.add_parser(exp_sub)
