"""The one set of argument types and builders every ``brace`` command uses.

Types reject bad text with one clear line (argparse turns them into ``brace …: error:``
and exit status 2); builders add the same flags, with the same defaults and help, to
every command that takes them. Defaults are :func:`brace.private_retrieve`'s:
:data:`brace.mechanisms.DEFAULT_KAPPA`, ``gamma = 'auto'`` (None), ``accounting = 'rdp'``,
the release mode None (:data:`brace.plan.DEFAULT_RELEASE` for BRACE); and ``delta = 1e-5``.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..accounting import ACCOUNTING_RULES
from ..mechanisms import DEFAULT_KAPPA
from ..plan import RELEASE_MODES

__all__ = [
    "DEFAULT_DELTA",
    "HelpFormatter",
    "finite_float",
    "int_at_least",
    "gamma_arg",
    "GAMMA_HELP",
    "parse_vector",
    "add_memory_arguments",
    "add_mechanism_arguments",
    "check_output_file",
    "check_output_dir",
]

DEFAULT_DELTA = 1e-5


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's help shows its default: ``(default: X)`` is appended unless the help
    already names it; a switch reads ``(default: off)``, a required flag ``(required)``.

    A flag whose default is ``None`` must say in its own help what happens when it is not
    given (``tests/cli/test_cli_help.py`` checks every flag of every command).
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        if not action.option_strings or "default" in help_text.lower() or \
                action.default is argparse.SUPPRESS:
            return help_text
        if action.required:
            return f"{help_text} (required)".strip()
        if isinstance(action, argparse._StoreTrueAction):
            return f"{help_text} (default: off)".strip()
        if action.default is None:
            return help_text
        return f"{help_text} (default: %(default)s)".strip()


def finite_float(text: str) -> float:
    """A float; NaN is refused (``inf`` is allowed where the parameter accepts it)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(v):
        raise argparse.ArgumentTypeError(f"NaN is not allowed: {text!r}")
    return v


def int_at_least(lo: int) -> Callable[[str], int]:
    """The argument type of a whole number ``>= lo`` (e.g. ``int_at_least(1)`` for a
    count of workers)."""

    def whole(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}: {text!r}")
        return v

    whole.__name__ = f"int >= {lo}"
    return whole


def gamma_arg(text: str) -> float | str | None:
    """``'auto'`` (None: :func:`brace.plan_release` chooses), ``'gates'`` (the gate-size
    rule) or a float — every value ``gamma=`` of :func:`brace.private_retrieve` takes."""
    word = text.strip().lower()
    if word == "auto":
        return None
    if word == "gates":
        return "gates"
    return finite_float(text)


GAMMA_HELP = ("BRACE smoothness: a number γ > 0, 'gates' (the gate-size rule, from public "
              "ε, δ, T, d, n) or 'auto' (default 'auto': the auto release chooses γ from "
              "public values; the smooth release mode, e.g. --release-mode smooth, uses the "
              "fraction-0.9 rule)")


def parse_vector(text: str, name: str) -> np.ndarray:
    """Comma-separated finite numbers, e.g. ``'0.5,-1'``, as a float64 vector."""
    try:
        v = np.array([float(t) for t in text.split(",")], dtype=np.float64)
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers; got {text!r}.") from None
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains non-finite values: {text!r}.")
    return v


def add_memory_arguments(p: argparse.ArgumentParser, *, required: bool = True,
                         queries: str = "queries", when: str = "",
                         queries_required: bool | None = None) -> None:
    """``--bank``, ``--queries`` (or ``--query``), ``--beta | --radius`` and ``--steps``.

    With ``required=False``, ``when`` says when they are needed (e.g. "unless --report").
    ``queries_required=False`` makes ``--queries`` and ``--steps`` optional (a saved
    release supplies them).
    """
    qreq = required if queries_required is None else queries_required
    need = "" if required else f" (no default: required {when})".replace(" )", ")")
    qneed = need if qreq == required else " (no default: required unless --release)"
    p.add_argument("--bank", required=required,
                   help="(n, d) memory bank, .npy/.npz/.csv" + need)
    if queries == "queries":
        p.add_argument("--queries", required=qreq,
                       help="(Q, d) or (d,) queries, .npy/.npz/.csv" + qneed)
    else:
        p.add_argument("--query", required=qreq,
                       help="one query, (d,) or (1, d), .npy" + qneed)
    g = p.add_mutually_exclusive_group(required=required)
    one = f" (no default: give --beta or --radius{', ' + when if when else ''})"
    g.add_argument("--beta", type=finite_float, help="inverse temperature β > 0" + one)
    g.add_argument("--radius", type=finite_float, help="support radius r = sqrt(2/β)" + one)
    p.add_argument("--steps", type=int, required=qreq, help="horizon T >= 1" + qneed)


def add_mechanism_arguments(
    p: argparse.ArgumentParser, *, methods: Sequence[str], default: str | None,
    epsilon_required: bool = False, output_projection: bool = True,
    unset_defaults: bool = False, when: str = "", epsilon_when: str = "",
) -> None:
    """``--method`` and the private-retrieval parameters of :func:`private_retrieve`.

    With ``unset_defaults`` every parameter defaults to ``None`` (so the command can tell
    whether it was given) and the command applies the defaults named in the help.
    ``when`` says when a ``--method`` without default is needed (e.g. "unless --report"),
    ``epsilon_when`` when ``--epsilon`` is (default: ``when``).
    """
    def dflt(value):
        return None if unset_defaults else value

    p.add_argument("--method", default=default, choices=list(methods),
                   help=("'naive' is NOT differentially private (baseline only)"
                         + ("; 'none': the noiseless trajectory, NOT private"
                            if "none" in methods else "")
                         + (f"; default {default}" if default is not None
                            else f" (no default: required {when})".replace(" )", ")"))))
    p.add_argument("--epsilon", type=finite_float, required=epsilon_required,
                   help="target ε > 0 per query (no default: required"
                   + ("" if epsilon_required else f" {epsilon_when or when}".rstrip()) + ")")
    p.add_argument("--delta", type=finite_float, default=dflt(DEFAULT_DELTA),
                   help=f"δ in (0, 1) (default {DEFAULT_DELTA:g})")
    p.add_argument("--kappa", type=finite_float, default=dflt(DEFAULT_KAPPA),
                   help=f"BRACE activation κ >= 0 (default {DEFAULT_KAPPA:g}; 0: correct "
                   "whenever gates differ)")
    p.add_argument("--gamma", type=gamma_arg, default=None, help=GAMMA_HELP)
    p.add_argument("--accounting", choices=list(ACCOUNTING_RULES), default=dflt("rdp"),
                   help="privacy accounting (default rdp)")
    p.add_argument("--release-mode", choices=list(RELEASE_MODES), default=None,
                   help=f"BRACE release: {', '.join(RELEASE_MODES)} (default auto for BRACE "
                   "with rdp accounting, smooth otherwise; auto: the smooth or the count "
                   "release, chosen from public values, never above 1.05x global noise)")
    if output_projection:
        p.add_argument("--no-output-projection", action="store_true",
                       help="do not project each release onto B̄(q, (t+1)r)")


def check_output_file(path: Path) -> None:
    """Fail before any work if ``path`` cannot be written (the write itself is atomic)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"--out {path} is a directory; give a file name.")
    if not parent.is_dir():
        raise FileNotFoundError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"output directory is not writable: {parent}")


def check_output_dir(path: Path) -> None:
    """Fail before any work if the directory ``path`` cannot be created or written."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} exists and is not a directory.")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write to {path}: {probe} is not a writable directory.")
