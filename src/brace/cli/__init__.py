"""Command-line interface: ``brace retrieve | plan | account | ledger | serve | uq | audit |
experiment …``.

One module per command (``retrieve``, ``plan``, ``account``, ``ledger``, ``serve``, ``uq``,
``audit``, ``experiment``),
each with ``add_parser(subparsers)`` and ``run(args)``; the shared argument types and
builders live in ``_args``. Error policy: every error is reported as one line
``brace: error: …`` on stderr with exit status 2; no traceback, and no partial output
file (all outputs are written atomically).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from .._version import __version__
from ..budget import BudgetExceededError
from . import account, audit, experiment, ledger, plan, retrieve, serve, uq
from ._args import HelpFormatter

__all__ = ["main", "build_parser", "EXPECTED_ERRORS"]

COMMANDS = (retrieve, plan, account, ledger, serve, experiment, uq, audit)

EXPECTED_ERRORS = (ValueError, TypeError, FileNotFoundError, PermissionError, OSError,
                   BudgetExceededError)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:  # every (sub-)parser shows the defaults
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one clear line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``brace`` parser with every command registered."""
    parser = _Parser(
        prog="brace",
        description="Differentially private retrieval from dense associative memories (BRACE).",
    )
    parser.add_argument("--version", action="version", version=f"brace-dam {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``brace`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
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
