"""Text and Markdown renderings of an ensemble experiment's summary."""

from __future__ import annotations

import numpy as np

from .._tables import markdown_table, text_table
from ..calibrators.registry import BASELINE

__all__ = ["median_table", "overall_table", "gap_table", "format_report"]


def _cell(v, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def median_table(
    summary: dict, metric: str, *, markdown: bool = False, methods=None, digits: int = 4
) -> str:
    """Median ``metric`` per method (rows) and class (columns), test set 1 / test set 2 in
    each cell.

    Parameters
    ----------
    summary : dict
        From :func:`topcal.experiments.run.summarize` (or summary.json).
    metric : {"nll", "ece1", "ece2"}
    markdown : bool, default False
        A Markdown table instead of fixed-width text.
    methods : sequence of str, optional
        Rows to show, in order (default: all).
    digits : int, default 4
    """
    table = summary["metrics"][metric]
    methods = list(table) if methods is None else [m for m in methods if m in table]
    cols = list(table[methods[0]]["test1"])
    rows = []
    for m in methods:
        rows.append(
            [m]
            + [
                f"{_cell(table[m]['test1'][c]['median'], digits)}/"
                f"{_cell(table[m]['test2'][c]['median'], digits)}"
                for c in cols
            ]
        )
    header = [f"{metric.upper()} set1/set2"] + cols
    if markdown:
        return markdown_table(header, rows, numeric=False)
    w = max(len(x) for r in rows for x in r[1:])
    return text_table(
        header, rows, max(len(h) for h in [header[0]] + methods), [w] * len(cols)
    )


def overall_table(summary: dict, *, methods=None, digits: int = 4) -> str:
    """Markdown table: overall median NLL, ECE1, ECE2 per method on test sets 1 and 2."""
    m0 = summary["metrics"]["nll"]
    methods = list(m0) if methods is None else [m for m in methods if m in m0]
    header = ["method"] + [
        f"{m.upper()} set {s}" for m in ("nll", "ece1", "ece2") for s in (1, 2)
    ]
    rows = [
        [meth]
        + [
            _cell(summary["metrics"][m][meth][f"test{s}"]["overall"]["median"], digits)
            for m in ("nll", "ece1", "ece2")
            for s in (1, 2)
        ]
        for meth in methods
    ]
    return markdown_table(header, rows)


def _checks(summary: dict) -> list[str]:
    out = []
    for metric, d in summary["set2_vs_set1"].items():
        n = d["worse"] + d["better"] + d["equal"]
        share = d["share_of_ensembles_worse"]
        out.append(
            f"{metric.upper()}: median on test set 2 worse than on test set 1 in "
            f"{d['worse']} of {n} (method, class) cells, better in {d['better']}"
            + (
                ""
                if share is None
                else f"; per ensemble, set 2 worse in {100 * share:.1f}% of pairs"
            )
        )
    return out


def gap_table(summary: dict, *, baseline: str = BASELINE, digits: int = 4) -> str:
    """Markdown table: per method the median (set 2 - set 1) gap of each metric, and its
    excess over ``baseline``.

    The untuned baseline's gap measures how much harder test set 2 is without any tuning; a
    method's excess over it estimates the bias from tuning on test set 1.
    """
    metrics = list(summary["set2_vs_set1"])
    gaps = {m: summary["set2_vs_set1"][m].get("median_gap", {}) for m in metrics}
    methods = list(gaps[metrics[0]])
    has_base = all(baseline in gaps[m] and gaps[m][baseline] is not None for m in metrics)
    header = ["method"] + [f"{m.upper()} gap" for m in metrics]
    if has_base:
        header += [f"{m.upper()} excess over {baseline}" for m in metrics]
    rows = []
    for meth in methods:
        cells = [_cell(gaps[m][meth], digits) for m in metrics]
        if has_base:
            cells += [
                _cell(
                    None if gaps[m][meth] is None else gaps[m][meth] - gaps[m][baseline],
                    digits,
                )
                for m in metrics
            ]
        rows.append([meth] + cells)
    return markdown_table(header, rows)


def _ranking(summary: dict, metric: str = "nll", test_set: str = "test2") -> str:
    return ", ".join(
        f"{r['method']} ({_cell(r['overall_median'])}, rank {r['mean_class_rank']:.1f})"
        for r in summary["ranking"][metric][test_set]
    )


def format_report(res: dict) -> str:
    """Terminal report of :func:`topcal.experiments.run.run_experiment`'s result."""
    s = res["summary"]
    outputs, results = res["outputs"], res["results"]
    acc = outputs.accuracy()
    lines = [
        f"networks: {outputs.n_networks} ({len(outputs.trained)} trained now in "
        f"{outputs.train_seconds:.0f} s, the rest from {outputs.cache_dir})",
        "network accuracy, median over networks: test set 1 "
        f"{float(np.median(acc[:, 0])):.4f}, test set 2 {float(np.median(acc[:, 1])):.4f}",
        f"ensemble accuracy, median: test set 1 {s['accuracy']['test1']['median']:.4f}, "
        f"test set 2 {s['accuracy']['test2']['median']:.4f}",
        f"ensembles: {results.values.shape[0]} of {results.ensembles.shape[1]} networks "
        f"each, {res['config'].combine} rule; methods: {', '.join(results.methods)} "
        f"(evaluated in {results.seconds:.0f} s)",
    ]
    for metric in ("nll", "ece1", "ece2"):
        lines += [
            "",
            f"median {metric.upper()} over ensembles (test set 1 / test set 2)",
            median_table(s, metric),
        ]
    lines += [
        "",
        "set 2 vs set 1 (bias from tuning on set 1 would make set 2 uniformly worse):",
    ]
    lines += ["  " + x for x in _checks(s)]
    lines += [
        "",
        "ranking by overall median NLL on test set 2 (mean rank over classes):",
        "  " + _ranking(s),
    ]
    if s.get("failures"):
        for m, f in s["failures"].items():
            lines.append(
                f"warning: {m} failed on {f['ensembles']} ensemble(s): {f['first_error']}"
            )
    lines += ["", "files: " + ", ".join(str(p) for p in res["paths"].values())]
    return "\n".join(lines)
