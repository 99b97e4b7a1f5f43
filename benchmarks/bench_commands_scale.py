"""Every command at ImageNet scale, side by side: ``fit``, ``describe``, ``report`` and ``adapt``
with their defaults on the two ImageNet sets (issue 34's "done when": ``report`` and ``adapt``
each at most 3 x ``fit``'s time, ``describe`` at most 60 lines).

Data: ``../shared/data/bench/imagenet-{resnet101,densenet161}.csv`` (true_label, pred_label,
confidence; 50,000 rows, 1,000 classes). Per set the rows are shuffled with ``--seed`` (default 0)
and split in halves: the first 25,000 rows are the labelled file that ``fit`` and ``report`` read,
the other 25,000 (labels dropped) the use set of ``adapt``. Each command runs as its own process
(``python -m topcal.cli``, as a user runs it; stderr to a file, so progress is the plain lines),
one after the other, ``--repeat`` times (the fastest kept). Printed per set and command: wall
seconds, CPU seconds of the process (user + system; steadier than the wall time on a shared
machine), each as a multiple of ``fit``'s, the output's lines (``describe``) and the load average
before the set. ``--skip adapt`` leaves a command out (adapt took ~16 min per set before issue 34,
item 4, which another change addresses).

Run: ``python benchmarks/bench_commands_scale.py [--sets resnet101,densenet161] [--repeat 1]
[--skip adapt] [--data-dir DIR] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _measure import loadavg

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bench"
COMMANDS = ("fit", "describe", "report", "adapt")


def _split(src: Path, work: Path, seed: int) -> tuple[Path, Path]:
    """The labelled half and the unlabelled use half of ``src``, written to ``work``."""
    lines = src.read_text().splitlines()
    head, rows = lines[0], lines[1:]
    order = np.random.default_rng(seed).permutation(len(rows))
    half = len(rows) // 2
    fit, use = work / "fit.csv", work / "use.csv"
    fit.write_text("\n".join([head] + [rows[i] for i in order[:half]]) + "\n")
    cols = head.split(",")
    keep = [j for j, c in enumerate(cols) if c != "true_label"]
    use.write_text(
        "\n".join(
            [",".join(cols[j] for j in keep)]
            + [",".join(rows[i].split(",")[j] for j in keep) for i in order[half:]]
        )
        + "\n"
    )
    return fit, use


def _run(args: list[str], work: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, stdout) of ``topcal ARGS``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with open(work / "stderr.txt", "w") as err:
        r = subprocess.run(
            [sys.executable, "-m", "topcal.cli", *args],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode != 0:
        raise SystemExit(f"topcal {' '.join(args)} failed:\n{(work / 'stderr.txt').read_text()}")
    return wall, cpu, r.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="resnet101,densenet161")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", default="", help="commands to leave out, e.g. adapt")
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--work", default=None, help="folder for the files (default: a temporary one)")
    args = ap.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    print(f"machine: {os.cpu_count()} cores; python -m topcal.cli, defaults; best of {args.repeat}")
    print(
        f"{'set':12s} {'command':9s} {'wall s':>8s} {'x fit':>6s} {'CPU s':>8s} {'x fit':>6s}"
        f"  notes"
    )
    for name in args.sets.split(","):
        work = Path(args.work or tempfile.mkdtemp(prefix="topcal-scale-")) / name
        work.mkdir(parents=True, exist_ok=True)
        fit_csv, use_csv = _split(Path(args.data_dir) / f"imagenet-{name}.csv", work, args.seed)
        load = loadavg()
        steps = {
            "fit": ["fit", fit_csv.name, "-o", "model.json"],
            "describe": ["describe", "model.json"],
            "report": ["report", fit_csv.name, "-o", "rep"],
            "adapt": ["adapt", "model.json", use_csv.name, "-o", "adapted.json"],
        }
        base = None
        for cmd in COMMANDS:
            if cmd in skip:
                continue
            best = None
            for _ in range(args.repeat):
                if cmd == "report":
                    shutil.rmtree(work / "rep", ignore_errors=True)
                got = _run(steps[cmd], work)
                best = got if best is None or got[0] < best[0] else best
            wall, cpu, out = best
            base = base or (wall, cpu)
            note = f"{len(out.splitlines())} lines" if cmd == "describe" else ""
            print(
                f"{name:12s} {cmd:9s} {wall:8.1f} {wall / base[0]:6.2f} {cpu:8.1f} "
                f"{cpu / base[1]:6.2f}  {note}",
                flush=True,
            )
        print(f"{name:12s} load average before the set: {load}; after: {loadavg()}")
        if args.work is None:
            shutil.rmtree(work.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
