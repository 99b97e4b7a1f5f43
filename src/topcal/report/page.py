"""The report page's HTML pieces: style, metric tables, fitted parameters, data summary."""

from __future__ import annotations

import html
import json

import numpy as np

from ..calibrators.auto import TIER_LEGEND
from ..calibrators.registry import lookup
from ..calibrators.wrapper import Wrapper
from ..data import TopLabelData
from ..evaluate import METRICS, Comparison

__all__ = [
    "CSS",
    "metric_table",
    "params_html",
    "choice_html",
    "data_summary",
    "protocol_html",
    "warnings_html",
    "ranked",
    "unranked_notes",
]


def ranked(methods, metric: str) -> list:
    """The methods ranked ('best' marked) on ``metric``: all but those whose class declares it in
    ``unranked_on`` (e.g. conf1 on ECE1/ECE2)."""
    return [m for m in methods if metric not in getattr(lookup(m), "unranked_on", ())]


def unranked_notes(methods) -> list[str]:
    """Why some of ``methods`` are not ranked on some metrics (their classes' ``unranked_note``),
    once each."""
    return list(
        dict.fromkeys(note for m in methods if (note := getattr(lookup(m), "unranked_note", "")))
    )


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1180px;
padding:1.2em 1.6em;
color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}
h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;font-size:.86em;margin:.6em 0}
th,td{padding:.2em .55em;border-bottom:1px solid #e4e4e4;
text-align:right} th:first-child,td:first-child{text-align:left} thead th{background:#f3f3f3}
td.best{font-weight:700;color:#0a5} figure{margin:1.2em 0}
figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#555;margin-top:.3em} .warn li{margin:.15em 0}
.muted{color:#777;font-size:.9em}
details{margin:.5em 0} summary{cursor:pointer;font-weight:600}
code{background:#f4f4f4;padding:0 .2em}
.scroll{overflow-x:auto}
"""


def _fmt(v, digits=4) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        if abs(v) < 1e-12:  # round-off of an exact zero (in-sample ECE of hist, conf1)
            v = 0.0
        if v.is_integer() and 1 <= abs(v) < 1e15:  # counts
            return str(int(v))
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.{digits}g}" if abs(v) >= 1 else f"{v:.{digits}f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x, 3) for x in v) + "]"
    return html.escape(str(v))


def metric_table(comparison, classes, metric: str | None = None) -> str:
    """A comparison's metrics as an HTML table: overall (methods as rows), or ``metric`` per
    class."""
    res = Comparison.of(comparison).methods
    methods = list(res)
    if metric is None:  # overall: methods as rows, metrics as columns
        vals = {m: [res[m][x].overall for x in METRICS] for m in methods}
        best = [
            min((vals[m][j] for m in ranked(methods, x)), default=None)
            for j, x in enumerate(METRICS)
        ]

        def mark(m, j, v):
            return (
                m in ranked([m], METRICS[j])
                and best[j] is not None
                and np.isclose(v, best[j], rtol=1e-9, atol=1e-12)
            )

        rows = "".join(
            f"<tr><td>{html.escape(m)}</td>"
            + "".join(
                f"<td class='{'best' if mark(m, j, v) else ''}'>{_fmt(v)}</td>"
                for j, v in enumerate(vals[m])
            )
            + "</tr>"
            for m in methods
        )
        head = "<tr><th>method</th>" + "".join(f"<th>{x.upper()}</th>" for x in METRICS) + "</tr>"
        note = "".join(f"<p class='muted'>{html.escape(n)}</p>" for n in unranked_notes(methods))
        return (
            f"<div class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
            f"{note}"
        )
    head = "<tr><th>class</th>" + "".join(f"<th>{html.escape(m)}</th>" for m in methods) + "</tr>"
    body = []
    for c in list(classes) + ["overall"]:
        vals = [
            res[m][metric].overall if c == "overall" else res[m][metric].per_class[c]
            for m in methods
        ]
        keep = ranked(methods, metric)
        finite = [v for m, v in zip(methods, vals) if v is not None and m in keep]
        b = min(finite) if finite else None

        def best(m, v):
            return (
                m in keep
                and v is not None
                and b is not None
                and np.isclose(v, b, rtol=1e-9, atol=1e-12)
            )

        cells = "".join(
            f"<td class='{'best' if best(m, v) else ''}'>{_fmt(v)}</td>"
            for m, v in zip(methods, vals)
        )
        name = f"<b>{html.escape(c)}</b>" if c == "overall" else html.escape(c)
        body.append(f"<tr><td>{name}</td>{cells}</tr>")
    return (
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
        "</div>"
    )


_PARAM_SKIP = {
    "tp",
    "fp",
    "n_tp",
    "n_fp",
    "edges",
    "engine",
    "kernel_centres",
    "table_points",
    "candidate_range",
    "n_distinct_scores",
}


def _count(info: dict, which: str):
    """|TP_k| or |FP_k| from a describe() class entry (keys n_tp/n_fp; older models: tp/fp
    scalars)."""
    v = info.get(f"n_{which}", info.get(which))
    return v if isinstance(v, (int, float)) else None


def params_html(name: str, model) -> str:
    try:
        d = model.describe()
    except Exception as exc:  # describe is informative only; never lose the report over it
        return (
            f"<p class='muted'>{html.escape(name)}: parameters unavailable "
            f"({html.escape(str(exc))})</p>"
        )
    top = []
    if d.get("params"):
        top.append(f"parameters <code>{html.escape(json.dumps(d['params']))}</code>")
    fit = d.get("fit")
    if isinstance(fit, dict):
        top.append("fit: " + ", ".join(f"{html.escape(str(k))} {_fmt(v)}" for k, v in fit.items()))
    classes = d.get("classes", {})
    cols: list[str] = []
    for info in classes.values():
        for key, val in info.items():
            if key in _PARAM_SKIP or key in cols:
                continue
            if isinstance(val, (list, tuple)) and len(val) > 12:
                continue
            cols.append(key)
    head = (
        "<tr><th>class</th><th>TP</th><th>FP</th>"
        + "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        + "</tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(c)}</td><td>{_fmt(_count(info, 'tp'))}</td>"
        f"<td>{_fmt(_count(info, 'fp'))}</td>"
        + "".join(f"<td>{_fmt(info.get(col))}</td>" for col in cols)
        + "</tr>"
        for c, info in classes.items()
    )
    table = (
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
        if cols
        else ""
    )
    summary = html.escape(getattr(type(model), "summary", ""))
    return (
        f"<details><summary>{html.escape(name)}</summary><p class='muted'>{summary}</p>"
        f"<p>{'<br>'.join(top)}</p>{choice_html(model)}{table}</details>"
    )


def choice_html(model) -> str:
    """``auto``'s choice and cross-validation table (mean NLL, SE, paired SE); "" for other
    models."""
    choice = model.choice() if isinstance(model, Wrapper) else None
    if choice is None:
        return ""
    head = (
        "<tr><th>candidate</th><th>tier</th><th>CV NLL</th><th>SE</th><th>SE of the difference to "
        "the best</th>"
        "<th></th></tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(r['method'])}</td><td>{r['tier']}</td><td>{_fmt(r['nll'])}</td><td>{_fmt(r['se'])}</td>"
        f"<td>{_fmt(r['diff_se'])}</td>"
        f"<td>{'chosen' if r['chosen'] else ''}{' best mean' if r['best'] else ''}"
        f"{' blend weight ' + format(r['blend_weight'], '.3f') if r.get('blend_weight') else ''}"
        f"{html.escape(' failed: ' + r['error']) if r['error'] else ''}</td></tr>"
        for r in choice["table"]
    )
    blend = choice["blend"]
    blended = (
        ""
        if not blend
        else (
            f"; blended with {html.escape(', '.join(blend['methods'][1:]))} (beats the choice out "
            f"of fold by "
            f"{-blend['gain']:.4f} ± {blend['se']:.4f} NLL)"
        )
    )
    return (
        f"<p>chose <code>{html.escape(choice['chosen'])}</code>{blended}: "
        f"{html.escape(choice['rule'])}; tiers: "
        f"{html.escape(TIER_LEGEND)}</p>"
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
    )


def data_summary(data: TopLabelData, label: str) -> str:
    form = "binned counts" if data.is_binned else "per-sample"
    full = f", full score vectors ({data.full_kind})" if data.has_full else ", top scores only"
    tp, fp = data.class_counts()
    return (
        f"<p><b>{html.escape(label)}</b>: {data.n_samples:,.0f} samples ({form}{full}), "
        f"{data.n_classes} classes, "
        f"score range {data.score_range[0]:g}–{data.score_range[1]:g}; {tp.sum():,.0f} correct "
        f"(accuracy {tp.sum() / max(tp.sum() + fp.sum(), 1):.3f}).</p>"
    )


def protocol_html(comparison) -> str:
    comparison = Comparison.of(comparison)
    if comparison.protocol == "kfold":
        return (
            f"<b>out of sample</b>: {comparison.folds}-fold cross-fitting (every sample scored by "
            f"a model "
            "fitted without it). The figures show the fits on all the data."
        )
    return (
        "<b>fitted and evaluated on the same data</b> (the paper's practice, "
        "<code>--in-sample</code>): "
        "optimistic for flexible methods; rank methods out of sample instead (the default)."
    )


def warnings_html(findings) -> str:
    """The Warnings section: a kind that repeats is one line (count, the worst classes) over a
    collapsed list."""
    from .checks import FindingGroup, group_findings

    if not findings:
        return "<p>No warnings.</p>"
    items = []
    for g in group_findings(findings):
        if isinstance(g, FindingGroup):
            rows = "".join(f"<li>{html.escape(f.text)}</li>" for f in g.findings)
            items.append(
                f"<li>{html.escape(g.summary())}<details><summary>all {len(g.findings)} "
                f"(worst first)</summary><ul>{rows}</ul></details></li>"
            )
        else:
            items.append(f"<li>{html.escape(g.text)}</li>")
    return "<ul class='warn'>" + "".join(items) + "</ul>"
