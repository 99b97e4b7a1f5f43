"""The one-command path (``topcal threshold DATA --fit METHOD``, :func:`topcal.fit_and_threshold`)
against the two-file path (``topcal fit`` on one file, ``topcal threshold --model`` on another).

Protocol, per data set and split (``--splits``, default 20; split s uses seed s): a random third
of the rows is held out to measure; the other two thirds are what a user has:

* ``one``: :func:`topcal.fit_and_threshold` on the two thirds (``--fit-fraction``, default 0.5,
  stratified by predicted class, seed s);
* ``same``: the two-file path on the same two thirds split by hand with the same row assignment
  (:func:`topcal.thresholds.split.split_rows`): ``calibrator(METHOD).fit`` on one part,
  :func:`topcal.fit_thresholds` on the other. Must accept exactly what ``one`` does;
* ``hand``: the two-file path on the two thirds split by hand as a user would (``shuf`` and
  ``head``: a random half of the rows, not stratified).

Per cell (target P, delta): ``viol`` the share of splits where the statement fails on the held-out
third (``--global``: the precision of all accepted rows < P; the default mode: the shared
group's pooled precision < P, and any class tested alone below P), against the bound
delta + 3 binomial SE; ``acc`` the mean accepted fraction of the held-out third; ``one/hand``
and ``one/same`` the ratios of the summed accepted rows.

Run: ``python benchmarks/bench_trust_split.py [--splits 20] [--method hist] [--data NAME ...]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import topcal
from topcal.thresholds.split import split_rows

from _measure import loadavg
from bench_trust import load

CELLS = [(0.9, 0.05), (0.95, 0.05), (0.95, 0.1)]


def fails(th, model, new, precision) -> bool:
    """Whether a statement of ``th`` fails on ``new`` (see the module docstring)."""
    conf = model.predict(new)
    acc = th.accept(new.pred, conf, new.score)
    tp, fp = new.tp, new.fp
    if th.mode == "global":
        groups = [np.ones_like(acc)]
    else:
        shared = np.array([c.group == "shared" for c in th.per_class])
        groups = [shared[new.pred]] + [
            new.pred == k for k, c in enumerate(th.per_class) if c.group is None
        ]
    for g in groups:
        a = acc & g
        n = tp[a].sum() + fp[a].sum()
        if n > 0 and tp[a].sum() < precision * n:
            return True
    return False


def accepted(th, model, new) -> float:
    acc = th.accept(new.pred, model.predict(new), new.score)
    return float(new.tp[acc].sum() + new.fp[acc].sum())


def run(data, splits: int, method: str, fraction: float, mode: str):
    n = data.pred.shape[0]
    stats = {cell: {"one": [], "same": [], "hand": []} for cell in CELLS}
    for s in range(splits):
        rng = np.random.default_rng(10_000 + s)
        test = rng.permutation(n) < n // 3
        have, new = data.subset(~test), data.subset(test)
        mask, _ = split_rows(have.pred, fraction, s)
        hand = np.random.default_rng(20_000 + s).permutation(have.pred.shape[0]) < round(
            fraction * have.pred.shape[0]
        )
        models = {}
        for name, m in (("same", mask), ("hand", hand)):
            models[name] = (topcal.calibrator(method).fit(have.subset(m)), have.subset(~m))
        for p, d in CELLS:
            model, th = topcal.fit_and_threshold(
                have, method, p, d, fit_fraction=fraction, seed=s, mode=mode
            )
            stats[(p, d)]["one"].append((fails(th, model, new, p), accepted(th, model, new)))
            for name, (m2, part) in models.items():
                t2 = topcal.fit_thresholds(m2, part, p, d, mode=mode)
                stats[(p, d)][name].append((fails(t2, m2, new, p), accepted(t2, m2, new)))
    return stats, int(test.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--method", default="hist")
    ap.add_argument("--fit-fraction", type=float, default=0.5)
    ap.add_argument(
        "--global", dest="mode", action="store_const", const="global", default="per-class"
    )
    ap.add_argument("--data", nargs="+", default=["imagenet-resnet101.csv"])
    args = ap.parse_args()
    print(
        f"load before: {loadavg()}; splits {args.splits}, method {args.method}, "
        f"fit fraction {args.fit_fraction}, mode {args.mode}"
    )
    print(
        "| data | P | delta | viol one | viol same | viol hand | bound | acc one | acc hand "
        "| one/hand | one/same |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.data:
        data = load(name)
        t0 = time.perf_counter()
        stats, n_test = run(data, args.splits, args.method, args.fit_fraction, args.mode)
        for (p, d), st in stats.items():
            viol = {k: np.mean([f for f, _ in v]) for k, v in st.items()}
            acc = {k: np.sum([a for _, a in v]) for k, v in st.items()}
            bound = d + 3 * np.sqrt(d * (1 - d) / args.splits)
            per = args.splits * n_test
            print(
                f"| {name.split('.')[0]} | {p} | {d} | {viol['one']:.3f} | {viol['same']:.3f} | "
                f"{viol['hand']:.3f} | {bound:.3f} | {acc['one'] / per:.3f} | "
                f"{acc['hand'] / per:.3f} | {acc['one'] / max(acc['hand'], 1):.3f} | "
                f"{acc['one'] / max(acc['same'], 1):.3f} |"
            )
        print(f"({name}: {time.perf_counter() - t0:.0f} s)")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
