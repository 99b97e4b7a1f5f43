"""Benchmark: topcal's temperature methods against scikit-learn and netcal.

One process, one seeded data set (default 1,000,000 samples x 10 classes of
class-dependently miscalibrated probabilities), every method fitted on the
same arrays. Prints, per method, the fit time, the top-label NLL (mean per
sample, :func:`topcal.metrics.nll`) of the recalibrated top entry on the
fitting data, the peak resident memory above the level before the fit, and
ratios against scikit-learn's temperature fit.

Competitors
-----------
* scikit-learn >= 1.8, ``CalibratedClassifierCV(FrozenEstimator(passthrough),
  method="temperature")`` on the probabilities (it logs them itself), and its
  internal ``_TemperatureScaling`` fitted directly on the logits. Both
  minimise the multinomial NLL over log(1/T) with Brent's method.
* netcal >= 1.3, ``netcal.scaling.TemperatureScaling(method="mle")`` on the
  probabilities (torch loss, scipy L-BFGS-B with finite-difference gradient).
  Skipped, with a note, when netcal is not installed.

Data
----
Logits z ~ N(0, 2.5^2) plus a class offset; the true class is drawn
(Gumbel-max) from softmax(z * tau_j) with a per-column sharpness tau_j from
0.45 to 1.6, so some classes are over- and others underconfident: one shared
temperature cannot fix all of them, which is the paper's case for csts/tswa.

Run ``python benchmarks/bench_temperature.py [--n N] [--k K] [--seed S]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import threading
import time
import warnings

import numpy as np


def make_data(n: int, k: int, seed: int):
    """Seeded logits, probabilities and labels, class-dependently miscalibrated."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.5, size=(n, k)) + np.linspace(-0.5, 0.5, k)
    tau = np.linspace(0.45, 1.6, k)  # true sharpness per class: <1 overconfident, >1 underconfident
    g = rng.gumbel(size=(n, k))
    labels = np.argmax(z * tau + g, axis=1)
    z -= z.max(axis=1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=1, keepdims=True)
    return z, probs, labels


def _malloc_trim():
    """Give freed heap memory back to the OS (glibc), so RSS rises with every new allocation."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS peaks are then lower bounds
        pass


class PeakRSS:
    """Peak resident set size above the level at entry, sampled every 2 ms from /proc.

    Counts every allocator (numpy, torch, scikit-learn's Cython buffers),
    which tracemalloc would not; freed heap memory is trimmed first so the
    baseline is honest.
    """

    def __init__(self):
        self.page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def __enter__(self):
        gc.collect()
        _malloc_trim()
        self.base = self._rss()
        self.peak = self.base
        self._stop = threading.Event()

        def watch():
            while not self._stop.is_set():
                self.peak = max(self.peak, self._rss())
                time.sleep(0.002)

        self._t = threading.Thread(target=watch, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self.peak = max(self.peak, self._rss())
        self._stop.set()
        self._t.join()

    @property
    def mib(self) -> float:
        return (self.peak - self.base) / 2**20


def timed(fn):
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
    return out, dt, mem.mib


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--repeat", type=int, default=1, help="fits per method; the fastest time is reported"
    )
    args = ap.parse_args(argv)

    import sklearn
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV, _TemperatureScaling
    from sklearn.frozen import FrozenEstimator

    import topcal
    from topcal import TopLabelData
    from topcal.metrics import nll

    class PassThrough(ClassifierMixin, BaseEstimator):
        """A 'fitted' classifier whose predict_proba returns its input: precomputed scores."""

        def __init__(self, n_classes):
            self.n_classes = n_classes

        def fit(self, X, y=None):
            return self

        def predict_proba(self, X):
            return np.asarray(X)

        def predict(self, X):
            return np.argmax(X, axis=1)

    z, probs, labels = make_data(args.n, args.k, args.seed)
    data, t_data, m_data = timed(lambda: TopLabelData.from_probs(probs, labels))
    pred = data.pred
    rows = np.arange(args.n)

    def top_nll(conf):
        return nll(data, np.clip(conf, 0.0, 1.0)).overall

    results = []  # (name, n_params, seconds, nll, peak MiB, note)

    def run(name, fit, conf_of, n_params, note=""):
        best = None
        for _ in range(args.repeat):
            model, dt, mib = timed(fit)
            if best is None or dt < best[1]:
                best = (model, dt, mib)
        model, dt, mib = best
        results.append((name, n_params, dt, top_nll(conf_of(model)), mib, note))
        del model
        gc.collect()

    run("uncalibrated", lambda: None, lambda m: data.score, 0)

    # --- scikit-learn ------------------------------------------------------
    def sk_cv():
        pt = PassThrough(args.k).fit(probs, labels)
        pt.classes_ = np.arange(args.k)
        return CalibratedClassifierCV(FrozenEstimator(pt), method="temperature").fit(probs, labels)

    run(
        "sklearn CalibratedClassifierCV(temperature)",
        sk_cv,
        lambda m: m.predict_proba(probs)[rows, pred],
        1,
        "probs; multinomial NLL, Brent",
    )
    run(
        "sklearn _TemperatureScaling on logits",
        lambda: _TemperatureScaling().fit(z, labels),
        lambda m: m.predict(z)[rows, pred],
        1,
        "logits; multinomial NLL, Brent",
    )

    # --- netcal ------------------------------------------------------------
    try:
        import netcal
        from netcal.scaling import TemperatureScaling as NetcalTS
    except ImportError as exc:  # optional competitor
        print(f"netcal not available ({exc}); skipped", file=sys.stderr)
        netcal = None
    if netcal is not None:
        import logging

        logging.getLogger("netcal").setLevel(logging.ERROR)

        def nc_fit():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return NetcalTS(method="mle").fit(probs, labels, tensorboard=False)

        run(
            "netcal TemperatureScaling(mle)",
            nc_fit,
            lambda m: np.asarray(m.transform(probs))[rows, pred],
            1,
            "probs; multinomial NLL, L-BFGS-B",
        )

    # --- topcal ------------------------------------------------------------
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", topcal.errors.DegenerateClassWarning)
        # the plain rows time the default fit alone (like the competitors'); the "+ update tables"
        # rows the opt-in keep_stats=True, which also computes the loss tables update needs
        tables = {"keep_stats": True}
        for name, params in [
            ("sts", {"objective": "multinomial"}),
            ("sts", {}),
            ("csts", {}),
            ("sts", tables),
            ("csts", tables),
            ("tswa", {}),
            ("cstswa", {}),
            ("bts", {}),
            ("btswa", {}),
        ]:
            label = (
                f"topcal {name}"
                + ("(multinomial)" if "objective" in params else "")
                + (" + update tables" if params is tables else "")
            )
            holder = {}

            def fit(name=name, params=params):
                m = topcal.calibrator(name, **params).fit(data)
                holder["n"] = m.n_params_
                return m

            run(label, fit, lambda m: m.predict(data), None, "probs; top-label NLL, Newton")
            name_, _, dt, v, mib, note = results[-1]
            results[-1] = (name_, holder["n"], dt, v, mib, note)

    # --- report ------------------------------------------------------------
    sk = next(r for r in results if r[0].startswith("sklearn Cal"))
    sk_logit = next(r for r in results if r[0].startswith("sklearn _Temp"))
    print(
        f"topcal {topcal.__version__}, scikit-learn {sklearn.__version__}"
        + (f", netcal {netcal.__version__}" if netcal is not None else "")
        + f", numpy {np.__version__}, Python {platform.python_version()}"
    )
    cpu = os.cpu_count()
    load = os.getloadavg()
    print(
        f"data: n={args.n:,} x K={args.k}, seed {args.seed}; TopLabelData.from_probs {t_data:.3f} "
        f"s, "
        f"{m_data:.0f} MiB; {cpu} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print()
    print(
        "| method | params | fit time (s) | time / sklearn CCV | time / sklearn logits | top-label "
        "NLL "
        "| NLL - sklearn CCV | peak extra RSS (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, npar, dt, v, mib, note in results:
        if name == "uncalibrated":
            print(f"| {name} | 0 | - | - | - | {v:.6f} | {v - sk[3]:+.6f} | - |")
            continue
        print(
            f"| {name} | {npar} | {dt:.3f} | {dt / sk[2]:.3f} | {dt / sk_logit[2]:.3f} | {v:.6f} "
            f"| {v - sk[3]:+.6f} | {mib:.0f} |"
        )
    print()
    sts = next(r for r in results if r[0] == "topcal sts")
    tswa = next(r for r in results if r[0] == "topcal tswa")
    print(
        f"targets: sts speed-up vs sklearn CCV {sk[2] / sts[2]:.2f}x (target >= 3x), vs sklearn "
        f"logits "
        f"{sk_logit[2] / sts[2]:.2f}x; sts NLL - sklearn NLL = {sts[3] - sk[3]:+.2e} (target <= "
        f"0); "
        f"tswa time / sklearn CCV = {tswa[2] / sk[2]:.2f} (target <= 1)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
