"""Benchmark: peak memory of ``auto``'s fit (and its model file) against the input, many classes.

Issue 37: auto on a 2,000 x 10^4 probability matrix peaked at 4.5 GB, ~28 x the input; target
<= 6 x. Each cell runs in a fresh subprocess (so one cell's arrays do not count in the next):
the seeded probabilities of ``_measure.make_data`` are built first, then ``auto`` is fitted on
them and its model serialised (``topcal.persist.dumps``, what ``topcal fit -o`` writes, which
builds the label-shift counts). Reported: the tracemalloc peak of fit + dumps (Python and numpy
allocations) and the growth of the process's maximum resident set over the same span, both as
multiples of the n x K float64 input; the time; the method auto chose.

Usage: PYTHONPATH=src python benchmarks/bench_auto_memory.py [--cells 2000x10000 2000x3000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _measure import loadavg

CHILD = r"""
import json, resource, sys, time, tracemalloc, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {bench!r})
from _measure import make_data
import topcal
n, k = {n}, {k}
p, y = make_data(n, k, 0)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tracemalloc.start()
t = time.perf_counter()
model = topcal.calibrator("auto").fit(p, y)
text = topcal.persist.dumps(model)
peak = tracemalloc.get_traced_memory()[1]
seconds = time.perf_counter() - t
tracemalloc.stop()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
print(json.dumps({{"input": p.nbytes, "peak": peak, "rss": rss, "seconds": seconds,
                  "chose": model.method_}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cells", nargs="+", default=["2000x10000"], help="n x K cells, e.g. 2000x10000"
    )
    args = ap.parse_args()
    bench = os.path.dirname(os.path.abspath(__file__))
    print(f"{os.cpu_count()} cores; load average {loadavg()}")
    print(
        f"{'n x K':>12s} {'input MB':>9s} {'peak MB':>8s} {'peak/in':>8s} {'RSS+ MB':>8s} "
        f"{'RSS+/in':>8s} {'s':>6s}  chose"
    )
    for cell in args.cells:
        n, k = (int(float(v)) for v in cell.lower().split("x"))
        code = CHILD.format(bench=bench, n=n, k=k)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{cell:>12s} failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        mb = 1e6
        inp = d["input"]
        print(
            f"{cell:>12s} {inp / mb:9.0f} {d['peak'] / mb:8.0f} {d['peak'] / inp:8.2f} "
            f"{d['rss'] / mb:8.0f} {d['rss'] / inp:8.2f} {d['seconds']:6.0f}  {d['chose']}",
            flush=True,
        )
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
