"""The real-data interval benchmark's joint cell interval (benchmarks/bench_intervals_real.py,
``--cell-interval joint``) and the simulations' many-class population (bench_intervals.py)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from topcal import TopLabelData
from topcal.calibrators import calibrator

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))
import bench_intervals  # noqa: E402
import bench_intervals_real  # noqa: E402


@pytest.mark.slow  # the benchmarks' imports (pandas, bench_heldout): ~2 s under load
def test_joint_cell_interval_is_the_rows_own_where_they_share_a_score_and_narrower_elsewhere():
    rng = np.random.default_rng(4)
    curves = bench_intervals.platt_population(rng, 8)
    data = bench_intervals.score_data(rng, 40, curves)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = calibrator("hier-platt").fit(data)
    # cells 0-7: one per class, 30 rows at one score; cells 8-15: 30 rows spread over the scores
    pred = np.repeat(np.arange(8), 60)
    score = np.where(np.tile(np.arange(60) < 30, 8), 0.8, np.tile(np.linspace(0.3, 0.999, 60), 8))
    check = TopLabelData.from_scores(pred, score, None, classes=data.classes, score_range=(0, 1))
    cells = [np.arange(60 * k, 60 * k + 30) for k in range(8)]
    cells += [np.arange(60 * k + 30, 60 * k + 60) for k in range(8)]
    conf = model.predict(check)
    lo, hi = model.predict_interval(check, 0.9)
    jlo, jhi = bench_intervals_real.joint_limits(model, check, conf, cells, 0.9)
    same = np.concatenate(cells[:8])
    np.testing.assert_allclose(jlo[same], lo[same], rtol=1e-9)
    np.testing.assert_allclose(jhi[same], hi[same], rtol=1e-9)
    for c in cells[8:]:  # a slope's error moves the rows differently: the mean's interval narrower
        assert np.mean(jhi[c] - jlo[c]) < 0.95 * np.mean(hi[c] - lo[c])
    for c in cells:
        assert np.ptp(jlo[c]) == 0 and np.ptp(jhi[c]) == 0  # the cell's limits, on every row
        assert 0 < jlo[c[0]] < conf[c].mean() < jhi[c[0]] < 1


@pytest.mark.slow
def test_many_class_population_and_class_bootstrap_run_in_small():
    rng = np.random.default_rng(0)
    curves = bench_intervals.platt_population(rng, bench_intervals.MANY_CLASSES)
    assert len(curves) == 200
    data = bench_intervals.score_data(rng, 5, curves[:20])
    tests = [
        TopLabelData.from_scores(
            np.full(3, k),
            np.array([0.5, 0.8, 0.95]),
            None,
            classes=data.classes,
            score_range=(0, 1),
        )
        for k in range(2)
    ]
    limits = bench_intervals.class_bootstrap("hier-platt", {}, data, tests, 3, 0.9, rng)
    for lo, hi in limits:
        assert lo.shape == (3,) and np.all(lo <= hi)
