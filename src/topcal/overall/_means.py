"""Means with their normal intervals: NLL, Brier, paired improvements, the calibration loss."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from .._numeric import PROB_CLIP, binary_nll
from ..data import TopLabelData
from ..errors import ParameterError
from ._common import (
    LEVEL,
    RESAMPLES,
    RECAL_FOLDS,
    RECAL_CELLS,
    Estimate,
    Rows,
    check_level,
    rows_of,
)

# ---------------------------------------------------------------- means and paired differences


def mean_estimate(values: list, weights: list, level: float) -> Estimate:
    """Weighted mean of per-sample ``values`` with its normal interval."""
    v = np.concatenate([np.ravel(x) for x in values])
    w = np.concatenate([np.ravel(x) for x in weights])
    n = float(w.sum())
    m = float(np.dot(w, v) / n)
    if n < 2:
        return Estimate(m, reason="one sample: no interval")
    var = float(np.dot(w, (v - m) ** 2)) / (n - 1)
    half = NormalDist().inv_cdf(0.5 + level / 2) * np.sqrt(var / n)
    return Estimate(m, float(m - half), float(m + half))


def losses(kind: str, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample loss of a right (label 1) and of a wrong (label 0) prediction at ``c``."""
    if kind == "nll":
        return binary_nll(1.0, 0.0, c), binary_nll(0.0, 1.0, c)
    return (1.0 - c) ** 2, c**2


def nll(data: TopLabelData, confidence, *, level: float = LEVEL) -> Estimate:
    """Top-label NLL (mean over samples, confidences clipped to [1e-12, 1 - 1e-12]), normal
    interval."""
    r = rows_of(data, confidence)
    check_level(level, RESAMPLES, 0)
    return mean_estimate(list(losses("nll", r.c)), [r.tp, r.fp], level)


def brier(data: TopLabelData, confidence, *, level: float = LEVEL) -> Estimate:
    """Top-label Brier score (mean over samples of (label - confidence)^2), normal interval."""
    r = rows_of(data, confidence)
    check_level(level, RESAMPLES, 0)
    return mean_estimate(list(losses("brier", r.c)), [r.tp, r.fp], level)


def improvement(
    data: TopLabelData, confidence, reference, *, score: str = "nll", level: float = LEVEL
) -> Estimate:
    """How much lower ``confidence``'s score is than ``reference``'s on the same rows
    (positive: better), with the paired normal interval of the mean per-sample difference.

    Parameters
    ----------
    score : {"nll", "brier"}, default "nll"
    """
    if score not in ("nll", "brier"):
        raise ParameterError(f"parameter 'score' must be 'nll' or 'brier', got {score!r}")
    r = rows_of(data, confidence)
    ref = rows_of(data, reference).c
    check_level(level, RESAMPLES, 0)
    return improvement_of(r, ref, score, level)


def improvement_of(r: Rows, ref: np.ndarray, score: str, level: float) -> Estimate:
    a1, a0 = losses(score, ref)
    b1, b0 = losses(score, r.c)
    return mean_estimate([a1 - b1, a0 - b0], [r.tp, r.fp], level)


# ------------------------------------------------------------------------- calibration loss


def platt(z: np.ndarray, t: np.ndarray, f: np.ndarray) -> tuple[float, float]:
    """Platt scaling sigma(a z + b) fitted by Newton's method (with step halving) to weights
    ``t`` of label 1 and ``f`` of label 0 at logits ``z``; starts at the identity (a, b) =
    (1, 0)."""
    theta = np.array([1.0, 0.0])
    x = np.stack([z, np.ones_like(z)], axis=1)

    def loss(th):
        u = x @ th
        return float(np.dot(t, np.logaddexp(0.0, -u)) + np.dot(f, np.logaddexp(0.0, u)))

    cur = loss(theta)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x @ theta)))
        g = x.T @ (p * (t + f) - t)
        h = (x * (p * (1 - p) * (t + f))[:, None]).T @ x + 1e-9 * np.eye(2)
        step = np.linalg.solve(h, g)
        for _ in range(30):
            new = theta - step
            val = loss(new)
            if val <= cur:
                break
            step = step / 2
        else:
            break
        done = cur - val < 1e-12 * max(1.0, abs(cur))
        theta, cur = new, val
        if done:
            break
    return float(theta[0]), float(theta[1])


def fold_weights(r: Rows, folds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's tp and fp weights split over ``folds`` folds, shape (n_rows, folds): a
    seeded random deal of the samples (one fold per row for per-sample rows, a multinomial
    deal of a binned row's counts, one fold per row for non-integer weights)."""
    rng = np.random.default_rng([seed, 7])
    w = r.tp + r.fp
    integer = np.all(r.tp == np.round(r.tp)) and np.all(r.fp == np.round(r.fp))
    if not integer or np.all(w <= 1):
        fold = rng.permutation(r.c.size) % folds
        one = np.zeros((r.c.size, folds))
        one[np.arange(r.c.size), fold] = 1.0
        return one * r.tp[:, None], one * r.fp[:, None]
    p = np.full(folds, 1.0 / folds)
    return (
        rng.multinomial(r.tp.astype(np.int64), p).astype(np.float64),
        rng.multinomial(r.fp.astype(np.int64), p).astype(np.float64),
    )


def recalibrated(r: Rows, folds: int, seed: int):
    """Out-of-fold Platt-recalibrated confidences: (per-fold weights tp, fp; confidences,
    all of shape (n_rows, folds)), or a reason string where no recalibration can be fitted."""
    tpk, fpk = fold_weights(r, folds, seed)
    if min(tpk.sum(axis=0).min(), fpk.sum(axis=0).min()) <= 0 and (
        r.tp.sum() <= folds or r.fp.sum() <= folds
    ):
        return "the predictions are all right or all wrong: a recalibration has nothing to fit"
    cc = np.clip(r.c, PROB_CLIP, 1 - PROB_CLIP)
    z = np.log(cc) - np.log1p(-cc)
    lo, hi = float(z.min()), float(z.max())
    cell = np.minimum(
        ((z - lo) / max(hi - lo, 1e-12) * RECAL_CELLS).astype(np.int64), RECAL_CELLS - 1
    )
    cnt = np.bincount(cell, minlength=RECAL_CELLS) + 0.0
    zc = np.bincount(cell, weights=z, minlength=RECAL_CELLS) / np.maximum(cnt, 1)
    tcell = np.stack(
        [np.bincount(cell, weights=tpk[:, k], minlength=RECAL_CELLS) for k in range(folds)],
        axis=1,
    )
    fcell = np.stack(
        [np.bincount(cell, weights=fpk[:, k], minlength=RECAL_CELLS) for k in range(folds)],
        axis=1,
    )
    p = np.empty((r.c.size, folds))
    for k in range(folds):
        a, b = platt(zc, tcell.sum(axis=1) - tcell[:, k], fcell.sum(axis=1) - fcell[:, k])
        p[:, k] = 1.0 / (1.0 + np.exp(-(a * z + b)))
    return tpk, fpk, p


def calibration_loss(
    data: TopLabelData,
    confidence,
    *,
    score: str = "nll",
    folds: int = RECAL_FOLDS,
    seed: int = 0,
    level: float = LEVEL,
) -> Estimate:
    """The part of the score a recalibration removes: score(confidence) minus the score of
    the confidences recalibrated out of fold (Ferrer and Ramos 2024's calibration loss).

    The recalibration is Platt scaling on logit(confidence), pooled over classes, fitted on
    ``folds`` - 1 folds and applied to the remaining one (seeded folds), so the figure is
    not optimistic; it is negative where the confidences are already as good as the
    recalibration can make them. The interval is the normal interval of the mean per-sample
    difference, the folds fixed.

    Parameters
    ----------
    score : {"nll", "brier"}, default "nll"
    folds : int, default 5
    seed : int, default 0
    level : float, default 0.9
    """
    if score not in ("nll", "brier"):
        raise ParameterError(f"parameter 'score' must be 'nll' or 'brier', got {score!r}")
    if (
        isinstance(folds, bool)
        or not isinstance(folds, (int, np.integer))
        or not 2 <= folds <= 50
    ):
        raise ParameterError(f"parameter 'folds' must be an integer in [2, 50], got {folds!r}")
    r = rows_of(data, confidence)
    check_level(level, RESAMPLES, seed)
    return calibration_losses(r, (score,), folds, seed, level)[score]


def calibration_losses(r: Rows, scores, folds: int, seed: int, level: float) -> dict:
    got = recalibrated(r, folds, seed)
    if isinstance(got, str):
        return {s: Estimate(None, reason=got) for s in scores}
    tpk, fpk, p = got
    out = {}
    for s in scores:
        a1, a0 = losses(s, r.c)
        b1, b0 = losses(s, p)
        out[s] = mean_estimate([a1[:, None] - b1, a0[:, None] - b0], [tpk, fpk], level)
    return out
