"""The ``topcal report`` and ``topcal compare`` commands (thin: parse, read, call, write).

Registered through ``topcal.cli._EXTENSIONS``. Progress lines go to stderr,
results to stdout.
"""

from __future__ import annotations

import csv
import json
import sys
import time

import numpy as np

from .errors import TopcalError

__all__ = ["add_commands", "overall_table", "per_class_table", "comparison_rows"]


#: The report's warnings printed on stderr (all of them are on the page): thousands of classes
#: give thousands of per-class findings.
MAX_PRINTED_FINDINGS = 30


def _progress():
    t0 = time.perf_counter()

    def emit(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    return emit


def _methods(text: str | None):
    if text is None:
        return None
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise TopcalError("--methods is empty; give method names separated by commas, e.g. --methods hist,kde-mon2")
    from .calibrators import get_class

    for n in names:
        get_class(n)  # unknown names fail here, with the list of options
    return names


def method_params(texts) -> dict:
    """``--param METHOD:NAME=VALUE`` options as ``{method: {name: value}}``."""
    from .cli import _parse_param

    out: dict = {}
    for text in texts or []:
        method, sep, rest = text.partition(":")
        if not sep or not method.strip() or "=" not in rest:
            raise TopcalError(f"--param {text!r} must look like METHOD:NAME=VALUE, e.g. --param btswa:max_iter=500")
        key, value = _parse_param(rest)
        out.setdefault(method.strip(), {})[key] = value
    return out


def _protocol_options(p, what: str) -> None:
    p.add_argument("--folds", type=int, default=5, metavar="K",
                   help=f"{what} by K-fold cross-fitting within DATA, out of sample (default 5)")
    p.add_argument("--in-sample", action="store_true",
                   help="instead fit and evaluate on the same data (the paper's practice; optimistic for flexible methods)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fold split (default 0)")
    p.add_argument("--param", action="append", default=[], metavar="METHOD:NAME=VALUE",
                   help="method parameter, repeatable (e.g. --param btswa:max_iter=500, --param hist:shrinkage=0)")


def add_commands(sub) -> None:
    """Add ``report`` and ``compare`` to the ``topcal`` subparsers."""
    from .cli import _add_data_options

    p = sub.add_parser("report", help="write the visual check (figures, metrics, warnings) as DIR/index.html")
    p.add_argument("data", help="labelled data: CSV, Parquet or .npz")
    p.add_argument("--eval", metavar="DATA2", help="a second labelled test set to evaluate the fits on")
    p.add_argument("--methods", metavar="M1,M2,...", help="methods to fit (default: all that can run on the data)")
    p.add_argument("--add", metavar="EXTRA", help="extra labelled samples: show the curves before and after adding them")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="folder to write index.html and figures/ into: new, empty or made by topcal (it is replaced)")
    p.add_argument("--force", action="store_true",
                   help="write into DIR even if it holds other files (they are kept; index.html and figures/ are replaced)")
    p.add_argument("--dpi", type=int, default=90, help="resolution of the figures (default 90)")
    _protocol_options(p, "rank methods")
    p.add_argument("--adapted", metavar="MODEL", help="a model from 'topcal adapt': add the label-shift panel")
    _add_data_options(p)
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("compare", help="compare methods out of sample: K-fold cross-fitting (default 5), or --eval DATA2")
    p.add_argument("data", help="labelled data to fit on")
    p.add_argument("--eval", metavar="DATA2", help="evaluate on this second labelled test set instead of K folds")
    _protocol_options(p, "evaluate")
    p.add_argument("--methods", metavar="M1,M2,...", help="methods to compare (default: all that can run)")
    p.add_argument("--bins", type=int, default=10, help="bins for ECE (default 10)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the full result as JSON")
    fmt.add_argument("--csv", action="store_true", help="print long-format CSV: method,metric,class,value")
    _add_data_options(p)
    p.set_defaults(func=_cmd_compare)


def _read(path, args):
    from . import read_data
    from .cli import _read_options

    return read_data(path, **_read_options(args))


def _cmd_report(args) -> int:
    from pathlib import Path

    from .report import build_report

    if args.dpi < 30 or args.dpi > 600:
        raise TopcalError(f"--dpi must be between 30 and 600, got {args.dpi}")
    from ._fileio import check_output

    for path in (args.data, args.eval, args.add):
        check_output(args.output, [path], "report folder")
    data = _read(args.data, args)
    eval_data = _read(args.eval, args) if args.eval else None
    extra = _read(args.add, args) if args.add else None
    adapted = None
    if args.adapted:
        from .labelshift import AdaptedCalibrator
        from .persist import load

        adapted = load(args.adapted)
        if not isinstance(adapted, AdaptedCalibrator):
            raise TopcalError(f"--adapted {args.adapted!r} is a plain {adapted.name!r} model; make one with 'topcal adapt'")
    res = build_report(data, args.output, eval_data=eval_data, methods=_methods(args.methods), extra=extra,
                       data_label=Path(args.data).name, dpi=args.dpi, progress=_progress(),
                       folds=None if args.in_sample else args.folds, seed=args.seed, params=method_params(args.param),
                       force=args.force, adapted=adapted)
    print(f"report: {res.path}")
    for f in res.findings[:MAX_PRINTED_FINDINGS]:
        print(f"  warning: {f.text}", file=sys.stderr)
    if len(res.findings) > MAX_PRINTED_FINDINGS:
        print(f"  ... and {len(res.findings) - MAX_PRINTED_FINDINGS} more warnings: see the report's Warnings section",
              file=sys.stderr)
    return 0


def comparison_rows(result: dict) -> list[tuple[str, str, str, float | None]]:
    """Long-format rows (method, metric, class, value); class "overall" for the overall value."""
    rows = []
    for m, metrics in result["methods"].items():
        for metric, v in metrics.items():
            rows.append((m, metric, "overall", v["overall"]))
            for c, x in v["per_class"].items():
                rows.append((m, metric, c, x))
    return rows


def overall_table(result: dict) -> str:
    """Methods as rows, overall NLL/Brier/ECE1/ECE2 as columns (best marked *)."""
    from .cli import format_table
    from .evaluate import METRICS

    methods = list(result["methods"])
    best = {x: min(result["methods"][m][x]["overall"] for m in methods) for x in METRICS}
    rows = [[m] + [result["methods"][m][x]["overall"] for x in METRICS] for m in methods]
    text = format_table(["method"] + [x.upper() for x in METRICS], rows)
    lines = text.splitlines()
    for i, m in enumerate(methods):
        marks = [x.upper() for x in METRICS if np.isclose(result["methods"][m][x]["overall"], best[x], rtol=1e-9)]
        if marks:
            lines[i + 2] += "   best " + ",".join(marks)
    return "\n".join(lines)


def per_class_table(result: dict, metric: str = "nll") -> str:
    """Classes as rows, methods as columns."""
    from .cli import format_table

    methods = list(result["methods"])
    classes = list(result["methods"][methods[0]][metric]["per_class"])
    rows = [[c] + [result["methods"][m][metric]["per_class"][c] for m in methods] for c in classes]
    rows.append(["overall"] + [result["methods"][m][metric]["overall"] for m in methods])
    return format_table(["class"] + methods, rows)


_PROTOCOL_TEXT = {
    "same": "fitted and evaluated on the same data (the paper's practice; optimistic for flexible methods)",
    "holdout": "fitted on DATA, evaluated on the second test set",
    "kfold": "{folds}-fold cross-fitting within DATA (stratified by predicted class)",
}


def _cmd_compare(args) -> int:
    from .evaluate import compare_methods

    from ._params import MAX_BINS

    if not 1 <= args.bins <= MAX_BINS:
        raise TopcalError(f"--bins must be between 1 and {MAX_BINS}, got {args.bins}")
    if args.seed < 0:
        raise TopcalError(f"--seed must be >= 0, got {args.seed}")
    data = _read(args.data, args)
    eval_data = _read(args.eval, args) if args.eval else None
    if eval_data is not None:
        from .report import align_classes

        eval_data = align_classes(eval_data, data, "the second test set (--eval)")
    quiet = args.json or args.csv
    folds = None if (args.in_sample or eval_data is not None) else args.folds
    if args.in_sample and eval_data is not None:
        raise TopcalError("--in-sample and --eval exclude each other: --eval already evaluates on a second test set")
    res = compare_methods(data, _methods(args.methods), eval_data=eval_data, folds=folds, seed=args.seed,
                          n_bins=args.bins, params=method_params(args.param), progress=None if quiet else _progress())
    for name, msg in res["failed"].items():
        print(f"warning: {name} failed and is left out: {msg}", file=sys.stderr)
    if quiet:
        for name, msgs in res["warnings"].items():
            for msg in msgs:
                print(f"warning: {msg}", file=sys.stderr)
    if not res["methods"]:
        raise TopcalError("none of the methods can run on this data (they need full score vectors); "
                          "choose score-based methods such as hist, kde-mon2")
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["method", "metric", "class", "value"])
        for m, metric, c, v in comparison_rows(res):
            w.writerow([m, metric, c, "" if v is None else repr(float(v))])
        return 0
    print("protocol: " + _PROTOCOL_TEXT[res["protocol"]].format(folds=res["folds"]))
    print(overall_table(res))
    print("\nper-class NLL")
    print(per_class_table(res, "nll"))
    if res["skipped"]:
        print("\nnot run (need full score vectors): " + ", ".join(res["skipped"]))
    if res["failed"]:
        print("\nfailed (left out): " + "; ".join(f"{n}: {m}" for n, m in res["failed"].items()))
    notes = [m for msgs in res["warnings"].values() for m in msgs]
    if notes:
        print(f"\nwarnings ({len(notes)}):")
        for m in notes:
            print(f"  - {m}")
    return 0
