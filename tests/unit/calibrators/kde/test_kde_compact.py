"""Compact kde models (issue 34, item 1; docs/kde.md, "Persistence").

A fitted kde model stores, per class, its kernel centres (exact-engine classes of at most
CENTRES_MAX centres: the table's values are computed again where a prediction needs them) or its
prediction table at knots within COMPACT_TOLERANCE (binned-engine classes and larger exact ones).
Checked here against the same fit with its full tables (``compact = False``, the layout of files
before 2026-11-27): predictions within the stated tolerance (round-off only where a class keeps
its centres), intervals alike (limits, widths, coverage of the true curve), the file's size linear
in the classes, the round trip bit for bit, old layouts loading, update and densities.
"""

import functools
import json
import warnings

import numpy as np
import pytest

import topcal
from topcal.calibrators import calibrator
from topcal.calibrators.kde.calibrator import CENTRES_MAX, COMPACT_TOLERANCE
from topcal.data import TopLabelData
from topcal.errors import ModelFileError
from topcal.persist import canonical_json, dumps, loads

from _sim import many_small_classes


def _fit(method, data, compact=True, **params):
    model = calibrator(method, **params)
    model.compact = compact
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(data)


@functools.cache
def _classes_data(seed, k, n):
    return many_small_classes(seed, k, n)


@functools.cache
def _fit_once(method, data_args, compact, frozen_params):
    """One fit per (method, many_small_classes arguments, layout, parameters) in this module: the
    tests below that read the same model (never changing it) share it."""
    return _fit(method, _classes_data(*data_args), compact, **dict(frozen_params))


def _fitted(method, data_args, compact=True, **params):
    return _fit_once(method, data_args, compact, tuple(sorted(params.items())))


def _layouts(model):
    kinds = {"knots": 0, "centres": 0, "table": 0}
    for st in model.class_state_:
        if st is not None:
            kinds["table" if "table" in st else "knots" if "knots" in st else "centres"] += 1
    return kinds


def _grid_rows(model, n=301):
    """Every class at n scores over the score range (each class's whole curve, held parts too)."""
    K = len(model.classes_)
    lo, hi = model.score_range_
    s = np.tile(np.linspace(lo, hi, n), K)
    return TopLabelData(tuple(model.classes_), np.repeat(np.arange(K), n), s, (lo, hi))


#: (method, parameters, shrunk): the rules, with and without shrinkage, reflection, both engines
CASES = [
    ("kde-mon2", {}, True),
    ("kde-mon2", {"shrinkage": 0}, False),
    ("kde-mon", {"shrinkage": 0, "boundary": "reflect"}, False),
    pytest.param("kde-opt", {"shrinkage": 0}, False, marks=pytest.mark.slow),
    ("kde", {"boundary": "reflect"}, True),
    ("kde-mon4", {"engine": "binned", "shrinkage": 0}, False),
    ("kde-mon2", {"engine": "exact", "shrinkage": 0}, False),  # > CENTRES_MAX centres: knots
]


@pytest.mark.parametrize("method,params,shrunk", CASES)
def test_compact_predictions_are_the_full_tables_within_the_stated_tolerance(
    method, params, shrunk
):
    data = _classes_data(3, 40, 12000)
    compact = _fitted(method, (3, 40, 12000), **params)
    full = _fitted(method, (3, 40, 12000), compact=False, **params)
    kinds = _layouts(compact)
    assert _layouts(full)["table"] == sum(kinds.values())
    assert kinds["knots"] > 0  # large classes (a few hundred rows)
    if params.get("engine") != "binned":
        assert kinds["centres"] > 0
    grid = _grid_rows(compact)
    for d in (data, grid):
        got, want = compact.predict(d), full.predict(d)
        # a shrunk curve moves by at most three times the tables' tolerance (its own table's, its
        # count's weight against the pseudo-count's, the pooled reference's share)
        assert np.max(np.abs(got - want)) <= (3 if shrunk else 1) * COMPACT_TOLERANCE
        if not shrunk:  # classes that keep their centres: the full table up to round-off
            centres = [k for k, st in enumerate(compact.class_state_) if st and "points" in st]
            rows = np.isin(d.pred, centres)
            np.testing.assert_allclose(got[rows], want[rows], rtol=0, atol=1e-12)


def test_exact_classes_of_more_than_centres_max_centres_store_knots():
    data = _classes_data(3, 40, 12000)
    model = _fitted("kde-mon2", (3, 40, 12000), engine="exact", shrinkage=0)
    for st, n in zip(model.class_state_, np.bincount(data.pred, minlength=40)):
        if st is not None and st["degenerate"] is None:
            assert ("knots" in st) == (n > CENTRES_MAX), n  # continuous scores: n distinct


def _truth_data(seed, n, k=6):
    """k classes, scores Beta(4, 2), P(right) = score ** power_k: (data, the true curves)."""
    rng = np.random.default_rng(seed)
    power = np.linspace(0.5, 3.0, k)
    pred = rng.integers(0, k, n)
    score = np.clip(rng.beta(4, 2, n), 1e-6, 1.0)
    right = rng.random(n) < score ** power[pred]
    labels = np.where(right, pred, (pred + 1) % k)
    data = TopLabelData.from_scores(
        pred, score, labels, classes=[f"c{i}" for i in range(k)], score_range=(0.0, 1.0)
    )
    return data, lambda kk, s: s ** power[kk]


@pytest.mark.parametrize(
    "method,params",
    [("kde-mon2", {}), pytest.param("kde-opt", {"shrinkage": 0}, marks=pytest.mark.slow)],
)
def test_intervals_from_the_compact_state_match_the_full_tables(method, params):
    """Limits within 5e-3 where the confidence is inside (0, 1) (the bias term differentiates the
    curve at steps of b / 2, which multiplies the tables' tolerance), mean width within 1 %, and
    the same coverage of the true curve within one point."""
    hits, widths = {True: [], False: []}, {True: [], False: []}
    s = np.linspace(0.45, 0.95, 21)
    for seed in range(3):
        data, truth = _truth_data(seed, 900 * (seed + 1))  # 150 to 450 rows a class
        for compact in (True, False):
            model = _fit(method, data, compact=compact, **params)
            grid = _grid_rows(model, 21)
            grid = TopLabelData(grid.classes, grid.pred, np.tile(s, 6), (0.0, 1.0))
            lo, hi = model.predict_interval(grid, 0.9)
            conf = model.predict(grid)
            if compact:
                lo_c, hi_c, conf_c = lo, hi, conf
            else:
                inside = (conf > 1e-9) & (conf < 1 - 1e-9) & (conf_c > 1e-9) & (conf_c < 1 - 1e-9)
                assert np.max(np.abs(lo_c - lo)[inside]) <= 5e-3
                assert np.max(np.abs(hi_c - hi)[inside]) <= 5e-3
            t = truth(grid.pred, grid.score)
            hits[compact].append((lo <= t) & (t <= hi))
            widths[compact].append(hi - lo)
    cov = {c: np.mean(np.concatenate(h)) for c, h in hits.items()}
    width = {c: np.mean(np.concatenate(w)) for c, w in widths.items()}
    assert abs(cov[True] - cov[False]) <= 0.01, cov
    assert abs(width[True] / width[False] - 1) <= 0.01, width


@pytest.mark.parametrize(
    "method,params",
    [
        ("kde-mon2", {}),
        ("kde", {"boundary": "reflect"}),
        pytest.param("kde-opt", {}, marks=pytest.mark.slow),
    ],
)
def test_the_round_trip_is_bit_exact(method, params):
    data = many_small_classes(5, 30, 9000)
    model = _fit(method, data, **params)
    text = dumps(model)
    back = loads(text)
    assert dumps(back) == text  # save -> load -> save: the same bytes
    np.testing.assert_array_equal(back.predict(data), model.predict(data))
    # a prediction does not depend on the other rows predicted with it (chunks, permutations)
    part = data.subset(np.arange(0, data.n_rows, 7))
    np.testing.assert_array_equal(back.predict(part), model.predict(data)[::7])
    # intervals (each row's kernel sums: the costly part) on a seventh of the rows and a row of
    # every class
    some = np.union1d(np.arange(0, data.n_rows, 7), np.unique(data.pred, return_index=True)[1])
    some = data.subset(some)
    assert set(some.pred) == set(data.pred)
    for a, b in zip(back.predict_interval(some), model.predict_interval(some)):
        np.testing.assert_array_equal(a, b)


def test_the_full_layout_still_loads_predicts_and_saves_as_it_was():
    data = many_small_classes(5, 30, 9000)
    full = _fit("kde-mon2", data, compact=False)
    text = dumps(full)
    back = loads(text)
    assert dumps(back) == text
    np.testing.assert_array_equal(back.predict(data), full.predict(data))
    assert _layouts(back)["table"] == sum(_layouts(back).values())


def _state_bytes(model) -> float:
    return len(canonical_json(model.to_dict()["state"])) / len(model.classes_)


#: Measured 2026-11-27 (many_small_classes, ~100 rows a class, sizes from a few to ~1,000 rows):
#: kde-mon2's state 2.35-2.37 kB a class at 100 and 300 classes (a class keeping its centres:
#: ~1.8 kB, one at knots ~5 kB); the full tables' 25-30 kB.
STATE_BYTES_PER_CLASS = 4000


@pytest.mark.slow
def test_the_model_file_grows_linearly_in_the_classes_with_a_small_constant():
    sizes = {}
    for k in (100, 300):
        data = many_small_classes(0, k, 100 * k)
        model = _fit("kde-mon2", data)
        sizes[k] = _state_bytes(model)
        assert sizes[k] <= STATE_BYTES_PER_CLASS, sizes
        doc = model.to_dict()
        kept = doc["evidence"]
        evidence = sum(len(canonical_json(kept[p])) for p in ("stats", "confusion", "fingerprint"))
        # the rest of the file: the evidence (per row: what update refits from) and a few lists
        assert len(dumps(model)) <= 1.1 * (sizes[k] * k + evidence) + 20_000
    assert 0.8 <= sizes[300] / sizes[100] <= 1.25, sizes  # linear: the same bytes a class
    full = _fit("kde-mon2", many_small_classes(0, 100, 10_000), compact=False)
    assert _state_bytes(full) > 5 * sizes[100]


@pytest.mark.slow
def test_an_auto_model_keeps_its_choice_and_a_summarised_table_in_bytes_linear_in_the_classes():
    """At most STATE_BYTES_PER_CLASS a class whatever auto chose (measured: 579 B at 100 classes,
    229 B at 300: the choices differ)."""
    sizes = {}
    for k in (100, 300):
        data = many_small_classes(0, k, 100 * k)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = topcal.calibrator("auto").fit(data)
        sizes[k] = _state_bytes(model)
        assert sizes[k] <= STATE_BYTES_PER_CLASS, sizes
        kept = {model.method_, "uncalibrated", *(model.blend_ or {"methods": ()})["methods"]}
        for n, v in model.cv_.items():  # per-class losses: the model in use's and the baseline's
            assert (v["per_class"] is not None) == (n in kept and v["error"] is None), n
        back = loads(dumps(model))
        assert dumps(back) == dumps(model)
        np.testing.assert_array_equal(back.predict(data), model.predict(data))


def test_update_refits_a_compact_model_from_its_statistics():
    data = many_small_classes(4, 20, 6000)
    half = data.n_rows // 2
    a, b = data.subset(np.arange(half)), data.subset(np.arange(half, data.n_rows))
    model = _fit("kde-mon2", a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.update(b)
    again = _fit("kde-mon2", model.evidence_.stats.to_data())
    np.testing.assert_array_equal(model.predict(data), again.predict(data))
    assert _layouts(model)["knots"] > 0 and _layouts(model)["centres"] > 0


def test_densities_of_a_class_at_knots_from_its_table():
    """Within the support the table's count and Conf give the densities (within the tables'
    tolerance); outside it a kernel at the support's end: an upper bound of the exact tails, equal
    at the end."""
    compact = _fitted("kde-mon2", (3, 40, 12000), shrinkage=0)
    full = _fitted("kde-mon2", (3, 40, 12000), compact=False)
    k = next(i for i, st in enumerate(compact.class_state_) if st and "knots" in st)
    lo, hi = compact.support_[k]
    inside = np.linspace(lo, hi, 201)
    got, want = compact.densities(k, inside), full.densities(k, inside)
    for g, w in zip(got, want):
        assert np.max(np.abs(g - w)) <= 2 * COMPACT_TOLERANCE * (np.max(w) + 1)
    below = np.linspace(max(lo - 0.2, 0.0), lo, 21)
    for g, w in zip(compact.densities(k, below), full.densities(k, below)):
        assert np.all(g >= w * (1 - 1e-3) - 1e-9)


def test_a_tampered_compact_state_is_refused():
    doc = json.loads(dumps(_fitted("kde-mon2", (3, 40, 12000))))
    states = doc["model"]["state"]["class_state"]
    k = next(i for i, st in enumerate(states) if st and "knots" in st)
    for key, value in (
        ("knots", list(reversed(states[k]["knots"]))),
        ("conf", [1.5] * len(states[k]["conf"])),
        ("count", [-1.0] * len(states[k]["count"])),
        ("table_cells", 3.5),
        ("wide", {"cells": 4, "scale": [1.0], "bias": [0.0]}),
    ):
        bad = json.loads(json.dumps(doc))
        bad["model"]["state"]["class_state"][k][key] = value
        import hashlib

        bad["sha256"] = hashlib.sha256(canonical_json(bad["model"]).encode()).hexdigest()
        with pytest.raises(ModelFileError):
            loads(json.dumps(bad))
