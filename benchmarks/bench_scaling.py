"""Benchmark: fit and apply time against rows n and classes K, topcal against per-class peers.

Fair by construction:

* one process, one seeded data set per cell (n, K), every contestant on the same arrays;
* a warm-up round first (not timed), then ``--repeat`` rounds, and in every round each
  contestant fits and applies once, in the same interleaved order, so load changes on this
  shared machine hit every contestant alike; the minimum over rounds is reported;
* peak memory (tracemalloc, Python and numpy allocations) in one extra, untimed run;
* the load average is printed before every cell.

Contestants (those not installed are skipped with a note):

* every topcal method (``--methods``; default: all registered, ``auto`` too, whose cost is a
  cross-validation over the others; ``--no-auto`` leaves it out), on a :class:`topcal.TopLabelData`
  built once per cell (its construction is timed too, against the floor argmax + gather + compare);
* ``isotonic/class``: scikit-learn ``IsotonicRegression`` fitted per predicted class on the
  top score (the per-class peer the issue measures against), applied with one ``predict``
  per class;
* ``sklearn-ts``: scikit-learn ``CalibratedClassifierCV(FrozenEstimator, method="temperature")``;
* ``netcal-hist`` / ``netcal-ts``: netcal ``HistogramBinning`` / ``TemperatureScaling`` on the
  probabilities (``make bench`` installs netcal);
* ``relplot``: relplot's kernel smoother of correctness on the top score (one curve for all
  classes, its own bandwidth rule), applied by interpolation.

Data: probabilities softmax(z / T_j), z ~ N(0, 2^2) + 2 on a uniform true class, per-column
temperatures T_j from 0.5 to 2 (as benchmarks/bench_kde.py).

Output: a table per cell (fit and apply seconds, the ratio isotonic/class time over the
contestant's, peak MB and peak ÷ the input score matrix's size, and for ``auto`` its fit time ÷
``sklearn-ts``'s, scikit-learn's temperature calibration on the same outputs), then the fitted
exponent a of time ~ n^a per method and K (least
squares on log-log over the n of the grid).

Usage: python benchmarks/bench_scaling.py [--n 1e4 1e5 1e6 1e7] [--k 10 100 1000]
       [--max-n-k1000 1e6] [--repeat 3] [--methods hist hist:shrinkage=0 kde-mon2 ...] [--no-peers]
       [--no-auto]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import warnings

import numpy as np

from _measure import loadavg, make_data, peak_mb


# ------------------------------------------------------------------ contestants
class Contestant:
    """A name, a fit(probs, labels, data) -> model and an apply(model, probs, data) ->
    confidences."""

    def __init__(self, name, fit, apply):
        self.name, self.fit, self.apply = name, fit, apply


def topcal_contestant(spec):
    """A topcal method by name, or ``name:param=value[,param=value]`` (e.g. ``hist:shrinkage=0``,
    a method's m = 0 form); values are read as numbers where they parse as one."""
    import topcal

    method, _, rest = spec.partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            params[key] = int(value)
        except ValueError:
            try:
                params[key] = float(value)
            except ValueError:
                params[key] = value

    def fit(probs, labels, data):
        return topcal.calibrator(method, **params).fit(data)

    def apply(model, probs, data):
        return model.predict(data)

    return Contestant(spec, fit, apply)


def isotonic_per_class():
    from sklearn.isotonic import IsotonicRegression

    def groups(pred, k):
        order = np.argsort(pred, kind="stable")
        ends = np.cumsum(np.bincount(pred, minlength=k))
        return [
            (c, order[ends[c] - n : ends[c]])
            for c, n in enumerate(np.bincount(pred, minlength=k))
            if n
        ]

    def fit(probs, labels, data):
        pred, score = data.pred, data.score
        right = (labels == pred).astype(np.float64)
        return {
            c: IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
                score[i], right[i]
            )
            for c, i in groups(pred, probs.shape[1])
        }

    def apply(models, probs, data):
        out = np.array(data.score, dtype=np.float64)
        for c, i in groups(data.pred, probs.shape[1]):
            if c in models:
                out[i] = models[c].predict(data.score[i])
        return out

    return Contestant("isotonic/class", fit, apply)


def sklearn_ts():
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class PassThrough(ClassifierMixin, BaseEstimator):
        def fit(self, X, y=None):
            self.classes_ = np.arange(X.shape[1])
            return self

        def predict_proba(self, X):
            return np.asarray(X)

        def predict(self, X):
            return np.argmax(X, axis=1)

    def fit(probs, labels, data):
        pt = PassThrough().fit(probs)
        return CalibratedClassifierCV(FrozenEstimator(pt), method="temperature").fit(probs, labels)

    def apply(model, probs, data):
        return model.predict_proba(probs)[np.arange(probs.shape[0]), data.pred]

    return Contestant("sklearn-ts", fit, apply)


def netcal_contestants():
    import logging

    from netcal.binning import HistogramBinning
    from netcal.scaling import TemperatureScaling

    logging.getLogger("netcal").setLevel(logging.ERROR)

    def make(cls, name, **kw):
        def fit(probs, labels, data):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cls(**kw).fit(probs, labels)

        def apply(model, probs, data):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = np.asarray(model.transform(probs))
            return out[np.arange(probs.shape[0]), data.pred] if out.ndim == 2 else out

        return Contestant(name, fit, apply)

    return [
        make(HistogramBinning, "netcal-hist", bins=10),
        make(TemperatureScaling, "netcal-ts", method="mle"),
    ]


def relplot_contestant():
    from relplot.diagrams import prepare_rel_diagram

    def fit(probs, labels, data):
        right = (labels == data.pred).astype(np.float64)
        r = prepare_rel_diagram(data.score, right, plot_confidence_band=False, report_CE_std=False)
        return r["mesh"], r["mu"]

    def apply(model, probs, data):
        mesh, values = model
        return np.interp(data.score, mesh, values)

    return Contestant("relplot", fit, apply)


# ----------------------------------------------------------------------- run
def run_cell(n, k, contestants, repeat, seed):
    from topcal import TopLabelData

    probs, labels = make_data(n, k, seed)
    cons = []  # (name, seconds) of the construction and its floor
    best = {c.name: [np.inf, np.inf] for c in contestants}
    notes = {}
    data = None
    for rnd in range(repeat + 1):  # round 0: warm-up, not counted
        t = time.perf_counter()
        pred = np.argmax(probs, axis=1)
        _ = probs[np.arange(n), pred]  # the top score, as a fit reads it
        _ = labels == pred
        floor = time.perf_counter() - t
        t = time.perf_counter()
        data = TopLabelData.from_probs(probs, labels)
        build = time.perf_counter() - t
        if rnd:
            cons.append((floor, build))
        for c in contestants:
            if c.name in notes:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t = time.perf_counter()
                    model = c.fit(probs, labels, data)
                    fit_s = time.perf_counter() - t
                    t = time.perf_counter()
                    out = c.apply(model, probs, data)
                    apply_s = time.perf_counter() - t
                if np.asarray(out).shape != (n,):
                    raise RuntimeError(f"apply gave shape {np.asarray(out).shape}")
            except Exception as exc:  # a peer that cannot run here is reported, not fatal
                notes[c.name] = (
                    f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
                )
                continue
            if rnd:
                best[c.name][0] = min(best[c.name][0], fit_s)
                best[c.name][1] = min(best[c.name][1], apply_s)
            del model, out
            gc.collect()
    mem = {}
    for c in contestants:
        if c.name in notes:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            holder = {}
            f = peak_mb(lambda: holder.setdefault("m", c.fit(probs, labels, data)))
            a = peak_mb(lambda: c.apply(holder["m"], probs, data))
        mem[c.name] = max(f, a)
        holder.clear()
        gc.collect()
    floor = min(x[0] for x in cons)
    build = min(x[1] for x in cons)
    return best, mem, notes, (floor, build)


def fitted_exponent(ns, ts):
    ok = np.isfinite(ts) & (np.asarray(ts) > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(ns)[ok]), np.log(np.asarray(ts)[ok]), 1)[0])


def main(argv=None) -> int:
    import topcal
    from topcal.calibrators import available_methods

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, nargs="+", default=[1e4, 1e5, 1e6, 1e7])
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument(
        "--max-n-k1000", type=float, default=1e6, help="largest n for K >= 1000 (memory)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="topcal methods, each a name or name:param=value (hist:shrinkage=0 is hist's m = 0 "
        "form)",
    )
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument(
        "--no-auto", action="store_true", help="leave out auto (minutes at 10^6 x 100 and above)"
    )
    args = ap.parse_args(argv)

    methods = args.methods or [m for m in available_methods() if m != "auto" or not args.no_auto]
    contestants = [isotonic_per_class()]
    skipped = []
    if not args.no_peers:
        for make in (lambda: [sklearn_ts()], netcal_contestants, lambda: [relplot_contestant()]):
            try:
                contestants.extend(make())
            except ImportError as exc:
                skipped.append(str(exc))
    contestants += [topcal_contestant(m) for m in methods]
    import numpy
    import sklearn

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}; "
        f"Python {platform.python_version()}, numpy {numpy.__version__}, scikit-learn "
        f"{sklearn.__version__}, "
        f"topcal {topcal.__version__}"
    )
    print(f"repeat {args.repeat} (after one warm-up round), interleaved; minimum over rounds")
    for s in skipped:
        print(f"skipped peer: {s}")
    times = {}  # (name, k) -> list of (n, fit, apply)
    for k in args.k:
        for n in (int(v) for v in args.n):
            if k >= 1000 and n > args.max_n_k1000:
                continue
            print(f"\n## n = {n:.0e} x K = {k}   (load average {loadavg()})")
            best, mem, notes, (floor, build) = run_cell(n, k, contestants, args.repeat, args.seed)
            print(
                f"TopLabelData.from_probs {build:.4f} s; floor (argmax + gather + compare) "
                f"{floor:.4f} s; "
                f"ratio {build / floor:.2f}"
            )
            iso_fit, iso_apply = best["isotonic/class"]
            input_mb = n * k * 8 / 1e6  # the float64 score matrix every contestant is given
            print(f"input score matrix: {input_mb:.0f} MB")
            print(
                "| method | fit s | isotonic/class fit ÷ this | apply s | isotonic/class apply ÷ "
                "this | peak MB "
                "| peak ÷ input |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|")
            for c in contestants:
                if c.name in notes:
                    print(f"| {c.name} | – | – | – | – | – | – |  skipped: {notes[c.name]}")
                    continue
                f, a = best[c.name]
                times.setdefault((c.name, k), []).append((n, f, a))
                print(
                    f"| {c.name} | {f:.4f} | {iso_fit / f:.2f} | {a:.4f} | {iso_apply / a:.2f} | "
                    f"{mem[c.name]:.0f} "
                    f"| {mem[c.name] / input_mb:.2f} |"
                )
            if (
                "auto" in best
                and "sklearn-ts" in best
                and "auto" not in notes
                and "sklearn-ts" not in notes
            ):
                print(
                    f"auto fit ÷ sklearn-ts fit: {best['auto'][0] / best['sklearn-ts'][0]:.2f}; "
                    f"auto fit ÷ isotonic/class fit: {best['auto'][0] / iso_fit:.2f}"
                )
            sys.stdout.flush()
    if len(args.n) > 1:
        print("\n## fitted exponent a of time ~ n^a (fit / apply), per K")
        ks = sorted({k for _, k in times})
        print("| method | " + " | ".join(f"K={k}" for k in ks) + " |")
        print("|---|" + "---:|" * len(ks))
        for name in dict.fromkeys(nm for nm, _ in times):
            cells = []
            for k in ks:
                rows = times.get((name, k), [])
                ns = [r[0] for r in rows]
                cells.append(
                    f"{fitted_exponent(ns, [r[1] for r in rows]):.2f} / "
                    f"{fitted_exponent(ns, [r[2] for r in rows]):.2f}"
                )
            print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nload average at the end: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
