"""topcal: post-hoc top-label confidence calibration.

Fit, per predicted class, a function turning a classifier's score into the probability that
the prediction is right; check it by eye; save it as JSON; apply it to new predictions.
Implements Salamon et al., "Estimating Classification Confidence Using Kernel Densities".

>>> import topcal
>>> data = topcal.datasets.load_phanns()
>>> cal = topcal.calibrator("hist").fit(data)
>>> conf = cal.predict(data)
"""

from ._interrupt import guard_cli_import

guard_cli_import()  # first: Ctrl-C during the imports below ends the command with one line

from . import datasets, metrics  # noqa: E402
from ._version import __version__
from .calibrators import (
    Calibrator,
    Curve,
    ScoreCalibrator,
    available_methods,
    calibrator,
    paper_calibrator,
)
from .data import TopLabelData
from .errors import TopcalError
from .evidence.core import Evidence
from .io import read_data, read_stats
from .persist import load, save
from .evidence.stats import ScoreStats
from .thresholds.core import Thresholds, fit_thresholds, load_thresholds
from .thresholds.core import fit_and_threshold
from . import report
from .api import compare, make_report


class _ReportPackage(type(report)):  # type: ignore[misc]  # the module type, read at run time
    """``topcal.report`` is the package (:mod:`topcal.report`, ``build_report`` and the
    report's parts); calling it as the function it once was still writes the report, with a
    FutureWarning."""

    def __call__(self, *args, **kwargs):
        import warnings

        warnings.warn(
            "topcal.report(...) is now topcal.make_report(...) (topcal.report is the package "
            "topcal.report); calling the package will stop working in a future release",
            FutureWarning,
            stacklevel=2,
        )
        return make_report(*args, **kwargs)


report.__class__ = _ReportPackage  # the package, callable: no function shadows it


def __getattr__(name):
    # the scikit-learn meta-estimator needs scikit-learn (topcal[sklearn]); import it on
    # first use
    if name == "TopLabelCalibratedClassifier":
        from .estimator import TopLabelCalibratedClassifier

        return TopLabelCalibratedClassifier
    raise AttributeError(f"module 'topcal' has no attribute {name!r}")


__all__ = [
    "__version__",
    "TopLabelData",
    "TopcalError",
    "Calibrator",
    "ScoreCalibrator",
    "Curve",
    "calibrator",
    "paper_calibrator",
    "available_methods",
    "load",
    "save",
    "read_data",
    "compare",
    "make_report",
    "report",
    "TopLabelCalibratedClassifier",
    "read_stats",
    "ScoreStats",
    "Evidence",
    "fit_thresholds",
    "fit_and_threshold",
    "load_thresholds",
    "Thresholds",
    "datasets",
    "metrics",
]
