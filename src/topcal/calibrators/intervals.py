"""Intervals on calibrated confidences: the numerics behind ``predict_interval``.

An interval states how well the fitted calibration map Conf_k(S) is pinned down by the
finite fitting data at a row's class and score: the estimation error of the map, not the
spread of the individual prediction's outcome (which is a Bernoulli(Conf) draw).
docs/intervals.md states the assumptions per family.

* Count methods (``hist``, the ``cum`` family, the ``kde`` family, ``conf1``) estimate Conf
  as a ratio of local counts t / n (shrunk: (t + m r) / (n + m),
  :mod:`topcal.calibrators.shrinkage`). The interval is the equal-tailed one of the Jeffreys
  posterior Beta(t + 1/2, n - t + 1/2) of the class's own local counts (unshrunk), or of the
  shrunk posterior Beta(t + m_I r + 1/2, n - t + m_I (1 - r) + 1/2) at the interval's
  pseudo-count m_I <= m (:func:`shrunk_interval`), widened for the estimate's bias and to
  hold the calibrated value (:func:`widen`, :func:`include_point`; why the pooled reference
  does not narrow it: docs/intervals.md). No interval reaches 0 or 1 from finite counts.
* Temperature methods: the delta method on the log-odds margin m(x) of the fitted parameters
  x = (log T, A / T), with the covariance of x the inverse observed information of the NLL
  at the fit: m +- z se(m), mapped through the logistic function (strictly inside (0, 1)).

Level checks live here too, so the CLI, the estimator and the calibrators say the same thing
about a bad level.
"""

from __future__ import annotations

import numpy as np
from scipy.special import betaincinv, expit, ndtri

from .._version import __version__
from ..errors import ParameterError

__all__ = [
    "check_level",
    "beta_interval",
    "count_interval",
    "shrunk_interval",
    "margin_interval",
    "include_point",
    "INTERVAL_SINCE",
    "widen",
    "widen_toward",
]

#: The topcal version from which fitted models store everything their intervals need.
INTERVAL_SINCE = __version__

#: Jeffreys prior Beta(1/2, 1/2) on the local rate of the count estimators.
JEFFREYS = 0.5


def check_level(level) -> float:
    """``level`` as a float strictly inside (0, 1); a one-line ParameterError otherwise."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)):
        raise ParameterError(
            f"interval level must be a number in (0, 1), e.g. 0.9; got {level!r}"
        )
    v = float(level)
    if not (np.isfinite(v) and 0.0 < v < 1.0):
        raise ParameterError(
            f"interval level must be in (0, 1) (0.9 for a 90% interval), got {level!r}"
        )
    return v


def beta_interval(a, b, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed ``level`` interval of Beta(a, b) (a, b > 0, arrays broadcast)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    tail = 0.5 * (1.0 - level)
    if a.ndim == 1 and a.size > _DISTINCT_FROM:
        # rows of one bin (a histogram's) or of a one-row class share their (a, b): each
        # distinct pair inverted once, the same values (2 x 10^5 rows of 400 distinct pairs:
        # 0.16 s instead of 2.3 s)
        order = np.lexsort((b, a))
        sa, sb = a[order], b[order]
        new = np.ones(a.size, dtype=bool)
        new[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
        if np.count_nonzero(new) < a.size // 2:
            back = np.empty(a.size, dtype=np.intp)
            back[order] = np.cumsum(new) - 1
            sa, sb = sa[new], sb[new]
            return betaincinv(sa, sb, tail)[back], betaincinv(sa, sb, 1.0 - tail)[back]
    return betaincinv(a, b, tail), betaincinv(a, b, 1.0 - tail)


#: From this many intervals on, :func:`beta_interval` inverts each distinct (a, b) once.
_DISTINCT_FROM = 4096


def count_interval(t, n, level: float, *, scale=1.0) -> tuple[np.ndarray, np.ndarray]:
    """Beta posterior interval of a local rate from local counts (t TP among n).

    Parameters
    ----------
    t, n : ndarray
        Local TP and positive counts (0 <= t <= n).
    level : float
        Interval level in (0, 1).
    scale : float or ndarray, default 1
        Multiplies the data counts t, n (not the prior): the effective sample size per count
        unit (kernel-weighted counts, docs/intervals.md).
    """
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(n, dtype=np.float64), t)
    f = (n - t) * scale
    t = t * scale
    return beta_interval(t + JEFFREYS, f + JEFFREYS, level)


def shrunk_interval(t, n, r, m, level: float, *, scale=1.0) -> tuple[np.ndarray, np.ndarray]:
    """Interval of a shrunk local rate (t + m r) / (n + m): the equal-tailed interval of the
    Beta posterior Beta(scale t + m r + 1/2, scale (n - t) + m (1 - r) + 1/2) of the class's
    own local counts under the prior the shrinkage stands for (the classes' rates spread
    around the reference r with concentration m; Jeffreys' half counts keep it off 0 and 1).
    ``m`` is the interval's pseudo-count, :func:`topcal.calibrators.shrinkage.interval_m`
    (at most the fit's).
    """
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(n, dtype=np.float64), t)
    m = np.asarray(m, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    a = t * scale + m * r + JEFFREYS
    b = (n - t) * scale + m * (1.0 - r) + JEFFREYS
    return beta_interval(a, b, level)


def margin_interval(margin, se, level: float) -> tuple[np.ndarray, np.ndarray]:
    """expit(margin -+ z se): a normal interval on the log-odds scale, mapped to a
    probability."""
    z = float(ndtri(0.5 * (1.0 + level)))
    margin = np.asarray(margin, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    return expit(margin - z * se), expit(margin + z * se)


def include_point(lo, hi, conf) -> tuple[np.ndarray, np.ndarray]:
    """Widen [lo, hi] to hold ``conf`` where ``conf`` is strictly inside (0, 1).

    An equal-tailed posterior interval may miss its posterior mean where the Beta is very
    skewed (a pseudo-count of a few hundredths); the calibrated value is the model's answer,
    so the interval is widened to hold it. An unshrunk estimator's 0 or 1 is not taken in:
    those are not certainties (the interval says so) and no interval reaches 0 or 1 from
    finite counts.
    """
    conf = np.asarray(conf, dtype=np.float64)
    inside = (conf > 0.0) & (conf < 1.0)
    lo = np.where(inside, np.minimum(lo, conf), lo)
    hi = np.where(inside, np.maximum(hi, conf), hi)
    return lo, hi


def widen(lo, hi, conf, bias, level: float) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] widened for an estimated bias of ``conf``: each side's distance d from
    ``conf`` becomes sqrt(d^2 + (z bias)^2), the interval of a normal estimate whose mean
    squared error is its variance plus bias^2 (z the normal quantile of ``level``).

    The move is applied on the log-odds scale at the limit's local slope (d / (p (1 - p))),
    which is the same to first order and keeps the limits strictly inside (0, 1).
    """
    z = float(ndtri(0.5 * (1.0 + level)))
    return _move(lo, conf, z * _abs(bias), -1.0), _move(hi, conf, z * _abs(bias), 1.0)


def widen_toward(lo, hi, conf, bias, level: float) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] widened on one side for a signed estimated bias of ``conf`` (a step's: the
    truth at the score lies about ``bias`` above the bin's rate): that side's distance d
    from ``conf`` grows to sqrt(d^2 + (z1 bias)^2), z1 the one-sided normal quantile of
    ``level`` (the error goes one way); the other side is kept, since the sign is an
    estimate too.

    A limit p moved by e goes to p^2 / (p + e) below (1 - q^2 / (q + e), q = 1 - p, above):
    about p - e where e is small against p, increasing in p (levels stay nested), never 0 or
    1.
    """
    z1 = float(ndtri(level))
    conf = np.asarray(conf, dtype=np.float64)
    bias = np.asarray(bias, dtype=np.float64)
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    extra = z1 * _abs(bias)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d_lo, d_hi = np.abs(conf - lo), np.abs(hi - conf)
        e_lo = np.sqrt(d_lo * d_lo + extra * extra) - d_lo
        e_hi = np.sqrt(d_hi * d_hi + extra * extra) - d_hi
        q = 1.0 - hi
        new_lo = np.nan_to_num(lo * lo / (lo + e_lo))
        new_hi = 1.0 - np.nan_to_num(q * q / (q + e_hi))
    # never 0 or 1 where the limit was not (1 - q^2 / (q + e) rounds to 1 for q near 1e-9)
    new_lo = np.maximum(new_lo, np.minimum(lo, 1e-300))
    new_hi = np.minimum(new_hi, np.maximum(hi, 1.0 - 2.0**-53))
    return np.where(bias < 0, new_lo, lo), np.where(bias > 0, new_hi, hi)


def _abs(bias) -> np.ndarray:
    with np.errstate(over="ignore"):  # |bias| near the float maximum: inf, see _move
        return np.abs(np.asarray(bias, dtype=np.float64))


def _move(p, conf, extra, sign) -> np.ndarray:
    """Limit ``p`` moved away from ``conf`` (``sign``: -1 down, 1 up) so that its distance d
    becomes sqrt(d^2 + extra^2), on the log-odds scale at its local slope."""
    conf = np.asarray(conf, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    d = np.abs(conf - p)
    p = np.clip(p, 1e-300, 1.0 - 1e-16)
    # A bias estimate that is unbounded where the class has almost no density (kde's
    # derivative terms over a near-zero count; nan_to_num turns them into 1.8e308) makes the
    # step overflow to inf: the limit then saturates at the clip below, as intended (an
    # unbounded bias leaves the whole range possible), so the overflow is harmless.
    with np.errstate(over="ignore"):
        step = np.sqrt(d * d + extra * extra) - d
        shift = sign * step / (p * (1.0 - p))
    # log-odds held within +-36, where expit is still strictly inside (0, 1) in doubles
    return expit(np.clip(np.log(p) - np.log1p(-p) + shift, -36.0, 36.0))
