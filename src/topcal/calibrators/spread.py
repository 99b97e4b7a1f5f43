"""The between-class spread of a curve that serves every class: what a pooled interval must
add.

A pooled model (``pooled-*``) or one temperature for all classes (``sts``) predicts one
curve of the score for every class. Its parameters' estimation error (the inner model's
interval) is small with many rows, but a given class's true curve is not the pooled one: the
classes differ, and choosing a pooled model says only that the data cannot tell *how*. The
interval of a class's confidence must therefore hold the spread of the classes' curves
around the pooled one (without it ``pooled-beta`` covered 0.73-0.87 of real (class, score)
cells at nominal 0.90, ``sts`` 0.75).

:func:`measure` estimates that spread on the fitting data, on the log-odds scale, as a
random line: class k's log-odds are the curve's, c = logit(Conf(S)), plus d_k(c) = b_k + a_k
c with (b_k, a_k) drawn around 0 with covariance Sigma (the classes of a per-class Platt fit
around the pooled one), so the spread at c is tau(c)^2 = x' Sigma x, x = (1, c). Estimated
by the method of moments on the **pairs of rows of the same class** (a U-statistic): to
first order a row's residual r_i = y_i - p_i has E[r_i | class] = v_i d_k(c_i), v_i = p_i (1
- p_i), so for two rows of one class E[r_i r_j] = v_i v_j x_i' Sigma x_j, while a row alone
says nothing of the class (E[r_i^2] = p_i (1 - p_i) whatever the spread, when the curve is
the classes' mean). Sigma solves the 3 x 3 normal equations of sum over pairs (r_i r_j - v_i
v_j x_i' Sigma x_j)^2 / (v_i v_j) (pairs weighted by their noise), from per-class power
sums; its negative eigenvalues are set to 0.

Why not per score bin (an earlier version: up to 5 bins): sum_k (R_k^2 - V_k) / sum_k V_k^2
counts every row's own square in the denominator (V_k^2 = sum of pairs + sum v_i^2) but not
in the numerator, biased low by the share of single rows, most of them at 5 rows a class
(ImageNet), and a bin holding about one row a class gives a noise-dominated tau (0 in some
bins, 5-9 in the top one on ImageNet; ``pooled-beta`` covered 0.80-0.87 there). The line
pools every pair of a class's rows across scores into three numbers, and lets the spread
grow with the log-odds (classes differ most at the top: measured on 45,000 ImageNet rows,
0.3 near c = 0 and 1.5-3 at the top).

Each class's interval is its own posterior (:func:`posterior`, empirical Bayes): the line's
prior N(0, Sigma) and the class's own fitting rows (their logistic likelihood around the
curve) give a Laplace posterior N(m_k, P_k) of its line, stored per class; the interval c +
x' m_k -+ z sqrt(x' P_k x) is joined with the curve's own interval and the point
(:func:`widen`). A class of 5 rows keeps about the prior (z tau(c) on each side), one of
many rows its own line, narrower. The pairs' residuals are about the *fitted* curve, so
Sigma already holds the curve's estimation error: adding the curve's own interval in
quadrature counted it twice (``pooled-platt`` and ``sts`` covered 0.94-0.98 on simulated
classes sharing one curve). The posterior is the exact mode (Newton's method), not one
linearised step from the curve, which covered 0.80 on classes of 500 rows far from it. No
limit reaches 0 or 1. Model files from the per-bin round hold ``edges`` and ``tau``: they
keep their interval (the bin's tau added in quadrature).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, ndtri

from ..data import TopLabelData

__all__ = ["MAX_BINS", "MIN_BIN_SAMPLES", "measure", "at", "posterior", "widen", "check"]

#: Most score bins of a per-bin table (model files from before the random line; kept to read
#: them).
MAX_BINS = 5
#: Fewest samples (of at least two classes) a spread is measured on.
MIN_BIN_SAMPLES = 100
#: Largest condition number of the normal equations of the line; above, the classes' pairs
#: do not tell slope from level (one score, or nearly): an offset alone (Sigma's level term)
#: is measured.
MAX_CONDITION = 1e10


#: Fewest classes with two rows or more for the line's slope terms; with fewer, an offset
#: alone (tau constant in c): three moments of a few classes are noise that the clipping at
#: 0 turns into spread (``pooled-platt`` and ``sts`` on four classes sharing one curve
#: covered 0.93-0.97).
LINE_CLASSES = 8


def _log_odds(p) -> np.ndarray:
    """logit(p), held within +-36 (a confidence of 0 or 1, the uncalibrated score's,
    included)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0)
    return np.clip(np.log(p) - np.log1p(-np.minimum(p, 1.0 - 1e-16)), -36.0, 36.0)


def measure(data: TopLabelData, conf: np.ndarray) -> dict | None:
    """``{"cov": [s_bb, s_ab, s_aa], "range": [c_lo, c_hi], "classes": [...]}``: the
    classes' random line around the curve ``conf`` on labelled ``data`` (module docstring):
    tau(c)^2 = s_bb + 2 s_ab c + s_aa c^2 at log-odds c, held within the fitting rows' range
    of c; per class the posterior of its own line given its rows (:func:`_class_posteriors`,
    :func:`posterior`). None with fewer than two classes or :data:`MIN_BIN_SAMPLES` samples."""
    tp = np.asarray(data.tp, dtype=np.float64)
    w = tp + np.asarray(data.fp, dtype=np.float64)
    present = np.unique(data.pred[w > 0])
    if present.size < 2 or float(w.sum()) < MIN_BIN_SAMPLES:
        return None
    conf = np.clip(np.asarray(conf, dtype=np.float64), 0.0, 1.0)
    c, v = _log_odds(conf), conf * (1.0 - conf)
    k = data.pred
    r = tp - w * conf  # the row's residual (a binned row: its samples' sum)
    own = tp * (1.0 - conf) ** 2 + (w - tp) * conf**2  # its samples' own squares
    s = [np.bincount(k, w * v * c**a, minlength=data.n_classes) for a in range(3)]
    t = [np.bincount(k, r * c**a, minlength=data.n_classes) for a in range(2)]
    d = [float(np.sum(w * v * v * c**a)) for a in range(5)]
    q = [float(np.sum(own * c**a)) for a in range(3)]

    # a sum over ordered pairs i != j of one class: (sum f)(sum g) - sum f g
    def pair(f, g, diag):
        return float(np.dot(f, g)) - diag

    a00, a01, a11 = pair(s[0], s[0], d[0]), pair(s[0], s[1], d[1]), pair(s[1], s[1], d[2])
    a02, a12, a22 = pair(s[0], s[2], d[2]), pair(s[1], s[2], d[3]), pair(s[2], s[2], d[4])
    b = np.array(
        [pair(t[0], t[0], q[0]), 2.0 * pair(t[0], t[1], q[1]), pair(t[1], t[1], q[2])]
    )
    lhs = np.array(
        [
            [a00, 2.0 * a01, a11],
            [2.0 * a01, 2.0 * (a02 + a11), 2.0 * a12],
            [a11, 2.0 * a12, a22],
        ]
    )
    keep = w * v > 1e-12
    span = [float(c[keep].min()), float(c[keep].max())] if keep.any() else [0.0, 0.0]
    if not a00 > 0:  # no class has two rows: nothing measured
        nothing = np.zeros((data.n_classes, 5)).tolist()
        return {"cov": [0.0, 0.0, 0.0], "range": span, "classes": nothing}
    paired = int(np.count_nonzero(np.bincount(k, w, minlength=data.n_classes) >= 2))
    if (
        paired >= LINE_CLASSES
        and np.all(np.isfinite(lhs))
        and np.linalg.cond(lhs) < MAX_CONDITION
    ):
        th = np.linalg.solve(lhs, b)
    else:
        th = np.array([b[0] / a00, 0.0, 0.0])
    e, vec = np.linalg.eigh(np.array([[th[0], th[1]], [th[1], th[2]]]))
    m = (vec * np.maximum(e, 0.0)) @ vec.T
    cov = [float(m[0, 0]), float(m[0, 1]), float(m[1, 1])]
    root = (vec * np.sqrt(np.maximum(e, 0.0))) @ vec.T
    post = _class_posteriors(data, c, root, tp, w)
    return {"cov": cov, "range": span, "classes": post.tolist()}


#: Newton steps of a class's posterior mode (the penalised logistic fit is strongly concave:
#: a few steps reach it to machine precision), and the largest step (in prior standard
#: deviations).
NEWTON_STEPS, MAX_STEP = 25, 4.0


def _class_posteriors(data, c, root, tp, w) -> np.ndarray:
    """(K, 5): per class [m_b, m_a, P_bb, P_ab, P_aa], the mode and covariance of the
    Laplace posterior of its line u_k = (b_k, a_k) around the curve, prior N(0, Sigma)
    (``root`` its symmetric square root L, u = L eta, eta ~ N(0, I)), likelihood the class's
    own rows (log-odds c + x' u, x = (1, c)): the penalised logistic fit by Newton's method,
    vectorised over classes, then m = L eta_hat and P = L H^-1 L at the mode."""
    k, n_classes = data.pred, data.n_classes
    zx = np.stack([np.ones_like(c), c], axis=1) @ root  # z_i = L x_i (L symmetric)
    eta = np.zeros((n_classes, 2))
    for _ in range(NEWTON_STEPS):
        p = expit(c + np.einsum("ni,ni->n", zx, eta[k]))
        g = np.stack([np.bincount(k, (tp - w * p) * zx[:, j], n_classes) for j in (0, 1)], 1)
        g -= eta
        h00, h01, h11 = (
            np.bincount(k, w * p * (1.0 - p) * zx[:, i] * zx[:, j], n_classes) + (i == j)
            for i, j in ((0, 0), (0, 1), (1, 1))
        )
        det = h00 * h11 - h01 * h01  # >= 1: H = sum w v z z' + I
        step = np.stack([h11 * g[:, 0] - h01 * g[:, 1], h00 * g[:, 1] - h01 * g[:, 0]], 1)
        step /= det[:, None]
        size = np.sqrt((step * step).sum(axis=1))
        eta += step * np.minimum(1.0, MAX_STEP / np.maximum(size, 1e-300))[:, None]
        if float(size.max(initial=0.0)) < 1e-10:
            break
    p = expit(c + np.einsum("ni,ni->n", zx, eta[k]))
    h00, h01, h11 = (
        np.bincount(k, w * p * (1.0 - p) * zx[:, i] * zx[:, j], n_classes) + (i == j)
        for i, j in ((0, 0), (0, 1), (1, 1))
    )
    det = h00 * h11 - h01 * h01
    hinv = (
        np.stack([np.stack([h11, -h01], 1), np.stack([-h01, h00], 1)], 1) / det[:, None, None]
    )
    cov = root @ hinv @ root
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    m = eta @ root
    return np.column_stack([m, cov[:, 0, 0], cov[:, 0, 1], cov[:, 1, 1]])


def at(spread: dict, score: np.ndarray, conf: np.ndarray) -> np.ndarray:
    """tau of each row (log-odds): the random line's at the row's confidence, or, in a
    per-bin table (older files), its score bin's."""
    if "cov" in spread:
        s_bb, s_ab, s_aa = spread["cov"]
        c = np.clip(_log_odds(conf), *spread["range"])
        return np.sqrt(np.maximum(s_bb + 2.0 * s_ab * c + s_aa * c * c, 0.0))
    edges = np.asarray(spread["edges"], dtype=np.float64)
    tau = np.asarray(spread["tau"], dtype=np.float64)
    b = np.clip(np.searchsorted(edges, score, side="right") - 1, 0, tau.size - 1)
    return tau[b]


def posterior(
    spread: dict, pred: np.ndarray, conf: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, sd) of each row's class deviation x' u_k from the curve (log-odds, x = (1, c))
    given the class's own fitting rows: the Laplace posterior stored per class
    (:func:`measure`; the random line's prior N(0, Sigma) and the class's logistic
    likelihood around the curve: empirical Bayes, Gelman et al., *Bayesian Data Analysis*,
    3rd ed., section 5.4). A class with few rows keeps about the prior (mean near 0, sd near
    tau), one with many its own line."""
    post = np.asarray(spread["classes"], dtype=np.float64)[np.asarray(pred, dtype=np.int64)]
    c = np.clip(_log_odds(conf), *spread["range"])
    var = post[:, 2] + 2.0 * post[:, 3] * c + post[:, 4] * c * c
    return post[:, 0] + post[:, 1] * c, np.sqrt(np.maximum(var, 0.0))


def widen(spread: dict | None, lo, hi, conf, score, level: float, pred=None):
    """[lo, hi] joined with the row's class's posterior interval on the log-odds scale, c +
    m -+ z sd (:func:`posterior`; it holds the curve's estimation error: the residuals are
    about the fitted curve): the curve's own interval and the point stay inside. A per-bin
    table of an older file: z tau added in quadrature to each side, as it was. No spread:
    unchanged."""
    if spread is None:
        return lo, hi
    z = float(ndtri(0.5 * (1.0 + level)))
    c = _log_odds(conf)
    d_lo, d_hi = c - _log_odds(lo), _log_odds(hi) - c
    if "cov" in spread:
        m, sd = posterior(spread, pred, conf)
        # the own limits kept exactly (the log-odds round trip moves them by an ulp)
        return (
            np.minimum(lo, expit(np.minimum(c - d_lo, c + m - z * sd))),
            np.maximum(hi, expit(np.maximum(c + d_hi, c + m + z * sd))),
        )
    extra = z * at(spread, np.asarray(score, dtype=np.float64), conf)
    return (
        expit(c - np.sqrt(d_lo * d_lo + extra * extra)),
        expit(c + np.sqrt(d_hi * d_hi + extra * extra)),
    )


def check(d, n_classes: int) -> dict | None:
    """A model file's spread for ``n_classes`` classes, validated (None: a file without
    one)."""
    if d is None:
        return None
    if isinstance(d, dict) and set(d) == {"cov", "range", "classes"}:
        cov = np.asarray(d["cov"], dtype=np.float64)
        span = np.asarray(d["range"], dtype=np.float64)
        own = np.asarray(d["classes"], dtype=np.float64)
        if (
            own.shape != (n_classes, 5)
            or not np.all(np.isfinite(own))
            or np.any(own[:, 2] < 0)
            or np.any(own[:, 4] < 0)
            or np.any(own[:, 3] ** 2 > own[:, 2] * own[:, 4] * (1.0 + 1e-9) + 1e-300)
        ):
            raise ValueError(
                f"spread's classes must hold, for each of the {n_classes} classes, its "
                "posterior line [m_b, m_a, P_bb, P_ab, P_aa] (P a covariance)"
            )
        if (
            cov.shape != (3,)
            or span.shape != (2,)
            or not np.all(np.isfinite(cov))
            or not np.all(np.isfinite(span))
            or span[0] > span[1]
            or np.any(np.abs(span) > 36)
            or cov[0] < 0
            or cov[2] < 0
            or cov[1] * cov[1] > cov[0] * cov[2] * (1.0 + 1e-9) + 1e-300
        ):
            raise ValueError(
                "spread's cov must be a covariance [s_bb, s_ab, s_aa] (s_bb, s_aa >= 0, "
                "s_ab^2 <= s_bb s_aa) and its range [lo, hi] within +-36"
            )
        return {"cov": cov.tolist(), "range": span.tolist(), "classes": own.tolist()}
    if not isinstance(d, dict) or set(d) != {"edges", "tau"}:
        raise ValueError(
            "spread must hold cov, range and classes (or, in older files, edges and tau)"
        )
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
        raise ValueError(
            "spread's edges must increase and its tau lie in [0, 36], one per bin"
        )
    return {"edges": edges.tolist(), "tau": tau.tolist()}
