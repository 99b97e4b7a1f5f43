"""Held-out comparison of every topcal method with simple peers on real networks' outputs.

Data: every file of ``shared/data/bench`` (five CIFAR-10/100 networks with full
probability vectors, two ImageNet models with the top score only) and the
PhANNs test set (binned counts). Protocol: seeded K-fold cross-fitting
(``topcal.evaluate.kfold_split``: stratified by predicted class; binned counts
dealt to folds by a multinomial draw), K = 2 and K = 5; every row's
confidence comes from a model fitted on the other folds. Metrics: overall
top-label NLL, Brier and ECE1 (10 equal-width bins), as ``topcal.metrics``
computes them.

Peers (written here from their descriptions, fitted on the same folds):

* ``isotonic/class``, ``isotonic/pooled``: scikit-learn ``IsotonicRegression``
  (increasing, clip out of bounds) of correctness on the top score, per
  predicted class or pooled over classes.
* ``platt/class``, ``platt/pooled``: logistic regression of correctness on
  logit(s) (scores clipped to [1e-12, 1 - 1e-12]), scikit-learn
  ``LogisticRegression`` with C = 1e4 (practically unpenalised). A class whose
  training part holds only one outcome uses the pooled fit.
* ``gupta-ramdas``: top-label histogram binning (Gupta & Ramdas, ICLR 2022):
  per predicted class, equal-mass bins of 50 points, bin value = mean
  correctness; classes with fewer than 50 points keep the raw score (identity).
* ``ts/multinomial``: classic temperature scaling (Guo et al. 2017): one T
  minimising the multinomial NLL of softmax(log p / T), scipy's bounded
  scalar minimiser on log T; full vectors only.
* ``beta/pooled``, ``beta/class``: beta calibration (Kull, Silva Filho & Flach,
  AISTATS 2017), written from the paper: logistic regression of correctness
  on the two features ln s and -ln(1 - s) with an intercept, sigmoid(a ln s -
  b ln(1 - s) + c), under the paper's constraints a, b >= 0 (which make the
  map monotone), fitted by maximum likelihood with the constraints as bounds
  (L-BFGS-B); per class (one-outcome classes use the pooled fit) or pooled.

Whole-vector peers (issue 35; ``_vector_peers.py``): probmetrics' SMS, SVS and temperature scaling,
Guo et al.'s unregularised vector and matrix scaling (matrix scaling up to 10 classes); full vectors
only. ``auto-before``: auto with its candidates before issue 35 (no ``vs``/``sms``). Two sets built
here with scikit-learn: ``digits-nb`` (Gaussian naive Bayes on half of scikit-learn's digits, the
other 899 images as the set; 85% of its probabilities below 1e-12) and ``fashion-lr`` (logistic
regression on 10,000 Fashion-MNIST training images, Debian's dataset-fashion-mnist, scored on the
10,000 test images; the stand-in for issue 35's MNIST logistic regression).

Regimes (issue 22): every full-vector set also runs as its top-score-only
version (``NAME:top``: predicted class, top score, label; the full vector
dropped), and ``--subsample N ...`` adds cells where every fold's model is
fitted on N samples drawn (seeded, without replacement) from its training part
and scored on the whole held-out fold: few rows per class with the data at hand.

Run: ``.venv/bin/python benchmarks/bench_heldout.py [--folds 2 5] [--data NAME ...] [--subsample
2000 5000]
[--top-only] [--quick] [--csv out.csv]`` (``make bench-heldout`` installs scikit-learn first).
``--quick``: the issue-22 regime only (top-score versions of the CIFAR-100 sets and PhANNs,
subsamples of
2,000 and 5,000, uncalibrated, auto and the peers): minutes, not an hour.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import topcal
from _vector_peers import VECTOR_PEERS, runs_on, vector_peer_predict
from topcal.calibrators.select.rules import DEFAULT_CANDIDATES
from topcal.data import TopLabelData
from topcal.datasets import load_phanns
from topcal.evaluate import kfold_split
from topcal.metrics import brier, ece1, nll

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent.parent / "shared" / "data" / "bench"
if not BENCH.is_dir():
    BENCH = Path("/work/shared/data/bench")

TOPCAL_METHODS = [
    "uncalibrated",
    "hist@0",
    "hist",
    "cum-opt@0",
    "cum-opt",
    "kde-mon2@0",
    "kde-mon2",
    "sts",
    "tswa",
    "bts",
    "btswa",
    "auto",
]
PEERS = [
    "isotonic/class",
    "isotonic/pooled",
    "platt/class",
    "platt/pooled",
    "gupta-ramdas",
    "ts/multinomial",
    "beta/class",
    "beta/pooled",
] + VECTOR_PEERS
#: the sets built here from scikit-learn's digits and Debian's Fashion-MNIST (module docstring)
BUILT = ["digits-nb", "fashion-lr"]
CLIP = 1e-12
#: topcal methods that need full score vectors (skipped on top-score-only sets)
FULL_ONLY = ("sts", "tswa", "csts", "cstswa", "vs", "sms", "vs-hier-platt", "sms-pooled-beta")
TOP = ":top"
QUICK_DATA = [
    "densenet-bc-100-cifar-100.npz:top",
    "wideresnet-16-4-cifar-100.npz:top",
    "lenet-5-cifar-100.npz:top",
    "phanns",
]


# --------------------------------------------------------------------- data
def top_only(data: TopLabelData) -> TopLabelData:
    """The same rows as (predicted class, top score, label): the full score vector dropped."""
    return TopLabelData.from_scores(
        data.pred,
        data.score,
        labels=data.labels,
        classes=list(data.classes),
        score_range=data.score_range,
    )


def load(name: str) -> TopLabelData:
    if name.endswith(TOP):
        return top_only(load(name[: -len(TOP)]))
    if name == "phanns":
        return load_phanns()
    if name in BUILT:
        return _built(name)
    path = BENCH / name
    if path.suffix == ".npz":
        z = np.load(path)
        p = z["predictions"].astype(np.float64)
        return TopLabelData.from_probs(p, z["ground_truth"], renormalize=True)
    df = pd.read_csv(path)
    k = int(max(df["true_label"].max(), df["pred_label"].max())) + 1
    return TopLabelData.from_scores(
        df["pred_label"].to_numpy(),
        df["confidence"].to_numpy(),
        labels=df["true_label"].to_numpy(),
        classes=[str(i) for i in range(k)],
    )


def _built(name: str) -> TopLabelData:
    """``digits-nb`` or ``fashion-lr`` (module docstring): a classifier's held-out probabilities."""
    if name == "digits-nb":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        from sklearn.naive_bayes import GaussianNB

        x, y = load_digits(return_X_y=True)
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=0, stratify=y)
        p = GaussianNB().fit(xtr, ytr).predict_proba(xte)
        return TopLabelData.from_probs(p, yte, renormalize=True)
    from sklearn.linear_model import LogisticRegression

    from topcal.experiments.idx import load_mnist

    m = load_mnist("/usr/share/datasets/fashion-mnist")
    xtr = m.train_images[:10_000].reshape(10_000, -1) / 255.0
    clf = LogisticRegression(max_iter=300).fit(xtr, m.train_labels[:10_000])
    p = clf.predict_proba(m.test_images.reshape(m.test_images.shape[0], -1) / 255.0)
    return TopLabelData.from_probs(p, m.test_labels, renormalize=True)


def datasets(top: bool = True) -> list[str]:
    """Every set; with ``top`` also the top-score-only version of every full-vector set."""
    names = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".npz", ".csv")) + ["phanns"]
    return names + ([n + TOP for n in names if n.endswith(".npz")] if top else [])


def subsample(data: TopLabelData, n: int, seed: int) -> TopLabelData:
    """``n`` samples drawn without replacement (binned counts: a multivariate hypergeometric
    draw)."""
    if n >= data.n_samples:
        return data
    rng = np.random.default_rng(seed)
    if data.is_binned:
        counts = np.concatenate([data.tp, data.fp]).astype(np.int64)
        got = rng.multivariate_hypergeometric(counts, n).astype(np.float64)
        tp, fp = got[: data.n_rows], got[data.n_rows :]
        keep = (tp + fp) > 0
        return TopLabelData(
            data.classes,
            data.pred[keep],
            data.score[keep],
            data.score_range,
            tp=tp[keep],
            fp=fp[keep],
            bin_edges=data.bin_edges[keep],
        )
    return data.subset(np.sort(rng.choice(data.n_rows, size=n, replace=False)))


# -------------------------------------------------------------------- peers
def _xy(data: TopLabelData):
    """Rows as (normalised score, outcome, weight, predicted class), TP and FP parts separately."""
    s = data.normalized_score()
    keep_t, keep_f = data.tp > 0, data.fp > 0
    x = np.concatenate([s[keep_t], s[keep_f]])
    y = np.concatenate([np.ones(keep_t.sum()), np.zeros(keep_f.sum())])
    w = np.concatenate([data.tp[keep_t], data.fp[keep_f]])
    k = np.concatenate([data.pred[keep_t], data.pred[keep_f]])
    return x, y, w, k


def _logit(s):
    s = np.clip(s, CLIP, 1 - CLIP)
    return np.log(s) - np.log1p(-s)


def _platt(x, y, w):
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=1e4, max_iter=1000)
    lr.fit(_logit(x)[:, None], y, sample_weight=w)
    return lambda s: lr.predict_proba(_logit(s)[:, None])[:, 1]


def _isotonic(x, y, w):
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
    iso.fit(x, y, sample_weight=w)
    return iso.predict


def _gupta_ramdas(x, y, w, points_per_bin=50):
    n = w.sum()
    if n < points_per_bin:
        return lambda s: s
    nb = int(n // points_per_bin)
    order = np.argsort(x, kind="stable")
    xs, ys, ws = x[order], y[order], w[order]
    cw = np.cumsum(ws)
    inner = xs[np.minimum(np.searchsorted(cw, cw[-1] * np.arange(1, nb) / nb), xs.size - 1)]
    edges = np.unique(inner)
    idx = np.searchsorted(edges, xs, side="left")
    m = edges.size + 1
    num = np.bincount(idx, ys * ws, minlength=m)
    den = np.bincount(idx, ws, minlength=m)
    val = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    val = pd.Series(val).ffill().bfill().to_numpy()
    return lambda s: val[np.searchsorted(edges, s, side="left")]


def _beta_features(s):
    s = np.clip(s, CLIP, 1 - CLIP)
    return np.stack([np.log(s), -np.log1p(-s)], axis=1)


def beta_fit(x, y, w):
    """Beta calibration (Kull et al. 2017) of correctness y on scores x with weights w: (a, b, c),
    a, b >= 0.

    Maximum likelihood of sigmoid(a ln x - b ln(1 - x) + c) under the bounds a, b >= 0 (L-BFGS-B,
    analytic gradient). Returns the parameters (a, b, c).
    """
    from scipy.optimize import minimize
    from scipy.special import expit

    f = np.column_stack([_beta_features(x), np.ones(x.size)])
    w = np.asarray(w, dtype=np.float64)
    scale = w.sum()

    def loss(theta):
        m = f @ theta
        val = w @ (np.logaddexp(0.0, m) - y * m) / scale
        grad = f.T @ (w * (expit(m) - y)) / scale
        return val, grad

    r = minimize(
        loss,
        np.array([1.0, 1.0, 0.0]),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None), (0.0, None), (None, None)],
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-10},
    )
    return r.x


def _beta(x, y, w):
    from scipy.special import expit

    a, b, c = beta_fit(x, y, w)
    return lambda s: expit(_beta_features(s) @ np.array([a, b]) + c)


def _per_class(fit, train, test, pooled_fallback):
    x, y, w, k = _xy(train)
    s_test = test.normalized_score()
    out = np.empty(test.n_rows)
    pooled = pooled_fallback(x, y, w) if pooled_fallback is not None else None
    for c in np.unique(test.pred):
        rows = test.pred == c
        sel = k == c
        if sel.any() and (pooled is None or np.unique(y[sel]).size == 2):
            f = fit(x[sel], y[sel], w[sel])
        elif pooled is not None:
            f = pooled
        else:
            f = lambda s: s  # noqa: E731 - no training data for this class: identity
        out[rows] = f(s_test[rows])
    return out


def _ts_multinomial(train, test):
    from scipy.optimize import minimize_scalar

    z = train.log_probs()
    lab = train.labels

    def loss(t):
        a = z / np.exp(t)
        a = a - a.max(axis=1, keepdims=True)
        return float(-(a[np.arange(a.shape[0]), lab] - np.log(np.exp(a).sum(axis=1))).mean())

    t = minimize_scalar(loss, bounds=(np.log(1e-2), np.log(1e2)), method="bounded").x
    a = test.log_probs() / np.exp(t)
    a = a - a.max(axis=1, keepdims=True)
    p = np.exp(a) / np.exp(a).sum(axis=1, keepdims=True)
    return p[np.arange(p.shape[0]), test.pred]


def peer_predict(name, train, test):
    if name == "isotonic/class":
        return _per_class(_isotonic, train, test, None)
    if name == "isotonic/pooled":
        x, y, w, _ = _xy(train)
        return _isotonic(x, y, w)(test.normalized_score())
    if name == "platt/class":
        return _per_class(_platt, train, test, _platt)
    if name == "platt/pooled":
        x, y, w, _ = _xy(train)
        return _platt(x, y, w)(test.normalized_score())
    if name == "gupta-ramdas":
        return _per_class(_gupta_ramdas, train, test, None)
    if name == "ts/multinomial":
        return _ts_multinomial(train, test)
    if name == "beta/class":
        return _per_class(_beta, train, test, _beta)
    if name == "beta/pooled":
        x, y, w, _ = _xy(train)
        return _beta(x, y, w)(test.normalized_score())
    if name in VECTOR_PEERS:
        return vector_peer_predict(name, train, test)
    raise KeyError(name)


#: today's auto before issue 22 (its candidates, the smallest mean wins): the spec "auto-old"
OLD_AUTO = dict(
    candidates=[
        "uncalibrated",
        "kde-mon2",
        "hist",
        "cum-opt",
        "sts",
        "csts",
        "tswa",
        "bts",
        "btswa",
    ],
    tolerance=0.0,
)

#: auto's default candidates before issue 35 (no whole-vector scalings): the spec "auto-before"
BEFORE_35 = tuple(
    n for n in DEFAULT_CANDIDATES if n not in ("vs", "sms", "vs-hier-platt", "sms-pooled-beta")
)

#: auto's cross-validation table per training part (``auto@T`` reuses the one of ``auto`` on the
#: same part)
_AUTO_CV: dict = {}


def topcal_predict(spec, train, test, key=None):
    """``name`` or ``name@m`` (shrinkage m); ``auto``: the default auto (its tolerance and blend);
    ``auto@T``: auto's single choice at tolerance T (reusing auto's table when ``auto`` ran on the
    same
    training part, ``key``)."""
    name, _, arg = spec.partition("@")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "auto-old":
            return topcal.calibrator("auto", **OLD_AUTO).fit(train).predict(test)
        if name == "auto-all":  # every candidate to the K folds: auto before issue 36's first look
            return topcal.calibrator("auto", screen=None).fit(train).predict(test)
        if name == "auto-before":
            return topcal.calibrator("auto", candidates=list(BEFORE_35)).fit(train).predict(test)
        if name == "auto":
            from topcal.calibrators.select.rules import TOLERANCE, choose

            tol = float(arg) if arg else TOLERANCE  # plain "auto": the default auto
            cached = _AUTO_CV.get(key) if key is not None else None
            if cached is not None:  # auto@T: the choice at tolerance T, unblended
                return topcal.calibrator(choose(cached, tol)[0]).fit(train).predict(test)
            # auto@T without a cached table: the single choice too (no blend), as its cached form
            model = topcal.calibrator(
                "auto", tolerance=tol, **({"blend": None} if arg else {})
            ).fit(train)
            if key is not None and model.cv_:
                _AUTO_CV[key] = model.cv_
            return model.predict(test)
        params = {"shrinkage": float(arg)} if arg else {}
        return topcal.calibrator(name, **params).fit(train).predict(test)


# -------------------------------------------------------------------- main
def run(data_name, n_folds, methods, seed=0, log=print, fit_rows=None, data=None):
    data = load(data_name) if data is None else data
    folds = kfold_split(data, n_folds, seed=seed)
    target = TopLabelData.concat(folds)
    rows = []
    for spec in methods:
        if spec == "ts/multinomial" and not data.has_full:
            continue
        if spec in VECTOR_PEERS and not runs_on(spec, data):
            continue
        if spec == "auto-before" and not data.has_full:  # the same candidates as auto on top scores
            continue
        if spec.split("@")[0] in FULL_ONLY and not data.has_full:
            continue
        t0 = time.perf_counter()
        parts = []
        try:
            for f in range(n_folds):
                train = TopLabelData.concat([folds[g] for g in range(n_folds) if g != f])
                if fit_rows is not None:
                    train = subsample(train, fit_rows, seed + 1000 * f + 1)
                test = folds[f]
                parts.append(
                    peer_predict(spec, train, test)
                    if spec in PEERS
                    else topcal_predict(
                        spec, train, test, key=(data_name, n_folds, fit_rows, f, seed)
                    )
                )
        except Exception as exc:  # a method failing is a finding, not the end of the run
            log(f"  {spec}: FAILED {type(exc).__name__}: {exc}")
            rows.append(
                {
                    "data": data_name,
                    "folds": n_folds,
                    "fit_rows": fit_rows or 0,
                    "method": spec,
                    "nll": np.nan,
                    "brier": np.nan,
                    "ece1": np.nan,
                    "seconds": time.perf_counter() - t0,
                    "error": str(exc),
                }
            )
            continue
        conf = np.concatenate(parts)
        row = {
            "data": data_name,
            "folds": n_folds,
            "fit_rows": fit_rows or 0,
            "method": spec,
            "nll": nll(target, conf).overall,
            "brier": brier(target, conf).overall,
            "ece1": ece1(target, conf).overall,
            "seconds": time.perf_counter() - t0,
            "error": "",
        }
        rows.append(row)
        log(
            f"  {spec:16s} nll {row['nll']:.4f}  brier {row['brier']:.4f}  ece1 {row['ece1']:.4f}  "
            f"({row['seconds']:.1f} s)"
        )
    return rows


def summarize(df: pd.DataFrame, log=print) -> dict:
    """Per cell: uncalibrated, auto, the best peer and the ratios; the issue-22 targets over all
    cells."""
    ok = df[df.error == ""]
    ratios, worse_uncal, worse_peer, all_ratios, vs_all = [], [], [], [], []
    log(
        "held-out NLL (rows: data/folds/fitting rows; auto vs the uncalibrated score and the best "
        "peer)"
    )
    for (name, k, n), g in ok.groupby(["data", "folds", "fit_rows"], sort=False):
        v = dict(zip(g.method, g.nll))
        peers = {p: v[p] for p in PEERS if p in v}
        best_peer = min(peers, key=peers.get) if peers else None
        cell = f"{name} K={k} n={'all' if not n else n}"
        line = f"{cell:52s} uncal {v.get('uncalibrated', np.nan):.4f}"
        if "auto" in v:
            line += f"  auto {v['auto']:.4f}"
            if "uncalibrated" in v and v["auto"] > v["uncalibrated"]:
                worse_uncal.append(cell)
        if best_peer:
            line += f"  best peer {best_peer} {peers[best_peer]:.4f}"
            if "auto" in v:
                r = v["auto"] / peers[best_peer]
                ratios.append(r)
                line += f"  auto/peer {r:.4f}"
                if r > 1.005:
                    worse_peer.append(cell)
            if "auto-all" in v:  # auto without its first look (issue 36), against the same peers
                all_ratios.append(v["auto-all"] / peers[best_peer])
        if "auto-all" in v and "auto" in v:
            vs_all.append(v["auto"] / v["auto-all"])
            line += f"  all {v['auto-all']:.4f} (auto/all {vs_all[-1]:.4f})"
        if best_peer:
            if "auto-before" in v:  # auto's candidates before issue 35, against the same peers
                b = v["auto-before"]
                line += f"  before {b:.4f} ({b / peers[best_peer]:.4f})"
        log(line)
    if ratios:
        log(
            f"\ncells {len(ratios)}; median auto/best peer {np.median(ratios):.4f}; auto > "
            f"uncalibrated in "
            f"{len(worse_uncal)} {worse_uncal}; auto > 1.005 x best peer in {len(worse_peer)} "
            f"{worse_peer}"
        )
    if vs_all:
        log(
            f"auto-all (screen=None): median auto-all/best peer "
            f"{np.median(all_ratios) if all_ratios else np.nan:.4f}; auto/auto-all worst "
            f"{max(vs_all):.4f}, median {np.median(vs_all):.4f}"
        )
    return {"ratios": ratios, "worse_uncal": worse_uncal, "worse_peer": worse_peer}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, nargs="+", default=[2, 5])
    ap.add_argument(
        "--data",
        nargs="+",
        default=None,
        help="file names in shared/data/bench (NAME:top for a set's top-score-only version), or "
        "phanns",
    )
    ap.add_argument(
        "--methods", nargs="+", default=None, help="topcal methods (name or name@m) and peers"
    )
    ap.add_argument(
        "--subsample",
        type=int,
        nargs="*",
        default=[],
        help="also fit every fold's models on this many samples of its training part",
    )
    ap.add_argument(
        "--no-full", action="store_true", help="only the subsampled cells (with --subsample)"
    )
    ap.add_argument(
        "--top-only",
        action="store_true",
        help="of the full-vector sets, only their top-score versions",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the issue-22 regime: CIFAR-100 top-score sets and PhANNs, subsamples 2000 and 5000, "
        "uncalibrated, auto and the peers",
    )
    ap.add_argument("--csv", help="write every row to this CSV")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.quick:
        args.data = args.data or QUICK_DATA
        args.methods = args.methods or (["uncalibrated", "auto", "auto@0", "auto@0.5"] + PEERS)
        args.subsample = args.subsample or [2000, 5000]
        args.no_full = True
    names = args.data or datasets()
    if args.top_only:
        names = [n for n in names if not n.endswith(".npz")]
    methods = args.methods or (TOPCAL_METHODS + PEERS)
    sizes = ([] if args.no_full else [None]) + list(args.subsample)
    rows = []
    for name in names:
        data = load(name)
        for k in args.folds:
            for n in sizes:
                print(f"{name}, {k}-fold, fitting rows {'all' if n is None else n}", flush=True)
                rows += run(name, k, methods, seed=args.seed, fit_rows=n, data=data)
    df = pd.DataFrame(rows)
    if args.csv:
        df.to_csv(args.csv, index=False)
    print()
    summarize(df)
    return 0


if __name__ == "__main__":
    sys.exit(main())
