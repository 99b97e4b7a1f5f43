"""No bare numpy warning reaches the user (issue 34, item 5): the paths of ``describe``, ``report``
and ``apply --interval`` run with RuntimeWarning made an error (``-W error::RuntimeWarning``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.cli import main

from _sim import many_small_classes


def _quiet_fit(method, data, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return topcal.calibrator(method, **params).fit(data)


def _grid(model, n=201):
    k = len(model.classes_)
    s = np.linspace(0.0, 1.0, n)
    return TopLabelData.from_scores(
        np.repeat(np.arange(k), n), np.tile(s, k), None, classes=model.classes_, score_range=(0, 1)
    )


def test_kde_interval_where_the_bias_estimate_is_unbounded_warns_nothing_and_saturates():
    """kde-mon2's smoothing-bias estimate divides by the class's kernel-weighted count, which is
    near zero far from its scores: "overflow encountered in multiply" in intervals.widen reached
    the console on ImageNet (40 classes of 2-80 rows show it). Unshrunk, the limits saturate
    there, as the clip on the log-odds intends; shrunk (the default), the bias there is the
    reference's (the class's own share of the value vanishes with its count): no row's interval
    spans the whole range (issue 33)."""
    data = many_small_classes(0, 40, 800)
    for params, saturates in (({"shrinkage": 0}, True), ({}, False)):
        model = _quiet_fit("kde-mon2", data, **params)
        grid = _grid(model)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            lo, hi = model.predict_interval(grid, 0.9)
            conf = model.predict(grid)
        inside = (conf > 0) & (conf < 1)  # an unshrunk 0 or 1 lies outside its interval
        assert np.all((0 < lo) & (hi < 1)) and np.all((lo <= conf) & (conf <= hi) | ~inside)
        wide = hi - lo > 1 - 1e-9  # an unbounded bias: the whole range
        if saturates:
            assert wide.any() and not wide.all()
        else:
            assert np.max(hi - lo) < 0.95


def test_apply_with_intervals_at_many_classes_under_warnings_as_errors(tmp_path, capsys):
    data = many_small_classes(0, 40, 800)
    model = _quiet_fit("kde-mon2", data)
    model.save(tmp_path / "m.json")
    grid = _grid(model)
    rows = "\n".join(
        f"{model.classes_[p]},{s!r}" for p, s in zip(grid.pred.tolist(), grid.score.tolist())
    )
    (tmp_path / "new.csv").write_text("pred,score\n" + rows + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        code = main(
            ["apply", str(tmp_path / "m.json"), str(tmp_path / "new.csv"), "--interval", "0.9"]
            + ["-o", str(tmp_path / "out.csv")]
        )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "overflow" not in err and "encountered" not in err


@pytest.mark.parametrize("method", ["kde-mon2", "hist", "hier-beta"])
def test_describe_at_many_classes_under_warnings_as_errors(method):
    from topcal.describe.summary import summary, summary_text

    model = _quiet_fit(method, many_small_classes(5, 60, 900))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        d = model.describe()
        assert summary(d)["n_classes"] == 60
        assert "spread over the 60 classes" in summary_text(d)


@pytest.mark.heavy
@pytest.mark.e2e
def test_default_report_at_many_classes_under_warnings_as_errors(tmp_path):
    """The default report (auto, its peers, the figures, the warnings) at 200 classes of 2-150 rows
    reaches the user with no numpy warning (on ImageNet it printed "overflow encountered in
    multiply" twice)."""
    from topcal.report import build_report

    data = many_small_classes(0, 200, 6_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fits' own topcal warnings (few positives, ...)
        warnings.simplefilter("error", RuntimeWarning)
        res = build_report(data, tmp_path / "r", dpi=30, classes=["worst:4", "most:4"])
    assert res.focus == "auto" and len(res.figures) >= 3
