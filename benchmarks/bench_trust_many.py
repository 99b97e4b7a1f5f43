"""Thresholds where the classes are many and small (issue 33): the default (per class, with one
shared cut-off for the classes too small to show the target alone) against ``--global``, the
former per-class-only mode and two published peers on the raw softmax response: SGR (Geifman
and El-Yaniv 2017, as its paper runs it) and MAPIE's precision controller
(``mapie.risk_control.BinaryClassificationController``, risk "precision", its defaults otherwise:
100 thresholds 0-0.99, Bonferroni-Holm; MAPIE 1.6), skipped where mapie is not installed.

Protocol, per data set and split (``--splits``, default 20): the rows are split at random in
three thirds: the calibrator (``--method``; ``uncalibrated`` = raw scores) is fitted on the
first, the cut-offs chosen on the second, and measured on the third. Per cell (target P, delta):

* ``accepted``: the mean accepted fraction of the test third;
* ``viol``: the share of splits where a statement fails on the test third: for ``global`` and
  ``sgr`` the precision of all accepted rows < P; for ``default`` the shared group's pooled
  precision < P (``viol-alone``: the mean over the classes tested alone of their violation rate);
* the bound delta + 3 binomial standard errors.

Run: ``python benchmarks/bench_trust_many.py [--splits 20] [--method hist] [--data NAME ...]``
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings

import numpy as np

import topcal
from topcal.thresholds.core import fit_thresholds, sgr_threshold

from _measure import loadavg
from bench_trust import BENCH, load

SETS = ["imagenet-resnet101.csv", "imagenet-densenet161.csv", "wideresnet-16-4-cifar-100.npz"]
CELLS = [(0.9, 0.05), (0.9, 0.1), (0.95, 0.05), (0.95, 0.1)]


def precision_fails(acc, tp, fp, target) -> bool:
    n = tp[acc].sum() + fp[acc].sum()
    return bool(n > 0 and tp[acc].sum() < target * n)


def mapie_threshold(score, right, precision, delta):
    """MAPIE's precision controller on one score column: the threshold it chooses (None: none
    controls the precision; NaN: mapie is not installed)."""
    try:
        from mapie.risk_control import BinaryClassificationController
    except ImportError:
        return np.nan
    x = np.asarray(score, dtype=np.float64)[:, None]
    ctl = BinaryClassificationController(
        lambda X: np.c_[1.0 - X[:, 0], X[:, 0]],
        risk="precision",
        target_level=precision,
        confidence_level=1.0 - delta,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctl.calibrate(x, np.asarray(right, dtype=int))
    best = ctl.best_predict_param
    return None if best is None else float(np.atleast_1d(best)[0])


def run(name, method, splits, seed):
    data = load(name)
    rng = np.random.default_rng(seed)
    out = {
        cell: {
            k: []
            for k in (
                "default",
                "global",
                "alone",
                "sgr",
                "mapie",
                "viol_default",
                "viol_global",
                "viol_alone",
                "viol_sgr",
                "viol_mapie",
            )
        }
        for cell in CELLS
    }
    for _ in range(splits):
        third = rng.integers(0, 3, data.n_rows)
        fit, choose, test = (data.subset(np.flatnonzero(third == i)) for i in range(3))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = topcal.calibrator(method).fit(fit)
            conf_t = model.predict(test)
        tp, fp = test.tp, test.fp
        for cell in CELLS:
            p, d = cell
            th = fit_thresholds(model, choose, p, d)
            alone = fit_thresholds(model, choose, p, d, pool_below=0)
            glob = dataclasses.replace(th, mode="global")
            acc = th.accept(test.pred, conf_t, test.score)
            row = out[cell]
            row["default"].append(acc.mean())
            row["global"].append(glob.accept(test.pred, conf_t, test.score).mean())
            acc_alone = alone.accept(test.pred, conf_t, test.score)
            row["alone"].append(acc_alone.mean())
            shared = np.array([c.group == "shared" for c in th.per_class])
            in_group = shared[test.pred]
            row["viol_default"].append(precision_fails(acc & in_group, tp, fp, p))
            own = [
                k for k, c in enumerate(th.per_class) if c.group is None and c.cutoff is not None
            ]
            row["viol_alone"].append(
                np.mean([precision_fails(acc & (test.pred == k), tp, fp, p) for k in own])
                if own
                else 0.0
            )
            row["viol_global"].append(
                precision_fails(glob.accept(test.pred, conf_t, test.score), tp, fp, p)
            )
            # SGR on the raw softmax response (the top score), as in its paper
            cut = sgr_threshold(choose.score, choose.tp, choose.fp, p, d)
            sacc = np.zeros(test.n_rows, bool) if cut is None else test.score >= cut
            row["sgr"].append(sacc.mean())
            row["viol_sgr"].append(precision_fails(sacc, tp, fp, p))
            cut = mapie_threshold(choose.score, choose.tp > 0, p, d)
            if cut is not None and not np.isnan(cut):
                macc = test.score >= cut
            else:
                macc = np.zeros(test.n_rows, bool)
            row["mapie"].append(np.nan if cut is not None and np.isnan(cut) else macc.mean())
            row["viol_mapie"].append(precision_fails(macc, tp, fp, p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--method", default="hist")
    ap.add_argument("--data", nargs="*", default=SETS)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"# bench_trust_many: method {args.method}, {args.splits} three-way splits, data {BENCH}")
    print(f"# load before: {loadavg()}")
    print(
        "| set | P | delta | default | global | per-class only | SGR (raw) | MAPIE (raw) | "
        "default / global | viol default | viol alone | viol global | viol SGR | viol MAPIE | "
        "bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.data:
        t0 = time.perf_counter()
        res = run(name, args.method, args.splits, args.seed)
        for (p, d), r in res.items():
            m = {k: float(np.mean(v)) for k, v in r.items()}
            bound = d + 3 * np.sqrt(d * (1 - d) / args.splits)
            ratio = m["default"] / m["global"] if m["global"] > 0 else float("nan")
            print(
                f"| {name} | {p} | {d} | {m['default']:.3f} | {m['global']:.3f} | {m['alone']:.3f} "
                f"| "
                f"{m['sgr']:.3f} | {m['mapie']:.3f} | {ratio:.3f} | {m['viol_default']:.2f} | "
                f"{m['viol_alone']:.2f} | {m['viol_global']:.2f} | {m['viol_sgr']:.2f} | "
                f"{m['viol_mapie']:.2f} | {bound:.2f} |"
            )
        print(f"# {name}: {time.perf_counter() - t0:.0f} s")
    print(f"# load after: {loadavg()}")


if __name__ == "__main__":
    main()
