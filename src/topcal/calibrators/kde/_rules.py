"""Bandwidth rules of the kernel-density calibrators (``calibrators.kde``): the candidates
and the scans.

Private module: the public API is :mod:`topcal.calibrators.kde`. Every rule is a small
object in one registry, looked up by the calibrator class: ``SELECTION_RULES`` (the
data-driven rules ``mon``, ``mon2``, ``mon4``, ``opt``) and ``RULES_OF_THUMB``
(``silverman``, ``scott``, for ``kde``'s fixed bandwidth).

The bandwidth scan
------------------
*Support* [lo, hi]: the lowest and highest score of the class's positives (bin edges for
binned data). R = hi - lo.

*Candidates*: b_lo * 2^(i/4), i = 0, 1, ..., up to b_hi = 4 R (the last candidate is b_hi
itself), where b_lo = max(R / 256, rho / 2) and rho is the score resolution: the smallest
gap between distinct scores (exact engine), or between the distinct scores seen on the fine
grid when no score smears over more than two grid points (binned engine; else rho = R /
4096). It matters only for discrete scores (bin midpoints, a random forest's vote
fractions). R / 256 is two steps of the scan grid, the smallest b whose wiggles the grid can
see; below rho / 2 the curve between two adjacent discrete scores is a sharp monotone step
and no new extremum can appear.

*Sign changes* are counted on the scan grid of 513 points evenly spaced over the support; a
difference between neighbours of at most 1e-7 counts as flat, and points where the positive
density is below 1e-6 of its maximum (gaps in the data) are skipped.

*Smallest admissible b*: the candidates one doubling apart (every COARSE_STRIDE-th, and the
last) are evaluated from the smallest up (8 per batched FFT call) until one is admissible,
then the candidates between the doubling before it and it; with j the first admissible of
these (or the doubling), 3 rounds of 7 points evenly spaced in log b between the last
inadmissible and the first admissible b, bisected (3 evaluations a round: the next bracket
is between the last inadmissible and the first admissible point found), narrow it to 0.03 %
relative precision. The result is always an evaluated, verified admissible b. The count need
not be monotone in b, so an admissible b between two candidates below candidate j - 1, an
admissible candidate below the last inadmissible doubling, or an admissible point of a round
below an inadmissible one the bisection evaluated could be missed (on the measured data none
was). If candidate 0 is admissible, b = b_lo. If no doubling is, b = b_hi (the smoothest
curve, closest to Conf1) with a :class:`BandwidthWarning`. Because mon, mon2 and mon4 use
the same candidates and the same refinement points until they part, b_mon4 <= b_mon2 <=
b_mon always.

*b_opt*: the candidate with the smallest leave-one-out NLL, then 3 rounds of 7 points in log
b around the best point so far (0.5 % precision). The leave-one-out minimum may lie at b_lo
(the "trivial maximum at 0" of cross-validated bandwidths): b_opt is then b_lo.

*Lockstep*: ``scan_mon_lockstep`` and ``scan_opt_lockstep`` run the same searches for many
classes at once, each step one call of a batch object of the engine module
(``ExactScanBatch``, ``BinnedScanBatch``, ``ExactLooBatch``), with the per-class results
(b_opt's bit for bit: see ``ExactLooBatch``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _engine as eng

__all__ = [
    "SELECTION_RULES",
    "RULES_OF_THUMB",
    "MonotoneRule",
    "LeaveOneOutRule",
    "candidates",
    "scan_mon",
    "scan_mon_lockstep",
    "scan_opt",
    "scan_opt_lockstep",
    "silverman",
    "scott",
    "weighted_spread",
]

#: Smallest candidate: two scan-grid steps (R / 256 = 16 fine cells).
B_LO_CELLS = 16
#: Largest candidate, in units of the support width R: at 4 R every kernel covers the whole
#: support and the curve is close to logistic (monotone unless the TP and FP means
#: coincide).
B_HI_SPAN = 4.0
#: Candidate spacing: 2^(1/4), four per doubling.
CANDIDATE_RATIO = 2.0**0.25
#: The upward scan evaluates every COARSE_STRIDE-th candidate (one per doubling of b) and
#: the last; below the first admissible of them, the candidates after the coarse one before
#: it.
COARSE_STRIDE = 4
#: Candidates evaluated per batched FFT call while scanning upwards.
SCAN_BATCH = 8
#: Refinement between the last inadmissible and the first admissible candidate: 3 rounds of
#: 7 points (one batched call each) shrink the interval 8^3 = 512-fold: 2^(1/4)^(1/512) - 1
#: ~ 0.03 % relative precision.
REFINE_ROUNDS = 3
REFINE_POINTS = 7
#: Refinement rounds for b_opt (each shrinks the bracket 4-fold): the bracket of two
#: candidate steps, 2^(1/2), ends at 2^(1/2 / 4^3) ~ 0.5 %.
OPT_ROUNDS = 3


#: Classes with at most this many positive rows use the exact engine under ``engine="auto"``
#: (kde's fixed bandwidth, kde-opt): its cost per bandwidth is 513 x rows kernel terms, ~0.3
#: M at this size (about the cost of one FFT pass of the binned engine).
EXACT_MAX_ROWS = 512
#: The same limit for the mon rules' scan: their binned classes are scanned in lockstep,
#: where a (class, bandwidth) costs ~0.1 ms, less than the exact engine's 513 x rows terms
#: above ~100 rows (measured: 10^4 rows x 10 classes of 220-512 rows fit 2.3 x faster with
#: them binned). PhANNs' classes (100 binned rows each) stay exact.
SCAN_EXACT_MAX_ROWS = 128

#: Memory budget of one lockstep group of exact-engine classes (elements of the stacked
#: scan-point x kernel-centre matrix, 64 MB of float64).
BATCH_ELEMENTS = 8_000_000


def candidates(lo: float, hi: float, rho: float) -> np.ndarray:
    """The candidate bandwidths b_lo * 2^(i/4), up to and including b_hi = 4 R."""
    width = hi - lo
    b_lo = max(width * B_LO_CELLS / eng.FINE_CELLS, 0.5 * rho)
    b_hi = B_HI_SPAN * width
    n_cand = int(np.floor(np.log(b_hi / b_lo) / np.log(CANDIDATE_RATIO))) + 1
    cand = b_lo * CANDIDATE_RATIO ** np.arange(n_cand)
    if cand[-1] < b_hi * (1 - 1e-12):
        cand = np.append(cand, b_hi)
    return cand


def coarse_indices(n_cand: int) -> np.ndarray:
    """The candidates the upward scan evaluates first: every COARSE_STRIDE-th one and the
    last."""
    idx = np.arange(0, n_cand, COARSE_STRIDE)
    return idx if idx[-1] == n_cand - 1 else np.append(idx, n_cand - 1)


def scan_mon_lockstep(batch, cands, max_changes) -> list:
    """The smallest-admissible-bandwidth search of ``scan_mon`` for many classes at once.

    Each class runs the same search (doublings, then the candidates below the first
    admissible one, then REFINE_ROUNDS rounds bisecting REFINE_POINTS points), but evaluates
    one bandwidth per step and stops as soon as the answer is known: the candidates after
    the first admissible one, and the refinement points the bisection does not ask for,
    cannot change the result, so they are not evaluated. Every step evaluates one bandwidth
    for every class still searching, in one call of ``batch.sign_changes``, which may settle
    an inadmissible count by a lower bound above max_changes (the same decisions). Returns
    (b, admissible, sign changes at b) per class.
    """
    searches = [_MonSearch(c) for c in cands]
    active = list(range(len(cands)))
    while active:
        bw = np.array([searches[i].bandwidth() for i in active])
        # an inadmissible count is only compared with max_changes, except at a class's last
        # candidate (its count is recorded when no candidate is admissible)
        at_most = np.array([searches[i].bound(max_changes) for i in active])
        changes = batch.sign_changes(active, bw, at_most)
        for i, b, c in zip(active, bw, changes):
            searches[i].step(float(b), int(c), c <= max_changes)
        active = [i for i in active if searches[i].phase != _DONE]
    return [s.result for s in searches]


#: :class:`_MonSearch`'s phases: the coarse candidates, refining, done, and the candidates
#: between the last two coarse ones
_COARSE, _REFINE, _DONE, _FINE = 0, 1, 2, 3


class _MonSearch:
    """One class's state in :func:`scan_mon_lockstep`: which bandwidth it asks for next, and
    what the answer to it decides."""

    def __init__(self, cands):
        self.cands = cands
        self.phase = _COARSE
        self.pos = 0  # candidate index, or point index within the round
        self.coarse = coarse_indices(cands.size)
        self.fine = None  # _FINE: the candidate indices between the last two coarse ones
        # _FINE: (index, result) of the first admissible coarse candidate
        self.at_coarse = None
        self.rnd = 0
        self.bracket = None  # (lo, hi) in log b while refining
        self.pts = self.bs_round = None
        # (last inadmissible, first admissible) point of the round, 0 and 8 ends
        self.span = None
        self.result = self.best = None

    def bandwidth(self):
        if self.phase == _COARSE:
            return self.cands[self.coarse[self.pos]]
        if self.phase == _FINE:
            return self.cands[self.fine[self.pos]]
        return self.bs_round[self.pos]

    def bound(self, max_changes):
        last = self.phase == _COARSE and self.pos + 1 == self.coarse.size
        return np.inf if last else max_changes

    def _start_round(self):
        lo, hi = self.bracket
        self.pts = lo + (hi - lo) * np.arange(1, REFINE_POINTS + 1) / (REFINE_POINTS + 1)
        self.bs_round = np.exp(self.pts)
        # bisection between the bracket's ends (points 1..7 inside)
        self.span = (0, REFINE_POINTS + 1)
        self.pos = (REFINE_POINTS + 1) // 2 - 1

    def _refine_from(self, j, res):
        self.phase = _REFINE
        self.bracket = (np.log(self.cands[j - 1]), np.log(self.cands[j]))
        self.best = res
        self._start_round()

    def step(self, b: float, c: int, good: bool):
        """Take the sign changes ``c`` at the asked bandwidth ``b`` (``good``: admissible)."""
        if self.phase == _COARSE:
            self._step_coarse(b, c, good)
        elif self.phase == _FINE:
            p = self.pos
            if good:
                self._refine_from(int(self.fine[p]), (b, True, c))
            elif p + 1 == self.fine.size:
                self._refine_from(*self.at_coarse)
            else:
                self.pos = p + 1
        else:
            self._step_refine(b, c, good)

    def _step_coarse(self, b, c, good):
        q, coarse = self.pos, self.coarse
        j = int(coarse[q])
        if good and j == 0:
            self.phase, self.result = _DONE, (b, True, c)
        # candidates in between: the first admissible wins
        elif good and j - 1 > coarse[q - 1]:
            self.phase, self.pos = _FINE, 0
            self.fine = np.arange(int(coarse[q - 1]) + 1, j)
            self.at_coarse = (j, (b, True, c))
        elif good:
            self._refine_from(j, (b, True, c))
        elif q + 1 == coarse.size:
            self.phase, self.result = _DONE, (b, False, c)
        else:
            self.pos = q + 1

    def _step_refine(self, b, c, good):
        a, z = self.span
        mid = self.pos + 1
        if good:
            self.best = (b, True, c)
            z = mid
        else:
            a = mid
        if z - a == 1:
            self.bracket = (
                round_point(self.bracket, self.pts, a),
                round_point(self.bracket, self.pts, z),
            )
            self.rnd += 1
            if self.rnd == REFINE_ROUNDS:
                self.phase, self.result = _DONE, self.best
            else:
                self._start_round()
        else:
            self.span = (a, z)
            self.pos = (a + z) // 2 - 1


def scan_mon(engine, cand, max_changes: int) -> tuple[float, bool]:
    """Smallest admissible bandwidth: (b, admissible).

    The doublings (:func:`coarse_indices`) are evaluated from the smallest up, SCAN_BATCH at
    a time (one batched FFT), stopping at the first batch holding an admissible one, then
    the candidates below it (one call); then REFINE_ROUNDS rounds each place REFINE_POINTS
    points evenly in log b between the last inadmissible and the first admissible b,
    evaluate them in one call and bisect them (the result is always an evaluated admissible
    b).
    """
    n = max_changes

    def admissible(bs):
        conf, res = engine.scan(bs)
        return np.array([eng.count_sign_changes(c, r) <= n for c, r in zip(conf, res)])

    coarse = coarse_indices(cand.size)
    c = -1
    for start in range(0, coarse.size, SCAN_BATCH):
        idx = coarse[start : start + SCAN_BATCH]
        good = admissible(cand[idx])
        if good.any():
            q = start + int(np.argmax(good))
            c = int(coarse[q])
            break
    if c < 0:
        return float(cand[-1]), False
    if c == 0:
        return float(cand[0]), True
    j = c
    fine = np.arange(int(coarse[q - 1]) + 1, c)
    if fine.size:
        good = admissible(cand[fine])
        if good.any():
            j = int(fine[np.argmax(good)])
    lo, hi = np.log(cand[j - 1]), np.log(cand[j])
    best = float(cand[j])
    for _ in range(REFINE_ROUNDS):
        pts = lo + (hi - lo) * np.arange(1, REFINE_POINTS + 1) / (REFINE_POINTS + 1)
        good = admissible(np.exp(pts))  # all points in one call; the bisection reads 3 of them
        a, z = 0, REFINE_POINTS + 1
        while z - a > 1:
            mid = (a + z) // 2
            a, z = (a, mid) if good[mid - 1] else (mid, z)
        if z <= REFINE_POINTS:
            best = float(np.exp(pts[z - 1]))
        lo, hi = round_point((lo, hi), pts, a), round_point((lo, hi), pts, z)
    return best, True


def round_point(bracket, pts, i):
    """Point ``i`` of a refinement round in log b: 0 the bracket's low end, 1..7 ``pts``, 8
    its high end."""
    return bracket[0] if i == 0 else bracket[1] if i == REFINE_POINTS + 1 else pts[i - 1]


class _OneEngine:
    """One engine in the interface of a lockstep batch (``loo_nll(rows, bandwidths)``)."""

    def __init__(self, engine):
        self.engine = engine

    def loo_nll(self, rows, bandwidths) -> np.ndarray:
        return self.engine.loo_nll(bandwidths)


def scan_opt(engine, cand) -> float:
    """Bandwidth with the smallest leave-one-out NLL.

    All candidates are evaluated (one batched call); then OPT_ROUNDS rounds each evaluate
    REFINE_POINTS points evenly in log b between the neighbours of the best point so far and
    keep the best: the search of :func:`scan_opt_lockstep`, for one class.
    """
    return scan_opt_lockstep(_OneEngine(engine), [cand])[0]


def scan_opt_lockstep(batch, cands) -> list:
    """The b_opt search of ``scan_opt`` for many classes at once: b per class.

    The same candidates, rounds and decisions as ``scan_opt`` (which evaluates every
    candidate, then OPT_ROUNDS rounds of REFINE_POINTS points, none skipped), but each stage
    is one call of ``batch.loo_nll`` for all classes: every class's candidates together,
    then each round's points of every class together (OPT_ROUNDS + 1 calls instead of that
    many per class).
    """
    n = len(cands)
    rows = np.repeat(np.arange(n), [c.size for c in cands])
    loss = batch.loo_nll(rows, np.concatenate(cands))
    starts = np.concatenate([[0], np.cumsum([c.size for c in cands])])
    best_b, best, lo, hi = [], [], [], []
    for i, cand in enumerate(cands):
        j = int(np.argmin(loss[starts[i] : starts[i + 1]]))
        best_b.append(float(cand[j]))
        best.append(float(loss[starts[i] + j]))
        lo.append(np.log(cand[max(j - 1, 0)]))
        hi.append(np.log(cand[min(j + 1, cand.size - 1)]))
    ticks = np.arange(1, REFINE_POINTS + 1)
    rows = np.repeat(np.arange(n), REFINE_POINTS)
    for _ in range(OPT_ROUNDS):
        # the points exactly as scan_opt computes them (the same operations in the same
        # order)
        pts = [lo[i] + (hi[i] - lo[i]) * ticks / (REFINE_POINTS + 1) for i in range(n)]
        f = batch.loo_nll(rows, np.exp(np.concatenate(pts))).reshape(n, REFINE_POINTS)
        for i in range(n):
            k = int(np.argmin(f[i]))
            if f[i, k] < best[i]:
                best[i], best_b[i] = float(f[i, k]), float(np.exp(pts[i][k]))
            c = np.log(best_b[i])
            step = (hi[i] - lo[i]) / (REFINE_POINTS + 1)
            lo[i], hi[i] = max(c - step, lo[i]), min(c + step, hi[i])
    return best_b


def weighted_spread(score, w):
    """Weighted standard deviation and interquartile range."""
    order = np.argsort(score, kind="stable")
    s, ww = score[order], w[order]
    mean = np.average(s, weights=ww)
    sd = float(np.sqrt(np.average((s - mean) ** 2, weights=ww)))
    cw = np.cumsum(ww) / ww.sum()
    q1, q3 = np.interp([0.25, 0.75], cw, s)
    return sd, float(q3 - q1)


def silverman(score, w) -> float:
    """Silverman's rule of thumb, 0.9 min(sd, IQR / 1.34) n^(-1/5) (weighted, n = total
    weight)."""
    sd, iqr = weighted_spread(score, w)
    n = float(w.sum())
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    return 0.9 * spread * n**-0.2


def scott(score, w) -> float:
    """Scott's rule of thumb, 1.06 sd n^(-1/5) (weighted, n = total weight)."""
    sd, _ = weighted_spread(score, w)
    n = float(w.sum())
    return 1.06 * sd * n**-0.2


#: Rules of thumb for ``kde``'s ``bandwidth`` parameter: name -> b(kernel centres, weights).
RULES_OF_THUMB = {"silverman": silverman, "scott": scott}


@dataclass(frozen=True)
class MonotoneRule:
    """b_mon*: the smallest candidate bandwidth whose slope changes sign at most
    ``max_changes`` times."""

    max_changes: int

    #: Largest class (positive rows) for the exact engine under ``engine="auto"``.
    exact_max_rows = SCAN_EXACT_MAX_ROWS
    #: What the lockstep search evaluates its classes with (see ``select_lockstep``).
    exact_batch = eng.ExactScanBatch
    binned_batch = eng.BinnedScanBatch

    def select(self, engine, cand) -> tuple[float, bool]:
        """(b, admissible) for one class; ``admissible`` False: no candidate met the rule, b
        = b_hi."""
        return scan_mon(engine, cand, self.max_changes)

    def select_lockstep(self, batch, cands) -> list:
        """The same search for many exact-engine classes at once: (b, admissible, sign
        changes) each."""
        return scan_mon_lockstep(batch, cands, self.max_changes)


@dataclass(frozen=True)
class LeaveOneOutRule:
    """b_opt: the bandwidth with the smallest leave-one-out top-label NLL of the class."""

    #: Largest class (positive rows) for the exact engine under ``engine="auto"``.
    exact_max_rows = EXACT_MAX_ROWS
    #: Exact-engine classes are searched in lockstep; binned ones one by one (each is
    #: already a few batched FFT calls over 4097 grid points, and they are few).
    exact_batch = eng.ExactLooBatch
    binned_batch = None

    def select(self, engine, cand) -> tuple[float, bool]:
        return scan_opt(engine, cand), True

    def select_lockstep(self, batch, cands) -> list:
        """The same search for many exact-engine classes at once: (b, admissible (always),
        None) each.

        The sign-change count of b is not part of this search; the caller counts it.
        """
        return [(b, True, None) for b in scan_opt_lockstep(batch, cands)]


#: The data-driven rules, by the suffix of their method name (``kde-mon2`` -> ``"mon2"``).
SELECTION_RULES = {
    "mon": MonotoneRule(0),
    "mon2": MonotoneRule(2),
    "mon4": MonotoneRule(4),
    "opt": LeaveOneOutRule(),
}
