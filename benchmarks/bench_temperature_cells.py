"""The temperature family at many classes (issue 36, item 2): sts / tswa / csts / btswa fit seconds
and ÷ scikit-learn's temperature calibration, per cell of simulated outputs.

Per cell n × K (``_measure.make_data``: seeded probabilities, class-dependently miscalibrated),
in one process, interleaved (every round fits each contestant once, in the same order, so load
changes hit them alike), minimum over ``--repeat`` rounds:

* ``CCV-T``: scikit-learn ``CalibratedClassifierCV(FrozenEstimator, method="temperature")`` on
  the same outputs (``bench_scaling.sklearn_ts``);
* each topcal method of ``--methods`` on a :class:`topcal.TopLabelData` built once per cell;
* with ``--old DIR``: the same methods of an older topcal exported as the package ``topcal_old``
  in DIR (``git archive <commit> src/topcal | tar -x -C DIR; mv DIR/src/topcal DIR/topcal_old``),
  on its own TopLabelData of the same arrays, and per method the fitted NLL's difference
  (new - old, per sample) and the largest relative difference of the temperatures and awards.

The load average (``uptime``'s three figures) is printed on every row.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_temperature_cells.py
[--cells 1e4x10 1e5x10 ...] [--methods sts tswa csts btswa] [--repeat 3] [--old DIR]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import loadavg, make_data, old_topcal  # noqa: E402

CELLS = ["1e4x10", "1e5x10", "1e6x10", "1e4x100", "1e5x100", "1e6x100", "1e4x1000", "1e5x1000"]
METHODS = ["sts", "tswa", "csts", "btswa"]


def _label(n: int) -> str:
    e = len(str(n)) - 1
    lead = n // 10**e
    return (f"{lead}×" if lead != 1 else "") + f"10^{e}"


def _rel(a, b) -> float:
    """Largest relative difference of two parameter vectors (1 + |b| in the denominator)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) if a.size else 0.0


def run_cell(cell, methods, repeat, old):
    import topcal
    from bench_scaling import sklearn_ts

    n, k = (int(float(v)) for v in cell.split("x"))
    probs, labels = make_data(n, k, 0)
    data = topcal.TopLabelData.from_probs(probs, labels)
    runs = {"CCV-T": None}
    for m in methods:
        runs[m] = (topcal, m, data)
    if old is not None:
        old_data = old.TopLabelData.from_probs(probs, labels)
        for m in methods:
            runs["old " + m] = (old, m, old_data)
    sk = sklearn_ts()
    best, models = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(repeat):
            for name, how in runs.items():
                t = time.perf_counter()
                if how is None:
                    sk.fit(probs, labels, data)
                else:
                    pkg, m, d = how
                    models[name] = pkg.calibrator(m).fit(d)
                best[name] = min(best.get(name, 1e99), time.perf_counter() - t)
    ts = best["CCV-T"]
    row = f"| {_label(n)} × {k} | {ts:.3f} |"
    for m in methods:
        row += f" {best[m]:.3f} ({best[m] / ts:.2f}) |"
    print(row + f" {loadavg()} |", flush=True)
    if old is not None:
        for m in methods:
            new, was, t_old = models[m], models["old " + m], best["old " + m]
            print(
                f"|   {m}: old {t_old:.3f} s, old ÷ new {t_old / best[m]:.2f};"
                f" NLL/n new - old {(new.nll_ - was.nll_) / n:+.2e}; params rel. diff "
                f"T {_rel(new.temperature_, was.temperature_):.1e}, "
                f"A {_rel(new.awards_, was.awards_):.1e}; Newton steps {new.n_iter_} "
                f"(old {was.n_iter_}) |",
                flush=True,
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", nargs="+", default=CELLS)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old", help="a folder holding an older topcal as the package topcal_old")
    args = ap.parse_args(argv)
    old = old_topcal(args.old)
    print(
        "| n × K | CCV-T s | "
        + " | ".join(f"{m} s (÷ CCV-T)" for m in args.methods)
        + " | load (1, 5, 15 min) |"
    )
    print("|---|---:|" + "---:|" * len(args.methods) + "---|")
    for cell in args.cells:
        run_cell(cell, args.methods, args.repeat, old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
