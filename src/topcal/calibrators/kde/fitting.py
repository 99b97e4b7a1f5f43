"""The batched fit of the KDE rules: supports, engine choice, lockstep bandwidth scans,
tables.

:func:`fit_all_classes` fits every class of a KDE model from the data, the classes' counts
and the fit's settings: how each bandwidth is chosen (:class:`Bandwidth`), the engine, the
reflection limits and whether the bandwidth searches run in lockstep.
:class:`~.calibrator.KDEBase` calls it as its batched-fit hook, then :func:`warn_fit` for the
classes whose rule found no admissible bandwidth or had none to choose.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, NamedTuple

import numpy as np

from ...data import TopLabelData, preview, rows_by_class
from ...errors import DegenerateClassWarning
from . import _engine as eng
from . import _rules as rules

__all__ = [
    "Bandwidth",
    "fit_all_classes",
    "warn_fit",
    "BandwidthWarning",
    "NO_BANDWIDTH",
    "TABLE_CELLS_PER_B",
    "BINNED_BATCH",
    "MAX_TABLE_STRIDE",
]

#: The prediction table's spacing is at most b / TABLE_CELLS_PER_B (a power of 2 fraction of
#: the fine grid, 257 to 4097 points). Linear interpolation error is at most h^2 / 8 *
#: max|Conf''|; on PhANNs h = b / 8 gave up to 7e-4, so h = b / 16 (4x less): measured <=
#: 2e-4, median 2e-5 per class.
TABLE_CELLS_PER_B = 16
#: Binned-engine classes scanned together in lockstep (kde-mon*), at most this many per
#: group.
BINNED_BATCH = 64
MAX_TABLE_STRIDE = 16

#: "No bandwidth" (degenerate classes, classes without positives): NaN in memory, null in
#: JSON (see the docstring of ``calibrator.py``).
NO_BANDWIDTH = float("nan")


class BandwidthWarning(DegenerateClassWarning):
    """No candidate bandwidth met a rule; the documented fallback was used."""


class Bandwidth(NamedTuple):
    """How a fit chooses each class's bandwidth: by a selection ``rule`` (an entry of
    ``_rules.SELECTION_RULES``: kde-mon*, kde-opt), or where ``rule`` is None by
    ``fixed(scores, weights, lo, hi)`` of the class's kernel centres (``kde``: a number or a
    rule of thumb). ``degenerate`` is the bandwidth a degenerate class records."""

    rule: Any = None
    fixed: Callable[..., float] | None = None
    degenerate: float = NO_BANDWIDTH


def fit_all_classes(
    data: TopLabelData,
    n_tp: np.ndarray,
    n_fp: np.ndarray,
    *,
    bandwidth: Bandwidth,
    engine: str,
    bounds: tuple | None,
    batch: bool,
) -> tuple[list, list]:
    """Every class's fitted state and support (None for classes without positives), in a
    few passes over the rows.

    ``n_tp``, ``n_fp`` are the classes' TP and FP weights; ``engine`` the model's parameter
    ("auto", "exact", "binned"); ``bounds`` the reflection limits, or None; ``batch``
    whether the bandwidth searches run in lockstep (:func:`_prepare_scans`). One pass finds
    each class's support and size; the classes for the binned engine are linearly binned
    together in one more pass (no per-class row selection), the others are selected row by
    row. The support of binned data is its outer bin edges, as
    ``TopLabelData.class_support`` gives it.
    """
    K = data.n_classes
    pred, score, tp, fp, smin, smax, lo, hi = _class_ranges(data)
    rows = np.bincount(pred, minlength=K)
    rule = bandwidth.rule
    exact_max = rules.EXACT_MAX_ROWS if rule is None else rule.exact_max_rows
    kinds = []
    for k in range(K):
        if engine == "auto":
            kinds.append("exact" if rows[k] <= exact_max else "binned")
        else:
            kinds.append(engine)
    binned = [
        k for k in range(K) if kinds[k] == "binned" and rows[k] > 0 and hi[k] > lo[k]
    ]
    grids, stacked = _binned_grids(binned, pred, score, tp, fp, lo, hi, K)
    # rows of each exact-engine class in row order, from one stable sort (not a pred == k
    # pass per class; no sort when every class is binned)
    args = {k: ("binned", g) for k, g in grids.items()}
    if len(grids) < np.count_nonzero(rows):
        for k, idx in rows_by_class(pred, K):
            if k not in grids:
                args[k] = ("exact", (score[idx], tp[idx], fp[idx]))
    scan = (n_tp, n_fp, rule, bounds)
    prepared = _prepare_scans(args, lo, hi, smin, smax, stacked, *scan) if batch else {}
    states: list[Any]
    support: list[Any]
    states, support = [], []
    for k in range(K):
        if rows[k] == 0:
            states.append(None)
            support.append(None)
            continue
        support.append((float(lo[k]), float(hi[k])))
        # popped: the class's engine (and its caches: kde-opt's LOO terms, n^2) freed once
        # fitted
        states.append(
            _fit_one(
                args[k],
                (float(lo[k]), float(hi[k])),
                (float(n_tp[k]), float(n_fp[k])),
                smin[k] == smax[k],
                bandwidth=bandwidth,
                bounds=bounds,
                prepared=prepared.pop(k, None),
            )
        )
    return states, support


def warn_fit(states: list, name: str, classes, rule, shrunk: bool) -> None:
    """The warnings of a fit of method ``name`` by a bandwidth ``rule``: one
    BandwidthWarning per class where no candidate met the rule (a rule of at most
    ``max_changes`` slope sign changes), then one warning per kind of degenerate class (a
    thousand small classes give four lines, not 270). ``shrunk``: the model is shrunk toward
    the pooled curve."""
    for k, st in enumerate(states):
        if st is not None and not st["admissible"]:
            lo, hi = st["b_range"]
            warnings.warn(
                f"{name}: class {classes[k]!r}: no bandwidth in [{lo:.4g}, {hi:.4g}] gives "
                f"<= {rule.max_changes} slope sign changes; using the largest, {hi:.4g} "
                "(smoothest curve); inspect the curve or use kde-mon4 / kde-opt",
                BandwidthWarning,
                stacklevel=5,
            )
    kinds: dict[str, list] = {}
    for k, st in enumerate(states):
        if st is not None and st.get("degenerate"):
            kinds.setdefault(st["degenerate"], []).append(classes[k])
    for kind, names in kinds.items():
        what, _, conf = kind.partition(": ")
        warnings.warn(
            f"{name}: {len(names)} class{'es' if len(names) > 1 else ''} "
            f"{preview(names)} {'have' if len(names) > 1 else 'has'} {what}: no "
            "bandwidth to choose (NaN); "
            + (
                "the class's own curve is constant and shrinkage pulls it toward the "
                "pooled curve"
                if shrunk
                else f"the curve is constant ({conf})"
            ),
            DegenerateClassWarning,
            stacklevel=5,
        )


def _make_engine(engine_args, lo, hi, bounds):
    """A class's engine built from its ``("exact", (score, tp, fp))`` rows or ``("binned",
    (T, F))`` grid, and its resolution rho (the smallest candidate bandwidth's scale)."""
    kind, arrays = engine_args
    if kind == "exact":
        score, tp, fp = arrays
        u, inv = np.unique(score, return_inverse=True)
        t = np.bincount(inv, tp, minlength=u.size)
        f = np.bincount(inv, fp, minlength=u.size)
        e = eng.ExactEngine(u, t, f, lo, hi, bounds)
        rho = float(np.diff(u).min()) if u.size > 1 else (hi - lo) / eng.FINE_CELLS
        return e, rho
    e = eng.BinnedEngine(arrays[0], arrays[1], lo, hi, bounds)
    return e, e.resolution()


def _prepare_scans(args, lo, hi, smin, smax, stacked, n_tp, n_fp, rule, bounds) -> dict:
    """Bandwidth searches of the classes in lockstep (kde-mon*, kde-opt), exact- and
    binned-engine classes apart.

    Returns {k: (engine, rho, (b, admissible, sign_changes or None))} for the classes it
    searched, {k: (engine, rho, None)} for the exact-engine classes too large for the rule's
    batch (searched one by one in _fit_one with that engine); the others are built and
    searched one by one in _fit_one. The result per class is the one the rule's per-class
    search (``_rules.scan_mon``, ``scan_opt``) gives (same candidates, evaluations and
    decisions). The rule names the batches it evaluates with (``exact_batch``,
    ``binned_batch``; None: one by one). ``stacked``: (T, F, classes) as linearly binned (row
    c: class ``classes[c]``), or None.
    """
    lockstep = getattr(rule, "select_lockstep", None)
    if lockstep is None:
        return {}
    exact_batch, binned_batch = rule.exact_batch, rule.binned_batch
    scanned = [
        k
        for k, (kind, _) in sorted(args.items())
        if smin[k] < smax[k]
        and n_tp[k] > 0
        and n_fp[k] > 0
        and not (kind == "binned" and binned_batch is None)
    ]
    to_bin, built = (
        [k for k in scanned if args[k][0] == "binned"],
        {},
    )  # their engines built together
    if to_bin:
        T, F = (
            stacked[:2]
            if stacked is not None and stacked[2] == to_bin  # all of them: no copy
            else [np.stack([args[k][1][j] for k in to_bin]) for j in (0, 1)]
        )
        built = dict(zip(to_bin, eng.BinnedEngine.many(T, F, lo[to_bin], hi[to_bin], bounds)))
    items, binned, unbatched = [], [], {}
    for k in scanned:
        kind, arrays = args[k]
        engine, rho = (
            (built[k], built[k].resolution())
            if k in built
            else _make_engine((kind, arrays), float(lo[k]), float(hi[k]), bounds)
        )
        item = (k, engine, rho, rules.candidates(float(lo[k]), float(hi[k]), rho))
        if kind == "binned":
            binned.append(item)
        elif exact_batch.accepts(engine):
            items.append(item)
        else:  # searched on its own in _fit_one, with the engine built here
            unbatched[k] = (engine, rho, None)
    out = dict(unbatched)
    # the binned classes in groups of BINNED_BATCH (their stacked transforms take ~0.25 MB a
    # class)
    for a in range(0, len(binned), BINNED_BATCH):
        group = binned[a : a + BINNED_BATCH]
        results = lockstep(binned_batch([g[1] for g in group]), [g[3] for g in group])
        for (k, engine, rho, _), res in zip(group, results):
            out[k] = (engine, rho, res)
    out.update(_exact_groups(items, exact_batch, lockstep))
    return out


def _fit_one(engine_args, support, counts, one_score, *, bandwidth, bounds, prepared) -> dict:
    """One class's state: its ``support`` (lo, hi), ``counts`` (T, F), whether its positives
    share ``one_score``, and the engine and scan :func:`_prepare_scans` ``prepared`` for it,
    if any."""
    (lo, hi), (T, F) = support, counts
    degenerate = None
    if F == 0:
        degenerate = "only true positives: Conf = 1"
    elif T == 0:
        degenerate = "only false positives: Conf = 0"
    elif one_score:
        degenerate = "all positives share one score: Conf = |TP| / |P|"
    if degenerate is not None:
        return _class_state(
            bandwidth=bandwidth.degenerate,
            engine=None,
            degenerate=degenerate,
            points=[0.5 * (lo + hi)],
            tp=[T],
            fp=[F],
            lo=lo,
            hi=hi,
            table=[T / (T + F)] * 2,
            table_n=[T + F] * 2,
            sign_changes=0,
            b_range=None,
            admissible=True,
        )
    if prepared is None:
        engine, rho = _make_engine(engine_args, lo, hi, bounds)
        scanned = None
    else:
        engine, rho, scanned = prepared
    width = hi - lo
    b, b_range, admissible, changes = _choose_bandwidth(bandwidth, engine, lo, hi, rho, scanned)
    if changes is None:
        conf, resolved = engine.scan([b])
        changes = eng.count_sign_changes(conf[0], resolved[0])
    cells_per_b = b / (TABLE_CELLS_PER_B * width / eng.FINE_CELLS)
    stride = int(np.clip(2 ** np.floor(np.log2(max(cells_per_b, 1.0))), 1, MAX_TABLE_STRIDE))
    table, table_n = _table(engine, b, stride)
    pts, t, f = engine.kernel_points()
    return _class_state(
        bandwidth=float(b),
        engine=engine.name,
        degenerate=None,
        points=pts,
        tp=t,
        fp=f,
        lo=lo,
        hi=hi,
        table=table,
        table_n=table_n,
        sign_changes=changes,
        b_range=b_range,
        admissible=admissible,
    )


def _choose_bandwidth(bandwidth: Bandwidth, engine, lo, hi, rho, scanned):
    """A class's bandwidth: (b, candidate range, admissible, sign changes or None).

    By the rule, where ``bandwidth`` has one: ``scanned`` is the lockstep scan's (b,
    admissible, sign changes), if it ran for this class. Otherwise the fixed bandwidth, of
    the kernel centres (rules of thumb: from the distinct scores, or the fine grid, whose
    quantiles are within R / 4096 of the exact ones).
    """
    if bandwidth.rule is None:
        pts, t, f = engine.kernel_points()
        return bandwidth.fixed(pts, t + f, lo, hi), None, True, None
    cand = rules.candidates(lo, hi, rho)
    if scanned is None:
        b, admissible = bandwidth.rule.select(engine, cand)
        changes = None
    else:
        b, admissible, changes = scanned
    return b, [float(cand[0]), float(cand[-1])], admissible, changes


def _class_state(**kw) -> dict:
    """A class's fitted state, each entry of its type."""
    return {
        "bandwidth": kw["bandwidth"],
        "engine": kw["engine"],
        "degenerate": kw["degenerate"],
        "sign_changes": int(kw["sign_changes"]),
        "admissible": bool(kw["admissible"]),
        "b_range": kw["b_range"],
        "points": np.asarray(kw["points"], dtype=np.float64),
        "tp": np.asarray(kw["tp"], dtype=np.float64),
        "fp": np.asarray(kw["fp"], dtype=np.float64),
        "table_lo": float(kw["lo"]),
        "table_hi": float(kw["hi"]),
        "table": np.asarray(kw["table"], dtype=np.float64),
        "table_n": np.asarray(kw["table_n"], dtype=np.float64),
    }


def _table(engine, b, stride):
    """Conf and the kernel-weighted positive count (kernel value 1 at distance 0) on the
    table grid."""
    if isinstance(engine, eng.BinnedEngine):
        return engine.confidence_on_fine(b, stride, with_count=True)
    x = engine.lo + (engine.hi - engine.lo) / eng.FINE_CELLS * np.arange(
        0, eng.FINE_CELLS + 1, stride
    )
    num, den, shift = eng.exact_sums(x, engine.points, engine.tp, engine.fp, b, engine.bounds)
    return np.clip(num / den, 0.0, 1.0), den * np.exp(-shift * (0.5 / (b * b)))


def _class_ranges(data: TopLabelData):
    """The rows with weight (pred, score, tp, fp), each class's score range (smin, smax) and
    support (lo, hi: the outer bin edges of binned data, as ``TopLabelData.class_support``)."""
    K = data.n_classes
    keep = (data.tp + data.fp) > 0
    if keep.all():  # per-sample data: every row has weight; skip the copies
        pred, score, tp, fp = data.pred, data.score, data.tp, data.fp
    else:
        pred, score, tp, fp = data.pred[keep], data.score[keep], data.tp[keep], data.fp[keep]
    smin = np.full(K, np.inf)
    smax = np.full(K, -np.inf)
    if K == 1 and score.size:  # one class (the pooled reference): plain min and max, the same
        smin[0], smax[0] = score.min(), score.max()
    else:
        np.minimum.at(smin, pred, score)
        np.maximum.at(smax, pred, score)
    if data.is_binned:  # support = outer bin edges, as in ScoreCalibrator._fit
        edges = data.bin_edges[keep]
        lo = np.full(K, np.inf)
        hi = np.full(K, -np.inf)
        np.minimum.at(lo, pred, edges[:, 0])
        np.maximum.at(hi, pred, edges[:, 1])
    else:
        lo, hi = smin, smax
    return pred, score, tp, fp, smin, smax, lo, hi


def _binned_grids(binned, pred, score, tp, fp, lo, hi, K):
    """The binned-engine classes ``binned`` linearly binned together in one pass: ``({class:
    (T, F)}, (T, F, binned))``, or ``({}, None)`` where there are none."""
    if not binned:
        return {}, None
    code = np.full(K, -1, dtype=np.int64)
    code[binned] = np.arange(len(binned))
    if len(binned) == K:
        T, F = eng.linear_bin(pred, score, tp, fp, lo, hi, K)
    else:
        sel = code[pred] >= 0
        T, F = eng.linear_bin(
            code[pred[sel]],
            score[sel],
            tp[sel],
            fp[sel],
            lo[binned],
            hi[binned],
            len(binned),
        )
    return {k: (T[c], F[c]) for c, k in enumerate(binned)}, (T, F, binned)


def _exact_groups(items, exact_batch, lockstep) -> dict:
    """The exact-engine classes' searches in lockstep, in groups of similar size (padding to
    the group's widest class) within a memory budget: {k: (engine, rho, result)}."""
    out = {}
    items = sorted(items, key=lambda it: exact_batch.size_of(it[1]))
    group: list[Any] = []
    for it in items + [None]:
        if it is not None:
            size = exact_batch.size_of(it[1])
            first = exact_batch.size_of(group[0][1]) if group else size
            if not group or (
                size * (len(group) + 1) <= rules.BATCH_ELEMENTS
                and size <= 1.25 * first + exact_batch.PAD_SLACK
            ):
                group.append(it)
                continue
        if group:
            engines = [g[1] for g in group]
            results = lockstep(exact_batch(engines), [g[3] for g in group])
            for (k, engine, rho, _), res in zip(group, results):
                out[k] = (engine, rho, res)
        group = [it] if it is not None else []
    return out
