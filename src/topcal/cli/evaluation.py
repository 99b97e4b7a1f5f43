"""Commands that score methods on labelled data: ``metrics``, ``compare``, ``report``,
``demo``.

Thin: parse, read, call the library (:mod:`topcal.evaluate`, :mod:`topcal.report`), print.
Progress lines go to stderr, results to stdout.
"""

from __future__ import annotations

import csv
import json
import sys

from .._tables import csv_text, printable
from ..errors import TopcalError
from .scoring import overall_lines, ranking_table, wrap_line
from .common import (
    add_data_options,
    add_repeated,
    choice_table,
    format_table,
    overall_table,
    parse_param,
    per_class_table,
    progress,
    read,
    similar_once,
)

__all__ = ["add_commands", "method_params"]


#: Lines of the report's warnings printed on stderr (all of them are on the page); a kind
#: that repeats over classes is already one line.
MAX_PRINTED_FINDINGS = 30


def _methods(text: str | None, allow_all: bool = False):
    if text is None:
        return None
    if allow_all and text.strip() == "all":
        from ..report import ALL

        return ALL
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise TopcalError(
            "--methods is empty; give method names separated by commas, e.g. --methods "
            "hist,kde-mon2"
        )
    from ..calibrators import get_class

    for n in names:
        get_class(n)  # unknown names fail here, with the list of options
    return names


def method_params(texts) -> dict:
    """``--param METHOD:NAME=VALUE`` options as ``{method: {name: value}}``."""
    out: dict = {}
    for text in texts or []:
        method, sep, rest = text.partition(":")
        if not sep or not method.strip() or "=" not in rest:
            raise TopcalError(
                f"--param {text!r} must look like METHOD:NAME=VALUE, e.g. --param "
                f"btswa:max_iter=500"
            )
        key, value = parse_param(rest)
        out.setdefault(method.strip(), {})[key] = value
    return out


def _force_option(p) -> None:
    """``--force`` of the commands that write a report folder (report, demo)."""
    p.add_argument(
        "--force",
        action="store_true",
        help="write into DIR even if it holds other files (they are kept; index.html and figures/ "
        "are replaced)",
    )


def _protocol_options(p, what: str) -> None:
    p.add_argument(
        "--folds",
        type=int,
        default=None,
        metavar="K",
        help=f"{what} by K-fold cross-fitting within DATA, out of sample (default 5)",
    )
    p.add_argument(
        "--in-sample",
        action="store_true",
        help="instead fit and evaluate on the same data (the paper's practice; optimistic for "
        "flexible methods)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fold split (default 0)")
    add_repeated(
        p,
        "--param",
        "METHOD:NAME=VALUE",
        "method parameter, repeatable (e.g. --param btswa:max_iter=500, --param "
        "hist:shrinkage=0)",
    )


def _folds(args, eval_given: bool = False) -> int | None:
    """The K of K-fold cross-fitting (default 5), or None for --in-sample / --eval; --folds
    with either is an error."""
    if args.folds is not None and (args.in_sample or eval_given):
        other = (
            "--in-sample fits and evaluates on the same data"
            if args.in_sample
            else "--eval evaluates on the second test set"
        )
        raise TopcalError(
            f"--folds is for K-fold cross-fitting within DATA, but {other}; drop one of them"
        )
    if args.in_sample or eval_given:
        return None
    return 5 if args.folds is None else args.folds


def add_commands(sub) -> None:
    """Add ``metrics``, ``report``, ``compare`` and ``demo`` to the ``topcal`` subparsers."""
    p = sub.add_parser(
        "metrics",
        help="overall NLL, Brier and calibration errors with 90%% intervals; per class on request",
    )
    p.add_argument("data", help="labelled data")
    p.add_argument(
        "--model",
        help="model to evaluate (default: the uncalibrated score); adds its improvement over "
        "the uncalibrated score",
    )
    p.add_argument(
        "--reference",
        metavar="M2.json",
        help="with --model: give the improvement over this model instead of the uncalibrated score",
    )
    p.add_argument(
        "--bins", type=int, default=10, help="bins per class of ece_top_label (default 10)"
    )
    p.add_argument(
        "--level", type=float, default=0.9, help="level of the intervals (default 0.9)"
    )
    p.add_argument(
        "--resamples",
        type=int,
        default=1000,
        help="bootstrap resamples of the calibration errors (default 1000)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the bootstrap and of the folds (default 0)",
    )
    p.add_argument(
        "--classes",
        action="append",
        metavar="SPEC",
        help="also print the per-class table for these classes, repeatable: a class name, "
        "worst:N (largest share of the top-label ECE), most:N (most predictions), or several "
        "separated by commas",
    )
    p.add_argument(
        "--full", action="store_true", help="also print the per-class table in full"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON: overall {metric: {value, lo, hi}}, counts, and every class",
    )
    add_data_options(p)
    p.set_defaults(func=_cmd_metrics)

    p = sub.add_parser(
        "report", help="write the visual check (figures, metrics, warnings) as DIR/index.html"
    )
    p.add_argument("data", help="labelled data: CSV, Parquet or .npz")
    p.add_argument(
        "--eval", metavar="DATA2", help="a second labelled test set to evaluate the fits on"
    )
    p.add_argument(
        "--methods",
        metavar="M1,M2,...",
        help="methods to fit, each cross-fitted; 'all': every method that can run on the data "
        "(auto nested: slow at many classes). Default: auto on all the data, its "
        "candidates' out-of-sample table from its own cross-validation, the uncalibrated "
        "baseline and auto's two best other candidates",
    )
    p.add_argument(
        "--classes",
        action="append",
        metavar="SPEC",
        help="classes the per-class figures show, repeatable: a class name, worst:N (the model in "
        "use's largest total out-of-sample NLL excess over the uncalibrated score), "
        "most:N (the most predictions), or several separated by commas (default: every "
        "class up to 24, else most:24)",
    )
    p.add_argument(
        "--add",
        metavar="EXTRA",
        help="extra labelled samples: show the curves before and after adding them",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DIR",
        help="folder to write index.html and figures/ into: new, empty or made by topcal (it is "
        "replaced)",
    )
    _force_option(p)
    p.add_argument(
        "--dpi", type=int, default=90, help="resolution of the figures (default 90)"
    )
    _protocol_options(p, "rank methods")
    p.add_argument(
        "--adapted",
        metavar="MODEL",
        help="a model from 'topcal adapt': add the label-shift panel",
    )
    p.add_argument(
        "--thresholds",
        metavar="T.json",
        help="cut-offs from 'topcal threshold' (with --model, the model "
        "they were chosen for): add the acceptance panel (accepted fraction against "
        "precision per class)",
    )
    p.add_argument("--model", metavar="M.json", help="the model of --thresholds")
    add_data_options(p)
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser(
        "compare",
        help="compare methods out of sample: K-fold cross-fitting (default 5), or --eval DATA2",
    )
    p.add_argument("data", help="labelled data to fit on")
    p.add_argument(
        "--eval",
        metavar="DATA2",
        help="evaluate on this second labelled test set instead of K folds",
    )
    _protocol_options(p, "evaluate")
    p.add_argument(
        "--methods", metavar="M1,M2,...", help="methods to compare (default: all that can run)"
    )
    p.add_argument("--bins", type=int, default=10, help="bins for ECE (default 10)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the full result as JSON")
    fmt.add_argument(
        "--csv", action="store_true", help="print long-format CSV: method,metric,class,value"
    )
    add_data_options(p)
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser(
        "demo", help="the visual-check report for the embedded PhANNs data, plus a short table"
    )
    p.add_argument(
        "-o",
        "--output",
        default="topcal-demo-report",
        metavar="DIR",
        help="folder for index.html and figures/ (default: ./topcal-demo-report); it must be new, "
        "empty or made by topcal",
    )
    _force_option(p)
    p.set_defaults(func=_cmd_demo)


def _cmd_metrics(args) -> int:
    from ..calibrators import calibrator
    from ..calibrators.registry import BASELINE
    from ..overall import CLASS_COLUMNS, overall_metrics, per_class, pick_classes
    from ..persist import load

    _check_metrics_options(args)
    data = read(args.data, args)
    data.require_labels(
        "metrics (NLL, Brier and ECE compare confidences with the true classes)"
    )
    base = calibrator(BASELINE).fit(data)
    model = load(args.model) if args.model else base
    ref = load(args.reference) if args.reference else base
    conf = model.predict(data)
    table = per_class(data, conf, n_bins=args.bins)
    chosen = pick_classes(data, table, args.classes) if args.classes else None
    res = overall_metrics(
        data,
        conf,
        reference=ref.predict(data) if args.model else None,
        level=args.level,
        resamples=args.resamples,
        seed=args.seed,
        n_bins=args.bins,
    )
    tp, fp = data.class_counts()
    counts = {"tp": float(tp.sum()), "fp": float(fp.sum())}
    counts["conf1"] = counts["tp"] / (counts["tp"] + counts["fp"])
    vector = _vector_metrics(model, data, args) if data.has_full else None
    if args.json:
        out = {
            "method": model.name,
            "reference": ref.name if args.model else None,
            "level": args.level,
            "resamples": args.resamples,
            "seed": args.seed,
            "counts": counts,
            "overall": {name: e.to_dict() for name, e in res.items()},
            "classes": table,
        }
        if vector is not None:
            out["vector"] = {**vector, "classwise_ece": vector["classwise_ece"].to_dict()}
        print(json.dumps(out, indent=1, allow_nan=False))
        return 0
    what = "uncalibrated score" if model is base else f"{model.name} ({args.model})"
    print(printable(f"method: {what}"))
    if args.reference:
        print(printable(f"improvements over: {ref.name} ({args.reference})"))
    print(
        f"{counts['tp'] + counts['fp']:g} samples, {data.n_classes} classes, accuracy "
        f"{counts['conf1']:.4f}; {args.level:.0%} intervals"
    )
    print(overall_lines(res, args.level))
    if vector is not None:
        print(_vector_line(vector))
    if args.full or chosen:
        names = list(table) if args.full else chosen
        cols = list(CLASS_COLUMNS)
        print("\nper class" + ("" if args.full else f" ({len(names)} of {data.n_classes})"))
        print(
            format_table(["class"] + cols, [[c] + [table[c][k] for k in cols] for c in names])
        )
    else:
        print(
            "\nper class: --classes worst:N|most:N|NAME or --full (definitions: docs/metrics.md)"
        )
    return 0


def _check_metrics_options(args) -> None:
    from .._params import MAX_BINS

    if not 1 <= args.bins <= MAX_BINS:
        raise TopcalError(f"--bins must be between 1 and {MAX_BINS}, got {args.bins}")
    if not 0 < args.level < 1:
        raise TopcalError(f"--level must be between 0 and 1 (e.g. 0.9), got {args.level}")
    if not 10 <= args.resamples <= 100_000:
        raise TopcalError(f"--resamples must be between 10 and 100000, got {args.resamples}")
    if args.seed < 0:
        raise TopcalError(f"--seed must be >= 0, got {args.seed}")
    if args.full and args.classes:
        raise TopcalError(
            "--full prints every class; --classes chooses some: give one of them"
        )
    if args.reference and not args.model:
        raise TopcalError("--reference is what --model is compared with: give --model too")


def _vector_metrics(model, data, args) -> dict:
    """The calibrated vector's own scores (``predict_proba``): NLL, Brier, class-wise ECE."""
    from ..metrics import vector_brier, vector_nll
    from ..overall import classwise_ece

    proba = model.predict_proba(data)
    vector: dict = {"nll": vector_nll(data, proba).overall}
    vector["brier"] = vector_brier(data, proba).overall
    vector["classwise_ece"] = classwise_ece(
        data, proba, level=args.level, resamples=args.resamples, seed=args.seed
    )
    return vector


def _vector_line(vector: dict) -> str:
    nll, brier, cw = vector["nll"], vector["brier"], vector["classwise_ece"]
    span = "" if cw.lo is None else f" [{cw.lo:.4f}, {cw.hi:.4f}]"
    return (
        f"full vector (predict_proba): NLL {nll:.4f}, Brier {brier:.4f}, "
        f"class-wise ECE {cw.value:.4f}{span}"
    )


def _cmd_report(args) -> int:
    from pathlib import Path

    from ..report import build_report

    if args.dpi < 30 or args.dpi > 600:
        raise TopcalError(f"--dpi must be between 30 and 600, got {args.dpi}")
    from .._fileio import check_output

    for path in (args.data, args.eval, args.add, args.thresholds, args.model):
        check_output(args.output, [path], "report folder")
    if (args.thresholds is None) != (args.model is None):
        raise TopcalError(
            "--thresholds and --model go together: the thresholds file and the model it "
            "was chosen for"
        )
    acceptance = None
    if args.thresholds:
        from ..persist import load
        from ..thresholds.core import load_thresholds

        acceptance = (load(args.model), load_thresholds(args.thresholds))
    data = read(args.data, args)
    eval_data = read(args.eval, args) if args.eval else None
    extra = read(args.add, args) if args.add else None
    adapted = None
    if args.adapted:
        from ..labelshift import AdaptedCalibrator
        from ..persist import load

        adapted = load(args.adapted)
        if not isinstance(adapted, AdaptedCalibrator):
            raise TopcalError(
                f"--adapted {args.adapted!r} is a plain {adapted.name!r} model; make one with "
                f"'topcal adapt'"
            )
    res = build_report(
        data,
        args.output,
        eval_data=eval_data,
        methods=_methods(args.methods, allow_all=True),
        extra=extra,
        data_label=Path(args.data).name,
        dpi=args.dpi,
        progress=progress(),
        folds=_folds(args),
        seed=args.seed,
        params=method_params(args.param),
        force=args.force,
        adapted=adapted,
        thresholds=acceptance,
        classes=args.classes,
    )
    print(f"report: {res.path}")
    for line in _finding_lines(res.findings, res.focus):
        print(f"  warning: {printable(line)}", file=sys.stderr)
    return 0


def _finding_lines(findings, focus=None) -> list:
    """The report's warnings for the console: those about the model in use ``focus`` and the
    data first, then one line for those about the other methods; a kind that repeats (over
    many classes) is one line."""
    from ..report import FindingGroup, group_findings
    from ..report.page import about

    mine, other = about(findings, focus)
    lines = [
        g.summary() if isinstance(g, FindingGroup) else g.text for g in group_findings(mine)
    ]
    if other:
        names = ", ".join(dict.fromkeys(f.method for f in other))
        lines.append(
            f"{len(other)} more about the other methods ({names}): the report's Warnings "
            "section"
        )
    if len(lines) > MAX_PRINTED_FINDINGS:
        lines = lines[:MAX_PRINTED_FINDINGS] + [
            f"... and {len(lines) - MAX_PRINTED_FINDINGS} more: see the report's Warnings "
            "section"
        ]
    return lines


_PROTOCOL_TEXT = {
    "same": "fitted and evaluated on the same data (the paper's practice; optimistic for flexible "
    "methods)",
    "holdout": "fitted on DATA, evaluated on the second test set",
    "kfold": "{folds}-fold cross-fitting within DATA (stratified by predicted class)",
}


#: The per-class NLL table of ``compare`` shows this many methods (the best ranked): 100
#: columns.
MAX_CLASS_TABLE_METHODS = 6


def _cmd_compare(args) -> int:
    from ..evaluate import compare_methods, comparison_rows

    from .._params import MAX_BINS

    if not 1 <= args.bins <= MAX_BINS:
        raise TopcalError(f"--bins must be between 1 and {MAX_BINS}, got {args.bins}")
    if args.seed < 0:
        raise TopcalError(f"--seed must be >= 0, got {args.seed}")
    data = read(args.data, args)
    eval_data = read(args.eval, args) if args.eval else None
    if eval_data is not None:
        from ..report import align_classes

        eval_data = align_classes(eval_data, data, "the second test set (--eval)")
    quiet = args.json or args.csv
    if args.in_sample and eval_data is not None:
        raise TopcalError(
            "--in-sample and --eval exclude each other: --eval already evaluates on a "
            "second test set"
        )
    folds = _folds(args, eval_data is not None)
    res = compare_methods(
        data,
        _methods(args.methods),
        eval_data=eval_data,
        folds=folds,
        seed=args.seed,
        n_bins=args.bins,
        params=method_params(args.param),
        progress=None if quiet else progress(),
    )
    for name, msg in res.failed.items():
        print(printable(f"warning: {name} failed and is left out: {msg}"), file=sys.stderr)
    if quiet:
        for name, msgs in res.warnings.items():
            for msg in msgs:
                print(f"warning: {printable(msg)}", file=sys.stderr)
    if not res.methods:
        raise TopcalError(
            "none of the methods can run on this data (they need full score vectors); "
            "choose score-based methods such as hist, kde-mon2"
        )
    if args.json:
        print(json.dumps(res.to_dict(), indent=1))
        return 0
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["method", "metric", "class", "value"])
        for m, metric, c, v in comparison_rows(res):
            w.writerow([m, metric, csv_text(str(c)), "" if v is None else repr(float(v))])
        return 0
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        _compare_text(res, data)
    for line in text.getvalue().splitlines():
        print(wrap_line(line))
    return 0


def _compare_text(res, data) -> None:
    """``compare``'s text output: the ranking, the metrics, per-class NLL, auto's choices,
    notes."""
    from ..comparison import Comparison

    print("protocol: " + _PROTOCOL_TEXT[res.protocol].format(folds=res.folds))
    print(ranking_table(res.ranking))
    print()
    print(overall_table(res))
    shown = list(res.ranking)[:MAX_CLASS_TABLE_METHODS] or list(res.methods)
    print(
        "\nper-class NLL"
        + (
            f" (the {len(shown)} best-ranked methods; --json or --csv: all)"
            if len(shown) < len(res.methods)
            else ""
        )
    )
    tp, fp = data.class_counts()
    part = Comparison.of({"methods": {m: res.methods[m] for m in shown}})
    print(per_class_table(part, "nll", sizes=tp + fp))
    for name, fits in res.choices.items():
        more = f" (fold 1 of {len(fits)}; --json: every fold)" if len(fits) > 1 else ""
        print(f"\n{name}: {fits[0]['rule']}{more}")
        print(choice_table(fits[:1]))
    if res.skipped:
        print("\nnot run (need full score vectors): " + ", ".join(res.skipped))
    if res.failed:
        print("\nfailed (left out): " + "; ".join(f"{n}: {m}" for n, m in res.failed.items()))
    notes = [m for msgs in res.warnings.values() for m in msgs]
    if notes:
        print(f"\nwarnings ({len(notes)}):")
        for m in similar_once(notes):
            print(f"  - {m}")


def _cmd_demo(args) -> int:
    from ..datasets import load_phanns
    from ..report import ALL, build_report

    data = load_phanns()
    print(
        f"PhANNs test set (embedded): {data.n_samples:g} samples, {data.n_classes} "
        "classes, scores 0-10"
    )
    res = build_report(
        data,
        args.output,
        title="topcal demo: PhANNs test set",
        data_label="PhANNs test set (embedded)",
        methods=ALL,  # the paper's showcase: every method and figure
        progress=progress(),
        force=args.force,
    )
    for metric in ("nll", "ece1"):
        print(
            f"\nper-class {metric.upper()} ({res.comparison.folds}-fold cross-fitted: "
            "every sample scored by a model fitted without it)"
        )
        print(per_class_table(res.comparison, metric, sizes=sum(data.class_counts())))
    print(
        "\noverall (out of sample; `topcal report --in-sample` gives the paper's "
        "fitted-on-itself numbers)"
    )
    print(overall_table(res.comparison))
    from ..calibrators import available_methods
    from ..report import default_methods

    left_out = [m for m in available_methods() if m not in default_methods(data)]
    if left_out:
        print(
            "\nnot run (need the full score vector, which the PhANNs counts lack): "
            + ", ".join(left_out)
        )
    if res.findings:
        print(f"\nwarnings ({len(res.findings)}):")
        for line in _finding_lines(res.findings):
            print(f"  - {line}")
    print(f"\nreport (look at every figure before trusting a method): {res.path.resolve()}")
    return 0
