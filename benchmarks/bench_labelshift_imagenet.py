"""Label shift on ImageNet top scores: the safety step's NLL change and time at 1,000 classes.

Data: ``../shared/data/bench/imagenet-<model>.csv`` (true_label, pred_label, confidence; 50,000
rows). Per seed the rows are split at random into a labelled half (25,000 rows; ``--method``,
default hist, is fitted on it) and a use pool. Use sets, drawn in the order given by ``--uses``
from one generator per seed (so a figure depends on the kinds listed before it):

* a number alpha: class priors ~ Dirichlet(alpha), 5,000 rows drawn per class with replacement;
* ``block``: classes 0-299 five times as frequent as the others, 5,000 rows;
* ``none``: the whole use pool (unshifted, 25,000 rows).

For each estimator, ``topcal.labelshift.adapt`` with the safety step on (no bootstrap); printed:
the use set's top-label NLL before, after, the change, the chosen factor lam and the seconds
``adapt`` took (prior estimate included).

Run: ``python benchmarks/bench_labelshift_imagenet.py [--model resnet101] [--seeds 0,1,2]
[--uses 0.1,1,none] [--estimators em,bbse]``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bench"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet101", help="resnet101 or densenet161")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--uses", default="0.1,1,none")
    ap.add_argument("--estimators", default="em,bbse")
    ap.add_argument("--method", default="hist")
    ap.add_argument("--data-dir", default=str(DATA))
    args = ap.parse_args(argv)

    from topcal import metrics
    from topcal.calibrators.registry import calibrator
    from topcal.data import TopLabelData
    from topcal.labelshift import adapt

    warnings.simplefilter("ignore")
    a = np.loadtxt(Path(args.data_dir) / f"imagenet-{args.model}.csv", delimiter=",", skiprows=1)
    y, pred, score = a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2]
    K = 1000
    classes = [str(i) for i in range(K)]
    for seed in [int(s) for s in args.seeds.split(",")]:
        rng = np.random.default_rng(seed)
        perm = rng.permutation(len(y))
        lab, pool = perm[: len(y) // 2], perm[len(y) // 2 :]
        model = calibrator(args.method).fit(
            TopLabelData.from_scores(pred[lab], score[lab], y[lab], classes=classes)
        )
        pool_y = y[pool]
        for kind in args.uses.split(","):
            if kind == "none":
                use = pool
            else:
                if kind == "block":
                    pri = np.where(np.arange(K) < 300, 5.0, 1.0)
                    pri /= pri.sum()
                else:
                    pri = rng.dirichlet(np.full(K, float(kind)))
                counts = rng.multinomial(5000, pri)
                use = np.concatenate(
                    [
                        rng.choice(pool[pool_y == k], c)
                        for k, c in enumerate(counts)
                        if c and np.any(pool_y == k)
                    ]
                )
            data = TopLabelData.from_scores(pred[use], score[use], y[use], classes=classes)
            nll0 = metrics.nll(data, model.predict(data)).overall
            for est in args.estimators.split(","):
                t = time.perf_counter()
                ad = adapt(model, data.without_labels(), estimator=est, n_bootstrap=0, seed=seed)
                dt = time.perf_counter() - t
                nll1 = metrics.nll(data, ad.predict(data)).overall
                print(
                    f"{args.model} seed {seed} use {kind} {est}: NLL {nll0:.5f} -> {nll1:.5f} "
                    f"({nll1 - nll0:+.5f}), "
                    f"lam {ad.estimate_.shrink:.2f}, {dt:.1f} s",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
