"""Fit time and traced peak memory of two topcal versions interleaved in one process: this tree
(topcal)
and an older one exported as the package topcal_old (git archive <commit> src/topcal | tar -x -C
DIR;
mv DIR/src/topcal DIR/topcal_old). Usage: PYTHONPATH=src python benchmarks/bench_before_after.py
DIR 1e5x10,1e6x10 hist:0,cum-opt:0,sts 2   (name:0 = shrinkage 0; last argument: rounds after a
warm-up)."""

import sys
import time
import warnings
import gc
import tracemalloc

sys.path.insert(0, sys.argv.pop(1))
import topcal
import topcal_old
from _measure import make_data, loadavg  # noqa: E402 (benchmarks/ is on sys.path when run from there)

warnings.simplefilter("ignore")
cells = [tuple(int(float(x)) for x in c.split("x")) for c in sys.argv[1].split(",")]
methods = [m.split(":") for m in sys.argv[2].split(",")]  # name[:m0]
rep = int(sys.argv[3]) if len(sys.argv) > 3 else 3
for n, k in cells:
    probs, labels = make_data(n, k, 0)
    dn, do = (
        topcal.TopLabelData.from_probs(probs, labels),
        topcal_old.TopLabelData.from_probs(probs, labels),
    )
    print(f"## {n:.0e} x {k}  load {loadavg()}")
    print("| method | before s | after s | before ÷ after | peak ÷ input before | after |")
    for spec in methods:
        name, p = spec[0], ({"shrinkage": 0} if len(spec) > 1 else {})
        best = {"old": 1e9, "new": 1e9}
        for r in range(rep + 1):
            for lab, mod, d in (("old", topcal_old, do), ("new", topcal, dn)):
                t = time.perf_counter()
                mod.calibrator(name, **p).fit(d)
                dt = time.perf_counter() - t
                if r:
                    best[lab] = min(best[lab], dt)
                gc.collect()
        mem = {}
        for lab, mod, d in (("old", topcal_old, do), ("new", topcal, dn)):
            tracemalloc.start()
            mod.calibrator(name, **p).fit(d)
            mem[lab] = tracemalloc.get_traced_memory()[1] / probs.nbytes
            tracemalloc.stop()
        print(
            f"| {':'.join(spec)} | {best['old']:.4f} | {best['new']:.4f} | "
            f"{best['old'] / best['new']:.2f} | {mem['old']:.2f} | {mem['new']:.2f} |",
            flush=True,
        )
