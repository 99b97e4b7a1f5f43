"""What the command groups share: argument groups, option parsing, progress lines and tables.

One place for the options every data-reading command takes (``--label-column``
and friends, the large-data options), for ``--param`` parsing, for the
fixed-width text tables and for the one-line error handling argparse needs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from .._tables import format_table, format_value, text_table
from ..errors import TopcalError

__all__ = ["Parser", "UsageError", "choice_table", "add_data_options", "read_options", "read", "column_map", "add_scale_options",
           "check_scale_args", "RowProgress", "DaskSession", "parse_param", "progress", "one_line", "rows_hint",
           "format_value", "format_table", "overall_table", "per_class_table"]


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see '{self.prog} --help')")


class UsageError(Exception):
    pass


def add_data_options(p: argparse.ArgumentParser) -> None:
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


def read_options(args) -> dict:
    return dict(
        label_column=args.label_column,
        logits=args.logits,
        renormalize=args.renormalize,
        score_range=None if args.score_range is None else tuple(args.score_range),
        prob_prefix=args.prob_prefix,
        pred_column=args.pred_column,
        score_column=args.score_column,
        columns=column_map(args.column),
    )


def column_map(items) -> dict | None:
    out = {}
    for text in items:
        role, sep, name = text.partition("=")
        if not sep or not role.strip() or not name:
            raise TopcalError(f"--column {text!r} must look like ROLE=NAME, e.g. --column label=true_class")
        out[role.strip()] = name
    return out or None


def add_scale_options(p: argparse.ArgumentParser, *, streams_by_default: bool) -> None:
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


def check_scale_args(args) -> None:
    if args.chunk_rows is not None and args.chunk_rows < 1:
        raise TopcalError(f"--chunk-rows must be >= 1, got {args.chunk_rows}")
    if args.scheduler and args.engine != "dask":
        raise TopcalError("--scheduler needs --engine dask")
    if args.engine == "dask" and args.chunk_rows is not None:
        raise TopcalError("--chunk-rows is for --engine local; with dask the partitions are the chunks")


class RowProgress:
    """A one-line progress display on stderr (only on a terminal)."""

    def __init__(self, what: str, total: int | None):
        self.what, self.total, self.t0 = what, total, time.perf_counter()
        self.on = sys.stderr.isatty()

    def __call__(self, rows: int) -> None:
        if not self.on:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        pct = f" ({100 * rows / self.total:5.1f}%)" if self.total else ""
        print(f"\r{self.what}: {rows:,} rows{pct}, {rows / dt:,.0f} rows/s", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.on:
            print(file=sys.stderr)


class DaskSession:
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


def parse_param(text: str):
    if "=" not in text:
        raise TopcalError(f"--param {text!r} must look like NAME=VALUE, e.g. --param n_bins=20")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # plain strings need no quotes: --param strategy=quantile
    return key.strip(), value


def progress():
    t0 = time.perf_counter()

    def emit(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    return emit


def one_line(exc) -> str:
    return " ".join(str(exc).split("\n")).strip() or type(exc).__name__


def rows_hint(path):
    from ..io import count_rows

    return count_rows(path)


def read(path, args):
    """Read ``path`` with the data options in ``args``."""
    from ..io import read_data

    return read_data(path, **read_options(args))


def overall_table(result: dict) -> str:
    """Methods as rows, overall NLL/Brier/ECE1/ECE2 as columns (best marked *)."""
    from ..evaluate import METRICS

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


def choice_table(fits: list) -> str:
    """What ``auto`` chose (``evaluate.auto_summary`` of each fit, e.g. one per fold): candidates as rows,
    per fit the mean cross-validated NLL, its SE and the SE of the paired difference to the best; the
    chosen candidate of each fit marked ``<``, the best mean ``*``."""
    names = []
    for fit in fits:
        names += [r["method"] for r in fit["table"] if r["method"] not in names]
    tag = [("" if fit["fold"] is None else f" f{fit['fold']}") for fit in fits]
    header = ["candidate", "tier"] + [h + t for t in tag for h in ("NLL", "SE", "diff SE", "")]
    rows = []
    for n in names:
        row = [n, None]
        for fit in fits:
            r = next((r for r in fit["table"] if r["method"] == n), None)
            row[1] = r["tier"] if r is not None else row[1]
            if r is None or r["nll"] is None:
                row += ["failed" if r is not None else None, None, None, ""]
            else:
                row += [r["nll"], r["se"], r["diff_se"], ("<" if r["chosen"] else "") + ("*" if r["best"] else "")]
        rows.append(row)
    widths = [max(9, len(h)) for h in header[1:]]
    cells = [[r[0]] + [c.rjust(w) if isinstance(c, str) else format_value(c, w) for c, w in zip(r[1:], widths)]
             for r in rows]
    w0 = max(len(str(r[0])) for r in rows + [header])
    return text_table(header, cells, w0, widths) + "\n(< chosen, * smallest mean; tier 0 uncalibrated, 1 pooled, " \
        "2 shrunk per-class, 3 per-class)"


def per_class_table(result: dict, metric: str = "nll") -> str:
    """Classes as rows, methods as columns."""
    methods = list(result["methods"])
    classes = list(result["methods"][methods[0]][metric]["per_class"])
    rows = [[c] + [result["methods"][m][metric]["per_class"][c] for m in methods] for c in classes]
    rows.append(["overall"] + [result["methods"][m][metric]["overall"] for m in methods])
    return format_table(["class"] + methods, rows)
