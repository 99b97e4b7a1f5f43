"""The CLI's read-to-fit path: ``topcal fit --method kde-mon2`` on a Parquet file against a bare
``pandas.read_parquet`` of the same file (issue 36, item 4: at most 3.5 x at 10^6 x 10).

Data (seeded, written once to ``--work``), 10^6 rows x 10 classes by default:

* ``scale``: bench_scale.py's top-score file (pred, score, label; names "c000".. stored as Parquet
  dictionaries, read by pandas as categoricals);
* ``text``: the same columns as plain text (names "c000"..);
* ``probs``: ``p_<class>`` probability columns and integer labels.

Two measures, each interleaved (every round: the read, then the fit, then the older topcal's fit
with ``--old``), the minimum over ``--repeat`` rounds reported:

* ``process``: a fresh interpreter each, as a user runs them: ``python -m topcal.cli fit FILE
  --method kde-mon2 -o MODEL`` against ``python -c "import pandas; pandas.read_parquet(FILE)"``
  (start-up and imports on both sides);
* ``in-process``: ``topcal.cli.main([...])`` against ``pandas.read_parquet`` in this process
  (imports done; the fit's own work against the read's).

``--old DIR``: an older topcal exported as the package ``topcal_old`` in DIR (``git archive
<commit> src/topcal | tar -x -C DIR; mv DIR/src/topcal DIR/topcal_old``), timed the same way.

Run: python benchmarks/bench_read_fit.py [--rows 1e6] [--classes 10] [--repeat 3]
[--layouts scale text probs] [--old DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _measure import loadavg, make_data

SRC = Path(__file__).resolve().parents[1] / "src"


def write(layout: str, path: Path, n: int, k: int) -> None:
    import pandas as pd

    if layout == "scale":
        import bench_scale

        bench_scale.generate(path, n, k)
        return
    probs, labels = make_data(n, k, 0)
    if layout == "probs":
        frame = pd.DataFrame({f"p_{j}": probs[:, j] for j in range(k)})
        frame["label"] = labels
    else:
        names = np.array([f"c{j:03d}" for j in range(k)], dtype=object)
        pred = probs.argmax(1)
        frame = pd.DataFrame(
            {"pred": names[pred], "score": probs[np.arange(n), pred], "label": names[labels]}
        )
    frame.to_parquet(path, index=False)


def timed_process(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layouts", nargs="+", default=["scale", "text", "probs"])
    ap.add_argument("--measures", nargs="+", default=["process", "in-process"])
    ap.add_argument("--old", help="a folder holding an older topcal as the package topcal_old")
    ap.add_argument("--work", help="where the data files go (default: a temporary folder)")
    args = ap.parse_args(argv)
    n, k = int(args.rows), args.classes
    work = Path(args.work or tempfile.mkdtemp(prefix="topcal-read-fit-"))
    work.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    sys.path.insert(0, str(SRC))
    from topcal.cli import main as cli_main

    old_main = None
    if args.old:
        sys.path.insert(0, args.old)
        from topcal_old.cli import main as old_main
    env = dict(os.environ, PYTHONPATH=str(SRC))
    old_env = dict(os.environ, PYTHONPATH=args.old or "")
    py = sys.executable
    print(f"{n:.0e} rows x {k} classes; repeat {args.repeat}, interleaved, minimum over rounds")
    print(
        "| layout | measure | read s | fit s | fit ÷ read |"
        + (" old fit s | old ÷ read |" if args.old else "")
    )
    print("|---|---|---:|---:|---:|" + ("---:|---:|" if args.old else ""))
    for layout in args.layouts:
        path = work / f"{layout}_{n}_{k}.parquet"
        if not path.exists():
            write(layout, path, n, k)
        model = work / "model.json"
        for measure in args.measures:
            best = {"read": np.inf, "fit": np.inf, "old": np.inf}
            load = loadavg()
            warm_up = measure == "in-process"  # a first, uncounted round (imports, caches)
            for rnd in range(args.repeat + warm_up):
                model.unlink(missing_ok=True)
                fit = ["fit", str(path), "--method", "kde-mon2", "-o", str(model)]
                if measure == "process":
                    read = [py, "-c", f"import pandas; pandas.read_parquet({str(path)!r})"]
                    got = {
                        "read": timed_process(read, env),
                        "fit": timed_process([py, "-m", "topcal.cli", *fit], env),
                    }
                    if args.old:
                        model.unlink(missing_ok=True)
                        got["old"] = timed_process([py, "-m", "topcal_old.cli", *fit], old_env)
                else:
                    got = {}
                    t = time.perf_counter()
                    pd.read_parquet(path)
                    got["read"] = time.perf_counter() - t
                    for name, run in (("fit", cli_main), ("old", old_main)):
                        if run is None:
                            continue
                        model.unlink(missing_ok=True)
                        with (
                            contextlib.redirect_stdout(io.StringIO()),
                            contextlib.redirect_stderr(io.StringIO()),
                        ):
                            t = time.perf_counter()
                            assert run(fit) == 0
                            got[name] = time.perf_counter() - t
                for key, v in got.items():
                    if rnd or not warm_up:
                        best[key] = min(best[key], v)
            row = (
                f"| {layout} | {measure} | {best['read']:.3f} | {best['fit']:.3f} | "
                f"{best['fit'] / best['read']:.2f} |"
            )
            if args.old:
                row += f" {best['old']:.3f} | {best['old'] / best['read']:.2f} |"
            print(row + f"  (load {load})", flush=True)
        model.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
