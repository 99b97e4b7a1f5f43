"""The calibrated full vector of a fitted model: :meth:`~.base.Calibrator.predict_proba`.

topcal calibrates one number per row, the confidence c in the predicted class k(X). Where
the scores are full vectors, a fitted model also gives a whole probability vector:

* its entry at k(X) is c, the model's calibrated confidence, unchanged;
* its other entries are (1 - c) times the **vector map**'s distribution over the other
  classes (the map's softmax with class k(X) left out, renormalised).

The vector's argmax is k(X) wherever c is at least every other entry. On the rows where the
map finds another class more probable than c (always so where c < 1/K) it is that class, and
a decision on the vector takes it (the estimator's ``predict``): on the bench sets such rows
were 1.8-8.9% (41% for a 12%-accurate network), and on six of seven sets the vector's argmax
was right more often than k(X). Capping the others just below c instead (k(X) always on top
where c >= 1/K) cost 5% of full-vector NLL on a CIFAR-10 wide ResNet (docs/benchmarks.md):
the mass moved off the capped class is where the label often is.

The vector map is the model's own whole-vector map where it has one (``vs``, ``sms``, their
corrected forms ``vs-hier-platt`` / ``sms-pooled-beta``, ``auto`` having chosen one of
them), else a map fitted beside the model on the same rows when the model is fitted with
``keep="evidence"`` (the default; parts of other models and cross-validation folds fit none;
``fit(..., vector=False)`` neither: the map holds the n x K features while it fits): ``sms``
up to :data:`SMS_MAX_CLASSES` classes, ``vs`` above (auto's own class limit for ``sms``,
:attr:`~.vector.StructuredMatrixScaling.auto_max_classes`). The model file keeps it under
``"vector"``.

The do-nothing reference (``uncalibrated``) gives the scores' own vector. A model without a
map (fitted on top scores, binned counts or statistics alone: a streamed or Dask fit, or
``update`` of one) shares 1 - c in proportion to the **uncalibrated** vector, each share
capped at c where c >= 1/K (:func:`distribute_rest`), and warns that the rest is not
calibrated. Data without full vectors has no vector to give: a DataError.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..data import TopLabelData
from ..errors import TopcalWarning
from .context import FitContext
from .registry import get_class

__all__ = ["distribute_rest", "combine", "map_name", "SMS_MAX_CLASSES"]

#: Up to this many classes the map fitted beside a model is ``sms``, above it ``vs`` (sms's
#: fit costs O(n K^2) a pass and its ridge leaves its off-diagonal part near 0 with many
#: classes).
SMS_MAX_CLASSES = 15

#: The methods a separately fitted vector map may be (the model file's ``"vector"``).
MAP_METHODS = ("vs", "sms")


def map_name(n_classes: int) -> str:
    """The method of the vector map fitted beside a model of ``n_classes`` classes."""
    return "sms" if n_classes <= SMS_MAX_CLASSES else "vs"


def combine(conf: np.ndarray, pred: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """Full rows: ``conf`` at ``pred``, (1 - conf) times ``rest`` (each row's distribution
    over the other classes, 0 at ``pred``) elsewhere; written into ``rest`` and returned."""
    rest *= (1.0 - conf)[:, None]
    rest[np.arange(len(pred)), pred] = conf
    return rest


def distribute_rest(base: np.ndarray, top: np.ndarray, conf: np.ndarray) -> np.ndarray:
    """Full probability rows whose entry ``top`` is ``conf``, the rest shared by ``base``.

    The remaining mass 1 - c is shared among the other classes in proportion to ``base``
    (the classifier's own, uncalibrated probabilities), each capped at c so the predicted
    class stays the most probable (the excess going to the uncapped classes). When c < 1/K
    no such split exists; the other classes then get 1 - c in plain proportion, and the top
    entry is no longer the largest. Rows whose other classes all have probability 0 share 1
    - c equally.

    Parameters
    ----------
    base : ndarray (n, K)
        The classifier's probabilities (rows summing to 1).
    top : ndarray of int (n,)
        Column of each row's predicted class.
    conf : ndarray (n,)
        Calibrated confidence of each row, in [0, 1].

    Returns
    -------
    ndarray (n, K), rows summing to 1.
    """
    n, k = base.shape
    rows = np.arange(n)
    out = np.zeros((n, k))
    out[rows, top] = conf
    if k == 1:
        return out
    rest = base.astype(np.float64, copy=True)
    rest[rows, top] = 0.0
    rest = np.clip(rest, 0.0, None)
    total = rest.sum(axis=1)
    empty = total <= 0
    rest[empty] = 1.0
    rest[empty, top[empty]] = 0.0
    mass = 1.0 - conf
    feasible = conf * (k - 1) >= mass - 1e-12
    # others sorted from the largest down: the first j take the cap c, the rest share what
    # is left in proportion; j is the first count for which the next-largest share no longer
    # exceeds c
    keyed = rest.copy()
    keyed[rows, top] = -1.0  # the predicted class sorts last and is left out
    order = np.argsort(-keyed, axis=1, kind="stable")[:, : k - 1]
    r = np.take_along_axis(rest, order, axis=1)
    suffix = np.cumsum(r[:, ::-1], axis=1)[:, ::-1]  # suffix[:, j] = sum of r[:, j:]
    alloc = np.zeros_like(r)
    done = ~feasible
    alloc[done] = mass[done, None] * r[done] / suffix[done, :1]
    for j in range(k - 1):
        left = mass - j * conf
        share = np.where(
            suffix[:, j] > 0, left / np.where(suffix[:, j] > 0, suffix[:, j], 1.0), 0.0
        )
        stop = ~done & (share * r[:, j] <= conf + 1e-15)
        if stop.any():
            alloc[stop, :j] = conf[stop, None]
            alloc[stop, j:] = share[stop, None] * r[stop, j:]
            done |= stop
    if not done.all():  # every other class capped: only when c == 1/K exactly
        alloc[~done] = conf[~done, None]
    np.put_along_axis(out, order, alloc, axis=1)
    return out


def fit_map(model, data: TopLabelData, warm=None, same_rows: bool = False):
    """The vector map fitted beside ``model`` on its fitting ``data`` (from ``warm``, a fit
    of the same map method, e.g. auto's cross-validation's; ``same_rows``: fitted on these
    very rows), or None where ``data`` has no full vectors over 2 classes or more, or
    ``model`` has its own map."""
    if (
        model.is_baseline  # its vector is the scores' own
        or not data.has_full
        or data.n_classes < 2
        or model._vector_map() is not None
    ):
        return None
    cls = get_class(map_name(data.n_classes))
    warm = warm if isinstance(warm, cls) else None
    with warnings.catch_warnings():
        # the map's own notes (never-predicted classes, a stopped optimiser) are about a
        # helper of the model, not the model; the model's fit has said what matters about
        # the data
        warnings.simplefilter("ignore", TopcalWarning)
        context = FitContext(same_rows=same_rows and warm is not None)
        return cls().fit(data, keep="model", warm=warm, context=context)


def load_map(d, classes: tuple):
    """The vector map of a model file's ``"vector"`` entry (None where there is none)."""
    if d is None:
        return None
    if not isinstance(d, dict) or d.get("method") not in MAP_METHODS:
        raise ValueError(f"the vector map must be one of {', '.join(MAP_METHODS)}")
    m = get_class(d["method"]).from_dict(d)
    if tuple(m.classes_) != tuple(classes):
        raise ValueError("the vector map must have the model's classes")
    return m

