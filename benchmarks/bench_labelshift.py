"""Benchmark: topcal's label-shift adaptation against EM+BCTS and BBSE (package ``abstention``).

Data: the CIFAR-10 / CIFAR-100 network outputs in ``/work/shared/data/bench/``
(netcal's records; see that folder's README). For every file and seed the
10,000 test rows are split at random into a labelled half (the "test set" a
calibrator is fitted on) and a use pool. For every Dirichlet concentration
alpha and use-set size n_use, use-set priors pi ~ Dirichlet(alpha 1_K) are
drawn, class counts ~ Multinomial(n_use, pi), and rows are drawn with
replacement from the pool's rows of each class (the protocol of Lipton et al.
2018 and Alexandari et al. 2020).

Methods, all in this process on the same draws:

* ``topcal-em`` / ``topcal-bbse``: ``topcal.labelshift.adapt`` on a topcal
  calibrator (``--method``, default kde-mon2) fitted on the labelled half;
  priors estimated by EM on the model's top-label posterior (or a temperature
  method's full vector) / by BBSE over (predicted class, score region) cells,
  then topcal's safety step (``shrink="auto"``: how far to move towards the
  estimate, by simulated shift on the model's counts; ``--shrink 1`` for the
  raw estimates). The "shrink" column is the median chosen factor.
* ``EM+BCTS``: Alexandari et al. (2020) with their package ``abstention``:
  ``TempScaling(bias_positions="all")`` fitted on the labelled half, then
  ``EMImbalanceAdapter`` (its defaults: 100 iterations, tolerance 1e-6). The
  BCTS fit is done once per split and reused for every draw (what the
  adapter would do internally on every call).
* ``BBSE``: Lipton et al. (2018), ``abstention``'s ``BBSEImbalanceAdapter``
  (hard confusion matrix of the network's argmax, inverted; negative weights
  set to 0). A singular confusion matrix (a class never predicted in the
  labelled half) counts as a failure. Its weights are applied to the BCTS
  vectors for the NLL/ECE/accuracy columns.
* ``top-score``: the vectors dropped: topcal fitted on (predicted class, top
  score, true class) only and adapted with ``estimator="bbse"`` (and "em" on
  the top-label posterior).

Reported per cell (file x alpha x n_use), median over seeds: MSE of the
prior ratios w used (topcal: after the safety step) = pi_u / pi_s against the use set's realised
class
frequencies over the labelled half's; the use set's top-label NLL and ECE1
(10 bins) of the original predicted class before / after adaptation; the
change in accuracy when the class is re-decided (argmax of the adapted
posterior). Then the issue's checks.

Run: ``python benchmarks/bench_labelshift.py [--seeds 20] [--files a.npz,...]
[--alphas 0.1,1,10] [--n-use 500,2000,8000] [--method kde-mon2] [--json out.json]``.
Needs ``make bench`` (installs ``abstention``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bench"
FILES = [
    "lenet-5-cifar-10.npz",
    "wideresnet-16-4-cifar-10.npz",
    "densenet-bc-100-cifar-100.npz",
    "lenet-5-cifar-100.npz",
    "wideresnet-16-4-cifar-100.npz",
]


def draw_use(pool_idx, labels, K, alpha, n_use, rng):
    """Rows of a use set with Dirichlet(alpha) priors, drawn with replacement from the pool."""
    pool_lab = labels[pool_idx]
    present = np.array([np.any(pool_lab == k) for k in range(K)])
    pi = rng.dirichlet(np.full(K, alpha))
    pi = np.where(present, pi, 0.0)
    pi /= pi.sum()
    counts = rng.multinomial(n_use, pi)
    rows = [rng.choice(pool_idx[pool_lab == k], c) for k, c in enumerate(counts) if c]
    return rng.permutation(np.concatenate(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument(
        "--seed-start",
        type=int,
        default=0,
        help="first seed (run a grid in chunks, merge with --from-json)",
    )
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--alphas", default="0.1,1,10")
    ap.add_argument("--n-use", default="500,2000,8000")
    ap.add_argument("--method", default="kde-mon2")
    ap.add_argument(
        "--top-method",
        help="method for the top-score-only path (default: --method, or kde-mon2 "
        "when --method needs full vectors)",
    )
    ap.add_argument(
        "--prior-strength",
        type=float,
        default=None,
        help="topcal's pseudo-samples per class (default: topcal's)",
    )
    ap.add_argument(
        "--fp-pseudocount",
        type=float,
        default=None,
        help="topcal's FP-mix shrinkage (default: topcal's)",
    )
    ap.add_argument(
        "--shrink",
        default=None,
        help="topcal's safety step: auto or a number in [0, 1] (default: auto)",
    )
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--json", help="write every run's numbers to this file")
    ap.add_argument(
        "--from-json",
        metavar="PATH[,PATH...]",
        help="only print the tables of runs saved with --json",
    )
    args = ap.parse_args(argv)

    import topcal
    from topcal import metrics
    from topcal.data import TopLabelData
    from topcal.labelshift import adapt

    try:
        from abstention.calibration import TempScaling
        from abstention.label_shift import BBSEImbalanceAdapter, EMImbalanceAdapter
    except ImportError:
        print(
            "error: the competitor package 'abstention' is missing; run `make bench` first",
            file=sys.stderr,
        )
        return 2

    if args.top_method is None:
        args.top_method = (
            "kde-mon2" if topcal.calibrators.get_class(args.method).needs_full else args.method
        )
    alphas = [float(a) for a in args.alphas.split(",")]
    n_uses = [int(n) for n in args.n_use.split(",")]
    files = [f for f in args.files.split(",") if f]
    print(
        f"topcal {topcal.__version__}, numpy {np.__version__}, python {platform.python_version()}, "
        f"{platform.machine()}, method {args.method}, top-score method {args.top_method}"
    )
    if not args.from_json:
        print(
            f"grid: files {files}; alpha {alphas}; n_use {n_uses}; seeds "
            f"{args.seed_start}..{args.seed_start + args.seeds - 1}"
        )
    warnings.simplefilter("ignore")  # degenerate-class notes of tiny CIFAR-100 classes
    runs = (
        [r for p in args.from_json.split(",") for r in json.loads(Path(p).read_text())]
        if args.from_json
        else []
    )
    if args.from_json:
        files = [f for f in files if any(r["file"] == f for r in runs)]
        print(f"runs from {args.from_json}: seeds {sorted({r['seed'] for r in runs})}")
    t_start = time.perf_counter()
    timing = {"topcal": 0.0, "EM+BCTS": 0.0, "BBSE": 0.0}
    for fname in [] if args.from_json else files:
        z = np.load(Path(args.data_dir) / fname)
        P = z["predictions"].astype(np.float64)
        P /= P.sum(axis=1, keepdims=True)
        y = z["ground_truth"].astype(np.int64)
        K = P.shape[1]
        names = [str(i) for i in range(K)]
        for seed in range(args.seed_start, args.seed_start + args.seeds):
            rng = np.random.default_rng(1000 * seed + 7)
            perm = rng.permutation(len(y))
            lab, pool = perm[: len(y) // 2], perm[len(y) // 2 :]
            src = TopLabelData.from_probs(P[lab], y[lab], names)
            src_top = TopLabelData.from_scores(src.pred, src.score, y[lab], names)
            t0 = time.perf_counter()
            cal = topcal.calibrator(args.method).fit(src)
            cal_top = topcal.calibrator(args.top_method).fit(src_top)
            timing["topcal"] += time.perf_counter() - t0
            ps = np.bincount(y[lab], minlength=K) / len(lab)
            onehot = np.eye(K)[y[lab]]
            t0 = time.perf_counter()
            bcts = TempScaling(bias_positions="all", verbose=False)(
                valid_preacts=P[lab], valid_labels=onehot, posterior_supplied=True
            )
            Pv = bcts(P[lab])
            timing["EM+BCTS"] += time.perf_counter() - t0
            for alpha in alphas:
                for n_use in n_uses:
                    idx = draw_use(pool, y, K, alpha, n_use, rng)
                    use = TopLabelData.from_probs(P[idx], y[idx], names)
                    use_top = TopLabelData.from_scores(use.pred, use.score, y[idx], names)
                    pu = np.bincount(y[idx], minlength=K) / len(idx)
                    w_true = np.where(ps > 0, pu / np.where(ps > 0, ps, 1), 0.0)
                    acc0 = float(use.tp.mean())
                    row = {"file": fname, "seed": seed, "alpha": alpha, "n_use": n_use}

                    def record(key, w, c0, c1, new_pred, data=use, est=None):
                        raw = (
                            None
                            if est is None
                            else (est.estimated if est.estimated is not None else est.priors)
                        )
                        row[key] = {
                            "shrink": None if est is None else est.shrink,
                            "mse_est": None
                            if raw is None
                            else float(np.mean((raw / ps - w_true) ** 2)),
                            "mse": float(np.mean((w - w_true) ** 2)) if w is not None else None,
                            "nll0": metrics.nll(data, c0).overall,
                            "nll1": metrics.nll(data, c1).overall,
                            "ece0": metrics.ece1(data, c0).overall,
                            "ece1": metrics.ece1(data, c1).overall,
                            "dacc": float(np.mean(new_pred == y[idx])) - acc0,
                        }

                    t0 = time.perf_counter()
                    kw = (
                        {}
                        if args.fp_pseudocount is None
                        else {"fp_pseudocount": args.fp_pseudocount}
                    )
                    if args.prior_strength is not None:
                        kw["prior_strength"] = args.prior_strength
                    if args.shrink is not None:
                        kw["shrink"] = args.shrink if args.shrink == "auto" else float(args.shrink)
                    for est in ("em", "bbse"):
                        ad = adapt(cal, use.without_labels(), estimator=est, n_bootstrap=0, **kw)
                        record(
                            f"topcal-{est}",
                            ad.weights_,
                            cal.predict(use),
                            ad.predict(use),
                            ad.redecide(use)[0],
                            est=ad.estimate_,
                        )
                        ad = adapt(
                            cal_top, use_top.without_labels(), estimator=est, n_bootstrap=0, **kw
                        )
                        record(
                            f"top-score-{est}",
                            ad.weights_,
                            cal_top.predict(use_top),
                            ad.predict(use_top),
                            ad.redecide(use_top)[0],
                            use_top,
                            est=ad.estimate_,
                        )
                    ad = adapt(cal, use.without_labels(), source_data=src, n_bootstrap=0, **kw)
                    record(
                        "topcal-em-bcts",
                        ad.weights_,
                        cal.predict(use),
                        ad.predict(use),
                        ad.redecide(use)[0],
                        est=ad.estimate_,
                    )
                    timing["topcal"] += time.perf_counter() - t0

                    t0 = time.perf_counter()
                    Pu = bcts(P[idx])
                    rows = np.arange(len(idx))
                    em = EMImbalanceAdapter(calibrator_factory=None)(
                        tofit_initial_posterior_probs=Pu, valid_posterior_probs=Pv
                    )
                    Pa = em(Pu)
                    # abstention's EM ratios are against the mean calibrated posterior; as ratios of
                    # priors they compare with w_true through that mean (pi_u / pi_s, both from EM)
                    pi_em = em.multipliers * Pv.mean(axis=0)
                    w_em = np.where(ps > 0, pi_em / np.where(ps > 0, ps, 1), 0.0)
                    record(
                        "EM+BCTS", w_em, Pu[rows, use.pred], Pa[rows, use.pred], Pa.argmax(axis=1)
                    )
                    timing["EM+BCTS"] += time.perf_counter() - t0

                    t0 = time.perf_counter()
                    try:
                        bb = BBSEImbalanceAdapter()(
                            valid_labels=onehot,
                            tofit_initial_posterior_probs=P[idx],
                            valid_posterior_probs=P[lab],
                        )
                        w_bb = bb.multipliers
                        Pb = Pu * w_bb
                        s = Pb.sum(axis=1, keepdims=True)
                        Pb = np.where(s > 0, Pb / np.where(s > 0, s, 1), Pu)
                        record(
                            "BBSE", w_bb, Pu[rows, use.pred], Pb[rows, use.pred], Pb.argmax(axis=1)
                        )
                    except np.linalg.LinAlgError:
                        row["BBSE"] = None
                    timing["BBSE"] += time.perf_counter() - t0
                    runs.append(row)
            print(
                f"  {fname} seed {seed} done ({time.perf_counter() - t_start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    methods = [
        "topcal-em",
        "topcal-bbse",
        "topcal-em-bcts",
        "EM+BCTS",
        "BBSE",
        "top-score-bbse",
        "top-score-em",
    ]
    cells = sorted(
        {(r["file"], r["alpha"], r["n_use"]) for r in runs},
        key=lambda c: (files.index(c[0]), c[1], c[2]),
    )

    def med(cell, m, key):
        vals = [
            r[m][key]
            for r in runs
            if (r["file"], r["alpha"], r["n_use"]) == cell
            and r[m] is not None
            and r[m].get(key) is not None
        ]
        return float(np.median(vals)) if vals else float("nan")

    def fails(cell, m):
        return sum(1 for r in runs if (r["file"], r["alpha"], r["n_use"]) == cell and r[m] is None)

    print(
        "\nmedian over seeds; MSE of prior ratios; NLL / ECE1 of the original predicted class, "
        "before -> after; dacc = accuracy change when re-decided"
    )
    for m in methods:
        print(f"\n{m}")
        print(
            f"{'file':32s} {'alpha':>5s} {'n_use':>5s} {'MSE':>9s} {'NLL0':>7s} {'NLL1':>7s} "
            f"{'ECE0':>7s} {'ECE1':>7s} {'dacc':>7s} {'fail':>4s} {'shrink':>6s}"
        )
        for c in cells:
            print(
                f"{c[0]:32s} {c[1]:5g} {c[2]:5d} {med(c, m, 'mse'):9.4g} {med(c, m, 'nll0'):7.4f} "
                f"{med(c, m, 'nll1'):7.4f} {med(c, m, 'ece0'):7.4f} {med(c, m, 'ece1'):7.4f} "
                f"{med(c, m, 'dacc'):+7.4f} {fails(c, m):4d} {med(c, m, 'shrink'):6.2f}"
            )

    print("\nchecks (issue 12)")
    low = [c for c in cells if c[1] <= 1]
    for m in ("topcal-em", "topcal-bbse", "topcal-em-bcts", "top-score-bbse", "top-score-em"):
        # equal: within rounding (lam = 0 reproduces the unadapted confidences to ~1e-17)
        same = sum(abs(med(c, m, "nll1") - med(c, m, "nll0")) <= 1e-12 for c in low)
        ok = sum(med(c, m, "nll1") < med(c, m, "nll0") - 1e-12 for c in low)
        print(
            f"  {m}: adapted NLL below unadapted in {ok}/{len(low)} cells with alpha <= 1, equal "
            f"in {same}, "
            f"above in {len(low) - ok - same}"
        )
    for m in ("topcal-em", "topcal-bbse", "topcal-em-bcts", "top-score-bbse", "BBSE"):
        a = np.nanmedian([med(c, m, "mse") for c in cells])
        b = np.nanmedian([med(c, "EM+BCTS", "mse") for c in cells])
        wins = sum(med(c, m, "mse") <= med(c, "EM+BCTS", "mse") for c in cells)
        print(
            f"  prior-ratio MSE, median over cells: {m} {a:.4g} vs EM+BCTS {b:.4g} (ratio "
            f"{a / b:.2f}); "
            f"{m} <= EM+BCTS in {wins}/{len(cells)} cells"
        )
        if m.startswith(("topcal", "top-score")):
            r = np.nanmedian([med(c, m, "mse_est") for c in cells])
            lam = np.nanmedian([med(c, m, "shrink") for c in cells])
            print(
                f"    {m} before the safety step (the estimator's own priors): {r:.4g} (ratio "
                f"{r / b:.2f}); "
                f"median shrink factor {lam:.2f}"
            )
    print(
        "\nsummary over cells (medians over seeds first): MSE median over all cells; cells with "
        "alpha <= 1 "
        "where adapted NLL < unadapted (all files / without LeNet-5 CIFAR-100); median change in "
        "NLL for "
        "alpha <= 1 and alpha = 10; median accuracy change when re-decided and ECE1 change, alpha "
        "<= 1"
    )
    low = [c for c in cells if c[1] <= 1]
    high = [c for c in cells if c[1] > 1]
    print(
        f"{'method':16s} {'MSE':>8s} {'NLL down':>9s} {'w/o LeNet100':>12s} {'dNLL<=1':>8s} "
        f"{'dNLL 10':>8s} "
        f"{'dacc<=1':>8s} {'dECE<=1':>8s}"
    )
    for m in methods:
        run_low = [c for c in low if not np.isnan(med(c, m, "nll0"))]
        down = [c for c in run_low if med(c, m, "nll1") < med(c, m, "nll0")]
        rest = [c for c in run_low if "lenet-5-cifar-100" not in c[0]]
        down_rest = [c for c in rest if c in down]

        def mdiff(cs, a, b):
            v = [med(c, m, b) - med(c, m, a) for c in cs if not np.isnan(med(c, m, a))]
            return float(np.median(v)) if v else float("nan")

        mse = np.nanmedian([med(c, m, "mse") for c in cells])
        dacc = np.nanmedian([med(c, m, "dacc") for c in run_low]) if run_low else float("nan")
        print(
            f"{m:16s} {mse:8.4f} {len(down):>4d}/{len(run_low):<4d} "
            f"{len(down_rest):>6d}/{len(rest):<5d} "
            f"{mdiff(run_low, 'nll0', 'nll1'):+8.4f} {mdiff(high, 'nll0', 'nll1'):+8.4f} "
            f"{dacc:+8.4f} "
            f"{mdiff(run_low, 'ece0', 'ece1'):+8.4f}"
        )
    if args.from_json:
        return 0
    print(
        f"\ntime: topcal {timing['topcal']:.1f} s, EM+BCTS {timing['EM+BCTS']:.1f} s, BBSE "
        f"{timing['BBSE']:.1f} s; "
        f"total {time.perf_counter() - t_start:.0f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
