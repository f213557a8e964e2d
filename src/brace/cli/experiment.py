"""``brace experiment NAME``: the paper's experiments (synthetic, mnist, coverage, theory,
switching) and completion on real data (real).

Each sub-command turns its flags into the experiment's config and calls the experiment
module's ``run_*(config, out_dir, …)``; the experiment modules hold no argument parsing.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ._args import GAMMA_HELP, finite_float, gamma_arg

__all__ = ["add_parser", "EXPERIMENTS"]

EXPERIMENTS = ("synthetic", "mnist", "coverage", "theory", "switching", "real")


def add_parser(sub) -> None:
    """Register ``brace experiment`` and its sub-commands."""
    p = sub.add_parser("experiment", help="run one of the paper's experiments")
    exp_sub = p.add_subparsers(dest="experiment", metavar="NAME", parser_class=type(p))
    exp_sub.required = True
    _add_synthetic(exp_sub)
    _add_mnist(exp_sub)
    _add_coverage(exp_sub)
    _add_theory(exp_sub)
    _add_switching(exp_sub)
    _add_real(exp_sub)


# ------------------------------------------------------------------------ synthetic


def _add_synthetic(sub) -> None:
    from ..experiments import synthetic

    p = sub.add_parser(
        "synthetic",
        help="synthetic boundary switching (paper §6.1); the README's main job",
        description=synthetic.__doc__.split("\n\n")[0],
    )
    d = synthetic.SyntheticConfig()
    p.add_argument("--out", default="runs/synthetic", help="output directory")
    p.add_argument("--replications", type=int, default=d.replications,
                   help="seeds of the multi-seed summary")
    p.add_argument("--candidates", type=int, default=d.candidates,
                   help="queries searched for the highlighted boundary-switching run")
    p.add_argument("--epsilon", type=finite_float, default=d.epsilon, help="target ε")
    p.add_argument("--delta", type=finite_float, default=d.delta, help="target δ")
    p.add_argument("--kappa", type=finite_float, default=d.kappa,
                   help=f"κ of the highlighted run (default {d.kappa:g})")
    p.add_argument("--gamma", type=gamma_arg, default=d.gamma, help=GAMMA_HELP)
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the noise")
    p.add_argument("--data-seed", type=int, default=d.data_seed, help="seed of the bank")
    p.add_argument("--accounting", choices=["rdp", "paper"], default=d.accounting,
                   help="privacy accounting")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_synthetic)


def run_synthetic(args: argparse.Namespace) -> int:
    """Carry out ``brace experiment synthetic``."""
    import sys

    from .._io import check_output_path
    from ..experiments.synthetic import SyntheticConfig, run_synthetic

    out = check_output_path(args.out, is_dir=True)  # before computing anything
    if out.is_dir() and any(out.iterdir()):
        print(f"note: --out {out} exists; the files of this run in it will be replaced",
              file=sys.stderr)

    cfg = dataclasses.replace(
        SyntheticConfig(), replications=args.replications, candidates=args.candidates,
        epsilon=args.epsilon, delta=args.delta, kappa=args.kappa, gamma=args.gamma,
        seed=args.seed, data_seed=args.data_seed, accounting=args.accounting,
    )
    run_synthetic(cfg, args.out, progress=not args.no_progress)
    return 0


# ---------------------------------------------------------------------------- mnist


def _add_mnist(sub) -> None:
    from ..experiments.mnist import PAPER_SEED

    p = sub.add_parser(
        "mnist",
        help="corrupted-MNIST retrieval (paper §6.2): full grid, or --quick",
        description="Corrupted-MNIST retrieval (paper §6.2, docs/spec.md §7): 2-D VAE+PCA "
        "features, "
        "q = x + 3u, the 48 β × T × ε grid for BRACE, global, endpoint, naive (NOT DP) and "
        "noiseless; results.jsonl (resumable), tables and Figs. 2-4 in --out.",
    )
    p.add_argument("--data-dir", default=None,
                   help="directory with t10k-images-idx3-ubyte(.gz) and t10k-labels-idx1-ubyte"
                   "(.gz); required unless $BRACE_MNIST_DIR is set (default: $BRACE_MNIST_DIR)")
    p.add_argument("--out", default="runs/mnist", help="output directory (resumable)")
    p.add_argument("--quick", action="store_true",
                   help="tiny VAE, 6 β, T=3, ε=64, R=2 (smoke test, < 2 min)")
    p.add_argument("--cache-dir", default=None,
                   help="VAE cache directory (default: $BRACE_CACHE_DIR or ~/.cache/brace)")
    p.add_argument("--draws", type=int, default=None, metavar="R",
                   help="noise draws per query (default 10; 2 with --quick)")
    p.add_argument("--seed", type=int, default=PAPER_SEED,
                   help="seed of the query corruption and the noise")
    p.add_argument("--accounting", choices=["rdp", "paper"], default="rdp",
                   help="privacy accounting")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_mnist)


def run_mnist(args: argparse.Namespace) -> int:
    """Carry out ``brace experiment mnist``."""
    from ..experiments.mnist import QUICK, MnistConfig, run_mnist

    base = QUICK if args.quick else MnistConfig()
    draws = base.draws if args.draws is None else args.draws
    cfg = dataclasses.replace(base, draws=draws, seed=args.seed, accounting=args.accounting)
    run_mnist(cfg, args.out, data_dir=args.data_dir, cache_dir=args.cache_dir,
              progress=not args.no_progress)
    return 0


# ------------------------------------------------------------------------- coverage


def _add_coverage(sub) -> None:
    from ..experiments import coverage

    p = sub.add_parser(
        "coverage",
        help="coverage study of the UQ confidence regions (docs/spec.md §6)",
        description=coverage.__doc__.split("\n\n")[0],
    )
    d = coverage.CoverageConfig()
    quick = coverage.QUICK
    p.add_argument("--out", default="runs/coverage", help="output directory")
    p.add_argument("--quick", action="store_true",
                   help=f"small smoke run ({quick['replications']} banks, n in {quick['ns']})")
    p.add_argument("--replications", type=int, default=None,
                   help=f"banks per cell (default {d.replications}; --quick: "
                   f"{quick['replications']})")
    p.add_argument("--ns", type=int, nargs="+", default=None,
                   help=f"bank sizes (default {' '.join(map(str, d.ns))}; --quick: "
                   f"{' '.join(map(str, quick['ns']))})")
    p.add_argument("--epsilons", type=finite_float, nargs="+", default=None,
                   help=f"budgets ε (default {' '.join(f'{e:g}' for e in d.epsilons)})")
    p.add_argument("--horizons", type=int, nargs="+", default=None,
                   help=f"horizons T (default {' '.join(map(str, d.horizons))})")
    p.add_argument("--kappa", type=finite_float, default=d.kappa,
                   help=f"BRACE activation κ (default {d.kappa:g})")
    p.add_argument("--gamma-fraction", type=finite_float, default=d.gamma_fraction,
                   help=f"BRACE's γ = choose_gamma(ε, δ, T, d, fraction), given to each "
                   f"release, d = 2 (default {d.gamma_fraction:g}; choose_gamma's own "
                   "default is 0.9, the smooth release's rule when no γ is given; "
                   "private_retrieve's default release, auto, chooses γ by another rule)")
    p.add_argument("--method", choices=["brace", "global", "endpoint", "naive"],
                   default=d.method, help="mechanism ('naive' is NOT differentially private)")
    p.add_argument("--privacy", choices=["auto", "linear", "simulate"], default=d.privacy,
                   help="privacy part of the UQ (brace.uq.analyze)")
    p.add_argument("--n-sim", type=int, default=d.n_sim,
                   help="simulated releases of the privacy part")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of banks and noise")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_coverage)


def run_coverage(args: argparse.Namespace) -> int:
    """Carry out ``brace experiment coverage``."""
    from ..experiments.coverage import QUICK, CoverageConfig, run_coverage

    base = dataclasses.replace(CoverageConfig(), **QUICK) if args.quick else CoverageConfig()
    upd = {k: v for k, v in {
        "replications": args.replications,
        "ns": None if args.ns is None else tuple(args.ns),
        "epsilons": None if args.epsilons is None else tuple(args.epsilons),
        "horizons": None if args.horizons is None else tuple(args.horizons),
    }.items() if v is not None}
    cfg = dataclasses.replace(
        base, **upd, kappa=args.kappa, gamma_fraction=args.gamma_fraction,
        method=args.method, seed=args.seed, privacy=args.privacy, n_sim=args.n_sim,
    )
    run_coverage(cfg, args.out, progress=not args.no_progress)
    return 0


# --------------------------------------------------------------------------- theory


def _add_theory(sub) -> None:
    from ..experiments import theory

    p = sub.add_parser(
        "theory",
        help="numerical checks of the paper's theory (paper §5): dimension, horizon, "
        "activation bound, root-n transition, cost of correction",
        description=theory.__doc__.split("\n\n")[0],
    )
    d = theory.TheoryConfig()
    items = theory.ITEMS
    _add_run_arguments(p, "runs/theory", "small sizes (every figure and table, under a minute)",
                       d)
    p.add_argument("--items", default=",".join(items),
                   help=f"comma-separated subset of {','.join(items)}")
    p.add_argument("--replications", type=int, default=None,
                   help=f"queries per cell for items 1-3 (default {d.replications}; --quick: "
                   f"{theory.quick_config().replications})")
    p.set_defaults(func=run_theory)


def _add_run_arguments(p, out: str, quick_help: str, defaults: Any) -> None:
    """``--out``, ``--quick``, ``--seed``, ``--data-seed``, ``--no-progress``."""
    p.add_argument("--out", default=out, help="output directory")
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of the noise")
    p.add_argument("--data-seed", type=int, default=defaults.data_seed,
                   help="seed of the banks")
    p.add_argument("--no-progress", action="store_true", help="no progress output")


def run_theory(args: argparse.Namespace) -> int:
    """Carry out ``brace experiment theory``."""
    from ..experiments.theory import TheoryConfig, quick_config, run_theory

    items = tuple(s.strip() for s in args.items.split(",") if s.strip())
    over: dict[str, Any] = {"seed": args.seed, "data_seed": args.data_seed}
    if args.replications is not None:
        over["replications"] = args.replications
    cfg = quick_config(**over) if args.quick else dataclasses.replace(TheoryConfig(), **over)
    run_theory(cfg, args.out, items=items, progress=not args.no_progress)
    return 0


# ------------------------------------------------------------------------ switching


def _add_switching(sub) -> None:
    from ..experiments import switching

    p = sub.add_parser(
        "switching",
        help="phase diagram of ending in the wrong mode: naive (NOT DP), BRACE κ = ∞ / 0 / "
        "best, global, over ε, n and the query's distance to the separatrix",
        description=switching.__doc__.split("\n\n")[0],
    )
    d = switching.SwitchingConfig()
    _add_run_arguments(p, "runs/switching", "small sizes (2 ε, n = 256, 2 distances, 20 runs)",
                       d)
    p.add_argument("--runs", type=int, default=None,
                   help=f"releases per cell (default {d.runs}; --quick: 20)")
    p.set_defaults(func=run_switching)


def run_switching(args: argparse.Namespace) -> int:
    """Carry out ``brace experiment switching``."""
    from ..experiments.switching import SwitchingConfig, run_switching

    cfg = SwitchingConfig.quick_config() if args.quick else SwitchingConfig()
    over: dict[str, Any] = {"seed": args.seed, "data_seed": args.data_seed}
    if args.runs is not None:
        over["runs"] = args.runs
    run_switching(dataclasses.replace(cfg, **over), args.out, progress=not args.no_progress)
    return 0


# ----------------------------------------------------------------------------- real


def _add_real(sub) -> None:
    from ..experiments import real
    from ..experiments.real_data import NAMES

    p = sub.add_parser(
        "real",
        help="completion on real data (breast cancer, digits, MNIST PCA and raw) under a "
        "total budget: per-query BRACE (global / local accounting), global noise, "
        "synopsis with public seeds and without public data; public-data settings",
        description=real.__doc__.split("\n\n")[0],
    )
    d = real.RealConfig()
    q = real.QUICK
    p.add_argument("--out", default="runs/real", help="output directory (resumable)")
    p.add_argument("--quick", action="store_true",
                   help=f"Q in {list(q.workloads)}, total ε in "
                   f"{[float(e) for e in q.epsilons]}, R = {q.repetitions} (smoke run)")
    p.add_argument("--datasets", nargs="+", choices=NAMES, default=None, metavar="NAME",
                   help=f"subset of {' '.join(NAMES)} (default: all; the MNIST ones are "
                   "skipped with a note when the data is not found)")
    p.add_argument("--data-dir", default=None,
                   help="directory with the MNIST test split (t10k-*-idx*-ubyte(.gz)); "
                   "default: $BRACE_MNIST_DIR")
    p.add_argument("--workloads", type=int, nargs="+", default=None, metavar="Q",
                   help=f"workload sizes (default {' '.join(map(str, d.workloads))})")
    p.add_argument("--epsilons", type=finite_float, nargs="+", default=None, metavar="E",
                   help=f"total budgets ε (default {' '.join(f'{e:g}' for e in d.epsilons)})")
    p.add_argument("--repetitions", type=int, default=None, metavar="R",
                   help=f"repetitions (queries, corruption and noise) per cell (default "
                   f"{d.repetitions}; --quick: {q.repetitions})")
    p.add_argument("--settings", nargs="+", choices=real.SETTINGS, default=None,
                   metavar="SETTING",
                   help="public-data settings: split (a public split of the same "
                   "population, the default), none (no public data), sample (50 public "
                   "rows), shifted (public rows of classes 0-4 only); the last three "
                   "run on digits, mnist784, mnist_rp64 and mnist784_7k (default: split)")
    p.add_argument("--methods", nargs="+", choices=real.METHODS, default=None,
                   metavar="METHOD", help=f"subset of {' '.join(real.METHODS)} (default "
                   f"{' '.join(d.methods)})")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="seed of the queries, corruption and noise")
    p.add_argument("--split-seed", type=int, default=d.split_seed,
                   help="seed of the bank / public split")
    p.add_argument("--min-scored", type=int, default=None, metavar="N",
                   help=f"queries scored per cell at least (default {d.min_scored})")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_real)


def run_real(args: argparse.Namespace) -> int:
    """Carry out ``brace experiment real``."""
    from ..experiments.real import QUICK, RealConfig, run_real

    base = QUICK if args.quick else RealConfig()
    over: dict[str, Any] = {"seed": args.seed, "split_seed": args.split_seed}
    if args.datasets is not None:
        over["datasets"] = tuple(dict.fromkeys(args.datasets))
    if args.repetitions is not None:
        over["repetitions"] = args.repetitions
    if args.workloads is not None:
        over["workloads"] = tuple(args.workloads)
    if args.epsilons is not None:
        over["epsilons"] = tuple(args.epsilons)
    if args.settings is not None:
        over["settings"] = tuple(dict.fromkeys(args.settings))
    if args.methods is not None:
        over["methods"] = tuple(dict.fromkeys(args.methods))
    if args.min_scored is not None:
        over["min_scored"] = args.min_scored
    run_real(dataclasses.replace(base, **over), args.out, data_dir=args.data_dir,
             progress=not args.no_progress)
    return 0
