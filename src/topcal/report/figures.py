"""Which figures the report shows, for which classes and methods (the drawing itself is
:mod:`topcal.plots`)."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from .. import plots
from ..data import TopLabelData
from ..evaluate import Comparison, MethodMetrics, MetricValues
from .classes import MAX_FIGURE_CLASSES, choose_classes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "report_figures",
    "label_shift_figures",
    "figure_png",
    "figure_classes",
    "MAX_FIGURE_CLASSES",
]


# Which methods a figure shows by default, the paper's choices (the only method names of the
# report).
#: Methods drawn in the main curves figure when the user names none (paper Fig. 9).
_MAIN_CURVES = ("kde-mon2", "cum-opt")
#: The KDE bandwidth rules drawn side by side (paper Figs. 13, 14).
_KDE_RULES = ("kde-mon", "kde-mon2", "kde-mon4", "kde-opt")
#: The kernel-density model whose densities are drawn, the first one fitted (paper Figs. 5,
#: 6).
_DENSITY_PREFERENCE = ("kde-mon2", "kde-mon", "kde-mon4", "kde", "kde-opt")
#: Binary temperature scaling of the top score, drawn when the user names no methods.
_BINARY_TS = ("btswa", "bts")
#: The method whose curve before and after the added samples is drawn, the first one fitted
#: (paper Fig. 15); the last one is fitted for the figure when none of them is.
_ADDED_PREFERENCE = ("kde-mon2", "kde-mon", "kde", "hist")


def figure_png(fig: Figure, *, dpi: int = 90) -> bytes:
    """A matplotlib Figure as PNG bytes (Agg, no global state)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _pick(preferred, fitted) -> list[str]:
    return [m for m in preferred if m in fitted]


def figure_classes(data: TopLabelData) -> np.ndarray | None:
    """Indices of the classes the per-class figures show by default (None: all of them), in
    class order (:func:`~topcal.report.classes.choose_classes` without ``--classes``)."""
    return choose_classes(data)[0]


def _joint_view(data: TopLabelData, keep: np.ndarray) -> TopLabelData:
    """Rows predicted as a kept class; true classes outside them pooled into one '(other
    classes)' class."""
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
    return sub.recoded(names, mapping)


def _comparison_view(comparison, names) -> Comparison:
    """``comparison`` with per-class values of the classes ``names`` only."""
    comparison = Comparison.of(comparison)
    methods = {
        m: MethodMetrics(
            {
                x: MetricValues(v.overall, {c: v.per_class[c] for c in names})
                for x, v in metrics.items()
            }
        )
        for m, metrics in comparison.methods.items()
    }
    return replace(comparison, methods=methods)


def _band_caption(grid) -> str:
    """What the interval bands of a curve figure are, and which models draw none (old
    files)."""
    if grid.band_level is None:
        return ""
    out = (
        f" Shaded band around each curve: the {grid.band_level:.0%} interval on the fitted "
        "curve (its estimation error from the finite calibration data, docs/intervals.md)."
    )
    if grid.no_band:
        out += (
            f" No band for {', '.join(grid.no_band)}: the model holds no interval "
            "statistics (saved by an older topcal; refit it to get them)."
        )
    return out


def report_figures(
    data,
    models,
    comparison,
    eval_data,
    holdout,
    extra,
    methods_given,
    log,
    *,
    classes=None,
    focus=None,
    main=None,
):
    """Yield (key, title, caption, Figure) for every figure that applies.

    ``classes``: ``--classes``'s strings (:func:`~topcal.report.classes.choose_classes`;
    ``focus``: the model in use, which ``worst:N`` ranks by); ``main``: the methods of the
    main curves figure (default: the named methods, else the paper's choice).
    """
    curve_models = {n: m for n, m in models.items() if plots.is_score_curve(m)}
    other_models = {n: m for n, m in models.items() if not plots.is_score_curve(m)}
    only, few = choose_classes(data, classes, comparison, focus)
    if only is not None:
        names = [data.classes[k] for k in only]
        comparison = _comparison_view(comparison, names)
        holdout = None if holdout is None else _comparison_view(holdout, names)

    yield from _joint_figures(data, only, classes, log)
    main_score = _main_curve_models(models, curve_models, main, methods_given)
    yield from _curve_figures(data, curve_models, main_score, methods_given, only, few, log)
    yield from _density_figures(data, curve_models, other_models, only, few, log)
    log("figure: NLL bars")
    yield (
        "nll",
        "NLL per class and method (paper Fig. 17)",
        "Mean top-label negative log-likelihood per positive, "
        + (
            "out of sample (as in the metrics table)"
            if Comparison.of(comparison).protocol == "kfold"
            else "fitted and evaluated on the same data"
        )
        + " (lower is better)."
        + few,
        plots.plot_method_bars(plots.method_scores(comparison, "nll")),
    )
    if eval_data is not None and holdout is not None:
        yield from _second_set_figures(data, eval_data, comparison, holdout, only, log)
    if extra is not None:
        yield from _added_figures(data, extra, curve_models, only, log)


def _joint_figures(data, only, classes, log):
    """The joint distribution of true and predicted class (of the kept classes' rows)."""
    log("figure: joint distribution")
    jd = plots.joint_distribution(data if only is None else _joint_view(data, only))
    cap = (
        "Joint distribution of true and predicted class; the reverse confusion matrix "
        "(columns normalised) has Conf1 on its diagonal."
        if jd.counts is not None
        else "Binned data records no true class for false positives, so only the positives per "
        "predicted class and Conf1 = |TP| / |P| are shown."
    )
    if only is not None:
        which = "largest classes" if classes is None else "classes shown"
        cap += (
            f" Only rows predicted as the {only.size} {which} of {data.n_classes}; every "
            "other true class is pooled."
        )
    yield "joint", "Joint distribution (paper Fig. 1)", cap, plots.plot_joint_distribution(jd)


def _main_curve_models(models, curve_models, main, methods_given: bool) -> dict:
    """The models of the main curves figure: ``main``, else the named methods, else the
    paper's choice (else every fitted curve but the baseline's and constant ones)."""
    if main is not None:
        main_score = {n: curve_models[n] for n in main if n in curve_models}
    elif methods_given:
        main = [n for n, m in models.items() if not m.is_baseline]
        main_score = {n: m for n, m in curve_models.items() if n in main}
    else:
        main_score = {n: curve_models[n] for n in _pick(_MAIN_CURVES, curve_models)}
        if not main_score:
            main_score = {
                n: m
                for n, m in curve_models.items()
                if not (m.is_baseline or m.constant_per_class)
            }
    return main_score


def _curve_figures(data, curve_models, main_score, methods_given: bool, only, few, log):
    """The calibration curves, the KDE bandwidth rules and binary temperature scaling."""
    log("figure: calibration curves")
    grid = plots.calibration_curves(data, main_score, only=only)
    yield (
        "curves",
        "Calibration curves per class (paper Figs. 3, 7, 9)",
        "Bars: Conf_Hist with 10 equal-width bins (hatched, "
        "dashed: fewer than 10 positives, or the lowest bin). "
        "Dashed diagonal: the uncalibrated score. Grey: "
        "scores outside the class's observed ones, where "
        "every curve is extrapolated." + _band_caption(grid) + few,
        plots.plot_calibration_curves(grid),
    )
    rules = _pick(_KDE_RULES, curve_models)
    if len(rules) >= 2 and set(rules) != set(main_score):
        log("figure: KDE bandwidth rules")
        grid = plots.calibration_curves(
            data, {n: curve_models[n] for n in rules}, only=only, band=None
        )
        yield (
            "kde-rules",
            "KDE bandwidth rules (paper Figs. 13, 14)",
            "b_mon (monotone), b_mon2 (at most two slope sign changes, the paper's "
            "choice), b_mon4 and the leave-one-out b_opt. Smaller bandwidths follow "
            "the data more closely, and its noise too." + few,
            plots.plot_calibration_curves(grid),
        )
    binary = _pick(_BINARY_TS, curve_models)
    if binary and not methods_given:
        log("figure: binary temperature scaling")
        grid = plots.calibration_curves(data, {n: curve_models[n] for n in binary}, only=only)
        yield (
            "binary-ts",
            "Binary temperature scaling of the top score",
            "bts: sigmoid(logit(s) / T_k); btswa adds an "
            "award A_k. Two parameters per class at most: a "
            "smooth S-shape that cannot follow a non-monotone "
            "histogram." + _band_caption(grid) + few,
            plots.plot_calibration_curves(grid),
        )


def _density_figures(data, curve_models, other_models, only, few, log):
    """The kernel densities behind a KDE model, and every full-vector model's clouds."""
    dens = _pick(_DENSITY_PREFERENCE, curve_models)
    if dens:
        name = dens[0]
        log(f"figure: kernel densities ({name})")
        panels = plots.kde_densities(data, curve_models[name], only=only)
        if any(p is not None for p in panels):
            extra_cap = (
                " Black dotted: the k-th score of every sample not predicting k; red: the "
                "'diluted' confidence that counts them as negatives (paper Fig. 6)."
                if data.has_full and data.labels is not None
                else ""
            )
            yield (
                "densities",
                f"Kernel densities behind {name} (paper Figs. 5, 6)",
                "Left of each pair: the TP (green) and FP (orange) weighted kernel sums; "
                f"right: their ratio Conf_KDE over the histogram.{extra_cap}{few}",
                plots.plot_kde_densities(panels),
            )
    for name, m in other_models.items():
        log(f"figure: clouds ({name})")
        panels = plots.ts_clouds(data, m, only=only)
        what = (
            "score vs recalibrated ŷ_k of every positive: a temperature sends one score to "
            "different values depending on how the rest of the probability is split (paper "
            "Figs. 10-12)."
        )
        yield (
            f"clouds-{name}",
            f"{name}: recalibrated confidence per class",
            f"{what} Bars: Conf_Hist for reference.{few}",
            plots.plot_ts_clouds(panels, method=name),
        )


def _second_set_figures(data, eval_data, comparison, holdout, only, log):
    """The two test sets' histograms and the paired NLL bars (paper Figs. 4, 18, 19)."""
    log("figure: second test set")
    yield (
        "overlay",
        "Histograms of the two test sets (paper Fig. 4)",
        "Conf_Hist per class on the fitting set (black) and the second set (red, "
        "dashed); their differences are noise the calibration cannot know about.",
        plots.plot_histogram_overlay(
            plots.histogram_overlay(
                data, eval_data, labels=("fitting set", "second set"), only=only
            )
        ),
    )
    yield (
        "paired",
        "Fitted on the first set, evaluated on both (paper Figs. 18, 19)",
        "Overall NLL per method on the fitting set (left) and the second set (right). "
        "A method far worse on the second set has fitted noise.",
        plots.plot_paired_bars(
            plots.paired_scores(
                comparison, holdout, "nll", labels=("fitting set", "second set")
            )
        ),
    )


def _added_figures(data, extra, curve_models, only, log):
    """The curve fitted with and without the extra samples (paper Fig. 15)."""
    method = next(iter(_pick(_ADDED_PREFERENCE, curve_models)), None)
    method = method or next(iter(curve_models), None) or _ADDED_PREFERENCE[-1]
    log(f"figure: added samples ({method})")
    used, panels = plots.added_samples_effect(data, extra, method, only=only)
    if panels:
        yield (
            "added",
            f"Effect of the added samples on {used} (paper Fig. 15)",
            "Each class the extra file predicts: the curve fitted on the original "
            "data (black) and on the data plus the extra samples (red). With one "
            "fixed bandwidth, adding only true positives can only raise Conf_KDE "
            "(paper Fig. 15); a bandwidth rule may pick a new b for the larger data.",
            plots.plot_added_samples(used, panels),
        )


def acceptance_figures(data, acceptance):
    """Yield the acceptance panel of ``acceptance`` = (model, Thresholds) on ``data`` (none
    without it)."""
    if acceptance is None:
        return
    from ..thresholds.plots import acceptance_view, plot_acceptance

    model, th = acceptance
    view = acceptance_view(model, data, th)
    how = (
        "one cut-off for all classes"
        if th.mode == "global"
        else "each class's own cut-off"
        + (" (classes tested at delta/K)" if th.multiplicity == "bonferroni" else "")
    )
    caption = (
        "Precision against the fraction of predictions accepted, on this data, when "
        "predictions with calibrated confidence >= c are accepted, for every c; dashed: "
        f"the target {th.precision:.12g}; dot: the cut-off of the thresholds file ({how}), "
        f"chosen on held-out data so that precision >= {th.precision:.12g} with "
        f"probability >= {1 - th.delta:.12g} (Learn-then-Test, docs/thresholds.md). If "
        "this data is the data the thresholds were chosen on, the curve is in-sample."
    )
    yield (
        "acceptance",
        f"Acceptance: precision >= {th.precision:.12g} at delta = {th.delta:.12g} ({th.mode} "
        f"{th.model_method})",
        caption,
        plot_acceptance(view),
    )


def label_shift_figures(adapted):
    """Yield the label-shift figure of an adapted model (none without one)."""
    if adapted is None:
        return
    from ..labelshift.plots import label_shift_view, plot_label_shift

    caption = (
        "Top: class priors of the test set and of the use set (with the bootstrap interval "
        "when estimated). Below: confidence curves of the classes that moved most, before "
        "(test-set priors) and after adaptation (use-set priors), assuming p(x | y) is "
        "unchanged (docs/label_shift.md)."
    )
    yield (
        "label-shift",
        f"Label shift: {adapted.inner_.name} adapted to the use set's priors",
        caption,
        plot_label_shift(label_shift_view(adapted)),
    )
