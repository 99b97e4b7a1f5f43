"""The report page's HTML pieces: style, metric tables, fitted parameters, data summary."""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np

from ..calibrators.select.rules import TIER_LEGEND
from ..calibrators.registry import BASELINE, lookup
from ..calibrators.wrapper import Wrapper
from ..data import TopLabelData
from ..evaluate import METRICS, Comparison

__all__ = [
    "CSS",
    "metric_table",
    "table_classes",
    "MAX_TABLE_CLASSES",
    "params_html",
    "choice_html",
    "data_summary",
    "protocol_html",
    "warnings_html",
    "headline_html",
    "about",
    "ranked",
    "unranked_notes",
]


def ranked(methods, metric: str) -> list:
    """The methods ranked ('best' marked) on ``metric``: all but those whose class declares
    it in ``unranked_on`` (e.g. conf1 on ECE1/ECE2)."""
    return [m for m in methods if metric not in getattr(lookup(m), "unranked_on", ())]


def unranked_notes(methods) -> list[str]:
    """Why some of ``methods`` are not ranked on some metrics (their classes'
    ``unranked_note``), once each."""
    return list(
        dict.fromkeys(
            note for m in methods if (note := getattr(lookup(m), "unranked_note", ""))
        )
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
.headline{border-left:4px solid #0a5;background:#f4faf6;padding:.3em 1em;margin:1em 0}
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
        vals: Any = {m: [res[m][x].overall for x in METRICS] for m in methods}
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
        head = (
            "<tr><th>method</th>" + "".join(f"<th>{x.upper()}</th>" for x in METRICS) + "</tr>"
        )
        note = "".join(
            f"<p class='muted'>{html.escape(n)}</p>" for n in unranked_notes(methods)
        )
        return (
            "<div "
            f"class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>{note}"
        )
    return _class_table(res, methods, list(classes), metric)


#: Most classes a per-class table lists (those with the most rows); the others are counted.
MAX_TABLE_CLASSES = 1000


def table_classes(data: TopLabelData, limit: int = MAX_TABLE_CLASSES) -> list:
    """The classes a per-class table lists: all of them up to ``limit``, else the ``limit``
    predicted most often (by samples: a binned row counts its tp + fp; ties: the lower
    index), in the data's class order."""
    if data.n_classes <= limit:
        return list(data.classes)
    tp, fp = data.class_counts()
    keep = np.sort(np.argsort(-(tp + fp), kind="stable")[:limit])
    return [data.classes[k] for k in keep]


def _class_table(res, methods: list, classes: list, metric: str) -> str:
    """``metric`` per class (rows) and method (columns), then overall; the best of each row
    among the ranked methods marked."""
    head = (
        "<tr><th>class</th>" + "".join(f"<th>{html.escape(m)}</th>" for m in methods) + "</tr>"
    )
    vals = [[res[m][metric].per_class[c] for m in methods] for c in classes]
    vals.append([res[m][metric].overall for m in methods])
    table = np.array([[np.nan if v is None else v for v in row] for row in vals], dtype=float)
    keep = np.isin(methods, ranked(methods, metric)) & ~np.isnan(table)
    with np.errstate(invalid="ignore"):  # rows without a ranked value: no best
        best = np.nanmin(np.where(keep, table, np.nan), axis=1, initial=np.inf)
    marked = keep & np.isclose(table, best[:, None], rtol=1e-9, atol=1e-12)
    body = []
    for r, (c, row) in enumerate(zip(classes + ["overall"], vals)):
        cells = "".join(
            f"<td class='{'best' if marked[r, j] else ''}'>{_fmt(v)}</td>"
            for j, v in enumerate(row)
        )
        name = "<b>overall</b>" if r == len(classes) else html.escape(str(c))
        body.append(f"<tr><td>{name}</td>{cells}</tr>")
    return (
        "<div "
        f"class='scroll'><table><thead>{head}</thead><tbody>{''.join(body)}</tbody></table></div>"
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


def params_html(name: str, model, shown: list | None = None) -> str:
    """The fitted parameters of ``model``: its describe() summary and a table of its
    per-class parameters, for the classes ``shown`` only (default: all; see
    :func:`table_classes`), the others counted."""
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
        top.append(
            "fit: " + ", ".join(f"{html.escape(str(k))} {_fmt(v)}" for k, v in fit.items())
        )
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
    listed = list(classes) if shown is None else [c for c in shown if c in classes]
    rows = "".join(
        f"<tr><td>{html.escape(c)}</td><td>{_fmt(_count(classes[c], 'tp'))}</td>"
        f"<td>{_fmt(_count(classes[c], 'fp'))}</td>"
        + "".join(f"<td>{_fmt(classes[c].get(col))}</td>" for col in cols)
        + "</tr>"
        for c in listed
    )
    left = len(classes) - len(listed)
    note = (
        f"<p class='muted'>{len(listed):,} of {len(classes):,} classes listed (those "
        f"predicted most often); <code>topcal describe --full</code> on the fitted model lists "
        f"every class.</p>"
        if left
        else ""
    )
    table = (
        f"<div class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
        f"{note}"
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
        "<tr><th>candidate</th><th>tier</th><th>CV NLL</th><th>SE</th><th>SE of the "
        "difference to the best</th><th></th></tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(r['method'])}</td><td>{r['tier']}</td><td>{_fmt(r['nll'])}</td><td>{_fmt(r['se'])}</td>"
        f"<td>{_fmt(r['diff_se'])}</td>"
        f"<td>{'chosen' if r['chosen'] else ''}{' best mean' if r['best'] else ''}"
        f"{' first look only: NLL ' + _fmt(r['first_nll']) if r.get('stage') == 1 else ''}"
        f"{' blend weight ' + format(r['blend_weight'], '.3f') if r.get('blend_weight') else ''}"
        f"{html.escape(' failed: ' + r['error']) if r['error'] else ''}</td></tr>"
        for r in choice["table"]
    )
    blend = choice["blend"]
    blended = (
        ""
        if not blend
        else (
            f"; blended with {html.escape(', '.join(blend['methods'][1:]))} (beats the "
            f"choice out of fold by {-blend['gain']:.4f} ± {blend['se']:.4f} NLL)"
        )
    )
    return (
        f"<p>chose <code>{html.escape(choice['chosen'])}</code>{blended}: "
        f"{html.escape(choice['rule'])}; tiers: {html.escape(TIER_LEGEND)}</p><div "
        f"class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
    )


def data_summary(data: TopLabelData, label: str) -> str:
    form = "binned counts" if data.is_binned else "per-sample"
    full = f", full score vectors ({data.full_kind})" if data.has_full else ", top scores only"
    tp, fp = data.class_counts()
    return (
        f"<p><b>{html.escape(label)}</b>: {data.n_samples:,.0f} samples ({form}{full}), "
        f"{data.n_classes} classes, score range "
        f"{data.score_range[0]:g}–{data.score_range[1]:g}; {tp.sum():,.0f} correct "
        f"(accuracy {tp.sum() / max(tp.sum() + fp.sum(), 1):.3f}).</p>"
    )


def protocol_html(comparison) -> str:
    comparison = Comparison.of(comparison)
    if comparison.protocol == "kfold":
        return (
            "<b>out of sample</b>: "
            f"{'one split' if comparison.folds == 1 else f'{comparison.folds}-fold cross-fitting'} "
            "(every sample scored by a model fitted without it). The figures show the fits "
            "on all the data."
        )
    return (
        "<b>fitted and evaluated on the same data</b> (the paper's practice, "
        "<code>--in-sample</code>): optimistic for flexible methods; rank methods out of "
        "sample instead (the default)."
    )


def about(findings, focus: str | None) -> tuple[list, list]:
    """``findings`` split into those about the model in use ``focus`` (and the data, its
    classes and the baseline comparisons) and those about the other methods (all in the
    first with no ``focus``)."""
    if focus is None:
        return list(findings), []
    mine = [f for f in findings if f.method in (None, focus, BASELINE)]
    return mine, [f for f in findings if f.method not in (None, focus, BASELINE)]


def warnings_html(findings, focus: str | None = None) -> str:
    """The Warnings section: those about the model in use ``focus`` (and the data) first,
    those about the other methods folded below; a kind that repeats is one line (count, the
    worst classes) over a collapsed list."""
    if not findings:
        return "<p>No warnings.</p>"
    mine, other = about(findings, focus)
    out = _warning_list(mine) if mine else "<p>No warnings about it or the data.</p>"
    if focus is not None:
        out = (
            f"<p class='muted'>About <code>{html.escape(focus)}</code> and the data:</p>" + out
        )
    if other:
        names = ", ".join(dict.fromkeys(html.escape(f.method) for f in other))
        out += (
            f"<details><summary>{len(other)} more about the other methods ({names})</summary>"
            f"{_warning_list(other)}</details>"
        )
    return out


def _warning_list(findings) -> str:
    from .checks import FindingGroup, group_findings

    items = []
    for g in group_findings(findings):
        if isinstance(g, FindingGroup):
            # worst first; at many classes the first MAX_TABLE_CLASSES, the rest counted
            n, cap = len(g.findings), MAX_TABLE_CLASSES
            rows = "".join(f"<li>{html.escape(f.text)}</li>" for f in g.findings[:cap])
            if n > cap:
                rows += f"<li class='muted'>... and {n - cap:,} more</li>"
            shown = f"all {n:,}" if n <= cap else f"the worst {cap:,} of {n:,}"
            items.append(
                f"<li>{html.escape(g.summary())}<details><summary>{shown} "
                f"(worst first)</summary><ul>{rows}</ul></details></li>"
            )
        else:
            items.append(f"<li>{html.escape(g.text)}</li>")
    return "<ul class='warn'>" + "".join(items) + "</ul>"


def headline_html(
    models: dict, comparison, focus: str | None, holdout=None, findings=()
) -> str:
    """The first screen's answer: what ``auto`` chose and why, and what it gains over the
    uncalibrated score out of sample (without ``auto``: the model in use against the
    baseline), and on the second test set where there is one, with a link to the warnings
    about it (the number, and the classes where calibration hurts); "" when there is no
    model but the baseline."""
    if focus is None:
        return ""
    model = models[focus]
    choice = model.choice() if isinstance(model, Wrapper) else None
    res = Comparison.of(comparison)
    name = f"<code>{html.escape(focus)}</code>"
    if choice is not None:
        chosen = f"<code>{html.escape(choice['chosen'])}</code>"
        head = f"<b>{name} chose {chosen}</b>"
        blend = choice["blend"]
        if blend:
            head += (
                ", blended with "
                + ", ".join(
                    f"<code>{html.escape(m)}</code> ({w:.2f})"
                    for m, w in zip(blend["methods"][1:], blend["weights"][1:])
                )
                + f" (weight of {chosen}: {blend['weights'][0]:.2f})"
            )
        head += f": {html.escape(choice['rule'])}."
    else:
        head = f"<b>The model in use: {name}</b> (the first method named)."
    gain = _gain_html(res, focus, choice)
    if holdout is not None and focus in Comparison.of(holdout).methods:
        gain += " " + _gain_html(Comparison.of(holdout), focus, choice)
    pointer = _warnings_pointer(findings, focus)
    return f"<div class='headline'><p>{head}</p><p>{gain}</p>{pointer}</div>"


def _warnings_pointer(findings, focus: str) -> str:
    """One line under the headline: how many warnings concern the model in use and the data,
    the classes where every method is worse than the uncalibrated score first, linked to the
    list."""
    mine, _ = about(findings, focus)
    if not mine:
        return ""
    hurts = {f.class_name for f in mine if f.kind == "calibration-hurts"}
    worse = (
        f", among them {len(hurts)} {'class' if len(hurts) == 1 else 'classes'} where "
        "every method is worse than the uncalibrated score out of sample"
        if hurts
        else ""
    )
    n = len(mine)
    return (
        f"<p>Read first: <a href='#warnings'>{n:,} warning{'s' if n != 1 else ''}</a> "
        f"about it and the data{worse}.</p>"
    )


def _gain_html(res: Comparison, focus: str, choice) -> str:
    """What ``focus`` gains over the baseline: out of sample from ``res`` (K folds or the
    second set), or auto's own cross-validation where ``res`` is in-sample."""
    if res.protocol == "same" or focus not in res.methods or BASELINE not in res.methods:
        if choice is None:
            return "Fitted and evaluated on the same data: no out-of-sample gain to show."
        row = {r["method"]: r for r in choice["table"]}
        raw = row.get(BASELINE, {}).get("nll")
        mine = choice["blend"]["nll"] if choice["blend"] else row[choice["chosen"]]["nll"]
        if raw is None or mine is None:
            return "Its cross-validation holds no uncalibrated row to compare with."
        return (
            f"In its own cross-validation: NLL {mine:.4f} against {raw:.4f} uncalibrated "
            f"({_change(mine, raw)})."
        )
    m, b = res.methods[focus], res.methods[BASELINE]
    where = (
        f"Out of sample ({res.folds}-fold)"
        if res.protocol == "kfold"
        else "On the second test set"
    )
    parts = [
        f"{label} {m[x].overall:.4f} against {b[x].overall:.4f} uncalibrated "
        f"({_change(m[x].overall, b[x].overall)})"
        for x, label in (("nll", "NLL"), ("ece1", "ECE1"), ("brier", "Brier"))
        if x in m and m[x].overall is not None and b[x].overall is not None
    ]
    verdict = (
        "it helps"
        if m["nll"].overall < b["nll"].overall
        else "<b>it does not beat the uncalibrated score</b>"
    )
    return _lead_html(res, focus, where) + f"{where}, {verdict}: " + "; ".join(parts) + "."


def _lead_html(res: Comparison, focus: str, where: str) -> str:
    """The improvement in NLL over the uncalibrated score with its paired 90% interval, and
    the calibration loss before and after (docs/metrics.md); "" without the ranking."""
    rank = res.ranking
    if focus not in rank or BASELINE not in rank or rank[focus]["vs_baseline"] is None:
        return ""
    gain = rank[focus]["vs_baseline"]
    span = lambda e: "" if e["lo"] is None else f" [{e['lo']:+.4f}, {e['hi']:+.4f}]"
    loss = lambda n: rank[n]["calibration_loss"]
    before, after = loss(BASELINE), loss(focus)
    text = (
        f"<b>{where}, NLL improvement over the uncalibrated score: {gain['value']:+.4f}"
        f"{span(gain)}</b> (90%, paired over the same samples)."
    )
    if before["value"] is not None and after["value"] is not None:
        text += (
            f" Calibration loss (the NLL a recalibration fitted out of fold still removes): "
            f"{before['value']:.4f}{span(before)} uncalibrated, {after['value']:.4f}"
            f"{span(after)} with <code>{html.escape(focus)}</code>."
        )
    return text + "</p><p>"


def _change(v: float, ref: float) -> str:
    if ref == 0:
        return f"{v - ref:+.4f}"
    return f"{v - ref:+.4f}, {(v - ref) / ref:+.1%}"
