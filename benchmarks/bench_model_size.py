"""Model file size and ``apply`` time of ``auto`` against ``hist`` at 1,000 classes (issue 34).

Data: the two ImageNet bench sets (``imagenet-resnet101.csv``, ``imagenet-densenet161.csv``:
``true_label,pred_label,confidence``, 50,000 rows). Per set: a seeded random 25,000 rows are
written to a CSV and fitted by the command line itself, ``topcal fit FILE -o M.json`` (``auto``,
the default) and ``topcal fit FILE --method hist -o H.json``, in this process; then ``topcal apply
MODEL SET.csv -o OUT.csv`` on the whole set (50,000 rows) with each model, alternately, ``--repeat``
times (the first pair unmeasured: imports). Prints per set: the file sizes (MB, and auto's bytes a
class), the apply times (minimum and median) and their ratio auto / hist, and the load average.
With ``--full`` also an ``auto`` fit whose kde tables are kept whole (``KDEBase.compact = False``:
the layout before 2026-11-27) and its file size and apply time.

Targets (issue 34): model file <= 5 MB at 1,000 classes; apply with it <= 1.5 x apply with hist.

Run: ``.venv/bin/python benchmarks/bench_model_size.py [--data NAME ...] [--repeat 5] [--full]
[--seed 0]`` (``PYTHONPATH=src`` from a checkout).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from topcal.calibrators.kde.calibrator import KDEBase
from topcal.cli import main as topcal_main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import loadavg  # noqa: E402
from bench_heldout import BENCH  # noqa: E402

SETS = ("imagenet-resnet101.csv", "imagenet-densenet161.csv")
FIT_ROWS = 25_000


def cli(*args) -> float:
    """Run ``topcal ARGS`` in this process, quietly; its wall time in seconds."""
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = topcal_main([str(a) for a in args])
    if code != 0:
        raise SystemExit(f"topcal {' '.join(map(str, args))} failed ({code})")
    return time.perf_counter() - t


def fit_auto(fit_csv, out, *, full: bool) -> None:
    was = KDEBase.compact
    KDEBase.compact = not full
    try:
        cli("fit", fit_csv, "-o", out)
    finally:
        KDEBase.compact = was


def bench_set(name: str, tmp: Path, args) -> None:
    path = BENCH / name
    frame = pd.read_csv(path)
    rows = np.sort(np.random.default_rng(args.seed).permutation(len(frame))[:FIT_ROWS])
    fit_csv = tmp / f"fit-{name}"
    frame.iloc[rows].to_csv(fit_csv, index=False)
    k = int(max(frame["true_label"].max(), frame["pred_label"].max())) + 1
    models = {"hist": tmp / "hist.json", "auto": tmp / "auto.json"}
    cli("fit", fit_csv, "--method", "hist", "-o", models["hist"])
    fit_auto(fit_csv, models["auto"], full=False)
    if args.full:
        models["auto (full tables)"] = tmp / "auto-full.json"
        fit_auto(fit_csv, models["auto (full tables)"], full=True)
    out = tmp / "out.csv"
    times = {m: [] for m in models}
    for r in range(args.repeat + 1):
        for m, p in models.items():
            t = cli("apply", p, path, "-o", out)
            if r:  # the first round pays the imports
                times[m].append(t)
    print(
        f"\n{name}: fit on {FIT_ROWS} of {len(frame)} rows (seed {args.seed}), {k} classes; "
        f"apply on all {len(frame)} rows, {args.repeat} rounds; load {loadavg()}"
    )
    print("| model | file MB | bytes a class | apply min s | apply median s | ÷ hist (min, med.) |")
    print("|---|---:|---:|---:|---:|---|")
    h_min, h_med = min(times["hist"]), statistics.median(times["hist"])
    for m, p in models.items():
        size = os.path.getsize(p)
        t_min, t_med = min(times[m]), statistics.median(times[m])
        print(
            f"| {m} | {size / 1e6:.2f} | {size / k:,.0f} | {t_min:.2f} | {t_med:.2f} | "
            f"{t_min / h_min:.2f}, {t_med / h_med:.2f} |"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=list(SETS), help="file names in shared/data/bench")
    ap.add_argument("--repeat", type=int, default=5, help="measured apply rounds (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the 25,000 fitting rows")
    ap.add_argument("--full", action="store_true", help="also auto with the kde tables whole")
    args = ap.parse_args(argv)
    print(f"bench_model_size: {os.cpu_count()} cores, load {loadavg()}")
    with tempfile.TemporaryDirectory() as d:
        for name in args.data:
            bench_set(name, Path(d), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
