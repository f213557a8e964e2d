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
from .budget import BudgetExceededError
from .mechanisms import DEFAULT_KAPPA

_PLUGIN_COMMANDS = ("brace.experiments.cli", "brace.uq", "brace.audit")

EXPECTED_ERRORS = (ValueError, TypeError, FileNotFoundError, PermissionError, OSError,
                   BudgetExceededError)


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


def add_memory_arguments(p: argparse.ArgumentParser, *, queries_required: bool = True) -> None:
    """``--bank``, ``--queries``, ``--beta | --radius`` and ``--steps`` (``--queries``
    and ``--steps`` optional where a saved release supplies them)."""
    p.add_argument("--bank", required=True, help="(n, d) memory bank, .npy/.npz/.csv")
    p.add_argument("--queries", required=queries_required,
                   help="(Q, d) or (d,) queries, .npy/.npz/.csv")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--beta", type=_finite_float, help="inverse temperature β > 0")
    g.add_argument("--radius", type=_finite_float, help="support radius r = sqrt(2/β)")
    p.add_argument("--steps", type=int, required=queries_required, help="horizon T >= 1")


def add_mechanism_arguments(
    p: argparse.ArgumentParser, *, methods: Sequence[str], default: str,
    epsilon_required: bool = False,
) -> None:
    """``--method`` and the private-retrieval parameters of :func:`private_retrieve`."""
    p.add_argument("--method", default=default, choices=list(methods),
                   help=f"default {default}; 'naive' is NOT differentially private (baseline "
                   "only)" + ("; 'none': the noiseless trajectory, NOT private"
                              if "none" in methods else ""))
    p.add_argument("--epsilon", type=_finite_float, required=epsilon_required,
                   help="ε > 0 (private methods)")
    p.add_argument("--delta", type=_finite_float, default=1e-5, help="δ in (0, 1)")
    p.add_argument("--kappa", type=_finite_float, default=DEFAULT_KAPPA,
                   help=f"BRACE activation κ >= 0 (default {DEFAULT_KAPPA:g}; 0: correct "
                   "whenever gates differ)")
    p.add_argument("--gamma", type=_gamma_arg, default=None,
                   help="BRACE smoothness γ > 0 (default 'auto': data-independent rule)")
    p.add_argument("--accounting", choices=["rdp", "paper"], default="rdp")
    p.add_argument("--no-output-projection", action="store_true")


def _add_retrieve(sub) -> None:
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
        p, methods=("brace", "global", "endpoint", "naive", "none"), default="brace"
    )
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="also write/print per-step diagnostics (gate counts, noise std, smooth "
        "sensitivity): data-dependent and NOT covered by epsilon",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--ledger", default=None,
                   help="privacy ledger (.json, created if missing): charge the release to "
                   "its budget; refused if it would exceed it")
    p.add_argument("--budget", type=_finite_float, default=None,
                   help="total epsilon of the ledger (required to create one)")
    p.add_argument("--budget-delta", type=_finite_float, default=None,
                   help="delta of the ledger's budget (default 1e-5 for a new ledger)")
    p.set_defaults(func=_cmd_retrieve)


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


def _cmd_retrieve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._io import check_output_path, load_npy
    from .budget import PrivateMemory
    from .mechanisms import NotPrivateWarning, private_retrieve
    from .memory import LSRMemory
    from .results import noiseless_retrieve, save_result

    out = check_output_path(
        args.out, inputs={"--bank": args.bank, "--queries": args.queries,
                          "--ledger": args.ledger},
        overwrite=args.overwrite, suffixes=(".npz", ".json"),
    )
    if args.ledger is None and (args.budget is not None or args.budget_delta is not None):
        raise ValueError("--budget and --budget-delta need --ledger FILE.")
    private = args.method != "none"
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
        from .ledger import read_ledger

        if Path(args.ledger).exists():
            st = read_ledger(args.ledger)
            budget = (st.budget_epsilon if args.budget is None else args.budget,
                      st.budget_delta if args.budget_delta is None else args.budget_delta)
        elif args.budget is None:
            raise ValueError(f"--budget is required to create the ledger {args.ledger} "
                             "(its total epsilon).")
        else:
            budget = (args.budget, 1e-5 if args.budget_delta is None else args.budget_delta)
    bank = load_npy(args.bank, "bank")
    queries = load_npy(args.queries, "queries")
    mem = LSRMemory(bank, beta=args.beta, radius=args.radius)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotPrivateWarning)
        if not private:
            res = noiseless_retrieve(mem, queries, steps=args.steps)
        else:
            kw = dict(kappa=args.kappa, gamma=args.gamma, accounting=args.accounting,
                      output_projection=not args.no_output_projection)
            n_queries = 1 if np.ndim(queries) == 1 else len(queries)
            progress, close = _progress_bar(args.steps, n_queries)
            try:
                if args.ledger is not None:
                    pm = PrivateMemory(bank, radius=mem.radius_, budget=budget,
                                       ledger=args.ledger)
                    res = pm.retrieve(queries, steps=args.steps, epsilon=args.epsilon,
                                      delta=args.delta, method=args.method, seed=args.seed,
                                      progress=progress, **kw)
                else:
                    res = private_retrieve(mem, queries, method=args.method,
                                           epsilon=args.epsilon, delta=args.delta,
                                           steps=args.steps, seed=args.seed,
                                           progress=progress, **kw)
            finally:
                close()
    for w in caught:
        print(f"brace: WARNING: {w.message}", file=sys.stderr)
    save_result(res, out, include_diagnostics=args.diagnostics)
    print(res.summary(diagnostics=args.diagnostics) if private else res.summary())
    if args.ledger is not None:
        print(f"ledger {args.ledger}: spent eps = {pm.spent:.6g} of {budget[0]:g} at delta = "
              f"{budget[1]:g} (all releases composed); remaining eps = {pm.remaining:.6g}")
    what = "released states" if res.is_private else "states (NOT PRIVATE)"
    print(f"wrote {res.outputs.shape} {what} to {out}")
    return 0


def _add_ledger(sub) -> None:
    p = sub.add_parser(
        "ledger",
        help="show a privacy ledger (or what a saved release spends)",
        description="Show a privacy ledger written by 'brace retrieve --ledger' or "
        "brace.PrivateMemory: its releases, the composed total, what is left and the bank "
        "fingerprint. Given a saved release (.npz/.json from 'brace retrieve --out'), show "
        "what it spends and, with --ledger, whether it would fit (nothing is spent).",
    )
    lsub = p.add_subparsers(dest="ledger_command", metavar="ACTION", parser_class=_Parser)
    lsub.required = True
    show = lsub.add_parser("show", help="print a ledger or a saved release's spend")
    show.add_argument("file", help="ledger .json, or a saved release .npz/.json")
    show.add_argument("--ledger", default=None,
                      help="with a saved release: the ledger to price it against (read only)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_cmd_ledger_show)


def _is_ledger(path: str) -> bool:
    from pathlib import Path

    from .ledger import LEDGER_FORMAT

    p = Path(path)
    if p.suffix.lower() != ".json" or not p.is_file():
        return False
    try:
        head = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return True  # let read_ledger report the damage
    return not isinstance(head, dict) or head.get("format") == LEDGER_FORMAT or \
        "schema" not in head


def _cmd_ledger_show(args: argparse.Namespace) -> int:
    from ._io import dumps_strict
    from .ledger import compose_records, event_to_dict, read_ledger
    from .results import load_result

    if _is_ledger(args.file):
        state = read_ledger(args.file)
        print(dumps_strict(state.to_dict(), indent=2) if args.json else state.summary())
        return 0
    res = load_result(args.file)
    if res.privacy is None or not res.is_private:
        reason = res.not_private_reason or "not differentially private"
        info = {"file": str(args.file), "method": res.method, "is_private": False,
                "spend": None, "spend_null_reason": f"NOT differentially private: {reason}"}
        print(dumps_strict(info, indent=2) if args.json else
              f"release {args.file}: method {res.method!r} is NOT differentially private "
              f"({reason}); a ledger refuses it.")
        return 0
    p = res.privacy
    record = {"event": event_to_dict(p.call_event), "delta_extra": 0.0}
    info: dict = {"file": str(args.file), "method": res.method, "is_private": True,
                  "queries": p.queries, "steps": p.steps, "dim": p.dim,
                  "per_query": {"epsilon": p.epsilon, "delta": p.delta},
                  "epsilon_total": p.epsilon_total, "at_delta": p.delta,
                  "event": record["event"]}
    lines = [f"release {args.file}: method {res.method}, {p.queries} queries x {p.steps} "
             f"step(s), d = {p.dim}",
             f"  per query            : ({p.epsilon:g}, {p.delta:g})-DP",
             f"  all queries composed : eps = {p.epsilon_total:.6g} at delta = {p.delta:g}"]
    if args.ledger is not None:
        state = read_ledger(args.ledger)
        after, _, _ = compose_records(state.releases, state.budget_delta, extra=[record])
        fits = after <= state.budget_epsilon
        info["ledger"] = {"path": str(args.ledger), "spent": state.spent,
                          "total_with_release": after, "budget_epsilon": state.budget_epsilon,
                          "at_delta": state.budget_delta, "fits": fits}
        lines.append(
            f"  against {args.ledger}: spent {state.spent:.6g}; with this release "
            f"{after:.6g} of {state.budget_epsilon:g} at delta = {state.budget_delta:g} "
            f"({'fits' if fits else 'OVER BUDGET'}; nothing was spent)")
    print(dumps_strict(info, indent=2) if args.json else "\n".join(lines))
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
    _add_ledger(sub)
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
