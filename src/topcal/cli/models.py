"""Commands on model files: ``fit``, ``update``, ``apply``, ``describe``, ``adapt``,
``methods``."""

from __future__ import annotations

import json

from .._fileio import check_output
from ..errors import TopcalError
from .common import (
    RowProgress,
    add_data_options,
    add_repeated,
    add_scale_options,
    engine_for,
    format_table,
    parse_param,
    read_options,
    rows_hint,
)

__all__ = ["add_commands"]


def add_commands(sub) -> None:
    """Add ``fit``, ``update``, ``apply``, ``describe``, ``methods`` and ``adapt`` to the
    ``topcal`` subparsers."""
    from ..calibrators import available_methods

    methods = ", ".join(available_methods())
    p = sub.add_parser("fit", help="fit a calibrator and save it as JSON")
    p.add_argument("data", help="labelled data: CSV, Parquet or .npz")
    p.add_argument(
        "--method",
        default="auto",
        help="calibration method (default: auto, the simplest candidate "
        "within noise of the smallest 5-fold cross-validated NLL, or its blend with the "
        f"two best others where that clearly wins out of fold). Options: {methods}",
    )
    add_repeated(
        p, "--param", "NAME=VALUE", "method parameter, repeatable (e.g. --param n_bins=20)"
    )
    p.add_argument("-o", "--output", required=True, help="model file to write (.json)")
    add_data_options(p)
    add_scale_options(p, streams_by_default=False)
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser(
        "update",
        help="add labelled data to a model: refit from its stored statistics (score counts; "
        "sts/csts fitted with --param keep_stats=true: loss tables) plus the new ones; "
        "tswa/cstswa must be refitted (auto that chose them refits its best score method)",
    )
    p.add_argument(
        "model", help="model file from 'topcal fit' (format 2 or later; sts/csts: format 3)"
    )
    p.add_argument("data", help="new labelled data: CSV, Parquet or .npz")
    p.add_argument("-o", "--output", required=True, help="updated model file to write (.json)")
    add_data_options(p)
    add_scale_options(p, streams_by_default=True)
    p.set_defaults(func=_cmd_update)

    p = sub.add_parser("apply", help="add calibrated confidence to new predictions")
    p.add_argument("model", help="model file from 'topcal fit'")
    p.add_argument("data", help="data to calibrate (no label column needed)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="output file (.csv or .parquet): input columns + pred + "
        "confidence; with --engine dask a .csv file or a directory of Parquet files",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="LEVEL",
        help="also add confidence_lo and confidence_hi, a LEVEL interval (e.g. 0.9) on each "
        "confidence: the estimation error of the calibration map (docs/intervals.md)",
    )
    p.add_argument(
        "--thresholds",
        metavar="T.json",
        help="cut-offs from 'topcal threshold' for this model: adds an "
        "'accepted' column (true where the confidence reaches the row's class cut-off)",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="also add calibrated_<class>, one calibrated probability per class (rows sum to 1; "
        "the predicted class's is the confidence); needs p_<class> or logit_<class> columns",
    )
    add_data_options(p)
    add_scale_options(p, streams_by_default=True)
    p.set_defaults(func=_cmd_apply)

    p = sub.add_parser(
        "describe",
        help="summarise a model: what was chosen and why, what it gains out of fold, the spread "
        "over classes, the worst and smallest classes (--class, --full, --json for the rest)",
    )
    p.add_argument("model")
    add_repeated(
        p,
        "--class",
        "NAME",
        "show this class in full (every fitted entry, a blend's members' too); repeatable",
        dest="classes",
    )
    p.add_argument(
        "--full", action="store_true", help="show every class in full (long at many classes)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print everything as JSON: describe()'s entries plus the summary under 'summary' "
        "(with --class: only those classes)",
    )
    p.set_defaults(func=_cmd_describe)

    sub.add_parser("methods", help="list the calibration methods").set_defaults(
        func=_cmd_methods
    )

    p = sub.add_parser(
        "adapt", help="adapt a model to a use set's class frequencies (label shift)"
    )
    p.add_argument(
        "model", help="model file from 'topcal fit' (fitted on per-sample labelled data)"
    )
    p.add_argument(
        "data",
        nargs="?",
        help="the unlabelled use set (optional with --priors: then only checked)",
    )
    p.add_argument("-o", "--output", required=True, help="adapted model file to write (.json)")
    p.add_argument(
        "--priors",
        metavar="P.csv",
        help="use-set priors, CSV 'class,prior' (instead of estimating them)",
    )
    p.add_argument(
        "--estimator",
        choices=("em", "bbse"),
        default="em",
        help="prior estimator (default: em)",
    )
    p.add_argument(
        "--test",
        metavar="DATA",
        help="the labelled test set the model was fitted on, with full score "
        "vectors: em then runs on its bias-corrected temperature scaling (EM+BCTS)",
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=100,
        metavar="B",
        help="bootstrap resamples for the intervals (default 100; 0: none)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the bootstrap and the safety step's simulations (default 0)",
    )
    p.add_argument(
        "--shrink",
        default="auto",
        metavar="auto|LAMBDA",
        help="how far to move from the test set's priors towards the estimate: 'auto' (default) "
        "chooses it by simulated shift on the model's own counts (0 where the estimate "
        "would do harm); a number in [0, 1] fixes it (1: the estimate as it is)",
    )
    add_data_options(p)
    p.set_defaults(func=_cmd_adapt)


# ----------------------------------------------------------------- commands
def _progress(args, what: str, engine):
    """A row progress bar where the engine reads the file in chunks, else None."""
    return RowProgress(what, rows_hint(args.data)) if engine.reads_rows else None


def _run(progress, call):
    try:
        return call()
    finally:
        if progress is not None:
            progress.done()


def _cmd_fit(args) -> int:
    from ..calibrators import calibrator
    from ..calibrators.wrapper import Wrapper

    engine = engine_for(args)
    params = dict(parse_param(t) for t in args.param)
    cal = calibrator(args.method, **params)
    check_output(args.output, [args.data], "model file")
    progress = _progress(args, "reading", engine) if engine.from_counts else None
    cal = _run(
        progress, lambda: engine.fit(cal, args.data, progress=progress, **read_options(args))
    )
    cal.save(args.output)
    n_samples = float(cal.n_tp_.sum() + cal.n_fp_.sum())
    chosen = f" ({cal.summary_line()})" if isinstance(cal, Wrapper) else ""
    how = (
        f" from counts on {cal.evidence_.stats.n_rows} (class, score cell) rows"
        if engine.from_counts
        else ""
    )
    print(
        f"fitted {args.method}{chosen} on {n_samples:g} samples, {len(cal.classes_)} "
        f"classes{how} -> {args.output}"
    )
    return 0


def _cmd_update(args) -> int:
    from ..calibrators.updating import require_stats
    from ..calibrators.wrapper import Wrapper
    from ..persist import load

    engine = engine_for(args)
    check_output(args.output, [args.data], "model file")
    model = load(args.model)
    before = require_stats(model).n_samples
    progress = _progress(args, "reading", engine) if engine.from_counts else None
    _run(
        progress,
        lambda: engine.update(model, args.data, progress=progress, **read_options(args)),
    )
    model.save(args.output)
    kept = f" ({model.summary_line()})" if isinstance(model, Wrapper) else ""
    print(
        f"updated {model.name}{kept}: {before:g} + "
        f"{model.evidence_.stats.n_samples - before:g} samples -> {args.output}"
    )
    return 0


def _cmd_apply(args) -> int:
    from ..calibrators.intervals import check_level
    from ..persist import load

    engine = engine_for(args)
    if args.interval is not None:
        args.interval = check_level(args.interval)
    model = load(args.model)
    check_output(
        args.output, [args.data, args.model] + ([args.thresholds] if args.thresholds else [])
    )
    thresholds = None
    if args.thresholds:
        from ..thresholds.core import load_thresholds

        thresholds = load_thresholds(args.thresholds)
        thresholds.check_model(model)
    progress = _progress(args, "calibrating", engine)
    tally: dict = {}
    rows = _run(
        progress,
        lambda: engine.apply(
            model,
            args.data,
            args.output,
            progress=progress,
            interval=args.interval,
            thresholds=thresholds,
            tally=tally,
            full=args.full,
            **read_options(args),
        ),
    )
    what = (
        f"{rows} rows with {model.name}"
        if rows is not None
        else f"{args.data} with {model.name} on {engine.name}"
    )
    extra = [w for w, on in (("accepted", thresholds), ("full vectors", args.full)) if on]
    with_ = f" (with {' and '.join(extra)})" if extra else ""
    print(f"calibrated {what}{with_} -> {args.output}")
    if (
        tally.get("column", "confidence") != "confidence"
    ):  # the input's own 'confidence' is its raw score
        print(
            f"the calibrated confidence is in column {tally['column']!r}; the input's "
            "'confidence' column (the raw score) is kept as it was"
        )
    if tally.get("moved") and rows:
        print(
            f"{tally['moved']} of {rows} rows ({tally['moved'] / rows:.1%}): the calibrated "
            "vector ranks another class above pred (a decision on the vector takes that class)"
        )
    if thresholds is not None and "accepted" in tally and rows:
        print(
            f"accepted: {tally['accepted']} of {rows} rows "
            f"({tally['accepted'] / rows:.1%}) by the "
            f"{'global cut-off' if thresholds.mode == 'global' else 'cut-offs of their classes'}"
        )
    return 0


def _cmd_describe(args) -> int:
    from ..describe.summary import (
        class_text,
        describe_text,
        select_classes,
        summary,
        summary_text,
    )
    from ..persist import load

    if args.full and args.classes:
        raise TopcalError("--full shows every class; --class shows the named ones: give one")
    model = load(args.model)
    d = model.describe()
    names = select_classes(d, args.classes) if args.classes else None
    if args.json:
        out = {**d, "summary": summary(d)}
        if names is not None:
            out = _only_classes(out, set(names))
        print(json.dumps(out, indent=1))
    elif names is not None:
        print(class_text(d, names))
    elif args.full:
        print(describe_text(d))
    else:
        print(summary_text(d))
    return 0


def _only_classes(d, names: set):
    """``d`` with every per-class table (a ``classes`` dict of the model's class names) cut
    to ``names``, at any depth (a wrapper's inner model, a blend's members)."""
    if isinstance(d, list):
        return [_only_classes(v, names) for v in d]
    if not isinstance(d, dict):
        return d
    return {
        k: (
            {c: v for c, v in val.items() if c in names}
            if k == "classes" and isinstance(val, dict)
            else _only_classes(val, names)
        )
        for k, val in d.items()
    }


def _cmd_adapt(args) -> int:
    from ..io import read_data
    from ..labelshift import adapt, read_priors
    from ..persist import load
    from ..stream import model_read_options

    shrink = _adapt_shrink(args)
    check_output(
        args.output, [args.model, args.data, args.priors, args.test], "adapted model file"
    )
    model = load(args.model)
    if args.data is None and args.priors is None:
        raise TopcalError(
            "give the use set (DATA) to estimate its class priors, or --priors P.csv"
        )
    use = None
    if args.data is not None:
        opts = read_options(args)
        opts["label_column"] = None  # the use set is unlabelled; a label column is ignored
        use = read_data(
            args.data, **model_read_options(model, args.data, opts)
        )  # the model's score range
    test = (
        read_data(args.test, **model_read_options(model, args.test, read_options(args)))
        if args.test
        else None
    )
    if args.priors is not None:
        if test is not None:
            raise TopcalError(
                "--test is used to estimate priors; with --priors there is nothing to estimate"
            )
        if shrink != "auto":
            raise TopcalError(
                "--shrink applies to estimated priors; priors given with --priors are used "
                "as they are"
            )
        if use is not None:
            model.predict(use)  # only checks the use set fits the model (classes, score range)
        adapted = adapt(model, priors=read_priors(args.priors))
    else:
        adapted = adapt(
            model,
            use,
            estimator=args.estimator,
            source_data=test,
            n_bootstrap=args.bootstrap,
            seed=args.seed,
            shrink=shrink,
        )
    adapted.save(args.output)
    _print_adapted(adapted, args.output)
    return 0


def _adapt_shrink(args) -> str | float:
    """``topcal adapt``'s --bootstrap and --seed checked; --shrink as "auto" or a float."""
    if args.bootstrap < 0:
        raise TopcalError(f"--bootstrap must be >= 0 (0: no intervals), got {args.bootstrap}")
    from ..labelshift.estimates import MAX_BOOTSTRAP

    if args.bootstrap > MAX_BOOTSTRAP:
        raise TopcalError(
            f"--bootstrap must be at most {MAX_BOOTSTRAP:,} (the interval settles long "
            f"before), got {_short_int(args.bootstrap)}"
        )
    if not 0 <= args.seed <= 2**32 - 1:
        raise TopcalError(
            f"--seed must be an integer in [0, 4294967295], got {_short_int(args.seed)}"
        )
    if args.shrink == "auto":
        return "auto"
    try:
        return float(args.shrink)
    except ValueError:
        raise TopcalError(
            f"--shrink must be 'auto' or a number in [0, 1], got {args.shrink!r}"
        ) from None


def _print_adapted(adapted, output) -> None:
    """``topcal adapt``'s report: where the priors came from and the table of them."""
    e = adapted.estimate_
    how = (
        "given priors"
        if e.estimator == "given"
        else f"{e.estimator} on {e.n_use} rows ({e.basis})"
    )
    print(f"adapted {adapted.inner_.name} to {how} -> {output}")
    if e.estimator != "given":
        print(
            f"safety step: moved {e.shrink:.0%} of the way from the test set's priors to the "
            f"estimate ({e.shrink_reason})"
        )
    rows = [
        [c, e.source[i], e.priors[i]]
        + ([e.lower[i], e.upper[i]] if e.lower is not None else [])
        + [adapted.weights_[i]]
        for i, c in enumerate(adapted.classes_)
    ]
    header = (
        ["class", "source", "use"]
        + (["lower", "upper"] if e.lower is not None else [])
        + ["ratio"]
    )
    print(format_table(header, rows[:30]))
    if len(rows) > 30:
        print(f"... {len(rows) - 30} more classes: topcal describe {output}")


def _short_int(v: int) -> str:
    text = str(v)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def _cmd_methods(args) -> int:
    from ..calibrators import available_methods, get_class

    for name in available_methods():
        cls = get_class(name)
        params = ", ".join(cls._param_names()) or "-"
        print(f"{name:14s} {cls.summary}  [params: {params}]")
    return 0
