"""Coverage and width of ``predict_interval`` on simulated data with known true curves.

Top-score methods (the count families, ``conf1``, ``bts``/``btswa``): every data set has four
classes of ``n`` predictions each, one per true curve P(correct | S = s):

    calibrated   s
    over         s ** 2.5             (overconfident)
    under        s ** 0.4             (underconfident)
    steep        expit(10 (s - 0.7))

with scores s ~ Beta(4, 2) on (0, 1). The intervals are evaluated at 200 fresh scores per class
drawn from the same distribution; pointwise coverage is the share of those whose true value lies
in [lo, hi], averaged over the scores and the seeds. Each method's interval is compared with the
quantity it estimates: ``cum`` estimates P(correct | S' >= s) (computed from the true curve),
``cum-opt`` and
``cum-median`` the same above their fitted cut-off theta and P(correct | S' <= theta) below it,
``conf1`` the class's accuracy, the others P(correct | S = s).

Temperature family: the curves above are not temperature curves (a misspecified parametric model
does not cover at large n: reported separately as "misspecified"); the in-model check draws each
class's truth from the family itself: ``bts`` expit(logit(s) / T_k), ``btswa`` expit((logit(s) +
A_k) / T_k), and for the full-vector methods four-class logits z whose labels are drawn from
softmax((z + A_k e_k) / T) (sts, csts: A = 0; tswa, cstswa: awards), with the truth of a row its
predicted class's entry of that softmax.

Pooled and hierarchical Platt/beta (in-model truths, redrawn for every seed): ``pooled-platt``
every class expit(1.3 logit(s) + 0.4) (one curve: what the pooled model assumes);
``pooled-platt differing`` (``--only "pooled-platt differing"``): 8 and 40 classes drawn as for
``hier-platt`` below (the classes differ: the pooled curve is nobody's, and the interval must
hold a class's own curve through the classes' spread);
``hier-platt`` eight classes expit(a_k logit(s) + b_k) with a_k = 1.3 exp(0.3 e1), b_k = 0.4 +
0.5 e2; ``hier-beta`` eight classes expit(a_k ln s - b_k ln(1 - s) + c_k) with a_k = 1.2 exp(0.3
e1), b_k = 0.8 exp(0.3 e2), c_k = 0.3 + 0.4 e3 (e standard normal, drawn per class and seed: the
classes are a sample from a population around a common centre, what the hierarchical prior
assumes). ``hier-platt many`` / ``hier-beta many``: the same populations with 200 classes (run
with ``--sizes 5 10``: many classes of a few rows each, the regime of the ImageNet bench sets);
``hist many`` / ``kde-mon2 many``: the count methods on ``hier-platt``'s 200-class population.

Usage::

    python benchmarks/bench_intervals.py [--seeds 20] [--sizes 20 100 500 5000] [--level 0.9]
        [--only LABEL ...] [--boot N] [--scores imagenet]

``--scores imagenet``: scores with logit(s) ~ N(3.3, 3.5) instead of Beta(4, 2) (about ImageNet
ResNet-101's; many rows far out in logit(s), where a class's slope weighs most).
``--boot N`` (the ``hier-*`` rows): also a per-class bootstrap of the same method, N refits on
resamples drawn within each class, percentile interval, checked against the same truths (the
real-data benchmark's peer, ``bench_intervals_real.py``).

Prints one table: method, class size, mean pointwise coverage (with its standard error over
seeds), and the mean interval width.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy.special import expit, logit

from topcal.calibrators import calibrator
from topcal.data import TopLabelData

SHAPES = {
    "calibrated": lambda s: s,
    "over": lambda s: s**2.5,
    "under": lambda s: s**0.4,
    "steep": lambda s: expit(10.0 * (s - 0.7)),
}
#: (T, A) per class of the in-model temperature simulations
TEMPS = [(0.6, 0.0), (1.0, 0.0), (1.6, 0.0), (2.5, 0.0)]
AWARDS = [(0.7, 0.8), (1.0, -0.5), (1.5, 0.3), (2.0, -1.0)]
#: classes of the "many" hierarchical simulations (``--only "hier-platt many"``, with ``--sizes 5
#: 10``: ImageNet's 1,000 classes of ~5 fitting rows)
MANY_CLASSES = 200


#: the score distribution (``--scores``): Beta(4, 2), or ``imagenet``: logit(s) ~ N(3.3, 3.5), about
#: the quintiles of ImageNet ResNet-101's top scores (logits 0.4, 2.1, 4.1, 6.8)
SCORES = {
    "beta": lambda rng, n: np.clip(rng.beta(4.0, 2.0, n), 1e-4, 1 - 1e-4),
    "imagenet": lambda rng, n: np.clip(expit(rng.normal(3.3, 3.5, n)), 1e-12, 1 - 1e-12),
}
_scores = ["beta"]


def draw_scores(rng, n):
    return SCORES[_scores[0]](rng, n)


def cumulative_truth(curve, s, theta=None):
    """P(correct | S' >= s) under Beta(4, 2) scores, by quadrature on a fine grid; below a cut-off
    ``theta`` (``cum-median``, ``cum-opt``) P(correct | S' <= theta), the one bin below it."""
    grid = np.linspace(0, 1, 20001)[1:-1]
    dens = grid**3 * (1 - grid)
    num = np.cumsum((dens * curve(grid))[::-1])[::-1]
    den = np.cumsum(dens[::-1])[::-1]
    out = np.interp(s, grid, num / den)
    if theta is not None:
        low = grid <= theta
        below = (dens[low] @ curve(grid[low])) / dens[low].sum() if low.any() else curve(theta)
        out = np.where(s < theta, below, out)
    return out


def score_data(rng, n, curves):
    pred = np.repeat(np.arange(len(curves)), n)
    s = draw_scores(rng, pred.size)
    p = np.empty(pred.size)
    for k, c in enumerate(curves):
        p[pred == k] = c(s[pred == k])
    right = rng.random(pred.size) < p
    labels = np.where(right, pred, (pred + 1) % len(curves))
    classes = [f"c{k}" for k in range(len(curves))]
    return TopLabelData.from_scores(pred, s, labels, classes=classes, score_range=(0.0, 1.0))


def score_truth(method, curve, s, rng, theta=None):
    if method == "cum" or method.startswith("cum "):
        return cumulative_truth(curve, s)
    if method.startswith(("cum-opt", "cum-median")):
        return cumulative_truth(curve, s, theta)
    if method.startswith("conf1"):
        g = draw_scores(rng, 200_000)
        return np.full(s.shape, curve(g).mean())
    return curve(s)


def class_bootstrap(name, params, data, tests, boot, level, rng):
    """Per test set, the percentile interval of ``boot`` refits on resamples of ``data`` drawn
    with replacement within each class (the real-data benchmark's peer)."""
    by_class = [np.flatnonzero(data.pred == k) for k in range(data.n_classes)]
    draws = [np.empty((boot, t.n_rows)) for t in tests]
    for b in range(boot):
        idx = np.concatenate([rng.choice(r, r.size) for r in by_class if r.size])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = calibrator(name, **params).fit(data.subset(idx))
        for d, t in zip(draws, tests):
            d[b] = model.predict(t)
    tail = 50.0 * (1.0 - level)
    return [(np.percentile(d, tail, axis=0), np.percentile(d, 100 - tail, axis=0)) for d in draws]


def run_score_methods(methods, sizes, seeds, level, curves, label="", boot=0):
    rows = []
    for name, params in methods:
        for n in sizes:
            cov, width, bcov, bwidth = [], [], [], []
            for seed in range(seeds):
                rng = np.random.default_rng(1000 * seed + n)
                if callable(curves):  # truths drawn per seed (hierarchical rows)
                    curves_now = curves(rng)
                else:
                    curves_now = curves
                data = score_data(rng, n, curves_now)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = calibrator(name, **params).fit(data)
                hit = []
                w = []
                tests, truths = [], []
                for k, c in enumerate(curves_now):
                    s = draw_scores(rng, 200)
                    test = TopLabelData.from_scores(
                        np.full(s.size, k), s, None, classes=data.classes, score_range=(0.0, 1.0)
                    )
                    tests.append(test)
                    lo, hi = model.predict_interval(test, level)
                    st = getattr(model, "class_state_", [None] * len(curves_now))[k]
                    theta = st.get("theta") if isinstance(st, dict) else None
                    truth = score_truth(
                        _label(name, params) if not label else label, c, s, rng, theta
                    )
                    truths.append(truth)
                    hit.append((lo <= truth) & (truth <= hi))
                    w.append(hi - lo)
                cov.append(np.mean(np.concatenate(hit)))
                width.append(np.mean(np.concatenate(w)))
                if boot:
                    limits = class_bootstrap(name, params, data, tests, boot, level, rng)
                    bh = [(lo <= t) & (t <= hi) for (lo, hi), t in zip(limits, truths)]
                    bcov.append(np.mean(np.concatenate(bh)))
                    bwidth.append(np.mean(np.concatenate([hi - lo for lo, hi in limits])))
            rows.append(
                (
                    _label(name, params) + label,
                    n,
                    np.mean(cov),
                    np.std(cov) / np.sqrt(seeds),
                    np.mean(width),
                )
            )
            print_row(rows[-1], level)
            if boot:
                print(
                    f"|   bootstrap ({boot} refits)    |       | {np.mean(bcov):.3f} "
                    f"({np.std(bcov) / np.sqrt(seeds):.3f}) | {np.mean(bwidth):.3f} |",
                    flush=True,
                )
    return rows


def vector_data(rng, n_rows, params):
    """Four-class logits with labels drawn from softmax((z + A_k e_k) / T_k), k = argmax z."""
    K = len(params)
    z = rng.normal(0.0, 1.0, (n_rows, K))
    z[np.arange(n_rows), rng.integers(K, size=n_rows)] += rng.gamma(2.0, 1.0, n_rows)
    pred = z.argmax(1)
    T = np.array([p[0] for p in params])[pred]
    A = np.array([p[1] for p in params])[pred]
    zz = z.copy()
    zz[np.arange(n_rows), pred] += A
    zz /= T[:, None]
    p = np.exp(zz - zz.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (p.cumsum(1) > rng.random(n_rows)[:, None]).argmax(1)
    return z, labels, p[np.arange(n_rows), pred]


def run_vector_methods(methods, sizes, seeds, level):
    rows = []
    for name, params, truth_params in methods:
        for n in sizes:
            cov, width = [], []
            for seed in range(seeds):
                rng = np.random.default_rng(7000 * seed + n)
                z, y, _ = vector_data(rng, 4 * n, truth_params)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = calibrator(name, **params).fit(z, y, kind="logits")
                zt, _, truth = vector_data(rng, 800, truth_params)
                lo, hi = model.predict_interval(zt, level, kind="logits")
                cov.append(np.mean((lo <= truth) & (truth <= hi)))
                width.append(np.mean(hi - lo))
            rows.append((name, n, np.mean(cov), np.std(cov) / np.sqrt(seeds), np.mean(width)))
            print_row(rows[-1], level)
    return rows


def platt_population(rng, n_classes=8):
    """``hier-platt``'s in-model truths: expit(a_k logit(s) + b_k) around (1.3, 0.4)."""
    a = 1.3 * np.exp(0.3 * rng.normal(size=n_classes))
    b = 0.4 + 0.5 * rng.normal(size=n_classes)
    return [lambda s, a=a_, b=b_: expit(a * logit(s) + b) for a_, b_ in zip(a, b)]


def beta_population(rng, n_classes=8):
    """``hier-beta``'s in-model truths: expit(a_k ln s - b_k ln(1 - s) + c_k) around (1.2, 0.8,
    0.3)."""
    a = 1.2 * np.exp(0.3 * rng.normal(size=n_classes))
    b = 0.8 * np.exp(0.3 * rng.normal(size=n_classes))
    c = 0.3 + 0.4 * rng.normal(size=n_classes)
    return [
        lambda s, a=a_, b=b_, c=c_: expit(a * np.log(s) - b * np.log1p(-s) + c)
        for a_, b_, c_ in zip(a, b, c)
    ]


def _label(name, params):
    return name + ("" if not params else " " + ",".join(f"{k}={v}" for k, v in params.items()))


def print_row(row, level):
    name, n, c, se, w = row
    flag = "" if abs(c - level) <= 0.03 else "  <- outside +-3 points"
    print(f"| {name:28s} | {n:5d} | {c:.3f} ({se:.3f}) | {w:.3f} |{flag}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 100, 500, 5000])
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--only", nargs="*", default=None, help="method labels to run (default: all)")
    ap.add_argument(
        "--boot",
        type=int,
        default=0,
        help="also a per-class bootstrap (this many refits) of the hierarchical rows' methods",
    )
    ap.add_argument("--scores", choices=sorted(SCORES), default="beta", help="see SCORES")
    args = ap.parse_args(argv)
    _scores[0] = args.scores
    t0 = time.perf_counter()
    print(f"level {args.level}, {args.seeds} seeds, class sizes {args.sizes}")
    print("| method | class size | coverage (se) | mean width |")
    print("|---|---:|---:|---:|")
    curves = list(SHAPES.values())
    score_methods = [
        ("hist", {}),
        ("hist", {"shrinkage": 0}),
        ("cum", {}),
        ("cum", {"shrinkage": 0}),
        ("cum-opt", {}),
        ("cum-opt", {"shrinkage": 0}),
        ("kde-mon2", {}),
        ("kde-mon2", {"shrinkage": 0}),
        ("kde-opt", {}),
        ("conf1", {}),
    ]
    keep = (lambda lab: True) if args.only is None else (lambda lab: lab in args.only)
    run_score_methods(
        [m for m in score_methods if keep(_label(*m))], args.sizes, args.seeds, args.level, curves
    )
    tcurves = [lambda s, T=T: expit(logit(s) / T) for T, _ in TEMPS]
    acurves = [lambda s, T=T, A=A: expit((logit(s) + A) / T) for T, A in AWARDS]
    if keep("bts"):
        run_score_methods([("bts", {})], args.sizes, args.seeds, args.level, tcurves)
    if keep("btswa"):
        run_score_methods([("btswa", {})], args.sizes, args.seeds, args.level, acurves)
    if keep("pooled-platt"):
        one = lambda s: expit(1.3 * logit(s) + 0.4)  # noqa: E731
        run_score_methods([("pooled-platt", {})], args.sizes, args.seeds, args.level, [one] * 4)
    if keep("pooled-platt differing"):  # the classes differ: the pooled curve is nobody's
        for k in (8, 40):
            run_score_methods(
                [("pooled-platt", {})],
                args.sizes,
                args.seeds,
                args.level,
                lambda rng, k=k: platt_population(rng, k),
                label=f" differing K={k}",
            )
    if keep("hier-platt"):
        run_score_methods(
            [("hier-platt", {})],
            args.sizes,
            args.seeds,
            args.level,
            platt_population,
            boot=args.boot,
        )
    if keep("hier-beta"):
        run_score_methods(
            [("hier-beta", {})], args.sizes, args.seeds, args.level, beta_population, boot=args.boot
        )
    many = [("hier-platt", platt_population), ("hier-beta", beta_population)]
    many += [(m, platt_population) for m in ("hist", "kde-mon2")]  # count methods, Platt truths
    for name, population in many:
        if keep(f"{name} many"):  # ImageNet's regime: many classes of a few rows each
            run_score_methods(
                [(name, {})],
                args.sizes,
                args.seeds,
                args.level,
                lambda rng, population=population: population(rng, MANY_CLASSES),
                label=f" many K={MANY_CLASSES}",
                boot=args.boot,
            )
    vec = [
        ("sts", {}, [(1.4, 0.0)] * 4),
        ("csts", {}, TEMPS),
        ("tswa", {}, [(1.4, a) for _, a in AWARDS]),
        ("cstswa", {}, AWARDS),
    ]
    run_vector_methods([v for v in vec if keep(v[0])], args.sizes, args.seeds, args.level)
    if keep("bts misspecified"):
        run_score_methods(
            [("bts", {})], args.sizes, args.seeds, args.level, curves, label=" misspecified"
        )
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
