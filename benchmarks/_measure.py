"""Measurement helpers shared by the benchmark scripts (run them from any folder:
each script puts ``benchmarks/`` on ``sys.path`` itself, as Python does for a script)."""

from __future__ import annotations

import os
import time
import tracemalloc


def best_time(fn, repeat: int):
    """(fastest wall time of ``repeat`` calls, the last call's result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def peak_mb(fn) -> float:
    """tracemalloc peak of one call, in MB."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared: say how loaded it was)."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux
        return "n/a"
