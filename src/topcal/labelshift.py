"""Label shift: confidences for a use set whose class frequencies differ from the test set's.

A calibrator is fitted on a labelled test set whose classes occur with
frequencies pi_s (the *source* priors). The set it is used on may have other
frequencies pi_u. Under *label shift* -- p(x | y) is the same in both sets,
only the class frequencies change -- the top-label confidence of predicted
class k at score s changes in closed form (derivation: ``docs/label_shift.md``)::

    odds_u = odds_s * w_k / wbar_FP(k, s),     w_j = pi_u(j) / pi_s(j),
    wbar_FP(k, s) = sum_{j != k} w_j q_kj(s)

where q_kj(s) is the share of true class j among the false positives of k
near score s. The fitted calibrator stores those shares per predicted class
and score region (:class:`topcal.confusion.ConfusionStats`).

This module

* estimates pi_u from the *unlabelled* use set (:func:`estimate_priors`):
  ``"em"``, the EM of Saerens et al. (2002, "MLLS"; by default the MAP
  variant with a weak Dirichlet prior at pi_s), run on BCTS-calibrated full
  vectors when the labelled test set is given (EM+BCTS, Alexandari et al.
  2020), else on the temperature family's calibrated full vectors where the
  model has them, else on the model's top-label posterior P(Y | k, S); and
  ``"bbse"``, black-box shift estimation (Lipton et al. 2018) with the
  discrete predictor (predicted class, score region), solved by non-negative
  least squares. Bootstrap percentile intervals over the use set's rows.
* adapts a fitted calibrator to estimated or user-given priors
  (:func:`adapt`), giving an :class:`AdaptedCalibrator`: a calibrator like any
  other (``predict``, ``curve``, ``describe``, saved as JSON, ``topcal apply``).

A meta-estimator wrapping a classifier and a calibrator (issue 11's
``TopLabelCalibratedClassifier``) adapts by calling :func:`adapt` on its
fitted calibrator with the use set's predictions as a TopLabelData.
"""

from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .calibrators.base import Calibrator, Curve, register_hook
from .calibrators.registry import get_class
from .confusion import ConfusionStats
from .data import TopLabelData
from .errors import DataError, ModelFileError, NotFittedError, ParameterError, TopcalError, TopcalWarning

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
]

#: ``method`` field of an adapted model file.
ADAPTED_METHOD = "label-shift"
#: Prior estimators, by name (CLI ``--estimator``).
ESTIMATORS = ("em", "bbse")

#: EM stops when no prior moves by more than this (Saerens et al. 2002 iterate
#: "until convergence"; 1e-8 is far below any bootstrap interval's width).
EM_TOL = 1e-8
EM_MAX_ITER = 2000
#: User-given priors must sum to 1 within this before they are rescaled to sum
#: to exactly 1 (a CSV written with 6 decimals for 1000 classes is off by <5e-4).
PRIOR_SUM_TOL = 1e-3
#: Weight, in false positives, of the test set's overall FP mix in each
#: class's FP mix (see ``_fp_mix``): a guard for classes with a handful of
#: false positives (CIFAR-100 has ~12 per class; there 0, 10 and 30 gave
#: adapted NLLs within 0.02 of each other). 10 leaves a region with >= 40
#: false positives mostly its own mix.
FP_PSEUDOCOUNT = 10.0
#: Default pseudo-samples per class at the source priors, per estimator. Plain
#: ML/least-squares priors drive classes with few use rows to exactly 0, and a
#: predicted class with prior 0 gets confidence 0: on the CIFAR-100 benchmark
#: cells (2,000 use rows, 100 classes) that made the adapted NLL worse than no
#: adaptation. Chosen on that benchmark (2 seeds, 2 files): EM's 0.1 undid it
#: at a small cost in MSE; BBSE, noisier, needed 0.3.
PRIOR_STRENGTH = {"em": 0.1, "bbse": 0.3}


# ---------------------------------------------------------------- estimators
def em_priors(posteriors, source_priors, *, prior_strength: float = 0.0, weights=None, tol: float = EM_TOL,
              max_iter: int = EM_MAX_ITER, init=None) -> np.ndarray:
    """Maximum-likelihood use-set priors by EM (Saerens, Latinne and Decaestecker 2002).

    Parameters
    ----------
    posteriors : array of shape (n, K)
        Calibrated P_s(y | x) of the unlabelled use-set rows under the source priors.
    source_priors : array of shape (K,)
        pi_s, the class frequencies the posteriors were calibrated for.
    prior_strength : float, default 0
        0 gives the maximum-likelihood estimate. Otherwise the maximum a
        posteriori estimate under a Dirichlet(1 + prior_strength K pi_s) prior
        on pi_u: ``prior_strength K`` pseudo-samples drawn with the source
        priors, which pulls classes seen in few use rows towards no shift
        (the Bayesian view of Ye et al. 2024, "MAPLS").
    weights : array of shape (n,), optional
        Row weights (counts of repeated rows; the bootstrap uses them).
    tol, max_iter : float, int
        Stop when no prior changes by more than ``tol``, or after ``max_iter`` steps.
    init : array of shape (K,), optional
        Starting priors (default ``source_priors``).

    Returns
    -------
    ndarray of shape (K,), the estimated pi_u (sums to 1).

    Notes
    -----
    Each step reweights every posterior by pi_u / pi_s, renormalises it, and
    takes the mean as the new pi_u: the EM iteration for the mixture
    likelihood prod_i sum_y pi_u(y) p(x_i | y). A class with pi_s = 0 keeps
    pi_u = 0 (no information about it).
    """
    P = np.asarray(posteriors, dtype=np.float64)
    ps = np.asarray(source_priors, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        base = np.where(ps > 0, P / np.where(ps > 0, ps, 1.0), 0.0)  # p(x|y) up to a factor per row
    pi = ps.copy() if init is None else np.asarray(init, dtype=np.float64).copy()
    pseudo = float(prior_strength) * ps.size * ps / ps.sum()
    w = np.ones(base.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)

    def step(p):
        # one EM step: sum_i w_i p_j base_ij / sum_l p_l base_il (+ the Dirichlet pseudo-counts)
        den = (base * p).sum(axis=1)  # elementwise, not BLAS: threaded gemv is slower on a busy machine
        inv = np.divide(w, den, out=np.zeros_like(den), where=den > 0)  # rows no class explains add nothing
        new = p * (inv[:, None] * base).sum(axis=0) + pseudo
        return new / new.sum()

    def objective(p):
        den = (base * p).sum(axis=1)
        with np.errstate(divide="ignore"):
            return float(w[den > 0] @ np.log(den[den > 0])) + float(pseudo[p > 0] @ np.log(p[p > 0]))

    # SQUAREM (Varadhan and Roland 2008, scheme S3): extrapolate two EM steps, fall back to
    # them when the extrapolation leaves the simplex or lowers the objective. Same fixed point
    # as plain EM, in far fewer steps where some priors creep towards 0.
    for _ in range(max_iter):
        p1 = step(pi)
        p2 = step(p1)
        r, v = p1 - pi, p2 - 2 * p1 + pi
        nv = np.linalg.norm(v)
        new = p2
        if nv > 0:
            a = min(-np.linalg.norm(r) / nv, -1.0)
            while a < -1.0:
                cand = pi - 2 * a * r + a * a * v
                if np.all(cand >= 0) and cand.sum() > 0:
                    cand = step(cand / cand.sum())
                    if objective(cand) >= objective(p2):
                        new = cand
                    break
                a = (a - 1.0) / 2.0 if a < -1.5 else -1.0
        done = np.max(np.abs(new - pi)) < tol
        pi = new
        if done:
            break
    return pi


def bbse_priors(confusion, pred_counts, source_priors, *, prior_strength: float = 0.0) -> np.ndarray:
    """Black-box shift estimation (Lipton, Wang and Smola 2018).

    Parameters
    ----------
    confusion : array of shape (m, K)
        Source counts of (discrete prediction i, true class j); rows may be
        predicted classes, or finer cells such as (predicted class, score region).
    pred_counts : array of shape (m,)
        Use-set counts of each discrete prediction.
    source_priors : array of shape (K,)
    prior_strength : float, default 0
        Pseudo-samples per class at the source priors, mixed into the estimate:
        pi = (n pi_hat + prior_strength K pi_s) / (n + prior_strength K),
        n the use set's size. Keeps a class that the least-squares solution
        sets to exactly 0 (often one with few use rows) from getting
        confidence 0 on its predictions.

    Returns
    -------
    ndarray of shape (K,), the estimated pi_u.

    Notes
    -----
    With C[i, j] = P_s(prediction i | y = j) and mu the use set's prediction
    frequencies, label shift gives mu = C pi_u. Lipton et al. invert
    C_joint w = mu for w = pi_u / pi_s and clip negative entries; here the
    system is solved for pi_u directly by non-negative least squares (which
    also handles more prediction cells than classes), then normalised.
    """
    from scipy.optimize import nnls

    C = np.asarray(confusion, dtype=np.float64)
    col = C.sum(axis=0)
    seen = col > 0
    cond = C[:, seen] / col[seen]  # P_s(i | y = j)
    mu = np.asarray(pred_counts, dtype=np.float64)
    mu = mu / mu.sum()
    pi_seen, _ = nnls(cond, mu, maxiter=50 * cond.shape[1])
    pi = np.zeros(C.shape[1])
    pi[seen] = pi_seen
    ps = np.asarray(source_priors, dtype=np.float64)
    if pi.sum() <= 0:  # nothing explains the use set: keep the source priors
        return ps.copy()
    n = float(np.sum(pred_counts))
    beta = float(prior_strength) * ps.size
    return (n * pi / pi.sum() + beta * ps / ps.sum()) / (n + beta)


def adapt_confidence(confidence, w_pos, w_fp) -> np.ndarray:
    """The top-label confidence under new priors: odds times w_pos / w_fp.

    ``confidence`` c under the source priors, ``w_pos`` the prior ratio of the
    predicted class, ``w_fp`` the mean prior ratio of the true classes behind
    its false positives. Returns w_pos c / (w_pos c + w_fp (1 - c)); rows where
    that is 0/0 (both ratios 0: no class that could be there is present in the
    use set) keep their confidence.
    """
    c = np.asarray(confidence, dtype=np.float64)
    a = np.asarray(w_pos, dtype=np.float64) * c
    b = np.asarray(w_fp, dtype=np.float64) * (1.0 - c)
    den = a + b
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, a / np.where(den > 0, den, 1.0), c)


def fit_bcts(data: TopLabelData) -> tuple[float, np.ndarray]:
    """Bias-corrected temperature scaling of full score vectors (Alexandari et al. 2020).

    Fits softmax(log y / T + b) to the true classes of labelled ``data`` by
    minimising the multinomial NLL over (log T, b) with L-BFGS-B and the
    analytic gradient. A ridge of 1e-6 (per sample) on b keeps the bias of a
    class absent from the labels finite and fixes b's free additive constant.

    Returns
    -------
    (T, b) : float, ndarray of shape (K,)
    """
    from scipy.optimize import minimize

    data.require_full("bias-corrected temperature scaling")
    if data.labels is None:
        raise DataError("bias-corrected temperature scaling needs per-sample true classes")
    z = data.log_probs()
    y = data.labels
    n, K = z.shape
    rows = np.arange(n)
    ridge = 1e-6

    def fun(theta):
        tau = np.exp(-theta[0])
        u = z * tau + theta[1:]
        m = u.max(axis=1, keepdims=True)
        e = np.exp(u - m)
        se = e.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(se[:, 0]) + m[:, 0] - u[rows, y])) + ridge * float(theta[1:] @ theta[1:])
        p = e / se
        g_b = p.mean(axis=0) - np.bincount(y, minlength=K) / n + 2 * ridge * theta[1:]
        g_tau = float(np.mean((p * z).sum(axis=1) - z[rows, y]))
        return loss, np.concatenate([[-tau * g_tau], g_b])

    lo, hi = np.log(1e-3), np.log(1e3)  # the temperature bounds of topcal's temperature methods
    res = minimize(fun, np.zeros(K + 1), jac=True, method="L-BFGS-B",
                   bounds=[(lo, hi)] + [(None, None)] * K, options={"maxiter": 1000})
    if not res.success:
        warnings.warn(f"bias-corrected temperature scaling stopped before converging ({res.message}); "
                      "EM's prior estimate on its vectors may be off", TopcalWarning, stacklevel=3)
    return float(np.exp(res.x[0])), res.x[1:].copy()


def bcts_probs(data: TopLabelData, temperature: float, bias: np.ndarray) -> np.ndarray:
    """softmax(log y / T + b) of each row, shape (n, K)."""
    u = data.log_probs() / temperature + bias
    u -= u.max(axis=1, keepdims=True)
    p = np.exp(u)
    return p / p.sum(axis=1, keepdims=True)


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
        Bootstrap percentile interval at ``level`` (None when given by the
        user or ``n_bootstrap`` was 0).
    estimator : str
        "em", "bbse" or "given".
    n_use : int
        Rows of the use set (0 when given).
    level : float
    n_bootstrap : int
    basis : str
        What the estimate was computed from (e.g. "top-label posterior").
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

    @property
    def ratios(self) -> np.ndarray:
        """w = priors / source (0 where the source prior is 0)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.source > 0, self.priors / np.where(self.source > 0, self.source, 1.0), 0.0)

    def to_dict(self) -> dict:
        def lst(a):
            return None if a is None else [float(v) for v in a]

        return {"source": lst(self.source), "priors": lst(self.priors), "lower": lst(self.lower),
                "upper": lst(self.upper), "estimator": self.estimator, "n_use": int(self.n_use),
                "level": float(self.level), "n_bootstrap": int(self.n_bootstrap), "basis": self.basis}

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
        return cls(tuple(classes), arr("source"), arr("priors"), arr("lower", True), arr("upper", True),
                   str(d["estimator"]), int(d["n_use"]), float(d["level"]), int(d["n_bootstrap"]),
                   str(d.get("basis", "")))


def _stats(model) -> ConfusionStats:
    if not isinstance(model, Calibrator):
        raise TopcalError(f"label-shift adaptation needs a fitted topcal calibrator, got {type(model).__name__}")
    if not hasattr(model, "classes_"):
        raise NotFittedError(f"this {model.name!r} calibrator is not fitted yet; call fit(data) first")
    if isinstance(model, AdaptedCalibrator):
        model = model.base_
    stats = getattr(model, "confusion_", None)
    if stats is None:
        raise DataError(
            f"this {model.name!r} model does not know the true classes behind its predictions (it was fitted on "
            "binned TP/FP counts, or saved before topcal stored them); label-shift adaptation "
            "needs per-sample test data with true classes: refit on such data"
        )
    return stats


def _check_use(model, data) -> None:
    if not isinstance(data, TopLabelData):
        raise DataError(f"the use set must be a TopLabelData, got {type(data).__name__}")
    unseen = [c for c in data.classes if c not in model.classes_]
    if unseen:
        raise DataError(
            f"the use set has class(es) {unseen} the model never saw (its classes: {list(model.classes_)}); "
            "label shift only changes the frequencies of known classes: refit on test data that includes them"
        )
    if tuple(data.classes) != tuple(model.classes_):
        raise DataError(
            f"the use set's classes {list(data.classes)} differ from the model's {list(model.classes_)}; "
            "pass classes=[...] (or the same probability columns, in the same order) as when fitting"
        )


def _vector_model(model):
    """The temperature-family model behind ``model`` (itself, auto's choice, an adapted model's source), or None."""
    base = model.base_ if isinstance(model, AdaptedCalibrator) else model
    inner = getattr(base, "model_", None)  # auto: the chosen method, fitted on all the data
    base = inner if isinstance(inner, Calibrator) else base
    if base.needs_full and hasattr(base, "temperature_") and hasattr(base, "awards_"):
        return base
    return None


def _uses_vectors(model, data) -> bool:
    return data.has_full and _vector_model(model) is not None


def source_posteriors(model: Calibrator, data: TopLabelData, *, fp_pseudocount: float = FP_PSEUDOCOUNT) -> np.ndarray:
    """P_s(y | x) of each row, shape (n, K), under the test set's class frequencies.

    For the temperature family (also when ``auto`` chose it) on data with full
    score vectors: the method's calibrated vector, softmax((log y + A_k e_k) / T_k) with k the predicted
    class (sts, csts, tswa, cstswa). For every other model: the top-label
    posterior P(Y | k, S): the calibrated confidence c for the predicted class
    k and (1 - c) shared among the other classes as the true classes behind
    k's false positives in the test set, in the row's score region.
    """
    stats = _stats(model)
    _check_use(model, data)
    base = model.base_ if isinstance(model, AdaptedCalibrator) else model
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
    return _top_label_posterior(stats, data, c, np.ones(stats.n_classes), fp_pseudocount)


def _fp_mix(stats: ConfusionStats, pred, score, weights, pseudocount: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the FP mix q (n, K; zero at the predicted class), and wbar_FP = q . w.

    The counts of the row's region are shrunk towards the mix of true classes
    behind *all* false positives of the test set (any predicted class, the
    predicted class itself left out) with weight ``pseudocount``: a class with
    12 false positives would otherwise claim that classes absent from them
    never hide behind its predictions. A region with no false positives gets
    that overall mix; with none anywhere, the source priors of the other classes.
    """
    q = stats.row_counts(pred, score)
    K = stats.n_classes
    rows = np.arange(q.shape[0])
    conf = stats.confusion()
    overall = conf.sum(axis=0) - np.diag(conf)  # FPs of any predicted class, by true class
    if overall.sum() <= 0:
        overall = conf.sum(axis=0)
    g = np.broadcast_to(overall, (q.shape[0], K)).copy()
    g[rows, pred] = 0.0
    gs = g.sum(axis=1)
    if np.any(gs <= 0):  # a single class: nothing else can hide behind it
        g[gs <= 0] = 1.0
        g[rows[gs <= 0], pred[gs <= 0]] = 0.0
        gs = g.sum(axis=1)
    g /= np.where(gs > 0, gs, 1.0)[:, None]
    q[rows, pred] = 0.0
    tot = q.sum(axis=1)
    a = np.where(tot > 0, float(pseudocount), 1.0)
    q = (q + a[:, None] * g) / (tot + a)[:, None]
    return q, q @ weights


def _top_label_posterior(stats, data, conf, weights, pseudocount) -> np.ndarray:
    """P(Y | k, S) under prior ratios ``weights`` (all ones: the source)."""
    q, wbar = _fp_mix(stats, data.pred, data.score, weights, pseudocount)
    rows = np.arange(data.n_rows)
    c_new = adapt_confidence(conf, weights[data.pred], wbar)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(wbar > 0, (1.0 - c_new) / np.where(wbar > 0, wbar, 1.0), 0.0)
    post = q * weights * scale[:, None]
    post[rows, data.pred] = c_new
    return post


def estimate_priors(model: Calibrator, data: TopLabelData, *, estimator: str = "em", source_data=None,
                    prior_strength: float | None = None, n_bootstrap: int = 100, level: float = 0.95,
                    seed: int = 0, fp_pseudocount: float = FP_PSEUDOCOUNT) -> PriorEstimate:
    """Estimate the use set's class priors from its unlabelled predictions.

    Parameters
    ----------
    model : fitted Calibrator
        Fitted on labelled per-sample test data (it stores the confusion counts).
    data : TopLabelData
        The use set (labels, if any, are ignored).
    estimator : {"em", "bbse"}, default "em"
        "em": EM (Saerens et al. 2002) on :func:`source_posteriors`, or on
        BCTS-calibrated full vectors when ``source_data`` is given.
        "bbse": confusion-matrix inversion with the predicted class and score
        region as the black-box prediction (Lipton et al. 2018); needs only
        predicted classes and scores.
    source_data : TopLabelData, optional
        The labelled test set the model was fitted on, with full score
        vectors: EM then runs on its bias-corrected temperature scaling
        (:func:`fit_bcts`), i.e. EM+BCTS of Alexandari et al. (2020). The use
        set needs full vectors too. Only for ``estimator="em"``.
    prior_strength : float, optional
        Pseudo-samples per class at the source priors: EM's Dirichlet prior
        (:func:`em_priors`), BBSE's mixing weight (:func:`bbse_priors`); 0
        for the plain estimators. Default :data:`PRIOR_STRENGTH` (0.1 for em,
        0.3 for bbse).
    n_bootstrap : int, default 100
        Bootstrap resamples of the use set's rows for the interval; 0 for none.
    level : float, default 0.95
        Coverage of the percentile interval.
    seed : int, default 0
        Seed of the bootstrap.
    fp_pseudocount : float, default 10
        Shrinkage of each class's FP mix towards the overall one (EM on the
        top-label posterior only), in false positives.

    Returns
    -------
    PriorEstimate
        The interval reflects the use set's sampling noise only; the test
        set's own noise (in the stored counts) is not included.
    """
    stats = _stats(model)
    _check_use(model, data)
    if estimator not in ESTIMATORS:
        raise ParameterError(f"estimator must be one of {', '.join(ESTIMATORS)}; got {estimator!r}")
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise ParameterError(f"n_bootstrap must be an integer >= 0; got {n_bootstrap!r}")
    if isinstance(level, bool) or not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ParameterError(f"level must be a number strictly between 0 and 1; got {level!r}")
    _check_nonneg("fp_pseudocount", fp_pseudocount)
    if prior_strength is None:
        prior_strength = PRIOR_STRENGTH[estimator]
    _check_nonneg("prior_strength", prior_strength)
    ps = stats.source_priors()
    n = data.n_rows
    if estimator == "em":
        if source_data is not None:
            P = _bcts_posteriors(model, source_data, data)
            basis = "BCTS full vectors"
        else:
            P = source_posteriors(model, data, fp_pseudocount=fp_pseudocount)
            basis = "temperature-scaled full vectors" if _uses_vectors(model, data) else "top-label posterior"

        def run(idx=None, init=None):
            w = None if idx is None else np.bincount(idx, minlength=n)
            return em_priors(P, ps, prior_strength=prior_strength, weights=w, init=init)
    else:
        if source_data is not None:
            raise ParameterError("source_data is used by estimator='em' only; bbse needs just the model")
        cells, C = _cells(stats, data)
        basis = "predicted class x score region cells"

        def run(idx=None, init=None):
            c = cells if idx is None else cells[idx]
            return bbse_priors(C, np.bincount(c, minlength=C.shape[0]), ps, prior_strength=prior_strength)

    point = run()
    lower = upper = None
    if n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        boot = np.array([run(rng.integers(0, n, n), init=point) for _ in range(int(n_bootstrap))])
        a = (1.0 - level) / 2
        lower, upper = np.quantile(boot, a, axis=0), np.quantile(boot, 1 - a, axis=0)
    return PriorEstimate(tuple(model.classes_), ps, point, lower, upper, estimator, n, float(level),
                         int(n_bootstrap), basis)


def _bcts_posteriors(model, source_data, data) -> np.ndarray:
    if not isinstance(source_data, TopLabelData):
        raise DataError(f"source_data must be a TopLabelData, got {type(source_data).__name__}")
    if tuple(source_data.classes) != tuple(model.classes_):
        raise DataError(f"source_data's classes {list(source_data.classes)} differ from the model's "
                        f"{list(model.classes_)}; give the labelled test set the model was fitted on")
    if source_data.labels is None:
        raise DataError("source_data needs per-sample true classes (the labelled test set)")
    freq = np.bincount(source_data.labels, weights=source_data.tp + source_data.fp, minlength=len(model.classes_))
    if not np.allclose(freq / freq.sum(), _stats(model).source_priors(), rtol=0, atol=1e-9):
        raise DataError("source_data's class frequencies differ from those of the test set the model was fitted "
                        "on; give that same labelled test set")
    source_data.require_full("EM on BCTS-calibrated vectors (source_data)")
    data.require_full("EM on BCTS-calibrated vectors (the use set)")
    T, b = fit_bcts(source_data)
    return bcts_probs(data, T, b)


def _cells(stats: ConfusionStats, data: TopLabelData) -> tuple[np.ndarray, np.ndarray]:
    """Each row's (predicted class, score region) cell index, and the source counts per cell."""
    offsets = np.cumsum([0] + [c.shape[0] for c in stats.counts])
    cells = np.empty(data.n_rows, dtype=np.int64)
    for k in np.unique(data.pred):
        idx = np.flatnonzero(data.pred == k)
        cells[idx] = offsets[k] + stats.region(k, data.score[idx])
    return cells, np.vstack(stats.counts)


def _check_nonneg(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or value < 0:
        raise ParameterError(f"{name} must be a finite number >= 0; got {value!r}")


def _given_priors(priors, classes: tuple[str, ...]) -> np.ndarray:
    K = len(classes)
    if isinstance(priors, dict):
        unknown = [str(c) for c in priors if str(c) not in classes]
        if unknown:
            raise DataError(f"priors name class(es) {unknown} the model never saw (its classes: {list(classes)})")
        missing = [c for c in classes if c not in {str(k) for k in priors}]
        if missing:
            raise DataError(f"priors miss class(es) {missing}; give every class a prior (0 for absent classes)")
        by_name = {str(k): v for k, v in priors.items()}
        values = [by_name[c] for c in classes]
    else:
        values = priors
    try:
        p = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"priors must be numbers, got {values!r}") from None
    if p.shape != (K,):
        raise DataError(f"priors must hold one value per class ({K}), got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        i = int(np.flatnonzero(~np.isfinite(p) | (p < 0))[0])
        raise DataError(f"prior of class {classes[i]!r} is {p[i]}; priors must be finite and >= 0")
    if abs(p.sum() - 1.0) > PRIOR_SUM_TOL:
        raise DataError(f"priors sum to {p.sum():.6g}, not 1 (tolerance {PRIOR_SUM_TOL}); give class frequencies")
    return p / p.sum()


def adapt(model: Calibrator, data: TopLabelData | None = None, *, priors=None, estimator: str = "em",
          source_data: TopLabelData | None = None, prior_strength: float | None = None,
          n_bootstrap: int = 100, level: float = 0.95, seed: int = 0,
          fp_pseudocount: float = FP_PSEUDOCOUNT) -> "AdaptedCalibrator":
    """A copy of ``model`` whose confidences hold for the use set's class priors.

    Give either the unlabelled use set ``data`` (priors estimated with
    ``estimator``, see :func:`estimate_priors`) or ``priors`` (a dict class ->
    prior naming every class, or a sequence in the model's class order; must
    sum to 1). Adapting an adapted model starts again from its source model.
    ``estimator``, ``source_data``, ``prior_strength``, ``n_bootstrap``,
    ``level`` and ``seed`` are passed to :func:`estimate_priors`.
    ``priors`` may also be a :class:`PriorEstimate` (e.g. from
    :func:`estimate_priors` with another model fitted on the same test set),
    whose intervals are kept. ``fp_pseudocount`` (default 10) shrinks each class's false-positive mix
    towards the test set's overall one, in false positives (0: none).

    Returns
    -------
    AdaptedCalibrator
        ``model`` itself is left unchanged.
    """
    if (data is None) == (priors is None):
        raise ParameterError("give exactly one of data (the unlabelled use set, to estimate priors) or priors=...")
    base = model.base_ if isinstance(model, AdaptedCalibrator) else model
    stats = _stats(base)
    _check_nonneg("fp_pseudocount", fp_pseudocount)
    ps = stats.source_priors()
    if isinstance(priors, PriorEstimate):
        if tuple(priors.classes) != tuple(base.classes_) or not np.allclose(priors.source, ps, rtol=0, atol=1e-12):
            raise DataError("the PriorEstimate was made with a model fitted on other test data (its classes or "
                            "source priors differ); estimate again with this model")
        est = priors
    elif priors is not None:
        p = _given_priors(priors, tuple(base.classes_))
        bad = [c for c, a, b in zip(base.classes_, p, ps) if a > 0 and b <= 0]
        if bad:
            raise DataError(
                f"class(es) {bad} never occur in the test set the model was fitted on, so their prior ratio is "
                "undefined; give them prior 0 or refit on test data that includes them"
            )
        est = PriorEstimate(tuple(base.classes_), ps, p, None, None, "given", 0, 0.95, 0, "given by the user")
    else:
        est = estimate_priors(base, data, estimator=estimator, source_data=source_data,
                              prior_strength=prior_strength, n_bootstrap=n_bootstrap, level=level, seed=seed,
                              fp_pseudocount=fp_pseudocount)
    return AdaptedCalibrator._build(base, est, float(fp_pseudocount))


# ------------------------------------------------------------ the adapted model
class AdaptedCalibrator(Calibrator):
    """A fitted calibrator moved to new class priors (build it with :func:`adapt`).

    Fitted attributes
    -----------------
    base_ : Calibrator
        The source model (fitted on the labelled test set), unchanged.
    estimate_ : PriorEstimate
        Source and use-set priors (with intervals when estimated).
    weights_ : ndarray (K,)
        Prior ratios w = pi_u / pi_s.
    fp_pseudocount_ : float
        Shrinkage of the false-positive mixes (see :func:`adapt`).

    ``predict`` returns the source model's confidence with its odds
    multiplied by w_k / wbar_FP (module docstring); ``posterior`` the adapted
    P(Y | k, S) over all classes and ``redecide`` its argmax.
    """

    name = ADAPTED_METHOD
    summary = "a fitted calibrator adapted to new class priors (topcal adapt)"

    def __init__(self):
        pass

    @classmethod
    def _build(cls, base: Calibrator, est: PriorEstimate, fp_pseudocount: float) -> "AdaptedCalibrator":
        obj = cls()
        obj._attach(base, est, fp_pseudocount)
        obj.n_tp_ = base.n_tp_
        obj.n_fp_ = base.n_fp_
        return obj

    def _attach(self, base: Calibrator, est: PriorEstimate, fp_pseudocount: float) -> None:
        self.base_ = base
        self.fp_pseudocount_ = fp_pseudocount
        self.estimate_ = est
        self.weights_ = est.ratios
        self.classes_ = tuple(base.classes_)
        self.score_range_ = tuple(base.score_range_)
        self.confusion_ = None  # the base model's travel with it

    def fit(self, data):
        raise TopcalError("an adapted model is not refitted: fit the source method, then adapt it again")

    @property
    def n_params_(self) -> int:
        return self.base_.n_params_ + len(self.classes_)

    def _check_compatible(self, data) -> TopLabelData:
        _check_use(self, data)
        return super()._check_compatible(data)

    def _predict(self, data: TopLabelData) -> np.ndarray:
        c = self.base_.predict(data)
        _, wbar = _fp_mix(self.base_.confusion_, data.pred, data.score, self.weights_,
                          self.fp_pseudocount_)
        return adapt_confidence(c, self.weights_[data.pred], wbar)

    def posterior(self, data: TopLabelData) -> np.ndarray:
        """Adapted P(Y = j | k, S) of each row, shape (n, K) (rows sum to 1)."""
        self._check_fitted()
        data = self._check_compatible(data)
        return _top_label_posterior(self.base_.confusion_, data, self.base_.predict(data), self.weights_,
                                    self.fp_pseudocount_)

    def redecide(self, data: TopLabelData) -> tuple[np.ndarray, np.ndarray]:
        """Re-decided class and its probability per row: argmax of :meth:`posterior`.

        Under strong shift the most likely true class behind a prediction of k
        can be another class. Returns (class indices, probabilities).
        """
        post = self.posterior(data)
        new = np.argmax(post, axis=1)
        return new, post[np.arange(post.shape[0]), new]

    def curve(self, k, score=None, *, n_points: int = 401) -> Curve:
        """The adapted Conf_k on a score grid (score-based source methods only)."""
        self._check_fitted()
        if not hasattr(self.base_, "curve"):
            raise TopcalError(f"method {self.base_.name!r} has no per-class curve (it needs the full score vector)")
        src = self.base_.curve(k, score, n_points=n_points)
        i = self.classes_.index(src.class_name)
        pred = np.full(src.score.shape, i)
        _, wbar = _fp_mix(self.base_.confusion_, pred, src.score, self.weights_, self.fp_pseudocount_)
        return Curve(src.class_name, src.score, adapt_confidence(src.confidence, self.weights_[i], wbar),
                     src.support)

    def describe(self) -> dict:
        """The source model's description plus, per class, source and use priors (with intervals)."""
        self._check_fitted()
        d = self.base_.describe()
        e = self.estimate_
        d["label_shift"] = {"adapted": True, "estimator": e.estimator, "basis": e.basis, "n_use": e.n_use,
                            "fp_pseudocount": self.fp_pseudocount_,
                            "interval": (f"{e.level:.0%} bootstrap percentile, {e.n_bootstrap} resamples"
                                         if e.lower is not None else "none")}
        for i, c in enumerate(self.classes_):
            info = d["classes"][c]
            info["source_prior"] = float(e.source[i])
            info["use_prior"] = float(e.priors[i])
            if e.lower is not None:
                info["use_prior_interval"] = [float(e.lower[i]), float(e.upper[i])]
            info["prior_ratio"] = float(self.weights_[i])
        return d

    def _get_state(self) -> dict:
        return {"base": self.base_.to_dict(), "estimate": self.estimate_.to_dict(),
                "fp_pseudocount": self.fp_pseudocount_}

    def _set_state(self, state: dict) -> None:
        base_doc = state["base"]
        if not isinstance(base_doc, dict) or base_doc.get("method") == ADAPTED_METHOD:
            raise ValueError("the source model must be a plain calibrator")
        try:
            cls = get_class(base_doc.get("method"))
        except ParameterError as exc:
            raise ModelFileError(f"adapted model: {exc}") from None
        base = cls.from_dict(base_doc)
        if tuple(base.classes_) != tuple(self.classes_) or base.confusion_ is None:
            raise ValueError("the source model's classes or confusion counts do not match")
        a = float(state["fp_pseudocount"])
        if not (np.isfinite(a) and a >= 0):
            raise ValueError("fp_pseudocount must be finite and >= 0")
        self._attach(base, PriorEstimate.from_dict(state["estimate"], tuple(self.classes_)), a)


def read_priors(path) -> dict[str, float]:
    """Read use-set priors from a CSV with columns ``class,prior`` (one row per class)."""
    p = Path(path)
    try:
        with p.open(newline="") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise DataError(f"priors file {str(p)!r} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read priors file {str(p)!r}: {exc}") from None
    rows = [r for r in rows if any(x.strip() for x in r)]
    if not rows or [x.strip().lower() for x in rows[0]] != ["class", "prior"]:
        raise DataError(f"priors file {str(p)!r} must be a CSV with the header 'class,prior' and one row per class")
    out: dict[str, float] = {}
    for i, r in enumerate(rows[1:], 2):
        if len(r) != 2:
            raise DataError(f"priors file {str(p)!r} line {i} has {len(r)} fields; expected 'class,prior'")
        name = r[0].strip()
        if name in out:
            raise DataError(f"priors file {str(p)!r} names class {name!r} twice (line {i})")
        try:
            out[name] = float(r[1])
        except ValueError:
            raise DataError(f"priors file {str(p)!r} line {i}: prior {r[1]!r} is not a number") from None
    return out


register_hook("adapt", adapt)  # Calibrator.adapt (calibrators sit below this layer)
