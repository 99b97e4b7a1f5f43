"""The ``topcal`` command line: a thin layer over the library.

It parses arguments, reads files into TopLabelData, calls the library and
writes files. Any user mistake ends with exit code 2 and one line
``error: ...`` on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np

from . import __version__
from ._fileio import check_output
from .errors import TopcalError

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise _UsageError(f"{message} (see '{self.prog} --help')")


class _UsageError(Exception):
    pass


def _add_data_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data columns")
    g.add_argument("--label-column", default="label", help="column with the true class name (default: label)")
    g.add_argument("--logits", action="store_true", help="read p_<class> columns as logits, not probabilities")
    g.add_argument("--renormalize", action="store_true", help="divide probability rows by their sum instead of rejecting rows that do not sum to 1")
    g.add_argument("--score-range", nargs=2, type=float, metavar=("LO", "HI"), help="scale of the 'score' column or of binned data's bins (default 0 1; PhANNs: 0 10); apply takes the model's")
    g.add_argument("--prob-prefix", default="p_", help="prefix of probability columns (default: p_)")
    g.add_argument("--pred-column", default="pred", help="predicted-class column for top-score data (default: pred)")
    g.add_argument("--score-column", default="score", help="top-score column (default: score)")
    g.add_argument("--column", action="append", default=[], metavar="ROLE=NAME",
                   help="read column NAME as ROLE (label, pred, score, predicted_class, bin_lo, bin_hi, tp, fp); "
                        "repeatable")


def _read_options(args) -> dict:
    return dict(
        label_column=args.label_column,
        logits=args.logits,
        renormalize=args.renormalize,
        score_range=None if args.score_range is None else tuple(args.score_range),
        prob_prefix=args.prob_prefix,
        pred_column=args.pred_column,
        score_column=args.score_column,
        columns=_column_map(args.column),
    )


def _column_map(items) -> dict | None:
    out = {}
    for text in items:
        role, sep, name = text.partition("=")
        if not sep or not role.strip() or not name:
            raise TopcalError(f"--column {text!r} must look like ROLE=NAME, e.g. --column label=true_class")
        out[role.strip()] = name
    return out or None


def _add_scale_options(p: argparse.ArgumentParser, *, streams_by_default: bool) -> None:
    g = p.add_argument_group("large data")
    if streams_by_default:
        g.add_argument("--chunk-rows", type=int, default=None, metavar="N",
                       help="rows read (and written) per chunk: memory depends on N, not on the file "
                            "(default 1000000; .npz files are read whole)")
    else:
        g.add_argument("--chunk-rows", type=int, default=None, metavar="N",
                       help="read CSV/Parquet in chunks of N rows and fit from the merged counts (bounded memory; "
                            "scores on a grid of 4096 cells; not for full-vector methods)")
    g.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="local (default) or dask: DATA is a Parquet file, directory or glob, processed by a "
                        "Dask cluster (pip install 'topcal[dask]')")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address (default: start a LocalCluster on this machine)")


def _check_scale_args(args) -> None:
    if args.chunk_rows is not None and args.chunk_rows < 1:
        raise TopcalError(f"--chunk-rows must be >= 1, got {args.chunk_rows}")
    if args.scheduler and args.engine != "dask":
        raise TopcalError("--scheduler needs --engine dask")
    if args.engine == "dask" and args.chunk_rows is not None:
        raise TopcalError("--chunk-rows is for --engine local; with dask the partitions are the chunks")


class _RowProgress:
    """A one-line progress display on stderr (only on a terminal)."""

    def __init__(self, what: str, total: int | None):
        import time

        self.what, self.total, self.t0 = what, total, time.perf_counter()
        self.on = sys.stderr.isatty()

    def __call__(self, rows: int) -> None:
        if not self.on:
            return
        import time

        dt = max(time.perf_counter() - self.t0, 1e-9)
        pct = f" ({100 * rows / self.total:5.1f}%)" if self.total else ""
        print(f"\r{self.what}: {rows:,} rows{pct}, {rows / dt:,.0f} rows/s", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.on:
            print(file=sys.stderr)


class _DaskSession:
    """A Dask client: at ``--scheduler`` or on a LocalCluster started (and closed) here."""

    def __init__(self, address: str | None):
        self.address = address

    def __enter__(self):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise TopcalError("--engine dask needs dask; install it with: pip install 'topcal[dask]'") from None
        self.cluster = None
        try:
            if self.address:
                self.client = Client(self.address, timeout="20s")
            else:
                self.cluster = LocalCluster(dashboard_address=None)
                self.client = Client(self.cluster)
        except (OSError, TimeoutError) as exc:
            raise TopcalError(f"cannot connect to the Dask scheduler {self.address!r}: {exc}") from None
        return self.client

    def __exit__(self, *exc):
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        return False


def _parse_param(text: str):
    if "=" not in text:
        raise TopcalError(f"--param {text!r} must look like NAME=VALUE, e.g. --param n_bins=20")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # plain strings need no quotes: --param strategy=quantile
    return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    from .calibrators import available_methods

    methods = ", ".join(available_methods())
    parser = _Parser(prog="topcal", description="Post-hoc top-label confidence calibration.")
    parser.add_argument("--version", action="version", version=f"topcal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("fit", help="fit a calibrator and save it as JSON")
    p.add_argument("data", help="labelled data: CSV, Parquet or .npz")
    p.add_argument("--method", default="auto", help="calibration method (default: auto, the candidate with the "
                   f"smallest 5-fold cross-validated NLL). Options: {methods}")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="method parameter, repeatable (e.g. --param n_bins=20)")
    p.add_argument("-o", "--output", required=True, help="model file to write (.json)")
    _add_data_options(p)
    _add_scale_options(p, streams_by_default=False)

    p = sub.add_parser("update", help="add labelled data to a model: refit from its stored counts plus the new ones")
    p.add_argument("model", help="model file from 'topcal fit' (format 2)")
    p.add_argument("data", help="new labelled data: CSV, Parquet or .npz")
    p.add_argument("-o", "--output", required=True, help="updated model file to write (.json)")
    _add_data_options(p)
    _add_scale_options(p, streams_by_default=True)

    p = sub.add_parser("apply", help="add calibrated confidence to new predictions")
    p.add_argument("model", help="model file from 'topcal fit'")
    p.add_argument("data", help="data to calibrate (no label column needed)")
    p.add_argument("-o", "--output", required=True, help="output file (.csv or .parquet): input columns + pred + "
                   "confidence; with --engine dask a .csv file or a directory of Parquet files")
    _add_data_options(p)
    _add_scale_options(p, streams_by_default=True)

    p = sub.add_parser("describe", help="show a model's method and fitted parameters per class")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = sub.add_parser("metrics", help="per-class and overall NLL, Brier, ECE1, ECE2, Conf1")
    p.add_argument("data", help="labelled data")
    p.add_argument("--model", help="model to evaluate (default: the uncalibrated score)")
    p.add_argument("--bins", type=int, default=10, help="bins for ECE (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_data_options(p)

    sub.add_parser("methods", help="list the calibration methods")

    p = sub.add_parser("adapt", help="adapt a model to a use set's class frequencies (label shift)")
    p.add_argument("model", help="model file from 'topcal fit' (fitted on per-sample labelled data)")
    p.add_argument("data", nargs="?", help="the unlabelled use set (optional with --priors: then only checked)")
    p.add_argument("-o", "--output", required=True, help="adapted model file to write (.json)")
    p.add_argument("--priors", metavar="P.csv", help="use-set priors, CSV 'class,prior' (instead of estimating them)")
    p.add_argument("--estimator", choices=("em", "bbse"), default="em", help="prior estimator (default: em)")
    p.add_argument("--test", metavar="DATA", help="the labelled test set the model was fitted on, with full score "
                   "vectors: em then runs on its bias-corrected temperature scaling (EM+BCTS)")
    p.add_argument("--bootstrap", type=int, default=100, metavar="B", help="bootstrap resamples for the intervals (default 100; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    _add_data_options(p)

    p = sub.add_parser("demo", help="the visual-check report for the embedded PhANNs data, plus a short table")
    p.add_argument("-o", "--output", default="topcal-demo-report", metavar="DIR",
                   help="folder for index.html and figures/ (default: ./topcal-demo-report); it must be new, "
                        "empty or made by topcal")
    p.add_argument("--force", action="store_true",
                   help="write into DIR even if it holds other files (they are kept; index.html and figures/ are replaced)")
    p.set_defaults(func=_cmd_demo)

    for name, func in (("fit", _cmd_fit), ("update", _cmd_update), ("apply", _cmd_apply), ("describe", _cmd_describe),
                       ("metrics", _cmd_metrics), ("methods", _cmd_methods), ("adapt", _cmd_adapt)):
        sub.choices[name].set_defaults(func=func)
    for spec in _EXTENSIONS:
        module, attr = spec.split(":")
        getattr(importlib.import_module(module), attr)(sub)
    return parser


# ----------------------------------------------------------------- commands
def _stats_of(args, *, classes=None, model=None):
    """Mergeable statistics of ``args.data``: streamed in chunks, or by a Dask cluster.

    With ``model``, new data are read with its score range unless given.
    """
    from .io import DEFAULT_CHUNK_ROWS, read_stats
    from .stream import model_read_options

    opts = _read_options(args)
    if args.engine == "dask":
        from . import dask as tdask

        with _DaskSession(args.scheduler):
            ddf = tdask.read_parquet(args.data)
            if model is not None:
                opts = model_read_options(model, args.data, opts, columns=list(ddf.columns))
            return tdask.stats(ddf, classes=classes, **opts)
    if model is not None:
        opts = model_read_options(model, args.data, opts)
    progress = _RowProgress("reading", _rows_hint(args.data))
    try:
        return read_stats(args.data, args.chunk_rows or DEFAULT_CHUNK_ROWS, progress=progress, classes=classes,
                          **opts)
    finally:
        progress.done()


def _cmd_fit(args) -> int:
    from . import calibrator, read_data
    from .calibrators import get_class

    _check_scale_args(args)
    params = dict(_parse_param(t) for t in args.param)
    cal = calibrator(args.method, **params)
    check_output(args.output, [args.data], "model file")
    streamed = args.chunk_rows is not None or args.engine == "dask"
    if streamed:
        if get_class(args.method).needs_full:
            raise TopcalError(
                f"method {args.method!r} recalibrates the full score vector, which cannot be fitted from "
                "counts; drop --chunk-rows/--engine dask to fit it in memory, or choose a score method"
            )
        stats = _stats_of(args)
        data = stats.to_data()
    else:
        data = read_data(args.data, **_read_options(args))
    cal.fit(data)
    cal.save(args.output)
    chosen = f" (chose {cal.method_} by {cal.folds}-fold cross-validated NLL)" if args.method == "auto" else ""
    how = f" from counts on {data.n_rows} (class, score cell) rows" if streamed else ""
    print(f"fitted {args.method}{chosen} on {data.n_samples:g} samples, {data.n_classes} classes{how} -> {args.output}")
    return 0


def _cmd_update(args) -> int:
    from .persist import load
    from .stream import update_file

    _check_scale_args(args)
    check_output(args.output, [args.data], "model file")
    model = load(args.model)
    before = model.require_stats().n_samples
    if args.engine == "dask":
        model.update(_stats_of(args, classes=list(model.classes_), model=model))
    else:
        progress = _RowProgress("reading", _rows_hint(args.data)) if args.chunk_rows else None
        try:
            update_file(model, args.data, chunk_rows=args.chunk_rows, progress=progress, **_read_options(args))
        finally:
            if progress is not None:
                progress.done()
    model.save(args.output)
    kept = f" (kept its choice {model.method_}; cross-validation from the first fit)" if model.name == "auto" else ""
    print(f"updated {model.name}{kept}: {before:g} + {model.stats_.n_samples - before:g} samples -> {args.output}")
    return 0


def _rows_hint(path):
    from .io import count_rows

    return count_rows(path)


def _cmd_apply(args) -> int:
    from .io import DEFAULT_CHUNK_ROWS
    from .persist import load
    from .stream import apply_file, model_read_options

    _check_scale_args(args)
    model = load(args.model)
    check_output(args.output, [args.data, args.model])
    opts = _read_options(args)
    if args.engine == "dask":
        from . import dask as tdask

        columns = list(tdask.read_parquet(args.data).columns)
        opts = model_read_options(model, args.data, {**opts, "label_column": None}, columns=columns)
        return _apply_dask(args, model, opts)
    progress = _RowProgress("calibrating", _rows_hint(args.data))
    try:
        rows = apply_file(model, args.data, args.output, chunk_rows=args.chunk_rows or DEFAULT_CHUNK_ROWS,
                          progress=progress, **opts)
    finally:
        progress.done()
    print(f"calibrated {rows} rows with {model.name} -> {args.output}")
    return 0


def _apply_dask(args, model, opts) -> int:
    import shutil

    from . import dask as tdask

    out = Path(args.output)
    tmp = out.with_name(f".{out.name}.tmp")
    with _DaskSession(args.scheduler):
        ddf = tdask.read_parquet(args.data)
        result = tdask.apply(model, ddf, **opts)
        try:
            if out.suffix.lower() == ".csv":
                result.to_csv(str(tmp), single_file=True, index=False)
            else:
                result.to_parquet(str(tmp), write_index=False)
            if out.is_dir():
                shutil.rmtree(out)
            tmp.replace(out)
        except TopcalError:
            raise
        except Exception as exc:  # dask/pyarrow: unreadable partitions, full disk, ...
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TopcalError(f"cannot calibrate {args.data!r} with dask: {msg}") from None
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp.exists():
                tmp.unlink()
    print(f"calibrated {args.data} with {model.name} on dask -> {args.output}")
    return 0


def _fmt(v, width=9, digits=4) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-".rjust(width)
    if isinstance(v, (int, np.integer)) or (isinstance(v, float) and float(v).is_integer() and abs(v) >= 1):
        return f"{v:>{width}.0f}"
    return f"{v:>{width}.{digits}f}"


def format_table(header: list[str], rows: list[list], first_width: int | None = None) -> str:
    """A plain fixed-width text table."""
    w0 = first_width or max(len(str(r[0])) for r in rows + [header])
    widths = [max(9, len(h)) for h in header[1:]]
    lines = [str(header[0]).ljust(w0) + "".join(" " + h.rjust(w) for h, w in zip(header[1:], widths))]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(str(r[0]).ljust(w0) + "".join(" " + _fmt(v, w) for v, w in zip(r[1:], widths)))
    return "\n".join(lines)


def _cmd_describe(args) -> int:
    from .persist import load

    model = load(args.model)
    d = model.describe()
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    print(f"method: {d['method']}")
    print(f"params: {json.dumps(d['params'])}")
    print(f"score range: {d['score_range']}")
    if "chosen" in d:  # auto: the choice and its cross-validation table, then the chosen model
        cv = d["cross_validation"]
        print(f"chosen: {d['chosen']} (smallest {cv['folds']}-fold cross-validated NLL, seed {cv['seed']}, "
              f"on {cv['samples']:g} samples)")
        fitted = sum(info["n_tp"] + info["n_fp"] for info in d["classes"].values())
        if fitted > cv["samples"]:
            print(f"updated since: the chosen method is fitted on {fitted:g} samples; fit auto again to re-choose")
        ranked = sorted(((v, k) for k, v in cv["nll"].items() if v is not None))
        if ranked:
            print("cross-validated NLL: " + ", ".join(f"{k} {v:.4f}" for v, k in ranked))
        for k, msg in cv["errors"].items():
            print(f"  {k} failed in cross-validation: {msg}")
        d = d["model"]
        print(f"\nchosen model: {d['method']}, params {json.dumps(d['params'])}")
    for key, val in d.items():  # method-wide results, e.g. a joint fit's loss and AIC
        if isinstance(val, dict) and key not in ("params", "classes"):
            print(f"{key}: " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in val.items()))
    for name, info in d["classes"].items():
        print(f"\n[{name}]  TP={info['n_tp']:g}  FP={info['n_fp']:g}")
        for key, val in info.items():
            if key in ("n_tp", "n_fp"):
                continue
            if isinstance(val, list) and len(val) > 12:
                shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val[:12])
                val = f"[{shown}, ...] ({len(val)} values)"
            elif isinstance(val, list):
                val = "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val) + "]"
            elif isinstance(val, float):
                val = f"{val:.6g}"
            print(f"  {key}: {val}")
    return 0


def _cmd_metrics(args) -> int:
    from . import calibrator, read_data
    from ._params import MAX_BINS
    from .metrics import summary
    from .persist import load

    if not 1 <= args.bins <= MAX_BINS:
        raise TopcalError(f"--bins must be between 1 and {MAX_BINS}, got {args.bins}")
    data = read_data(args.data, **_read_options(args))
    model = load(args.model) if args.model else calibrator("uncalibrated").fit(data)
    s = summary(data, model.predict(data), n_bins=args.bins)
    s["method"] = model.name
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    cols = ["tp", "fp", "conf1", "nll", "brier", "ece1", "ece2"]
    rows = [[name] + [r[c] for c in cols] for name, r in s["classes"].items()]
    rows.append(["overall"] + [s["overall"][c] for c in cols])
    print(f"method: {model.name}")
    print(format_table(["class"] + cols, rows))
    return 0


def _cmd_adapt(args) -> int:
    from . import read_data
    from .labelshift import adapt, read_priors
    from .persist import load

    if args.bootstrap < 0:
        raise TopcalError(f"--bootstrap must be >= 0 (0: no intervals), got {args.bootstrap}")
    model = load(args.model)
    if args.data is None and args.priors is None:
        raise TopcalError("give the use set (DATA) to estimate its class priors, or --priors P.csv")
    use = None
    if args.data is not None:
        opts = _read_options(args)
        opts["label_column"] = None  # the use set is unlabelled; a label column is ignored
        use = read_data(args.data, **opts)
    test = read_data(args.test, **_read_options(args)) if args.test else None
    if args.priors is not None:
        if test is not None:
            raise TopcalError("--test is used to estimate priors; with --priors there is nothing to estimate")
        if use is not None:
            model.predict(use)  # only checks the use set fits the model (classes, score range)
        adapted = adapt(model, priors=read_priors(args.priors))
    else:
        adapted = adapt(model, use, estimator=args.estimator, source_data=test, n_bootstrap=args.bootstrap,
                        seed=args.seed)
    adapted.save(args.output)
    e = adapted.estimate_
    how = "given priors" if e.estimator == "given" else f"{e.estimator} on {e.n_use} rows ({e.basis})"
    print(f"adapted {adapted.base_.name} to {how} -> {args.output}")
    rows = [[c, e.source[i], e.priors[i]] + ([e.lower[i], e.upper[i]] if e.lower is not None else [])
            + [adapted.weights_[i]] for i, c in enumerate(adapted.classes_)]
    header = ["class", "source", "use"] + (["lower", "upper"] if e.lower is not None else []) + ["ratio"]
    print(format_table(header, rows[:30]))
    if len(rows) > 30:
        print(f"... {len(rows) - 30} more classes: topcal describe {args.output}")
    return 0


def _cmd_methods(args) -> int:
    from .calibrators import available_methods, get_class

    for name in available_methods():
        cls = get_class(name)
        params = ", ".join(cls._param_names()) or "-"
        print(f"{name:14s} {cls.summary}  [params: {params}]")
    return 0


def _cmd_demo(args) -> int:
    from .datasets import load_phanns
    from .report import build_report
    from .report_cli import _progress, overall_table, per_class_table

    data = load_phanns()
    print(f"PhANNs test set (embedded): {data.n_samples:g} samples, {data.n_classes} classes, scores 0-10")
    res = build_report(data, args.output, title="topcal demo: PhANNs test set", data_label="PhANNs test set (embedded)",
                       progress=_progress(), force=args.force)
    for metric in ("nll", "ece1"):
        print(f"\nper-class {metric.upper()} ({res.comparison['folds']}-fold cross-fitted: every sample scored by a "
              "model fitted without it)")
        print(per_class_table(res.comparison, metric))
    print("\noverall (out of sample; `topcal report --in-sample` gives the paper's fitted-on-itself numbers)")
    print(overall_table(res.comparison))
    from .calibrators import available_methods
    from .report import default_methods

    left_out = [m for m in available_methods() if m not in default_methods(data)]
    if left_out:
        print("\nnot run (need the full score vector, which the PhANNs counts lack): " + ", ".join(left_out))
    if res.findings:
        print(f"\nwarnings ({len(res.findings)}):")
        for f in res.findings:
            print(f"  - {f.text}")
    print(f"\nreport (look at every figure before trusting a method): {res.path.resolve()}")
    return 0


#: Modules that add subcommands: "module:function", the function takes the
#: argparse subparsers object and adds parsers with ``set_defaults(func=...)``;
#: ``func(args)`` returns the exit code. Keeps each feature's CLI beside its code.
_EXTENSIONS: tuple[str, ...] = ("topcal.experiments.cli:add_commands", "topcal.report_cli:add_commands")


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def _terminate_cleanly():
    """On SIGTERM (e.g. `kill`, a scheduler's time limit) unwind like Ctrl-C, so half-written outputs are
    removed; returns a function that restores the previous handler."""
    import signal
    import threading

    def handler(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _one_line(exc) -> str:
    return " ".join(str(exc).split("\n")).strip() or type(exc).__name__


def main(argv=None) -> int:
    """Entry point of the ``topcal`` command; returns the exit code."""
    parser = build_parser()
    restore_sigterm = _terminate_cleanly()
    old = warnings.showwarning
    warnings.showwarning = _one_line_warning
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            print("error: no command given; choose one of the commands above, e.g. 'topcal fit --help'",
                  file=sys.stderr)
            return 2
        return args.func(args)
    except (_UsageError, TopcalError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory; the input or a size parameter (bins, classes) is too large for this machine",
              file=sys.stderr)
        return 2
    except RecursionError:
        print("error: the input is nested too deeply to read", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into e.g. `head`, which closed early: not an error of ours;
        # point stdout at devnull so the interpreter's final flush stays quiet
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        warnings.showwarning = old
        restore_sigterm()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
