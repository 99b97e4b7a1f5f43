"""The visual check as one HTML page: figures, metric tables, fitted parameters, warnings.

"We would not recommend using any calibration without a visual check"
(Salamon et al., section 12). :func:`build_report` fits the chosen methods on
the user's data and writes ``DIR/index.html``: one self-contained file (every
image is embedded as a PNG data URI, no script, no network), with the PNGs
also saved under ``DIR/figures/`` for reuse.

The page holds, in order: the data summary and warnings; the metric table
(overall and per class NLL, Brier, ECE1, ECE2 per method); the joint
distribution (paper Fig. 1); the calibration curves per class over the
10-bin histogram (Figs. 3, 5, 7, 9), the KDE bandwidth rules side by side
(Fig. 14); the TP/FP kernel densities with the diluted curve (Figs. 5, 6);
the temperature-scaling clouds (Figs. 10-12); per-class NLL bars (Fig. 17);
with a second test set, both sets' histograms (Fig. 4) and the paired bars
(Figs. 18-19); with extra samples, the old vs new curves (Fig. 15); and the
fitted parameters of every method.

The warnings (:func:`diagnose`) are what a careful analyst checks first:
classes with few positives or without TP or FP, curves with many wiggles,
large extrapolated score ranges, and classes whose raw score is already
close to calibrated.
"""

from __future__ import annotations

import base64
import html
import itertools
import io
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._fileio import check_report_dir, report_dir
from ._version import __version__
from . import plots
from .calibrators import available_methods, get_class
from .data import TopLabelData
from .errors import DegenerateClassWarning, TopcalError
from .evaluate import METRICS, compare_methods, curve_findings, fit_methods, score_models

__all__ = [
    "build_report",
    "diagnose",
    "ReportResult",
    "Finding",
    "default_methods",
    "align_classes",
    "figure_png",
    "MIN_POSITIVES",
    "MAX_SIGN_CHANGES",
    "MAX_EXTRAPOLATED",
    "CLOSE_ECE1",
    "count_wiggles",
    "WIGGLE_AMPLITUDE",
]

#: A class with fewer positives than this gets a warning: its curve rests on
#: a handful of samples (the paper's MNIST runs had ~100 per class).
MIN_POSITIVES = 30
#: More slope sign changes than this inside the observed scores is "wiggly"
#: (kde-mon4 allows 4; more is usually noise, paper Fig. 13).
MAX_SIGN_CHANGES = 4
#: Warn when more than this share of the attainable score range lies outside
#: the class's observed scores (the curve there is extrapolated).
MAX_EXTRAPOLATED = 0.3
#: A class whose uncalibrated ECE1 is below this, with NLL within 10 % of the
#: best method, is "already close to calibrated" (paper Fig. 7).
CLOSE_ECE1 = 0.06
CLOSE_NLL_RATIO = 1.10
#: Step-function methods: their jumps are not wiggles.
_STEP_METHODS = {"hist", "cum", "cum-median", "cum-opt", "conf1", "uncalibrated"}
#: Methods drawn in the main curves figure when the user names none (paper Fig. 9).
_MAIN_CURVES = ("kde-mon2", "cum-opt")
_KDE_RULES = ("kde-mon", "kde-mon2", "kde-mon4", "kde-opt")
_DENSITY_PREFERENCE = ("kde-mon2", "kde-mon", "kde-mon4", "kde", "kde-opt")


@dataclass(frozen=True)
class Finding:
    """One warning of the report.

    Attributes
    ----------
    kind : str
        "never-predicted", "few-positives", "no-tp", "no-fp", "wiggles", "extrapolated",
        "already-calibrated", "overfit" or "skipped".
    text : str
        One line for the reader.
    class_name : str or None
    method : str or None
    """

    kind: str
    text: str
    class_name: str | None = None
    method: str | None = None


@dataclass
class ReportResult:
    """What :func:`build_report` wrote and found.

    Attributes
    ----------
    path : Path
        The ``index.html`` written.
    comparison : dict
        Metrics fitted and evaluated on the data (``compare_methods`` form).
    holdout : dict or None
        Metrics of the same fits on the second test set.
    findings : list of Finding
    figures : list of (str, Path)
        Title and PNG path of each figure.
    skipped : list of str
        Methods not run (they need full score vectors).
    """

    path: Path
    comparison: dict
    holdout: dict | None
    findings: list
    figures: list = field(default_factory=list)
    skipped: list = field(default_factory=list)


def default_methods(data: TopLabelData) -> list[str]:
    """Every registered method that can run on ``data``."""
    return [m for m in available_methods() if data.has_full or not get_class(m).needs_full]


def figure_png(fig, *, dpi: int = 90) -> bytes:
    """A matplotlib Figure as PNG bytes (Agg, no global state)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


# ------------------------------------------------------------------ checks
#: A change of direction counts as a wiggle only once the curve has moved
#: back by this much (confidence units): invisible ripples are not wiggles.
WIGGLE_AMPLITUDE = 0.01


def count_wiggles(y: np.ndarray, amplitude: float = WIGGLE_AMPLITUDE) -> int:
    """Changes of direction of ``y`` that reverse by at least ``amplitude`` (a zigzag count).

    A curve that rises, dips by 0.05 and rises again has 2; a monotone curve
    with ripples smaller than ``amplitude`` has 0.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.size < 2:
        return 0
    count, direction, hi, lo, ext = 0, 0, y[0], y[0], y[0]
    for v in y[1:]:
        if direction == 0:
            hi, lo = max(hi, v), min(lo, v)
            if v - lo >= amplitude:
                direction, ext = 1, v
            elif hi - v >= amplitude:
                direction, ext = -1, v
        elif direction == 1:
            if v > ext:
                ext = v
            elif ext - v >= amplitude:
                direction, ext, count = -1, v, count + 1
        else:
            if v < ext:
                ext = v
            elif v - ext >= amplitude:
                direction, ext, count = 1, v, count + 1
    return count


def diagnose(data: TopLabelData, models: dict, comparison: dict, holdout: dict | None = None, *,
             min_positives: float = MIN_POSITIVES, max_sign_changes: int = MAX_SIGN_CHANGES,
             max_extrapolated: float = MAX_EXTRAPOLATED, close_ece1: float = CLOSE_ECE1) -> list[Finding]:
    """The warnings of the report.

    Parameters
    ----------
    data : TopLabelData
        The fitting data.
    models : dict of str -> fitted Calibrator
    comparison : dict
        Metrics of ``models`` on ``data`` (:func:`topcal.evaluate.compare_methods` form).
    holdout : dict, optional
        Metrics of the same fits on a second test set.
    min_positives, max_sign_changes, max_extrapolated, close_ece1
        Thresholds (defaults: module constants).

    Returns
    -------
    list of Finding
        In the order: per-class data problems, wiggles, extrapolation,
        already-calibrated classes, overfitting seen on the second set.

    Notes
    -----
    The *attainable* score range of a class starts at lo + (hi - lo) / K:
    a top score (a maximum over K probabilities, or PhANNs' sum of ten) is
    never below that, so the empty region beneath it is not counted as
    extrapolation.
    """
    out: list[Finding] = []
    tp, fp = data.class_counts()
    lo, hi = data.score_range
    for k, c in enumerate(data.classes):
        n = tp[k] + fp[k]
        if n == 0:
            out.append(Finding("never-predicted", f"{c}: never predicted; every method falls back to the raw score.", c))
            continue
        if n < min_positives:
            out.append(Finding("few-positives", f"{c}: only {n:g} positives (TP {tp[k]:g}, FP {fp[k]:g}); its own "
                               "curve rests on a handful of samples (the shrunk defaults lean on the pooled curve "
                               "instead), treat it as a rough guess.", c))
        if tp[k] == 0:
            out.append(Finding("no-tp", f"{c}: no true positives; the paper's unshrunk estimators give every prediction "
                               "of this class confidence 0, the shrunk defaults borrow from the other classes.", c))
        elif fp[k] == 0:
            out.append(Finding("no-fp", f"{c}: no false positives (the test set cannot show its error rate); the "
                               "paper's unshrunk estimators give every prediction of this class confidence 1, the "
                               "shrunk defaults borrow from the other classes.", c))
    for name, m in models.items():
        if name in _STEP_METHODS or not plots.is_score_curve(m):
            continue
        for k, c in enumerate(data.classes):
            sup = data.class_support(k)
            if sup is None or sup[1] <= sup[0]:
                continue
            y = plots.model_curve(m, k, np.linspace(sup[0], sup[1], 513))
            n_ch = count_wiggles(y)
            if n_ch > max_sign_changes:
                out.append(Finding("wiggles", f"{name} on {c}: the curve changes direction {n_ch} times (by at least "
                                   f"{WIGGLE_AMPLITUDE:g}) inside the observed scores; it probably fits noise "
                                   "(compare kde-mon2).", c, name))
    att_lo = lo + (hi - lo) / max(data.n_classes, 1)
    span = hi - att_lo
    for k, c in enumerate(data.classes):
        sup = data.class_support(k)
        if sup is None or span <= 0:
            continue
        outside = max(0.0, sup[0] - att_lo) + max(0.0, hi - sup[1])
        share = outside / span
        if share > max_extrapolated:
            out.append(Finding("extrapolated", f"{c}: scores observed only in [{sup[0]:.3g}, {sup[1]:.3g}]; "
                               f"{share:.0%} of the attainable range [{att_lo:.3g}, {hi:.3g}] is extrapolated "
                               "(shaded in the figures).", c))
    res = comparison["methods"]
    if "uncalibrated" in res:
        uncal_nll = res["uncalibrated"]["nll"]["per_class"]
        uncal_ece = res["uncalibrated"]["ece1"]["per_class"]
        others = [m for m in res if m != "uncalibrated"]
        for c in data.classes:
            e, u = uncal_ece[c], uncal_nll[c]
            if e is None or u is None or not others:
                continue
            best = min(others, key=lambda m: np.inf if res[m]["nll"]["per_class"][c] is None
                       else res[m]["nll"]["per_class"][c])
            b = res[best]["nll"]["per_class"][c]
            if b is not None and e <= close_ece1 and u <= CLOSE_NLL_RATIO * b:
                out.append(Finding("already-calibrated", f"{c}: the uncalibrated score is already close to calibrated "
                                   f"(ECE1 {e:.3f}; NLL {u:.4f} vs best {b:.4f} by {best}); calibration gains little.",
                                   c, "uncalibrated"))
    if holdout is not None:
        for name, r in holdout["methods"].items():
            a = res.get(name, {}).get("nll", {}).get("overall")
            b = r["nll"]["overall"]
            if a is not None and a > 0 and b > 1.2 * a and name != "uncalibrated":
                out.append(Finding("overfit", f"{name}: NLL {a:.4f} on the fitting set but {b:.4f} on the second set "
                                   f"(+{b / a - 1:.0%}); part of its fit is noise.", None, name))
    return out


def align_classes(other: TopLabelData, data: TopLabelData, what: str = "the other data") -> TopLabelData:
    """``other`` re-expressed on ``data``'s class list (a file of extra samples may name only some classes).

    Top-score and binned data whose classes are a subset of ``data``'s are
    re-indexed; full score vectors must have exactly ``data``'s columns.

    Raises
    ------
    TopcalError
        When the labels are missing, the score ranges differ, or the classes
        cannot be matched.
    """
    other.require_labels(what)
    if other.score_range != data.score_range:
        raise TopcalError(f"{what} has score range {other.score_range} but the data has {data.score_range}; "
                          "declare the same --score-range for both")
    if other.classes == data.classes:
        return other
    unknown = [c for c in other.classes if c not in data.classes]
    if unknown or other.has_full:
        why = (f"classes {unknown} are not in the data" if unknown else
               "its score vectors have other columns than the data's")
        raise TopcalError(f"{what} must have the same classes as the data: {why} (data classes: {list(data.classes)})")
    return other.with_classes(data.classes, what)


# ----------------------------------------------------------------- figures
def _pick(preferred, fitted) -> list[str]:
    return [m for m in preferred if m in fitted]


#: Per-class figures show at most this many classes, those with the most positives: a figure of
#: thousands of panels (or a 10,000 x 10,000 confusion matrix) takes minutes and gigabytes and shows nothing.
MAX_FIGURE_CLASSES = 24


def figure_classes(data: TopLabelData) -> np.ndarray | None:
    """Indices of the classes the per-class figures show (None: all of them), in class order."""
    if data.n_classes <= MAX_FIGURE_CLASSES:
        return None
    tp, fp = data.class_counts()
    return np.sort(np.argsort(-(tp + fp), kind="stable")[:MAX_FIGURE_CLASSES])


def _joint_view(data: TopLabelData, keep: np.ndarray) -> TopLabelData:
    """Rows predicted as a kept class; true classes outside them pooled into one '(other classes)' class."""
    mapping = np.full(data.n_classes, keep.size, dtype=np.int64)
    mapping[keep] = np.arange(keep.size)
    sub = data.subset(np.isin(data.pred, keep))
    labels = None if sub.labels is None else mapping[sub.labels]
    names = tuple(data.classes[k] for k in keep)
    if labels is not None and np.any(labels == keep.size):
        other = "(other classes)"
        while other in data.classes:
            other += "*"
        names += (other,)
    return TopLabelData(names, mapping[sub.pred], sub.score, sub.score_range, tp=sub.tp, fp=sub.fp, labels=labels,
                        bin_edges=sub.bin_edges)


def _comparison_view(comparison: dict, names) -> dict:
    """``comparison`` with per-class values of the classes ``names`` only."""
    methods = {m: {x: {"overall": v["overall"], "per_class": {c: v["per_class"][c] for c in names}}
                   for x, v in metrics.items()} for m, metrics in comparison["methods"].items()}
    return {**comparison, "methods": methods}


def _figures(data, models, comparison, eval_data, holdout, extra, methods_given, log):
    """Yield (key, title, caption, Figure) for every figure that applies."""
    curve_models = {n: m for n, m in models.items() if plots.is_score_curve(m)}
    other_models = {n: m for n, m in models.items() if not plots.is_score_curve(m)}
    only = figure_classes(data)
    few = ""
    if only is not None:
        few = (f" Only the {only.size} largest classes (most positives) of {data.n_classes} are shown; the tables "
               "list every class.")
        names = [data.classes[k] for k in only]
        comparison = _comparison_view(comparison, names)
        holdout = None if holdout is None else _comparison_view(holdout, names)

    log("figure: joint distribution")
    jd = plots.joint_distribution(data if only is None else _joint_view(data, only))
    cap = ("Joint distribution of true and predicted class; the reverse confusion matrix (columns normalised) has "
           "Conf1 on its diagonal." if jd.counts is not None else
           "Binned data records no true class for false positives, so only the positives per predicted class and "
           "Conf1 = |TP| / |P| are shown.")
    if only is not None:
        cap += (f" Only rows predicted as the {only.size} largest classes of {data.n_classes}; every other true "
                "class is pooled.")
    yield "joint", "Joint distribution (paper Fig. 1)", cap, plots.plot_joint_distribution(jd)

    if methods_given:
        main = [n for n in models if n not in ("uncalibrated",)]
        main_score = {n: m for n, m in curve_models.items() if n in main}
    else:
        main_score = {n: curve_models[n] for n in _pick(_MAIN_CURVES, curve_models)}
        if not main_score:
            main_score = {n: m for n, m in curve_models.items() if n not in ("uncalibrated", "conf1")}
    log("figure: calibration curves")
    grid = plots.calibration_curves(data, main_score, only=only)
    yield ("curves", "Calibration curves per class (paper Figs. 3, 7, 9)",
           "Bars: Conf_Hist with 10 equal-width bins (hatched, dashed: fewer than 10 positives, or the lowest bin). "
           "Dashed diagonal: the uncalibrated score. Grey: scores outside the class's observed ones, where every "
           "curve is extrapolated." + few,
           plots.plot_calibration_curves(grid))
    rules = _pick(_KDE_RULES, curve_models)
    if len(rules) >= 2 and set(rules) != set(main_score):
        log("figure: KDE bandwidth rules")
        grid = plots.calibration_curves(data, {n: curve_models[n] for n in rules}, only=only)
        yield ("kde-rules", "KDE bandwidth rules (paper Figs. 13, 14)",
               "b_mon (monotone), b_mon2 (at most two slope sign changes, the paper's choice), b_mon4 and the "
               "leave-one-out b_opt. Smaller bandwidths follow the data more closely, and its noise too." + few,
               plots.plot_calibration_curves(grid))
    binary = _pick(("btswa", "bts"), curve_models)
    if binary and not methods_given:
        log("figure: binary temperature scaling")
        grid = plots.calibration_curves(data, {n: curve_models[n] for n in binary}, only=only)
        yield ("binary-ts", "Binary temperature scaling of the top score",
               "bts: sigmoid(logit(s) / T_k); btswa adds an award A_k. Two parameters per class at most: a smooth "
               "S-shape that cannot follow a non-monotone histogram." + few, plots.plot_calibration_curves(grid))
    dens = _pick(_DENSITY_PREFERENCE, curve_models)
    if dens:
        name = dens[0]
        log(f"figure: kernel densities ({name})")
        panels = plots.kde_densities(data, curve_models[name], only=only)
        if any(p is not None for p in panels):
            extra_cap = (" Black dotted: the k-th score of every sample not predicting k; red: the 'diluted' confidence "
                         "that counts them as negatives (paper Fig. 6)." if data.has_full and data.labels is not None
                         else "")
            yield ("densities", f"Kernel densities behind {name} (paper Figs. 5, 6)",
                   "Left of each pair: the TP (green) and FP (orange) weighted kernel sums; right: their ratio "
                   f"Conf_KDE over the histogram.{extra_cap}{few}", plots.plot_kde_densities(panels))
    for name, m in other_models.items():
        log(f"figure: clouds ({name})")
        panels = plots.ts_clouds(data, m, only=only)
        what = ("score vs recalibrated ŷ_k of every positive: a temperature sends one score to different values "
                "depending on how the rest of the probability is split (paper Figs. 10-12).")
        yield (f"clouds-{name}", f"{name}: recalibrated confidence per class",
               f"{what} Bars: Conf_Hist for reference.{few}",
               plots.plot_ts_clouds(panels, method=name))
    log("figure: NLL bars")
    yield ("nll", "NLL per class and method (paper Fig. 17)",
           "Mean top-label negative log-likelihood per positive, fitted and evaluated on the same data (lower is "
           "better)." + few, plots.plot_method_bars(plots.method_scores(comparison, "nll")))
    if eval_data is not None and holdout is not None:
        log("figure: second test set")
        yield ("overlay", "Histograms of the two test sets (paper Fig. 4)",
               "Conf_Hist per class on the fitting set (black) and the second set (red, dashed); their differences "
               "are noise the calibration cannot know about.",
               plots.plot_histogram_overlay(plots.histogram_overlay(data, eval_data,
                                                                    labels=("fitting set", "second set"),
                                                                    only=only)))
        yield ("paired", "Fitted on the first set, evaluated on both (paper Figs. 18, 19)",
               "Overall NLL per method on the fitting set (left) and the second set (right). A method far worse on "
               "the second set has fitted noise.",
               plots.plot_paired_bars(plots.paired_scores(comparison, holdout, "nll",
                                                          labels=("fitting set", "second set"))))
    if extra is not None:
        method = next(iter(_pick(("kde-mon2", "kde-mon", "kde", "hist"), curve_models)), None)
        method = method or next(iter(curve_models), None) or "hist"
        log(f"figure: added samples ({method})")
        used, panels = plots.added_samples_effect(data, extra, method, only=only)
        if panels:
            yield ("added", f"Effect of the added samples on {used} (paper Fig. 15)",
                   "Each class the extra file predicts: the curve fitted on the original data (black) and on the data "
                   "plus the extra samples (red). With one fixed bandwidth, adding only true positives can only raise "
                   "Conf_KDE (paper Fig. 15); a bandwidth rule may pick a new b for the larger data.",
                   plots.plot_added_samples(used, panels))


# -------------------------------------------------------------------- html
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1180px;padding:1.2em 1.6em;
color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;font-size:.86em;margin:.6em 0} th,td{padding:.2em .55em;border-bottom:1px solid #e4e4e4;
text-align:right} th:first-child,td:first-child{text-align:left} thead th{background:#f3f3f3}
td.best{font-weight:700;color:#0a5} figure{margin:1.2em 0} figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#555;margin-top:.3em} .warn li{margin:.15em 0} .muted{color:#777;font-size:.9em}
details{margin:.5em 0} summary{cursor:pointer;font-weight:600} code{background:#f4f4f4;padding:0 .2em}
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


def _metric_table(comparison: dict, classes, metric: str | None = None) -> str:
    methods = list(comparison["methods"])
    if metric is None:  # overall: methods as rows, metrics as columns
        vals = {m: [comparison["methods"][m][x]["overall"] for x in METRICS] for m in methods}
        best = [min(vals[m][j] for m in methods) for j in range(len(METRICS))]
        rows = "".join(
            f"<tr><td>{html.escape(m)}</td>" + "".join(
                f"<td class='{'best' if np.isclose(v, best[j], rtol=1e-9, atol=1e-12) else ''}'>{_fmt(v)}</td>"
                for j, v in enumerate(vals[m])) + "</tr>" for m in methods)
        head = "<tr><th>method</th>" + "".join(f"<th>{x.upper()}</th>" for x in METRICS) + "</tr>"
        return f"<div class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>"
    head = "<tr><th>class</th>" + "".join(f"<th>{html.escape(m)}</th>" for m in methods) + "</tr>"
    body = []
    for c in list(classes) + ["overall"]:
        vals = [comparison["methods"][m][metric]["overall"] if c == "overall"
                else comparison["methods"][m][metric]["per_class"][c] for m in methods]
        finite = [v for v in vals if v is not None]
        b = min(finite) if finite else None
        cells = "".join(
            f"<td class='{'best' if v is not None and b is not None and np.isclose(v, b, rtol=1e-9, atol=1e-12) else ''}'>"
            f"{_fmt(v)}</td>" for v in vals)
        name = f"<b>{html.escape(c)}</b>" if c == "overall" else html.escape(c)
        body.append(f"<tr><td>{name}</td>{cells}</tr>")
    return f"<div class='scroll'><table><thead>{head}</thead><tbody>{''.join(body)}</tbody></table></div>"


_PARAM_SKIP = {"tp", "fp", "n_tp", "n_fp", "edges", "engine", "kernel_centres", "table_points", "candidate_range",
               "n_distinct_scores"}


def _count(info: dict, which: str):
    """|TP_k| or |FP_k| from a describe() class entry (keys n_tp/n_fp; older models: tp/fp scalars)."""
    v = info.get(f"n_{which}", info.get(which))
    return v if isinstance(v, (int, float)) else None


def _params_html(name: str, model) -> str:
    try:
        d = model.describe()
    except Exception as exc:  # describe is informative only; never lose the report over it
        return f"<p class='muted'>{html.escape(name)}: parameters unavailable ({html.escape(str(exc))})</p>"
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
    head = "<tr><th>class</th><th>TP</th><th>FP</th>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
    rows = "".join(
        f"<tr><td>{html.escape(c)}</td><td>{_fmt(_count(info, 'tp'))}</td><td>{_fmt(_count(info, 'fp'))}</td>"
        + "".join(f"<td>{_fmt(info.get(col))}</td>" for col in cols) + "</tr>" for c, info in classes.items())
    table = f"<div class='scroll'><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>" if cols else ""
    summary = html.escape(getattr(type(model), "summary", ""))
    return (f"<details><summary>{html.escape(name)}</summary><p class='muted'>{summary}</p>"
            f"<p>{'<br>'.join(top)}</p>{table}</details>")


def _data_summary(data: TopLabelData, label: str) -> str:
    form = "binned counts" if data.is_binned else "per-sample"
    full = f", full score vectors ({data.full_kind})" if data.has_full else ", top scores only"
    tp, fp = data.class_counts()
    return (f"<p><b>{html.escape(label)}</b>: {data.n_samples:,.0f} samples ({form}{full}), {data.n_classes} classes, "
            f"score range {data.score_range[0]:g}–{data.score_range[1]:g}; {tp.sum():,.0f} correct "
            f"(accuracy {tp.sum() / max(tp.sum() + fp.sum(), 1):.3f}).</p>")


def _protocol_html(comparison: dict) -> str:
    if comparison["protocol"] == "kfold":
        return (f"<b>out of sample</b>: {comparison['folds']}-fold cross-fitting (every sample scored by a model "
                "fitted without it). The figures show the fits on all the data.")
    return ("<b>fitted and evaluated on the same data</b> (the paper's practice, <code>--in-sample</code>): "
            "optimistic for flexible methods; rank methods out of sample instead (the default).")


def _label_shift_figures(adapted):
    """Yield the label-shift figure of an adapted model (none without one)."""
    if adapted is None:
        return
    from .labelshift_plots import label_shift_view, plot_label_shift

    caption = ("Top: class priors of the test set and of the use set (with the bootstrap interval when estimated). "
               "Below: confidence curves of the classes that moved most, before (test-set priors) and after "
               "adaptation (use-set priors), assuming p(x | y) is unchanged (docs/label_shift.md).")
    yield ("label-shift", f"Label shift: {adapted.base_.name} adapted to the use set's priors", caption,
           plot_label_shift(label_shift_view(adapted)))


# -------------------------------------------------------------------- main
def build_report(data: TopLabelData, out_dir, *, eval_data: TopLabelData | None = None, methods=None,
                 extra: TopLabelData | None = None, title: str = "topcal calibration report",
                 data_label: str = "data", dpi: int = 90, progress=None, folds: int | None = 5,
                 seed: int = 0, params: dict | None = None,
                 force: bool = False, adapted=None) -> ReportResult:
    """Fit methods on ``data`` and write the visual check to ``out_dir/index.html``.

    Parameters
    ----------
    data : TopLabelData (labelled)
        The data to calibrate on (the paper's "test set").
    out_dir : str or Path
        Folder to write: new, empty, or made by an earlier topcal report (it
        holds the marker file ``.topcal-report``), which is then replaced as a
        whole. The report is built beside it and swapped in at the end, so an
        interrupted run leaves the old folder unchanged.
    eval_data : TopLabelData, optional
        A second labelled test set: methods fitted on ``data`` are also
        evaluated on it, and Figs. 4, 18-19 are added.
    methods : sequence of str, optional
        Methods to fit (default: every registered method that can run on
        ``data``; those needing full score vectors are skipped when absent).
    extra : TopLabelData, optional
        Extra labelled samples to append (paper Fig. 15): curves fitted with
        and without them are compared.
    title : str
    data_label : str
        Name of the data shown on the page (e.g. the file name).
    dpi : int, default 90
        Resolution of the PNGs.
    progress : callable(str), optional
        Called with a short message at each step (the CLI prints them).
    folds : int or None, default 5
        Rank methods by K-fold cross-fitting within ``data`` (out of sample:
        every sample is scored by a model fitted without it). None: fit and
        evaluate on the same data (the paper's practice), labelled as such.
    seed : int, default 0
        Seed of the fold split.
    params : dict, optional
        ``{method: {parameter: value}}``.
    force : bool, default False
        Also write into a folder holding other files: ``index.html`` and
        ``figures/`` are replaced, files topcal did not write are kept.
    adapted : AdaptedCalibrator, optional
        A model adapted to a use set's priors (``topcal adapt``): adds the
        label-shift panel (source vs use priors, curves before and after).

    Returns
    -------
    ReportResult
    """
    t0 = time.perf_counter()

    def log(msg):
        if progress is not None:
            progress(msg)

    data.require_labels("a calibration report")
    if adapted is not None and tuple(getattr(adapted, "classes_", ())) != tuple(data.classes):
        raise TopcalError(f"the adapted model's classes {list(getattr(adapted, 'classes_', ()))} differ from the "
                          f"data's {list(data.classes)}; adapt a model fitted on this data")
    check_report_dir(out_dir, force)  # refuse early, before minutes of fitting
    if eval_data is not None:
        eval_data = align_classes(eval_data, data, "the second test set (--eval)")
    if extra is not None:
        extra = align_classes(extra, data, "the extra samples (--add)")
    if extra is not None and (extra.is_binned != data.is_binned or extra.has_full != data.has_full
                              or extra.full_kind != data.full_kind):
        raise TopcalError("the extra samples (--add) must be in the same form as the data (binned or per-sample, "
                          "with or without full score vectors)")
    methods_given = methods is not None
    names = default_methods(data) if methods is None else list(methods)
    if "uncalibrated" not in names:
        names = ["uncalibrated"] + names  # the baseline every table and warning compares against
    diag: dict = {}
    models, skipped = fit_methods(data, names, params=params, progress=log, diagnostics=diag)
    if eval_data is not None:
        need = [n for n, m in models.items() if getattr(m, "needs_full", False) and not eval_data.has_full]
        for n in need:
            models.pop(n)
            skipped.append(n)
    if folds is None:
        log("evaluating on the fitting data")
        comparison = {"protocol": "same", "folds": None, "skipped": skipped,
                      "methods": score_models(models, data)}
    else:
        comparison = compare_methods(data, list(models), folds=folds, seed=seed, params=params,
                                     progress=lambda msg: log(f"cross-fitting: {msg}"))
        for n, msg in comparison["failed"].items():
            diag["failed"][n] = msg
        comparison["skipped"] = skipped
    holdout = None
    if eval_data is not None:
        holdout = {"protocol": "holdout", "folds": None, "skipped": skipped,
                   "methods": score_models(models, eval_data)}
    findings = diagnose(data, models, comparison, holdout)
    for n, msg in diag["failed"].items():
        findings.append(Finding("failed", f"{n} failed and is left out: {msg}", None, n))
    for n, m in models.items():
        for msg in curve_findings(n, m, data):
            findings.append(Finding("certainty", msg, None, n))
    seen = set()
    for n, msgs in list(diag["warnings"].items()) + list(comparison.get("warnings", {}).items()):
        for msg in msgs:
            if msg not in seen and "reaches confidence 0 or 1" not in msg and "smallest candidate" not in msg:
                seen.add(msg)
                findings.append(Finding("fit-warning", msg, None, None if n == "data" else n))
    if skipped:
        findings.append(Finding("skipped", "not run (they need full score vectors, which this data lacks): "
                                + ", ".join(skipped) + "."))

    with report_dir(out_dir, force) as stage:
        (stage / "figures").mkdir()
        fig_html, fig_list, toc, body = _write_pages(
            stage, Path(out_dir), data, models, comparison, eval_data, holdout, extra, methods_given, findings,
            skipped, title, data_label, dpi, t0, log, adapted)
    path = Path(out_dir) / "index.html"
    return ReportResult(path, comparison, holdout, findings, fig_list, skipped)


def _write_pages(stage, out, data, models, comparison, eval_data, holdout, extra, methods_given, findings, skipped,
                 title, data_label, dpi, t0, log, adapted):
    """Write figures/ and index.html into ``stage``; figure paths are given as they will be under ``out``."""
    fig_html, fig_list, toc = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        for i, (key, ftitle, caption, fig) in enumerate(
                itertools.chain(_figures(data, models, comparison, eval_data, holdout, extra, methods_given, log),
                                _label_shift_figures(adapted)), 1):
            png = figure_png(fig, dpi=dpi)
            name = f"figures/{i:02d}-{key}.png"
            (stage / name).write_bytes(png)
            fig_list.append((ftitle, out / name))
            toc.append(f"<li><a href='#fig-{key}'>{html.escape(ftitle)}</a></li>")
            uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            fig_html.append(
                f"<figure id='fig-{key}'><h3>{i}. {html.escape(ftitle)}</h3>"
                f"<img src='{uri}' alt='{html.escape(ftitle)}'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    log("writing HTML")
    warn_html = ("<ul class='warn'>" + "".join(f"<li>{html.escape(f.text)}</li>" for f in findings) + "</ul>"
                 if findings else "<p>No warnings.</p>")
    per_class = "".join(
        f"<details{' open' if m == 'nll' else ''}><summary>{m.upper()} per class</summary>"
        f"{_metric_table(comparison, data.classes, m)}</details>" for m in METRICS)
    hold_html = ""
    if holdout is not None:
        hold_html = (f"<h3>Evaluated on the second test set</h3>{_data_summary(eval_data, 'second test set')}"
                     f"{_metric_table(holdout, data.classes)}"
                     + "".join(f"<details><summary>{m.upper()} per class (second set)</summary>"
                               f"{_metric_table(holdout, data.classes, m)}</details>" for m in METRICS))
    params = "".join(_params_html(n, m) for n, m in models.items() if n != "uncalibrated")
    extra_html = _data_summary(extra, "extra samples (--add)") if extra is not None else ""
    body = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="muted">topcal {__version__} · {time.strftime('%Y-%m-%d %H:%M')} · methods: {html.escape(', '.join(models))}</p>
{_data_summary(data, data_label)}{extra_html}
<p>Calibration should be sanity-checked visually: look at every panel before trusting a method
(Salamon et al., section 12).</p>
<h2>Warnings</h2>{warn_html}
<h2>Metrics</h2>
<p class="muted">Top-label NLL and Brier per positive, ECE1/ECE2 with 10 bins; {_protocol_html(comparison)}
Best per column in bold green.</p>
{_metric_table(comparison, data.classes)}{per_class}{hold_html}
<h2>Figures</h2><ol class="muted">{''.join(toc)}</ol>{''.join(fig_html)}
<h2>Fitted parameters</h2>{params}
<p class="muted">Report written in {time.perf_counter() - t0:.1f} s.</p>
</body></html>
"""
    (stage / "index.html").write_text(body, encoding="utf-8")
    return fig_html, fig_list, toc, body
