"""``brace ledger show FILE``: a privacy ledger's releases, composed total, what is left
and the bank fingerprint; or what a saved release spends (docs/ledger.md)."""

from __future__ import annotations

import argparse
import json

__all__ = ["add_parser", "run_show"]


def add_parser(sub) -> None:
    """Register ``brace ledger``."""
    p = sub.add_parser(
        "ledger",
        help="show a privacy ledger (or what a saved release spends)",
        description="Show a privacy ledger written by 'brace retrieve --ledger' or "
        "brace.PrivateMemory: its releases, the composed total, what is left and the bank "
        "fingerprint. Given a saved release (.npz/.json from 'brace retrieve --out'), show "
        "what it spends and, with --ledger, whether it would fit (nothing is spent).",
    )
    lsub = p.add_subparsers(dest="ledger_command", metavar="ACTION", parser_class=type(p))
    lsub.required = True
    show = lsub.add_parser("show", help="print a ledger or a saved release's spend")
    show.add_argument("file", help="ledger .json, or a saved release .npz/.json")
    show.add_argument("--ledger", default=None,
                      help="with a saved release: the ledger to price it against (read "
                      "only; default: none)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=run_show)


def _is_ledger(path: str) -> bool:
    from pathlib import Path

    from ..ledger import LEDGER_FORMAT

    p = Path(path)
    if p.suffix.lower() != ".json" or not p.is_file():
        return False
    try:
        head = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return True  # let read_ledger report the damage
    return not isinstance(head, dict) or head.get("format") == LEDGER_FORMAT or \
        "schema" not in head


def run_show(args: argparse.Namespace) -> int:
    """Carry out ``brace ledger show``."""
    from .._io import dumps_strict
    from ..ledger import compose_records, event_to_dict, read_ledger
    from ..results import load_result

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
