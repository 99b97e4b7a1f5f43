"""auto's fit time before and after issue 22, in one process, on the ImageNet sets (top score only).

"before": auto with today's candidates before issue 22 (uncalibrated, kde-mon2, hist, cum-opt,
bts, btswa on top scores) and the smallest-mean rule (tolerance 0); "after": the default auto
(pooled and hierarchical candidates added, one-standard-error rule). Both run the same 5-fold
cross-validation. Prints seconds per fit (best of ``--repeat``) and the ratio after / before.

Run: ``.venv/bin/python benchmarks/bench_auto_time.py [--data imagenet-densenet161.csv ...] [--repeat 1]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import topcal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heldout import OLD_AUTO, load  # noqa: E402


def best_of(f, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        model = f()
        out.append(time.perf_counter() - t)
    return min(out), model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["imagenet-densenet161.csv", "imagenet-resnet101.csv"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--after-first", action="store_true",
                    help="time the new auto first (the second fit in a process may find warm caches)")
    args = ap.parse_args(argv)
    for name in args.data:
        data = load(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = {"before": lambda: topcal.calibrator("auto", **OLD_AUTO).fit(data),
                    "after": lambda: topcal.calibrator("auto").fit(data)}
            got = {k: best_of(runs[k], args.repeat)
                   for k in (("after", "before") if args.after_first else ("before", "after"))}
            (before, old), (after, new) = got["before"], got["after"]
        print(f"{name}: {data.n_samples:g} samples, {data.n_classes} classes; auto before {before:.1f} s "
              f"(chose {old.method_}), after {after:.1f} s (chose {new.method_}); after / before {after / before:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
