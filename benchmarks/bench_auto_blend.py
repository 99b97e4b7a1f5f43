"""Benchmark: would a *blend* of ``auto``'s candidates beat its single choice held out? (issue 22)

Protocol of ``bench_auto_rules.py`` / ``bench_heldout.py --quick``: for each top-score set, K-fold
split (:func:`topcal.data.kfold_split`, seed 0; K = 2 by default), each training part subsampled
to 2,000 and 5,000 rows (:func:`bench_heldout.subsample`, the same seeds). On each training part one
cross-fit of ``auto``'s default candidates (5 folds, seed 0:
:func:`topcal.calibrators.select.crossfit.cross_fit`,
the table :func:`topcal.calibrators.select.rules.tabulate_cv`, the choice
:func:`~topcal.calibrators.select.rules.choose`:
exactly ``auto``'s), and from the same out-of-fold confidences these variants:

* ``auto``: the chosen candidate (today's ``auto``); ``best``: the smallest CV mean;
* ``a-logit`` / ``a-prob``: the chosen candidate blended with the best-mean one, c = w c_chosen +
  (1 - w) c_best in logit space (sigmoid of the weighted logits) or in probability space, the weight
  w in [0, 1] minimising the out-of-fold NLL (grid of step 0.01);
* ``b-logit`` / ``b-prob``: the two best candidates by CV mean, blended the same way;
* ``c-logit`` / ``c-prob``: non-negative stacking of three candidates (the chosen one and the best
  others by CV mean), weights on the simplex (grid of step 0.02) minimising the out-of-fold NLL;
* ``impl``, ``impl-g0``, ``impl-all``: ``auto``'s own blend
(:func:`topcal.calibrators.select.rules.plan_blend`:
  the choice and the two best other score candidates, convex weights fitted exactly) with its gate
  of
  :data:`~topcal.calibrators.select.rules.BLEND_GATE` standard errors, a gate of 0 (any out-of-fold
  gain) and
  no gate;
* ``hindsight``: the single candidate with the lowest held-out NLL of the cell, picked after seeing
  the test folds (every candidate is fitted on each training part for it): a bound on any rule that
  returns one candidate;
* ``X+gate``: variant X only where its out-of-fold gain over the chosen candidate exceeds one
  standard error of the paired per-sample difference
  (:func:`topcal.calibrators.select.rules.paired_se`), else the chosen candidate.

Every candidate a variant uses is refitted on the whole training part and the variant's weights
applied to its predictions of the held-out fold. A cell (set, K, fitting rows) is scored as in
``bench_heldout.py``: the NLL of the held-out confidences of all folds together; the best peer is
the best of ``bench_heldout.py``'s peers (Platt, beta, isotonic pooled and per class,
Gupta-Ramdas) on the same training parts.

Run: ``python benchmarks/bench_auto_blend.py [--folds 2 5] [--data NAME ...]`` (``make bench``
first;
scikit-learn for the peers). Prints one JSON line per fold, then per cell every variant's NLL
over the best peer's, and the medians. About an hour for K = 2 and 5 (``--folds 2 5``: the grid of
docs/benchmarks.md) on 2 busy cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.special import expit, logit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_heldout as bh  # noqa: E402
from bench_auto_rules import DATA  # noqa: E402

import topcal  # noqa: E402
from topcal.calibrators.select.rules import (
    DEFAULT_CANDIDATES,
    BLEND_GATE,
    choose,
    paired_se,
    plan_blend,
    tabulate_cv,
)
from topcal.calibrators.select.crossfit import cross_fit  # noqa: E402
from topcal.calibrators.registry import get_class  # noqa: E402
from topcal.data import TopLabelData, kfold_split  # noqa: E402
from topcal.metrics import nll  # noqa: E402

CLIP = 1e-12
BLENDS = ["a-logit", "a-prob", "b-logit", "b-prob", "c-logit", "c-prob"]
IMPL = {"impl": BLEND_GATE, "impl-g0": 0.0, "impl-all": -np.inf}
VARIANTS = ["auto", "best"] + BLENDS + [v + "+gate" for v in BLENDS] + list(IMPL)
#: Columns of the summary: the variants, and ``hindsight``, the single candidate with the lowest
#: held-out
#: NLL of the cell (chosen after seeing the test folds: a bound on any rule that picks one
#: candidate).
COLUMNS = VARIANTS + ["hindsight"]


def mix(cs, w, space):
    """The blend of the confidence arrays ``cs`` with weights ``w`` (summing to 1) in ``space``."""
    if space == "prob":
        return np.clip(sum(wi * c for wi, c in zip(w, cs)), CLIP, 1 - CLIP)
    z = sum(wi * logit(np.clip(c, CLIP, 1 - CLIP)) for wi, c in zip(w, cs))
    return np.clip(expit(z), CLIP, 1 - CLIP)


def row_losses(p):
    """Per row: the NLL if the prediction is right, and if it is wrong."""
    return -np.log(p), -np.log1p(-p)


def simplex(k, step):
    """Weight vectors of length k on the simplex, multiples of ``step``."""
    m = int(round(1 / step))
    return [
        np.array(c + (m - sum(c),)) / m
        for c in itertools.product(range(m + 1), repeat=k - 1)
        if sum(c) <= m
    ]


def fit_weights(target, cs, space):
    """The simplex weights (grid) minimising the mean out-of-fold NLL of the blend of ``cs``."""
    tp, fp, n = target.tp, target.fp, target.tp.sum() + target.fp.sum()
    best, best_w = np.inf, None
    for w in simplex(len(cs), 0.01 if len(cs) == 2 else 0.02):
        lt, lf = row_losses(mix(cs, w, space))
        v = (tp @ lt + fp @ lf) / n
        if v < best:
            best, best_w = v, w
    return best_w


def plans(cv, run):
    """Every variant as (names, weights, space) from one cross-validation table and its confidences,
    and the gate's verdicts."""
    chosen, best = choose(cv)
    ok = sorted((n for n in cv if cv[n]["nll"] is not None), key=lambda n: cv[n]["nll"])
    target = run.target
    out = {"auto": ([chosen], [1.0], "prob"), "best": ([best], [1.0], "prob")}
    sets = {
        "a": [chosen] if chosen == best else [chosen, best],
        "b": ok[:2],
        "c": [chosen] + [n for n in ok if n != chosen][:2],
    }
    ref = row_losses(np.clip(run.confidence[chosen], CLIP, 1 - CLIP))
    gates = {}
    for key, names in sets.items():
        for space in ("logit", "prob"):
            v = f"{key}-{space}"
            if len(names) == 1:
                out[v] = (names, [1.0], space)
            else:
                cs = [run.confidence[n] for n in names]
                out[v] = (names, list(fit_weights(target, cs, space)), space)
            lt, lf = row_losses(mix([run.confidence[n] for n in out[v][0]], out[v][1], space))
            gain, se = paired_se(target.tp, target.fp, lt, lf, *ref)
            gates[v] = bool(gain < -se)
            out[v + "+gate"] = out[v] if gates[v] else out["auto"]
    for v, gate in IMPL.items():
        b = plan_blend(run, cv, chosen, gate)
        out[v] = out["auto"] if b is None else (b["methods"], b["weights"], "prob")
    return out, gates


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, nargs="+", default=[2])
    ap.add_argument("--data", nargs="+", default=DATA)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    cells = []
    for name in args.data:
        data = bh.load(name)
        peers = [p for p in bh.PEERS if p != "ts/multinomial" or data.has_full]
        for k in args.folds:
            for n in args.sizes:
                folds = kfold_split(data, k, seed=0)
                parts = {v: [] for v in VARIANTS + peers}
                for f in range(k):
                    train = bh.subsample(
                        TopLabelData.concat([folds[g] for g in range(k) if g != f]), n, 1000 * f + 1
                    )
                    test = folds[f]
                    names = [
                        c
                        for c in DEFAULT_CANDIDATES
                        if not get_class(c).needs_full or train.has_full
                    ]
                    run = cross_fit(train, names, 5, seed=0)
                    cv = tabulate_cv(run, names)
                    plan, gates = plans(cv, run)
                    held = {
                        c: topcal.calibrator(c).fit(train).predict(test)
                        for c in {c for v in plan.values() for c in v[0]} | set(names)
                    }
                    for v, (cs, w, space) in plan.items():
                        parts[v].append(mix([held[c] for c in cs], w, space))
                    for c in names:
                        parts.setdefault("cand:" + c, []).append(held[c])
                    for p in peers:
                        parts[p].append(bh.peer_predict(p, train, test))
                    print(
                        json.dumps(
                            {
                                "data": name,
                                "K": k,
                                "rows": n,
                                "fold": f,
                                "gates": gates,
                                **{
                                    v: [cs, [round(float(x), 3) for x in w]]
                                    for v, (cs, w, _) in plan.items()
                                    if not v.endswith("+gate")
                                },
                                **{f"nll_{v}": nll(test, parts[v][-1]).overall for v in VARIANTS},
                            }
                        ),
                        flush=True,
                    )
                target = TopLabelData.concat(folds)
                score = {v: nll(target, np.concatenate(c)).overall for v, c in parts.items()}
                bp = min(peers, key=score.get)
                cand = {v[5:]: s for v, s in score.items() if v.startswith("cand:")}
                hindsight = min(cand, key=cand.get)
                cells.append(
                    {
                        "data": name,
                        "K": k,
                        "rows": n,
                        "best_peer": bp,
                        "peer": score[bp],
                        "hindsight_method": hindsight,
                        "hindsight": cand[hindsight],
                        "uncalibrated": cand["uncalibrated"],
                        **{v: score[v] for v in VARIANTS},
                    }
                )
                print(json.dumps(cells[-1]), flush=True)
    print("\ncell: variant NLL / best peer's")
    print(f"{'data':36s} {'K':>2s} {'rows':>5s} " + " ".join(f"{v:>13s}" for v in COLUMNS))
    for c in cells:
        print(
            f"{c['data']:36s} {c['K']:2d} {c['rows']:5d} "
            + " ".join(f"{c[v] / c['peer']:13.4f}" for v in COLUMNS)
            + f"  (hindsight: {c['hindsight_method']})"
        )
    med = {v: float(np.median([c[v] / c["peer"] for c in cells])) for v in COLUMNS}
    worst = {v: float(max(c[v] / c["auto"] for c in cells)) for v in COLUMNS}
    print(f"{'median / best peer':44s} " + " ".join(f"{med[v]:13.4f}" for v in COLUMNS))
    print(f"{'worst cell / auto':44s} " + " ".join(f"{worst[v]:13.4f}" for v in COLUMNS))
    print(json.dumps({"median_vs_peer": med, "worst_vs_auto": worst}))
    print(
        "cells where impl > uncalibrated: "
        + str([(c["data"], c["K"], c["rows"]) for c in cells if c["impl"] > c["uncalibrated"]])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
