"""Record independent implementations' calibration errors on the bench sets, for the suite.

For every file of ``../shared/data/bench`` (the networks' test outputs): the top-label
confidence and whether the prediction is right, then

* TorchMetrics' ``BinaryCalibrationError(n_bins=15, norm="l1")`` on (confidence, right) and, where
  the file has full probability vectors, ``MulticlassCalibrationError(n_bins=15, norm="l1")`` on
  them (the pooled 15-bin ECE of Guo et al. that published tables quote);
* relplot's ``smECE(confidence, right)`` and its bandwidth (smooth ECE, Blasiok and Nakkiran).

Written to ``tests/data/metrics_peers.json`` (``--out``), which ``tests/test_overall.py`` reads:
the suite compares topcal's ``ece15`` and ``smece`` with these numbers without installing the
peers. Needs the bench extra (``pip install -e .[bench]`` and torchmetrics).

Run: ``python benchmarks/bench_metrics_peers.py [--data-dir DIR] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bench"
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "metrics_peers.json"


def top_label(path: Path):
    """(confidence, right, probabilities or None) of a bench file, as topcal reads it."""
    from topcal.data import TopLabelData
    from topcal.io import read_data

    if path.suffix == ".npz":
        z = np.load(path)
        probs = z["predictions"]
        data = TopLabelData.from_probs(probs, z["ground_truth"])
        return data.normalized_score(), (data.tp > 0), (probs, z["ground_truth"])
    data = read_data(str(path))
    return data.normalized_score(), (data.tp > 0), None


def main() -> None:
    import relplot
    import torch
    import torchmetrics
    from torchmetrics.classification import BinaryCalibrationError, MulticlassCalibrationError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    sets = {}
    for path in sorted(args.data_dir.glob("*")):
        if path.suffix not in (".npz", ".csv"):
            continue
        conf, right, full = top_label(path)
        binary = BinaryCalibrationError(n_bins=15, norm="l1")
        row = {
            "rows": int(conf.size),
            "torchmetrics_binary_ece15": float(
                binary(torch.tensor(conf), torch.tensor(right.astype(np.int64)))
            ),
        }
        if full is not None:
            probs, labels = full
            multi = MulticlassCalibrationError(num_classes=probs.shape[1], n_bins=15, norm="l1")
            row["torchmetrics_multiclass_ece15"] = float(
                multi(torch.tensor(probs), torch.tensor(labels))
            )
        value, width = relplot.smECE(conf, right.astype(np.float64), return_width=True)
        row["relplot_smece"] = float(value)
        row["relplot_bandwidth"] = float(width)
        sets[path.name] = row
        print(path.name, row)
    record = {
        "source": "benchmarks/bench_metrics_peers.py",
        "versions": {
            "torchmetrics": torchmetrics.__version__,
            "relplot": getattr(relplot, "__version__", "1.0.3"),
            "torch": torch.__version__,
        },
        "sets": sets,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
