"""The five kernel-density calibrators the registry knows: ``kde`` (a fixed bandwidth or a
rule of thumb) and the paper's bandwidth rules ``kde-mon``, ``kde-mon2``, ``kde-mon4``,
``kde-opt``.

What they share (the batched fit of every class, prediction tables, densities, persistence,
describe) is :class:`~topcal.calibrators.kde.calibrator.KDEBase`; each class here only says
how its bandwidth is chosen (docs/kde.md).
"""

from __future__ import annotations

from ..._params import Interval
from ...errors import ParameterError
from . import _rules as rules
from ..registry import register
from .calibrator import MIN_BANDWIDTH_SHARE, KDEBase
from .fitting import NO_BANDWIDTH, Bandwidth

__all__ = ["KDE", "KDEMon", "KDEMon2", "KDEMon4", "KDEOpt", "BandwidthConstraint"]


class BandwidthConstraint:
    """A positive finite number, or one of the rule-of-thumb names."""

    def ok(self, v) -> bool:
        if isinstance(v, str):
            return v in rules.RULES_OF_THUMB
        return Interval(0, 1e300, closed="right").ok(
            v
        )  # finite; an int above 1.8e308 is refused, not overflowed

    def __str__(self) -> str:
        return "a number > 0 (score units) or one of 'silverman', 'scott'"


@register
class KDE(KDEBase):
    """Conf_KDE with a fixed bandwidth per class (paper eq. 9).

    Parameters
    ----------
    bandwidth : float or {"silverman", "scott"}, default "silverman"
        Kernel standard deviation b in score units, the same for every class; or a rule of
        thumb applied to each class's positive scores (weighted, n = |P|): Silverman's 0.9
        min(sd, IQR / 1.34) n^(-1/5) (Silverman 1986, eq. 3.31) or Scott's 1.06 sd n^(-1/5).
        These target the density, not the ratio, and tend to be too small for calibration;
        prefer ``kde-mon2``.
    engine : {"auto", "exact", "binned"}, default "auto"
        "exact" sums every kernel; "binned" linear-bins onto a 4097-point grid over the
        class's support and convolves by FFT; "auto" takes "exact" for classes with at most
        512 positive rows.
    boundary : {None, "reflect"}, default None
        "reflect" mirrors every kernel at both ends of the declared score range (e.g. 0 and
        1, or 0 and 10), so no weight falls outside it. Off by default, as in the paper
        (section 13: "at any reasonable bandwidth the effect is minimal").

    Attributes
    ----------
    bandwidth_ : ndarray, shape (K,)
        Bandwidth used per class; NaN for classes with no positives.
    support_ : list of (float, float) or None
        Where each class's data lies; the curve is constant outside.
    """

    name = "kde"
    summary = "kernel density ratio TP / (TP + FP), fixed bandwidth (paper eq. 9)"
    _parameter_constraints = {
        **KDEBase._parameter_constraints,
        "bandwidth": BandwidthConstraint(),
    }

    def __init__(
        self,
        *,
        bandwidth="silverman",
        engine: str = "auto",
        boundary: str | None = None,
        shrinkage="auto",
    ):
        self.bandwidth = bandwidth
        self.engine = engine
        self.boundary = boundary
        self.shrinkage = shrinkage

    def _fixed_bandwidth(self, score, w, lo, hi) -> float:
        if not isinstance(self.bandwidth, str):
            b = float(self.bandwidth)
            if b < MIN_BANDWIDTH_SHARE * (
                hi - lo
            ):  # b * b would underflow; such a kernel sees no neighbours
                raise ParameterError(
                    f"{self.name}: bandwidth {b:g} is below {MIN_BANDWIDTH_SHARE:g} of the "
                    f"score range width {hi - lo:g}; give a bandwidth in score units, e.g. "
                    "0.05 * (hi - lo)"
                )
            return b
        b = rules.RULES_OF_THUMB[self.bandwidth](score, w)
        if not b > 0:  # one distinct score: any b gives the same (constant) curve
            b = (hi - lo) if hi > lo else 1.0
        return float(b)

    def _bandwidth(self) -> Bandwidth:
        # a number given by the user is kept for a degenerate class; a rule of thumb has
        # nothing to measure there. No warnings: a fixed bandwidth has nothing to choose, a
        # constant curve is the formula's value
        degenerate = NO_BANDWIDTH if isinstance(self.bandwidth, str) else float(self.bandwidth)
        return Bandwidth(None, self._fixed_bandwidth, degenerate)


class _SignChangeKDE(KDEBase):
    """The kde methods whose bandwidth is the smallest with at most so many slope sign
    changes."""

    # the sign-change rules choose wide bandwidths by design: from half the scores' sd on,
    # the local-linear bias term applies (their boundary bias at the top score)
    WIDE_BANDWIDTH_SD = 0.5


@register
class KDEMon(_SignChangeKDE):
    """Conf_KDE with b_mon: the smallest b giving a monotone curve (paper eq. 19).

    Parameters
    ----------
    engine : {"auto", "exact", "binned"}, default "auto"
        See :class:`KDE`.
    boundary : {None, "reflect"}, default None
        See :class:`KDE`.

    Attributes
    ----------
    bandwidth_ : ndarray, shape (K,)
        b_mon per class; NaN for classes with no positives or a degenerate class (only TP,
        only FP, one distinct score).
    """

    name = "kde-mon"
    summary = "kernel density ratio, smallest bandwidth with a monotone curve (paper eq. 19)"
    _bandwidth_rule = rules.SELECTION_RULES["mon"]


@register
class KDEMon2(_SignChangeKDE):
    """Conf_KDE with b_mon2: slope changes sign at most twice (paper eq. 20; recommended).

    Parameters and attributes as :class:`KDEMon`.
    """

    name = "kde-mon2"
    summary = (
        "kernel density ratio, smallest bandwidth with <= 2 slope sign changes (paper's "
        "choice)"
    )
    _bandwidth_rule = rules.SELECTION_RULES["mon2"]


@register
class KDEMon4(_SignChangeKDE):
    """Conf_KDE with b_mon4: slope changes sign at most four times (paper section 12).

    Parameters and attributes as :class:`KDEMon`.
    """

    name = "kde-mon4"
    summary = "kernel density ratio, smallest bandwidth with <= 4 slope sign changes"
    _bandwidth_rule = rules.SELECTION_RULES["mon4"]


@register
class KDEOpt(KDEBase):
    """Conf_KDE with b_opt: minimal leave-one-out top-label NLL of the class.

    Each sample's own kernel is removed from its own group's sum (for binned data, one unit
    of the bin's weight). The paper finds these curves too wiggly on PhANNs (Fig. 13);
    offered for comparison.

    Parameters and attributes as :class:`KDEMon`.
    """

    name = "kde-opt"
    summary = "kernel density ratio, bandwidth minimising leave-one-out NLL (paper section 12)"
    _bandwidth_rule = rules.SELECTION_RULES["opt"]
