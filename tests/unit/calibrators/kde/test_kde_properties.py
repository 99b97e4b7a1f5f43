"""Property tests of Conf_KDE and the kde calibrators (hypothesis)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from topcal.calibrators import (
    paper_calibrator as calibrator,
)  # the paper's estimators (shrinkage=0)
from topcal.calibrators.kde import kde_confidence
from topcal.data import TopLabelData
from topcal.errors import DegenerateClassWarning
from topcal.evaluate import fit_quietly

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def class_samples(draw, min_size=4, max_size=40):
    """Scores in [0, 1] (some repeated) with 0/1 correctness, both groups present, >= 2 distinct
    scores."""
    n = draw(st.integers(min_size, max_size))
    # no subnormal scores: scaling them by 0.1 underflows (5e-324 * 0.1 == 0), which merges two
    # distinct scores, so no scaling property could hold (hypothesis found it, 2026-11-28)
    floats = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
    pool = draw(st.lists(floats, min_size=2, max_size=n))
    idx = draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n))
    score = np.array([pool[i] for i in idx])
    correct = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    assume(correct.any() and (~correct).any() and np.unique(score).size >= 2)
    assume(score.max() - score.min() > 1e-3)
    return score, correct


def _data(score, correct, weights=None, scale=1.0):
    n = score.size
    tp = correct.astype(float) if weights is None else correct * weights
    fp = (~correct).astype(float) if weights is None else (~correct) * weights
    return TopLabelData(
        ("a", "b"), np.zeros(n, dtype=np.int64), score * scale, (0.0, scale), tp=tp, fp=fp
    )


def _fit(method, data, **params):
    # class b is never predicted: its warning is collected and dropped
    return fit_quietly(calibrator(method, **params), data, collect=DegenerateClassWarning)


@pytest.mark.slow
@SETTINGS
@given(
    class_samples(), st.floats(1e-3, 10.0), st.lists(st.floats(-1.0, 2.0), min_size=1, max_size=20)
)
def test_confidence_is_a_probability(sample, b, x):
    score, correct = sample
    c = kde_confidence(x, score, correct.astype(float), (~correct).astype(float), b)
    assert np.all((c >= 0) & (c <= 1))
    model = _fit("kde-mon2", _data(score, correct))
    p = model.curve(0, np.clip(x, 0, 1)).confidence
    assert np.all((p >= 0) & (p <= 1))


@pytest.mark.slow
@SETTINGS
@given(class_samples(), st.randoms(use_true_random=False), st.sampled_from(["exact", "binned"]))
def test_shuffling_samples_changes_nothing(sample, rnd, engine):
    score, correct = sample
    perm = np.arange(score.size)
    rnd.shuffle(perm)
    a = _fit("kde-mon2", _data(score, correct), engine=engine)
    b = _fit("kde-mon2", _data(score[perm], correct[perm]), engine=engine)
    np.testing.assert_allclose(b.bandwidth_, a.bandwidth_, rtol=1e-12, equal_nan=True)
    s = np.linspace(0, 1, 101)
    # the binned engine adds weights in row order (np.bincount): a shuffle moves its sums by
    # rounding
    # only, which the confidence ratio can amplify to ~1e-11 where both densities are tiny
    atol = 1e-12 if engine == "exact" else 1e-9
    np.testing.assert_allclose(
        b.curve(0, s).confidence, a.curve(0, s).confidence, rtol=0, atol=atol
    )


@SETTINGS
@given(class_samples(), st.floats(0.01, 0.5), st.sampled_from([0.1, 3.0, 10.0, 250.0]))
def test_scaling_scores_and_bandwidth_together_changes_nothing(sample, b, c):
    score, correct = sample
    t, f = correct.astype(float), (~correct).astype(float)
    x = np.linspace(-0.2, 1.2, 57)
    np.testing.assert_allclose(
        kde_confidence(x * c, score * c, t, f, b * c),
        kde_confidence(x, score, t, f, b),
        rtol=1e-9,
        atol=1e-12,
    )
    m1 = _fit("kde", _data(score, correct), bandwidth=b)
    mc = _fit("kde", _data(score, correct, scale=c), bandwidth=b * c)
    s = np.linspace(0, 1, 101)
    np.testing.assert_allclose(
        mc.curve(0, s * c).confidence, m1.curve(0, s).confidence, rtol=1e-9, atol=1e-9
    )
    r1 = _fit("kde-mon2", _data(score, correct))
    rc = _fit("kde-mon2", _data(score, correct, scale=c))
    np.testing.assert_allclose(rc.bandwidth_[0], r1.bandwidth_[0] * c, rtol=1e-6)


@SETTINGS
@given(class_samples(), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10))
def test_large_bandwidth_tends_to_conf1(sample, x):
    score, correct = sample
    conf1 = correct.mean()
    for b, tol in ((1e2, 1e-2), (1e4, 1e-6)):
        c = kde_confidence(x, score, correct.astype(float), (~correct).astype(float), b)
        np.testing.assert_allclose(c, conf1, atol=tol)


@pytest.mark.slow
@SETTINGS
@given(
    class_samples(), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=15), st.floats(0.005, 0.5)
)
def test_adding_true_positives_never_lowers_the_curve(sample, extra, b):
    """The paper's HTJ trove argument (section 13): more TP, same FP -> Conf can only rise."""
    score, correct = sample
    lo, hi = score.min(), score.max()
    extra = lo + np.array(extra) * (hi - lo)  # inside the support: the curves share their grid
    s2 = np.concatenate([score, extra])
    c2 = np.concatenate([correct, np.ones(extra.size, dtype=bool)])
    x = np.linspace(-0.5, 1.5, 201)
    old = kde_confidence(x, score, correct.astype(float), (~correct).astype(float), b)
    new = kde_confidence(x, s2, c2.astype(float), (~c2).astype(float), b)
    assert np.all(new >= old - 1e-12)
    m_old = _fit("kde", _data(score, correct), bandwidth=b, engine="exact")
    m_new = _fit("kde", _data(s2, c2), bandwidth=b, engine="exact")
    s = np.linspace(0, 1, 301)
    assert np.all(m_new.curve(0, s).confidence >= m_old.curve(0, s).confidence - 1e-12)


@pytest.mark.slow
@SETTINGS
@given(class_samples(max_size=25), st.data(), st.sampled_from(["kde-mon2", "kde-opt"]))
def test_integer_weights_equal_duplicated_samples(sample, draw, method):
    score, correct = sample
    w = np.array(draw.draw(st.lists(st.integers(1, 4), min_size=score.size, max_size=score.size)))
    weighted = _fit(method, _data(score, correct, weights=w.astype(float)))
    dup = _fit(method, _data(np.repeat(score, w), np.repeat(correct, w)))
    np.testing.assert_allclose(weighted.bandwidth_[0], dup.bandwidth_[0], rtol=1e-12)
    s = np.linspace(0, 1, 101)
    np.testing.assert_allclose(
        weighted.curve(0, s).confidence, dup.curve(0, s).confidence, atol=1e-12
    )
