"""Helpers shared by the benchmark scripts: timing, memory, load, and the seeded test data
(Python puts ``benchmarks/`` on ``sys.path`` when a script there is run)."""

from __future__ import annotations

import os
import time
import tracemalloc

import numpy as np


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


def old_topcal(folder):
    """The older topcal exported as the package ``topcal_old`` in ``folder`` (``--old DIR``:
    ``git archive <commit> src/topcal | tar -x -C DIR; mv DIR/src/topcal DIR/topcal_old``), or
    None without a folder."""
    if not folder:
        return None
    import importlib
    import sys

    sys.path.insert(0, str(folder))
    return importlib.import_module("topcal_old")


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared: say how loaded it was)."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux
        return "n/a"


def make_data(n: int, k: int, seed: int):
    """Seeded probabilities (n, k) and labels, class-dependently miscalibrated.

    Logits z ~ N(0, 2^2) plus 2 on a random true class; the reported
    probabilities are softmax(z / T_j) with a per-column temperature T_j from
    0.5 (overconfident) to 2 (underconfident). Built in place (one n x k array).
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    z = rng.normal(0.0, 2.0, size=(n, k))
    z[np.arange(n), labels] += 2.0
    z /= np.linspace(0.5, 2.0, k)[None, :]
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z, labels
