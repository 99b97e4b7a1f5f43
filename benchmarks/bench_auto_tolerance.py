"""Benchmark: ``auto``'s one-standard-error rule at other tolerances, scored held out (issue 22).

For each top-score set and K in ``--folds`` (default 2 and 5): the seeded K-fold split
(:func:`topcal.data.kfold_split`, seed 0), each training part subsampled to 2,000 and 5,000 rows as
``bench_heldout.py --quick`` does (same seeds), one ``auto`` fit, and from its one cross-validation
table the choice :func:`topcal.calibrators.select.rules.choose` makes at each tolerance of
``--tolerances``
(standard errors of the paired difference). Each chosen method is refitted on the training part and
scored on the held-out fold. Prints one JSON line per fold and, per cell, the held-out NLL of every
tolerance and its ratio to tolerance 1. Run
``python benchmarks/bench_auto_tolerance.py [--folds 2 5] [--data NAME ...]`` (``make bench``
first).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_heldout as bh  # noqa: E402

import topcal  # noqa: E402
from topcal.calibrators.select import rules as A  # noqa: E402
from topcal.data import TopLabelData, kfold_split  # noqa: E402

DATA = [
    "wideresnet-16-4-cifar-10.npz:top",
    "phanns",
    "lenet-5-cifar-100.npz:top",
    "densenet-bc-100-cifar-100.npz:top",
    "wideresnet-16-4-cifar-100.npz:top",
    "lenet-5-cifar-10.npz:top",
    "imagenet-resnet101.csv",
    "imagenet-densenet161.csv",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=DATA)
    ap.add_argument("--folds", type=int, nargs="+", default=[2, 5])
    ap.add_argument("--tolerances", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    tols = list(args.tolerances)
    held = collections.defaultdict(lambda: [0.0] * len(tols))
    size = collections.defaultdict(float)
    for name in args.data:
        data = bh.load(name)
        for k in args.folds:
            folds = kfold_split(data, k, seed=0)
            for n in (2000, 5000):
                for f in range(k):
                    train = bh.subsample(
                        TopLabelData.concat([folds[g] for g in range(k) if g != f]), n, 1000 * f + 1
                    )
                    cv = topcal.calibrator("auto").fit(train).cv_
                    chosen = [A.choose(cv, t)[0] for t in tols]
                    score = {
                        c: topcal.metrics.nll(
                            folds[f], topcal.calibrator(c).fit(train).predict(folds[f])
                        ).overall
                        for c in set(chosen)
                    }
                    w = float(folds[f].n_samples)
                    for i, c in enumerate(chosen):
                        held[(name, k, n)][i] += w * score[c]
                    size[(name, k, n)] += w
                    print(
                        json.dumps(
                            {
                                "data": name,
                                "K": k,
                                "rows": n,
                                "fold": f,
                                "chosen": dict(zip(map(str, tols), chosen)),
                                "nll": {str(t): score[c] for t, c in zip(tols, chosen)},
                            }
                        ),
                        flush=True,
                    )
    ref = tols.index(1.0) if 1.0 in tols else len(tols) - 1
    ratios = [[] for _ in tols]
    print("| data | K | fitting rows | " + " | ".join(f"tol {t:g}" for t in tols) + " |")
    for key, v in held.items():
        print(
            f"| {key[0]} | {key[1]} | {key[2]} | "
            + " | ".join(f"{x / size[key]:.4f} ({x / v[ref]:.4f})" for x in v)
            + " |"
        )
        for i, x in enumerate(v):
            ratios[i].append(x / v[ref])
    for t, r in zip(tols, ratios):
        print(
            f"tolerance {t:g}: ratio to tolerance {tols[ref]:g}: median "
            f"{statistics.median(r):.4f}, "
            f"min {min(r):.4f}, max {max(r):.4f}, mean {sum(r) / len(r):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
