"""Should the count methods shrink toward the pooled Platt curve instead of the same method pooled?
(issue 22)

The shrunk ``hist`` and ``kde-mon2`` pull every class toward r(S), the same method fitted on all
classes pooled. The variant measured here pulls toward the pooled Platt curve instead
(``pooled-platt``,
sigmoid(a logit(s) + b): usually the best single curve with few rows per class); the pseudo-count is
chosen by the same leave-one-out rule. Held-out NLL of both, on the issue-22 regime (top-score-only
sets, subsampled fitting rows) and on the full sets.

Run: ``.venv/bin/python benchmarks/bench_shrink_reference.py [--data ...] [--folds 2] [--subsample
2000 5000]``
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

import topcal
from topcal.calibrators.histogram import Histogram
from topcal.calibrators.kde import KDEMon2
from topcal.data import TopLabelData
from topcal.evaluate import kfold_split
from topcal.metrics import nll

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heldout import QUICK_DATA, load, subsample  # noqa: E402


def toward_platt(cls):
    """``cls`` whose shrinkage reference is the pooled Platt curve (not registered: for this
    measurement)."""

    class Variant(cls):
        def _fit(self, data):
            self.platt_ = topcal.calibrator("pooled-platt").fit(data)
            super()._fit(data)

        def _reference(self, score):
            return self.platt_.model_.curve(0, score).confidence

    Variant.__name__ = cls.__name__ + "TowardPlatt"
    return Variant


VARIANTS = {
    "hist": Histogram,
    "hist>platt": toward_platt(Histogram),
    "kde-mon2": KDEMon2,
    "kde-mon2>platt": toward_platt(KDEMon2),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=QUICK_DATA)
    ap.add_argument("--folds", type=int, nargs="+", default=[2])
    ap.add_argument("--subsample", type=int, nargs="*", default=[2000, 5000])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    wins = {"hist": [], "kde-mon2": []}
    for name in args.data:
        data = load(name)
        for k in args.folds:
            folds = kfold_split(data, k, seed=args.seed)
            target = TopLabelData.concat(folds)
            for n in args.subsample + [None]:
                conf = {v: [] for v in VARIANTS}
                for f in range(k):
                    train = TopLabelData.concat([folds[g] for g in range(k) if g != f])
                    if n is not None:
                        train = subsample(train, n, args.seed + 1000 * f + 1)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        for v, cls in VARIANTS.items():
                            conf[v].append(cls().fit(train).predict(folds[f]))
                res = {v: nll(target, np.concatenate(c)).overall for v, c in conf.items()}
                for base in wins:
                    wins[base].append(res[base + ">platt"] / res[base])
                print(
                    f"{name} K={k} n={n or 'all'}: "
                    + "  ".join(f"{v} {x:.4f}" for v, x in res.items()),
                    flush=True,
                )
    for base, r in wins.items():
        print(
            f"{base}: toward pooled Platt / toward same method pooled: median {np.median(r):.4f}, "
            f"better in {sum(x < 1 for x in r)} of {len(r)} cells, worst {max(r):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
