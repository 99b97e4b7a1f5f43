"""``sts`` on outputs with tiny probabilities (issue 35): the log floor of probabilities.

A Gaussian naive Bayes on scikit-learn's digits puts 85% of its probabilities below 1e-12 (35% are
exactly 0). With logs floored at 1e-300, ``sts`` had a held-out top-label NLL of 0.60 where
probmetrics' temperature scaling had 0.39; with the documented floor (the smallest normal float32,
as probmetrics) it has 0.39 too.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import topcal
from topcal.data import LOG_PROB_FLOOR, TopLabelData, kfold_split
from topcal.metrics import nll


def _naive_bayes_digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.naive_bayes import GaussianNB

    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=0, stratify=y)
    p = GaussianNB().fit(xtr, ytr).predict_proba(xte)
    return TopLabelData.from_probs(p, yte, renormalize=True)


def _independent_ts(train: TopLabelData, test: TopLabelData, floor: float) -> np.ndarray:
    """Guo et al.'s temperature scaling written here: multinomial NLL of
    softmax(log max(p, floor) / T),
    scipy's bounded scalar minimiser on log T; the confidence of the original top label."""
    z = np.log(np.maximum(train.full, floor))
    rows = np.arange(train.n_rows)

    def loss(t):
        a = z / np.exp(t)
        a = a - a.max(axis=1, keepdims=True)
        return float(-(a[rows, train.labels] - np.log(np.exp(a).sum(axis=1))).mean())

    t = minimize_scalar(
        loss, bounds=(np.log(1e-2), np.log(1e3)), method="bounded", options={"xatol": 1e-8}
    ).x
    a = np.log(np.maximum(test.full, floor)) / np.exp(t)
    a = a - a.max(axis=1, keepdims=True)
    p = np.exp(a) / np.exp(a).sum(axis=1, keepdims=True)
    return p[np.arange(test.n_rows), test.pred]


def test_floor_is_documented_value():
    assert LOG_PROB_FLOOR == float(np.finfo(np.float32).tiny)


def test_sts_within_one_percent_of_independent_ts_on_tiny_probabilities():
    data = _naive_bayes_digits()
    assert np.mean(data.full < 1e-12) > 0.8  # the regime of the issue
    folds = kfold_split(data, 2, seed=0)
    target = TopLabelData.concat(folds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = np.concatenate(
            [topcal.calibrator("sts").fit(folds[1 - f]).predict(folds[f]) for f in range(2)]
        )
    theirs = np.concatenate(
        [_independent_ts(folds[1 - f], folds[f], LOG_PROB_FLOOR) for f in range(2)]
    )
    a, b = nll(target, ours).overall, nll(target, theirs).overall
    assert a <= 1.01 * b, (a, b)
    assert a < 0.40  # 0.387; 0.602 with the former floor 1e-300


def test_entries_above_the_floor_are_unchanged():
    """The floor changes nothing where every probability is above it: sts's temperature on such data
    equals the one fitted on the logits of the same vectors."""
    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, (400, 5))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    assert p.min() > 1e-12
    y = rng.integers(0, 5, 400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = topcal.calibrator("sts").fit(TopLabelData.from_probs(p, y))
        b = topcal.calibrator("sts").fit(TopLabelData.from_logits(z, y))
    assert a.temperature_[0] == pytest.approx(b.temperature_[0], rel=1e-8)
