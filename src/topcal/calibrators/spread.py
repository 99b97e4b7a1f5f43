"""The between-class spread of a curve that serves every class: what a pooled interval must add.

A pooled model (``pooled-*``) or one temperature for all classes (``sts``) predicts one curve of
the score for every class. Its parameters' estimation error (the inner model's interval) is small
with many rows, but a given class's true curve is not the pooled one: the classes differ, and
choosing a pooled model says only that the data cannot tell *how*. The interval of a class's
confidence must therefore hold the spread of the classes' curves around the pooled one (issue 33:
without it ``pooled-beta`` covered 0.73-0.87 of real (class, score) cells at nominal 0.90, ``sts``
0.75).

:func:`measure` estimates that spread on the fitting data, per bin of the top score (quantiles of
the pooled scores, at least :data:`MIN_BIN_SAMPLES` samples a bin, at most :data:`MAX_BINS` bins),
on the log-odds scale, by the method of moments: a class whose log-odds are off the curve's by
d_k has, to first order, true positives minus the sum of the curve's confidences over its rows
R_k = V_k d_k + noise, V_k the sum of p (1 - p) over its rows (the binomial variance of its true
positives), so E[R_k^2] = V_k^2 d_k^2 + V_k and

    tau_b^2 = max(0, sum_k (R_k^2 - V_k)) / sum_k V_k^2 * K_b / (K_b - 1),

the last factor for the curve's own fit to the same rows (its residuals sum to about 0 over the
K_b classes of the bin). :func:`widen` adds z tau in quadrature to each side of the pooled
interval on the log-odds scale (so a confidence near 1 moves as a class's log-odds do, and no
limit reaches 0 or 1): the interval then covers a class drawn from the classes the curve was
fitted on, on average over them.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, ndtri

from ..data import TopLabelData

__all__ = ["MAX_BINS", "MIN_BIN_SAMPLES", "measure", "at", "widen", "check"]

#: Most score bins of the spread table.
MAX_BINS = 5
#: Fewest samples a bin of the spread table holds.
MIN_BIN_SAMPLES = 200


def measure(data: TopLabelData, conf: np.ndarray) -> dict | None:
    """``{"edges": [...], "tau": [...]}``: the between-class spread (log-odds) around ``conf``
    per score bin of labelled ``data`` (None with fewer than two classes or
    :data:`MIN_BIN_SAMPLES` samples)."""
    tp = np.asarray(data.tp, dtype=np.float64)
    w = tp + np.asarray(data.fp, dtype=np.float64)
    total = float(w.sum())
    present = np.unique(data.pred[w > 0])
    if present.size < 2 or total < MIN_BIN_SAMPLES:
        return None
    n_bins = int(min(MAX_BINS, total // MIN_BIN_SAMPLES))
    order = np.argsort(data.score, kind="stable")
    cum = np.cumsum(w[order])
    cuts = [
        float(data.score[order[np.searchsorted(cum, total * j / n_bins)]]) for j in range(1, n_bins)
    ]
    inner = np.unique(np.asarray(cuts, dtype=np.float64))
    lo, hi = data.score_range
    edges = np.concatenate([[lo], inner[(inner > lo) & (inner < hi)], [hi]])
    b = np.clip(np.searchsorted(edges, data.score, side="right") - 1, 0, edges.size - 2)
    conf = np.clip(np.asarray(conf, dtype=np.float64), 0.0, 1.0)
    k = data.n_classes
    cell = b * k + data.pred
    size = (edges.size - 1) * k
    r = np.bincount(cell, tp - w * conf, minlength=size).reshape(-1, k)
    v = np.bincount(cell, w * conf * (1.0 - conf), minlength=size).reshape(-1, k)
    classes = (np.bincount(cell, w, minlength=size).reshape(-1, k) > 0).sum(axis=1)
    num = (r * r - v).sum(axis=1) * classes / np.maximum(classes - 1, 1)
    den = (v * v).sum(axis=1)
    tau = np.sqrt(np.where((classes > 1) & (den > 0), np.maximum(num, 0.0) / den, 0.0))
    return {"edges": edges.tolist(), "tau": tau.tolist()}


def at(spread: dict, score: np.ndarray) -> np.ndarray:
    """tau of each score's bin."""
    edges = np.asarray(spread["edges"], dtype=np.float64)
    tau = np.asarray(spread["tau"], dtype=np.float64)
    b = np.clip(np.searchsorted(edges, score, side="right") - 1, 0, tau.size - 1)
    return tau[b]


def widen(spread: dict | None, lo, hi, conf, score, level: float):
    """[lo, hi] with z tau at each row's score added in quadrature to each side's distance from
    ``conf`` on the log-odds scale (no spread: unchanged; a confidence of 0 or 1, the uncalibrated
    score's, is held within log-odds +-36 like every limit)."""
    if spread is None:
        return lo, hi
    z = float(ndtri(0.5 * (1.0 + level)))
    extra = z * at(spread, np.asarray(score, dtype=np.float64))

    def lo_dds(p):
        p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0)
        return np.clip(np.log(p) - np.log1p(-np.minimum(p, 1.0 - 1e-16)), -36.0, 36.0)

    c = lo_dds(conf)
    d_lo, d_hi = c - lo_dds(lo), lo_dds(hi) - c
    return (
        expit(c - np.sqrt(d_lo * d_lo + extra * extra)),
        expit(c + np.sqrt(d_hi * d_hi + extra * extra)),
    )


def check(d) -> dict | None:
    """A model file's spread table, validated (None: a file without one)."""
    if d is None:
        return None
    if not isinstance(d, dict) or set(d) != {"edges", "tau"}:
        raise ValueError("spread must hold edges and tau")
    edges = np.asarray(d["edges"], dtype=np.float64)
    tau = np.asarray(d["tau"], dtype=np.float64)
    if (
        edges.ndim != 1
        or tau.shape != (edges.size - 1,)
        or tau.size < 1
        or not np.all(np.isfinite(edges))
        or not np.all(np.diff(edges) > 0)
        or not np.all(np.isfinite(tau))
        or np.any(tau < 0)
        or np.any(tau > 36)
    ):
        raise ValueError("spread's edges must increase and its tau lie in [0, 36], one per bin")
    return {"edges": edges.tolist(), "tau": tau.tolist()}
