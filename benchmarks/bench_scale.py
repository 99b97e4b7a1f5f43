"""Fit and apply beyond memory: in memory vs streaming vs Dask, next to the Parquet I/O floor.

Generates top-score Parquet data (pred, score, label; classes "c000".., one
file of 1M-row row groups per size, plus the same rows as a directory of
files for Dask), then times, each in a fresh process:

* floor-read      pyarrow reads every row group and converts it to pandas
                  (what any fit must at least do);
* floor-rw        the same, plus writing each batch back with one added
                  float column (what any apply must at least do);
* memory          topcal.read_data whole file, fit / predict + write (the
                  pre-streaming path; skipped above --max-memory-rows);
* stream          `topcal fit --chunk-rows` / `topcal apply` (bounded memory);
* dask            topcal.dask.fit / apply on a LocalCluster, 2 workers x 1
                  thread, over the directory of files.

Reported: wall time, rows/s, the ratio to the floor, and peak RSS of the
process (for Dask the driver and the largest worker). The method is
kde-mon2 (shrunk, the default rule of auto's candidates).

Run:  .venv/bin/python benchmarks/bench_scale.py --rows 1e6 1e7 --classes 10 100
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROW_GROUP = 1_000_000


def generate(path: Path, n: int, K: int, seed: int = 0) -> None:
    """Top-score data: accuracy rises with the score, every class predicted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = np.array([f"c{j:03d}" for j in range(K)])
    d = path.with_suffix("")  # the directory version (one file per row group) for Dask
    d.mkdir(parents=True, exist_ok=True)
    writer = None
    for i, start in enumerate(range(0, n, ROW_GROUP)):
        m = min(ROW_GROUP, n - start)
        pred = rng.integers(0, K, m)
        score = rng.beta(5, 1.5, m)
        right = rng.random(m) < score**1.5
        label = np.where(right, pred, (pred + rng.integers(1, K, m)) % K)
        table = pa.table(
            {
                "pred": pa.array(names[pred]).dictionary_encode(),
                "score": score,
                "label": pa.array(names[label]).dictionary_encode(),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=ROW_GROUP)
        pq.write_table(table, d / f"part{i:05d}.parquet")
    writer.close()


# ----------------------------------------------------------------- children
def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(mode: str, task: str, path: str, model: str, out: str) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    extra = {}
    if mode.startswith("floor"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        writer = None
        for batch in pf.iter_batches(batch_size=ROW_GROUP):
            frame = batch.to_pandas()
            if mode == "floor-rw":
                frame["confidence"] = 0.5
                table = pa.Table.from_pandas(frame, preserve_index=False)
                writer = writer or pq.ParquetWriter(out, table.schema)
                writer.write_table(table)
        if writer is not None:
            writer.close()
    elif mode == "memory":
        import topcal
        from topcal.io import read_data

        if task == "fit":
            cal = topcal.calibrator("kde-mon2").fit(read_data(path))
            cal.save(out)
        else:
            from topcal.cli import main

            assert main(["apply", model, path, "--chunk-rows", str(10**12), "-o", out]) == 0
    elif mode == "stream":
        from topcal.cli import main

        if task == "fit":
            assert (
                main(
                    ["fit", path, "--method", "kde-mon2", "--chunk-rows", str(ROW_GROUP), "-o", out]
                )
                == 0
            )
        else:
            assert main(["apply", model, path, "--chunk-rows", str(ROW_GROUP), "-o", out]) == 0
    elif mode == "dask":
        from distributed import Client, LocalCluster

        from topcal import dask as tdask
        from topcal.persist import load

        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as lc,
            Client(lc) as client,
        ):
            t0 = time.perf_counter()  # the cluster's start-up (~5 s) is not the method's cost
            ddf = tdask.read_parquet(str(Path(path).with_suffix("")))
            if task == "fit":
                cal = tdask.fit(ddf, "kde-mon2")
                cal.save(out)
                if Path(
                    model
                ).exists():  # the streamed fit of the same rows (same statistics expected)
                    streamed = load(model).evidence_.stats
                    extra["stats_equal_streamed"] = bool(cal.evidence_.stats.equals(streamed))
            else:
                tdask.apply(load(model), ddf).to_parquet(out, write_index=False)
            extra["worker_peak_mb"] = max(client.run(_peak_mb).values())
    return {"seconds": time.perf_counter() - t0, "peak_mb": _peak_mb(), **extra}


def run_child(mode, task, path, model, out) -> dict:
    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_scale "
        f"as b; "
        f"print(json.dumps(b.child({mode!r}, {task!r}, {path!r}, {model!r}, {out!r})))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode != 0:
        return {
            "error": r.stderr.strip().splitlines()[-1]
            if r.stderr.strip()
            else f"exit {r.returncode}"
        }
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--classes", nargs="+", type=int, default=[10, 100])
    ap.add_argument("--modes", nargs="+", default=["floor", "memory", "stream", "dask"])
    ap.add_argument("--tasks", nargs="+", default=["fit", "apply"])
    ap.add_argument(
        "--max-memory-rows", type=float, default=2e7, help="skip the in-memory path above this"
    )
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="topcal-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores; data in {work}")
    print(
        f"{'rows':>11} {'K':>4} {'task':5} {'mode':9} {'seconds':>8} {'Mrows/s':>8} "
        f"{'vs floor':>8} "
        f"{'peak MB':>8} {'worker MB':>9}"
    )
    for n in (int(r) for r in args.rows):
        for K in args.classes:
            data = work / f"d_{n}_{K}.parquet"
            if not data.exists():
                t = time.perf_counter()
                generate(data, n, K)
                print(
                    f"# generated {n:,} rows x {K} classes in {time.perf_counter() - t:.1f} s "
                    f"({data.stat().st_size / 2**20:.0f} MiB)",
                    flush=True,
                )
            model = work / f"m_{n}_{K}.json"
            for task in args.tasks:
                floor = None
                for mode in args.modes:
                    if mode == "memory" and n > args.max_memory_rows:
                        continue
                    modes = (
                        [("floor-read" if task == "fit" else "floor-rw")]
                        if mode == "floor"
                        else [mode]
                    )
                    for m in modes:
                        if task == "apply" and not model.exists():
                            r0 = run_child("stream", "fit", str(data), "", str(model))
                            if "error" in r0:
                                print(f"# cannot fit the apply model: {r0['error']}")
                                break
                        out = work / f"out_{m}_{task}.{'json' if task == 'fit' else 'parquet'}"
                        target = str(model) if (task == "fit" and m == "stream") else str(out)
                        r = run_child(m, task, str(data), str(model), target)
                        _cleanup(out)
                        if "error" in r:
                            print(f"{n:>11,} {K:>4} {task:5} {m:9} error: {r['error']}", flush=True)
                            continue
                        rate = n / r["seconds"] / 1e6
                        if m.startswith("floor"):
                            floor = rate
                        ratio = f"{rate / floor:8.2f}" if floor else f"{'-':>8}"
                        wk = f"{r['worker_peak_mb']:9.0f}" if "worker_peak_mb" in r else f"{'-':>9}"
                        same = (
                            f"  statistics equal to the streamed fit's: {r['stats_equal_streamed']}"
                            if "stats_equal_streamed" in r
                            else ""
                        )
                        print(
                            f"{n:>11,} {K:>4} {task:5} {m:9} {r['seconds']:8.2f} {rate:8.2f} "
                            f"{ratio} "
                            f"{r['peak_mb']:8.0f} {wk}{same}",
                            flush=True,
                        )


def _cleanup(p: Path) -> None:
    import shutil

    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists():
        p.unlink()


if __name__ == "__main__":
    main()
