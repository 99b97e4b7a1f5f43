"""Benchmark: topcal's kernel-density-ratio calibrators against what a user would otherwise run.

One process, one seeded data set (default 1,000,000 samples x 10 classes of
class-dependently miscalibrated softmax probabilities, ~100,000 positives per
predicted class). For every kde rule (kde, kde-mon, kde-mon2, kde-mon4,
kde-opt) it times the fit on all classes and ``predict`` on all rows, and
compares with

(a) the naive approach: ``scipy.stats.gaussian_kde`` on the TP and on the FP
    scores of a class, once per candidate bandwidth, evaluated on the same
    513-point scan grid (kde-opt: at every positive sample, for the
    leave-one-out NLL), over exactly as many (class, bandwidth) evaluations
    as topcal's scan made. It costs minutes to hours, so each evaluation
    kind is timed on two (class, bandwidth) pairs and multiplied out; the
    table marks these figures "extrapolated". Apply: gaussian_kde evaluated
    at every row (extrapolated from 2,000 rows).
(b) scikit-learn's ``IsotonicRegression`` fitted per predicted class (fit and
    predict), the usual non-parametric alternative.
(c) KDEpy's ``FFTKDE`` for the density part only: TP and FP densities on a
    4097-point grid per (class, bandwidth), as many as topcal evaluated
    (the sign counting and the rest are not included). Apply: FFTKDE at the
    class's b on the grid, then ``np.interp`` at every row.

Peak memory is the tracemalloc peak of each timed step (numpy registers its
buffers with tracemalloc), measured in a second, untimed run; the process's
peak RSS is printed at the end.

Run ``python benchmarks/bench_kde.py [--n N] [--k K] [--seed S] [--repeat R]``.
Needs scipy (a topcal dependency), scikit-learn and KDEpy (``pip install
'topcal[bench]'``).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import warnings

import numpy as np

from _measure import best_time, make_data, peak_mb

RULES = ["kde", "kde-mon", "kde-mon2", "kde-mon4", "kde-opt"]


class Counter:
    """Counts the bandwidths topcal's engines evaluate (wraps, does not change, them)."""

    def __init__(self):
        from topcal.calibrators.kde import _engine as eng

        self.eng = eng
        self.n_scan = 0
        self.n_loo = 0

    def __enter__(self):
        eng = self.eng
        self._saved = {}
        for cls in (eng.BinnedEngine, eng.ExactEngine):
            for meth in ("scan", "loo_nll"):
                orig = getattr(cls, meth)
                self._saved[(cls, meth)] = orig

                def wrapped(obj, bs, *a, _orig=orig, _meth=meth, **kw):
                    n = np.atleast_1d(bs).shape[0]
                    if _meth == "scan":
                        self.n_scan += n
                    else:
                        self.n_loo += n
                    return _orig(obj, bs, *a, **kw)

                setattr(cls, meth, wrapped)
        # the exact engine's classes are scanned together, one bandwidth per class and call
        orig = eng.ExactScanBatch.sign_changes
        self._saved[(eng.ExactScanBatch, "sign_changes")] = orig

        def batched(obj, rows, bs, _orig=orig):
            self.n_scan += np.atleast_1d(bs).shape[0]
            return _orig(obj, rows, bs)

        eng.ExactScanBatch.sign_changes = batched
        return self

    def __exit__(self, *exc):
        for (cls, meth), orig in self._saved.items():
            setattr(cls, meth, orig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    from scipy.stats import gaussian_kde
    from sklearn.isotonic import IsotonicRegression

    try:
        from KDEpy import FFTKDE
    except ImportError:  # pragma: no cover - optional
        FFTKDE = None

    import topcal
    from topcal.calibrators import calibrator
    from topcal.calibrators.kde._engine import FINE_CELLS, SCAN_POINTS
    from topcal.data import TopLabelData

    print(
        f"topcal {topcal.__version__}, numpy {np.__version__}, python {platform.python_version()}, "
        f"{os.cpu_count()} cores ({platform.machine()})"
    )
    probs, labels = make_data(args.n, args.k, args.seed)
    data = TopLabelData.from_probs(probs, labels)
    del probs
    pred, score = data.pred, data.score
    correct = data.tp > 0
    K = data.n_classes
    rows = [np.flatnonzero(pred == k) for k in range(K)]
    print(
        f"data: {args.n:,} samples x {K} classes, positives per class "
        f"{min(r.size for r in rows):,}-{max(r.size for r in rows):,}, seed {args.seed}, best of "
        f"{args.repeat}\n"
    )

    results = {}
    # ------------------------------------------------------------- topcal
    counts = {}
    for rule in RULES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_fit, model = best_time(lambda: calibrator(rule).fit(data), args.repeat)
            with Counter() as c:
                calibrator(rule).fit(data)
            counts[rule] = (c.n_scan, c.n_loo)
            mem_fit = peak_mb(lambda: calibrator(rule).fit(data))
        t_apply, _ = best_time(lambda: model.predict(data), args.repeat)
        mem_apply = peak_mb(lambda: model.predict(data))
        results[rule] = dict(
            fit=t_fit, apply=t_apply, mem_fit=mem_fit, mem_apply=mem_apply, model=model
        )

    # ---------------------------------------------------------- isotonic
    def iso_fit():
        out = []
        for k in range(K):
            r = rows[k]
            out.append(
                IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
                    score[r], correct[r]
                )
            )
        return out

    t_iso, isos = best_time(iso_fit, args.repeat)
    mem_iso = peak_mb(iso_fit)

    def iso_apply():
        out = np.empty(args.n)
        for k in range(K):
            out[rows[k]] = isos[k].predict(score[rows[k]])
        return out

    t_iso_apply, _ = best_time(iso_apply, args.repeat)
    mem_iso_apply = peak_mb(iso_apply)

    # ------------------------------------------------------------ naive
    # cost of one gaussian_kde evaluation pair (TP and FP) on the scan grid and,
    # for LOO, at every positive sample; timed on two classes at b_mon2
    b2 = results["kde-mon2"]["model"].bandwidth_
    per_scan, per_loo, per_apply_row = [], [], []
    for k in (0, K - 1):
        r = rows[k]
        s, c = score[r], correct[r]
        lo, hi = s.min(), s.max()
        grid = np.linspace(lo, hi, SCAN_POINTS)
        b = b2[k]

        def one(points, s=s, c=c, b=b):
            kt = gaussian_kde(s[c], bw_method=b / s[c].std(ddof=1))
            kf = gaussian_kde(s[~c], bw_method=b / s[~c].std(ddof=1))
            nt, nf = c.sum(), (~c).sum()
            a = kt(points) * nt
            return a / (a + kf(points) * nf)

        t, _ = best_time(lambda: one(grid), 1)
        per_scan.append(t)
        sub = s[:2000]
        t, _ = best_time(lambda: one(sub), 1)
        per_loo.append(t * s.size / sub.size)  # LOO: the same sums at every positive sample
        per_apply_row.append(t / sub.size)  # apply: the same sums at every row
    naive_scan = float(np.mean(per_scan))  # one (class, b) evaluation on the scan grid
    naive_loo = float(np.mean(per_loo))  # one (class, b) LOO evaluation at every sample
    naive_apply = float(np.mean(per_apply_row)) * args.n

    # ------------------------------------------------------------ KDEpy
    kdepy = {}
    if FFTKDE is not None:

        def kdepy_eval(k, b):
            r = rows[k]
            s, c = score[r], correct[r]
            pad = 6 * b  # grid must cover the data; kernel support is finite in KDEpy
            x = np.linspace(s.min() - pad, s.max() + pad, FINE_CELLS + 1)
            yt = FFTKDE(bw=b).fit(s[c]).evaluate(x) * c.sum()
            yf = FFTKDE(bw=b).fit(s[~c]).evaluate(x) * (~c).sum()
            return x, yt, yf

        def kdepy_one_per_class():
            for k in range(K):
                kdepy_eval(k, b2[k])

        t1, _ = best_time(kdepy_one_per_class, args.repeat)
        per_eval = t1 / K
        for rule in RULES:
            n_eval = sum(counts[rule]) + K  # + the final evaluation of each class
            kdepy[rule] = per_eval * n_eval
        mem_kdepy = peak_mb(kdepy_one_per_class)

        def kdepy_apply():
            out = np.empty(args.n)
            for k in range(K):
                x, yt, yf = kdepy_eval(k, b2[k])
                out[rows[k]] = np.interp(score[rows[k]], x, yt / np.maximum(yt + yf, 1e-300))
            return out

        t_kdepy_apply, _ = best_time(kdepy_apply, args.repeat)

    # ------------------------------------------------------------ report
    print("fit, all classes (seconds; ratio = competitor time / topcal time)")
    head = (
        f"{'rule':9s} {'topcal':>8s} {'evals':>6s} {'naive*':>10s} {'x naive':>9s} "
        f"{'isotonic':>9s} {'x iso':>6s}"
    )
    if kdepy:
        head += f" {'KDEpy':>8s} {'x KDEpy':>8s}"
    head += f" {'peak MB':>8s}"
    print(head)
    print("-" * len(head))
    for rule in RULES:
        r = results[rule]
        n_scan, n_loo = counts[rule]
        n_eval = n_scan + n_loo + K
        naive = n_scan * naive_scan + n_loo * naive_loo + K * naive_scan
        line = (
            f"{rule:9s} {r['fit']:8.3f} {n_eval:6d} {naive:10.1f} {naive / r['fit']:9.0f} "
            f"{t_iso:9.3f} {t_iso / r['fit']:6.1f}"
        )
        if kdepy:
            line += f" {kdepy[rule]:8.3f} {kdepy[rule] / r['fit']:8.1f}"
        line += f" {r['mem_fit']:8.0f}"
        print(line)
    print(
        f"isotonic peak MB {mem_iso:.0f}"
        + (f"; KDEpy one pass per class peak MB {mem_kdepy:.0f}" if kdepy else "")
    )
    print("* naive: extrapolated from timed gaussian_kde evaluations (see the docstring)\n")

    print("apply, all rows")
    head = f"{'rule':9s} {'seconds':>8s} {'M rows/s':>9s} {'peak MB':>8s}"
    print(head)
    print("-" * len(head))
    for rule in RULES:
        r = results[rule]
        print(f"{rule:9s} {r['apply']:8.4f} {args.n / r['apply'] / 1e6:9.1f} {r['mem_apply']:8.0f}")
    print(
        f"{'isotonic':9s} {t_iso_apply:8.4f} {args.n / t_iso_apply / 1e6:9.1f} {mem_iso_apply:8.0f}"
    )
    if kdepy:
        print(f"{'KDEpy':9s} {t_kdepy_apply:8.4f} {args.n / t_kdepy_apply / 1e6:9.1f}")
    print(f"{'naive*':9s} {naive_apply:8.1f} {args.n / naive_apply / 1e6:9.4f}")
    print(f"\nbandwidths (kde-mon2): {np.array2string(b2, precision=4)}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    print(f"process peak RSS: {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
