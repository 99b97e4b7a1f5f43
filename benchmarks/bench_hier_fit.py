"""Per-class parametric fits (``hier-beta``, ``hier-platt``, ``pooled-beta``) against per-class
isotonic regression, and against an older topcal on the same data (issue 36, item 3:
``hier-beta`` at most 3 x isotonic's fit time at n >= 10^5).

One process, one seeded data set per cell (bench_scaling.py's, ``_measure.make_data``); a
warm-up round, then ``--repeat`` rounds in which every contestant fits once in the same
interleaved order (isotonic, each method, each method's older fit); the minimum over rounds.
Printed per cell and method: the fit seconds, fit ÷ isotonic for this and the older topcal,
this ÷ older, and the agreement of the two fits (the chosen strength; the largest relative
difference of the parameters and of the predictions).

``--old DIR``: an older topcal exported as the package ``topcal_old`` in DIR (``git archive
<commit> src/topcal | tar -x -C DIR; mv DIR/src/topcal DIR/topcal_old``).

Run: python benchmarks/bench_hier_fit.py [--n 1e5 1e6] [--k 10 100] [--repeat 3]
[--methods hier-beta hier-platt pooled-beta] [--old DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from _measure import loadavg, make_data, old_topcal


def isotonic_fit(data, labels, k):
    """scikit-learn IsotonicRegression per predicted class on the top score (bench_scaling's)."""
    from sklearn.isotonic import IsotonicRegression

    pred, score = data.pred, data.score
    right = (labels == pred).astype(np.float64)
    order = np.argsort(pred, kind="stable")
    counts = np.bincount(pred, minlength=k)
    ends = np.cumsum(counts)
    out = []
    for c in range(k):
        if counts[c]:
            i = order[ends[c] - counts[c] : ends[c]]
            out.append(
                IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
                    score[i], right[i]
                )
            )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, nargs="+", default=[1e5, 1e6])
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--methods", nargs="+", default=["hier-beta", "hier-platt", "pooled-beta"])
    ap.add_argument("--old", help="a folder holding an older topcal as the package topcal_old")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import topcal

    old = old_topcal(args.old)
    print(f"repeat {args.repeat} (after a warm-up round), interleaved; minimum over rounds")
    print(
        "| n × K | method | fit s | ÷ isotonic | old fit s | old ÷ isotonic | new ÷ old | "
        "strength new / old | params rel diff | predictions rel diff | load |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for k in args.k:
        for n in (int(v) for v in args.n):
            load = loadavg()
            probs, labels = make_data(n, k, 0)
            data = topcal.TopLabelData.from_probs(probs, labels)
            runs = [("isotonic", lambda: isotonic_fit(data, labels, k))]
            for m in args.methods:
                runs.append((m, lambda m=m: topcal.calibrator(m).fit(data)))
                if old is not None:
                    odata = old.TopLabelData.from_probs(probs, labels)
                    runs.append((m + " old", lambda m=m, d=odata: old.calibrator(m).fit(d)))
            best, fitted = {}, {}
            for rnd in range(args.repeat + 1):
                for name, run in runs:
                    t = time.perf_counter()
                    fitted[name] = run()
                    if rnd:
                        best[name] = min(best.get(name, np.inf), time.perf_counter() - t)
            iso = best["isotonic"]
            for m in args.methods:
                row = f"| 10^{np.log10(n):.0f} × {k} | {m} | {best[m]:.3f} | {best[m] / iso:.2f} |"
                if old is None:
                    print(row + " | | | | | | " + load + " |")
                    continue
                a, b = fitted[m], fitted[m + " old"]
                ia, ib = (a.model_, b.model_) if m.startswith("pooled") else (a, b)
                rel = np.max(np.abs(ia.theta_ - ib.theta_) / np.maximum(np.abs(ib.theta_), 1e-12))
                pa, pb = a.predict(data), b.predict(old.TopLabelData.from_probs(probs, labels))
                prel = np.max(np.abs(pa - pb) / pb)
                o = best[m + " old"]
                print(
                    row + f" {o:.3f} | {o / iso:.2f} | {best[m] / o:.2f} | "
                    f"{ia.strength_:g} / {ib.strength_:g} | {rel:.1e} | {prel:.1e} | {load} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
