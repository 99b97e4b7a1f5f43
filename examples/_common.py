"""Helpers the example scripts share: where outputs go and where the bench data lie.

Not part of topcal: each example imports it only for these two small chores, so the scripts
stay about the workflow itself.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

#: The real networks' outputs (shared/data/bench beside the repository; TOPCAL_BENCH_DATA to
#: point elsewhere).
BENCH = Path(
    os.environ.get("TOPCAL_BENCH_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bench"
)


def output_dir(description: str) -> Path:
    """The ``--out`` folder of an example (created), from its command line."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default="example-output", help="folder for the figures and summary")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def bench_file(name: str) -> Path:
    """A file of the bench data, or a clear error saying where it was looked for."""
    path = BENCH / name
    if not path.is_file():
        raise SystemExit(f"error: {path} not found; set TOPCAL_BENCH_DATA to the bench folder")
    return path


def reliability(ax, confidence, correct, label, n_bins: int = 10) -> None:
    """Accuracy against mean confidence in equal-width bins (a reliability diagram's line)."""
    import numpy as np

    edges = np.linspace(0, 1, n_bins + 1)
    b = np.clip(np.digitize(confidence, edges[1:-1]), 0, n_bins - 1)
    keep = np.bincount(b, minlength=n_bins) > 0
    conf = np.bincount(b, confidence, n_bins)[keep] / np.bincount(b, minlength=n_bins)[keep]
    acc = np.bincount(b, correct, n_bins)[keep] / np.bincount(b, minlength=n_bins)[keep]
    ax.plot(conf, acc, "o-", label=label)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.legend()
