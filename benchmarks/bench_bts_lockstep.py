"""bts and btswa with their classes solved in lockstep vs one Newton solve per class (issue 26).

Run from the repository root:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_bts_lockstep.py [--repeat 3] [--no-auto]

In one process, interleaved, the fastest of ``--repeat`` fits each way: the per-class loop
(``TemperatureBase._lockstep = False``, the code before issue 26) and the lockstep solve (the
default), for bts and btswa on ImageNet DenseNet-161 (50,000 rows, 1,000 classes, top score only)
and on simulated data (``make_data(100000, 1000, 0)``), then one ``auto`` fit on ImageNet each way.
Prints the load average with the figures (the machine may be shared) and the largest differences
between the two fits.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import topcal  # noqa: E402
from topcal.calibrators.temperature.calibrator import TemperatureBase  # noqa: E402

from _measure import loadavg, make_data  # noqa: E402
from bench_heldout import load  # noqa: E402

MODES = (("per-class", False), ("lockstep", True))


def fit(method, data, lockstep):
    TemperatureBase._lockstep = lockstep
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        cal = topcal.calibrator(method).fit(data)
        return time.perf_counter() - t, cal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--no-auto", action="store_true", help="skip the auto fits (about a minute each)"
    )
    args = ap.parse_args()
    imagenet = load("imagenet-densenet161.csv")
    p, y = make_data(100000, 1000, 0)
    sim = topcal.TopLabelData.from_probs(p, y)
    del p
    print(f"load at start: {loadavg()}")
    for name, data in (("imagenet-densenet161", imagenet), ("make_data(100000, 1000, 0)", sim)):
        for method in ("bts", "btswa"):
            best, cals = {m: np.inf for m, _ in MODES}, {}
            for _ in range(args.repeat):
                for mode, flag in MODES:
                    t, cals[mode] = fit(method, data, flag)
                    best[mode] = min(best[mode], t)
            a, b = cals["per-class"], cals["lockstep"]
            dt = np.max(np.abs(b.temperature_ / a.temperature_ - 1.0))
            da = np.max(np.abs(b.awards_ - a.awards_) / np.maximum(np.abs(a.awards_), 1.0))
            print(
                f"{name:28s} {method:6s} per-class {best['per-class']:.3f} s  lockstep "
                f"{best['lockstep']:.3f} s  "
                f"x{best['per-class'] / best['lockstep']:.2f}  |dT/T| {dt:.1e}  |dA| {da:.1e}  "
                f"dloss {abs(b.loss_ / a.loss_ - 1):.1e}  load {loadavg()}"
            )
    if not args.no_auto:
        for mode, flag in MODES:
            t, cal = fit("auto", imagenet, flag)
            print(
                f"auto on imagenet-densenet161, {mode:9s}: {t:.1f} s (chose {cal.inner_.name})  "
                f"load {loadavg()}"
            )
    TemperatureBase._lockstep = True


if __name__ == "__main__":
    main()
