"""Commands on model files: ``fit``, ``update``, ``apply``, ``describe``, ``adapt``, ``methods``."""

from __future__ import annotations

import json

from .._fileio import check_output
from ..errors import TopcalError
from .common import (DaskSession, RowProgress, add_data_options, add_scale_options, check_scale_args, format_table,
                     parse_param, read_options, rows_hint)

__all__ = ["add_commands"]


def add_commands(sub) -> None:
    """Add ``fit``, ``update``, ``apply``, ``describe``, ``methods`` and ``adapt`` to the ``topcal`` subparsers."""
    from ..calibrators import available_methods

    methods = ", ".join(available_methods())
    p = sub.add_parser("fit", help="fit a calibrator and save it as JSON")
    p.add_argument("data", help="labelled data: CSV, Parquet or .npz")
    p.add_argument("--method", default="auto", help="calibration method (default: auto, the candidate with the "
                   f"smallest 5-fold cross-validated NLL). Options: {methods}")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="method parameter, repeatable (e.g. --param n_bins=20)")
    p.add_argument("-o", "--output", required=True, help="model file to write (.json)")
    add_data_options(p)
    add_scale_options(p, streams_by_default=False)
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("update", help="add labelled data to a model: refit from its stored statistics (score counts; "
                       "sts/csts fitted with --param keep_stats=true: loss tables) plus the new ones; "
                       "tswa/cstswa must be refitted (auto that chose them refits its best score method)")
    p.add_argument("model", help="model file from 'topcal fit' (format 2 or later; sts/csts: format 3)")
    p.add_argument("data", help="new labelled data: CSV, Parquet or .npz")
    p.add_argument("-o", "--output", required=True, help="updated model file to write (.json)")
    add_data_options(p)
    add_scale_options(p, streams_by_default=True)
    p.set_defaults(func=_cmd_update)

    p = sub.add_parser("apply", help="add calibrated confidence to new predictions")
    p.add_argument("model", help="model file from 'topcal fit'")
    p.add_argument("data", help="data to calibrate (no label column needed)")
    p.add_argument("-o", "--output", required=True, help="output file (.csv or .parquet): input columns + pred + "
                   "confidence; with --engine dask a .csv file or a directory of Parquet files")
    add_data_options(p)
    add_scale_options(p, streams_by_default=True)
    p.set_defaults(func=_cmd_apply)

    p = sub.add_parser("describe", help="show a model's method and fitted parameters per class")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=_cmd_describe)

    sub.add_parser("methods", help="list the calibration methods").set_defaults(func=_cmd_methods)

    p = sub.add_parser("adapt", help="adapt a model to a use set's class frequencies (label shift)")
    p.add_argument("model", help="model file from 'topcal fit' (fitted on per-sample labelled data)")
    p.add_argument("data", nargs="?", help="the unlabelled use set (optional with --priors: then only checked)")
    p.add_argument("-o", "--output", required=True, help="adapted model file to write (.json)")
    p.add_argument("--priors", metavar="P.csv", help="use-set priors, CSV 'class,prior' (instead of estimating them)")
    p.add_argument("--estimator", choices=("em", "bbse"), default="em", help="prior estimator (default: em)")
    p.add_argument("--test", metavar="DATA", help="the labelled test set the model was fitted on, with full score "
                   "vectors: em then runs on its bias-corrected temperature scaling (EM+BCTS)")
    p.add_argument("--bootstrap", type=int, default=100, metavar="B", help="bootstrap resamples for the intervals (default 100; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the safety step's simulations (default 0)")
    p.add_argument("--shrink", default="auto", metavar="auto|LAMBDA",
                   help="how far to move from the test set's priors towards the estimate: 'auto' (default) "
                        "chooses it by simulated shift on the model's own counts (0 where the estimate would do "
                        "harm); a number in [0, 1] fixes it (1: the estimate as it is)")
    add_data_options(p)
    p.set_defaults(func=_cmd_adapt)

# ----------------------------------------------------------------- commands
def _fit_streamed(args, cal):
    """Fit ``cal`` from the statistics and confusion counts of ``args.data``: in chunks, or on a Dask cluster."""
    from ..io import DEFAULT_CHUNK_ROWS
    from ..stream import fit_file

    opts = read_options(args)
    if args.engine == "dask":
        from .. import dask as tdask

        with DaskSession(args.scheduler):
            return tdask.fit(tdask.read_parquet(args.data), cal.name, params=cal.get_params(), **opts)
    progress = RowProgress("reading", rows_hint(args.data))
    try:
        return fit_file(cal, args.data, chunk_rows=args.chunk_rows or DEFAULT_CHUNK_ROWS, progress=progress, **opts)
    finally:
        progress.done()


def _cmd_fit(args) -> int:
    from ..calibrators import calibrator, get_class
    from ..io import read_data

    check_scale_args(args)
    params = dict(parse_param(t) for t in args.param)
    cal = calibrator(args.method, **params)
    check_output(args.output, [args.data], "model file")
    streamed = args.chunk_rows is not None or args.engine == "dask"
    if streamed:
        if get_class(args.method).needs_full:
            raise TopcalError(
                f"method {args.method!r} recalibrates the full score vector, which cannot be fitted from "
                "counts; drop --chunk-rows/--engine dask to fit it in memory, or choose a score method"
            )
        cal = _fit_streamed(args, cal)
        n_samples, n_classes = cal.stats_.n_samples, len(cal.classes_)
    else:
        data = read_data(args.data, **read_options(args))
        cal.fit(data)
        n_samples, n_classes = data.n_samples, data.n_classes
    cal.save(args.output)
    chosen = f" (chose {cal.method_} by {cal.folds}-fold cross-validated NLL)" if args.method == "auto" else ""
    how = f" from counts on {cal.stats_.n_rows} (class, score cell) rows" if streamed else ""
    print(f"fitted {args.method}{chosen} on {n_samples:g} samples, {n_classes} classes{how} -> {args.output}")
    return 0


def _cmd_update(args) -> int:
    from ..persist import load
    from ..stream import update_file

    check_scale_args(args)
    check_output(args.output, [args.data], "model file")
    model = load(args.model)
    before = model.require_stats().n_samples
    chose = getattr(model, "method_", None)
    if args.engine == "dask":
        from .. import dask as tdask

        tdask.check_updatable(model)  # before a cluster is started
        with DaskSession(args.scheduler):
            tdask.update(model, tdask.read_parquet(args.data), **read_options(args))
    else:
        progress = RowProgress("reading", rows_hint(args.data)) if args.chunk_rows else None
        try:
            update_file(model, args.data, chunk_rows=args.chunk_rows, progress=progress, **read_options(args))
        finally:
            if progress is not None:
                progress.done()
    model.save(args.output)
    kept = ""
    if model.name == "auto":
        kept = f" (kept its choice {model.method_}; cross-validation from the first fit)" if model.method_ == chose \
            else f" (refitted {model.method_} instead of {chose}, which cannot be updated; see the warning)"
    print(f"updated {model.name}{kept}: {before:g} + {model.stats_.n_samples - before:g} samples -> {args.output}")
    return 0


def _cmd_apply(args) -> int:
    from ..io import DEFAULT_CHUNK_ROWS
    from ..persist import load
    from ..stream import apply_file

    check_scale_args(args)
    model = load(args.model)
    check_output(args.output, [args.data, args.model])
    opts = read_options(args)
    if args.engine == "dask":
        from .. import dask as tdask

        with DaskSession(args.scheduler):
            tdask.apply_file(model, args.data, args.output, **opts)
        print(f"calibrated {args.data} with {model.name} on dask -> {args.output}")
        return 0
    progress = RowProgress("calibrating", rows_hint(args.data))
    try:
        rows = apply_file(model, args.data, args.output, chunk_rows=args.chunk_rows or DEFAULT_CHUNK_ROWS,
                          progress=progress, **opts)
    finally:
        progress.done()
    print(f"calibrated {rows} rows with {model.name} -> {args.output}")
    return 0


def _cmd_describe(args) -> int:
    from ..persist import load

    model = load(args.model)
    d = model.describe()
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    print(model.describe_text())
    return 0


def _cmd_adapt(args) -> int:
    from ..io import read_data
    from ..labelshift import adapt, read_priors
    from ..persist import load
    from ..stream import model_read_options

    if args.bootstrap < 0:
        raise TopcalError(f"--bootstrap must be >= 0 (0: no intervals), got {args.bootstrap}")
    shrink = args.shrink
    if shrink != "auto":
        try:
            shrink = float(shrink)
        except ValueError:
            raise TopcalError(f"--shrink must be 'auto' or a number in [0, 1], got {args.shrink!r}") from None
    model = load(args.model)
    if args.data is None and args.priors is None:
        raise TopcalError("give the use set (DATA) to estimate its class priors, or --priors P.csv")
    use = None
    if args.data is not None:
        opts = read_options(args)
        opts["label_column"] = None  # the use set is unlabelled; a label column is ignored
        use = read_data(args.data, **model_read_options(model, args.data, opts))  # the model's score range
    test = read_data(args.test, **model_read_options(model, args.test, read_options(args))) if args.test else None
    if args.priors is not None:
        if test is not None:
            raise TopcalError("--test is used to estimate priors; with --priors there is nothing to estimate")
        if shrink != "auto":
            raise TopcalError("--shrink applies to estimated priors; priors given with --priors are used as they are")
        if use is not None:
            model.predict(use)  # only checks the use set fits the model (classes, score range)
        adapted = adapt(model, priors=read_priors(args.priors))
    else:
        adapted = adapt(model, use, estimator=args.estimator, source_data=test, n_bootstrap=args.bootstrap,
                        seed=args.seed, shrink=shrink)
    adapted.save(args.output)
    e = adapted.estimate_
    how = "given priors" if e.estimator == "given" else f"{e.estimator} on {e.n_use} rows ({e.basis})"
    print(f"adapted {adapted.base_.name} to {how} -> {args.output}")
    if e.estimator != "given":
        print(f"safety step: moved {e.shrink:.0%} of the way from the test set's priors to the estimate ({e.shrink_reason})")
    rows = [[c, e.source[i], e.priors[i]] + ([e.lower[i], e.upper[i]] if e.lower is not None else [])
            + [adapted.weights_[i]] for i, c in enumerate(adapted.classes_)]
    header = ["class", "source", "use"] + (["lower", "upper"] if e.lower is not None else []) + ["ratio"]
    print(format_table(header, rows[:30]))
    if len(rows) > 30:
        print(f"... {len(rows) - 30} more classes: topcal describe {args.output}")
    return 0


def _cmd_methods(args) -> int:
    from ..calibrators import available_methods, get_class

    for name in available_methods():
        cls = get_class(name)
        params = ", ".join(cls._param_names()) or "-"
        print(f"{name:14s} {cls.summary}  [params: {params}]")
    return 0
