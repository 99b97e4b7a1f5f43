"""Python entry points for what the CLI does, for scripts and notebooks.

* :func:`compare`: ``topcal compare`` as a tidy pandas DataFrame;
* :func:`make_report`: ``topcal report``, returning the path of the HTML page
  (``topcal.make_report``; ``topcal.report`` is the package :mod:`topcal.report`);
* :func:`calibrator_html`: a fitted calibrator's per-class curves as HTML, which Jupyter
  shows for a calibrator left at the end of a cell (``Calibrator._repr_html_``; registered
  when :mod:`topcal` is imported).

Each accepts data the way calibrators do (:func:`topcal.io.inputs.as_data`): a
:class:`TopLabelData`, a score matrix with its labels ``y``, a DataFrame or a data file.
They are thin: fitting, protocols and ranking are those of
:func:`topcal.evaluate.compare_methods` and :func:`topcal.report.build_report`.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .describe import summary as describing  # noqa: F401  (registers Jupyter's view of describe(): the summary)
from .calibrators.base import set_html_renderer
from .calibrators.wrapper import Wrapper
from .io.inputs import as_data
from ._typing import ArrayLike, PathLike
from .data import TopLabelData

if TYPE_CHECKING:
    import pandas as pd

    from .comparison import Comparison

__all__ = ["compare", "make_report", "report", "calibrator_html", "COMPARE_COLUMNS"]

#: Columns of :func:`compare`'s DataFrame.
COMPARE_COLUMNS = ("method", "class", "metric", "value", "protocol")

#: Largest number of class panels :func:`calibrator_html` draws.
MAX_PANELS = 24


def _other(value, data, what: str, *, kind: str):
    """A second data set (path, TopLabelData, DataFrame, or a (scores, y) pair) on
    ``data``'s classes."""
    from .report import align_classes

    if isinstance(value, tuple):
        if len(value) != 2:
            raise TypeError(f"{what} as a tuple must be (scores, y), got {len(value)} items")
        other = as_data(value[0], value[1], classes=data.classes, kind=kind)
    else:
        other = as_data(value, classes=None, kind=kind)
    return align_classes(other, data, what)


def compare(
    data: TopLabelData | ArrayLike | PathLike,
    y: ArrayLike | None = None,
    methods: list[str] | None = None,
    *,
    eval_data: Any = None,
    folds: int = 5,
    in_sample: bool = False,
    classes: ArrayLike | None = None,
    kind: str = "auto",
    **options: Any,
) -> pd.DataFrame:
    """Fit methods and evaluate them; one row per (method, class, metric).

    Parameters
    ----------
    data : TopLabelData, score matrix (with ``y``), DataFrame or path
        Labelled data to fit on.
    y : array-like, optional
        True classes when ``data`` is a score matrix.
    methods : sequence of str, optional
        Method names (default: every registered one; those needing full score vectors are
        skipped on top-score data).
    eval_data : optional
        A second labelled test set (same forms as ``data``; a score matrix as a ``(scores,
        y)`` tuple): fit on ``data``, evaluate on it.
    folds : int, default 5
        Without ``eval_data``: K-fold cross-fitting within ``data`` (every row scored by a
        model fitted without it), as ``topcal compare``.
    in_sample : bool, default False
        Fit and evaluate on the same data instead (the paper's practice; optimistic for
        flexible methods), as ``topcal compare --in-sample``.
    classes : sequence of str, optional
        Names of the score columns.
    kind : {"auto", "probs", "logits"}
    **options
        Passed to :func:`topcal.evaluate.compare_methods` (``seed``, ``n_bins``, ``params``,
        ...).

    Returns
    -------
    pandas.DataFrame
        Columns ``method, class, metric, value, protocol``; ``class`` is "overall" for the
        overall value, ``value`` NaN where a class has no positives. ``df.attrs`` holds
        ``protocol``, ``folds``, ``skipped`` (methods not run for lack of full score
        vectors) and, as ``compare_methods`` reports them, ``failed`` and ``warnings``.

    Examples
    --------
    >>> import topcal
    >>> df = topcal.compare(topcal.datasets.load_phanns(), methods=["hist", "kde-mon2"], folds=3)
    >>> sorted(df["method"].unique())
    ['hist', 'kde-mon2']
    """
    from .evaluate import compare_methods

    from .errors import ParameterError

    d = as_data(data, y, classes=classes, kind=kind)
    if eval_data is not None:
        if in_sample:
            raise ParameterError(
                "in_sample and eval_data exclude each other: eval_data is already a second "
                "test set"
            )
        options["eval_data"] = _other(eval_data, d, "eval_data", kind=kind)
    elif not in_sample:
        options["folds"] = folds
    return _comparison_frame(compare_methods(d, methods, **options))


def _comparison_frame(res: Comparison) -> pd.DataFrame:
    """:func:`compare`'s tidy DataFrame: one row per (method, class, metric)."""
    import pandas as pd

    from .evaluate import comparison_rows

    rows = [(m, c, metric, v, res.protocol) for m, metric, c, v in comparison_rows(res)]
    frame = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    frame["value"] = frame["value"].astype("float64")
    frame.attrs.update(
        protocol=res.protocol,
        folds=res.folds,
        skipped=list(res.skipped),
        failed=dict(res.failed),
        warnings=dict(res.warnings),
    )
    return frame


def make_report(
    data: TopLabelData | ArrayLike | PathLike,
    y: ArrayLike | None = None,
    *,
    output: PathLike,
    methods: list[str] | None = None,
    eval_data: Any = None,
    extra: Any = None,
    classes: ArrayLike | None = None,
    kind: str = "auto",
    **options: Any,
) -> Path:
    """Write the visual-check report (``topcal report``) and return the path of its
    ``index.html``.

    ``topcal.make_report``; calling the package ``topcal.report(...)``, its old name, still
    works with a FutureWarning.

    Parameters
    ----------
    data, y, classes, kind : as in :func:`compare`
    output : str or Path
        Folder to write ``index.html`` and ``figures/`` into.
    methods : sequence of str or "all", optional
        Default: ``auto``, its own cross-validation reused as its candidates' out-of-sample
        table, the baseline and two peers; ``"all"``: every method, each cross-fitted (see
        :func:`topcal.report.build_report`).
    eval_data, extra : optional
        A second test set, and extra samples (as in :func:`compare`).
    **options
        Passed to :func:`topcal.report.build_report` (``title``, ``data_label``, ``dpi``,
        ``progress``, ``classes``, ...).

    Returns
    -------
    pathlib.Path
    """
    from .report import build_report

    d = as_data(data, y, classes=classes, kind=kind)
    if eval_data is not None:
        eval_data = _other(eval_data, d, "eval_data", kind=kind)
    if extra is not None:
        extra = _other(extra, d, "extra", kind=kind)
    return build_report(
        d, output, methods=methods, eval_data=eval_data, extra=extra, **options
    ).path


#: The old name, kept in this module (no package of that name here to shadow).
report = make_report


def calibrator_html(model, *, dpi: int = 72) -> str:
    """A fitted calibrator as HTML: a summary line and its per-class curves.

    Methods whose confidence depends on the whole score vector (the multi-class temperature
    scalings) have no per-class curve; for them the fitted parameters are shown as a table
    instead.
    """
    import numpy as np

    # e.g. auto: show the model it chose
    if isinstance(model, Wrapper) and model.predicts_as_inner:
        inner = calibrator_html(model.inner_, dpi=dpi)
        name = html.escape(model.inner_.name)
        summary = html.escape(model.summary_line()).replace(name, f"<code>{name}</code>", 1)
        return (
            f"<div><p><b>{html.escape(type(model).__name__)}</b> (method "
            f"<code>{html.escape(model.name)}</code>) {summary}</p>{inner}</div>"
        )
    k = len(model.classes_)
    lo, hi = model.score_range_
    head = (
        f"<p><b>{html.escape(type(model).__name__)}</b> (method "
        f"<code>{html.escape(model.name)}</code>), fitted on "
        f"{float(np.sum(model.n_tp_) + np.sum(model.n_fp_)):,.0f} samples, {k} classes, "
        f"score range {lo:g}–{hi:g}</p>"
    )
    if model.needs_full:
        return _parameter_table_html(model, head)
    return _curves_html(model, head, dpi=dpi)


def _more_classes_html(k: int) -> str:
    """The note that only the first :data:`MAX_PANELS` of ``k`` classes are shown."""
    return f"<p>(first {MAX_PANELS} of {k} classes)</p>" if k > MAX_PANELS else ""


def _parameter_table_html(model, head: str) -> str:
    """:func:`calibrator_html` for a model with no per-class curve: its fitted parameters."""
    k = len(model.classes_)
    d = model.describe()
    keys = [key for key in next(iter(d["classes"].values()))]
    rows = "".join(
        "<tr><td>"
        + html.escape(c)
        + "</td>"
        + "".join(
            f"<td>{v:.4g}</td>"
            if isinstance(v, float)
            else f"<td>{html.escape(str(v))}</td>"
            for v in (info.get(key) for key in keys)
        )
        + "</tr>"
        for c, info in list(d["classes"].items())[:MAX_PANELS]
    )
    return (
        f"<div>{head}<p>confidence depends on the whole score vector: no per-class "
        f"curve</p><table>"
        f"<tr><th>class</th>{''.join(f'<th>{html.escape(x)}</th>' for x in keys)}</tr>"
        f"{rows}</table>{_more_classes_html(k)}</div>"
    )


def _curves_html(model, head: str, *, dpi: int) -> str:
    """:func:`calibrator_html` for a model with per-class curves: their figure, inlined."""
    from .plots import (
        BAND_LEVEL,
        CurveGrid,
        CurvePanel,
        model_band,
        model_curve,
        plot_calibration_curves,
    )
    from .report import figure_png

    import numpy as np

    k = len(model.classes_)
    lo, hi = model.score_range_
    grid = np.linspace(lo, hi, 201)
    support = getattr(model, "support_", [None] * k)
    shown = range(min(k, MAX_PANELS))
    limits = [model_band(model, i, grid, BAND_LEVEL) for i in shown]
    panels = tuple(
        CurvePanel(
            model.classes_[i],
            None,
            {model.name: (grid, model_curve(model, i, grid))},
            {},
            support[i],
            float(model.n_tp_[i]),
            float(model.n_fp_[i]),
            {} if limits[i] is None else {model.name: (grid, *limits[i])},
        )
        for i in shown
    )
    no_band = (model.name,) if any(b is None for b in limits) else ()
    fig = plot_calibration_curves(
        CurveGrid((lo, hi), (model.name,), panels, band_level=BAND_LEVEL, no_band=no_band),
        panel_size=2.2,
    )
    uri = "data:image/png;base64," + base64.b64encode(figure_png(fig, dpi=dpi)).decode("ascii")
    band = (
        "<p>no interval band: this model holds no interval statistics (saved by an older "
        "topcal; refit it to get them)</p>"
        if no_band
        else f"<p>shaded: the {BAND_LEVEL:.0%} interval on each fitted curve "
        f"(<code>predict_interval</code>)</p>"
    )
    return (
        f"<div>{head}<img src='{uri}' alt='calibration curves of "
        f"{html.escape(model.name)}'>{band}{_more_classes_html(k)}</div>"
    )


set_html_renderer(calibrator_html)
