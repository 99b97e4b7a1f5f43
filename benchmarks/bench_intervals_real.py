"""Intervals on real data: coverage per (class, score) cell against a large disjoint part, and width
against a per-class bootstrap of the same method (issue 33, item 3).

Per seed, ``--fit`` rows (default 5,000) of a bench set are drawn at random to fit each method; the
rest is the check part. Cells: each class's check rows cut into 1-4 bins at quantiles of their top
score (at least ``--cell`` rows a bin, default 25). A cell's truth is its check rows' accuracy a;
the interval is the mean of its rows' limits. The truth is itself an estimate (binomial standard
error s = sqrt(a (1 - a) / n)), so a cell counts as covered when a lies within the interval
widened on each side by z s in quadrature: sqrt(h^2 + (z s)^2), h the side's half-width, z the
normal quantile of the level. Without that the check counts the truth's own noise as misses (a
perfect interval then covers less than nominal, the less the smaller the cells).

``--cell-interval joint`` (``hier-*`` only, whose model holds each class's parameter covariance
C_k): a cell's interval is instead the delta-method interval of its rows' mean confidence, the
gradient g = mean over the cell's rows of p (1 - p) x, its standard error sqrt(g' C_k g) put on the
log-odds scale of the mean and mapped back. The mean of the rows' limits is wider wherever the
rows' errors are not perfectly correlated (a slope's error moves rows of low and high score
differently), so on cells that span a class's scores (ImageNet: one cell a class) it over-covers
even when every row's interval is exact.

The peer: a per-class bootstrap of the same method (``--boot`` resamples of the fitting rows, drawn
with replacement within each predicted class; the method refitted on each; percentile interval of
the calibrated confidences at each check row), checked the same way.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_intervals_real.py [--data SET ...]
[--methods hist kde-mon2 ...] [--seeds 3] [--fit 5000] [--boot 40] [--level 0.9] [--truth-se
jeffreys] [--cell-interval joint]``

Prints per set and method: cells covered (mean over seeds), mean width, and the bootstrap's.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from topcal.calibrators import calibrator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heldout import load  # noqa: E402

SETS = [
    "wideresnet-16-4-cifar-100.npz",
    "densenet-bc-100-cifar-100.npz",
    "imagenet-resnet101.csv",
    "imagenet-densenet161.csv",
]
METHODS = ["hist", "kde-mon2", "hier-platt", "hier-beta", "pooled-beta", "sts"]


def cells(data, idx, min_rows: int):
    """Lists of check-row indices (into ``idx``), one per (class, score-bin) cell."""
    pred, score = data.pred[idx], data.score[idx]
    out = []
    for k in np.unique(pred):
        rows = np.flatnonzero(pred == k)
        nb = int(min(4, rows.size // min_rows))
        if nb < 1:
            continue
        order = rows[np.argsort(score[rows], kind="stable")]
        out.extend(np.array_split(order, nb))
    return out


def coverage(lo, hi, conf, correct, cell_rows, level: float, truth_se: str = "plugin") -> float:
    """Share of cells whose accuracy lies in the mean interval widened by the truth's own SE
    (``plugin``: sqrt(a (1 - a) / n), a (1 - a) at least 0.25 / n; ``jeffreys``: the standard
    deviation of Beta(t + 1/2, n - t + 1/2), which does not call a cell of 25 right of 25 exact)."""
    z = float(ndtri(0.5 * (1.0 + level)))
    hits = []
    for c in cell_rows:
        a = correct[c].mean()
        if truth_se == "jeffreys":
            t, n = correct[c].sum() + 0.5, c.size + 1.0
            s = np.sqrt(t * (n - t) / (n * n * (n + 1.0)))
        else:
            s = np.sqrt(max(a * (1.0 - a), 0.25 / c.size) / c.size)
        p, lo_c, hi_c = conf[c].mean(), lo[c].mean(), hi[c].mean()
        h = (hi_c - p) if a >= p else (p - lo_c)
        hits.append(abs(a - p) <= np.sqrt(h * h + (z * s) ** 2))
    return float(np.mean(hits))


def joint_limits(model, check, conf, cell_rows, level: float):
    """Per row, its cell's delta-method interval of the cell's mean confidence (module docstring;
    every row of a cell gets the cell's limits, which is what :func:`coverage` averages)."""
    z = float(ndtri(0.5 * (1.0 + level)))
    X = model._features(check)  # a benchmark may read a model's features (not the package)
    cov = model.cov_[check.pred]
    lo, hi = np.full(conf.shape, np.nan), np.full(conf.shape, np.nan)  # rows in no cell: NaN
    for c in cell_rows:
        p = conf[c]
        g = ((p * (1.0 - p))[:, None] * X[c]).mean(axis=0)
        pm = p.mean()
        se = np.sqrt(max(float(g @ cov[c[0]] @ g), 0.0)) / (pm * (1.0 - pm))
        cm = np.log(pm) - np.log1p(-pm)
        lo[c] = 1.0 / (1.0 + np.exp(-(cm - z * se)))
        hi[c] = 1.0 / (1.0 + np.exp(-(cm + z * se)))
    return lo, hi


def bootstrap(method, fit, check, boot: int, level: float, rng):
    """Percentile interval at the check rows of ``boot`` refits on class-wise resamples of
    ``fit``."""
    by_class = [np.flatnonzero(fit.pred == k) for k in range(fit.n_classes)]
    draws = np.empty((boot, check.n_rows))
    for b in range(boot):
        idx = np.concatenate([rng.choice(r, r.size) for r in by_class if r.size])
        draws[b] = calibrator(method).fit(fit.subset(idx)).predict(check)
    tail = 50.0 * (1.0 - level)
    return np.percentile(draws, tail, axis=0), np.percentile(draws, 100.0 - tail, axis=0)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", nargs="+", default=SETS)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--fit", type=int, default=5000)
    ap.add_argument("--boot", type=int, default=40, help="bootstrap resamples (0: no bootstrap)")
    ap.add_argument("--cell", type=int, default=25, help="fewest check rows a cell")
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument(
        "--truth-se",
        choices=["plugin", "jeffreys"],
        default="plugin",
        help="the cell accuracy's own standard error (coverage's docstring)",
    )
    ap.add_argument(
        "--cell-interval",
        choices=["rows", "joint"],
        default="rows",
        help="a cell's interval: the mean of its rows' limits, or (hier-* only) the interval of "
        "its mean confidence (module docstring)",
    )
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(
        "| set | method | cells covered | mean width | bootstrap covered | bootstrap width "
        "| width ÷ bootstrap's |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in a.data:
        data = load(name)
        for m in a.methods:
            if m == "sts" and not data.has_full:
                continue
            cov, wid, bcov, bwid = [], [], [], []
            t0 = time.perf_counter()
            for seed in range(a.seeds):
                rng = np.random.default_rng(seed)
                perm = rng.permutation(data.n_rows)
                fit, check = data.subset(perm[: a.fit]), data.subset(perm[a.fit :])
                cell_rows = cells(data, perm[a.fit :], a.cell)
                correct = (check.tp > 0).astype(np.float64)
                model = calibrator(m).fit(fit)
                conf = model.predict(check)
                lo, hi = model.predict_interval(check, level=a.level)
                if a.cell_interval == "joint":
                    if not m.startswith("hier-"):
                        raise SystemExit("--cell-interval joint: hier-* methods only")
                    lo, hi = joint_limits(model, check, conf, cell_rows, a.level)
                cov.append(coverage(lo, hi, conf, correct, cell_rows, a.level, a.truth_se))
                wid.append(float(np.nanmean(hi - lo)))  # joint: the cells' rows
                if a.boot:
                    blo, bhi = bootstrap(m, fit, check, a.boot, a.level, rng)
                    bcov.append(coverage(blo, bhi, conf, correct, cell_rows, a.level, a.truth_se))
                    bwid.append(float(np.mean(bhi - blo)))
            b = (
                f"{np.mean(bcov):.3f} | {np.mean(bwid):.3f} | {np.mean(wid) / np.mean(bwid):.2f}"
                if bcov
                else "— | — | —"
            )
            print(
                f"| {name} | {m} | {np.mean(cov):.3f} ({min(cov):.2f}-{max(cov):.2f}) | "
                f"{np.mean(wid):.3f} | {b} |",
                flush=True,
            )
            print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
