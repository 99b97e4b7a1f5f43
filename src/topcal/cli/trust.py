"""Commands that say which predictions can be acted on: ``threshold``.

Thin: read the model and the held-out labelled data, call
:func:`topcal.thresholds.core.fit_thresholds` (or, with ``--fit``, read one labelled file
and call :func:`topcal.thresholds.split.fit_and_threshold`), write the thresholds file (and
the model) and print the per-class table.
"""

from __future__ import annotations

import argparse

from .common import (
    UsageError,
    add_data_options,
    add_repeated,
    format_table,
    parse_param,
    read_options,
)

__all__ = ["add_commands"]


def add_commands(sub) -> None:
    """Add ``threshold`` to the ``topcal`` subparsers."""
    p = sub.add_parser(
        "threshold",
        help="per-class cut-offs on the calibrated confidence whose accepted predictions "
        "have precision >= a target with probability >= 1 - delta (Learn-then-Test)",
    )
    p.add_argument(
        "data",
        help="held-out labelled data (not the rows the model was fitted on): CSV, Parquet or "
        ".npz; with --fit, one labelled file that is split into the two parts",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="M", help="model file from 'topcal fit'")
    which.add_argument(
        "--fit",
        metavar="METHOD",
        help="fit a calibrator of this method on part of DATA and choose the cut-offs on the "
        "rest (disjoint rows, split per predicted class; recommended); needs --model-out",
    )
    split = p.add_argument_group("with --fit")
    split.add_argument(
        "--fit-fraction",
        type=float,
        default=None,
        metavar="F",
        help="share of each predicted class's rows that fits the calibrator, in (0, 1) "
        "(default 0.5)",
    )
    split.add_argument(
        "--seed", type=int, default=None, help="the split's random seed, >= 0 (default 0)"
    )
    split.add_argument("--model-out", metavar="M", help="model file to write (.json)")
    add_repeated(
        split, "--param", "NAME=VALUE", "a parameter of the --fit method (repeatable)"
    )
    p.add_argument(
        "--precision",
        type=float,
        default=0.95,
        help="target precision, in (0, 1) (default 0.95)",
    )
    p.add_argument(
        "--delta",
        type=float,
        default=0.05,
        help="the guarantee fails with probability at most delta, in (0, 1) (default 0.05)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--per-class",
        dest="mode",
        action="store_const",
        const="per-class",
        help="accept by each predicted class's own cut-off, and one shared cut-off for the "
        "classes too small to show the target alone (default)",
    )
    g.add_argument(
        "--global",
        dest="mode",
        action="store_const",
        const="global",
        help="accept by one cut-off for all classes",
    )
    p.add_argument(
        "--bonferroni",
        action="store_true",
        help="test each class at delta/K so that all classes' statements hold together "
        "(default: each class's at delta)",
    )
    p.add_argument(
        "--pool-below",
        metavar="N",
        default=None,
        type=_pool_below,
        help="classes with fewer than N predictions share one cut-off (default auto: 4 x the "
        "fewest a class's test can use; 0: every class alone)",
    )
    p.add_argument("-o", "--output", required=True, help="thresholds file to write (.json)")
    add_data_options(p)
    p.set_defaults(func=_cmd_threshold, mode="per-class")


def _pool_below(text: str):
    from ..thresholds.core import POOL_AUTO

    if text == POOL_AUTO:
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(
            f"must be 'auto' or a number of predictions >= 0, got {text!r}"
        )
    return value


def _settings(args) -> dict:
    return dict(
        mode=args.mode,
        multiplicity="bonferroni" if args.bonferroni else "per-class",
        **({} if args.pool_below is None else {"pool_below": args.pool_below}),
    )


def _fit_and_threshold(args):
    """``threshold DATA --fit METHOD``: split, fit, choose; write the model and the
    thresholds."""
    from .._fileio import check_output
    from ..calibrators import calibrator
    from ..io import read_data
    from ..thresholds.core import fit_and_threshold

    if not args.model_out:
        raise UsageError("--fit needs --model-out M: the model file the thresholds belong to")
    check_output(args.output, [args.data], "thresholds file")
    check_output(args.model_out, [args.data], "model file")
    if _same_path(args.model_out, args.output):
        raise UsageError(
            f"--model-out and -o are one file ({args.model_out!r}); give the model and the "
            "thresholds two paths"
        )
    cal = calibrator(args.fit, **dict(parse_param(t) for t in args.param))
    data = read_data(args.data, **read_options(args))
    model, th = fit_and_threshold(
        data,
        cal,
        args.precision,
        args.delta,
        fit_fraction=0.5 if args.fit_fraction is None else args.fit_fraction,
        seed=0 if args.seed is None else args.seed,
        **_settings(args),
    )
    model.save(args.model_out)
    th.save(args.output)
    s = th.split
    print(
        f"fitted {args.fit} on {s.n_fit} of {s.n_fit + s.n_cutoff} rows (fraction "
        f"{s.fraction:.6g} of each predicted class, seed {s.seed}) -> {args.model_out}; "
        f"cut-offs chosen on the other {s.n_cutoff}"
    )
    return th


def _same_path(a: str, b: str) -> bool:
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _cmd_threshold(args) -> int:
    from .._fileio import check_output
    from ..io import read_data
    from ..persist import load
    from ..stream import model_read_options
    from ..thresholds.core import fit_thresholds

    if args.fit is None:
        given = {
            "--fit-fraction": args.fit_fraction,
            "--seed": args.seed,
            "--model-out": args.model_out,
            "--param": args.param or None,
        }
        used = [o for o, v in given.items() if v is not None]
        if used:
            raise UsageError(f"{used[0]} goes with --fit METHOD, not with --model")
        check_output(args.output, [args.data, args.model], "thresholds file")
        model = load(args.model)
        data = read_data(
            args.data,
            **model_read_options(model, args.data, read_options(args), model_classes=True),
        )
        th = fit_thresholds(model, data, args.precision, args.delta, **_settings(args))
        th.save(args.output)
    else:
        th = _fit_and_threshold(args)
    print(
        f"precision >= {th.precision:.12g} with probability >= {1 - th.delta:.12g} "
        f"({th.mode}) on {th.n_samples:g} held-out samples -> {args.output}"
    )
    print(th.statements())
    header = ["class", "cut-off", "accepted", "predicted", "precision", "lower bound"]
    if th.mode == "global":  # the per-class rows and their reasons do not apply
        row = th.table()[-1]
        print(format_table(header, [row[:6]]))
        if row[6]:
            print(f"{row[0]}: no cut-off: {row[6]}")
        return 0
    rows = th.table()
    tail = rows[-2:] if th.shared is not None else rows[-1:]
    shown = rows[: min(30, len(rows) - len(tail))] + tail
    print(format_table(header, [r[:6] for r in shown]))
    reasons = [r for r in shown if r[6]]
    for r in reasons[:10]:
        print(f"{r[0]}: no cut-off: {r[6]}")
    if len(reasons) > 10:
        print(f"... {len(reasons) - 10} more classes without a cut-off")
    if len(rows) > len(shown):
        print(f"... {len(rows) - len(shown)} more classes in {args.output}")
    accepted = sum(c.n_accepted for c in th.per_class)
    print(
        f"accepted by the cut-offs in use: {accepted:g} of {th.n_samples:g} held-out "
        f"predictions ({accepted / th.n_samples:.1%}); --global would accept "
        f"{th.overall.n_accepted:g}"
    )
    return 0
