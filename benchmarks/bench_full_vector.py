"""The calibrated full vector (``predict_proba``, ``topcal apply --full``) held out, and its cost.

**NLL table** (default). Every full-vector set of ``bench_heldout.py`` (the five CIFAR networks
of ``shared/data/bench`` and, with ``--data``, ``digits-nb`` / ``fashion-lr``), split as
``bench_heldout.py`` splits them (``topcal.evaluate.kfold_split``, seed 0, ``--folds`` 2): every
row's vector comes from a model fitted on the other fold. Columns: full-vector NLL
(``topcal.metrics.vector_nll``) of topcal's ``auto`` vector (``Calibrator.predict_proba``, what
``predict_proba`` of the estimator and ``apply --full`` write), of probmetrics' SMS, SVS and
temperature scaling (``_vector_peers.py``; their defaults) and of Dirichlet calibration (ODIR,
written from the paper in ``_vector_peers.py``; up to ``--dirichlet-max`` classes: with 100 a fit
takes minutes); ``ratio``: topcal's over the best of SMS/SVS/TS; the top-label NLL of topcal's
vector's predicted entry against ``auto``'s ``predict`` (the same numbers: the top entry is the
confidence); ``moved``: the share of rows whose vector's argmax is not the original prediction,
and the accuracy of either; ``capped rest``: the NLL of the rule not taken (the other entries
capped at the confidence, :func:`topcal.calibrators.fullvector.distribute_rest` of the map's
vector).

**Speed** (``--speed``): ``apply`` and ``apply --full`` of one model on the same file
(``--rows`` x ``--classes`` Parquet probabilities, default 10^5 x 1,000), side by side in this
process (the command line's own code, ``topcal.cli.main``), best of ``--repeat``.

Run: ``.venv/bin/python benchmarks/bench_full_vector.py [--folds 2] [--data NAME ...]`` and
``.venv/bin/python benchmarks/bench_full_vector.py --speed [--rows N --classes K]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import topcal
from _vector_peers import vector_peer_predict
from bench_heldout import load
from topcal.calibrators.fullvector import distribute_rest
from topcal.data import TopLabelData
from topcal.evaluate import kfold_split
from topcal.metrics import nll, vector_nll

SETS = [
    "lenet-5-cifar-10.npz",
    "wideresnet-16-4-cifar-10.npz",
    "densenet-bc-100-cifar-100.npz",
    "lenet-5-cifar-100.npz",
    "wideresnet-16-4-cifar-100.npz",
]
PEERS = ["pm-sms", "pm-svs", "pm-ts", "dirichlet-odir"]
BEST_OF = ("pm-sms", "pm-svs", "pm-ts")


def held_out(name: str, n_folds: int, dirichlet_max: int, log=print) -> dict:
    data = load(name)
    folds = kfold_split(data, n_folds, seed=0)
    target = TopLabelData.concat(folds)
    vectors = {m: [] for m in ["topcal", *PEERS]}
    confs, capped, secs = [], [], {m: 0.0 for m in vectors}
    for f in range(n_folds):
        train = TopLabelData.concat([folds[g] for g in range(n_folds) if g != f])
        test = folds[f]
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = topcal.calibrator("auto").fit(train)
        vectors["topcal"].append(model.predict_proba(test))
        confs.append(model.predict(test))
        secs["topcal"] += time.perf_counter() - t
        # the rule not taken: the other classes capped at the confidence (distribute_rest of the
        # map's own vector), so the predicted class stays on top wherever c >= 1/K
        whole = model.vector_map_.predict_proba(test)
        capped.append(distribute_rest(whole, test.pred, confs[-1]))
        for peer in PEERS:
            if peer == "dirichlet-odir" and data.n_classes > dirichlet_max:
                vectors[peer] = None
                continue
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                vectors[peer].append(vector_peer_predict(peer, train, test, full=True))
            secs[peer] += time.perf_counter() - t
    out = {"set": name, "rows": data.n_rows, "classes": data.n_classes}
    for m, parts in vectors.items():
        if parts is None:
            out[m] = None
            continue
        p = np.concatenate(parts)
        p = p / p.sum(axis=1, keepdims=True)  # float32 peers: rows to 1 in float64
        out[m] = vector_nll(target, p).overall
    best = min(out[m] for m in BEST_OF)
    out["ratio"] = out["topcal"] / best
    top = np.concatenate(vectors["topcal"])
    rows = np.arange(target.n_rows)
    out["top_nll_vector"] = nll(target, top[rows, target.pred]).overall
    out["top_nll_auto"] = nll(target, np.concatenate(confs)).overall
    out["moved"] = float(np.mean(top.argmax(axis=1) != target.pred))
    out["capped"] = vector_nll(target, np.concatenate(capped)).overall
    out["acc_pred"] = float(np.mean(target.pred == target.labels))
    out["acc_vector"] = float(np.mean(top.argmax(axis=1) == target.labels))
    out["secs"] = secs
    log(out)
    return out


def table(rows: list[dict]) -> str:
    head = (
        "| set | K | topcal | pm-sms | pm-svs | pm-ts | dirichlet | ratio | top NLL | moved "
        "| accuracy: pred, vector's argmax | capped rest |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:

        def f(v):
            return "n/a" if v is None else f"{v:.4f}"

        lines.append(
            f"| {r['set']} | {r['classes']} | {f(r['topcal'])} | {f(r['pm-sms'])} | "
            f"{f(r['pm-svs'])} | {f(r['pm-ts'])} | {f(r['dirichlet-odir'])} | {r['ratio']:.4f} | "
            f"{r['top_nll_vector']:.4f} (auto {r['top_nll_auto']:.4f}) | {r['moved']:.2%} | "
            f"{r['acc_pred']:.4f}, {r['acc_vector']:.4f} | {r['capped']:.4f} |"
        )
    return "\n".join(lines)


def speed(n: int, k: int, repeat: int, method: str) -> dict:
    """Seconds of ``apply`` and ``apply --full`` on one n x k Parquet file, best of ``repeat``."""
    import pandas as pd

    from topcal.cli import main

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n, k)).astype(np.float32) * 3
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    # labels of the fitting rows drawn from their own probabilities (a calibrated classifier)
    cum = np.cumsum(p[:5000].astype(np.float64), axis=1)
    y = np.minimum((cum < rng.uniform(size=(5000, 1)) * cum[:, -1:]).sum(axis=1), k - 1)
    names = [f"c{j}" for j in range(k)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        frame = pd.DataFrame(p, columns=[f"p_{c}" for c in names])
        frame.to_parquet(tmp / "new.parquet")
        fit = frame.iloc[:5000].copy()
        fit["label"] = np.asarray(names)[y]
        fit.to_parquet(tmp / "fit.parquet")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert main(["fit", str(tmp / "fit.parquet"), "--method", method, "-o",
                         str(tmp / "m.json")]) == 0  # fmt: skip
        times = {"apply": [], "apply --full": []}
        for _ in range(repeat):
            for label, extra in (("apply", []), ("apply --full", ["--full"])):
                out = tmp / "out.parquet"
                t = time.perf_counter()
                code = main(["apply", str(tmp / "m.json"), str(tmp / "new.parquet"), "-o",
                             str(out), *extra])  # fmt: skip
                times[label].append(time.perf_counter() - t)
                assert code == 0
                out.unlink()
    best = {key: min(v) for key, v in times.items()}
    best["ratio"] = best["apply --full"] / best["apply"]
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--data", nargs="*", default=SETS)
    ap.add_argument("--dirichlet-max", type=int, default=10)
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--method", default="hist")
    args = ap.parse_args(argv)
    if args.speed:
        print(speed(args.rows, args.classes, args.repeat, args.method))
        return 0
    rows = [held_out(name, args.folds, args.dirichlet_max) for name in args.data]
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
