"""One method's K-fold cross-fit (auto's stage 2 for it: ``crossfit.cross_fit``), old against new
topcal in one process, interleaved, minimum of ``--repeat`` rounds, on ``_measure.make_data``.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_fold_fits.py --old DIR --methods csts
--cells 1e4x10 1e4x100 --repeat 5`` (DIR: ``git archive <commit> src/topcal | tar -x -C DIR; mv
DIR/src/topcal DIR/topcal_old``). Prints per cell and method the seconds, old ÷ new, the largest
relative difference of the out-of-fold confidences, and the load.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _measure import loadavg, make_data, old_topcal

import topcal
from topcal.calibrators.select.crossfit import cross_fit


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="folder holding the package topcal_old")
    ap.add_argument("--methods", nargs="+", default=["csts"])
    ap.add_argument("--cells", nargs="+", default=["1e4x10"])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    old = old_topcal(args.old)
    from topcal_old.calibrators.crossfit import cross_fit as old_cross_fit

    warnings.simplefilter("ignore")
    for cell in args.cells:
        n, k = (int(float(v)) for v in cell.split("x"))
        p, y = make_data(n, k, 0)
        runs = (
            ("old", old_cross_fit, old.TopLabelData.from_probs(p, y)),
            ("new", cross_fit, topcal.TopLabelData.from_probs(p, y)),
        )
        for method in args.methods:
            best, conf = {}, {}
            for _ in range(args.repeat):
                for name, fit, data in runs:
                    t = time.perf_counter()
                    run = fit(data, [method], args.folds)
                    best[name] = min(best.get(name, np.inf), time.perf_counter() - t)
                    conf[name] = run.confidence[method]
            diff = np.abs(conf["new"] - conf["old"])
            rel = float(np.max(diff / np.maximum(np.abs(conf["old"]), 1e-300)))
            print(
                f"{cell} {method}: {args.folds} folds old {best['old']:.4f} s, new "
                f"{best['new']:.4f} s, old / new {best['old'] / best['new']:.2f}; out-of-fold "
                f"confidences within {rel:.1e} relative; load {loadavg()}"
            )


if __name__ == "__main__":
    main()
