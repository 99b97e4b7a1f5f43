"""Benchmark: ``auto``'s choice rule, old tiers against new, scored held out on the same CV tables.

For each top-score set (ImageNet x 2, CIFAR-10/100 top-score versions, PhANNs), 2-fold split
(:func:`topcal.data.kfold_split`, seed 0), each training half subsampled to 2,000 and 5,000 rows as
``bench_heldout.py --quick`` does: one ``auto`` fit with the default candidates, its
cross-validation table, and the choice three rules make from that one table:

* ``old``: tier 1 for every pooled curve (before 2026-11-25), ``pooled-beta`` not a candidate;
* ``new``: parametric pooled curves tier 1, non-parametric ones 1.5, ``pooled-beta`` left out;
* ``newb``: as ``new`` with ``pooled-beta`` (the current default,
:data:`topcal.calibrators.select.rules.TIERS`).

Each chosen method is refitted on the training half and scored (top-label NLL) on the held-out
half. Prints one JSON line per fold cell and the totals. Run
``python benchmarks/bench_auto_rules.py [DATA ...]`` (``make bench`` first).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_heldout as bh  # noqa: E402

import topcal  # noqa: E402
from topcal.calibrators.select import rules as A  # noqa: E402
from topcal.data import TopLabelData, kfold_split  # noqa: E402

DATA = [
    "imagenet-resnet101.csv",
    "imagenet-densenet161.csv",
    "wideresnet-16-4-cifar-10.npz:top",
    "phanns",
    "lenet-5-cifar-100.npz:top",
    "densenet-bc-100-cifar-100.npz:top",
    "wideresnet-16-4-cifar-100.npz:top",
    "lenet-5-cifar-10.npz:top",
]
OLD = {
    "uncalibrated": 0,
    "pooled-platt": 1,
    "pooled-hist": 1,
    "pooled-kde-mon2": 1,
    "sts": 1,
    "hier-platt": 2,
    "hier-beta": 2,
    "kde-mon2": 2,
    "hist": 2,
    "cum-opt": 2,
}


def pick(cv: dict, names, tiers) -> str:
    """The rule of :func:`topcal.calibrators.select.rules.choose` on the candidates ``names`` with
    ``tiers``
    (the standard errors are those of the full table: approximate where its best is left out)."""
    ok = [n for n in names if cv[n]["nll"] is not None]
    best = min(ok, key=lambda n: cv[n]["nll"])
    near = [n for n in ok if cv[n]["nll"] - cv[best]["nll"] <= (cv[n].get("diff_se") or 0.0)]
    return min(near, key=lambda n: (tiers(n), cv[n]["nll"]))


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or DATA
    warnings.simplefilter("ignore")
    total = {"old": 0.0, "new": 0.0, "newb": 0.0}
    for name in names:
        data = bh.load(name)
        for n in (2000, 5000):
            folds = kfold_split(data, 2, seed=0)
            for f in range(2):
                train = bh.subsample(
                    TopLabelData.concat([folds[g] for g in range(2) if g != f]), n, 1000 * f + 1
                )
                cv = topcal.calibrator("auto").fit(train).cv_
                without = [c for c in cv if c != "pooled-beta"]
                chosen = {
                    "old": pick(cv, without, lambda c: OLD.get(c, 3)),
                    "new": pick(cv, without, A.tier),
                    "newb": pick(cv, list(cv), A.tier),
                }
                held = {}
                for c in set(chosen.values()):
                    held[c] = topcal.metrics.nll(
                        folds[f], topcal.calibrator(c).fit(train).predict(folds[f])
                    ).overall
                for k, c in chosen.items():
                    total[k] += held[c]
                print(
                    json.dumps(
                        {
                            "data": name,
                            "rows": n,
                            "fold": f,
                            **chosen,
                            **{f"nll_{k}": held[c] for k, c in chosen.items()},
                        }
                    ),
                    flush=True,
                )
    print(json.dumps({"total": total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
