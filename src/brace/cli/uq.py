"""``brace uq``: a private retrieval and its confidence regions (bank and population)."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

import numpy as np

from ._args import add_mechanism_arguments, add_memory_arguments, finite_float

__all__ = ["add_parser"]


def add_parser(sub) -> None:
    """Register ``brace uq``."""
    p = sub.add_parser(
        "uq",
        help="run a private retrieval and report confidence regions for the bank's and the "
        "population's trajectory (privacy and sampling parts separately)",
        description="Run private_retrieve on BANK for QUERIES, then report per-step and "
        "simultaneous Gaussian confidence regions for the noiseless trajectory on this bank "
        "(target 'bank', privacy part) and for the population trajectory (target "
        "'population', privacy + sampling part); also the public variant where it can be "
        "formed. The private regions are computed from the bank and are NOT covered by "
        "the release's (epsilon, delta): see docs/uq.md.",
    )
    add_memory_arguments(p, queries_required=False)
    add_mechanism_arguments(p, methods=("brace", "global", "endpoint", "naive"),
                            default="brace", epsilon_when="unless --release")
    p.add_argument("--release", default=None,
                   help="a saved release (.npz/.json from 'brace retrieve --out') to analyse "
                   "instead of running a new one; its queries, steps and mechanism are used "
                   "(default: run a new release)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the bootstrap and simulations, and of a new release's plain "
                   "noise (default: fresh OS entropy for the analysis, secure noise for the "
                   "release)")
    p.add_argument("--noise", choices=("auto", "plain", "secure"), default="auto",
                   help="noise of a new release: auto (secure without --seed, plain with "
                   "one), plain or secure (exact, OS randomness, no seed; "
                   "docs/deploying.md)")
    p.add_argument("--level", type=finite_float, default=0.95, help="1 - α, in (0, 1)")
    p.add_argument("--sampling", choices=["delta", "bootstrap"], default="delta",
                   help="sampling part: delta method or bootstrap")
    p.add_argument("--privacy", choices=["auto", "linear", "simulate"], default="auto",
                   help="privacy part: linear-Gaussian model, simulated conditional law, or "
                   "auto (simulate only where the linear model is unreliable)")
    p.add_argument("--n-sim", type=int, default=400, help="simulated releases")
    p.add_argument("--ledger", default=None,
                   help="privacy ledger (made by 'brace ledger init'): the new release is "
                   "charged to its budget and refused if it does not fit (default: no "
                   "ledger)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--bandwidth", type=finite_float, default=None,
                   help="radial kernel bandwidth of the Jacobian (default r·n^(-1/5), at "
                   "most r/2)")
    p.add_argument("--min-gate-fraction", type=finite_float, default=None,
                   help="public lower bound on p_t (public population region; default: none, "
                   "no public population region)")
    p.add_argument("--jacobian-bound", type=finite_float, default=None,
                   help="public bound on ||J_t|| (public regions when errors propagate; "
                   "default: none)")
    p.add_argument("--out", default=None,
                   help="write every region to this JSON file (default: print only)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--diagnostics", action="store_true",
                   help="also print the release's per-step diagnostics (noise std, "
                   "sensitivity bound) and the UQ's per-step sd breakdown: data-dependent "
                   "(except a count release's noise scale) and NOT covered by epsilon")
    p.set_defaults(func=run)


def _fmt(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.5g}" for x in v) + "]"


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace uq`` for parsed ``args``."""
    from .._io import check_output_path, load_npy, write_json
    from .._validation import check_rng
    from ..mechanisms import NotPrivateWarning, private_retrieve
    from ..memory import LSRMemory
    from ..results import NoiselessResult, load_result, with_diagnostics
    from ..uq import TARGETS, ConfidenceRegion, UQWarning, analyze, public_region
    from ..uq._common import _check_level

    level = _check_level(args.level)
    if args.out is not None:  # before anything is computed
        check_output_path(args.out, inputs={"--bank": args.bank, "--queries": args.queries,
                                            "--release": args.release,
                                            "--ledger": args.ledger},
                          overwrite=args.overwrite, suffixes=(".json",))
    if args.release is None:
        for flag, v in (("--queries", args.queries), ("--steps", args.steps),
                        ("--epsilon", args.epsilon)):
            if v is None:
                raise ValueError(f"{flag} is required (or analyse a saved --release).")
    saved = None
    if args.ledger is not None and args.release is not None:
        raise ValueError("--ledger charges a new release; a saved --release was charged "
                         "when it was made.")
    if args.release is not None:
        saved = load_result(args.release)
        if isinstance(saved, NoiselessResult):
            raise ValueError(f"--release {args.release} is the noiseless trajectory (method "
                             "none): there is no privacy noise to analyse.")
        if args.steps is not None and args.steps != saved.params["steps"]:
            raise ValueError(f"--steps {args.steps} differs from the release's "
                             f"{saved.params['steps']}; omit --steps.")
    bank = load_npy(args.bank, "bank")
    queries = load_npy(args.queries, "queries") if args.queries is not None else None
    mem = LSRMemory(bank, beta=args.beta, radius=args.radius)
    # the analysis's draws: independent of a seeded release's noise (a spawned stream)
    rng = check_rng(None if args.seed is None
                    else np.random.SeedSequence(args.seed).spawn(1)[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotPrivateWarning)
        warnings.simplefilter("always", UQWarning)
        if saved is not None:
            res = saved if saved.noise_std is not None else with_diagnostics(mem, saved)
            if queries is None:
                queries = res.queries
        elif args.ledger is not None:  # charged to the budget, then analysed
            from ..budget import PrivateMemory
            from ..ledger.backend import ledger_class

            db = ledger_class(args.ledger).open(args.ledger, write=False)
            budget = (db.meta["budget"]["epsilon"], db.meta["budget"]["delta"])
            db.close()
            with PrivateMemory(bank, radius=mem.radius_, budget=budget,
                               ledger=args.ledger) as pm:
                res = pm.retrieve(
                    queries, method=args.method, epsilon=args.epsilon, delta=args.delta,
                    steps=args.steps, kappa=args.kappa, gamma=args.gamma,
                    release=args.release_mode, accounting=args.accounting,
                    output_projection=not args.no_output_projection, noise=args.noise,
                    seed=None if args.noise == "secure" else args.seed)
                print(f"ledger {args.ledger}: spent eps = {pm.spent:.6g} of {budget[0]:g} "
                      f"at delta = {budget[1]:g}; remaining eps = {pm.remaining:.6g}")
            res = with_diagnostics(mem, res)
        else:
            res = private_retrieve(
                mem, queries, method=args.method, epsilon=args.epsilon, delta=args.delta,
                steps=args.steps, kappa=args.kappa, gamma=args.gamma,
                release=args.release_mode,
                accounting=args.accounting, output_projection=not args.no_output_projection,
                seed=None if args.noise == "secure" else args.seed, noise=args.noise,
            )
        uq = analyze(mem, res, queries, sampling=args.sampling, privacy=args.privacy,
                     n_boot=args.n_boot, n_sim=args.n_sim, bandwidth=args.bandwidth, seed=rng)
    regions = {t: uq.confidence_region(t, level) for t in TARGETS}
    public: dict[str, Any] = {}
    for t in TARGETS:
        try:
            public[t] = public_region(
                res, target=t, level=level, n=mem.n_memories,
                min_gate_fraction=args.min_gate_fraction, jacobian_bound=args.jacobian_bound,
            )
        except ValueError as exc:
            public[t] = str(exc)
    for w in caught:
        print(f"brace: WARNING: {w.message}", file=sys.stderr)
    print(res.summary(diagnostics=args.diagnostics))
    if args.diagnostics:
        print(uq)
    pct = f"{100 * level:g}%"
    Q = uq.released.shape[0]
    print("confidence regions: 'bank' and 'population' are computed from the bank and are "
          "NOT covered by epsilon (docs/uq.md §6); 'public bank' is a function of the release "
          "only")
    hb = regions["bank"].halfwidth()
    hp = regions["population"].halfwidth()
    hpub = public["bank"].halfwidth() if isinstance(public["bank"], ConfidenceRegion) else None
    for i in range(min(Q, 10)):
        print(f"query {i}: per-coordinate {pct} half-widths (bank = privacy only; population "
              "= privacy + sampling)")
        for j, t in enumerate(uq.steps):
            extra = f"  public bank ±{_fmt(hpub[i, j])}" if hpub is not None else ""
            print(f"  t={t}: Y={_fmt(uq.released[i, j])}  bank ±{_fmt(hb[i, j])}  "
                  f"population ±{_fmt(hp[i, j])}{extra}")
    if Q > 10:
        print(f"  … {Q - 10} more queries in --out")
    for t, v in public.items():
        if isinstance(v, str):
            print(f"public {t} region: not formed ({v})")
    if args.out:
        write_json(args.out, {
            "release": res.to_dict(),
            "uq": uq.to_dict(),
            "regions": {t: r.to_dict() for t, r in regions.items()},
            "public_regions": {
                t: (v.to_dict() if isinstance(v, ConfidenceRegion) else {"not_formed": v})
                for t, v in public.items()
            },
        })
        print(f"wrote {args.out}")
    return 0
