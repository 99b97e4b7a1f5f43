"""Training throughput of the ensemble experiment's MLPs: batched vs one network at a time.

Trains 784-300-100-10 MLPs (minibatch 1000, Adam) on MNIST-format data for a
few steps and reports network-steps per second, for M networks trained
together with stacked weights (torch.baddbmm) and for one network at a time,
in float32 and with bfloat16 autocast.

    .venv/bin/python benchmarks/bench_training.py                 # Fashion-MNIST from Debian
    .venv/bin/python benchmarks/bench_training.py --sizes 1 10 40 --steps 30 --threads 2

The first (warm-up) call is not timed. Other processes on the machine slow
every number: report the load average with the results (printed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[1, 5, 10, 20, 40], help="networks per batch"
    )
    ap.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    ap.add_argument("--repeats", type=int, default=2, help="best of this many timings")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all CPUs available)"
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument(
        "--precision",
        nargs="+",
        default=["float32", "bfloat16"],
        choices=["float32", "bfloat16"],
        help="training precisions to measure (default: both)",
    )
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    import torch

    from topcal.experiments.idx import load_mnist
    from topcal.experiments.mlp import (
        TrainConfig,
        available_cpus,
        network_seeds,
        pick_device,
        train_networks,
    )

    dev = pick_device(args.device)
    threads = args.threads or available_cpus()
    torch.set_num_threads(threads)
    d = load_mnist(args.data_dir)
    x = torch.from_numpy(
        d.train_images.reshape(len(d.train_images), -1).astype(np.float32) / 255
    ).to(dev)
    y = torch.from_numpy(d.train_labels.astype(np.int64)).to(dev)

    def timed(m: int, cfg) -> float:
        best = float("inf")
        for r in range(args.repeats):
            t0 = time.perf_counter()
            train_networks(
                x, y, network_seeds(r, range(m)), cfg, n_classes=10, device=dev, progress=False
            )
            if dev.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best

    rows = []
    print(
        f"device {dev}, torch {torch.__version__}, {threads} threads, "
        f"{platform.processor() or platform.machine()}"
    )
    print(
        f"{'precision':>9} {'M':>4} {'batched net-steps/s':>20} {'one-at-a-time':>14} "
        f"{'speed-up':>9}"
    )
    for prec in args.precision:
        cfg = TrainConfig(steps=args.steps, precision=prec)
        timed(1, cfg)  # warm-up: allocator, kernels, thread pool
        one = args.steps / timed(1, cfg)
        for m in args.sizes:
            rate = m * args.steps / timed(m, cfg)
            rows.append(
                {
                    "precision": prec,
                    "networks": m,
                    "batched_net_steps_per_s": rate,
                    "one_at_a_time_net_steps_per_s": one,
                    "speedup": rate / one,
                }
            )
            print(f"{prec:>9} {m:>4} {rate:>20.1f} {one:>14.1f} {rate / one:>8.2f}x")
    load = os.getloadavg()
    print(f"load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "device": str(dev),
                    "threads": threads,
                    "steps": args.steps,
                    "rows": rows,
                    "loadavg": load,
                },
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
