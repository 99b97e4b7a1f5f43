"""Intervals on calibrated confidences: the numerics behind ``predict_interval``.

An interval states how well the fitted calibration map Conf_k(S) is pinned down by
the finite fitting data at a row's class and score: the estimation error of the
map, not the spread of the individual prediction's outcome (which is a
Bernoulli(Conf) draw). docs/intervals.md states the assumptions per family.

* Count methods (``hist``, the ``cum`` family, the ``kde`` family, ``conf1``)
  estimate Conf as a ratio of local counts t / n (shrunk: (t + m r) / (n + m),
  :mod:`topcal.calibrators.shrinkage`). Unshrunk (m = 0): the equal-tailed interval
  of the Jeffreys posterior Beta(t + 1/2, n - t + 1/2). Shrunk: empirical Bayes
  with the pseudo-counts as the prior's concentration, the reference's own
  error added, and the concentration integrated over (:func:`shrunk_interval`).
  No interval reaches 0 or 1 from finite counts.
* Temperature methods: the delta method on the log-odds margin m(x) of the
  fitted parameters x = (log T, A / T), with the covariance of x the inverse
  observed information of the NLL at the fit: m +- z se(m), mapped through
  the logistic function (strictly inside (0, 1)).

Level checks live here too, so the CLI, the estimator and the calibrators say
the same thing about a bad level.
"""

from __future__ import annotations

import numpy as np
from scipy.special import betaincinv, expit, ndtri

from .._version import __version__
from ..errors import ParameterError

__all__ = ["check_level", "beta_interval", "count_interval", "margin_interval", "include_point",
           "INTERVAL_SINCE", "shrunk_interval", "widen"]

#: The topcal version from which fitted models store everything their intervals need.
INTERVAL_SINCE = __version__

#: Jeffreys prior Beta(1/2, 1/2) for the unshrunk count estimators (m = 0).
JEFFREYS = 0.5


def check_level(level) -> float:
    """``level`` as a float strictly inside (0, 1); a one-line ParameterError otherwise."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)):
        raise ParameterError(f"interval level must be a number in (0, 1), e.g. 0.9; got {level!r}")
    v = float(level)
    if not (np.isfinite(v) and 0.0 < v < 1.0):
        raise ParameterError(f"interval level must be in (0, 1) (0.9 for a 90% interval), got {level!r}")
    return v


def beta_interval(a, b, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed ``level`` interval of Beta(a, b) (a, b > 0, arrays broadcast)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    tail = 0.5 * (1.0 - level)
    return betaincinv(a, b, tail), betaincinv(a, b, 1.0 - tail)


def count_interval(t, n, level: float, *, r=None, m=None, scale=1.0) -> tuple[np.ndarray, np.ndarray]:
    """Beta posterior interval of a local rate from local counts (t TP among n).

    Parameters
    ----------
    t, n : ndarray
        Local TP and positive counts (0 <= t <= n).
    level : float
        Interval level in (0, 1).
    r, m : ndarray or float, optional
        Reference rate in (0, 1) and pseudo-count > 0 of a shrunk estimator; without
        them the Jeffreys prior Beta(1/2, 1/2) (the unshrunk estimator).
    scale : float or ndarray, default 1
        Multiplies the data counts t, n (not the prior): the effective sample size
        per count unit (kernel-weighted counts, docs/intervals.md).
    """
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(n, dtype=np.float64), t)
    f = (n - t) * scale
    t = t * scale
    if m is None:
        return beta_interval(t + JEFFREYS, f + JEFFREYS, level)
    r = np.asarray(r, dtype=np.float64)
    return beta_interval(t + m * r, f + m * (1.0 - r), level)


def _mix(t, n, m, prior_mean, prior_var):
    """Mean and variance of a rate shrunk toward an estimated prior mean.

    Empirical Bayes: the local rate p ~ Beta(m r, m (1 - r)) around the reference r
    (m, chosen by leave-one-out, is the prior's concentration: how far classes stray
    from the reference), so given r its posterior has mean (t + m r) / (n + m) and
    variance c (1 - c) / (n + m + 1); r itself is estimated with variance
    ``prior_var``, which enters with the weight (1 - w)^2, w = n / (n + m).
    """
    mean = (t + m * prior_mean) / (n + m)
    w = n / (n + m)
    return mean, mean * (1.0 - mean) / (n + m + 1.0) + (1.0 - w) ** 2 * prior_var


def shrunk_interval(t, n, m, ref_t, ref_n, ref_m, ref_rate, n_total, level: float, *, scale=1.0,
                    m_posterior=None):
    """Interval on a shrunk confidence (t + m r) / (n + m), r = (t0 + m0 r0) / (n0 + m0).

    The pseudo-counts m (and m0) are *weights*, chosen by leave-one-out, not m
    observations: the reference r is itself estimated, from the pooled local counts
    (t0, n0) shrunk with m0 toward the overall rate r0, which is estimated from all
    ``n_total`` positives. So each level is read as a weighted mean of two
    estimates, w t / n + (1 - w) r with w = n / (n + m), whose variances add with
    weights w^2 and (1 - w)^2: the class's rate with the Jeffreys posterior's
    variance, the reference's the same way one level down, r0's that of its
    Jeffreys posterior on n_total (the parts are taken as independent: that the
    class's rows are a share of the pooled ones is ignored). The interval is the
    equal-tailed one of the Beta with the confidence as its mean and this variance.
    Counts are multiplied by ``scale`` (effective sample size per count unit); the
    pseudo-counts are not. ``t``, ``n`` are 0 for classes without data (the reference alone).

    ``m_posterior`` = (grid, weights), weights (G,) or (rows, G): a posterior over the prior's
    concentration m (:func:`topcal.calibrators.shrinkage.m_posterior` of the class's Beta-binomial
    deviation from the overall rate, :func:`~topcal.calibrators.shrinkage.spread_losses`). The
    leave-one-out m is a predictive choice, not an estimate of how far the class may stray from
    the reference: with few rows the data cannot tell a small spread from a large one. The
    variance is then that of the mixture over m about the calibrated value c (computed with the
    model's own m), sum_j w_j (var_j + (c_j - c)^2); the second term is Morris's (1983)
    correction for an estimated shrinkage factor, (x - r)^2 Var(B), taken over the grid.
    Without it m is taken as known (a pseudo-count the user fixed).
    """
    s = scale
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(n, dtype=np.float64), t)
    t0 = np.maximum(np.asarray(ref_t, dtype=np.float64), 0.0)
    n0 = np.maximum(np.asarray(ref_n, dtype=np.float64), t0)
    v_r0 = ref_rate * (1.0 - ref_rate) / (n_total * s + 2 * JEFFREYS + 1.0)
    r, v_r = _mix(t0 * s, n0 * s, ref_m, ref_rate, v_r0)
    conf, var = _mix(t * s, n * s, m, r, v_r)
    if m_posterior is not None:
        grid, w = m_posterior
        mix = np.zeros(np.shape(conf))
        for j, mj in enumerate(np.asarray(grid, dtype=np.float64)):
            wj = w[..., j]
            if not np.any(wj):
                continue
            cj, vj = _mix(t * s, n * s, mj, r, v_r)
            mix += wj * (vj + (cj - conf) ** 2)
        var = mix
    conf = np.clip(conf, 1e-300, 1.0 - 1e-16)
    nu = np.maximum(conf * (1.0 - conf) / np.maximum(var, 1e-300) - 1.0, 2 * JEFFREYS)
    return beta_interval(conf * nu, (1.0 - conf) * nu, level)


def margin_interval(margin, se, level: float) -> tuple[np.ndarray, np.ndarray]:
    """expit(margin -+ z se): a normal interval on the log-odds scale, mapped to a probability."""
    z = float(ndtri(0.5 * (1.0 + level)))
    margin = np.asarray(margin, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    return expit(margin - z * se), expit(margin + z * se)


def include_point(lo, hi, conf) -> tuple[np.ndarray, np.ndarray]:
    """Widen [lo, hi] to hold ``conf`` where ``conf`` is strictly inside (0, 1).

    An equal-tailed posterior interval may miss its posterior mean where the Beta
    is very skewed (a pseudo-count of a few hundredths); the calibrated value is
    the model's answer, so the interval is widened to hold it. An unshrunk
    estimator's 0 or 1 is not taken in: those are not certainties (the interval
    says so) and no interval reaches 0 or 1 from finite counts.
    """
    conf = np.asarray(conf, dtype=np.float64)
    inside = (conf > 0.0) & (conf < 1.0)
    lo = np.where(inside, np.minimum(lo, conf), lo)
    hi = np.where(inside, np.maximum(hi, conf), hi)
    return lo, hi


def widen(lo, hi, conf, bias, level: float) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] widened for an estimated bias of ``conf``: each side's distance d from ``conf``
    becomes sqrt(d^2 + (z bias)^2), the interval of a normal estimate whose mean squared error
    is its variance plus bias^2 (z the normal quantile of ``level``).

    The move is applied on the log-odds scale at the limit's local slope (d / (p (1 - p))),
    which is the same to first order and keeps the limits strictly inside (0, 1).
    """
    z = float(ndtri(0.5 * (1.0 + level)))
    conf = np.asarray(conf, dtype=np.float64)
    extra = z * np.abs(np.asarray(bias, dtype=np.float64))

    def move(p, sign):
        d = np.abs(conf - p)
        step = np.sqrt(d * d + extra * extra) - d
        p = np.clip(p, 1e-300, 1.0 - 1e-16)
        # log-odds held within +-36, where expit is still strictly inside (0, 1) in doubles
        return expit(np.clip(np.log(p) - np.log1p(-p) + sign * step / (p * (1.0 - p)), -36.0, 36.0))

    return move(np.asarray(lo, dtype=np.float64), -1.0), move(np.asarray(hi, dtype=np.float64), 1.0)
