"""Each figure function draws the numbers its compute function and the calibrators produce."""

from __future__ import annotations

import warnings

import matplotlib as mpl
import numpy as np
import pytest

from topcal import TopLabelData, calibrator, plots
from topcal.evaluate import compare_methods
from topcal.metrics import conf1, confusion_matrix

from _sim import simulate_probs

CLASSES = ["ant", "bee", "cow", "dog"]


def simulate(n, seed, k=4):
    """An over-confident simulated classifier (reported probabilities softmax(1.5 z)), see _sim."""
    p, labels = simulate_probs(n, seed, k, sharpen=[1.5] * k)
    return TopLabelData.from_probs(p, labels, classes=CLASSES[:k])


def fit(name, data, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return calibrator(name, **params).fit(data)


def panels(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def by_gid(items, gid):
    return [a for a in items if a.get_gid() == gid]


@pytest.fixture(scope="module")
def sim():
    return simulate(1_500, 3)


def test_no_global_matplotlib_state_changed(phanns):
    before = dict(mpl.rcParams)
    backend = mpl.get_backend()
    fig = plots.plot_joint_distribution(plots.joint_distribution(phanns))
    assert type(fig).__module__ == "matplotlib.figure"
    assert dict(mpl.rcParams) == before and mpl.get_backend() == backend


# ----------------------------------------------------------- Figure 1
def test_joint_distribution_full(sim):
    jd = plots.joint_distribution(sim)
    cm = confusion_matrix(sim)
    np.testing.assert_array_equal(jd.counts, cm)
    np.testing.assert_allclose(np.diag(jd.reverse), conf1(sim))
    np.testing.assert_allclose(jd.confusion.sum(1), 1.0)
    fig = plots.plot_joint_distribution(jd)
    shown = {
        ax.images[0].get_gid(): np.ma.filled(ax.images[0].get_array(), np.nan) for ax in fig.axes
    }
    np.testing.assert_array_equal(np.where(cm > 0, cm, np.nan), shown["counts"])
    np.testing.assert_allclose(shown["confusion"], cm / cm.sum(1, keepdims=True))
    np.testing.assert_allclose(np.diag(shown["reverse"]), conf1(sim))


def test_joint_distribution_binned_shows_conf1(phanns):
    jd = plots.joint_distribution(phanns)
    assert jd.counts is None
    fig = plots.plot_joint_distribution(jd)
    bars = [p for ax in fig.axes for p in ax.patches if p.get_gid() == "conf1"]
    np.testing.assert_allclose([b.get_height() for b in bars], conf1(phanns))
    tp = [p.get_height() for ax in fig.axes for p in ax.patches if p.get_gid() == "counts:tp"]
    np.testing.assert_allclose(tp, phanns.class_counts()[0])


# ------------------------------------------------- Figures 3, 5, 7, 9, 14
@pytest.mark.slow
def test_calibration_curves_plot_the_calibrators_numbers(phanns):
    models = {m: fit(m, phanns) for m in ("uncalibrated", "hist", "cum-opt", "kde-mon2")}
    grid = plots.calibration_curves(phanns, models)
    assert grid.methods == ("hist", "cum-opt", "kde-mon2")
    fig = plots.plot_calibration_curves(grid)
    axes = panels(fig)
    assert len(axes) == phanns.n_classes == 11
    hist_state = models["hist"].class_state_
    for k, ax in enumerate(axes):
        assert ax.get_title().startswith(phanns.classes[k])
        for name in ("cum-opt", "kde-mon2"):
            (line,) = by_gid(ax.lines, f"curve:{name}")
            x, y = line.get_data()
            np.testing.assert_allclose(y, models[name].curve(k, x).confidence)
        assert not by_gid(ax.lines, "curve:hist")  # the bars are the histogram
        bars = by_gid(ax.patches, "hist")
        st = hist_state[k]
        n = st["tp"] + st["fp"]
        np.testing.assert_allclose([b.get_height() for b in bars], st["values"][n > 0])
        np.testing.assert_allclose([b.get_x() for b in bars], st["edges"][:-1][n > 0])
        # sparse (and lowest) bins are hatched
        sparse = [b.get_hatch() is not None for b in bars]
        expect = n[n > 0] < plots.SPARSE_MIN
        expect[0] = True
        assert sparse == list(expect)
        (diag,) = by_gid(ax.lines, "uncalibrated")
        np.testing.assert_allclose(np.asarray(diag.get_data()), [[0, 10], [0, 1]])
        # the region below the lowest observed bin is shaded
        lo_span = min(by_gid(ax.patches, "extrapolated"), key=lambda p: p.get_x())
        assert lo_span.get_x() == 0 and lo_span.get_width() == pytest.approx(
            models["hist"].support_[k][0]
        )


def test_calibration_curves_clouds_for_temperature_scaling(sim):
    models = {"tswa": fit("tswa", sim), "btswa": fit("btswa", sim)}
    grid = plots.calibration_curves(sim, models)
    fig = plots.plot_calibration_curves(grid)
    pred = models["tswa"].predict(sim)
    for k, ax in enumerate(panels(fig)):
        (cloud,) = by_gid(ax.collections, "cloud:tswa")
        idx = np.flatnonzero(sim.pred == k)
        np.testing.assert_allclose(
            cloud.get_offsets(), np.column_stack([sim.score[idx], pred[idx]])
        )
        # btswa is a function of the score: drawn as a curve, equal to predict at those scores
        (line,) = by_gid(ax.lines, "curve:btswa")
        x, y = line.get_data()
        probe = TopLabelData(
            sim.classes, np.full(3, k), np.array([x[100], x[200], x[300]]), sim.score_range
        )
        np.testing.assert_allclose(models["btswa"].predict(probe), y[[100, 200, 300]])


# --------------------------------------------------------- Figures 5, 6
def test_kde_densities_binned(phanns):
    model = fit("kde-mon2", phanns)
    dens = plots.kde_densities(phanns, model)
    fig = plots.plot_kde_densities(dens)
    axes = panels(fig)
    assert len(axes) == 2 * phanns.n_classes
    for k in range(phanns.n_classes):
        ad, ac = axes[2 * k], axes[2 * k + 1]
        x, tp_y = by_gid(ad.lines, "density:tp")[0].get_data()
        tpd, fpd = model.densities(k, x)
        np.testing.assert_allclose(tp_y, tpd)
        np.testing.assert_allclose(by_gid(ad.lines, "density:fp")[0].get_ydata(), fpd)
        np.testing.assert_allclose(
            by_gid(ac.lines, "confidence")[0].get_ydata(), model.curve(k, x).confidence
        )
        assert not by_gid(ac.lines, "diluted")  # binned data has no full vectors
        assert f"b={model.bandwidth_[k]:.3g}" in ad.get_title()
    # the densities' ratio is the confidence inside the support
    p = dens[0]
    inside = (p.score >= p.support[0]) & (p.score <= p.support[1])
    ratio = p.tp_density / (p.tp_density + p.fp_density)
    np.testing.assert_allclose(ratio[inside], p.confidence[inside], atol=2e-3)


def _gauss(x, s, w, b):
    return (w[None, :] * np.exp(-0.5 * ((x[:, None] - s[None, :]) / b) ** 2)).sum(1) / (
        b * np.sqrt(2 * np.pi)
    )


def test_kde_densities_diluted_curve_full_vectors(sim):
    model = fit("kde-mon2", sim, shrinkage=0)  # the paper's estimator, as in its Fig. 6
    dens = plots.kde_densities(sim, model, n_points=101)
    fig = plots.plot_kde_densities(dens)
    axes = panels(fig)
    for k in range(sim.n_classes):
        ad, ac = axes[2 * k], axes[2 * k + 1]
        x, neg = by_gid(ad.lines, "density:neg")[0].get_data()
        b = model.bandwidth_[k]
        yk = sim.full[:, k]
        others = (sim.pred != k).astype(float)
        np.testing.assert_allclose(neg, _gauss(x, yk, others, b), rtol=1e-9)
        # diluted = TP / (TP + FP + every other sample's k-th score), computed here independently
        is_tp = ((sim.pred == k) & (sim.labels == k)).astype(float)
        t = _gauss(x, yk, is_tp, b)
        f = _gauss(x, yk, 1 - is_tp, b)
        dil = by_gid(ac.lines, "diluted")[0].get_ydata()
        ok = (t + f) > 1e-8 * (t + f).max()
        np.testing.assert_allclose(dil[ok], (t / (t + f))[ok], atol=1e-6)
        # where all the classes' scores are high, negatives are absent: diluted == Conf_KDE
        hi = x > 0.9
        conf = by_gid(ac.lines, "confidence")[0].get_ydata()
        assert np.max(np.abs(dil[hi] - conf[hi])) < 0.05
        # at low scores the negatives dilute the confidence (paper Fig. 6)
        assert dil[(x > 0.3) & (x < 0.4)].mean() < conf[(x > 0.3) & (x < 0.4)].mean()


def test_kde_densities_needs_a_kde_model(phanns):
    with pytest.raises(Exception, match="kernel-density model"):
        plots.kde_densities(phanns, fit("hist", phanns))


# ------------------------------------------------------- Figures 10-12
def test_ts_clouds(sim):
    model = fit("csts", sim)
    cl = plots.ts_clouds(sim, model)
    fig = plots.plot_ts_clouds(cl, method="csts")
    pred = model.predict(sim)
    for k, ax in enumerate(panels(fig)):
        idx = np.flatnonzero(sim.pred == k)
        tp = by_gid(ax.collections, "cloud:tp")[0].get_offsets()
        fp = by_gid(ax.collections, "cloud:fp")[0].get_offsets()
        right = sim.tp[idx] > 0
        np.testing.assert_allclose(tp, np.column_stack([sim.score[idx][right], pred[idx][right]]))
        np.testing.assert_allclose(fp, np.column_stack([sim.score[idx][~right], pred[idx][~right]]))
    assert "csts" in fig._suptitle.get_text()


def test_ts_clouds_subsample_is_seeded():
    big = simulate(12_000, 9, k=2)
    a = plots.ts_clouds(big, fit("sts", big), max_points=500)
    b = plots.ts_clouds(big, fit("sts", big), max_points=500)
    assert all(p.score.size == 500 for p in a)
    np.testing.assert_array_equal(a[0].score, b[0].score)


# ------------------------------------------------------------ Figure 17
def test_method_bars(phanns):
    res = compare_methods(phanns, ["uncalibrated", "hist", "kde-mon2"])
    ms = plots.method_scores(res, "nll")
    fig = plots.plot_method_bars(ms)
    ax = fig.axes[0]
    for m in ms.methods:
        heights = [p.get_height() for p in by_gid(ax.patches, f"bars:{m}")]
        expect = [res["methods"][m]["nll"]["per_class"][c] for c in phanns.classes] + [
            res["methods"][m]["nll"]["overall"]
        ]
        np.testing.assert_allclose(heights, expect)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(phanns.classes) + ["overall"]


# ---------------------------------------------------- Figures 4, 18, 19
def test_histogram_overlay_and_paired_bars(sim):
    other = simulate(1_500, 4)
    ov = plots.histogram_overlay(sim, other)
    fig = plots.plot_histogram_overlay(ov)
    h1, h2 = fit("hist", sim), fit("hist", other)
    for k, ax in enumerate(panels(fig)):
        for gid, h in (("hist:1", h1), ("hist:2", h2)):
            (line,) = by_gid(ax.lines, gid)
            st = h.class_state_[k]
            n = st["tp"] + st["fp"]
            y = line.get_ydata()[:-1]
            np.testing.assert_allclose(y[n > 0], st["values"][n > 0])
            assert np.all(np.isnan(y[n == 0]))
    same = compare_methods(sim, ["uncalibrated", "hist"])
    hold = compare_methods(sim, ["uncalibrated", "hist"], eval_data=other)
    ps = plots.paired_scores(same, hold)
    fig = plots.plot_paired_bars(ps)
    ax = fig.axes[0]
    np.testing.assert_allclose(
        [p.get_height() for p in by_gid(ax.patches, "paired:1")],
        [same["methods"][m]["nll"]["overall"] for m in ("uncalibrated", "hist")],
    )
    np.testing.assert_allclose(
        [p.get_height() for p in by_gid(ax.patches, "paired:2")],
        [hold["methods"][m]["nll"]["overall"] for m in ("uncalibrated", "hist")],
    )


def test_histogram_overlay_rejects_mismatched_sets(sim, phanns):
    with pytest.raises(Exception, match="same classes"):
        plots.histogram_overlay(sim, phanns)


# ------------------------------------------------------------ Figure 15
def test_added_true_positives_only_raise_conf_kde(phanns):
    # a trove of extra HTJ true positives at high scores (the paper's Fig. 15)
    k = phanns.classes.index("HTJ")
    extra = TopLabelData.from_binned(
        ["HTJ"] * 3,
        [7.0, 8.0, 9.0],
        [7.1, 8.1, 9.1],
        [40, 80, 120],
        [0, 0, 0],
        classes=phanns.classes,
        score_range=(0.0, 10.0),
    )
    used, pan = plots.added_samples_effect(phanns, extra, "kde", params={"bandwidth": 0.5})
    assert used == "kde" and [p.class_name for p in pan] == ["HTJ"]
    p = pan[0]
    assert p.added_tp == 240 and p.added_fp == 0
    assert p.new_counts == (p.old_counts[0] + 240, p.old_counts[1])
    old = fit("kde", phanns, bandwidth=0.5)
    both = fit("kde", TopLabelData.concat([phanns, extra]), bandwidth=0.5)
    np.testing.assert_allclose(p.old, old.curve(k, p.score).confidence)
    np.testing.assert_allclose(p.new, both.curve(k, p.score).confidence)
    # up to the compact tables' tolerance (a shrunk curve within 7.5e-4 of its full tables',
    # docs/kde.md "Persistence"; 2.2e-7 here: the pooled reference's knots move where both hold)
    assert np.all(p.new >= p.old - 1.5e-3) and np.max(p.new - p.old) > 0.05
    fig = plots.plot_added_samples(used, pan)
    (ax,) = panels(fig)
    np.testing.assert_allclose(by_gid(ax.lines, "old")[0].get_ydata(), p.old)
    np.testing.assert_allclose(by_gid(ax.lines, "new")[0].get_ydata(), p.new)
    assert "+240 TP" in ax.get_title()
