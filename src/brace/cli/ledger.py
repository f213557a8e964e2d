"""``brace ledger init | show | migrate | backup | restore | repair``: create a privacy
ledger for a bank, show a ledger (or what a saved release spends), migrate a JSON ledger
of an earlier version, copy a ledger safely, also while it is in use (a backup, or a
restore), mend the records an earlier version wrote that cannot be read (docs/ledger.md).
A ledger is an SQLite file or a ``postgresql://`` URL."""

from __future__ import annotations

import argparse
import sys

from ._args import finite_float, int_at_least

__all__ = ["add_parser", "run_init", "run_show", "run_migrate", "run_copy", "run_repair"]


def add_parser(sub) -> None:
    """Register ``brace ledger``."""
    p = sub.add_parser(
        "ledger",
        help="create, show, migrate, back up or restore a privacy ledger",
        description="A privacy ledger (an SQLite file, or a postgresql:// URL) records "
        "every release from one bank and enforces its total budget (docs/ledger.md). "
        "'init' creates one for a bank; 'show' prints a ledger (or what a saved release "
        "spends); 'migrate' converts a JSON ledger of an earlier version; 'backup' and "
        "'restore' copy a ledger into a new one of either kind, verified, also while it is "
        "in use.",
    )
    lsub = p.add_subparsers(dest="ledger_command", metavar="ACTION", parser_class=type(p))
    lsub.required = True
    init = lsub.add_parser("init", help="create a ledger for a bank and a budget")
    init.add_argument("file", help="new ledger file (e.g. ledger.db) or postgresql:// URL; "
                      "must not exist")
    init.add_argument("--bank", required=True, help="bank .npy/.csv (n, d)")
    init.add_argument("--radius", type=finite_float, required=True, help="support radius r")
    init.add_argument("--budget", type=finite_float, required=True,
                      help="total epsilon of everything released from the bank")
    init.add_argument("--budget-delta", type=finite_float, default=1e-5,
                      help="delta of the total budget")
    init.set_defaults(func=run_init)
    show = lsub.add_parser("show", help="print a ledger or a saved release's spend")
    show.add_argument("file", help="ledger .db or postgresql:// URL, or a saved release "
                      ".npz/.json")
    show.add_argument("--ledger", default=None,
                      help="with a saved release: the ledger to compare it with (read "
                      "only; default: none)")
    show.add_argument("--last", type=int_at_least(0), default=20,
                      help="releases listed (most recent; 0: none)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=run_show)
    mig = lsub.add_parser("migrate", help="convert a JSON ledger (brace-ledger/1) to a "
                          "ledger file or postgresql:// URL")
    mig.add_argument("source", help="the JSON ledger")
    mig.add_argument("target", help="the new ledger file or postgresql:// URL (must not "
                     "exist)")
    mig.set_defaults(func=run_migrate)
    for name, what, src_help in (
            ("backup", "copy a ledger into a new one (a file or a postgresql:// URL), "
             "verified; servers may keep writing", "the ledger to back up"),
            ("restore", "copy a backup into a new ledger, verified (releases made after "
             "the backup are not in it: docs/deploying.md)", "the backup (a ledger)")):
        cp = lsub.add_parser(name, help=what)
        cp.add_argument("source", help=src_help + " (file or postgresql:// URL)")
        cp.add_argument("target", help="the new ledger (file or postgresql:// URL); must "
                        "not exist")
        cp.set_defaults(func=run_copy, copy_kind=name)
    rp = lsub.add_parser("repair", help="copy a ledger that holds records it cannot read "
                         "into a new one, mended (docs/ledger.md §7)")
    rp.add_argument("source", help="the ledger to repair (file or postgresql:// URL); "
                    "it is not changed")
    rp.add_argument("target", help="the new, repaired ledger (file or postgresql:// URL); "
                    "must not exist")
    rp.set_defaults(func=run_repair)


def run_init(args: argparse.Namespace) -> int:
    """Carry out ``brace ledger init``."""
    from .._io import load_npy
    from ..budget import PrivateMemory

    bank = load_npy(args.bank, "bank")
    pm = PrivateMemory(bank, radius=args.radius, budget=(args.budget, args.budget_delta),
                       ledger=args.file, create=True)
    f = pm.filter
    print(f"created ledger {args.file} for bank {args.bank} (n = {bank.shape[0]}, d = "
          f"{bank.shape[1]}, radius {args.radius:g}), budget ({args.budget:g}, "
          f"{args.budget_delta:g}); filter orders "
          + ", ".join(f"{o:.4g}" for o in f.to_dict()["orders"])
          + f", direct delta share {f.delta_direct:g}")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    """Carry out ``brace ledger migrate``."""
    from ..budget import migrate_json_ledger

    state = migrate_json_ledger(args.source, args.target)
    print(f"migrated {len(state.releases)} release(s) from {args.source} to {args.target} "
          f"(charged to every row, as before)")
    print(state.summary())
    return 0


def run_copy(args: argparse.Namespace) -> int:
    """Carry out ``brace ledger backup`` / ``restore``."""
    from ..budget import inspect_ledger
    from ..ledger import backup_ledger
    from ..ledger.backend import is_server_url, ledger_class, redact_url
    from ..ledger.backup import copy_ledger

    for loc in (args.source, args.target):
        ledger_class(loc)  # a URL of another scheme is refused, never taken for a path
    if is_server_url(args.source) or is_server_url(args.target):
        state = copy_ledger(args.source, args.target)  # rows, verified, either backend
    else:  # two files: SQLite's online backup API, verified, published atomically
        backup_ledger(args.source, args.target)
        state = inspect_ledger(args.target)
    src, dst = (redact_url(x) if isinstance(x, str) else x for x in (args.source, args.target))
    print(f"{'backed up' if args.copy_kind == 'backup' else 'restored'} {src} to {dst}: "
          f"{len(state.releases)} release(s), chain verified; spent {state.spent_local:.6g} "
          f"of {state.budget_epsilon:g} (local accounting)")
    if args.copy_kind == "restore":
        print("note: releases made after this backup was taken are not in the restored "
              "ledger; their spend is forgotten (docs/deploying.md, 'Backing up').")
    return 0


def run_repair(args: argparse.Namespace) -> int:
    """Carry out ``brace ledger repair``."""
    from ..ledger.backend import redact_url
    from ..ledger.backup import repair_ledger

    state, fixed = repair_ledger(args.source, args.target)
    src, dst = (redact_url(x) for x in (args.source, args.target))
    for line in fixed:
        print(f"mended {line}")
    print(f"repaired {src} into {dst}: {len(state.releases)} release(s), chain verified; "
          f"spent {state.spent_local:.6g} of {state.budget_epsilon:g} (local accounting). "
          f"{src} was not changed: point the servers at {dst}.")
    return 0


def _is_release(path: str) -> bool:
    from pathlib import Path

    from ..ledger.backend import is_server_url

    if is_server_url(path):
        return False

    return Path(path).suffix.lower() in (".npz", ".json") and _json_result(path)


def _json_result(path: str) -> bool:
    import json
    from pathlib import Path

    p = Path(path)
    if p.suffix.lower() == ".npz":
        return True
    try:
        head = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(head, dict) and "schema" in head


def run_show(args: argparse.Namespace) -> int:
    """Carry out ``brace ledger show``."""
    from .._io import dumps_strict
    from ..budget import inspect_ledger
    from ..results import load_result

    if not _is_release(args.file):
        state = inspect_ledger(args.file, unreadable=True)  # names a record it cannot read
        print(dumps_strict(state.to_dict(), indent=2) if args.json
              else state.summary(last=args.last))
        if state.unreadable:
            print(f"brace: error: ledger {args.file} holds "
                  f"{len(state.unreadable)} release(s) it cannot read (listed above); "
                  f"repair it: brace ledger repair {args.file} NEW (docs/ledger.md §7).",
                  file=sys.stderr)
            return 1
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
    from ..ledger import event_to_dict

    info: dict = {"file": str(args.file), "method": res.method, "is_private": True,
                  "queries": p.queries, "steps": p.steps, "dim": p.dim,
                  "per_query": {"epsilon": p.epsilon, "delta": p.delta},
                  "epsilon_total": p.epsilon_total, "at_delta": p.delta,
                  "event": event_to_dict(p.call_event)}
    lines = [f"release {args.file}: method {res.method}, {p.queries} queries x {p.steps} "
             f"step(s), d = {p.dim}",
             f"  per query            : ({p.epsilon:g}, {p.delta:g})-DP"]
    tot, at = p.composed()
    if at != p.delta:
        info["epsilon_total_at"] = {"epsilon": tot, "delta": at}
        lines.append(
            f"  all queries composed : eps = {tot:.6g} at delta = {at:g} (each query spends "
            "part of its delta directly on the count proposals, so at the per-query delta "
            f"the composition is infinite; it is stated at {p.queries} x the per-query "
            "delta: the deltas add)")
    else:
        lines.append(f"  all queries composed : eps = {tot:.6g} at delta = {p.delta:g}")
    if args.ledger is not None:
        state = inspect_ledger(args.ledger)
        info["ledger"] = {"path": str(args.ledger), "spent_local": state.spent_local,
                          "spent_global": state.spent_global,
                          "budget_epsilon": state.budget_epsilon,
                          "at_delta": state.budget_delta}
        lines.append(
            f"  ledger {args.ledger}: spent {state.spent_local:.6g} (local), "
            f"{state.spent_global:.6g} (global) of {state.budget_epsilon:g} at delta = "
            f"{state.budget_delta:g}; whether this release fits depends on where its "
            "queries are: ask 'brace retrieve --ledger' (a refused call spends nothing)")
    print(dumps_strict(info, indent=2) if args.json else "\n".join(lines))
    return 0
