"""Label shift: confidences for a use set whose class frequencies differ from the test
set's.

A calibrator is fitted on a labelled test set whose classes occur with frequencies pi_s (the
*source* priors). The set it is used on may have other frequencies pi_u. Under *label shift*
-- p(x | y) is the same in both sets, only the class frequencies change -- the top-label
confidence of predicted
class k at score s changes in closed form (derivation: ``docs/label_shift.md``)::

    odds_u = odds_s * w_k / wbar_FP(k, s),     w_j = pi_u(j) / pi_s(j),
    wbar_FP(k, s) = sum_{j != k} w_j q_kj(s)

where q_kj(s) is the share of true class j among the false positives of k near score s. The
fitted calibrator stores those shares per predicted class and score region
(:class:`topcal.evidence.confusion.ConfusionStats`).

This module

* estimates pi_u from the *unlabelled* use set (:func:`estimate_priors`): ``"em"``, the EM
  of Saerens et al. (2002, "MLLS"; by default the MAP variant with a weak Dirichlet prior at
  pi_s), run on BCTS-calibrated full vectors when the labelled test set is given (EM+BCTS,
  Alexandari et al. 2020), else on the temperature family's calibrated full vectors where
  the model has them, else on the model's top-label posterior P(Y | k, S); and ``"bbse"``,
  black-box shift estimation (Lipton et al. 2018) with the discrete predictor (predicted
  class, score region), solved by non-negative least squares. Bootstrap percentile intervals
  over the use set's rows. A safety step (:mod:`~topcal.labelshift.safety`) then chooses how
  far to move from pi_s towards the estimate, by simulated shift on the model's own counts:
  not at all where the estimator would do harm for this model and use-set size.
* adapts a fitted calibrator to estimated or user-given priors (:func:`adapt`), giving an
  :class:`AdaptedCalibrator`: a calibrator like any other (``predict``, ``curve``,
  ``describe``, saved as JSON, ``topcal apply``).

The meta-estimator wrapping a classifier and a calibrator (``TopLabelCalibratedClassifier``)
adapts by calling :func:`adapt` on its fitted calibrator with the use set's predictions as a
TopLabelData.

The package: :mod:`~topcal.labelshift.estimators` (EM, BBSE, BCTS, the adapted confidence),
:mod:`~topcal.labelshift.safety` (:func:`choose_shrink`, the safety step),
:mod:`~topcal.labelshift.estimates` (:func:`estimate_priors` from a fitted model) and
:mod:`~topcal.labelshift.adapted` (:func:`adapt`, :class:`AdaptedCalibrator`,
:func:`read_priors`).
"""

from .adapted import AdaptedCalibrator, adapt, read_priors
from .estimates import PriorEstimate, estimate_priors, source_posteriors
from .estimators import (
    ADAPTED_METHOD,
    ESTIMATORS,
    adapt_confidence,
    bbse_priors,
    bcts_probs,
    em_priors,
    fit_bcts,
)
from .safety import Shrink, choose_shrink

__all__ = [
    "ADAPTED_METHOD",
    "ESTIMATORS",
    "PriorEstimate",
    "AdaptedCalibrator",
    "estimate_priors",
    "adapt",
    "em_priors",
    "bbse_priors",
    "adapt_confidence",
    "source_posteriors",
    "read_priors",
    "fit_bcts",
    "bcts_probs",
    "choose_shrink",
    "Shrink",
]
