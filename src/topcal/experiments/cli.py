"""``topcal experiment ...``: the paper's experiments from the command line.

One of the command groups in ``topcal.cli.COMMAND_GROUPS``; torch is imported only when an
experiment actually runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import ParameterError

__all__ = ["add_commands", "DEFAULT_DATA_DIR", "default_cache_dir"]

#: Where Debian's dataset-fashion-mnist package puts the IDX files.
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/topcal/networks`` (``~/.cache/topcal/networks``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "topcal" / "networks"


def add_commands(sub) -> None:
    """Add ``experiment`` and its subcommands to the ``topcal`` subparsers."""
    from .ensembles import REGIMES

    p = sub.add_parser("experiment", help="reproduce the paper's experiments (needs torch)")
    esub = p.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    p.set_defaults(func=lambda args, _p=p: (_p.print_help(), 2)[1])
    u, o = REGIMES["under"], REGIMES["over"]
    e = esub.add_parser(
        "ensembles",
        help="MLP ensembles on MNIST-format data, two test sets, medians over many ensembles",
        description=(
            "The paper's appendix experiment: train M 784-300-100-10 MLPs, draw E "
            "ensembles of 10, fit every method on test set 1 of each ensemble and report "
            "median NLL/ECE1/ECE2 on test sets 1 and 2. Defaults: --regime under = "
            f"{u['steps']} steps in {u['precision']}, M={u['n_networks']}, "
            f"E={u['n_ensembles']}; --regime over = {o['steps']} steps in "
            f"{o['precision']}, M={o['n_networks']}, E={o['n_ensembles']}. The paper's "
            "scale: --networks 1000 --ensembles 1000."
        ),
    )
    e.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"directory with the four MNIST-format IDX files, gzipped or not (default: "
        f"{DEFAULT_DATA_DIR}, Fashion-MNIST from Debian's dataset-fashion-mnist)",
    )
    e.add_argument(
        "--regime",
        choices=list(REGIMES),
        default="under",
        help="under-trained (400 steps) or over-trained (10,000 steps) networks (default: under)",
    )
    e.add_argument(
        "--networks", type=int, metavar="M", help="networks to train (default: by regime)"
    )
    e.add_argument(
        "--ensembles", type=int, metavar="E", help="ensembles to draw (default: by regime)"
    )
    e.add_argument(
        "--ensemble-size", type=int, default=10, help="networks per ensemble (default: 10)"
    )
    e.add_argument("--steps", type=int, help="Adam steps per network (default: by regime)")
    e.add_argument(
        "--batch-size", type=int, help="minibatch size, drawn with replacement (default: 1000)"
    )
    e.add_argument("--lr", type=float, help="Adam learning rate (default: 1e-3)")
    e.add_argument(
        "--precision",
        choices=["float32", "bfloat16"],
        help="training matmuls in float32 or bfloat16 autocast (several times faster on CPUs with "
        "AMX, slower on CPUs without bfloat16 units; weights, Adam and test-set outputs "
        "stay float32) (default: by regime: under float32, over bfloat16)",
    )
    e.add_argument(
        "--test1-size",
        type=int,
        default=10_000,
        help="test set 1 split off the training images (default: 10000)",
    )
    e.add_argument(
        "--train-size",
        type=int,
        help="train on only this many of the remaining training images (default: all)",
    )
    e.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the split, the networks and the ensemble draw (default: 0)",
    )
    e.add_argument(
        "--methods",
        help="comma-separated methods (default: every registered method; see 'topcal methods')",
    )
    e.add_argument("--bins", type=int, default=10, help="bins of ECE1/ECE2 (default: 10)")
    e.add_argument(
        "--combine",
        choices=["product", "geometric"],
        default="product",
        help="ensemble rule: 'product' = softmax of the summed log outputs (the paper's), "
        "'geometric' = softmax of their mean (normalised geometric mean) (default: product)",
    )
    e.add_argument(
        "-o", "--out", help="output directory (default: ./topcal-experiment-<regime>)"
    )
    e.add_argument(
        "--cache-dir", help=f"network output cache (default: {default_cache_dir()})"
    )
    e.add_argument(
        "--device",
        default="auto",
        help="auto (GPU when present), cpu or cuda[:N] (default: auto)",
    )
    e.add_argument(
        "--threads",
        type=int,
        help="CPU threads for training (default: all CPUs available; on a machine busy with other "
        "work, 1 thread is often faster: idle-spinning threads wait on descheduled peers)",
    )
    e.add_argument(
        "--chunk",
        type=int,
        help="networks trained together in one batch (default: 10 on CPU, 100 on a GPU)",
    )
    e.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    e.add_argument("--quiet", action="store_true", help="no progress bars")
    e.set_defaults(func=_cmd_ensembles)


def _cmd_ensembles(args: argparse.Namespace) -> int:
    from .ensembles import ExperimentConfig
    from .run import run_experiment
    from .report import format_report

    methods = None
    if args.methods is not None:
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
        if not methods:
            raise ParameterError(
                "--methods is empty; give comma-separated method names, e.g. --methods "
                "hist,kde-mon2"
            )
    cfg = ExperimentConfig.for_regime(
        args.data_dir,
        args.regime,
        n_networks=args.networks,
        n_ensembles=args.ensembles,
        ensemble_size=args.ensemble_size,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        precision=args.precision,
        n_test1=args.test1_size,
        train_size=args.train_size,
        seed=args.seed,
        methods=methods,
        n_bins=args.bins,
        combine=args.combine,
    )
    out = Path(args.out or f"topcal-experiment-{args.regime}")
    res = run_experiment(
        cfg,
        out,
        cache_root=args.cache_dir or default_cache_dir(),
        device=args.device,
        threads=args.threads,
        chunk=args.chunk,
        figures=not args.no_figures,
        progress=not args.quiet,
    )
    print(format_report(res))
    return 0
