"""Building the report: fit, score, check, draw and write ``DIR/index.html``
(:func:`build_report`)."""

from __future__ import annotations

import base64
import html
import itertools
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from .._fileio import check_report_dir, report_dir
from .._typing import ArrayLike, PathLike
from .._tables import printable
from .._version import __version__
from ..calibrators import available_methods, get_class
from ..calibrators.registry import BASELINE
from ..data import TopLabelData, preview
from ..errors import DegenerateClassWarning, TopcalError
from ..evaluate import (
    METRICS,
    Comparison,
    compare_methods,
    curve_findings,
    fit_methods,
    score_models,
)
from .checks import Finding, align_classes, diagnose
from .classes import check_classes
from .figures import acceptance_figures, figure_png, label_shift_figures, report_figures
from .focus import focused_fits, model_in_use
from .page import (
    CSS,
    data_summary,
    headline_html,
    metric_table,
    table_classes,
    params_html,
    protocol_html,
    warnings_html,
)

__all__ = [
    "build_report",
    "ReportResult",
    "default_methods",
    "ALL",
]

#: ``methods=ALL`` (``--methods all``): every method that can run on the data, cross-fitted
#: (auto nested, with its inner cross-validation in every fold), as the report did by
#: default before.
ALL = "all"


@dataclass
class ReportResult:
    """What :func:`build_report` wrote and found.

    Attributes
    ----------
    path : Path
        The ``index.html`` written.
    comparison : Comparison
        Metrics fitted and evaluated on the data (as ``compare_methods`` returns them).
    holdout : Comparison or None
        Metrics of the same fits on the second test set.
    findings : list of Finding
    figures : list of (str, Path)
        Title and PNG path of each figure.
    skipped : list of str
        Methods not run (they need full score vectors).
    focus : str or None
        The model the report is about (``auto`` where fitted, else the first method other
        than the baseline): its warnings come first.
    """

    path: Path
    comparison: Comparison
    holdout: Comparison | None
    findings: list
    figures: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    focus: str | None = None


def default_methods(data: TopLabelData) -> list[str]:
    """Every registered method that can run on ``data``."""
    return [m for m in available_methods() if data.has_full or not get_class(m).needs_full]


def build_report(
    data: TopLabelData,
    out_dir: PathLike,
    *,
    eval_data: TopLabelData | None = None,
    methods: Sequence[str] | str | None = None,
    extra: TopLabelData | None = None,
    title: str = "topcal calibration report",
    data_label: str = "data",
    dpi: int = 90,
    progress: Any = None,
    folds: int | None = 5,
    seed: int = 0,
    params: dict | None = None,
    force: bool = False,
    adapted: Any = None,
    thresholds: Any = None,
    classes: ArrayLike | None = None,
) -> ReportResult:
    """Fit methods on ``data`` and write the visual check to ``out_dir/index.html``.

    Parameters
    ----------
    data : TopLabelData (labelled)
        The data to calibrate on (the paper's "test set").
    out_dir : str or Path
        Folder to write: new, empty, or made by an earlier topcal report (it holds the
        marker file ``.topcal-report``), which is then replaced as a whole. The report is
        built beside it and swapped in at the end, so an interrupted run leaves the old
        folder unchanged.
    eval_data : TopLabelData, optional
        A second labelled test set: methods fitted on ``data`` are also evaluated on it, and
        Figs. 4, 18-19 are added.
    methods : sequence of str or "all", optional
        Methods to fit, each cross-fitted (those needing full score vectors are skipped when
        absent); ``"all"`` (:data:`ALL`): every registered method that can run on ``data``.
        Default: what the user decides about (:mod:`~topcal.report.focus`): ``auto`` on all
        the data, its own cross-validation reused as the out-of-sample table of its
        candidates, the uncalibrated baseline and ``auto``'s best other candidates
        (:data:`~topcal.report.focus.PEERS`), nothing cross-fitted again.
    extra : TopLabelData, optional
        Extra labelled samples to append (paper Fig. 15): curves fitted with and without
        them are compared.
    title : str
    data_label : str
        Name of the data shown on the page (e.g. the file name).
    dpi : int, default 90
        Resolution of the PNGs.
    progress : callable(str), optional
        Called with a short message at each step (the CLI prints them).
    folds : int or None, default 5
        Rank methods by K-fold cross-fitting within ``data`` (out of sample: every sample is
        scored by a model fitted without it). None: fit and evaluate on the same data (the
        paper's practice), labelled as such.
    seed : int, default 0
        Seed of the fold split.
    params : dict, optional
        ``{method: {parameter: value}}``.
    force : bool, default False
        Also write into a folder holding other files: ``index.html`` and ``figures/`` are
        replaced, files topcal did not write are kept.
    adapted : AdaptedCalibrator, optional
        A model adapted to a use set's priors (``topcal adapt``): adds the label-shift panel
        (source vs use priors, curves before and after).
    thresholds : (Calibrator, Thresholds), optional
        A model and the thresholds chosen for it
        (:func:`topcal.thresholds.core.fit_thresholds`): adds the acceptance panel (per
        class, accepted fraction against precision on ``data``, with the cut-off marked).
    classes : sequence of str, optional
        The classes the per-class figures show (``--classes``): class names and ``worst:N``
        (the model in use's largest total out-of-sample NLL excess over the uncalibrated
        score), ``most:N`` (the most positives); default: all up to 24 classes, else the 24
        with the most positives (:func:`~topcal.report.classes.choose_classes`).

    Returns
    -------
    ReportResult
    """
    t0 = time.perf_counter()

    def log(msg):
        if progress is not None:
            progress(msg)

    eval_data, extra = _checked_inputs(
        data, out_dir, force, eval_data, extra, adapted, thresholds, classes
    )
    focused = methods is None
    every = isinstance(methods, str) and methods == ALL
    if isinstance(methods, str) and not every:
        methods = [methods]
    diag: dict = {}
    models, comparison, skipped, note = _fit_and_compare(
        data, methods, every, eval_data, folds, seed, params, log, diag
    )
    focus = model_in_use(models)
    holdout = None
    if eval_data is not None:
        holdout = Comparison(
            "holdout", methods=score_models(models, eval_data), skipped=skipped
        )
    findings = _findings(data, models, comparison, holdout, diag, skipped, focused)
    page = _Page(
        data=data,
        models=models,
        comparison=comparison,
        eval_data=eval_data,
        holdout=holdout,
        extra=extra,
        methods_given=not (focused or every),
        findings=findings,
        title=title,
        data_label=data_label,
        dpi=dpi,
        t0=t0,
        log=log,
        adapted=adapted,
        thresholds=thresholds,
        classes=classes,
        focus=focus,
        note=note,
        focused=focused,
    )
    with report_dir(out_dir, force) as stage:
        (stage / "figures").mkdir()
        fig_list = _write_pages(stage, Path(out_dir), page)
    path = Path(out_dir) / "index.html"
    return ReportResult(path, comparison, holdout, findings, fig_list, skipped, focus)


def _checked_inputs(data, out_dir, force: bool, eval_data, extra, adapted, thresholds, classes):
    """:func:`build_report`'s checks before any fitting; ``(eval_data, extra)`` on the data's
    classes."""
    data.require_labels("a calibration report")
    if adapted is not None and tuple(adapted.classes_) != tuple(data.classes):
        raise TopcalError(
            f"the adapted model's classes {preview(adapted.classes_)} differ from the "
            f"data's {preview(data.classes)}; adapt a model fitted on this data"
        )
    if thresholds is not None:
        model_t, th = thresholds
        th.check_model(model_t)
        data.with_classes(
            model_t.classes_, "the data"
        )  # classes the model does not know: fail before fitting
    check_report_dir(out_dir, force)  # refuse early, before minutes of fitting
    check_classes(classes, data)
    if eval_data is not None:
        eval_data = align_classes(eval_data, data, "the second test set (--eval)")
    if extra is not None:
        extra = align_classes(extra, data, "the extra samples (--add)")
    if extra is not None and (
        extra.is_binned != data.is_binned
        or extra.has_full != data.has_full
        or extra.full_kind != data.full_kind
    ):
        raise TopcalError(
            "the extra samples (--add) must be in the same form as the data (binned or "
            "per-sample, with or without full score vectors)"
        )
    return eval_data, extra


def _fit_and_compare(data, methods, every: bool, eval_data, folds, seed, params, log, diag):
    """The report's fits and metric table: ``(models, comparison, skipped, note)``;
    ``methods`` None: the focused default (:func:`focused_fits`); ``diag`` filled as
    :func:`fit_methods` fills it."""
    focused = methods is None
    note = ""
    if focused:
        models, comparison, note = focused_fits(
            data, folds=folds, seed=seed, params=params, progress=log, diagnostics=diag
        )
        skipped: list = []
    else:
        names = default_methods(data) if every else list(methods)
        if BASELINE not in names:
            names = [BASELINE] + names  # the baseline every table and warning compares against
        models, skipped = fit_methods(
            data, names, params=params, progress=log, diagnostics=diag
        )
    if eval_data is not None:
        need = [n for n, m in models.items() if m.needs_full and not eval_data.has_full]
        for n in need:
            models.pop(n)
            skipped.append(n)
    if focused:
        comparison = replace(comparison, skipped=skipped)
    elif folds is None:
        log("evaluating on the fitting data")
        comparison = Comparison("same", methods=score_models(models, data), skipped=skipped)
    else:
        comparison = compare_methods(
            data,
            list(models),
            folds=folds,
            seed=seed,
            params=params,
            progress=lambda msg: log(f"cross-fitting: {msg}"),
        )
        diag["failed"].update(comparison.failed)
        comparison = replace(comparison, skipped=skipped)
    return models, comparison, skipped, note


def _findings(data, models, comparison, holdout, diag, skipped, focused: bool) -> list:
    """The report's warnings: :func:`diagnose`'s, then failed fits, curves at 0 or 1, what
    the fits warned about (once each) and the methods skipped."""
    findings = diagnose(data, models, comparison, holdout)
    for n, msg in diag["failed"].items():
        findings.append(Finding("failed", f"{n} failed and is left out: {msg}", None, n))
    for n, m in models.items():
        for msg in curve_findings(n, m, data):
            findings.append(Finding("certainty", msg, None, n))
    seen = set()
    for n, msgs in list(diag["warnings"].items()) + list(comparison.warnings.items()):
        for msg in msgs:
            if (
                msg not in seen
                and "reaches confidence 0 or 1" not in msg
                and "smallest candidate" not in msg
            ):
                seen.add(msg)
                findings.append(Finding("fit-warning", msg, None, None if n == "data" else n))
    if skipped and not focused:
        findings.append(
            Finding(
                "skipped",
                "not run (they need full score vectors, which this data lacks): "
                + ", ".join(skipped)
                + ".",
            )
        )
    return findings


@dataclass(frozen=True)
class _Page:
    """What the report's page shows (:func:`_write_pages`): the data, the fits and their
    tables, the findings, the page's settings, and the view: the classes shown
    (``--classes``), the model in use, the protocol's note, whether it is the focused
    default."""

    data: TopLabelData
    models: dict
    comparison: Comparison
    eval_data: TopLabelData | None
    holdout: Comparison | None
    extra: TopLabelData | None
    methods_given: bool
    findings: list
    title: str
    data_label: str
    dpi: int
    t0: float
    log: Any
    adapted: Any
    thresholds: Any
    classes: Any
    focus: str | None
    note: str
    focused: bool


def _write_pages(stage, out, page: _Page) -> list:
    """Write figures/ and index.html into ``stage``; return the figures' (title, path), the
    paths as they will be under ``out``."""
    fig_html, fig_list, toc = _write_figures(stage, out, page)
    page.log("writing HTML")
    body = _page_html(page, fig_html, toc)
    # control characters (a class name's escape sequence, NUL, bidi overrides) are no HTML
    # text: shown escaped, as the command line shows them (\x1b)
    body = printable(body, keep="\n\t")
    (stage / "index.html").write_text(body, encoding="utf-8")
    return fig_list


def _write_figures(stage, out, page: _Page):
    """Draw every figure into ``stage``/figures: ``(figure HTML, (title, path) list, table of
    contents entries)``."""
    main = None
    if page.focused:  # auto and its peers: the curves of what the user decides about
        main = [n for n, m in page.models.items() if not m.is_baseline]
    fig_html, fig_list, toc = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateClassWarning)
        for i, (key, ftitle, caption, fig) in enumerate(
            itertools.chain(
                report_figures(
                    page.data,
                    page.models,
                    page.comparison,
                    page.eval_data,
                    page.holdout,
                    page.extra,
                    page.methods_given,
                    page.log,
                    classes=page.classes,
                    focus=page.focus,
                    main=main,
                ),
                label_shift_figures(page.adapted),
                acceptance_figures(page.data, page.thresholds),
            ),
            1,
        ):
            png = figure_png(fig, dpi=page.dpi)
            name = f"figures/{i:02d}-{key}.png"
            (stage / name).write_bytes(png)
            fig_list.append((ftitle, out / name))
            toc.append(f"<li><a href='#fig-{key}'>{html.escape(ftitle)}</a></li>")
            uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            fig_html.append(
                f"<figure id='fig-{key}'><h3>{i}. {html.escape(ftitle)}</h3>"
                f"<img src='{uri}' alt='{html.escape(ftitle)}'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    return fig_html, fig_list, toc


def _page_html(page: _Page, fig_html: list, toc: list) -> str:
    """index.html's text (control characters not yet escaped)."""
    data, models, comparison, holdout = page.data, page.models, page.comparison, page.holdout
    findings, focus, title = page.findings, page.focus, page.title
    warn_html = warnings_html(findings, focus)
    shown = table_classes(data)
    listed = (
        f"{data.n_classes} classes"
        if len(shown) == data.n_classes
        else f"the {len(shown):,} of {data.n_classes:,} classes predicted most often"
    )
    per_class = "".join(
        f"<details><summary>{m.upper()} per class ({listed})</summary>"
        f"{metric_table(comparison, shown, m)}</details>"
        for m in METRICS
    )
    hold_html = ""
    if holdout is not None:
        hold_html = (
            f"<h3>Evaluated on the second test set</h3>"
            f"{data_summary(page.eval_data, 'second test set')}"
            f"{metric_table(holdout, data.classes)}"
            + "".join(
                f"<details><summary>{m.upper()} per class (second set)</summary>"
                f"{metric_table(holdout, shown, m)}</details>"
                for m in METRICS
            )
        )
    params = "".join(params_html(n, m, shown) for n, m in models.items() if not m.is_baseline)
    extra = page.extra
    extra_html = data_summary(extra, "extra samples (--add)") if extra is not None else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{html.escape(title)}</title><style>{CSS}</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="muted">topcal {__version__} · {time.strftime("%Y-%m-%d %H:%M")} ·
methods: {html.escape(", ".join(models))}</p>
{data_summary(data, page.data_label)}{extra_html}
{headline_html(models, comparison, focus, holdout, findings)}
<p>Calibration should be sanity-checked visually: look at every panel before trusting a method
(Salamon et al., section 12).</p>
<h2>Metrics</h2>
<p class="muted">Top-label NLL and Brier per positive, ECE1/ECE2 with 10 bins;
{page.note or protocol_html(comparison)}
Best per column in bold green.</p>
{metric_table(comparison, data.classes)}{per_class}{hold_html}
<h2 id="warnings">Warnings ({len(findings)})</h2>{warn_html}
<h2>Figures</h2><ol class="muted">{"".join(toc)}</ol>{"".join(fig_html)}
<h2>Fitted parameters</h2>{params}
<p class="muted">Report written in {time.perf_counter() - page.t0:.1f} s.</p>
</body></html>
"""
