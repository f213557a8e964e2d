"""``brace audit``: an empirical privacy audit (one configuration, or the built-in report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ..mechanisms import DEFAULT_KAPPA, METHODS
from ._args import (
    DEFAULT_DELTA,
    add_mechanism_arguments,
    add_memory_arguments,
    check_output_dir,
    check_output_file,
    finite_float,
    parse_vector,
)

__all__ = ["add_parser"]

# Mechanism flags of a single audit; --report uses built-in banks and mechanisms.
_SINGLE_ONLY = ("bank", "query", "method", "epsilon", "steps", "beta", "radius", "kappa",
                "gamma", "accounting", "release_mode", "noise_scale_factor", "pilot_runs",
                "replace_row",
                "replace_value", "noise", "pair")


def add_parser(sub) -> None:
    """Register ``brace audit``."""
    from ..audit import AuditConfig, ReportConfig

    p = sub.add_parser(
        "audit",
        help="empirical privacy audit: a statistically valid lower bound on epsilon",
        description="Run a mechanism many times on two neighbouring banks and certify a "
        "lower bound on its epsilon (docs/audit.md). The mechanism is the one 'brace "
        "retrieve' would run with the same flags and defaults: --release-mode auto (the "
        "default for BRACE) is resolved from public values, as retrieve resolves it, to the "
        "smooth release with its gamma or the count release, and that release is audited "
        "(without the output projection, a post-processing). With --report, run the "
        "built-in audit report instead.",
    )
    d = AuditConfig()
    p.add_argument("--report", action="store_true",
                   help="run the audit report (built-in banks); --out is a directory")
    add_memory_arguments(p, required=False, queries="query", when="unless --report")
    add_mechanism_arguments(p, methods=METHODS, default=None, output_projection=False,
                            unset_defaults=True, when="unless --report")
    p.add_argument("--noise-scale-factor", type=finite_float, default=None,
                   help="multiply the noise std (e.g. 0.5: a deliberately broken mechanism; "
                   "default 1)")
    p.add_argument("--noise", choices=("plain", "secure"), default=None,
                   help="the mechanism's sampling: plain (default) or secure (exact discrete "
                   "noise on the public grid, OS randomness: not reproducible from --seed)")
    p.add_argument("--replace-row", type=int, default=None,
                   help="audit only the neighbour with this row replaced (default: search "
                   "for the most distinguishable pair)")
    p.add_argument("--replace-value", default=None,
                   help="comma-separated new value of --replace-row (no default: required with "
                   "--replace-row)")
    p.add_argument("--pair", choices=("search", "far", "near"), default=None,
                   help="the neighbouring pair: 'search' (default: the pair finder), 'far' "
                   "(a row outside every footprint of the release moved to another place "
                   "outside them: local accounting charges it nothing; audited on the "
                   "projected release with coupled runs, so the bound is 0 exactly if no "
                   "released bit changes) or 'near' (a member of the query's gate moved "
                   "across it: charged the per-query epsilon). docs/audit.md §5.1")
    p.add_argument("--runs", type=int, default=None,
                   help=f"fresh runs per bank (default {d.n_runs}; report: "
                   f"{ReportConfig.n_runs})")
    p.add_argument("--pilot-runs", type=int, default=None,
                   help="pilot runs per finalist (default runs/4, at least 10)")
    p.add_argument("--screen-runs", type=int, default=d.n_screen,
                   help=f"screening runs per candidate (default {d.n_screen})")
    p.add_argument("--alpha", type=finite_float, default=d.alpha,
                   help=f"1 - confidence (default {d.alpha:g})")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--out", default=None,
                   help="JSON result file (single audit) or output directory (--report) "
                   "(default: print only)")
    p.add_argument("--no-progress", action="store_true", help="no progress messages")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace audit`` for parsed ``args``; exit 1 on a violation."""
    from .._io import atomic_write_text, load_npy, write_json
    from .._validation import check_radius_beta
    from ..audit import AuditConfig, ReportConfig, audit, format_report, report
    from ..plan import plan_release

    delta = DEFAULT_DELTA if args.delta is None else args.delta
    if args.report:
        for flag in _SINGLE_ONLY:
            if getattr(args, flag) is not None:
                raise ValueError(f"--report uses built-in banks and mechanisms; do not pass "
                                 f"--{flag.replace('_', '-')}.")
        if args.out is None:
            raise ValueError("--report needs --out DIR.")
        out_dir = Path(args.out)
        check_output_dir(out_dir)
        rc = ReportConfig(n_runs=args.runs if args.runs is not None else ReportConfig.n_runs,
                          n_screen=args.screen_runs, alpha=args.alpha, delta=delta,
                          seed=args.seed)
        rep = report(rc, progress=not args.no_progress)
        text = format_report(rep)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json(out_dir / "audit_report.json", rep)
        atomic_write_text(out_dir / "audit_report.txt", text + "\n")
        print(text)
        print(f"wrote {out_dir / 'audit_report.json'} and {out_dir / 'audit_report.txt'}")
        overall = rep.get("overall", "PASS" if rep["passed"] else "FAIL")
        return {"PASS": 0, "FAIL": 1, "UNDERPOWERED": 3}[overall]

    for flag in ("bank", "query", "method", "epsilon", "steps"):
        if getattr(args, flag) is None:
            raise ValueError(f"--{flag} is required (or use --report).")
    if (args.replace_row is None) != (args.replace_value is None):
        raise ValueError("give both --replace-row and --replace-value, or neither.")
    pair = args.pair or "search"
    if pair != "search" and args.replace_row is not None:
        raise ValueError(f"--pair {pair} chooses the replacement itself; do not pass "
                         "--replace-row/--replace-value.")
    if args.out is not None:
        check_output_file(Path(args.out))
        from .._io import check_output_path

        check_output_path(args.out, inputs={"--bank": args.bank, "--query": args.query},
                          overwrite=True)
        if Path(args.out).exists():
            print(f"note: --out {args.out} exists and will be replaced", file=sys.stderr)
    bank = load_npy(args.bank, "bank")
    query = load_npy(args.query, "query")
    radius = check_radius_beta(args.beta, args.radius)
    say = None if args.no_progress else (lambda m: print(f"[audit] {m}", file=sys.stderr))
    replacement = None
    if args.replace_row is not None:
        replacement = (args.replace_row, parse_vector(args.replace_value, "--replace-value"))
    kappa = DEFAULT_KAPPA if args.kappa is None else args.kappa
    accounting = args.accounting or AuditConfig.accounting
    # the release brace retrieve would run with these flags (release mode and γ, from
    # public values; the default is the library's, auto for BRACE), audited as such
    if np.ndim(bank) != 2:
        raise ValueError(f"--bank must hold an (n, d) array; got shape {np.shape(bank)}.")
    plan = plan_release((bank.shape[0], bank.shape[1]), radius=radius, method=args.method,
                        epsilon=args.epsilon, delta=delta, steps=args.steps, kappa=kappa,
                        gamma=args.gamma, accounting=accounting, release=args.release_mode)
    brace_smooth = plan.method == "brace" and plan.release == "smooth"
    cfg = AuditConfig(
        method=args.method, epsilon=args.epsilon, delta=delta, steps=args.steps,
        radius=radius, kappa=kappa, gamma=plan.gamma if brace_smooth else None,
        accounting=accounting,
        release="count" if plan.release == "count" else "smooth",
        noise_scale_factor=1.0 if args.noise_scale_factor is None else args.noise_scale_factor,
        noise=args.noise or "plain",
        n_runs=args.runs if args.runs is not None else AuditConfig.n_runs,
        n_pilot=args.pilot_runs, n_screen=args.screen_runs, alpha=args.alpha, seed=args.seed,
        pair=pair, output_projection=pair == "far", coupled=pair == "far",
    )
    if cfg.method == "naive":
        print("brace: WARNING: method 'naive' is NOT differentially private (baseline only).",
              file=sys.stderr)
    res = audit(bank, query, cfg, replacement=replacement, progress=say)
    print(res)
    if plan.method == "brace":
        print(f"audited release: {plan.release} ({plan.release_rule})"
              + (f", gamma = {plan.gamma:.6g} ({plan.gamma_rule})" if brace_smooth else ""))
    if args.out is not None:
        write_json(args.out, res.to_dict())
        print(f"wrote {args.out}")
    return 1 if res.verdict == "VIOLATION" else 0
