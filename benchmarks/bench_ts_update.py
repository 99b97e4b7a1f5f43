"""``update`` of sts/csts from loss tables vs a fit on all the data, on real network outputs.

For each netcal-format ``.npz`` (``predictions``: softmax outputs, ``ground_truth``)
given on the command line (CIFAR-10/100 outputs of LeNet-5, WideResNet, DenseNet),
and for simulated logits: fit on all rows, and fit on the first of ``--parts`` random
parts then ``update`` with each other part; report the largest relative difference
of the temperatures, the largest difference of the predictions, the fit time with
and without the tables (``keep_stats``), and the size of the tables in the model
file per class.

Run:  .venv/bin/python benchmarks/bench_ts_update.py ../shared/data/bench/*.npz --parts 7
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

import topcal


def _simulated(n=20000, K=10, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.5, (n, K)) + np.linspace(0, 1, K)
    sharp = np.linspace(0.45, 1.6, K)[z.argmax(1)][:, None]
    q = np.exp(z * sharp - (z * sharp).max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(q, axis=1)).sum(axis=1).clip(0, K - 1)
    return topcal.TopLabelData.from_logits(z, y)


def _timed_fit(method, params, data):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = topcal.calibrator(method, **params).fit(data)
    return cal, time.perf_counter() - t


def measure(label, data, parts, seed):
    rng = np.random.default_rng(seed)
    split = np.array_split(rng.permutation(data.n_rows), parts)
    for method, params in (
        ("sts", {"keep_stats": True}),
        ("csts", {"keep_stats": True}),
        ("csts", {"loss": "brier", "keep_stats": True}),
    ):
        whole, t_full = _timed_fit(method, params, data)
        _, t_plain = _timed_fit(method, {**params, "keep_stats": False}, data)
        cal, _ = _timed_fit(method, params, data.subset(split[0]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for idx in split[1:]:
                cal.update(data.subset(idx))
        fitted = whole.fitted_classes_
        t_rel = float(np.max(np.abs(cal.temperature_[fitted] / whole.temperature_[fitted] - 1)))
        d_pred = float(np.max(np.abs(cal.predict(data) - whole.predict(data))))
        size = len(json.dumps(cal.to_dict()["evidence"]["stats"])) / data.n_classes
        name = method + ("-brier" if "loss" in params else "")
        print(
            f"| {label} | {data.n_rows} x {data.n_classes} | {name} | {t_rel:.1e} | {d_pred:.1e} | "
            f"{t_plain:.2f} | {t_full:.2f} | {size / 1000:.1f} |",
            flush=True,
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="netcal .npz files (predictions, ground_truth)")
    ap.add_argument("--parts", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(
        "| data | n x K | method | max rel. diff. T | max diff. confidence | fit s (no tables) | "
        "fit s "
        "(with tables) | tables KB / class |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for f in args.files:
        z = np.load(f)
        data = topcal.TopLabelData.from_probs(
            z["predictions"].astype(np.float64), z["ground_truth"].astype(int)
        )
        measure(Path(f).stem, data, args.parts, args.seed)
    measure("simulated logits", _simulated(seed=args.seed), args.parts, args.seed)


if __name__ == "__main__":
    main()
