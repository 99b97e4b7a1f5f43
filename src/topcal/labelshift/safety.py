"""The safety step of label-shift adaptation: how far to move from the source priors towards
an estimate (:func:`choose_shrink`), chosen by simulated shift on the test set's own
confusion counts.

An estimated prior is used as pi = (1 - lam) pi_s + lam pi_hat. lam = 1 is the estimate, lam
= 0 no adaptation. The right lam depends on how well the estimator works *for this model and
this use-set size*, which the model's stored counts (per predicted class and score region,
the weight of each true class: :class:`~topcal.evidence.confusion.ConfusionStats`) let us
simulate:

1. the population: the stored counts N, with each cell's false positives spread over the
   true classes by the same shrunk mix the adaptation uses (``fp_pseudocount``); a draw N*
   of the test set's size from it stands for the labelled test set (so the simulated
   estimator, like the real one, works from a noisy confusion matrix, calibration and
   false-positive mix, and meets use rows of (cell, class) pairs its labelled sample lacks);
2. a use set of the real size n_use is drawn from the population at priors near the estimate
   pi_hat (see the two rounds below), as cell x true-class counts U;
3. the same estimator runs on N* and U's cell counts (``bbse`` exactly; ``em`` on the
   cell-level posterior, a stand-in for EM on per-row confidences or full vectors);
4. each cell's confidence under N* (its TP share, (TP + 1/2) / (n + 1)) is adapted with the
   priors at every lam of :data:`SHRINK_GRID`, and the top-label NLL on U's true classes is
   compared with the unadapted one.

Which truth? The estimate's spread A = mean (w_hat - 1)^2 is the true shift's spread plus
the estimator's error e at that truth. Two readings of e (``truth=``):

* ``"estimate"`` (EM on the model's own posteriors): one round at pi* = pi_hat measures e
  there, and the second simulates a truth moved sqrt(max(0, 1 - e / A)) of the way to
  pi_hat. The error grows with the shift, so e at pi_hat overstates it: a conservative
  reading, kept where the stand-in flatters the real estimator (cell-level EM errs less than
  EM on a weak network's per-row confidences: LeNet-5 CIFAR-100). When e >= A the estimate
  is all noise as far as the simulation can tell: lam = 0 without a second round (a
  simulated truth of no shift can still show a tiny gain, from moving the labelled
  resample's own noisy class frequencies towards the truth; on ImageNet's unshifted half
  that chose lam 0.05-0.1 and raised the real NLL by up to 0.0003).
* ``"moment"`` (bbse, simulated exactly; EM on BCTS vectors, which errs less than its
  stand-in): e is simulated at both ends, with no shift (e0, per draw) and at pi_hat (e1),
  and the truth a fraction t of the way is solved from the moment equation A = t^2 A + e(t)
  with e(t) = e0 + (e1 - e0) t^2: t^2 = (A - e0) / (A + e1 - e0). lam = 0 without further
  rounds when A is at most the median spread the estimator shows with no shift at all.

The lam with the lowest mean NLL change over :data:`SAFETY_SIMULATIONS` draws is found; 0 is
used when that change is not below 0 by twice its standard error (the estimator is
unreliable here: adapting would do harm, or gain nothing worth the risk), else the largest
lam whose change is within one standard error of the lowest (closest to the estimate among
the equally good). Derivation and assumptions: ``docs/label_shift.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._numeric import binary_nll
from .._parallel import available_cpus, in_threads
from ..evidence.confusion import ConfusionStats
from ..errors import ParameterError
from .estimators import (
    CellPosteriors,
    SparsePlusRankOne,
    adapt_confidence,
    bbse_priors,
    em_priors,
    shrunk_fp_mix,
)

__all__ = [
    "SHRINK_GRID",
    "SAFETY_SIMULATIONS",
    "CellMix",
    "Shrink",
    "choose_shrink",
    "shrink_priors",
]

#: Candidate shrink factors lam (0 = no adaptation, 1 = the estimate as it is).
SHRINK_GRID = np.linspace(0.0, 1.0, 21)
#: Simulated use sets per round (two rounds); the choice is a mean over them, with its
#: standard error. Not tuned. Cost: the estimator's runs on the resamples. The resamples are
#: kept sparse (:class:`CellMix`), so EM costs their nonzeros, not cells x classes: 0.1-0.3
#: s for 100 classes, 2.4 s (em) and 14 s (bbse, its dense NNLS) for ImageNet's 1,000
#: (measured on 2 cores).
SAFETY_SIMULATIONS = 20
#: EM's tolerance inside the simulation (the real estimate uses EM_TOL): a lam grid step of
#: 0.05 is far coarser than any prior moving by 1e-6.
SIM_EM_TOL = 1e-6
#: Largest cells x classes population the simulation holds as a dense table; beyond it, its
#: counted entries plus each cell's mass spread over one shared vector (the same
#: distribution, drawn by another stream).
SIM_DENSE_CELLS = 4_000_000
#: Most threads the simulation runs its use sets on (the sparse population only). Each
#: use set's EM is numpy and scipy work that releases the GIL; the draws stay in one
#: generator, in order, so the figures do not depend on the threads. 2 threads: 1.6 x faster
#: at 10^5 classes on the 2-core machine (38 -> 23 s).
SIM_THREADS = 4
#: The readings of the estimator's error (module docstring).
TRUTH_RULES = ("estimate", "moment")


#: Categories per draw above which :func:`draw_counts` inverts the cumulative distribution
#: instead of calling ``Generator.multinomial`` (which walks every category). Below it the
#: draws, and so every figure of the safety step, are those of the multinomial sampler;
#: above it (1,000 classes and more) the same distribution from another stream, 8-18 x
#: faster at 1,500 classes.
INVERSION_RATIO = 16


def draw_counts(rng, p, n: int, cdf=None):
    """A multinomial draw of ``n`` items over the categories of probabilities ``p``, kept
    sparse: the drawn categories (ascending) and their counts (float).

    Where the categories outnumber the items by :data:`INVERSION_RATIO`, each item is drawn
    by inverting the cumulative distribution ``cdf`` (of ``p``; computed when not given), at
    n log(categories) rather than the categories' cost: at 1,500 classes the simulation's
    table has ~2 million (cell, class) categories and the multinomial sampler took half of
    ``adapt``'s time."""
    if p.size <= INVERSION_RATIO * n:
        counts = rng.multinomial(n, p)
        idx = np.flatnonzero(counts)
        return idx, counts[idx].astype(np.float64)
    if cdf is None:
        cdf = np.cumsum(p)
    # sorted: the search walks the table once (4 x faster)
    u = np.sort(rng.random(n)) * cdf[-1]
    idx, counts = np.unique(
        np.searchsorted(cdf, u, side="right").clip(max=cdf.size - 1), return_counts=True
    )
    return idx, counts.astype(np.float64)


class CellMix:
    """Each cell's mix of true classes behind its false positives, as :func:`shrunk_fp_mix`
    gives it (same values), held as a sparse part plus a multiple of one shared vector (the
    test set's overall FP mix) per row: the form the simulation needs at 1,000 classes."""

    def __init__(self, S, h, v, cell_class):
        self.S, self.h, self.v, self.cell_class = S, h, v, cell_class  # mix = S + h v^T

    @classmethod
    def of(cls, fi, fj, fv, cell_class, K: int, col, pseudocount: float) -> "CellMix":
        """From false-positive counts (cell fi, true class fj, count fv) and all counts'
        column sums ``col``."""
        from scipy import sparse

        m = cell_class.shape[0]
        rows = np.arange(m)
        overall = np.bincount(fj, fv, K)  # FPs of any predicted class, by true class
        if overall.sum() <= 0:
            overall = np.asarray(col, dtype=np.float64)
        gs = overall.sum() - overall[cell_class]
        tot = np.bincount(fi, fv, m)
        a = np.where(tot > 0, float(pseudocount), 1.0)
        scale = 1.0 / (tot + a)
        ok = gs > 0
        h = np.where(ok, a * scale / np.where(ok, gs, 1.0), 0.0)
        # the sparse part: the row's own FPs, minus the shared vector's entry at the cell's
        # class
        ri, rj, rv = (
            [fi, rows[ok]],
            [fj, cell_class[ok]],
            [fv * scale[fi], -(h * overall[cell_class])[ok]],
        )
        bad = np.flatnonzero(
            ~ok
        )  # all FPs of the test set are of this cell's class: spread over the others
        if bad.size and K > 1:
            bi, bj = np.repeat(bad, K), np.tile(np.arange(K), bad.size)
            keep = bj != cell_class[bi]
            ri.append(bi[keep])
            rj.append(bj[keep])
            rv.append(np.repeat(a[bad] * scale[bad] / (K - 1), K)[keep])
        S = sparse.csr_matrix(
            (np.concatenate(rv), (np.concatenate(ri), np.concatenate(rj))), shape=(m, K)
        )
        return cls(S, h, overall, cell_class)

    @classmethod
    def of_stats(cls, stats: ConfusionStats, pseudocount: float) -> "CellMix":
        """The mix of every (predicted class, score region) cell of a model's counts, cells
        numbered as :meth:`ConfusionStats.cells` numbers them, without a cells x classes
        array."""
        K = stats.n_classes
        cell_class, t = stats.cell_class, stats.table
        cell = np.repeat(np.arange(t.shape[0]), np.diff(t.indptr))
        j, v = t.indices, t.data
        col = np.bincount(j, v, K)
        fp = j != cell_class[cell]
        fi, fj, fv = cell[fp], j[fp], v[fp]
        return cls.of(fi, fj, fv, cell_class, K, col, pseudocount)

    def dot(self, B) -> np.ndarray:
        """mix @ B for B of shape (K, L)."""
        return np.asarray(self.S @ B) + self.h[:, None] * (self.v @ B)[None, :]

    def toarray(self) -> np.ndarray:
        return self.S.toarray() + self.h[:, None] * self.v

    def posteriors(self, c) -> SparsePlusRankOne:
        """Cell-level posteriors: c at the cell's class, (1 - c) times the mix elsewhere."""
        from scipy import sparse

        m = self.cell_class.shape[0]
        D = sparse.diags(1.0 - c) @ self.S + sparse.csr_matrix(
            (c, (np.arange(m), self.cell_class)), shape=self.S.shape
        )
        return SparsePlusRankOne(D, (1.0 - c) * self.h, self.v)

    def row_posteriors(self, c, cells) -> CellPosteriors:
        """Posteriors of rows in ``cells`` with confidences ``c``, kept by cell
        (:class:`CellPosteriors`)."""
        return CellPosteriors(self.S, self.h, self.v, self.cell_class, cells, c)


@dataclass(frozen=True)
class Shrink:
    """The chosen shrink factor, why, and the simulated mean NLL change (nats per row) at it
    and at 1."""

    factor: float
    reason: str
    n_sim: int = 0
    nll_change: float | None = None
    nll_change_full: float | None = None


def shrink_priors(source, estimate, factor: float) -> np.ndarray:
    """(1 - factor) source + factor estimate, renormalised (exactly ``estimate`` at factor
    1)."""
    if factor == 1.0:
        return np.asarray(estimate, dtype=np.float64).copy()
    p = (1.0 - factor) * np.asarray(source, dtype=np.float64) + factor * np.asarray(
        estimate, dtype=np.float64
    )
    return p / p.sum()


def choose_shrink(
    stats: ConfusionStats,
    priors,
    n_use: int,
    *,
    estimator: str,
    prior_strength: float,
    fp_pseudocount: float,
    n_sim: int = SAFETY_SIMULATIONS,
    seed: int = 0,
    truth: str = "estimate",
) -> Shrink:
    """Choose how far to move from the source priors towards ``priors`` (module docstring).

    Parameters
    ----------
    stats : ConfusionStats
        The fitted model's counts.
    priors : array of shape (K,)
        The estimated use-set priors (taken as the truth of the simulated use sets).
    n_use : int
        Rows of the real use set (each simulated one has as many).
    estimator : {"em", "bbse"}
        Estimator to simulate ("em" for every EM variant: cell-level EM stands in).
    prior_strength, fp_pseudocount : float
        As in :func:`~topcal.labelshift.estimate_priors`.
    n_sim : int
        Simulated use sets per round.
    seed : int
        Seed of the simulation (with ``truth="moment"`` every round draws the same
        resamples: common random numbers, so the rounds compare cleanly).
    truth : {"estimate", "moment"}
        How the simulated truth is found (module docstring).

    Returns
    -------
    Shrink
    """
    if truth not in TRUTH_RULES:
        raise ParameterError(f"truth must be one of {', '.join(TRUTH_RULES)}; got {truth!r}")
    sim = _Simulation(
        stats, n_use, estimator, prior_strength, fp_pseudocount, n_sim, seed, truth
    )
    if sim.empty or n_use <= 0:
        return Shrink(
            1.0,
            "nothing to simulate (no counts or no use rows): the estimate is used as it is",
        )
    pi_hat = np.asarray(priors, dtype=np.float64)
    ps0 = sim.source
    spread = float(np.mean((_ratios(pi_hat, ps0) - 1.0) ** 2))
    lead = (
        f"{n_sim} simulated use sets of {n_use} rows drawn from the test set's counts, "
        f"estimator {estimator} on a resample of them; prior-ratio spread of the estimate "
        f"{spread:.3g}"
    )
    shift = _simulated_shift(sim, pi_hat, spread, lead)
    if isinstance(shift, Shrink):
        return shift
    kappa, how = shift
    # the round that chooses lam: the truth shifted only as far as the estimate's spread
    # beyond the noise
    _, change = sim.run(shrink_priors(ps0, pi_hat, float(np.sqrt(kappa))))
    return _chosen_factor(change, how, n_sim)


def _ratios(p, src):
    return np.where(src > 0, p / np.where(src > 0, src, 1.0), 1.0)


def _simulated_shift(sim: "_Simulation", pi_hat, spread: float, lead: str):
    """How much of the estimate's shift to simulate: ``(kappa, how)``, or the Shrink of 0
    where the estimate's spread is within what the estimator shows by chance."""
    ps0, n_sim = sim.source, sim.n_sim
    if sim.truth == "moment":
        err0, _ = sim.run(ps0)
        if spread <= 0 or spread <= float(np.median(err0)):
            return Shrink(
                0.0,
                f"{lead} is within what the estimator shows with no shift at all (median "
                f"{np.median(err0):.3g}): no shift to adapt to, not adapted",
                n_sim,
            )
        err1, _ = sim.run(pi_hat)
        e0, e1 = float(err0.mean()), float(err1.mean())
        kappa = min(1.0, max(0.0, (spread - e0) / (spread + max(0.0, e1 - e0))))
        how = (
            f"{lead}, simulated error {e0:.3g} with no shift and {e1:.3g} at the estimate, "
            f"so a truth {np.sqrt(kappa):.0%} of the way to the estimate was simulated"
        )
        return kappa, how
    # round 1: how far off is the estimator when the truth is as shifted as the estimate?
    err1, _ = sim.run(pi_hat)
    e1 = float(err1.mean())
    kappa = max(0.0, 1.0 - e1 / spread) if spread > 0 else 0.0
    if kappa == 0.0:
        # no evidence of shift: any gain round 2 found would come from the resample's own
        # noise
        return Shrink(
            0.0,
            f"{lead} is within the simulated error {e1:.3g}: no shift to adapt to, not "
            "adapted",
            n_sim,
        )
    how = (
        f"{lead}, simulated error {e1:.3g}, so a shift of {kappa:.0%} of the estimate's was "
        f"simulated"
    )
    return kappa, how


def _chosen_factor(change: np.ndarray, how: str, n_sim: int) -> Shrink:
    """The shrink factor from the simulated NLL changes per factor (n_sim, L)."""
    grid = SHRINK_GRID
    mean = change.mean(axis=0)
    se = change.std(axis=0, ddof=1) / np.sqrt(n_sim) if n_sim > 1 else np.zeros_like(mean)
    i = int(np.argmin(mean))
    if grid[i] == 0 or mean[i] + 2.0 * se[i] >= 0:
        return Shrink(
            0.0,
            f"{how}; no move towards the estimate lowered the NLL by twice its standard error "
            f"({mean[-1]:+.4f} nats/row in full): not adapted",
            n_sim,
            0.0,
            float(mean[-1]),
        )
    # among the lam whose simulated NLL is within a standard error of the best, the largest:
    # the estimate's own priors unless moving back towards pi_s clearly pays (a lam of 0.95
    # where 1 is as good doubles the prior-ratio error under strong shift, for nothing)
    best = i
    i = int(np.flatnonzero(mean <= mean[best] + se[best])[-1])
    lam = float(grid[i])
    return Shrink(
        lam,
        f"{how}; moving {lam:.0%} of the way changed the NLL by {mean[i]:+.4f} nats/row (the "
        f"largest factor within a standard error of the lowest change, {mean[best]:+.4f} at "
        f"{grid[best]:.0%})",
        n_sim,
        float(mean[i]),
        float(mean[-1]),
    )


class _Simulation:
    """Simulated use sets and labelled resamples drawn from a model's confusion counts.

    The population: each cell's true positives as counted, its false positives spread by the
    shrunk mix the adaptation itself assumes (so the use sets hold (cell, class) pairs the
    labelled resample may lack, as real ones do)."""

    def __init__(
        self, stats, n_use, estimator, prior_strength, fp_pseudocount, n_sim, seed, truth
    ):
        m, K = stats.table.shape
        self.m, self.K = m, K
        self.cell_class = stats.cell_class
        self.dense = m * K <= SIM_DENSE_CELLS
        if self.dense:
            total = self._dense_population(stats, fp_pseudocount)
        else:
            total = self._sparse_population(stats, fp_pseudocount)
        if self.empty or n_use <= 0:
            return
        self.n_lab = max(1, int(round(total)))
        self.source = stats.source_priors()
        self.n_use, self.n_sim, self.seed, self.truth = n_use, n_sim, seed, truth
        self.estimator, self.prior_strength = estimator, prior_strength
        self.fp_pseudocount = fp_pseudocount
        self.shared = np.random.default_rng(seed)

    def _dense_population(self, stats, fp_pseudocount) -> float:
        """The population as a cells x classes table (a few classes)."""
        N = stats.table.toarray()
        m, cell_class = self.m, self.cell_class
        rows = np.arange(m)
        tp = N[rows, cell_class]
        T = (
            shrunk_fp_mix(N, cell_class, stats.confusion(), fp_pseudocount)
            * (N.sum(axis=1) - tp)[:, None]
        )
        T[rows, cell_class] = tp
        flat = T.ravel()
        self.nz = nz = np.flatnonzero(flat > 0)
        self.empty = nz.size == 0
        col = T.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            # P(cell | true class)
            self.cond = np.where(col > 0, T / np.where(col > 0, col, 1.0), 0.0)
        if not self.empty:
            self.p_lab = flat[nz] / flat[nz].sum()
            self.cdf_lab = np.cumsum(self.p_lab)
        return float(N.sum())

    def _sparse_population(self, stats, fp_pseudocount) -> float:
        """The same population held as its counted (cell, class) entries plus, per cell, a
        mass spread over the other classes in proportion to one shared vector
        (:class:`CellMix`'s form): the cells' nonzeros, not cells x classes (10^5 classes)."""
        t, K, cell_class = stats.table, self.K, self.cell_class
        mix = CellMix.of_stats(stats, fp_pseudocount)
        rows = np.repeat(np.arange(self.m), np.diff(t.indptr))
        own = t.indices == cell_class[rows]
        tp = np.bincount(rows[own], t.data[own], self.m)
        fp = np.bincount(rows, t.data, self.m) - tp
        S = mix.S.tocoo()
        # the negative entries only cancel the shared vector at the own class
        keep = S.data > 0
        # flat keys cell * K + class pass 2^31 (scipy's indices are int32) at 10^5 classes
        row, col = S.row[keep].astype(np.int64), S.col[keep].astype(np.int64)
        key = np.concatenate([row * K + col, np.flatnonzero(tp) * K])
        key = key + np.concatenate([np.zeros(int(keep.sum()), np.int64), cell_class[tp > 0]])
        mass = np.concatenate([(S.data * fp[S.row])[keep], tp[tp > 0]])
        order = np.argsort(key, kind="stable")
        self.keys, self.mass = key[order], mass[order]
        self.spread, self.v = fp * mix.h, mix.v  # per cell: mass spread over v, own class out
        self.col = np.bincount(self.keys % K, self.mass, K) + self.v * (
            self.spread.sum() - np.bincount(cell_class, self.spread, K)
        )
        self.empty = self.mass.sum() + self.spread.sum() <= 0
        return float(t.data.sum())

    def _sampler(self, pi_true=None):
        """``draw(rng) -> (flat keys cell * K + class, counts)``: the labelled population
        (``pi_true`` None: ``n_lab`` items) or a use set under priors ``pi_true``
        (``n_use``)."""
        if self.dense:
            if pi_true is None:
                return lambda rng: self._keyed(
                    draw_counts(rng, self.p_lab, self.n_lab, self.cdf_lab)
                )
            p_use = (self.cond * pi_true).ravel()[self.nz]
            p_use /= p_use.sum()
            cdf_use = np.cumsum(p_use) if p_use.size > INVERSION_RATIO * self.n_use else None
            return lambda rng: self._keyed(draw_counts(rng, p_use, int(self.n_use), cdf_use))
        K, cell_class = self.K, self.cell_class
        if pi_true is None:
            r, n = np.ones(K), self.n_lab
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                r = np.where(
                    self.col > 0, pi_true / np.where(self.col > 0, self.col, 1.0), 0.0
                )
            n = int(self.n_use)
        entry = self.mass * r[self.keys % K]
        u = self.v * r
        spread = self.spread * (u.sum() - u[cell_class])
        spread = np.where(spread > 0, spread, 0.0)
        e_sum, a_sum = entry.sum(), spread.sum()
        p_entry, p_cell = entry / max(e_sum, 1e-300), spread / max(a_sum, 1e-300)
        cdf_u = np.cumsum(u)

        def draw(rng):
            n_e = int(rng.binomial(n, e_sum / (e_sum + a_sum)))
            ei, ec = (
                draw_counts(rng, p_entry, n_e) if n_e else (np.empty(0, np.int64), np.empty(0))
            )
            ci, cc = draw_counts(rng, p_cell, n - n_e) if n > n_e else (ei[:0], ec[:0])
            cells = np.repeat(ci, cc.astype(np.int64))
            cls = np.zeros(cells.size, dtype=np.int64)
            todo = np.arange(cells.size)
            for _ in range(100):  # the other classes in proportion to u: redraw the own class
                cls[todo] = np.searchsorted(cdf_u, rng.random(todo.size) * cdf_u[-1], "right")
                cls[todo] = cls[todo].clip(max=K - 1)
                todo = todo[cls[todo] == cell_class[cells[todo]]]
                if todo.size == 0:
                    break
            allk = np.concatenate([self.keys[ei], cells * K + cls])
            allc = np.concatenate([ec, np.ones(cells.size)])
            keys, inv = np.unique(allk, return_inverse=True)
            counts = np.bincount(inv.reshape(-1), allc, keys.size)
            return keys, counts

        return draw

    def _keyed(self, drawn):
        idx, counts = drawn
        return self.nz[idx], counts

    def run(self, pi_true):
        """Squared prior-ratio error of each simulated estimate (n_sim,), and the NLL change
        per lam (n_sim, L).

        "moment" compares rounds: each draws the same resamples (common random numbers);
        "estimate" draws on from one generator (its two rounds are not compared)."""
        grid, n_use, K = SHRINK_GRID, self.n_use, self.K
        rng = np.random.default_rng(self.seed) if self.truth == "moment" else self.shared
        draw_lab, draw_use = self._sampler(), self._sampler(pi_true)

        def draw():
            return draw_lab(rng), draw_use(rng)

        def one(drawn):
            (li, lv), (ui, uv) = drawn
            est, c, q, tp_u, m_cells, ps = self._estimate(
                li // K, li % K, lv, ui // K, ui % K, uv
            )
            err = np.mean((_ratios(est, ps) - _ratios(pi_true, self.source)) ** 2)
            pis = (1.0 - grid)[:, None] * ps + grid[:, None] * est  # (L, K)
            # a class absent from the resample keeps ratio 1 (unchanged) at every lam
            W = _ratios(pis, ps)
            c_lam = adapt_confidence(c[:, None], W[:, self.cell_class].T, q.dot(W.T))  # (m, L)
            nll = binary_nll(tp_u[:, None], (m_cells - tp_u)[:, None], c_lam).sum(axis=0)
            return err, (nll - binary_nll(tp_u, m_cells - tp_u, c).sum()) / n_use

        # the sparse population (1,000 classes and more): each use set's EM on its own thread
        threads = 1 if self.dense else min(SIM_THREADS, available_cpus())
        out = in_threads(one, draw, self.n_sim, threads, "safety simulation", " use sets")
        return np.array([e for e, _ in out]), np.array([c for _, c in out])

    def _estimate(self, ci, cj, cv, ui, uj, uv):
        """The estimator on a labelled resample (cell, class, count) and a use set (cell,
        class, count).

        Returns the estimate, each cell's TP share c and false-positive mix q (a
        :class:`CellMix`), the use set's TPs and rows per cell, and the resample's priors.
        The mix is kept sparse plus one shared vector, so 1,000 classes cost the draws'
        nonzeros.
        """
        m, K, cell_class = self.m, self.K, self.cell_class
        col_s = np.bincount(cj, cv, K)
        ps = col_s / col_s.sum()
        is_tp = cj == cell_class[ci]
        n_cell = np.bincount(ci, cv, m)
        tp_s = np.bincount(ci[is_tp], cv[is_tp], m)
        tp_u = np.bincount(ui[uj == cell_class[ui]], uv[uj == cell_class[ui]], m)
        m_cells = np.bincount(ui, uv, m)
        c = (tp_s + 0.5) / (n_cell + 1.0)  # a cell's TP share, never 0 or 1
        q = CellMix.of(
            ci[~is_tp], cj[~is_tp], cv[~is_tp], cell_class, K, col_s, self.fp_pseudocount
        )
        if self.estimator == "bbse":
            if self.dense:
                Ns = np.zeros((m, K))
                Ns[ci, cj] = cv
            else:
                from scipy import sparse

                Ns = sparse.csr_matrix((cv, (ci, cj)), shape=(m, K))
            est = bbse_priors(Ns, m_cells, ps, prior_strength=self.prior_strength)
        else:
            est = em_priors(
                q.posteriors(c),
                ps,
                prior_strength=self.prior_strength,
                weights=m_cells,
                tol=SIM_EM_TOL,
            )
        return est, c, q, tp_u, m_cells, ps
