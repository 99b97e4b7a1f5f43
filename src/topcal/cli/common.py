"""What the command groups share: argument groups, option parsing, progress lines and
tables.

One place for the options every data-reading command takes (``--label-column`` and friends,
the large-data options), for ``--param`` parsing, for the fixed-width text tables and for
the one-line error handling argparse needs.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from .. import _progress
from .._tables import format_column, format_table, format_value, text_table
from ..calibrators.select.rules import TIER_LEGEND
from ..errors import TopcalError

__all__ = [
    "Parser",
    "UsageError",
    "choice_table",
    "add_data_options",
    "add_repeated",
    "read_options",
    "read",
    "column_map",
    "add_scale_options",
    "check_scale_args",
    "engine_for",
    "RowProgress",
    "parse_param",
    "progress",
    "one_line",
    "rows_hint",
    "format_value",
    "format_table",
    "overall_table",
    "per_class_table",
    "MAX_TABLE_CLASSES",
    "similar_once",
]


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see '{self.prog} --help')")


class UsageError(Exception):
    pass


def add_data_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data columns")
    g.add_argument(
        "--label-column",
        default="label",
        help="column with the true class name (default: label)",
    )
    g.add_argument(
        "--logits",
        action="store_true",
        help="read p_<class> columns as logits, not probabilities",
    )
    g.add_argument(
        "--renormalize",
        action="store_true",
        help="divide probability rows by their sum instead of rejecting rows that do not sum to 1",
    )
    g.add_argument(
        "--score-range",
        nargs=2,
        type=float,
        metavar=("LO", "HI"),
        help="scale of the 'score' column or of binned data's bins (default 0 1; PhANNs: 0 10); "
        "apply takes the model's",
    )
    g.add_argument(
        "--prob-prefix", default="p_", help="prefix of probability columns (default: p_)"
    )
    g.add_argument(
        "--pred-column",
        default="pred",
        help="predicted-class column for top-score data (default: pred)",
    )
    g.add_argument("--score-column", default="score", help="top-score column (default: score)")
    add_repeated(
        g,
        "--column",
        "ROLE=NAME",
        "read column NAME as ROLE (label, pred, score, predicted_class, bin_lo, bin_hi, tp, "
        "fp); repeatable",
    )


def add_repeated(p, flag: str, metavar: str, help: str, **kw) -> None:
    """An option that may be given again and again (``--param``, ``--column``): the list of
    its values, empty when it is not given."""
    p.add_argument(flag, action="append", default=[], metavar=metavar, help=help, **kw)


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
            raise TopcalError(
                f"--column {text!r} must look like ROLE=NAME, e.g. --column label=true_class"
            )
        out[role.strip()] = name
    return out or None


def add_scale_options(p: argparse.ArgumentParser, *, streams_by_default: bool) -> None:
    g = p.add_argument_group("large data")
    if streams_by_default:
        g.add_argument(
            "--chunk-rows",
            type=int,
            default=None,
            metavar="N",
            help="rows read (and written) per chunk: memory depends on N, not on the file "
            "(default 1000000; .npz files are read whole)",
        )
    else:
        g.add_argument(
            "--chunk-rows",
            type=int,
            default=None,
            metavar="N",
            help="read CSV/Parquet in chunks of N rows and fit from the merged counts (bounded "
            "memory; scores on a grid of 4096 cells; not for full-vector methods)",
        )
    g.add_argument(
        "--engine",
        choices=("local", "dask"),
        default="local",
        help="local (default) or dask: DATA is a Parquet file, directory or glob, processed by a "
        "Dask cluster (pip install 'topcal[dask]')",
    )
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler address (default: start a LocalCluster on this machine)",
    )


def check_scale_args(args) -> None:
    if args.chunk_rows is not None and args.chunk_rows < 1:
        raise TopcalError(f"--chunk-rows must be >= 1, got {args.chunk_rows}")
    if args.scheduler and args.engine != "dask":
        raise TopcalError("--scheduler needs --engine dask")
    if args.engine == "dask" and args.chunk_rows is not None:
        raise TopcalError(
            "--chunk-rows is for --engine local; with dask the partitions are the chunks"
        )


def engine_for(args):
    """The engine (:mod:`topcal.engines`) the options ``--engine``, ``--chunk-rows``,
    ``--scheduler`` ask for: the one place the command line chooses where fit, update and
    apply run."""
    from ..engines import for_options

    check_scale_args(args)
    return for_options(args.engine, chunk_rows=args.chunk_rows, scheduler=args.scheduler)


class RowProgress:
    """A progress bar of rows on stderr (only on a terminal, and not with --quiet)."""

    def __init__(self, what: str, total: int | None):
        self.bar = _progress.bar(total=total, desc=what, unit=" rows", unit_scale=True)
        self.rows = 0

    def __call__(self, rows: int) -> None:
        """``rows``: the rows done so far (cumulative)."""
        self.bar.update(rows - self.rows)
        self.rows = rows

    def done(self) -> None:
        self.bar.close()


def parse_param(text: str):
    if "=" not in text:
        raise TopcalError(
            f"--param {text!r} must look like NAME=VALUE, e.g. --param n_bins=20"
        )
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except ValueError:  # JSONDecodeError, or an integer of more than 4300 digits
        value = raw  # plain strings need no quotes: --param strategy=quantile
    return key.strip(), value


def progress():
    """A function printing timed progress lines on stderr (only on a terminal, and not with
    --quiet)."""
    t0 = time.perf_counter()

    def emit(msg: str) -> None:
        _progress.write(f"[{time.perf_counter() - t0:5.1f}s] {msg}")

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


def overall_table(result) -> str:
    """Methods as rows, overall NLL/Brier/ECE1/ECE2 as columns (best marked *; conf1 not
    ranked on ECE)."""
    from ..evaluate import METRICS, Comparison
    from ..report.page import ranked, unranked_notes

    res = Comparison.of(result).methods
    methods = list(res)
    best = {
        x: min((res[m][x].overall for m in ranked(methods, x)), default=None) for x in METRICS
    }
    rows = [[m] + [res[m][x].overall for x in METRICS] for m in methods]
    text = format_table(["method"] + [x.upper() for x in METRICS], rows)
    lines = text.splitlines()
    for i, m in enumerate(methods):
        marks = [
            x.upper()
            for x in METRICS
            if m in ranked([m], x)
            and best[x] is not None
            and np.isclose(res[m][x].overall, best[x], rtol=1e-9)
        ]
        if marks:
            lines[i + 2] += "   best " + ",".join(marks)
    lines += [f"({note})" for note in unranked_notes(methods)]
    return "\n".join(lines)


def choice_table(fits: list) -> str:
    """What ``auto`` chose (``evaluate.auto_summary`` of each fit, e.g. one per fold):
    candidates as rows, per fit the mean cross-validated NLL, its SE and the SE of the
    paired difference to the best; the chosen candidate of each fit marked ``<``, the best
    mean ``*``, a blend's components ``+``."""
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
            row[1] = f"{r['tier']:g}" if r is not None else row[1]
            if r is None or r["nll"] is None:
                # set aside by the first look (no error) is not a failure
                gone = None if r is None else "stopped" if r.get("error") is None else "failed"
                row += [gone, None, None, ""]
            else:
                row += [
                    r["nll"],
                    r["se"],
                    r["diff_se"],
                    ("<" if r["chosen"] else "")
                    + ("*" if r["best"] else "")
                    + ("+" if r.get("blend_weight") else ""),
                ]
        rows.append(row)
    widths = [max(9, len(h)) for h in header[1:]]
    columns = [format_column([r[j + 1] for r in rows], w) for j, w in enumerate(widths)]
    cells = [[r[0]] + [col[i] for col in columns] for i, r in enumerate(rows)]
    w0 = max(len(str(r[0])) for r in rows + [header])
    stopped = (
        "; stopped: set aside by the first look, more than 3 SE behind"
        if any(c.strip() == "stopped" for col in columns for c in col)
        else ""
    )
    return (
        text_table(header, cells, w0, widths)
        + f"\n(< chosen, * smallest mean, + in the blend{stopped}; tier {TIER_LEGEND})"
    )


#: Classes a console per-class table lists at most (the largest ones); --csv/--json give
#: every class.
MAX_TABLE_CLASSES = 30


def per_class_table(result, metric: str = "nll", sizes=None) -> str:
    """Classes as rows, methods as columns; with ``sizes`` (positives per class, in class
    order) and more than :data:`MAX_TABLE_CLASSES` classes, only the largest ones, with a
    note."""
    from ..evaluate import Comparison

    res = Comparison.of(result).methods
    methods = list(res)
    classes = list(res[methods[0]][metric].per_class)
    note = ""
    if sizes is not None and len(classes) > MAX_TABLE_CLASSES:
        keep = set(
            np.argsort(-np.asarray(sizes, dtype=np.float64), kind="stable")[
                :MAX_TABLE_CLASSES
            ].tolist()
        )
        note = (
            f"\n({MAX_TABLE_CLASSES} of {len(classes)} classes shown, those with the most "
            "positives; --csv or --json list every class)"
        )
        classes = [c for i, c in enumerate(classes) if i in keep]
    rows = [[c] + [res[m][metric].per_class[c] for m in methods] for c in classes]
    rows.append(["overall"] + [res[m][metric].overall for m in methods])
    return format_table(["class"] + methods, rows) + note


def similar_once(messages, max_lines: int = MAX_TABLE_CLASSES) -> list:
    """Messages for the console, each kind once: messages that differ only in their
    bracketed lists (one per fold, naming other classes) become the first of them plus a
    count; at most ``max_lines`` lines."""
    import re

    groups: dict = {}
    for m in messages:
        groups.setdefault(re.sub(r"\[[^\]]*\]|\([^)]*\)|\d+(\.\d+)?", "#", m), []).append(m)
    lines = [
        ms[0] + (f" (and {len(ms) - 1} similar)" if len(ms) > 1 else "")
        for ms in groups.values()
    ]
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [
            f"... and {len(lines) - max_lines} more (--json lists every warning)"
        ]
    return lines
