"""Benchmark: issue 37's slow paths, each against a fit of the same method on the same data.

Side by side in one process, on one seeded data set (:func:`class_data`):

* ``describe`` of a model of K classes (default 1,500, every one predicted) against that
  model's fit;
* ``adapt`` (EM, the default 100 bootstrap resamples and the safety step) of it to a use set
  with shifted priors, against the same fit;
* ``make_report`` of 3 classes whose names are 10,000 characters long, against the same report
  with 1-character names.

Each is timed ``--repeat`` times in interleaved rounds (minimum reported); the ratio is the
path's time over the fit's (the report's: long names over short). Issue 37's target: each ratio
at most 10. The load average is printed before and after (the machine is shared).

Usage: PYTHONPATH=src python benchmarks/bench_hostile_scale.py [--n 20000] [--k 1500]
       [--use 10000] [--methods hist kde-mon2] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import warnings

import numpy as np

from _measure import loadavg, make_data

import topcal


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def class_data(n: int, k: int, seed: int, shift: float = 1.0):
    """Probabilities of ``n`` rows and their true classes, priors rising 1:``shift`` across the
    classes; logits N(0, 2^2) + 3 on the true class over per-column temperatures 0.8-1.25 (every
    class predicted, unlike ``make_data``'s 0.5-2 at 1,500 classes)."""
    rng = np.random.default_rng(seed)
    w = np.linspace(1.0, shift, k)
    labels = rng.choice(k, n, p=w / w.sum())
    z = rng.normal(0.0, 2.0, size=(n, k))
    z[np.arange(n), labels] += 3.0
    z /= np.linspace(0.8, 1.25, k)[None, :]
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=20_000, help="labelled rows (default 20000)")
    ap.add_argument("--k", type=int, default=1500, help="classes (default 1500)")
    ap.add_argument(
        "--use", type=float, default=10_000, help="use-set rows for adapt (default 10000)"
    )
    ap.add_argument("--methods", nargs="+", default=["hist", "kde-mon2"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-report", action="store_true", help="skip the long class names' report")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, topcal "
        f"{topcal.__version__}, {os.cpu_count()} cores; load average {loadavg()}"
    )
    n, k, n_use = int(args.n), int(args.k), int(args.use)
    probs, labels = class_data(n, k, 0)
    data = topcal.TopLabelData.from_probs(probs, labels)
    use = topcal.TopLabelData.from_probs(
        class_data(n_use, k, 1, shift=10.0)[0], None, classes=data.classes
    )
    print(f"data: {n} x {k} (use set {n_use} rows); predicted classes {len(np.unique(data.pred))}")
    head = ("method", "fit s", "describe s", "ratio", "adapt s", "ratio")
    print(f"{head[0]:10s} {head[1]:>8s} {head[2]:>11s} {head[3]:>6s} {head[4]:>8s} {head[5]:>6s}")
    for method in args.methods:
        best = {"fit": np.inf, "describe": np.inf, "adapt": np.inf}
        for _ in range(args.repeat):
            t, model = timed(lambda: topcal.calibrator(method).fit(data))
            best["fit"] = min(best["fit"], t)
            best["describe"] = min(best["describe"], timed(model.describe)[0])
            best["adapt"] = min(best["adapt"], timed(lambda: model.adapt(use))[0])
        f = best["fit"]
        print(
            f"{method:10s} {f:8.2f} {best['describe']:11.2f} {best['describe'] / f:6.2f} "
            f"{best['adapt']:8.2f} {best['adapt'] / f:6.2f}",
            flush=True,
        )
    if not args.no_report:
        p3, y3 = make_data(600, 3, 2)
        times = {}
        for label, names in (("short", list("abc")), ("10,000-char", [c * 10_000 for c in "abc"])):
            with tempfile.TemporaryDirectory() as tmp:
                best = np.inf
                for _ in range(args.repeat):
                    best = min(
                        best,
                        timed(
                            lambda: topcal.make_report(
                                p3,
                                y3,
                                classes=names,
                                methods=["hist"],
                                output=os.path.join(tmp, "r"),
                            )
                        )[0],
                    )
            times[label] = best
        long_s = times["10,000-char"]
        print(
            f"report (hist, 3 classes): short names {times['short']:.2f} s, 10,000-character "
            f"names {long_s:.2f} s, ratio {long_s / times['short']:.2f}"
        )
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
