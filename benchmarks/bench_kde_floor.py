"""Benchmark: the least arithmetic the kde bandwidth rules need on small classes, against per-class
isotonic.

Issue 15 asks kde-mon2 and kde-opt to fit faster than scikit-learn's IsotonicRegression
fitted per predicted class, in every cell of the scaling grid. This script measures how
much of that is possible at all on the exact engine (classes of at most 512 rows), by
timing a *floor*: only the kernel evaluations the rules cannot do without, in one batched
array program over all classes (no Python per class, no sign counting, no tables), then
comparing it with per-class isotonic on the same data, in the same process, interleaved.

* kde-mon2 floor: the chosen bandwidth is only known to be admissible once Conf has been
  evaluated on all 513 scan points (any point left out could add a slope sign change), and
  the rule verifies one admissible bandwidth for the candidate scan and one in each of its 3
  refinement rounds: at least 4 x 513 x u kernel terms (exp, then the two weighted sums) for
  a class with u distinct scores.
* kde-opt floor: the leave-one-out NLL at every candidate (b_lo 2^(i/4) up to 4R: 41 of them)
  and 21 refinement points, each u x u kernel terms; and the same without the exp (each
  kernel value one multiplication), what cheaper kernel values could leave at best.

The floor is a lower bound of the present algorithm's cost with NumPy's vectorised exp
(~1 ns per term on this machine); it is not a bound for other algorithms (a fast Gauss
transform evaluates a sum of u Gaussians at m points in O(u + m) to a set tolerance).

Usage: python benchmarks/bench_kde_floor.py [--cells 1e4x100 1e5x1000 ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import numpy as np

from _measure import loadavg, make_data

SCAN_POINTS = 513
MON_EVALUATIONS = 4
OPT_EVALUATIONS = 41 + 21
EXACT_MAX_ROWS = 512


def small_classes(data):
    """Distinct scores of every class the exact engine takes (2..512 rows, both TP and FP)."""
    from topcal.data import rows_by_class

    return [
        np.unique(data.score[idx])
        for _, idx in rows_by_class(data.pred, data.n_classes)
        if 2 <= idx.size <= EXACT_MAX_ROWS and data.tp[idx].sum() > 0 and data.fp[idx].sum() > 0
    ]


def groups(classes, ratio=1.1):
    """Classes sorted by size in groups whose widest is at most ``ratio`` x the narrowest, each as
    (c, width) centres padded with their last value and weights (c, width, 2) with 0 padding:
    batched arrays that add at most 10 % padded terms."""
    classes = sorted(classes, key=len)
    out, start = [], 0
    for i in range(1, len(classes) + 1):
        if i == len(classes) or classes[i].size > ratio * classes[start].size:
            part = classes[start:i]
            width = part[-1].size
            pts = np.empty((len(part), width))
            w = np.zeros((len(part), width, 2))
            for j, u in enumerate(part):
                pts[j, : u.size] = u
                pts[j, u.size :] = u[-1]
                w[j, : u.size] = 1.0
            out.append((pts, w))
            start = i
    return out


def kernel_rounds(d2, lo, hi, w, evaluations, with_exp=True):
    """``evaluations`` passes over the bandwidth-free squared distances d2 (classes x points x
    centres): scale, exp and the two weighted sums, at a bandwidth of R / 20 per class.
    Without ``with_exp`` the exp is left out: what would remain if every kernel value cost one
    multiplication (as repeated squaring along the candidate ladder would give, to ~1e-15)."""
    inv = 0.5 / ((hi - lo) / 20.0) ** 2
    e = np.empty_like(d2)
    for _ in range(evaluations):
        np.multiply(d2, -inv[:, None, None], out=e)
        if with_exp:
            np.exp(e, out=e)
        np.matmul(e, w)


def floor_mon(pts, w, evaluations):
    """evaluations x (classes x 513 x width) kernel terms."""
    lo, hi = pts.min(axis=1), pts.max(axis=1)
    x = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, SCAN_POINTS)[None, :]
    kernel_rounds((x[:, :, None] - pts[:, None, :]) ** 2, lo, hi, w, evaluations)


def floor_opt(pts, w, evaluations, with_exp=True):
    """evaluations x (classes x width x width) kernel terms."""
    lo, hi = pts.min(axis=1), pts.max(axis=1)
    kernel_rounds((pts[:, :, None] - pts[:, None, :]) ** 2, lo, hi, w, evaluations, with_exp)


def isotonic_fit(data, labels):
    from sklearn.isotonic import IsotonicRegression

    from topcal.data import rows_by_class

    right = (labels == data.pred).astype(np.float64)
    for _, idx in rows_by_class(data.pred, data.n_classes):
        IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
            data.score[idx], right[idx]
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cells", nargs="+", default=["1e4x10", "1e4x100", "1e5x100", "1e4x1000", "1e5x1000"]
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import topcal

    print(
        f"# kde floor vs isotonic/class  ({platform.machine()}, {platform.python_version()}, "
        f"numpy {np.__version__})"
    )
    print(
        "| n x K | exact-engine classes | mean distinct scores | isotonic/class s | kde-mon2 floor "
        "s "
        "| kde-mon2 fit s | kde-opt floor s | kde-opt floor without exp s | kde-opt fit s | load |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for cell in args.cells:
        n_s, k_s = cell.split("x")
        n, k = int(float(n_s)), int(k_s)
        probs, labels = make_data(n, k, 0)
        data = topcal.TopLabelData.from_probs(probs, labels)
        classes = small_classes(data)
        load = loadavg()
        if not classes:
            print(f"| {n_s} x {k} | 0 | - | - | - | - | - | - | - | {load} |")
            continue
        parts = groups(classes)
        jobs = {
            "iso": lambda: isotonic_fit(data, labels),
            "mon": lambda: [floor_mon(pts, w, MON_EVALUATIONS) for pts, w in parts],
            "opt": lambda: [floor_opt(pts, w, OPT_EVALUATIONS) for pts, w in parts],
            "opt-noexp": lambda: [
                floor_opt(pts, w, OPT_EVALUATIONS, with_exp=False) for pts, w in parts
            ],
            "fit-mon": lambda: topcal.calibrator("kde-mon2").fit(data),
            "fit-opt": lambda: topcal.calibrator("kde-opt").fit(data),
        }
        best = dict.fromkeys(jobs, float("inf"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, job in jobs.items():  # warm-up
                job()
            for _ in range(args.repeat):  # interleaved rounds
                for name, job in jobs.items():
                    t = time.perf_counter()
                    job()
                    best[name] = min(best[name], time.perf_counter() - t)
        mean_u = float(np.mean([u.size for u in classes]))
        print(
            f"| {n_s} x {k} | {len(classes)} | {mean_u:.0f} | {best['iso']:.4f} | "
            f"{best['mon']:.4f} "
            f"| {best['fit-mon']:.4f} | {best['opt']:.4f} | {best['opt-noexp']:.4f} | "
            f"{best['fit-opt']:.4f} | {load} |"
        )


if __name__ == "__main__":
    main()
