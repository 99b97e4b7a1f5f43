"""Simulated classifiers shared by the tests."""

import numpy as np


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
