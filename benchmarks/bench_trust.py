"""Do the precision guarantees of ``topcal threshold`` hold on real networks' outputs? (issue 23,
item 3)

Data: every file of ``shared/data/bench`` (five CIFAR-10/100 networks with
full probability vectors, read as top-label data; two ImageNet models with
the top score only) and the PhANNs test set (binned counts, used as weights).

Protocol, per data set: a fixed random 30% of the samples (``--fit-share``)
fits the calibrator (``--method``, default ``hist``); it is never used again.
The other 70% are split ``--splits`` times (default 200) at random into a
calibration half and a test half (each sample, or each count of a bin, goes
to either half with probability 1/2: a binomial draw per row). On the
calibration half the cut-offs are chosen; on the test half their precision
is measured. For targets 0.9, 0.95, 0.99 and delta 0.05, 0.1:

* ``ltt``: :func:`topcal.thresholds.core.ltt_cutoff` (the library's Learn-then-Test),
  global, and per predicted class (each class at delta);
* ``naive``: the loosest cut-off of the same grid whose calibration-half
  precision is >= the target (read off the calibration data: no guarantee);
* ``sgr``: Selection with Guaranteed Risk (Geifman and El-Yaniv 2017),
  :func:`topcal.thresholds.core.sgr_threshold`, global only, on the network's raw top score (the
  softmax response, as its paper does; until issue 33 it ran on topcal's calibrated confidence,
  a weakened peer).

Reported per cell: the violation rate (share of splits whose test-half
precision of the accepted predictions is below the target; a split without a
cut-off, or with nothing accepted on the test half, is no violation), the
bound delta + 3 binomial standard errors sqrt(delta (1 - delta) / splits), and
the mean accepted fraction of the test half. Per class: the worst class's
violation rate (``worst``) and the mean over classes; the accepted fraction
is that of all test rows under the per-class cut-offs. The test half is
finite, so its precision scatters around the population's: the violation
rates include that noise.

Run: ``python benchmarks/bench_trust.py [--quick] [--splits 200] [--method hist] [--data NAME ...]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import topcal
from topcal.data import TopLabelData, rows_by_class
from topcal.datasets import load_phanns
from topcal.thresholds.core import GLOBAL_STARTS, GRID, ltt_cutoff, sgr_threshold

from _measure import loadavg

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent.parent / "shared" / "data" / "bench"
if not BENCH.is_dir():
    BENCH = Path("/work/shared/data/bench")
ALL = [
    "lenet-5-cifar-10.npz",
    "wideresnet-16-4-cifar-10.npz",
    "densenet-bc-100-cifar-100.npz",
    "lenet-5-cifar-100.npz",
    "wideresnet-16-4-cifar-100.npz",
    "imagenet-resnet101.csv",
    "imagenet-densenet161.csv",
    "phanns",
]
QUICK = ["wideresnet-16-4-cifar-10.npz", "phanns"]
TARGETS = (0.9, 0.95, 0.99)
DELTAS = (0.05, 0.1)


def load(name: str) -> TopLabelData:
    if name == "phanns":
        return load_phanns()
    path = BENCH / name
    if path.suffix == ".npz":
        z = np.load(path)
        return TopLabelData.from_probs(
            z["predictions"].astype(np.float64), z["ground_truth"], renormalize=True
        )
    df = pd.read_csv(path)
    k = int(max(df["true_label"].max(), df["pred_label"].max())) + 1
    return TopLabelData.from_scores(
        df["pred_label"].to_numpy(),
        df["confidence"].to_numpy(),
        labels=df["true_label"].to_numpy(),
        classes=[str(i) for i in range(k)],
    )


def thin(data: TopLabelData, tp, fp) -> TopLabelData:
    """``data`` with its rows' TP/FP weights replaced (rows left without weight dropped)."""
    keep = (tp + fp) > 0
    d = data.subset(keep)
    if data.is_binned:
        return TopLabelData.from_binned(
            d.pred,
            d.bin_edges[:, 0],
            d.bin_edges[:, 1],
            tp[keep],
            fp[keep],
            classes=d.classes,
            score_range=d.score_range,
        )
    return d  # per-sample rows: weights are 0/1, kept rows keep theirs


def naive_cutoff(conf, tp, fp, target):
    """Loosest grid cut-off whose precision on these rows is >= target (None: none)."""
    cut = GRID[::-1]
    order = np.argsort(conf)
    s = conf[order]
    ctp = np.concatenate([[0.0], np.cumsum(tp[order])])
    cfp = np.concatenate([[0.0], np.cumsum(fp[order])])
    i = np.searchsorted(s, cut)
    n = (ctp[-1] - ctp[i]) + (cfp[-1] - cfp[i])
    ok = np.flatnonzero((n > 0) & ((ctp[-1] - ctp[i]) >= target * n))
    return None if ok.size == 0 else float(cut[ok[-1]])


def test_outcome(cutoff, conf, tp, fp, target):
    """(violated, accepted weight) on the test rows."""
    if cutoff is None:
        return False, 0.0
    acc = conf >= cutoff
    n = tp[acc].sum() + fp[acc].sum()
    return bool(n > 0 and tp[acc].sum() < target * n), float(n)


def run_set(name, method, splits, fit_share, seed):
    data = load(name)
    rng = np.random.default_rng(seed)
    fit_tp = rng.binomial(data.tp.astype(np.int64), fit_share).astype(float)
    fit_fp = rng.binomial(data.fp.astype(np.int64), fit_share).astype(float)
    fit_part = thin(data, fit_tp, fit_fp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = topcal.calibrator(method).fit(fit_part)
    rest_tp, rest_fp = data.tp - fit_tp, data.fp - fit_fp
    keep = (rest_tp + rest_fp) > 0
    conf = model.predict(data)[keep]
    raw = data.score[
        keep
    ]  # SGR's own input: the network's top score (its paper's softmax response)
    pred, rest_tp, rest_fp = (
        data.pred[keep],
        rest_tp[keep].astype(np.int64),
        rest_fp[keep].astype(np.int64),
    )
    groups = [idx for _, idx in rows_by_class(pred, data.n_classes)]
    K = len(groups)
    cells = {
        (t, d): {
            "g_ltt": [],
            "g_naive": [],
            "g_sgr": [],
            "c_ltt": np.zeros(K),
            "c_naive": np.zeros(K),
            "acc": {"g_ltt": [], "g_naive": [], "g_sgr": [], "c_ltt": [], "c_naive": []},
        }
        for t in TARGETS
        for d in DELTAS
    }
    for _ in range(splits):
        c_tp = rng.binomial(rest_tp, 0.5).astype(float)
        c_fp = rng.binomial(rest_fp, 0.5).astype(float)
        t_tp, t_fp = rest_tp - c_tp, rest_fp - c_fp
        total = t_tp.sum() + t_fp.sum()
        for target in TARGETS:
            naive_g = naive_cutoff(conf, c_tp, c_fp, target)
            naive_c = [naive_cutoff(conf[g], c_tp[g], c_fp[g], target) for g in groups]
            for delta in DELTAS:
                cell = cells[(target, delta)]
                res = {
                    "g_ltt": (
                        ltt_cutoff(
                            "all", conf, c_tp, c_fp, target, delta, starts=GLOBAL_STARTS
                        ).cutoff,
                        conf,
                    ),
                    "g_naive": (naive_g, conf),
                    "g_sgr": (sgr_threshold(raw, c_tp, c_fp, target, delta), raw),
                }
                for key, (cut, values) in res.items():
                    v, n = test_outcome(cut, values, t_tp, t_fp, target)
                    cell[key].append(v)
                    cell["acc"][key].append(n / total)
                for key, cuts in (
                    (
                        "c_ltt",
                        [
                            ltt_cutoff("k", conf[g], c_tp[g], c_fp[g], target, delta).cutoff
                            for g in groups
                        ],
                    ),
                    ("c_naive", naive_c),
                ):
                    n_acc = 0.0
                    for j, (g, cut) in enumerate(zip(groups, cuts)):
                        v, n = test_outcome(cut, conf[g], t_tp[g], t_fp[g], target)
                        cell[key][j] += v
                        n_acc += n
                    cell["acc"][key].append(n_acc / total)
    rows = []
    for (target, delta), cell in cells.items():
        bound = delta + 3 * np.sqrt(delta * (1 - delta) / splits)
        row = {"data": name, "target": target, "delta": delta, "bound": bound}
        for key in ("g_ltt", "g_naive", "g_sgr"):
            row[f"{key}_viol"] = float(np.mean(cell[key]))
        for key in ("c_ltt", "c_naive"):
            rates = cell[key] / splits
            row[f"{key}_worst"] = float(rates.max())
            row[f"{key}_mean"] = float(rates.mean())
        for key, vals in cell["acc"].items():
            row[f"{key}_acc"] = float(np.mean(vals))
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"20 splits on {', '.join(QUICK)}")
    ap.add_argument(
        "--splits",
        type=int,
        default=None,
        help="random splits per data set (default 200; quick 20)",
    )
    ap.add_argument(
        "--method",
        default="hist",
        help="calibration method fitted on the separate part (default hist)",
    )
    ap.add_argument(
        "--fit-share",
        type=float,
        default=0.3,
        help="share of samples that fit the calibrator (0.3)",
    )
    ap.add_argument("--data", nargs="*", help="data sets (default: all, or the quick two)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", help="also write the table as CSV here")
    args = ap.parse_args(argv)
    splits = args.splits or (20 if args.quick else 200)
    names = args.data or (QUICK if args.quick else ALL)
    print(
        f"# bench_trust: {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, load "
        f"{loadavg()}, "
        f"topcal {topcal.__version__}"
    )
    print(
        f"# command: python benchmarks/bench_trust.py "
        f"{' '.join(argv if argv is not None else sys.argv[1:])}"
    )
    print(
        f"# method {args.method} fitted on {args.fit_share:.0%}, {splits} splits of the rest into "
        f"halves"
    )
    all_rows = []
    for name in names:
        t0 = time.perf_counter()
        rows = run_set(name, args.method, splits, args.fit_share, args.seed)
        all_rows += rows
        print(f"# {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    df = pd.DataFrame(all_rows)
    print()
    print(
        "| data | target | delta | bound | ltt viol | naive viol | sgr viol | ltt acc | naive acc "
        "| sgr acc "
        "| class ltt worst | class ltt mean | class naive worst | class naive mean | class ltt acc "
        "| class naive acc |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in all_rows:
        cells = [
            r["data"].replace(".npz", "").replace(".csv", ""),
            f"{r['target']:g}",
            f"{r['delta']:g}",
        ] + [
            f"{r[k]:.3f}"
            for k in (
                "bound",
                "g_ltt_viol",
                "g_naive_viol",
                "g_sgr_viol",
                "g_ltt_acc",
                "g_naive_acc",
                "g_sgr_acc",
                "c_ltt_worst",
                "c_ltt_mean",
                "c_naive_worst",
                "c_naive_mean",
                "c_ltt_acc",
                "c_naive_acc",
            )
        ]
        print("| " + " | ".join(cells) + " |")
    ok_g = (df["g_ltt_viol"] <= df["bound"]).all()
    ok_c = (df["c_ltt_worst"] <= df["bound"]).all()
    beats = (df["g_ltt_acc"] >= df["g_sgr_acc"]).sum()
    print(
        f"\n# global LTT within bound in every cell: {ok_g}; worst class within bound in every "
        f"cell: {ok_c}; "
        f"global LTT accepts >= SGR in {beats}/{len(df)} cells"
    )
    if args.csv:
        df.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
