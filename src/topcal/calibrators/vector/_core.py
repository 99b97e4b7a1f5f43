"""Numeric core of the whole-vector scalings ``vs`` and ``sms`` (docs/vector.md).

The map: x = log softmax(beta log Y(X)) (log Y floored at
:data:`topcal.data.LOG_PROB_FLOOR`; beta from a first stage, multinomial temperature
scaling), u = a x + v * x + W x + b, yhat = softmax(u): a a shared scale, v (K) class-wise
deviations of it, b (K) biases and W (K x K, zero diagonal; ``sms`` only) the off-diagonal
part. Parameters are packed as theta = (a, v, b, W's off-diagonal entries row by row).

Fitted by the multinomial NLL (mean over the weighted rows) plus a ridge penalty r_v |v|^2 +
r_b |b|^2 + r_w |W|^2 with r = reg K / n for v and b and reg K (K - 1) / n for W (the
scaling of structured matrix scaling, Berta et al. 2025; n the weighted row count). Analytic
gradient; analytic Hessian for the Newton solver and the parameters' covariance (delta
method). Everything runs over blocks of rows: the extra memory is a few blocks plus the (n,
K) features.
"""

from __future__ import annotations


import numpy as np
from scipy.special import expit

from ..._numeric import inverse_pd, row_max
from ...data import LOG_PROB_FLOOR, TopLabelData

__all__ = [
    "Layout",
    "VectorObjective",
    "log_scores",
    "rescale",
    "features",
    "feature_blocks",
    "data_margin",
    "data_rest",
    "temperature",
    "top_margin",
    "margin_variance",
    "inverse_pd",
]

#: Entries of a block of rows (rows x K).
_BLOCK = 1 << 16
_LOG_FLOOR = float(np.log(LOG_PROB_FLOOR))


def _blocks(n: int, k: int):
    step = max(64, _BLOCK // max(k, 1))
    for a in range(0, n, step):
        yield a, min(a + step, n)


def log_scores(data: TopLabelData, rows: slice | None = None) -> np.ndarray:
    """log Y(X), (n, K) float64: floored log-probabilities, or logits' log-softmax floored
    alike (``rows``, a slice: those rows' only, the same numbers)."""
    x = data.log_probs(rows)
    if data.full_kind == "logits":
        np.maximum(x, _LOG_FLOOR, out=x)
    return np.ascontiguousarray(x, dtype=np.float64)


def rescale(x: np.ndarray, beta: float, mix: float = 0.0) -> np.ndarray:
    """log((1 - mix) softmax(beta x) + mix / K), row by row, in place: the log-probabilities
    after temperature scaling, mixed with the uniform distribution by ``mix``."""
    x *= beta
    k = x.shape[1]
    for a, b in _blocks(x.shape[0], k):
        xb = x[a:b]
        mx = row_max(xb, keepdims=True)
        if mix > 0:
            # log((1 - mix) e / sum(e) + mix / K), e = exp(x - max): one exp and one log an
            # entry (the log-softmax and then logaddexp took two of each and a log1p: at
            # 10^5 x 1,000 2.5 s a call)
            xb -= mx
            np.exp(xb, out=xb)
            xb *= (1.0 - mix) / xb.sum(axis=1, keepdims=True)
            xb += mix / k
            np.log(xb, out=xb)
        else:
            xb -= mx + np.log(np.exp(xb - mx).sum(axis=1, keepdims=True))
    return x


def feature_blocks(data: TopLabelData, beta: float, mix: float = 0.0):
    """(a, b, x[a:b]) for the blocks of rows of :func:`features`, each computed from the
    scores alone (a fresh block: each row's numbers are its own, so they are
    :func:`features`' bit for bit, and no (n, K) array is made)."""
    n, k = data.full.shape
    for a, b in _blocks(n, k):
        yield a, b, rescale(log_scores(data, slice(a, b)), beta, mix)


def features(data: TopLabelData, beta: float, mix: float = 0.0) -> np.ndarray:
    """The map's input: :func:`rescale` of :func:`log_scores` by inverse temperature
    ``beta``."""
    return rescale(log_scores(data), beta, mix)


def temperature(
    x: np.ndarray, labels, w, start: float | None = None, max_iter: int = 100, one_step=False
) -> float:
    """The inverse temperature beta of multinomial temperature scaling, softmax(beta x):
    Newton in t = log beta (dCE / dbeta = E_p[x] - x_y, d2CE / dbeta2 = Var_p[x]), beta in
    [1e-3, 1e3], from ``start`` (default 1). ``one_step`` (a cross-validation fold, from the
    all-data fit's beta): one Newton step from ``start``, not checked by a line search
    (where the curvature is positive): one pass over the rows, beta to about the square of
    the step (relative)."""
    labels = np.asarray(labels, np.int64)
    n = float(np.sum(w))
    lo, hi = np.log(1e-3), np.log(1e3)

    def parts(t):
        """(CE, dCE / dt, d2CE / dt2) at beta = exp(t)."""
        beta = np.exp(t)
        f = g = h = 0.0
        for a, b in _blocks(x.shape[0], x.shape[1]):
            xb, wb = x[a:b], w[a:b]
            p, lse = _softmax_rows(xb * beta)
            xt = xb[np.arange(b - a), labels[a:b]]
            ex = np.einsum("ij,ij->i", p, xb)
            f += float(wb @ (lse - beta * xt))
            g += float(wb @ (ex - xt))
            h += float(wb @ (np.einsum("ij,ij->i", p, xb * xb) - ex * ex))
        return f / n, beta * g / n, (beta * beta * h + beta * g) / n

    t = float(np.clip(np.log(start), lo, hi)) if start else 0.0
    f, g, h = parts(t)
    if one_step and h > 0:
        return float(np.exp(np.clip(t + float(np.clip(-g / h, -2.0, 2.0)), lo, hi)))
    for _ in range(max_iter):
        step = -g / h if h > 0 else -np.sign(g)
        step = float(np.clip(step, -2.0, 2.0))
        if h > 0 and abs(step) <= 1e-6:
            # converged (the next step would be ~1e-12): take the step unchecked, since at
            # the optimum the line search's test compares losses equal to their rounding,
            # fails, and backtracked 23 halvings (23 wasted passes of a 29-pass fit)
            t = float(np.clip(t + step, lo, hi))
            break
        s = 1.0
        while s > 1e-8:
            tn = float(np.clip(t + s * step, lo, hi))
            fn, gn, hn = parts(tn)
            if fn <= f + 1e-4 * s * step * g:
                break
            s *= 0.5
        else:
            break
        # Newton converges quadratically: after a full step of 1e-6 the next would be ~1e-12
        done = abs(f - fn) <= 1e-12 * max(1.0, abs(f)) or (s == 1.0 and abs(tn - t) <= 1e-6)
        t, f, g, h = tn, fn, gn, hn
        if done:
            break
    return float(np.exp(t))


class Layout:
    """Packing of theta for K classes, with (``off``) or without the off-diagonal part."""

    def __init__(self, k: int, off: bool):
        self.k = int(k)
        self.off = bool(off)
        self.size = 1 + 2 * self.k + (self.k * (self.k - 1) if self.off else 0)
        # the off-diagonal entries' mask (K x K: only where they are parameters; at 10^4
        # classes it was 100 MB a layout)
        self._offmask = ~np.eye(self.k, dtype=bool) if self.off else None

    def start(self) -> np.ndarray:
        """a = 1, everything else 0: the identity map (yhat = Y(X))."""
        x = np.zeros(self.size)
        x[0] = 1.0
        return x

    def unpack(self, theta):
        k = self.k
        a, v, b = float(theta[0]), theta[1 : 1 + k], theta[1 + k : 1 + 2 * k]
        w = None
        if self.off:
            w = np.zeros((k, k))
            w[self._offmask] = theta[1 + 2 * k :]
        return a, v, b, w

    def scores(self, x: np.ndarray, theta) -> np.ndarray:
        """u = (a + v) * x + b (+ x W^T), rows of x."""
        a, v, b, w = self.unpack(theta)
        u = x * (a + v)
        u += b
        if w is not None:
            u += x @ w.T
        return u

    def penalty_weights(self, reg: float, n: float) -> np.ndarray:
        """Ridge weight per parameter (0 for a)."""
        k = self.k
        r = np.zeros(self.size)
        r[1 : 1 + 2 * k] = reg * k / n
        if self.off:
            r[1 + 2 * k :] = reg * k * (k - 1) / n
        return r

    def pack_grad(self, gm: np.ndarray, gb: np.ndarray) -> np.ndarray:
        """theta's gradient from the gradient in M ((a + v) on the diagonal, W off it; gm)
        and b; without the off-diagonal part ``gm`` is M's diagonal alone (K,)."""
        d = np.diag(gm) if gm.ndim == 2 else gm
        parts = [[d.sum()], d, gb]
        if self.off:
            parts.append(gm[self._offmask])
        return np.concatenate(parts)

    def jacobian_product(self, hm: np.ndarray) -> np.ndarray:
        """R^T hm R (R: :meth:`jacobian`) by selection instead of two products: theta's
        off-diagonal entries are entries of vec(M | b), and a and v_j both move M_jj alone."""
        k = self.k
        diag = np.arange(k) * (k + 2)  # M_jj in vec(M | b)
        idx = np.concatenate([diag, np.arange(k) * (k + 1) + k])  # v's rows, then b's
        if self.off:
            idx = np.concatenate(
                [idx, [j * (k + 1) + i for j in range(k) for i in range(k) if i != j]]
            )
        sub = hm[np.ix_(idx, idx)]
        out = np.empty((self.size, self.size))
        out[1:, 1:] = sub
        out[0, 1:] = out[1:, 0] = sub[:k].sum(axis=0)
        out[0, 0] = sub[:k, :k].sum()
        return out

    def jacobian(self) -> np.ndarray:
        """R, (K (K + 1), size): vec of (M | b) (row j: M_j0 .. M_j,K-1, b_j) from theta."""
        k = self.k
        r = np.zeros((k * (k + 1), self.size))
        for j in range(k):
            r[j * (k + 1) + j, 0] = 1.0
            r[j * (k + 1) + j, 1 + j] = 1.0
            r[j * (k + 1) + k, 1 + k + j] = 1.0
        if self.off:
            rows = np.array([j * (k + 1) + i for j in range(k) for i in range(k) if i != j])
            r[rows, 1 + 2 * k + np.arange(k * (k - 1))] = 1.0
        return r


def _softmax_rows(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, log-sum-exp) of each row of u; u is overwritten by P."""
    mx = row_max(u, keepdims=True)
    u -= mx
    np.exp(u, out=u)
    s = u.sum(axis=1, keepdims=True)
    u /= s
    return u, (mx + np.log(s))[:, 0]


class VectorObjective:
    """Penalised mean multinomial NLL of the map on features ``x`` (n, K), true classes
    ``labels``, row weights ``w``; ``reg``: the penalty's multiplier (see the module
    docstring).

    With ``pred`` (each row's original predicted class), every gradient pass also keeps the
    rows' :func:`top_margin` at its parameters (:meth:`margin_at`): the fit's confidence on
    its own rows without another pass over them (at 10^5 x 1,000 that pass was ~0.9 s a
    fit)."""

    def __init__(self, x, labels, w, layout: Layout, reg: float, pred=None):
        self.x, self.labels, self.w, self.layout = (
            x,
            np.asarray(labels, np.int64),
            np.asarray(w, np.float64),
            layout,
        )
        self.pred = None if pred is None else np.asarray(pred, np.int64)
        self.n = float(self.w.sum())
        self.r = layout.penalty_weights(reg, self.n)
        self.n_eval = 0
        self.last_hessian: np.ndarray | None = None  # the solver's last (see _solve)
        self.last_margin = None  # (theta, margins) of the last gradient pass with pred

    def margin_at(self, theta) -> np.ndarray | None:
        """:func:`top_margin` of every row at ``theta`` from the last gradient pass, where
        that pass was at ``theta`` (else None): m = t - log(s - exp(t)) from the pass's
        shifted top score t and its row's sum s of exp(u - max u). Where the top holds more
        than 1 - 1e-6 of the sum the subtraction loses digits (up to ~1e-10 in m at that
        bound): those rows are computed again alone, as top_margin does."""
        if self.last_margin is None or not np.array_equal(self.last_margin[0], theta):
            return None
        t, s = self.last_margin[1]
        e = np.exp(t)
        m = np.empty_like(t)
        ok = e <= (1.0 - 1e-6) * s
        m[ok] = t[ok] - np.log(s[ok] - e[ok])
        bad = np.flatnonzero(~ok)
        for a in range(0, bad.size, 4096):  # block by block, as top_margin
            r = bad[a : a + 4096]
            m[r] = _margin_block(self.layout, theta, self.x[r], self.pred[r])
        return m

    def rows(self, stride: int) -> "VectorObjective":
        """The same objective on every ``stride``-th row (views, no copy), keeping this
        one's penalty weights: its optimum approximates this one's."""
        sub = VectorObjective.__new__(VectorObjective)
        sub.x, sub.labels, sub.w, sub.layout = (
            self.x[::stride],
            self.labels[::stride],
            self.w[::stride],
            self.layout,
        )
        sub.n = float(sub.w.sum())
        sub.r = self.r
        sub.n_eval = 0
        sub.last_hessian = None
        sub.pred, sub.last_margin = None, None
        return sub

    def value_grad(self, theta):
        theta = np.asarray(theta, dtype=np.float64)
        lay, x, w = self.layout, self.x, self.w
        k = lay.k
        f = 0.0
        gm = np.zeros((k, k)) if lay.off else None
        gd = np.zeros(k)
        gb = np.zeros(k)
        pred = self.pred
        margin = None if pred is None else np.empty((2, x.shape[0]))
        for a, b in _blocks(x.shape[0], k):
            xb, wb, yb = x[a:b], w[a:b], self.labels[a:b]
            rows = np.arange(b - a)
            p = lay.scores(xb, theta)
            true = p[rows, yb].copy()
            mx = row_max(p, keepdims=True)
            if margin is not None:  # the top's shifted score; its margin from it and s later
                margin[0, a:b] = p[rows, pred[a:b]]
                margin[0, a:b] -= mx[:, 0]
            p -= mx
            np.exp(p, out=p)
            s = p.sum(axis=1)
            if margin is not None:
                margin[1, a:b] = s
            f += float(wb @ (mx[:, 0] + np.log(s) - true))
            p *= (wb / s)[:, None]  # w P: the softmax's division and the weights in one pass
            p[rows, yb] -= wb  # R = w (P - Y)
            gb += p.sum(axis=0)
            if gm is not None:
                gm += p.T @ xb
            else:
                gd += np.einsum("ij,ij->j", p, xb)
        self.n_eval += 1
        if margin is not None:
            self.last_margin = (theta.copy(), margin)
        if gm is None:  # the diagonal alone (a K x K matrix of it was 800 MB at 10^4 classes)
            gm = gd
        g = lay.pack_grad(gm, gb) / self.n + 2.0 * self.r * theta
        return f / self.n + float(self.r @ (theta * theta)), g

    def hessian(self, theta, stride: int = 1, summed: bool = False) -> np.ndarray:
        """Hessian of the objective (``summed``: of the summed NLL plus n x the penalty, the
        observed information) from every ``stride``-th row (the NLL part rescaled to all
        rows)."""
        theta = np.asarray(theta, dtype=np.float64)
        lay, k = self.layout, self.layout.k
        x, w = self.x[::stride], self.w[::stride]
        scale = (self.n / float(w.sum())) if w.sum() > 0 else 1.0
        if lay.off:
            h = lay.jacobian_product(_kron_hessian(lay, theta, x, w))
        else:
            hvv, hvb, hbb = np.zeros((k, k)), np.zeros((k, k)), np.zeros((k, k))
            dvv, dvb, dbb = np.zeros(k), np.zeros(k), np.zeros(k)
            for a, b in _blocks(x.shape[0], k):
                xb, wb = x[a:b], w[a:b]
                p, _ = _softmax_rows(lay.scores(xb, theta))
                px = p * xb
                pw, pxw = p * wb[:, None], px * wb[:, None]
                dvv += np.einsum("ij,ij->j", pxw, xb)
                dvb += pxw.sum(axis=0)
                dbb += pw.sum(axis=0)
                hvv -= pxw.T @ px
                hvb -= pxw.T @ p
                hbb -= pw.T @ p
            hvv[np.diag_indices(k)] += dvv
            hvb[np.diag_indices(k)] += dvb
            hbb[np.diag_indices(k)] += dbb
            # in theta = (a, v, b): a moves every M_jj alone, so theta's Hessian is the one
            # in (M_jj, b_j) bordered by its first k rows' sums (by selection: the product
            # with the Jacobian, O(K^3), was about half of a Hessian at K = 1,000)
            h = np.empty((lay.size, lay.size))
            h[1:, 1:] = np.block([[hvv, hvb], [hvb.T, hbb]])  # in (M_jj, b_j)
            h[0, 1:] = h[1:, 0] = h[1 : 1 + k, 1:].sum(axis=0)
            h[0, 0] = h[1 : 1 + k, 1 : 1 + k].sum()
        h *= scale
        pen = np.diag(2.0 * self.r * self.n)
        return h + pen if summed else h / self.n + pen / self.n


def _kron_hessian(lay: Layout, theta, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The summed NLL's Hessian in vec(M | b) (K (K + 1) square; see
    :meth:`Layout.jacobian`): block (j, l) = sum_i w_i (delta_jl p_ij - p_ij p_il) xt_i
    xt_i^T, xt = (x, 1). Each block is symmetric and block (l, j) equals block (j, l), so
    one product of the K (K + 1) / 2 class pairs' weights by the (K + 1) (K + 2) / 2
    distinct entries of xt xt^T gives all of it: a third of the multiply-adds of the full
    (n, K (K + 1)) Gram matrix."""
    k = lay.k
    pj, pl = np.triu_indices(k)
    ta, tb = np.triu_indices(k + 1)
    same = pj == pl
    s = np.zeros((pj.size, ta.size))
    # transposed (classes x rows): selecting rows of a C array copies blocks, columns do
    # not. The blocks are small (each temporary a quarter of _blocks' entries, 128 KiB):
    # larger fresh arrays come from the system each time (glibc trims the heap as they are
    # freed), and the page faults of filling them made this 2 x slower than the products
    # (measured on the 2-core box)
    for a, b in _blocks(x.shape[0], 2 * (k + 1) * (k + 2)):
        p, _ = _softmax_rows(lay.scores(x[a:b], theta))
        p = np.ascontiguousarray(p.T)
        pt = p * w[a:b]
        xt = np.empty((k + 1, b - a))
        xt[:k] = x[a:b].T
        xt[k] = 1.0
        c = pt[pj] * -p[pl]  # w p_j (delta_jl - p_l)
        c[same] += pt
        s += c @ (xt[ta] * xt[tb]).T
    hm = np.zeros((k, k + 1, k, k + 1))
    jj, ll, aa, bb = pj[:, None], pl[:, None], ta[None, :], tb[None, :]
    hm[jj, aa, ll, bb] = s
    hm[jj, bb, ll, aa] = s
    hm[ll, aa, jj, bb] = s
    hm[ll, bb, jj, aa] = s
    return hm.reshape(k * (k + 1), k * (k + 1))


def _margin_block(layout: Layout, theta, xb: np.ndarray, pc: np.ndarray) -> np.ndarray:
    u = layout.scores(xb, theta)
    rows = np.arange(xb.shape[0])
    top = u[rows, pc].copy()
    u[rows, pc] = -np.inf
    _, lse = _softmax_rows(u)
    return top - lse


def top_margin(layout: Layout, theta, x: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Log-odds m of the recalibrated entry of the original predicted class: m = u_k - log
    sum_{j != k} exp(u_j), row block by row block."""
    n, k = x.shape
    out = np.empty(n)
    for a, b in _blocks(n, k):
        out[a:b] = _margin_block(layout, theta, x[a:b], pred[a:b])
    return out


def data_margin(
    layout: Layout, theta, data: TopLabelData, beta: float, mix: float
) -> np.ndarray:
    """:func:`top_margin` of :func:`features` of ``data`` (the same numbers), block by block
    from the scores: a prediction makes no (n, K) array (at 10^5 x 1,000 a fresh one cost
    0.6-4 s of page faults, the log and the rescale of it 2.5 s)."""
    out = np.empty(data.n_rows)
    for a, b, xb in feature_blocks(data, beta, mix):
        out[a:b] = _margin_block(layout, theta, xb, data.pred[a:b])
    return out


def data_rest(
    layout: Layout, theta, data: TopLabelData, beta: float, mix: float
) -> np.ndarray:
    """The map's distribution over each row's other classes, (n, K): softmax of u with the
    original predicted class's entry left out (0 there; the others sum to 1). With the
    confidence c = sigmoid(m) the map's whole vector is c at k(X) and (1 - c) times this
    elsewhere.

    Block by block from the scores, like :func:`data_margin`, but after the log-scores in
    float32 (the rescale, the map and the softmax: their exponentials and logarithms are the
    cost, and float32's run at about 2.5 x the rate; each entry to about 1e-6 relative, far
    below what a calibrated probability resolves), each row then divided by its sum in
    float64 (rows sum to 1 to float64's rounding). Entries below about 1e-38 of the row's
    largest are 0. Column-major: a table's columns are contiguous (apply --full hands them
    to pyarrow without a gather; at 10^5 x 1,000 the row-major block cost more than
    computing it)."""
    n, k = data.full.shape
    out = np.empty((n, k), order="F")
    a0, v, bias, w = layout.unpack(theta)
    scale, bias = (a0 + v).astype(np.float32), np.asarray(bias, np.float32)
    w = None if w is None else w.T.astype(np.float32)
    f32 = np.float32
    for a, b in _blocks(n, k):
        x = log_scores(data, slice(a, b))
        x *= beta
        x -= row_max(x, keepdims=True)
        x = x.astype(f32)
        np.exp(x, out=x)  # softmax(beta log Y) mixed with the uniform, as :func:`rescale`
        x *= ((1.0 - mix) / x.sum(axis=1, keepdims=True, dtype=np.float64)).astype(f32)
        if mix > 0:
            x += f32(mix / k)
        np.log(x, out=x)
        mixed = None if w is None else x @ w
        x *= scale  # u = (a + v) x + b (+ W x): :meth:`Layout.scores`
        x += bias
        if mixed is not None:
            x += mixed
        x[np.arange(b - a), data.pred[a:b]] = -np.inf
        x -= row_max(x, keepdims=True)
        np.exp(x, out=x)
        out[a:b] = x / x.sum(axis=1, keepdims=True, dtype=np.float64)
    return out


def margin_variance(
    layout: Layout, theta, cov: np.ndarray, x: np.ndarray, pred: np.ndarray
) -> np.ndarray:
    """Delta-method variance g^T cov g of each row's margin m, g = dm / dtheta (analytic)."""
    n, k = x.shape
    out = np.empty(n)
    offmask = ~np.eye(k, dtype=bool)
    for a, b in _blocks(n, layout.size):
        xb, pc = x[a:b], pred[a:b]
        rows = np.arange(b - a)
        u = layout.scores(xb, theta)
        u[rows, pc] = -np.inf
        q, _ = _softmax_rows(u)  # softmax over the others (0 at k)
        c = -q
        c[rows, pc] = 1.0  # dm / du = e_k - q
        parts = [(c * xb).sum(axis=1)[:, None], c * xb, c]
        if layout.off:
            parts.append((c[:, :, None] * xb[:, None, :])[:, offmask])
        g = np.concatenate(parts, axis=1)
        out[a:b] = np.einsum("ij,ij->i", g @ cov, g)
    return out


def conf_from_margin(m: np.ndarray) -> np.ndarray:
    return expit(m)
