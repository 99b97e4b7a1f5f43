"""The report at many classes: per-class metric tables mark the best of each row and list at
most MAX_TABLE_CLASSES classes (those predicted most often); curve checks read every class's
curve off one prediction over many classes, the curves of the class-at-a-time calls."""

from __future__ import annotations

import re
import warnings

import numpy as np

import topcal
from topcal.evaluate import class_curves, compare_methods, curve_findings
from topcal.report.page import metric_table, table_classes

from _sim import zipf_top_scores


def test_per_class_table_marks_the_best_ranked_value_of_each_row():
    data = zipf_top_scores(3000, 8, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = compare_methods(data, ["uncalibrated", "conf1", "hist", "cum"], folds=2)
    res = cmp.methods
    html = metric_table(cmp, data.classes, "nll")
    rows = re.findall(r"<tr><td>(.*?)</td>(.*?)</tr>", html)
    assert [r[0] for r in rows] == list(data.classes) + ["<b>overall</b>"]
    methods = list(res)
    for name, cells in rows:
        c = "overall" if name == "<b>overall</b>" else name
        got = re.findall(r"<td class='(best)?'>", cells)
        vals = [
            res[m]["nll"].overall if c == "overall" else res[m]["nll"].per_class[c]
            for m in methods
        ]
        finite = [v for v in vals if v is not None]
        want = ["best" if v is not None and np.isclose(v, min(finite)) else "" for v in vals]
        assert got == want, (c, vals)


def test_many_classes_list_those_predicted_most_often_in_class_order():
    data = zipf_top_scores(4000, 3000, 1)
    shown = table_classes(data, limit=50)
    rows = np.bincount(data.pred, minlength=data.n_classes)
    idx = [data.classes.index(c) for c in shown]
    assert len(shown) == 50 and idx == sorted(idx)
    assert rows[idx].min() >= np.sort(rows)[::-1][49]
    assert table_classes(data, limit=5000) == list(data.classes)


def test_class_curves_are_the_per_class_curves_and_wiggles_the_walk():
    data = zipf_top_scores(5000, 60, 2)
    supports = data.class_supports()
    ks = [k for k, sup in enumerate(supports) if sup is not None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method, params in [("hist", {"shrinkage": 0}), ("kde-mon2", {}), ("hier-beta", {})]:
            model = topcal.calibrator(method, **params).fit(data)
            curves = class_curves(model, ks, supports, 65)
            got = {k: y for part, ys in curves for k, y in zip(part, ys)}
            for k in ks:
                grid = np.linspace(supports[k][0], supports[k][1], 65)
                np.testing.assert_array_equal(got[k], model.curve(k, grid).confidence)
        unshrunk = topcal.calibrator("hist", shrinkage=0).fit(data)
    assert any("confidence 0 or 1" in w for w in curve_findings("hist", unshrunk, data))


def test_parameter_tables_list_the_shown_classes_and_count_the_others():
    from topcal.report.page import params_html

    data = zipf_top_scores(4000, 300, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator("hist").fit(data)
    shown = table_classes(data, limit=20)
    html = params_html("hist", model, shown)
    listed = re.findall(r"<tr><td>(c\d+)</td>", html)
    assert listed == shown
    assert f"20 of {len(model.classes_):,} classes listed" in html
    full = params_html("hist", model)
    assert re.findall(r"<tr><td>(c\d+)</td>", full) == list(model.classes_)
    assert "classes listed" not in full


def test_a_repeated_warning_lists_its_worst_classes_and_counts_the_rest():
    from topcal.report.checks import Finding
    from topcal.report.page import MAX_TABLE_CLASSES, warnings_html

    n = MAX_TABLE_CLASSES + 234
    findings = [
        Finding("no-fp", f"class c{i} has no false positives", f"c{i}", None, float(i))
        for i in range(n)
    ]
    html = warnings_html(findings)
    items = re.findall(r"<li>class (c\d+) has no false positives</li>", html)
    assert items == [f"c{i}" for i in range(n - 1, n - 1 - MAX_TABLE_CLASSES, -1)]
    assert f"the worst {MAX_TABLE_CLASSES:,} of {n:,}" in html and "and 234 more" in html
    few = warnings_html(findings[:20])
    assert "all 20 (worst first)" in few and len(re.findall(r"<li>class c", few)) == 20
