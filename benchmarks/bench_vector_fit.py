"""One all-data fit of ``sms`` and ``vs`` ÷ scikit-learn's temperature calibration, old vs new.

Per cell of simulated outputs (``_measure.make_data``, seed 0), interleaved in one process: the
fit of each method by this topcal and, with ``--old DIR``, by an older topcal exported as the
package ``topcal_old`` in DIR (``git archive <commit> src/topcal | tar -x -C DIR; mv
DIR/src/topcal DIR/topcal_old``), and scikit-learn's ``CalibratedClassifierCV(FrozenEstimator,
method="temperature")`` on the same probabilities (``bench_scaling.sklearn_ts``). Prints seconds
(minimum of ``--repeat`` rounds), each ÷ scikit-learn's, the penalised NLL reached by both (and
its relative difference), and the load (``os.getloadavg``) before and after.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_vector_fit.py --cells 1e5x10 1e6x10
1e6x100 [--methods sms vs] [--old DIR] [--repeat 2]``. sms runs only where K <= 15 (``auto``'s
limit, ``StructuredMatrixScaling.auto_max_classes``) unless ``--sms-any-k``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import make_data, old_topcal  # noqa: E402
from bench_scaling import sklearn_ts  # noqa: E402

from topcal.calibrators import get_class  # noqa: E402


def _cell(text: str) -> tuple[int, int]:
    n, k = text.lower().split("x")
    return int(float(n)), int(k)


def _timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=["1e5x10", "1e6x10", "1e6x100"])
    ap.add_argument("--methods", nargs="+", default=["sms", "vs"])
    ap.add_argument("--old", help="a folder holding an older topcal as the package topcal_old")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sms-any-k", action="store_true")
    args = ap.parse_args(argv)
    old = old_topcal(args.old)
    print(f"load before: {os.getloadavg()[0]:.2f}")
    sk = sklearn_ts()
    for text in args.cells:
        n, k = _cell(text)
        probs, labels = make_data(n, k, 0)
        data = None  # sklearn-ts fit ignores it
        runs = {"sklearn-ts": lambda: sk.fit(probs, labels, data)}
        for m in args.methods:
            if m == "sms" and k > 15 and not args.sms_any_k:
                continue
            runs[f"{m} new"] = lambda m=m: get_class(m)().fit(probs, labels)
            if old is not None:
                from topcal_old.calibrators import get_class as old_get

                runs[f"{m} old"] = lambda m=m, g=old_get: g(m)().fit(probs, labels)
        best, models = {}, {}
        for _ in range(args.repeat):
            for name, f in runs.items():  # interleaved: each round runs every contestant once
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    dt, models[name] = _timed(f)
                best[name] = min(best.get(name, float("inf")), dt)
        base = best["sklearn-ts"]
        print(f"\n{n} x {k} (load {os.getloadavg()[0]:.2f}); sklearn-ts {base:.2f} s")
        for name, dt in best.items():
            if name == "sklearn-ts":
                continue
            loss = getattr(models[name], "loss_", float("nan"))
            print(f"  {name:8s} {dt:7.2f} s  {dt / base:5.2f} x CCV-T  loss {loss!r}")
        for m in args.methods:
            if f"{m} old" in models and f"{m} new" in models:
                a, b = models[f"{m} old"].loss_, models[f"{m} new"].loss_
                print(
                    f"  {m}: new ÷ old {best[f'{m} new'] / best[f'{m} old']:.2f}, "
                    f"loss rel diff {(b - a) / abs(a):.2e}"
                )
    print(f"\nload after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
