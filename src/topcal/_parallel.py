"""Work on threads where the machine has cores to spare: the CPUs this process may use
(:func:`available_cpus`), and items whose random draws must come from one stream in order
while the work on them runs on several threads (:func:`in_threads`).

numpy's and scipy's array work releases the GIL, so threads run it side by side; the draws
stay in one generator, made in turn, so every figure is the one-thread figure bit for bit.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from . import _progress
from ._numeric import one_blas_thread

__all__ = ["available_cpus", "in_threads"]


def available_cpus() -> int:
    """CPUs this process may run on (``os.sched_getaffinity`` where it exists)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def in_threads(
    work, draw, n: int, threads: int, desc: str | None = None, unit: str = ""
) -> list:
    """``[work(draw()) for _ in range(n)]`` on up to ``threads`` threads (a progress bar
    ``desc`` where given).

    Every ``draw()`` is made under one lock, in turn, and its result keeps its place: the
    draws come from one random stream in the order a loop would make them, whatever the
    threads. BLAS runs on one thread meanwhile (the threads are the parallelism). A
    worker's error stops the others after their current item and is raised here."""
    out: list = [None] * n
    threads = max(1, min(int(threads), n))
    with _progress.bar(total=n, desc=desc, unit=unit, show=desc is not None) as bar:
        if threads == 1:
            for s in range(n):
                out[s] = work(draw())
                bar.update(1)
            return out
        lock, state = threading.Lock(), {"next": 0, "stop": False}

        def worker():
            while True:
                with lock:
                    s = state["next"]
                    if s >= n or state["stop"]:
                        return
                    state["next"] = s + 1
                    drawn = draw()
                result = work(drawn)
                with lock:
                    out[s] = result
                    bar.update(1)

        with one_blas_thread(), ThreadPoolExecutor(threads) as pool:
            jobs = [pool.submit(worker) for _ in range(threads)]
            try:
                for job in jobs:
                    job.result()
            finally:
                state["stop"] = True
    return out
