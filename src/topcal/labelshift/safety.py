"""The safety step of label-shift adaptation: how far to move from the source priors towards an
estimate (:func:`choose_shrink`), chosen by simulated shift on the test set's own confusion counts.

An estimated prior is used as pi = (1 - lam) pi_s + lam pi_hat. lam = 1 is the estimate, lam = 0
no adaptation. The right lam depends on how well the estimator works *for this model and this
use-set size*, which the model's stored counts (per predicted class and score region, the
weight of each true class: :class:`~topcal.confusion.ConfusionStats`) let us simulate:

1. the population: the stored counts N, with each cell's false positives spread over the true
   classes by the same shrunk mix the adaptation uses (``fp_pseudocount``); a draw N* of the
   test set's size from it stands for the labelled test set (so the simulated estimator, like
   the real one, works from a noisy confusion matrix, calibration and false-positive mix, and
   meets use rows of (cell, class) pairs its labelled sample lacks);
2. a use set of the real size n_use is drawn from the population at priors near the estimate
   pi_hat (see the two rounds below), as cell x true-class counts U;
3. the same estimator runs on N* and U's cell counts (``bbse`` exactly; ``em`` on the cell-level
   posterior, a stand-in for EM on per-row confidences or full vectors);
4. each cell's confidence under N* (its TP share, (TP + 1/2) / (n + 1)) is adapted with the
   priors at every lam of :data:`SHRINK_GRID`, and the top-label NLL on U's true classes is
   compared with the unadapted one.

Two rounds: the first simulates the truth at pi_hat itself and measures the estimator's error
(mean squared prior-ratio error e against the estimate's own spread A = mean (w_hat - 1)^2);
since an estimate's spread is the true shift's plus its noise, the second simulates a truth
moved only sqrt(max(0, 1 - e / A)) of the way to pi_hat (a shift of spread A - e), and picks lam.
The lam with the lowest mean NLL change over :data:`SAFETY_SIMULATIONS` draws is found; 0 is
used when that change is not below 0 by twice its standard error (the estimator is unreliable
here: adapting would do harm, or gain nothing worth the risk), else the largest lam whose change
is within one standard error of the lowest (closest to the estimate among the equally good).
Derivation and assumptions: ``docs/label_shift.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._numeric import binary_nll
from ..confusion import ConfusionStats
from .estimators import adapt_confidence, bbse_priors, em_priors, shrunk_fp_mix

__all__ = ["SHRINK_GRID", "SAFETY_SIMULATIONS", "Shrink", "choose_shrink", "shrink_priors"]

#: Candidate shrink factors lam (0 = no adaptation, 1 = the estimate as it is).
SHRINK_GRID = np.linspace(0.0, 1.0, 21)
#: Simulated use sets per round (two rounds); the choice is a mean over them, with its standard
#: error. Not tuned: two rounds of 20 took 0.2-0.4 s for 100 classes and 2-5 minutes for 1,000
#: (ImageNet, on a loaded 2-core machine), the estimator's runs dominating.
SAFETY_SIMULATIONS = 20
#: EM's tolerance inside the simulation (the real estimate uses EM_TOL): a lam grid step of 0.05
#: is far coarser than any prior moving by 1e-6.
SIM_EM_TOL = 1e-6


@dataclass(frozen=True)
class Shrink:
    """The chosen shrink factor, why, and the simulated mean NLL change (nats per row) at it and at 1."""

    factor: float
    reason: str
    n_sim: int = 0
    nll_change: float | None = None
    nll_change_full: float | None = None


def shrink_priors(source, estimate, factor: float) -> np.ndarray:
    """(1 - factor) source + factor estimate, renormalised (exactly ``estimate`` at factor 1)."""
    if factor == 1.0:
        return np.asarray(estimate, dtype=np.float64).copy()
    p = (1.0 - factor) * np.asarray(source, dtype=np.float64) + factor * np.asarray(estimate, dtype=np.float64)
    return p / p.sum()


def choose_shrink(stats: ConfusionStats, priors, n_use: int, *, estimator: str, prior_strength: float,
                  fp_pseudocount: float, n_sim: int = SAFETY_SIMULATIONS, seed: int = 0) -> Shrink:
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
        Simulated use sets.
    seed : int

    Returns
    -------
    Shrink
    """
    N = np.vstack(stats.counts)
    m, K = N.shape
    cell_class = np.repeat(np.arange(K), [c.shape[0] for c in stats.counts])
    rows = np.arange(m)
    # the population: each cell's true positives as counted, its false positives spread by the
    # shrunk mix the adaptation itself assumes (so the use sets hold (cell, class) pairs the
    # labelled resample may lack, as real ones do)
    tp = N[rows, cell_class]
    T = shrunk_fp_mix(N, cell_class, stats.confusion(), fp_pseudocount) * (N.sum(axis=1) - tp)[:, None]
    T[rows, cell_class] = tp
    flat = T.ravel()
    nz = np.flatnonzero(flat > 0)
    total = float(N.sum())
    col = T.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cond = np.where(col > 0, T / np.where(col > 0, col, 1.0), 0.0)  # P(cell | true class)
    if nz.size == 0 or n_use <= 0:
        return Shrink(1.0, "nothing to simulate (no counts or no use rows): the estimate is used as it is")
    p_lab = flat[nz] / flat[nz].sum()
    n_lab = max(1, int(round(total)))
    rng = np.random.default_rng(seed)
    grid = SHRINK_GRID
    pi_hat = np.asarray(priors, dtype=np.float64)
    ps0 = stats.source_priors()

    def ratios(p, src):
        return np.where(src > 0, p / np.where(src > 0, src, 1.0), 1.0)

    def simulate(truth):
        """Mean squared prior-ratio error of the simulated estimates, and the NLL change per lam (n_sim, L)."""
        p_use = (cond * truth).ravel()[nz]
        p_use /= p_use.sum()
        change = np.zeros((n_sim, grid.size))
        err = np.zeros(n_sim)
        for s in range(n_sim):
            Ns = np.zeros(m * K)
            Ns[nz] = rng.multinomial(n_lab, p_lab)
            Ns = Ns.reshape(m, K)
            U = np.zeros(m * K)
            U[nz] = rng.multinomial(int(n_use), p_use)
            U = U.reshape(m, K)
            col_s = Ns.sum(axis=0)
            ps = col_s / col_s.sum()
            conf = np.zeros((K, K))
            np.add.at(conf, cell_class, Ns)
            q = shrunk_fp_mix(Ns, cell_class, conf, fp_pseudocount)
            c = (Ns[rows, cell_class] + 0.5) / (Ns.sum(axis=1) + 1.0)  # a cell's TP share, never 0 or 1
            m_cells = U.sum(axis=1)
            if estimator == "bbse":
                est = bbse_priors(Ns, m_cells, ps, prior_strength=prior_strength)
            else:
                post = q * (1.0 - c)[:, None]
                post[rows, cell_class] = c
                est = em_priors(post, ps, prior_strength=prior_strength, weights=m_cells, tol=SIM_EM_TOL)
            err[s] = np.mean((ratios(est, ps) - ratios(truth, ps0)) ** 2)
            pis = (1.0 - grid)[:, None] * ps + grid[:, None] * est  # (L, K)
            W = ratios(pis, ps)  # a class absent from the resample keeps ratio 1 (unchanged) at every lam
            c_lam = adapt_confidence(c[:, None], W[:, cell_class].T, q @ W.T)  # (m, L)
            tp_u = U[rows, cell_class]
            nll = binary_nll(tp_u[:, None], (m_cells - tp_u)[:, None], c_lam).sum(axis=0)
            change[s] = (nll - binary_nll(tp_u, m_cells - tp_u, c).sum()) / n_use
        return float(err.mean()), change

    # round 1: how far off is the estimator when the truth is as shifted as the estimate?
    spread = float(np.mean((ratios(pi_hat, ps0) - 1.0) ** 2))
    noise, _ = simulate(pi_hat)
    kappa = max(0.0, 1.0 - noise / spread) if spread > 0 else 0.0
    # round 2: the truth shifted only as far as the estimate's spread beyond that noise
    truth = shrink_priors(ps0, pi_hat, float(np.sqrt(kappa)))
    _, change = simulate(truth)
    mean = change.mean(axis=0)
    se = change.std(axis=0, ddof=1) / np.sqrt(n_sim) if n_sim > 1 else np.zeros_like(mean)
    i = int(np.argmin(mean))
    how = (f"{n_sim} simulated use sets of {n_use} rows drawn from the test set's counts, estimator "
           f"{estimator} on a resample of them; prior-ratio spread of the estimate {spread:.3g}, "
           f"simulated error {noise:.3g}, so a shift of {kappa:.0%} of the estimate's was simulated")
    if grid[i] == 0 or mean[i] + 2.0 * se[i] >= 0:
        return Shrink(0.0, f"{how}; no move towards the estimate lowered the NLL by twice its standard error "
                      f"({mean[-1]:+.4f} nats/row in full): not adapted", n_sim, 0.0, float(mean[-1]))
    # among the lam whose simulated NLL is within a standard error of the best, the largest: the
    # estimate's own priors unless moving back towards pi_s clearly pays (a lam of 0.95 where 1 is
    # as good doubles the prior-ratio error under strong shift, for nothing)
    best = i
    i = int(np.flatnonzero(mean <= mean[best] + se[best])[-1])
    lam = float(grid[i])
    return Shrink(lam, f"{how}; moving {lam:.0%} of the way changed the NLL by {mean[i]:+.4f} nats/row (the "
                  f"largest factor within a standard error of the lowest change, {mean[best]:+.4f} at "
                  f"{grid[best]:.0%})", n_sim, float(mean[i]), float(mean[-1]))
