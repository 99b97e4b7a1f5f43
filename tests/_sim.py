"""Simulated classifiers shared by the tests."""

import numpy as np

from topcal.data import TopLabelData


def simulate_probs(n, seed, k, *, sharpen=None):
    """Probabilities and labels of a simulated k-class classifier.

    Labels are drawn from softmax(z) itself (one draw per row), so the
    probabilities softmax(z) are perfectly calibrated. With ``sharpen`` (one
    factor per class) the *reported* probabilities are softmax(z * sharpen)
    instead: over- (factor > 1) and under-confident (< 1) classes.

    Returns
    -------
    probs : ndarray (n, k)
    labels : ndarray (n,) of int
    """
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.0, size=(n, k))
    z[np.arange(n), rng.integers(k, size=n)] += rng.gamma(2.0, 1.2, size=n)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (p.cumsum(1) > rng.random(n)[:, None]).argmax(1)
    if sharpen is not None:
        zr = z * np.asarray(sharpen)[None, :]
        p = np.exp(zr - zr.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
    return p, labels


def many_small_classes(seed, k, n, *, concentration=0.7, levels=None):
    """Per-sample TopLabelData with k classes of Dirichlet(concentration) sizes (a few rows to a
    few hundred), class-dependent miscalibration (P(right) = score ** power_k); with ``levels``
    the scores are rounded to multiples of 1 / levels (vote fractions: ties)."""
    from topcal.data import TopLabelData

    rng = np.random.default_rng(seed)
    sizes = rng.dirichlet(np.full(k, concentration)) * n
    pred = np.repeat(np.arange(k), np.maximum(sizes.astype(int), 1))
    rng.shuffle(pred)
    score = np.clip(rng.beta(4, 2, pred.size), 1e-6, 1.0)
    if levels is not None:
        score = np.round(score * levels) / levels
    power = 0.5 + 2.5 * rng.random(k)
    right = rng.random(pred.size) < score ** power[pred]
    labels = np.where(right, pred, (pred + 1 + rng.integers(0, k - 1, pred.size)) % k)
    return TopLabelData.from_scores(
        pred, score, labels, classes=[f"c{i}" for i in range(k)], score_range=(0.0, 1.0)
    )


def bench_probs(n, k, seed=0, *, temperatures=True):
    """The benchmarks' simulated outputs (``benchmarks/_measure.make_data``): probabilities (n, k)
    and labels.

    Logits N(0, 2^2) plus 2 on a uniform true class; with ``temperatures`` each column divided by
    its own
    temperature from 0.5 (overconfident) to 2 (underconfident), as the benchmarks do. Built in
    place: the
    memory tests compare a fit's peak with this one (n, k) array."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    z = rng.normal(0.0, 2.0, size=(n, k))
    z[np.arange(n), labels] += 2.0
    if temperatures:
        z /= np.linspace(0.5, 2.0, k)[None, :]
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z, labels


def binned_engines(rng, count, bounds=None):
    """``count`` kde binned engines on random supports, with smooth positive weights (drawn from
    ``rng``)."""
    from topcal.calibrators.kde import _engine as eng

    engines = []
    for _ in range(count):
        lo = rng.uniform(0.0, 0.3)
        hi = lo + rng.uniform(0.1, 0.6)
        x = np.linspace(0, 1, eng.FINE_CELLS + 1)
        engines.append(
            eng.BinnedEngine(
                1 + np.sin(9 * x + rng.random()), 1 + rng.random(x.size), lo, hi, bounds
            )
        )
    return engines


def with_weights(data, w):
    """Labelled per-sample ``data`` with row weights ``w``: a right prediction's weight counts
    as a true positive, a wrong one's as a false positive."""
    right = data.labels == data.pred
    return TopLabelData(
        data.classes,
        data.pred,
        data.score,
        data.score_range,
        tp=np.where(right, w, 0.0),
        fp=np.where(right, 0.0, w),
        labels=data.labels,
    )


def zipf_top_scores(n, K, seed, *, a=1.5):
    """Top-score data of ``n`` rows whose predicted classes follow Zipf(``a``) over ``K``
    classes (most classes predicted once or twice), score ~ Beta(4, 1.5), right with
    probability score^1.5 (else the next class)."""
    rng = np.random.default_rng(seed)
    pred = np.minimum(rng.zipf(a, n) - 1, K - 1)
    score = rng.beta(4, 1.5, n)
    label = np.where(rng.random(n) < score**1.5, pred, (pred + 1) % K)
    return TopLabelData.from_scores(pred, score, label, classes=[f"c{i}" for i in range(K)])
