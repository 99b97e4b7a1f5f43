"""Estimating a use set's class priors from a fitted calibrator (:func:`estimate_priors`),
with bootstrap intervals (:class:`PriorEstimate`), and the model's posteriors they start
from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _progress
from ..calibrators.base import Calibrator
from ..calibrators.wrapper import Wrapper
from ..evidence.confusion import ConfusionStats
from ..data import TopLabelData, preview
from .._params import Interval
from ..errors import DataError, NotFittedError, ParameterError, TopcalError
from .safety import CellMix, Shrink, choose_shrink, shrink_priors
from .estimators import (
    BBSE_DENSE_CELLS,
    ESTIMATORS,
    FP_PSEUDOCOUNT,
    PRIOR_STRENGTH,
    adapt_confidence,
    bbse_priors,
    bcts_probs,
    em_priors,
    fit_bcts,
)

#: Most bootstrap resamples :func:`estimate_priors` runs (a request for 10^20 used to run
#: until killed).
MAX_BOOTSTRAP = 100_000

__all__ = [
    "PriorEstimate",
    "estimate_priors",
    "source_posteriors",
    "source_model",
    "confusion_of",
    "check_use_data",
    "fp_mix",
    "fp_weight",
    "top_label_posterior",
    "check_nonneg",
    "check_shrink",
]


# --------------------------------------------------------------- estimates
@dataclass(frozen=True, eq=False)
class PriorEstimate:
    """Source and use-set class priors, with bootstrap intervals when estimated.

    Attributes
    ----------
    classes : tuple of str
    source : ndarray (K,)
        Class frequencies of the labelled test set.
    priors : ndarray (K,)
        Use-set priors (estimated or given).
    lower, upper : ndarray (K,) or None
        Bootstrap percentile interval at ``level`` (None when given by the user or
        ``n_bootstrap`` was 0).
    estimator : str
        "em", "bbse" or "given".
    n_use : int
        Rows of the use set (0 when given).
    level : float
    n_bootstrap : int
    basis : str
        What the estimate was computed from (e.g. "top-label posterior").
    shrink : float
        The safety step's factor lam (:mod:`~topcal.labelshift.safety`): ``priors`` are (1 -
        lam) source + lam ``estimated``, the intervals likewise; 1 when not shrunk.
    shrink_reason : str
        Why that factor (empty for priors given by the user).
    estimated : ndarray (K,) or None
        The estimator's own priors before the safety step (None when ``shrink`` is 1).
    """

    classes: tuple[str, ...]
    source: np.ndarray
    priors: np.ndarray
    lower: np.ndarray | None
    upper: np.ndarray | None
    estimator: str
    n_use: int
    level: float
    n_bootstrap: int
    basis: str = ""
    shrink: float = 1.0
    shrink_reason: str = ""
    estimated: np.ndarray | None = None

    @property
    def ratios(self) -> np.ndarray:
        """w = priors / source (0 where the source prior is 0)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(
                self.source > 0, self.priors / np.where(self.source > 0, self.source, 1.0), 0.0
            )

    def to_dict(self) -> dict:
        def lst(a):
            return None if a is None else [float(v) for v in a]

        return {
            "source": lst(self.source),
            "priors": lst(self.priors),
            "lower": lst(self.lower),
            "upper": lst(self.upper),
            "estimator": self.estimator,
            "n_use": int(self.n_use),
            "level": float(self.level),
            "n_bootstrap": int(self.n_bootstrap),
            "basis": self.basis,
            "shrink": float(self.shrink),
            "shrink_reason": self.shrink_reason,
            "estimated": lst(self.estimated),
        }

    @classmethod
    def from_dict(cls, d: dict, classes: tuple[str, ...]) -> "PriorEstimate":
        K = len(classes)

        def arr(key, optional=False):
            v = d.get(key)
            if v is None and optional:
                return None
            a = np.asarray(v, dtype=np.float64)
            if a.shape != (K,) or not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"{key} must hold {K} finite non-negative numbers")
            return a

        if d.get("estimator") not in ESTIMATORS + ("given",):
            raise ValueError(f"unknown estimator {d.get('estimator')!r}")
        lam = float(
            d.get("shrink", 1.0)
        )  # files written before the safety step: the estimate as it is
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"shrink must be in [0, 1], got {lam}")
        return cls(
            tuple(classes),
            arr("source"),
            arr("priors"),
            arr("lower", True),
            arr("upper", True),
            str(d["estimator"]),
            int(d["n_use"]),
            float(d["level"]),
            int(d["n_bootstrap"]),
            str(d.get("basis", "")),
            lam,
            str(d.get("shrink_reason", "")),
            arr("estimated", True),
        )


def source_model(model):
    """The model whose evidence ``model``'s is: down a chain of wrappers that hold none of
    their own (an adapted model's source, :attr:`Wrapper.owns_evidence`), else ``model``
    itself."""
    while isinstance(model, Wrapper) and not model.owns_evidence:
        model = model.inner_
    return model


def confusion_of(model) -> ConfusionStats:
    """The confusion statistics of a fitted model (an adapted model's source's); one-line
    errors otherwise."""
    if not isinstance(model, Calibrator):
        raise TopcalError(
            f"label-shift adaptation needs a fitted topcal calibrator, got {type(model).__name__}"
        )
    if not hasattr(model, "classes_"):
        raise NotFittedError(
            f"this {model.name!r} calibrator is not fitted yet; call fit(data) first"
        )
    model = source_model(model)
    stats = model.evidence_.confusion
    if stats is None:
        raise DataError(
            f"this {model.name!r} model does not know the true classes behind its "
            "predictions (it was fitted on binned TP/FP counts, from or updated with score "
            "statistics alone, or saved before topcal stored them); label-shift adaptation "
            "needs test data with a true class per sample: refit on such data (in memory, "
            "or streamed with --chunk-rows / --engine dask)"
        )
    return stats


def check_use_data(model, data) -> TopLabelData:
    """A use set on the model's class list: any subset of the model's classes, in any order,
    may occur (a use set need not predict every class); one-line DataError otherwise."""
    if not isinstance(data, TopLabelData):
        raise DataError(f"the use set must be a TopLabelData, got {type(data).__name__}")
    if data.has_full and set(data.classes) != set(model.classes_):
        raise DataError(
            f"the use set's score columns {preview(data.classes)} are not the model's "
            f"{len(model.classes_)} classes ({preview(model.classes_)}); give one column per "
            "model class, as when fitting"
        )
    return data.with_classes(model.classes_, "the use set")


def _vector_model(model):
    """The temperature-family model behind ``model`` (itself, auto's choice, an adapted
    model's source), or None."""
    # auto: the method it chose
    base = model.innermost() if isinstance(model, Wrapper) else model
    if base.needs_full and hasattr(base, "temperature_") and hasattr(base, "awards_"):
        return base
    return None


def _uses_vectors(model, data) -> bool:
    return data.has_full and _vector_model(model) is not None


def source_posteriors(
    model: Calibrator, data: TopLabelData, *, fp_pseudocount: float = FP_PSEUDOCOUNT
) -> np.ndarray:
    """P_s(y | x) of each row, shape (n, K), under the test set's class frequencies.

    For the temperature family (also when ``auto`` chose it) on data with full score
    vectors: the method's calibrated vector, softmax((log y + A_k e_k) / T_k) with k the
    predicted class (sts, csts, tswa, cstswa). For every other model: the top-label
    posterior P(Y | k, S): the calibrated confidence c for the predicted class k and (1 - c)
    shared among the other classes as the true classes behind k's false positives in the
    test set, in the row's score region.
    """
    stats = confusion_of(model)
    data = check_use_data(model, data)
    base = source_model(model)
    if _uses_vectors(base, data):
        vec = _vector_model(base)
        z = data.log_probs().copy()
        rows = np.arange(data.n_rows)
        z[rows, data.pred] += vec.awards_[data.pred]
        z /= vec.temperature_[data.pred][:, None]
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)
    c = base.predict(data)
    return top_label_posterior(stats, data, c, np.ones(stats.n_classes), fp_pseudocount)


def fp_mix(
    stats: ConfusionStats, pred, score, weights, pseudocount: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the FP mix q (n, K; zero at the predicted class), and wbar_FP = q . w.

    The counts of the row's region, shrunk as
    :func:`~topcal.labelshift.estimators.shrunk_fp_mix` describes (towards the mix behind
    all the test set's false positives, weight ``pseudocount``). Dense in the classes:
    :func:`fp_weight` where only wbar_FP is needed.
    """
    mix = CellMix.of_stats(stats, pseudocount)
    cells = stats.cells(pred, score)
    q = mix.S[cells].toarray() + mix.h[cells][:, None] * mix.v
    return q, q @ weights


def fp_weight(stats: ConfusionStats, pred, score, weights, pseudocount: float) -> np.ndarray:
    """Per row, wbar_FP = q . w of :func:`fp_mix`, computed per cell of the model's counts
    (their nonzeros, not rows x classes)."""
    mix = CellMix.of_stats(stats, pseudocount)
    w = np.asarray(weights, dtype=np.float64)
    # over the mix's own sum (1 up to rounding): the same weights in every class give
    # exactly those weights, so an adaptation to the source priors returns the confidence
    # bit for bit
    d = mix.dot(np.stack([w, np.ones_like(w)], axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        per_cell = np.where(d[:, 1] > 0, d[:, 0] / np.where(d[:, 1] > 0, d[:, 1], 1.0), 0.0)
    return per_cell[stats.cells(pred, score)]


def top_label_posterior(stats, data, conf, weights, pseudocount) -> np.ndarray:
    """P(Y | k, S) under prior ratios ``weights`` (all ones: the source)."""
    q, wbar = fp_mix(stats, data.pred, data.score, weights, pseudocount)
    rows = np.arange(data.n_rows)
    c_new = adapt_confidence(conf, weights[data.pred], wbar)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(wbar > 0, (1.0 - c_new) / np.where(wbar > 0, wbar, 1.0), 0.0)
    post = q * weights * scale[:, None]
    post[rows, data.pred] = c_new
    return post


def estimate_priors(
    model: Calibrator,
    data: TopLabelData,
    *,
    estimator: str = "em",
    source_data=None,
    prior_strength: float | None = None,
    n_bootstrap: int = 100,
    level: float = 0.95,
    seed: int = 0,
    fp_pseudocount: float = FP_PSEUDOCOUNT,
    shrink="auto",
) -> PriorEstimate:
    """Estimate the use set's class priors from its unlabelled predictions.

    Parameters
    ----------
    model : fitted Calibrator
        Fitted on labelled per-sample test data (it stores the confusion counts).
    data : TopLabelData
        The use set (labels, if any, are ignored).
    estimator : {"em", "bbse"}, default "em"
        "em": EM (Saerens et al. 2002) on :func:`source_posteriors` (or on BCTS vectors with
        ``source_data``). "bbse": confusion-matrix inversion (Lipton et al. 2018).
    source_data : TopLabelData, optional
        The labelled test set the model was fitted on, with full score vectors (and a use
        set with them too): EM on its bias-corrected temperature scaling (:func:`fit_bcts`),
        i.e. EM+BCTS of Alexandari et al. (2020). Only for ``estimator="em"``.
    prior_strength : float, optional
        Pseudo-samples per class at the source priors (0: the plain estimators). Default
        :data:`PRIOR_STRENGTH` (em 0.1, bbse 0.3).
    n_bootstrap : int, default 100
        Bootstrap resamples of the use set's rows for the interval; 0 for none.
    level : float, default 0.95
        Coverage of the percentile interval.
    seed : int, default 0
        Seed of the bootstrap.
    fp_pseudocount : float, default 10
        Shrinkage of each class's FP mix towards the overall one (EM on the top-label
        posterior only), in false positives.
    shrink : "auto" or float in [0, 1], default "auto"
        The safety step: (1 - lam) source + lam estimate, lam chosen by simulated shift on
        the model's own counts (:func:`choose_shrink`; 0 where the estimator would do harm),
        or given.

    Returns
    -------
    PriorEstimate
        The interval reflects the use set's sampling noise only, not the test set's.
    """
    stats = confusion_of(model)
    data = check_use_data(model, data)
    prior_strength = _checked_options(
        estimator, n_bootstrap, seed, level, fp_pseudocount, prior_strength, shrink
    )
    ps = stats.source_priors()
    counts, n_use = _use_counts(data)
    run, basis = _estimator_run(
        model, data, stats, estimator, source_data, counts, ps, prior_strength, fp_pseudocount
    )
    estimated = run()
    chosen = _safety_step(
        stats, estimated, n_use, estimator, source_data, prior_strength, fp_pseudocount, seed,
        shrink,
    )  # fmt: skip
    lam = chosen.factor
    point = estimated if lam == 1.0 else shrink_priors(ps, estimated, lam)
    boot = (run, data.n_rows, counts, n_use, estimated, estimator, int(n_bootstrap))
    lower, upper = _shrunk_interval(boot, ps, lam, level, seed)
    estimated = None if lam == 1.0 else estimated
    return PriorEstimate(
        tuple(model.classes_), ps, point, lower, upper, estimator, int(round(n_use)),
        float(level), int(n_bootstrap), basis, lam, chosen.reason, estimated,
    )  # fmt: skip


def _shrunk_interval(boot: tuple, ps, lam: float, level, seed):
    """The bootstrap interval (``boot``: :func:`_bootstrap_interval`'s first arguments) of
    the priors in use, (1 - lam) ps + lam estimate: (None, None) without resamples."""
    if boot[-1] == 0:
        return None, None
    if lam == 0.0:
        # not adapted: (1 - 0) ps + 0 x any resample's estimate is ps itself, so the
        # resamples (the bootstrap and the safety step draw from their own generators) would
        # change nothing; at 10^5 classes they were hours of EM
        return ps.copy(), ps.copy()
    run, n, counts, n_use, point, estimator, n_bootstrap = boot
    lower, upper = _bootstrap_interval(
        run, n, counts, n_use, point, estimator, n_bootstrap, level, seed
    )
    if lam != 1.0:
        lower, upper = (1.0 - lam) * ps + lam * lower, (1.0 - lam) * ps + lam * upper
    return lower, upper


def _safety_step(
    stats, point, n_use, estimator, source_data, prior_strength, fp_pseudocount, seed, shrink
) -> Shrink:
    """How far to move from the source priors to the estimate ``point`` (``shrink``: "auto",
    by :func:`~topcal.labelshift.safety.choose_shrink`, or the given factor)."""
    if shrink != "auto":
        return Shrink(float(shrink), f"given (shrink={float(shrink):g})")
    # bbse is simulated exactly and EM on BCTS vectors errs less than the simulation's
    # cell-level EM: the moment reading of the error; EM on the model's own posteriors keeps
    # the conservative one
    rule = "moment" if estimator == "bbse" or source_data is not None else "estimate"
    return choose_shrink(
        stats,
        point,
        max(int(round(n_use)), 1),
        estimator=estimator,
        prior_strength=prior_strength,
        fp_pseudocount=fp_pseudocount,
        seed=seed,
        truth=rule,
    )


def _use_counts(data):
    """The samples behind each row of the use set (None: one each) and their total: rows of
    a binned use set (or any with tp/fp) stand for tp + fp samples each, and those counts
    weigh them."""
    counts = None if data.tp is None or np.all(data.tp + data.fp == 1.0) else data.tp + data.fp
    n_use = data.n_rows if counts is None else float(counts.sum())
    if counts is not None and not n_use > 0:
        raise DataError(
            "the use set's rows hold no samples (every tp + fp is 0); give rows with counts"
        )
    return counts, n_use


def _bootstrap_interval(run, n, counts, n_use, point, estimator, n_bootstrap, level, seed):
    """The percentile interval of the estimate over bootstrap resamples of the use set."""

    def resample(rng):
        """Bootstrap weights per row: n draws of rows, or of the samples behind weighted
        rows."""
        if counts is None:
            return np.bincount(rng.integers(0, n, n), minlength=n)
        return rng.multinomial(int(round(n_use)), counts / n_use).astype(np.float64)

    rng = np.random.default_rng(seed)
    boot = bootstrap(run, resample, rng, n_bootstrap, point, n if estimator == "em" else None)
    a = (1.0 - level) / 2
    return np.quantile(boot, a, axis=0), np.quantile(boot, 1 - a, axis=0)


def _checked_options(estimator, n_bootstrap, seed, level, fp_pseudocount, prior_strength, shrink):
    """Check :func:`estimate_priors`' options; return the prior strength (its default if
    None)."""
    if estimator not in ESTIMATORS:
        raise ParameterError(f"estimator must be one of {', '.join(ESTIMATORS)}; got {estimator!r}")
    if (
        isinstance(n_bootstrap, bool)
        or not isinstance(n_bootstrap, (int, np.integer))
        or n_bootstrap < 0
    ):
        raise ParameterError(f"n_bootstrap must be an integer >= 0; got {n_bootstrap!r}")
    if n_bootstrap > MAX_BOOTSTRAP:
        raise ParameterError(
            f"n_bootstrap must be at most {MAX_BOOTSTRAP:,} (each resample refits the "
            "estimator; the percentile interval settles long before); got "
            f"{str(n_bootstrap)[:30]}"
        )
    if seed is not None and not Interval(0, 2**32 - 1, integer=True).ok(seed):
        raise ParameterError(
            f"seed must be an integer in [0, 2**32 - 1] (or None); got {seed!r:.40}"
        )
    if isinstance(level, bool) or not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ParameterError(f"level must be a number strictly between 0 and 1; got {level!r}")
    check_nonneg("fp_pseudocount", fp_pseudocount)
    if prior_strength is None:
        prior_strength = PRIOR_STRENGTH[estimator]
    check_nonneg("prior_strength", prior_strength)
    check_shrink(shrink)
    return prior_strength


def _estimator_run(
    model, data, stats, estimator, source_data, counts, ps, prior_strength, fp_pseudocount
):
    """The estimator as ``run(weights=None, init=None) -> priors`` on the use set's rows,
    and what it runs on (the estimate's ``basis``)."""
    if estimator == "em":
        if source_data is not None:
            P = _bcts_posteriors(model, source_data, data)
            basis = "BCTS full vectors"
        else:
            P = _em_posteriors(model, data, fp_pseudocount)
            basis = (
                "temperature-scaled full vectors"
                if _uses_vectors(model, data)
                else "top-label posterior"
            )

        def run(w=None, init=None):
            return em_priors(
                P,
                ps,
                prior_strength=prior_strength,
                weights=counts if w is None else w,
                init=init,
            )

        return run, basis
    if source_data is not None:
        raise ParameterError(
            "source_data is used by estimator='em' only; bbse needs just the model"
        )
    cells, C = _cells(stats, data)
    # a few classes: the dense table once, not per run
    if np.prod(C.shape) <= BBSE_DENSE_CELLS:
        C = C.toarray()

    def run(w=None, init=None):
        w = counts if w is None else w
        return bbse_priors(
            C,
            np.bincount(cells, weights=w, minlength=C.shape[0]),
            ps,
            prior_strength=prior_strength,
        )

    return run, "predicted class x score region cells"


def _bcts_posteriors(model, source_data, data) -> np.ndarray:
    if not isinstance(source_data, TopLabelData):
        raise DataError(f"source_data must be a TopLabelData, got {type(source_data).__name__}")
    if tuple(source_data.classes) != tuple(model.classes_):
        raise DataError(
            f"source_data's classes {preview(source_data.classes)} differ from the model's "
            f"{preview(model.classes_)}; give the labelled test set the model was fitted on"
        )
    if source_data.labels is None:
        raise DataError("source_data needs per-sample true classes (the labelled test set)")
    freq = np.bincount(
        source_data.labels,
        weights=source_data.tp + source_data.fp,
        minlength=len(model.classes_),
    )
    if not np.allclose(freq / freq.sum(), confusion_of(model).source_priors(), rtol=0, atol=1e-9):
        raise DataError(
            "source_data's class frequencies differ from those of the test set the model "
            "was fitted on; give that same labelled test set"
        )
    source_data.require_full("EM on BCTS-calibrated vectors (source_data)")
    data.require_full("EM on BCTS-calibrated vectors (the use set)")
    T, b = fit_bcts(source_data)
    return bcts_probs(data, T, b)


#: Most weights (resamples x rows) one pass of the bootstrap holds: 100 resamples of 40,000
#: rows.
BOOTSTRAP_BATCH_CELLS = 4_000_000


def bootstrap(run, resample, rng, n_bootstrap: int, point, n_rows: int | None) -> np.ndarray:
    """``n_bootstrap`` estimates, (B, K): ``run`` on the weights of each ``resample`` drawn
    from ``rng`` in turn, starting from ``point``. With ``n_rows`` (EM), ``run`` takes a
    batch of resamples' weights, (b, n_rows), in one pass of matrix products
    (:func:`~topcal.labelshift.estimators.em_priors`); without, one resample at a time."""
    batch = 1 if n_rows is None else min(n_bootstrap, BOOTSTRAP_BATCH_CELLS // max(n_rows, 1))
    batch = max(batch, 1)
    out: list[Any] = []
    with _progress.bar(total=n_bootstrap, desc="bootstrap", unit=" resamples") as bar:
        while len(out) < n_bootstrap:
            size = min(batch, n_bootstrap - len(out))
            if n_rows is None:
                out.append(run(resample(rng), init=point))
            else:
                out.extend(run(np.stack([resample(rng) for _ in range(size)]), init=point))
            bar.update(size)
    return np.array(out)


def _em_posteriors(model, data: TopLabelData, fp_pseudocount: float):
    """What EM runs on: :func:`source_posteriors`; the top-label posterior as sparse plus
    rank one (:class:`CellMix`), the same values, so a step costs the rows and their cells'
    nonzeros, not rows x classes (1,500 classes took minutes)."""
    if _uses_vectors(source_model(model), data):
        return source_posteriors(model, data, fp_pseudocount=fp_pseudocount)
    stats = confusion_of(model)
    c = source_model(model).predict(data)
    return CellMix.of_stats(stats, fp_pseudocount).row_posteriors(c, _cell_index(stats, data))


def _cell_index(stats: ConfusionStats, data: TopLabelData) -> np.ndarray:
    """Each row's (predicted class, score region) cell, numbered as the rows of
    ``stats.table``."""
    return stats.cells(data.pred, data.score)


def _cells(stats: ConfusionStats, data: TopLabelData):
    """Each row's (predicted class, score region) cell index, and the source counts per cell
    (sparse, cells x classes)."""
    return _cell_index(stats, data), stats.table


def check_shrink(value) -> None:
    """Raise ParameterError unless ``value`` is "auto" or a number in [0, 1]."""
    if isinstance(value, str) and value == "auto":
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not 0.0 <= value <= 1.0
    ):
        raise ParameterError(f"shrink must be 'auto' or a number in [0, 1]; got {value!r}")


def check_nonneg(name: str, value) -> None:
    """Raise ParameterError unless ``value`` is a finite number >= 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or value < 0
    ):
        raise ParameterError(f"{name} must be a finite number >= 0; got {value!r}")
