"""Every command at many classes: next-token-like top-score outputs, 10^4 to 10^6 classes.

Generates, per class count K, top-score outputs as a language model's next-token predictions look:
the predicted class is Zipf-distributed over K classes (P(k) proportional to (k + 1)^-a, default
a = 1.1), the top score s ~ Beta(5, 1.5), the prediction is right with probability s^1.3, and a
wrong row's true class is another Zipf draw. Files (Parquet, or CSV with ``--csv``): ``data``
(``--rows`` labelled rows: pred, score, label), ``more`` (half as many labelled rows, another
seed, of the classes in ``data`` only: what ``update`` adds and ``threshold`` chooses on, held out
from the fit) and ``use`` (as ``more``, without labels: what ``apply`` and ``adapt`` read).

Each command runs as its own process (``python -m topcal.cli``, as a user runs it) under
``/usr/bin/time``: wall and CPU seconds (user + system: steadier than the wall time on a shared
machine), each also as a multiple of ``fit --method hist``'s (the unit), and peak resident memory.
``fit`` (auto) writes the model the later commands read (``--model hist``: hist's).
Commands that fail are reported with the last line of their error and the run goes on.

Run: ``python benchmarks/bench_many_classes.py --classes 1e4 1e5 1e6 [--rows 1e6] [--csv]
[--only fit-hist,apply] [--dask] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from _measure import loadavg


def generate(n: int, K: int, seed: int, *, zipf: float, labels: bool = True):
    """(pred, score, label or None) of ``n`` rows over ``K`` classes (module docstring)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, K + 1) ** zipf
    cdf = np.cumsum(p / p.sum())
    draw = lambda: np.minimum(np.searchsorted(cdf, rng.random(n)), K - 1)  # noqa: E731
    pred = draw()
    score = rng.beta(5.0, 1.5, n)
    right = rng.random(n) < score**1.3
    other = draw()
    other = np.where(other == pred, (pred + 1) % K, other)
    return pred, score, (np.where(right, pred, other) if labels else None)


def among(seen: np.ndarray, n: int, K: int, seed: int, *, zipf: float, labels: bool = True):
    """``n`` rows as :func:`generate` draws them, keeping only rows whose classes are in ``seen``
    (a model knows the classes of its fitting data only; new rows of other classes are refused)."""
    parts, got, s = [], 0, seed
    while got < n:
        pred, score, label = generate(2 * n, K, s, zipf=zipf)
        ok = seen[pred] & seen[label]
        parts.append((pred[ok], score[ok], label[ok]))
        got, s = got + int(ok.sum()), s + 1000
    pred, score, label = (np.concatenate(c)[:n] for c in zip(*parts))
    return pred, score, (label if labels else None)


def write(path: Path, pred, score, label) -> None:
    import pandas as pd

    cols = {"pred": pred, "score": score}
    if label is not None:
        cols["label"] = label
    frame = pd.DataFrame(cols)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)


def run(
    args: list[str], work: Path, timeout: float | None = None
) -> tuple[float, float, float, int, str]:
    """(wall s, CPU s, peak RSS GB, exit status, last stderr line or stdout's line count) of
    ``topcal ARGS``; past ``timeout`` seconds the command is stopped (SIGINT, as Ctrl-C)."""
    stats = work / "time.txt"
    cmd = ["/usr/bin/time", "-o", str(stats), "-f", "%e %U %S %M"]
    if timeout:
        cmd += ["timeout", "-s", "INT", f"{timeout:g}"]
    cmd += [sys.executable, "-m", "topcal.cli", *args]
    with open(work / "stderr.txt", "w") as err:
        r = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=err, text=True)
    last = stats.read_text().split()
    if timeout and r.returncode == 124:
        return float(last[-4]), float(last[-3]) + float(last[-2]), int(last[-1]) / 1e6, 124, (
            f"stopped after {timeout:g} s"
        )
    wall, cpu, rss = float(last[-4]), float(last[-3]) + float(last[-2]), int(last[-1]) / 1e6
    if r.returncode != 0:
        lines = [ln for ln in (work / "stderr.txt").read_text().splitlines() if ln.strip()]
        note = lines[-1][:100] if lines else ""
    else:
        note = f"{len(r.stdout.splitlines())} lines out"
    return wall, cpu, rss, r.returncode, note


def steps(ext: str, dask: bool, model: str = "model.json") -> dict[str, list[str]]:
    """Each command's arguments; the commands after the fits read ``model`` (auto's, or with
    ``--model hist`` the histogram's)."""
    data, more, use = f"data{ext}", f"more{ext}", f"use{ext}"
    out = {
        "fit-hist": ["fit", data, "--method", "hist", "-o", "hist.json"],
        "fit": ["fit", data, "-o", "model.json"],
        "apply": ["apply", model, use, "-o", f"applied{ext}"],
        "apply-interval": ["apply", model, use, "--interval", "0.9", "-o", f"iv{ext}"],
        "describe": ["describe", model],
        "metrics": ["metrics", data, "--model", model],
        "threshold": ["threshold", more, "--model", model, "-o", "t.json"],
        "adapt": ["adapt", model, use, "-o", "adapted.json"],
        "report": ["report", data, "-o", "rep", "--force"],
        "update": ["update", model, more, "-o", "updated.json"],
        "fit-chunked": ["fit", data, "--method", "hist", "--chunk-rows", "200000", "-o", "c.json"],
        "apply-chunked": ["apply", "hist.json", use, "--chunk-rows", "200000", "-o", f"ac{ext}"],
    }
    if dask:
        out["fit-dask"] = ["fit", data, "--method", "hist", "--engine", "dask", "-o", "d.json"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classes", type=float, nargs="+", default=[1e4, 1e5])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--csv", action="store_true", help="CSV files instead of Parquet")
    ap.add_argument("--only", default="", help="comma-separated commands to run (default all)")
    ap.add_argument("--dask", action="store_true", help="also fit on Dask (a local cluster)")
    ap.add_argument(
        "--model", choices=("auto", "hist"), default="auto", help="the model later commands read"
    )
    ap.add_argument("--work", default=None, help="folder for the files (default: a temporary one)")
    ap.add_argument(
        "--timeout", type=float, default=None, help="stop a command after this many seconds"
    )
    args = ap.parse_args(argv)
    n, ext = int(args.rows), (".csv" if args.csv else ".parquet")
    only = {s for s in args.only.split(",") if s}
    print(f"machine: {os.cpu_count()} cores; load {loadavg()}; {n:,} rows; zipf {args.zipf}")
    print(
        f"{'classes':>9s} {'command':15s} {'wall s':>8s} {'x hist':>7s} {'CPU s':>8s} "
        f"{'x hist':>7s} {'peak GB':>8s}  notes"
    )
    for K in (int(k) for k in args.classes):
        work = Path(args.work or tempfile.mkdtemp(prefix="topcal-many-")) / f"k{K}"
        work.mkdir(parents=True, exist_ok=True)
        pred, score, label = generate(n, K, 0, zipf=args.zipf)
        write(work / f"data{ext}", pred, score, label)
        seen = np.zeros(K, dtype=bool)
        seen[pred] = seen[label] = True
        write(work / f"more{ext}", *among(seen, n // 2, K, 1, zipf=args.zipf))
        write(work / f"use{ext}", *among(seen, n // 2, K, 2, zipf=args.zipf, labels=False))
        sizes = np.bincount(pred, minlength=K)
        print(
            f"{K:9d} data: {int((sizes > 0).sum()):,} classes predicted, median "
            f"{int(np.median(sizes[sizes > 0]))} rows a predicted class; load {loadavg()}"
        )
        unit = None
        model = "model.json" if args.model == "auto" else "hist.json"
        for name, cmd in steps(ext, args.dask, model).items():
            if only and name not in only:
                continue
            wall, cpu, rss, rc, note = run(cmd, work, args.timeout)
            if name == "fit-hist" and rc == 0:
                unit = (wall, cpu)
            if name in ("fit-hist", "fit") and rc == 0:
                model = work / cmd[cmd.index("-o") + 1]
                note += f"; model {model.stat().st_size / 1e6:.1f} MB"
            ratio = [
                f"{x / u:7.2f}" if unit else f"{'-':>7s}"
                for x, u in zip((wall, cpu), unit or (1, 1))
            ]
            status = "" if rc == 0 else f"EXIT {rc}: "
            print(
                f"{K:9d} {name:15s} {wall:8.1f} {ratio[0]} {cpu:8.1f} {ratio[1]} {rss:8.2f}  "
                f"{status}{note}",
                flush=True,
            )
        print(f"{K:9d} load after: {loadavg()}")
        if args.work is None:
            shutil.rmtree(work.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
