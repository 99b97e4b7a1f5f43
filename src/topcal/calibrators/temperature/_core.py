"""Numerical core of top-label temperature scaling: loss, analytic derivatives, bounded
Newton.

Every temperature method in :mod:`topcal.calibrators.temperature` reduces to one per-sample
quantity, the log-odds of the recalibrated top entry. With z the log scores of a sample, k =
k(X) its predicted class, ``d = z_k - max_{j != k} z_j`` (the margin of the top entry over
the best other one, >= 0) and ``O_j = z_j - max_{j != k} z_j <= 0`` for the K - 1 other
entries,

    yhat_k = softmax((z + A e_k) / T)_k = sigmoid(m),
    m = (d + A) * beta - log sum_{j != k} exp(beta * O_j),   beta = 1 / T.

Shifting the others by their maximum keeps every exp() in (0, 1] (no overflow at any
temperature) and the sum >= 1 (no log of 0). The binary variant on a top score s alone is
the same formula with one "other" entry log(1 - s), i.e. ``d = logit(s)`` and the log-sum
term 0.

Derivatives in beta follow from the log-sum-exp L(beta): L' = E_w[O] and L'' = Var_w[O]
under the weights w = softmax(beta * O); so one exp() pass over the (K - 1, n) matrix gives
the loss, and two multiply-add passes give the exact gradient and Hessian. The optimiser
works in theta = log T (``beta = exp(-theta)``), which makes the bounds on T symmetric and
the problem better scaled, and in the award's offset b = A / T rather than A:

    m = d * beta + b - log sum_{j != k} exp(beta * O_j)

is linear in b, so the (theta, b) problem has no curved valley where T and A trade off (with
top scores clustered at one value, as when many scores are exactly 1, only (d + A) / T is
determined; in (theta, A) Newton then crawls along a banana-shaped ridge, in (theta, b) it
does not). For the binary variant, (1 / T, b) are exactly Platt's slope and intercept on
logit(s).

Size: the analytic first and second derivatives of every objective live beside the loss they
differentiate (the tests check each against finite differences).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from scipy.special import expit

from ... import _recycle
from ..._numeric import PROB_CLIP, row_max
from ._solver import NewtonResult, bounded_newton  # noqa: F401  (the solver, in its own module; re-exported)

__all__ = [
    "T_MIN",
    "T_MAX",
    "AWARD_MAX",
    "OFFSET_MAX",
    "BINARY_SCORE_FLOOR",
    "split_top",
    "top_label_margin",
    "lse_moments",
    "block_moments",
    "moment_scratch",
    "Evaluated",
    "TopLabelObjective",
    "MultinomialObjective",
    "NewtonResult",
    "bounded_newton",
    "LOSSES",
    "BLOCK",
    "softplus",
    "loss_parts",
    "loss_derivs",
]

#: Temperatures are confined to [1e-3, 1e3]. At the lower end a log score divided by T stays
#: finite (:data:`topcal.data.LOG_PROB_FLOOR` ~ 1.18e-38: |log 1.18e-38| / 1e-3 ~ 8.7e4);
#: outside the range a fit is degenerate anyway (confidences pinned at 0/1 or 1/K).
T_MIN = 1e-3
T_MAX = 1e3
#: The award's offset b = A / T is confined to [-1e6, 1e6] = +-AWARD_MAX / T_MIN: at T =
#: T_MIN that is an award of +-1e3 nats of log score. Realistic awards are a few nats; 1e3
#: exceeds the whole range of floored log-probabilities (|log 1.18e-38| ~ 87) and of
#: realistic logits, so an offset at the bound makes yhat_k 0 or 1.
AWARD_MAX = 1e3
OFFSET_MAX = AWARD_MAX / T_MIN
#: The binary variant clips the normalised top score s to [1e-12, 1 - 1e-12] before taking
#: logit(s) (the same clip as :data:`topcal.metrics.PROB_CLIP`): s = 1 exactly would
#: otherwise have an infinite logit.
BINARY_SCORE_FLOOR = 1e-12

#: Rows per block in :func:`split_top`: a (rows, K) block of float64 stays in cache while
#: its K - 1 columns are gathered (columns of a C-ordered (n, K) array are strided, so
#: gathering them from the whole array would stream it from memory K - 1 times): 8192 rows,
#: fewer for wide rows so a block holds at most about _CHUNK_ELEMENTS entries (at K = 1000 a
#: block of 8192 rows, 65 MB, made a fit's split 2.8 x slower than blocks of 256 rows; every
#: row's numbers are the same whatever the blocks). About 2^14 entries (128 KB) a block, not
#: 2^17: a block's gathered rows, their column indices and the gathered others are each that
#: size, and at 10^4 x 10 three of them of 8192 rows were 2.3 x the input.
_CHUNK = 8192
_CHUNK_ELEMENTS = 1 << 14


#: :func:`split_top` copies a block's rows run by run of one predicted class where K is at
#: least RUN_CLASSES and the block holds fewer than SPLIT_RUNS runs (at K = 1,000 a block is
#: 256 rows).
RUN_CLASSES = 64
SPLIT_RUNS = 16


def _chunk_rows(k: int) -> int:
    return min(_CHUNK, max(256, _CHUNK_ELEMENTS // max(k, 1)))


def split_top(
    z: np.ndarray,
    pred: np.ndarray,
    *,
    log_floor: float | None = None,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split log scores into the top margin d (n,) and shifted others O (K-1, n).

    Parameters
    ----------
    z : ndarray of shape (n, K)
        Log scores (log-probabilities or logits; any per-row shift is fine), or
        probabilities when ``log_floor`` is given.
    pred : ndarray of int, shape (n,)
        Predicted class k(X) of each row (kept even if it is not the argmax).
    log_floor : float, optional
        If given, ``z`` holds probabilities and log(max(z, log_floor)) is used: the logs are
        taken while gathering, so no (n, K) matrix of log-probabilities is ever allocated.
    rows : ndarray of int, shape (n,), optional
        Read row ``rows[i]`` of ``z`` as row i (a fit's row order), block by block: the
        result is that of ``split_top(z[rows], pred)`` without the (n, K) copy.

    Returns
    -------
    d : ndarray of shape (n,)
        z_k - max_{j != k} z_j.
    O : ndarray of shape (K - 1, n), C-contiguous
        z_j - max_{j != k} z_j for the other entries, in column order. Stored transposed so
        that sums over classes run over contiguous rows.
    """
    n, k = z.shape if rows is None else (rows.shape[0], z.shape[1])
    d = np.empty(n)
    others = _recycle.empty((k - 1, n))  # recycled where a dropped one is free (_recycle.py)
    step = _chunk_rows(k)
    col = np.arange(k - 1)[:, None]
    for a in range(0, n, step):
        b = min(a + step, n)
        zc, pc = (z[a:b] if rows is None else z[rows[a:b]]), pred[a:b]
        if log_floor is not None:
            zc = np.maximum(
                zc, log_floor, out=None if rows is None else zc
            )  # a gathered block is a copy already
            np.log(zc, out=zc)
        oc = others[:, a:b]
        # other entry r is column r left of the predicted class, r + 1 right of it: two
        # shifted copies (the same numbers as a gather by index, take_along_axis, at a
        # fraction of its time). Where the block's rows come in a few runs of one predicted
        # class (a fit's canonical order at many classes), each run's two parts are copied
        # once instead (one copy of the block, not one and a masked one)
        cut = np.flatnonzero(pc[1:] != pc[:-1]) + 1
        if k >= RUN_CLASSES and cut.size < SPLIT_RUNS:
            for u, v in zip(np.concatenate([[0], cut]), np.concatenate([cut, [b - a]])):
                c = int(pc[u])
                np.copyto(oc[:c, u:v], zc[u:v, :c].T)
                np.copyto(oc[c:, u:v], zc[u:v, c + 1 :].T)
        else:
            np.copyto(oc, zc[:, :-1].T)
            np.copyto(oc, zc[:, 1:].T, where=col >= pc)
        omax = oc.max(axis=0)
        oc -= omax
        np.subtract(zc[np.arange(b - a), pc], omax, out=d[a:b])
    return d, others


def top_label_margin_rows(
    z: np.ndarray, pred: np.ndarray, beta, award, *, log_floor: float | None = None
):
    """The log-odds m of yhat_k (:func:`top_label_margin`) straight from the (n, K) scores.

    For prediction: block by block over rows, m = beta (z_k + award) - log sum_{j != k}
    exp(beta z_j) (a log-sum-exp shifted by its largest term), without building the others
    matrix of :func:`split_top` or any softmax. ``beta``, ``award``: scalars or per-row
    arrays. Equal to the split path up to round-off (~1e-15).
    """
    n, k = z.shape
    out = np.empty(n)
    beta = np.asarray(beta, dtype=np.float64)
    award = np.asarray(award, dtype=np.float64)
    # blocks of about 2^15 entries (256 KB; 2^17 copied all of a 10^4 x 10 input at once):
    # each row's numbers are its own (its max and sum run along the row), whatever the
    # blocks
    step = max(1, (1 << 15) // max(k, 1))
    for a in range(0, n, step):
        b = min(a + step, n)
        y = z[a:b]
        y = np.maximum(y, log_floor) if log_floor is not None else y.copy()
        if log_floor is not None:
            np.log(y, out=y)
        rows = np.arange(b - a)
        pc = pred[a:b]
        top = y[rows, pc]
        bb = beta[a:b, None] if beta.ndim else beta
        y *= bb
        y[rows, pc] = -np.inf  # the others only
        mx = row_max(y)
        y -= mx[:, None]
        np.exp(y, out=y)
        lse = mx + np.log(y.sum(axis=1))
        bt = beta[a:b] if beta.ndim else beta
        aw = award[a:b] if award.ndim else award
        out[a:b] = (top + aw) * bt - lse
    return out


#: The fewest other entries (K - 1) for which sts keeps its rows' moments for
#: :mod:`._local`'s model: a model evaluation costs about one exp() pass over 5-10 other
#: entries, and a fit takes 2-4 model solves of 5-10 evaluations each to save 2-4 passes.
LOCAL_OTHERS = 64

#: Samples per block. Every evaluation runs block by block: a (K - 1, 8192) float64 block
#: (0.6 MB for K = 10), its scratch copy and the per-sample temporaries stay in cache and
#: are reused, so main memory is read once per evaluation and no large temporary is
#: allocated (fresh large arrays cost page faults on every call, which dominated an
#: unblocked version).
BLOCK = 8192


def _block_moments(oc, beta, ec, eoc, moments=True):
    """lse, mean and variance of one block (see :func:`lse_moments`), using scratch ec, eoc
    (may be one array)."""
    np.multiply(oc, beta, out=ec)
    np.exp(ec, out=ec)
    s0 = ec.sum(axis=0)
    lse = np.log(s0)
    if not moments:
        return lse, None, None
    np.multiply(ec, oc, out=eoc)
    mean = eoc.sum(axis=0) / s0
    eoc *= oc
    var = eoc.sum(axis=0) / s0 - mean * mean
    # rounding can make a zero variance slightly negative
    return lse, mean, np.maximum(var, 0.0)


#: The exp() scratch block of :func:`moment_scratch` holds at most _SCRATCH_ELEMENTS entries
#: (1 MB) and _SCRATCH_COLS rows' columns: two (K - 1, 8192) blocks at K = 100 were 6.5 MB
#: each, 1.6 x the input at 10^4 x 100, and at 10^4 x 10 1.5 x. One block serves both of
#: :func:`_block_moments`'s passes (exp(beta O), then it times O, in place: the same
#: products). The moments of a block of :data:`BLOCK` rows are computed a sub-block of
#: columns at a time (:func:`block_moments`): every column's sums are its own
#: (``sum(axis=0)`` adds the K - 1 rows in order, whatever the width; the tests check that
#: the numbers are those of one wide block, bit for bit), and the sums over rows still run
#: over the same blocks of :data:`BLOCK` rows. Narrow sub-blocks cost time in Python (2^14
#: entries: 17-28% more CPU time per evaluation at K = 100, two blocks of 2048 columns 12%
#: at K = 10).
_SCRATCH_ELEMENTS = 1 << 17
_SCRATCH_COLS = 4096


def moment_scratch(others):
    """The exp() scratch of :func:`_block_moments`, as (ec, eoc): one block, both passes in
    it."""
    r, n = others.shape
    e = np.empty((r, min(n, BLOCK, _SCRATCH_COLS, max(64, _SCRATCH_ELEMENTS // max(r, 1)))))
    return e, e


def _cols(e, w):
    """The first ``w`` columns' worth of the scratch ``e`` as a C-contiguous (rows, w) array
    (its memory's start, not the strided view ``e[:, :w]``): the same numbers in every
    operation, and element-wise passes over it run as one loop (a class of 31 rows at K =
    1,000 ran 999 loops of 31)."""
    r = e.shape[0]
    return e.reshape(-1)[: r * w].reshape(r, w)


def block_moments(oc, beta, e, eo, moments=True):
    """:func:`_block_moments` of a block ``oc`` of any width, a scratch-wide sub-block of
    columns at a time."""
    w, step = oc.shape[1], e.shape[1]
    if w <= step:
        return _block_moments(oc, beta, _cols(e, w), _cols(eo, w), moments)
    out = [np.empty(w) for _ in range(3 if moments else 1)]
    per_sample = np.ndim(beta) > 0
    for a in range(0, w, step):
        b = min(a + step, w)
        res = _block_moments(
            oc[:, a:b],
            beta[a:b] if per_sample else beta,
            _cols(e, b - a),
            _cols(eo, b - a),
            moments,
        )
        for o, v in zip(out, res):
            o[a:b] = v
    return tuple(out) if moments else (out[0], None, None)


def lse_moments(others: np.ndarray, beta, *, moments: bool = True):
    """Log-sum-exp of beta * O over the rows of ``others``, and the mean and variance of O.

    Parameters
    ----------
    others : ndarray (r, n)
        Entries <= 0 with a 0 in every column (see :func:`split_top`), so every exp() is in
        (0, 1] and the sum is >= 1.
    beta : float or ndarray (n,)
        Inverse temperature (per sample if an array).
    moments : bool
        Also return E_w[O] and Var_w[O] under w = softmax(beta * O), the first and second
        derivatives of the log-sum-exp in beta.

    Returns
    -------
    lse : ndarray (n,)
    mean, var : ndarray (n,), only when ``moments``
    """
    n = others.shape[1]
    out = [np.empty(n) for _ in range(3 if moments else 1)]
    e, eo = moment_scratch(others)
    per_sample = np.ndim(beta) > 0
    for a in range(0, n, BLOCK):
        b = min(a + BLOCK, n)
        res = block_moments(others[:, a:b], beta[a:b] if per_sample else beta, e, eo, moments)
        for o, v in zip(out, res):
            o[a:b] = v
    return tuple(out) if moments else out[0]


def top_label_margin(d, others, beta, award) -> np.ndarray:
    """m = (d + award) * beta - log sum_j exp(beta * O_j), the log-odds of yhat_k.

    ``beta`` and ``award`` are scalars or per-sample arrays; ``others`` may be None (binary
    variant: the log-sum term is 0).
    """
    m = (d + award) * beta
    if others is not None:
        m -= lse_moments(others, beta, moments=False)
    return m


#: The NLL objective scores c_eps = eps + (1 - 2 eps) yhat with eps = PROB_CLIP (1e-12), the
#: clip of :func:`topcal.metrics.nll`: the fitted loss is the reported one (to within eps)
#: and no sample costs more than -log(eps) = 27.6 nats. Without it, probabilities of exactly
#: 0 (floored at 1e-300 in the logs once, 1.18e-38 now) made a confident mistake cost ~690 /
#: T nats, and a couple of such samples set T on their own (random forests, naive Bayes).
#: The loss is smooth in m, so Newton keeps its exact derivatives.
_EPS = PROB_CLIP


#: The per-sample losses in m that :func:`~._tables.tabulate_losses` tabulates: the two fit
#: objectives, and "nll-raw", the unclipped top-label NLL softplus(-m) (TP) and softplus(m)
#: (FP) that ``nll_`` and ``class_nll_`` report.
LOSSES = ("nll", "brier", "nll-raw")


def softplus(m):
    """log(1 + exp(m)), stable for any m: the unclipped top-label NLL of an FP (of a TP at
    -m)."""
    return np.maximum(m, 0.0) + np.log1p(np.exp(-np.abs(m)))


def loss_parts(m, loss, pq=None):
    """Unweighted per-row losses of a TP and of an FP at log-odds m (arrays of m's shape).

    ``pq``: (sigmoid(m), sigmoid(-m)) when the caller has them already.
    """
    if loss == "nll-raw":
        return softplus(-m), softplus(m)
    p, q = (expit(m), expit(-m)) if pq is None else pq
    if loss == "nll":
        # -log(eps + (1 - 2 eps) p) = -log1p(-(eps + (1 - 2 eps) q)), with p = sigmoid(m)
        # and q = sigmoid(-m) each computed directly (accurate for large |m|)
        a = 1.0 - 2.0 * _EPS
        return -np.log1p(-(_EPS + a * q)), -np.log1p(-(_EPS + a * p))
    return (1.0 - p) ** 2, p * p


def _loss_terms(m, tp, fp, loss, pq=None):
    """Summed loss at log-odds m (``pq`` as for :func:`loss_parts`)."""
    f_tp, f_fp = loss_parts(m, loss, pq)
    return float(tp @ f_tp + fp @ f_fp)


def loss_derivs(m, tp, fp, loss, pq=None):
    """First and second derivatives of the per-sample loss in m.

    Written with p = sigmoid(m) and q = sigmoid(-m) = 1 - p, each computed directly: 1 - p
    would lose every digit of q once p rounds to 1 (m > 37), and the gradient of confident
    right answers would vanish before their loss. ``pq``: (p, q) when the caller has them
    already.
    """
    p, q = (expit(m), expit(-m)) if pq is None else pq
    if (
        loss == "nll-raw"
    ):  # d/dm softplus(-m) = -q, d/dm softplus(m) = p; both second derivatives pq
        return fp * p - tp * q, (tp + fp) * (p * q)
    if loss == "nll":
        # f_tp = -log u, u = eps + a p: f' = -a pq / u, f'' = -a pq (q - p) / u + (a pq /
        # u)^2; f_fp the same with p and q swapped and m -> -m (in place on fresh arrays,
        # the same operations: fewer row-sized temporaries)
        a = 1.0 - 2.0 * _EPS
        pq = p * q
        gt = np.divide(a * pq, np.add(a * p, _EPS))
        gf = np.divide(np.multiply(a, pq, out=pq), np.add(a * q, _EPS), out=pq)
        d1 = fp * gf
        d1 -= tp * gt
        qp = q - p  # d2 = tp (gt^2 - gt (q - p)) + fp (gf^2 + gf (q - p))
        d2 = np.multiply(np.subtract(gt * gt, np.multiply(gt, qp, out=gt), out=gt), tp, out=gt)
        d2 += np.multiply(np.add(gf * gf, np.multiply(gf, qp, out=gf), out=gf), fp, out=gf)
        return d1, d2
    r = fp * p - tp * q  # w p - tp
    pq = p * q
    return 2.0 * r * pq, 2.0 * pq * ((tp + fp) * pq + r * (q - p))


class Evaluated:
    """``value`` and ``grad_hess`` of an objective from its ``_eval(x)``, a tuple (x, summed
    loss, gradient (dim,), Hessian (dim, dim), ...) kept for the last point evaluated."""

    _eval: Callable[[Any], tuple]  # from the objective it is mixed into

    def value(self, x) -> float:
        """Summed loss at x."""
        return self._eval(x)[1]

    def grad_hess(self, x):
        """Gradient (dim,) and Hessian (dim, dim) of the summed loss at x (copies)."""
        at = self._eval(x)
        return at[2].copy(), at[3].copy()


class TopLabelObjective(Evaluated):
    """Summed top-label loss as a function of x = (log T, b_0, ..., b_{G-1}), b_g = A_g / T.

    Parameters
    ----------
    d : ndarray (n,)
        Top margins (see :func:`split_top`), or logit(s) for the binary variant.
    others : ndarray (K - 1, n) or None
        Shifted other entries; None for the binary variant.
    tp, fp : ndarray (n,)
        True- and false-positive weights.
    loss : {"nll", "brier"}
    n_awards : int
        0 (no award), or the number G of award groups (offsets b_g = A_g / T).
    groups : ndarray of int (n,), optional
        Award group of each sample (default: all in group 0).

    Notes
    -----
    One fused, blocked pass over the data gives the loss, the gradient and the Hessian at x
    (derivatives cost a few O(n) products more than the loss, the exp() over (K - 1, n)
    dominates either way); :meth:`value`, :meth:`grad_hess` and :meth:`margin` at the same x
    share it.
    """

    def __init__(self, d, others, tp, fp, *, loss="nll", n_awards=0, groups=None, rows=False):
        self.d = d
        self.others = others
        self.tp = tp
        self.fp = fp
        self.loss = loss
        self.n_awards = int(n_awards)
        self.groups = groups
        self.dim = 1 + self.n_awards
        self._m = np.empty(d.shape[0])
        self._scratch = None if others is None else moment_scratch(others)
        self._at = None
        #: ``rows``: each row's (lse, E[O], Var[O]) at the last evaluation kept, for sts's
        #: local model (:mod:`._local`); three n-sized arrays, written by each pass (only
        #: where the others have LOCAL_OTHERS rows or more: below, its O(n) steps cost about
        #: what the passes they save do)
        keep = rows and others is not None and others.shape[0] >= LOCAL_OTHERS
        self.rows = np.empty((3, d.shape[0])) if keep else None

    def _eval(self, x):
        x = np.asarray(x, dtype=np.float64)
        if self._at is not None and np.array_equal(self._at[0], x):
            return self._at
        beta = float(np.exp(-x[0]))
        n = self.d.shape[0]
        g_aw = self.n_awards > 0
        nG = max(self.n_awards, 1)
        loss = 0.0
        g0 = h00 = 0.0
        s_l1 = np.zeros(nG)
        s_ta = np.zeros(nG)
        s_l2 = np.zeros(nG)
        offsets = x[1:]
        for a in range(0, n, BLOCK):
            b = min(a + BLOCK, n)
            tp, fp = self.tp[a:b], self.fp[a:b]
            grp = None if self.groups is None else self.groups[a:b]
            d = self.d[a:b]
            if self.others is None:
                m = d * beta
                dm_db = d
                var = 0.0
            else:
                e, eo = self._scratch
                lse, mean, var = block_moments(self.others[:, a:b], beta, e, eo)
                if self.rows is not None:
                    self.rows[:, a:b] = lse, mean, var
                m = d * beta - lse
                dm_db = d - mean
            if g_aw:
                m += offsets[0] if grp is None else offsets[grp]
            self._m[a:b] = m
            pq = (expit(m), expit(-m))  # shared by the loss and its derivatives
            loss += _loss_terms(m, tp, fp, self.loss, pq)
            # m = d beta + b - L(beta): dm/dbeta = d - E[O], d2m/dbeta2 = -Var[O]; theta =
            # log T, d beta / d theta = -beta
            l1, l2 = loss_derivs(m, tp, fp, self.loss, pq)
            dm_dt = -beta * dm_db
            d2m_dt2 = beta * dm_db - (beta * beta) * var
            l2_dmdt = l2 * dm_dt
            g0 += l1 @ dm_dt
            h00 += l2_dmdt @ dm_dt + l1 @ d2m_dt2
            if g_aw:
                # dm/db = 1, d2m/db dtheta = 0, d2m/db2 = 0
                per = (l1, l2_dmdt, l2)
                if grp is None:
                    sums = [v.sum() for v in per]
                else:
                    sums = [np.bincount(grp, weights=v, minlength=nG) for v in per]
                s_l1 += sums[0]
                s_ta += sums[1]
                s_l2 += sums[2]
        g = np.zeros(self.dim)
        h = np.zeros((self.dim, self.dim))
        g[0] = g0
        h[0, 0] = h00
        if g_aw:
            g[1:] = s_l1
            h[0, 1:] = h[1:, 0] = s_ta
            h[1:, 1:] = np.diag(s_l2)
        self._at = (x.copy(), loss, g, h)
        return self._at

    def margin(self, x, copy: bool = True) -> np.ndarray:
        """Per-sample log-odds m at parameters x (a copy; ``copy=False``: the objective's
        own buffer, which its next evaluation overwrites, for a caller that evaluates it no
        more: no n-sized copy)."""
        self._eval(x)
        return self._m.copy() if copy else self._m


class MultinomialObjective(Evaluated):
    """Classic (Guo et al. 2017) temperature scaling loss: full multinomial NLL.

    sum_i w_i [log sum_j exp(beta z_ij) - beta z_{i,y_i}] with z shifted so the row maximum
    is 0; x = (log T,). Convex in beta.

    Parameters
    ----------
    z : ndarray (n, K)
        Log scores.
    labels : ndarray of int (n,)
        True classes.
    w : ndarray (n,)
        Sample weights.
    """

    dim = 1

    def __init__(self, z, labels, w):
        n = z.shape[0]
        zt = np.ascontiguousarray(z.T)
        zt -= zt.max(axis=0)
        self.zt = zt
        self.zy = zt[labels, np.arange(n)]
        self.w = w
        self._at = None

    def _eval(self, x):
        x = np.asarray(x, dtype=np.float64)
        if self._at is None or not np.array_equal(self._at[0], x):
            beta = float(np.exp(-x[0]))
            n = self.zt.shape[1]
            e, eo = moment_scratch(self.zt)
            f = g = h = 0.0
            for a in range(0, n, BLOCK):
                b = min(a + BLOCK, n)
                lse, mean, var = block_moments(self.zt[:, a:b], beta, e, eo)
                w, zy = self.w[a:b], self.zy[a:b]
                dl_db = mean - zy  # per-sample d loss / d beta; d2 loss / d beta2 = var
                f += w @ (lse - beta * zy)
                g += w @ dl_db
                h += w @ (beta * beta * var + beta * dl_db)
            self._at = (x.copy(), float(f), np.array([-beta * g]), np.array([[h]]))
        return self._at
