"""``topcal metrics`` (every overall metric with its interval) against ``topcal apply`` on the same
rows, side by side: the issue's bar is metrics <= 3 x apply on 10^6 rows x 1,000 classes of
top-label data.

Data: seeded, simulated top-label rows (``true_label, pred_label, confidence``: the ImageNet
layout of ``../shared/data/bench``), ``--rows`` (default 10^6) over ``--classes`` (default 1,000),
overconfident (P(right | c) = c^1.5), written once as CSV to ``--work``. A ``hist`` model is fitted
on it first (not timed). Then, each as its own process (``python -m topcal.cli``, as a user runs
it), ``--repeat`` times, the fastest kept:

* ``topcal apply MODEL DATA -o out.csv``
* ``topcal metrics DATA --model MODEL --json`` (reads the rows, predicts, and computes NLL, Brier,
  the improvement over the uncalibrated score, ece15, smece, ece_debiased, ece_top_label and the
  calibration losses, each with its 90% interval: 1,000 bootstrap resamples, 5 recalibration
  folds)

Printed: wall and CPU seconds (user + system of the process) of each, their ratio, and the load
average before each run.

Run: ``python benchmarks/bench_metrics_scale.py [--rows 1000000] [--classes 1000] [--repeat 1]
[--work DIR]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from _measure import loadavg


def make_rows(n: int, k: int, path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, k, n)
    conf = rng.beta(4.0, 1.2, n).clip(1.0 / k, 1.0)
    right = rng.random(n) < conf**1.5
    label = np.where(right, pred, (pred + 1 + rng.integers(0, k - 1, n)) % k)
    pd.DataFrame({"true_label": label, "pred_label": pred, "confidence": conf}).to_csv(
        path, index=False
    )


def run(args: list, env: dict) -> tuple[float, float]:
    """(wall, cpu) seconds of one ``topcal`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "topcal.cli", *map(str, args)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="topcal-metrics-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    data, model = work / "rows.csv", work / "hist.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    if not data.exists():
        make_rows(args.rows, args.classes, data)
    if not model.exists():
        run(["fit", data, "--method", "hist", "-o", model], env)
    commands = {
        "apply": ["apply", model, data, "-o", work / "out.csv"],
        "metrics": ["metrics", data, "--model", model, "--json"],
    }
    best = {}
    for name, cmd in commands.items():
        for _ in range(args.repeat):
            load = loadavg()
            wall, cpu = run(cmd, env)
            print(f"{name:8s} wall {wall:7.2f} s  cpu {cpu:7.2f} s  (load before: {load})")
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    (aw, ac), (mw, mc) = best["apply"], best["metrics"]
    print(f"rows {args.rows:,} x {args.classes:,} classes")
    print(f"metrics / apply: wall {mw / aw:.2f} x, cpu {mc / ac:.2f} x")


if __name__ == "__main__":
    main()
