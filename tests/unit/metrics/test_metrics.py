"""Metrics checked against scikit-learn on the binary top-label problem."""

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from topcal import TopLabelData, metrics
from topcal.errors import DataError, ParameterError


@pytest.fixture(scope="module")
def sim():
    rng = np.random.default_rng(42)
    n, k = 3000, 4
    logits = rng.normal(size=(n, k)) * 2
    labels = rng.integers(0, k, n)
    logits[np.arange(n), labels] += 1.5
    data = TopLabelData.from_logits(logits, labels)
    conf = np.clip(data.score**1.3, 0.001, 0.999)
    return data, conf


def test_nll_and_brier_match_sklearn_per_class_and_overall(sim):
    data, conf = sim
    y = data.tp
    m = metrics.nll(data, conf)
    b = metrics.brier(data, conf)
    assert m.overall == pytest.approx(log_loss(y, conf, labels=[0, 1]), rel=1e-12)
    assert b.overall == pytest.approx(brier_score_loss(y, conf), rel=1e-12)
    for k in range(data.n_classes):
        sel = data.pred == k
        assert m.per_class[k] == pytest.approx(
            log_loss(y[sel], conf[sel], labels=[0, 1]), rel=1e-12
        )
        assert b.per_class[k] == pytest.approx(brier_score_loss(y[sel], conf[sel]), rel=1e-12)


def test_nll_clip_is_documented_value():
    d = TopLabelData.from_scores([0, 0], [0.5, 0.5], [0, 1], classes=["a", "b"])
    m = metrics.nll(d, np.array([1.0, 1.0]))  # a confident mistake costs -log(PROB_CLIP)
    assert m.per_class[0] == pytest.approx(-np.log(metrics.PROB_CLIP) / 2, rel=1e-5)
    assert np.isnan(m.per_class[1])


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_ece_matches_sklearn_calibration_curve(sim, strategy):
    data, conf = sim
    y = data.tp
    e1 = metrics.ece1(data, conf, strategy=strategy)
    e2 = metrics.ece2(data, conf, strategy=strategy)
    weights = []
    for k in range(data.n_classes):
        sel = data.pred == k
        prob_true, prob_pred = calibration_curve(y[sel], conf[sel], n_bins=10, strategy=strategy)
        # bin counts in the same bins (continuous confidences: no ties at edges)
        if strategy == "uniform":
            edges = np.linspace(0, 1, 11)
        else:
            edges = np.quantile(conf[sel], np.linspace(0, 1, 11))
        counts, _ = np.histogram(conf[sel], bins=edges)
        counts = counts[counts > 0]
        share = counts / counts.sum()
        assert e1.per_class[k] == pytest.approx(
            np.sum(share * np.abs(prob_true - prob_pred)), abs=2e-3
        )
        assert e2.per_class[k] == pytest.approx(
            np.sqrt(np.sum(share * (prob_true - prob_pred) ** 2)), abs=2e-3
        )
        weights.append(sel.sum())
    w = np.array(weights) / np.sum(weights)
    assert e1.overall == pytest.approx(np.sum(w * e1.per_class), rel=1e-12)
    assert e2.overall == pytest.approx(np.sqrt(np.sum(w * e2.per_class**2)), rel=1e-12)


def test_ece_uniform_is_exact_against_sklearn_bins(sim):
    data, conf = sim
    y = data.tp
    sel = data.pred == 0
    prob_true, prob_pred = calibration_curve(y[sel], conf[sel], n_bins=10)
    counts, _ = np.histogram(conf[sel], bins=np.linspace(0, 1, 11))
    share = counts[counts > 0] / sel.sum()
    assert metrics.ece1(data, conf).per_class[0] == pytest.approx(
        np.sum(share * np.abs(prob_true - prob_pred)), rel=1e-10
    )


def test_confusion_matrices_and_conf1(sim):
    data, _ = sim
    cm = metrics.confusion_matrix(data)
    np.testing.assert_array_equal(cm, sk_confusion_matrix(data.labels, data.pred, labels=range(4)))
    rev = metrics.reverse_confusion_matrix(data)
    np.testing.assert_allclose(rev.sum(axis=0), 1.0)
    np.testing.assert_allclose(np.diag(rev), metrics.conf1(data))
    tp, fp = data.class_counts()
    np.testing.assert_allclose(metrics.conf1(data), tp / (tp + fp))


def test_binned_metrics_equal_expanded_samples():
    lo = np.array([0.0, 0.5, 0.0, 0.5])
    cls = np.array(["a", "a", "b", "b"])
    tp = np.array([3, 5, 1, 0])
    fp = np.array([2, 1, 4, 2])
    binned = TopLabelData.from_binned(cls, lo, lo + 0.5, tp, fp, score_range=(0, 1))
    conf_b = np.array([0.55, 0.8, 0.3, 0.1])
    pred = np.concatenate([np.repeat(cls, tp), np.repeat(cls, fp)])
    label = np.concatenate([np.repeat(cls, tp), np.where(np.repeat(cls, fp) == "a", "b", "a")])
    score = np.concatenate([np.repeat(lo + 0.25, tp), np.repeat(lo + 0.25, fp)])
    conf_s = np.concatenate([np.repeat(conf_b, tp), np.repeat(conf_b, fp)])
    samples = TopLabelData.from_scores(pred, score, label, classes=["a", "b"])
    for f in (metrics.nll, metrics.brier, metrics.ece1, metrics.ece2):
        a, b = f(binned, conf_b), f(samples, conf_s)
        np.testing.assert_allclose(a.per_class, b.per_class, rtol=1e-12)
        assert a.overall == pytest.approx(b.overall, rel=1e-12)
    with pytest.raises(DataError, match="true class"):
        metrics.confusion_matrix(binned)


def test_metric_input_errors(sim):
    data, conf = sim
    with pytest.raises(DataError, match="one confidence per row"):
        metrics.nll(data, conf[:-1])
    bad = conf.copy()
    bad[3] = 1.5
    with pytest.raises(DataError, match="at row 4 is not a probability"):
        metrics.brier(data, bad)
    with pytest.raises(ParameterError, match="'norm' must be 1 or 2"):
        metrics.ece(data, conf, norm=3)
    with pytest.raises(DataError, match="labelled data"):
        metrics.nll(data.without_labels(), conf)


def test_summary_has_every_metric(sim):
    data, conf = sim
    s = metrics.summary(data, conf)
    assert set(s["overall"]) == {"tp", "fp", "conf1", "nll", "brier", "ece1", "ece2"}
    assert len(s["classes"]) == 4


@pytest.mark.parametrize("n, K", [(20000, 300), (60000, 20000), (5000, 7)])
def test_uniform_ece_per_class_is_the_class_at_a_time_sum_bit_for_bit(n, K):
    """ECE1/ECE2 per class from one pass over the (class, bin) cells equal a class-at-a-time
    np.sum over its non-empty bins, bit for bit (7 classes of 5,000 rows: 8-10 bins a class,
    np.sum's pairwise blocks)."""
    rng = np.random.default_rng(K)
    pred = np.minimum(rng.zipf(1.3, n) - 1, K - 1)
    score = rng.beta(4, 1.5, n)
    label = np.where(rng.random(n) < score, pred, (pred + 1) % K)
    d = TopLabelData.from_scores(pred, score, label, classes=[f"c{i}" for i in range(K)])
    c = np.clip(score * 0.9 + 0.03, 0, 1)
    edges = np.linspace(0.0, 1.0, 11)
    b = np.clip(np.searchsorted(edges, c, side="left") - 1, 0, 9)
    for norm in (1, 2):
        got = np.asarray(metrics.ece(d, c, norm=norm).per_class, dtype=float)
        want = np.full(K, np.nan)
        for k in range(K):
            m = pred == k
            if not m.any():
                continue
            wb = np.bincount(b[m], minlength=10).astype(float)
            tb = np.bincount(b[m], weights=(label[m] == k).astype(float), minlength=10)
            cb = np.bincount(b[m], weights=c[m], minlength=10)
            nz = wb > 0
            gap, share = np.abs(tb[nz] - cb[nz]) / wb[nz], wb[nz] / m.sum()
            want[k] = np.sum(share * gap) if norm == 1 else np.sqrt(np.sum(share * gap**2))
        assert got.tobytes() == want.tobytes()
