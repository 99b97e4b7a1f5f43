"""Acceptance thresholds with a precision guarantee (issue 23, item 2): topcal.thresholds.core,
``topcal threshold``,
``apply --thresholds``, the report's acceptance section."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

import topcal
from topcal import TopLabelData
from topcal.errors import DataError, ModelFileError, ParameterError, TopcalError
from topcal.evidence.fingerprint import Fingerprint
from topcal.thresholds.core import (
    GLOBAL_STARTS,
    GRID,
    POOL_FACTOR,
    STARTS,
    Thresholds,
    binomial_tail,
    fit_thresholds,
    fixed_sequence,
    load_thresholds,
    loads_thresholds,
    ltt_cutoff,
    n_min,
    sgr_threshold,
)

from _cli import assert_error, assert_ok, call, cli, snapshot


def linear_population(n, seed, k=2):
    """Scores uniform on (0, 1), P(right | score) = score, so the uncalibrated score is calibrated
    and the
    precision of {score >= t} is (1 + t) / 2: target 0.8 is met exactly for t >= 0.6."""
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, k, n)
    s = rng.random(n)
    right = rng.random(n) < s
    labels = np.where(right, pred, (pred + 1) % k)
    return TopLabelData.from_scores(pred, s, labels, classes=[str(i) for i in range(k)])


@pytest.fixture(scope="module")
def uncal():
    return topcal.calibrator("uncalibrated").fit(linear_population(500, 99))


# ------------------------------------------------------------------ the test itself
def test_binomial_tail_is_scipys_binomial_survival_function():
    c = np.array([0, 1, 5, 17, 20])
    assert np.allclose(
        binomial_tail(c, 20, 0.8), np.where(c > 0, binom.sf(c - 1, 20, 0.8), 1.0), rtol=1e-10
    )
    assert n_min(0.95, 0.05) == 59 and 0.95**59 <= 0.05 < 0.95**58


def test_fixed_sequence_stops_at_the_first_non_rejection():
    assert fixed_sequence([0.01, 0.02, 0.2, 0.001], 0.05) == 1  # the later 0.001 is never reached
    assert fixed_sequence([0.3, 0.01], 0.05) == -1
    assert fixed_sequence([0.01, 0.04], 0.05) == 1


@pytest.mark.slow
def test_ltt_guarantee_holds_over_many_splits(uncal):
    """Violation rate (true precision at the chosen cut-off below the target) <= delta + 3 SE, per
    class and
    global, over 300 labelled samples; the cut-offs are not vacuous (most samples find one)."""
    target, delta, reps = 0.8, 0.1, 300
    viol = np.zeros(3)
    found = np.zeros(3)
    for seed in range(reps):
        th = fit_thresholds(uncal, linear_population(1500, seed), target, delta)
        for j, c in enumerate([*th.per_class, th.overall]):
            if c.cutoff is not None:
                found[j] += 1
                viol[j] += (1 + c.cutoff) / 2 < target
    bound = delta + 3 * np.sqrt(delta * (1 - delta) / reps)
    assert np.all(viol / reps <= bound), viol / reps
    assert np.all(found >= 0.9 * reps), found
    # the empirical (naive) choice violates far more often: it is tuned on the same rows
    assert viol.max() / reps < 0.5


@pytest.mark.slow
def test_the_two_families_of_a_pooled_cutoff_keep_the_guarantee():
    """The global cut-off on a step curve: two families (the confidence, the raw score) at
    delta / 2 each, the one accepting more kept. Its true precision (on 200,000 fresh rows) is
    below the target in at most delta + 3 SE of 200 labelled samples, and both families win
    sometimes."""
    target, delta, reps = 0.8, 0.1, 200
    model = topcal.calibrator("hist", n_bins=4, shrinkage=0).fit(linear_population(400, 7))
    big = linear_population(200_000, 8)
    conf_big = model.predict(big)
    viol, kinds = 0, set()
    for seed in range(reps):
        th = fit_thresholds(
            model, linear_population(1500, 100 + seed), target, delta, mode="global"
        )
        if th.overall.cutoff is None:
            continue
        kinds.add(th.overall.on)
        acc = th.accept(big.pred, conf_big, big.score)
        viol += big.tp[acc].sum() / acc.sum() < target
    bound = delta + 3 * np.sqrt(delta * (1 - delta) / reps)
    assert viol / reps <= bound, viol / reps
    assert kinds == {"confidence", "score"}, kinds


def brute_force_ltt(conf, right, precision, delta, starts=3, factor=4, score=None):
    """The procedure written out naively: each sequence walks the candidates from strict to loose,
    testing
    with scipy's binomial survival function, and stops at the first cut-off it cannot reject;
    sequence j
    starts where factor^j times the fewest testable predictions are first accepted, each at
    delta / starts. Candidates: the grid, or with ``score`` every distinct (confidence, score) pair,
    a row
    accepted when its pair is at least the candidate's in that order."""
    need = int(np.ceil(np.log(delta / starts) / np.log(precision) - 1e-12))

    def accepts(t):
        return conf >= t if score is None else (conf > t[0]) | ((conf == t[0]) & (score >= t[1]))

    grid = (
        sorted(GRID, reverse=True) if score is None else sorted(set(zip(conf, score)), reverse=True)
    )
    total = len(conf)
    reached = [j for j in range(starts) if total >= need * factor**j]
    level = delta / starts
    best = None
    for j in reached:
        started = False
        for t in grid:
            acc = accepts(t)
            n, c = int(acc.sum()), int(right[acc].sum())
            if not started:
                if n < need * factor**j:
                    continue
                started = True
            if binom.sf(c - 1, n, precision) > level:
                break
            best = t if best is None else min(best, t)
    return best


def test_sequences_take_the_loosest_rejection_of_any_start():
    from topcal.thresholds.core import sequences

    assert (
        sequences([0.01, 0.2, 0.01, 0.01, 0.3], [0], 0.05) == 0
    )  # stops at the first non-rejection
    assert sequences([0.01, 0.2, 0.01, 0.01, 0.3], [0, 2], 0.05) == 3  # the second start goes on
    assert sequences([0.3, 0.2, 0.04, 0.01], [0, 1], 0.05) == -1  # nothing before a start is tested


def test_fixed_sequences_match_a_brute_force_walk_and_nest(uncal):
    for seed, target in [(20, 0.9), (21, 0.9), (22, 0.8), (23, 0.8)]:  # 0.9: some find none
        data = linear_population(700, seed)
        conf = uncal.predict(data)
        th = fit_thresholds(uncal, data, target, 0.1)
        for k, c in enumerate(th.per_class):
            rows = data.pred == k
            want = brute_force_ltt(
                conf[rows], data.tp[rows] > 0, target, 0.1, score=data.score[rows]
            )
            assert (c.cutoff, c.score_cutoff) == ((None, None) if want is None else want)
        want = brute_force_ltt(
            conf, data.tp > 0, target, 0.1, 6, 2, score=data.score
        )  # the global starts; one family (uncalibrated: the score rises with the confidence)
        assert (th.overall.cutoff, th.overall.score_cutoff) == (
            (None, None) if want is None else want
        )
    # what is accepted at a looser cut-off contains what is accepted at a stricter one, and the
    # accepted rows are
    # those whose confidence reaches the cut-off; the lower bound is below the estimate
    c = th.overall
    assert (
        c.n_accepted == np.sum(c.accepts(conf, data.score)) == np.sum(conf >= c.cutoff)
    )  # no ties here
    assert c.precision_lower < c.precision and c.p_value <= 0.1
    bon = fit_thresholds(uncal, data, 0.9, 0.1, multiplicity="bonferroni")
    assert all(b.level == pytest.approx(0.05) for b in bon.per_class)
    assert bon.overall.level == pytest.approx(0.1)  # one family: see above


def test_thresholds_notebook_view_lists_each_class_cutoff_bounds_and_accepted_fraction_or_reason(
    uncal,
):
    import dataclasses
    import html as htmlmod
    import re

    big = linear_population(2000, 1)
    pred = np.r_[np.zeros(2000, int), np.ones(12, int)]
    s = np.r_[big.score, np.full(12, 0.99)]
    labels = np.r_[np.where(big.tp > 0, 0, 1), np.ones(12, int)]
    data = TopLabelData.from_scores(pred, s, labels, classes=["0", "1"])
    th = fit_thresholds(uncal, data, 0.9, 0.05, pool_below=0)  # every class alone
    th = dataclasses.replace(
        th, per_class=(dataclasses.replace(th.per_class[0], name="a<b"), th.per_class[1])
    )
    shown = th._repr_html_()
    assert (
        "precision &ge; 0.9 with probability &ge; 0.95" in shown and "per-class cut-offs" in shown
    )
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", shown)
    assert len(rows) == 1 + 2 + 1  # header, two classes, global
    cells = [[htmlmod.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for r in rows[1:]]
    a, one, everything = cells
    c = th.per_class[0]
    assert a == [
        "a<b",
        f"{c.cutoff:.6g}",
        f"{c.precision:.4f}",
        f"{c.precision_lower:.4f}",
        f"{c.accepted_fraction:.1%} ({c.n_accepted:g} of {c.n_predicted:g})",
    ]
    assert c.precision_lower < c.precision and 0 < c.accepted_fraction < 1
    assert (
        one[0] == "1"
        and one[1] == "\u2013"
        and one[2].startswith("no cut-off: only 12 predictions")
    )
    assert everything[0] == "(all)" and everything[1] == f"{th.overall.cutoff:.6g}"
    assert "<b>Thresholds</b>" in shown and "a&lt;b" in shown  # names escaped
    glob = fit_thresholds(uncal, data, 0.9, 0.05, mode="global")
    assert "the global cut-off" in glob._repr_html_()


def test_small_class_and_unreachable_target_get_no_cutoff_and_a_reason(uncal):
    big = linear_population(2000, 1)
    pred = np.r_[np.zeros(2000, int), np.ones(12, int)]  # all of big's rows as class 0
    s = np.r_[big.score, np.full(12, 0.99)]
    labels = np.r_[np.where(big.tp > 0, 0, 1), np.ones(12, int)]
    data = TopLabelData.from_scores(pred, s, labels, classes=["0", "1"])
    th = fit_thresholds(uncal, data, 0.9, 0.05, pool_below=0)  # every class alone
    assert th.per_class[0].cutoff is not None and th.shared is None
    small = th.per_class[1]
    assert small.cutoff is None and small.reason.startswith("only 12 predictions")
    assert f"at least {n_min(0.9, 0.05 / 3)} are needed" in small.reason
    # by default the small class is in the shared group (alone there: still too few rows)
    pooled = fit_thresholds(uncal, data, 0.9, 0.05)
    assert pooled.per_class[0].group is None and pooled.per_class[1].group == "shared"
    assert (
        pooled.per_class[1].cutoff is None and "in the shared group" in pooled.per_class[1].reason
    )
    hard = fit_thresholds(uncal, data, 0.99, 0.05).per_class[0]  # only the top 2% reach 0.99
    assert hard.cutoff is None and "precision never reaches 0.99 at level delta=0.05" in hard.reason
    # rows of a class without a cut-off are never accepted
    assert not th.accept(np.ones(3, int), np.ones(3)).any()


def test_global_cutoff_accepts_about_what_sgr_accepts(uncal):
    """SGR (Geifman and El-Yaniv 2017) and the global cut-off (one family here: an uncalibrated
    model's confidence is its score) both find a cut-off; the global one accepts at least 0.95 x
    SGR's rows."""
    data = linear_population(5000, 3)
    conf = uncal.predict(data)
    sgr = sgr_threshold(conf, data.tp, data.fp, 0.9, 0.05)
    ltt = fit_thresholds(uncal, data, 0.9, 0.05).overall.cutoff
    assert sgr is not None and 0.8 <= ltt < 0.95 and 0.8 <= sgr < 0.95
    assert np.mean(conf >= ltt) >= 0.95 * np.mean(conf >= sgr)


# ------------------------------------------------------------------ guarding the guarantee
def test_fitting_data_is_refused_and_fingerprints_persist():
    data = linear_population(2000, 7)
    model = topcal.calibrator("hist").fit(data)
    with pytest.raises(DataError, match="are the rows the model was fitted on"):
        fit_thresholds(model, data.subset(np.random.default_rng(0).permutation(2000)))
    bigger = TopLabelData.concat([data, linear_population(1000, 8)])
    with pytest.raises(DataError, match="about 67% of the labelled rows are rows the model"):
        fit_thresholds(model, bigger)
    # a superset of mostly new rows: it holds the fitting rows, so it is refused all the same
    much_bigger = TopLabelData.concat([data, linear_population(6000, 8)])
    with pytest.raises(DataError, match="contain about 100% of the model's fitting rows"):
        fit_thresholds(model, much_bigger)
    again = topcal.persist.loads(topcal.persist.dumps(model))
    assert again.evidence_.fingerprint == model.evidence_.fingerprint
    with pytest.raises(DataError, match="fitted on"):
        fit_thresholds(again, data)
    # an update remembers both parts: the fingerprint of a fit on all rows
    part = (
        topcal.calibrator("hist")
        .fit(data.subset(np.arange(1200)))
        .update(data.subset(np.arange(1200, 2000)))
    )
    assert part.evidence_.fingerprint == model.evidence_.fingerprint
    # a model file written before fingerprints loads, and cannot be checked (no error: a warning)
    doc = json.loads(topcal.persist.dumps(model))
    del doc["model"]["evidence"]["fingerprint"]
    doc["sha256"] = (
        __import__("hashlib")
        .sha256(topcal.persist.canonical_json(doc["model"]).encode())
        .hexdigest()
    )
    old = topcal.persist.loads(json.dumps(doc))
    assert old.evidence_.fingerprint is None
    with pytest.warns(topcal.errors.TopcalWarning, match="could not be checked"):
        fit_thresholds(old, data)
    # held-out rows pass
    fit_thresholds(model, linear_population(2000, 9))


def test_bad_parameters_and_unlabelled_data_are_one_line_errors(uncal):
    data = linear_population(500, 2)
    for kw, frag in [
        ({"precision": 1.0}, "'precision' must be a number in (0, 1)"),
        ({"precision": 0}, "'precision'"),
        ({"delta": 1.5}, "'delta' must be a number in (0, 1)"),
        ({"delta": 0.0}, "'delta'"),
        ({"mode": "both"}, "'mode'"),
    ]:
        with pytest.raises(ParameterError, match=frag.replace("(", r"\(").replace(")", r"\)")):
            fit_thresholds(uncal, data, **kw)
    with pytest.raises(DataError, match="choosing thresholds needs labelled data"):
        fit_thresholds(uncal, data.without_labels())


def test_json_round_trip_and_model_check(tmp_path, uncal):
    data = linear_population(3000, 4)
    th = fit_thresholds(uncal, data, 0.9, 0.05, mode="global")
    th.save(tmp_path / "t.json")
    back = load_thresholds(tmp_path / "t.json")
    assert back == th and isinstance(back, Thresholds)
    assert np.array_equal(back.cutoffs(), np.full(2, th.overall.cutoff))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["format"] == "topcal-thresholds" and doc["format_version"] == 1
    doc["thresholds"]["precision"] = 0.5
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        load_thresholds(tmp_path / "edited.json")
    back.check_model(uncal)
    other = topcal.calibrator("uncalibrated").fit(linear_population(500, 98))
    with pytest.raises(TopcalError, match="another 'uncalibrated' model"):
        back.check_model(other)
    three = topcal.calibrator("uncalibrated").fit(linear_population(500, 98, k=3))
    with pytest.raises(TopcalError, match="classes"):
        back.check_model(three)


def test_thresholds_file_writes_a_class_a_line_with_the_former_content_and_digest(uncal):
    """The file's text is persist's versioned layout (one class's cut-off a line, by the C
    encoder); what it holds and its digest are those of the former json.dumps(indent=1)."""
    import hashlib

    data = linear_population(3000, 5, k=3)
    model = topcal.calibrator("uncalibrated").fit(linear_population(1000, 6, k=3))
    th = fit_thresholds(model, data, 0.9, 0.05, mode="per-class")
    text = th.dumps()
    payload = th.to_dict()
    former = {
        "format": "topcal-thresholds",
        "format_version": 1,
        "topcal_version": topcal.__version__,
        "thresholds": payload,
        "sha256": hashlib.sha256(topcal.persist.canonical_json(payload).encode()).hexdigest(),
    }
    assert json.loads(text) == json.loads(json.dumps(former, indent=1))
    per = [line for line in text.splitlines() if '"name":' in line]
    assert len(per) >= 3  # the classes' cut-offs, one a line
    assert loads_thresholds(text) == th


def test_fingerprint_merge_is_order_free():
    a, b = linear_population(300, 1), linear_population(400, 2)
    both = Fingerprint.of(TopLabelData.concat([a, b]))
    assert (
        Fingerprint.of(b).merge(Fingerprint.of(a)) == both == Fingerprint.from_dict(both.to_dict())
    )
    assert both.containment(a)[1] == pytest.approx(300 / 700, abs=0.15)


# ------------------------------------------------------------------ command line
@pytest.fixture(scope="module")
def files_once(tmp_path_factory):
    """The command line's files and the hist model, made once per module (in process)."""
    tmp_path = tmp_path_factory.mktemp("thresholds")
    rng = np.random.default_rng(0)
    n, K = 6000, 3
    z = rng.normal(size=(n, K)) * 2
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    y = (p.cumsum(1) > rng.random(n)[:, None]).argmax(1)
    frame = pd.DataFrame({f"p_c{j}": p[:, j] for j in range(K)})
    frame["label"] = [f"c{v}" for v in y]
    frame.iloc[:3000].to_csv(tmp_path / "fit.csv", index=False)
    frame.iloc[3000:].to_csv(tmp_path / "held.csv", index=False)
    frame.iloc[3000:].drop(columns="label").to_csv(tmp_path / "new.csv", index=False)
    assert_ok(call("fit", tmp_path / "fit.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    return tmp_path


@pytest.fixture()
def files(files_once, tmp_path):
    """A copy of :func:`files_once` in the test's own folder (tests write and snapshot it)."""
    for p in files_once.iterdir():
        shutil.copy2(p, tmp_path / p.name)
    return tmp_path


def _threshold(t, *extra, out="th.json"):
    """``topcal threshold held.csv --model m.json -o OUT`` in the folder ``t``, and ``extra``."""
    return call("threshold", t / "held.csv", "--model", t / "m.json", "-o", t / out, *extra)


@pytest.mark.slow
def test_cli_threshold_then_apply_adds_accepted(files):
    t = files
    r = assert_ok(_threshold(t, "--precision", "0.9", "--delta", "0.1"))
    assert "precision >= 0.9 with probability >= 0.9" in r.stdout and "c0" in r.stdout
    th = load_thresholds(t / "th.json")
    assert th.mode == "per-class" and th.precision == 0.9
    assert (
        "classes with their own cut-off" in r.stdout
        and "accepted by the cut-offs in use" in r.stdout
    )
    r = assert_ok(
        call(
            "apply", t / "m.json", t / "new.csv", "--thresholds", t / "th.json", "-o", t / "out.csv"
        )
    )
    out = pd.read_csv(t / "out.csv")
    new = topcal.read_data(t / "new.csv")  # the raw top scores break ties at a cut-off
    codes = np.array([th.classes.index(k) for k in out["pred"]])
    expect = th.accept(codes, out["confidence"].to_numpy(), new.score)
    assert out["accepted"].dtype == bool and out["accepted"].tolist() == expect.tolist()
    assert 0 < out["accepted"].mean() < 1
    # issue 33: apply says how many rows it accepted
    assert f"accepted: {int(out['accepted'].sum())} of {len(out)} rows" in r.stdout
    # global mode: one cut-off, and no per-class rows or reasons printed
    r = assert_ok(_threshold(t, "--global", "--bonferroni", "--precision", "0.9", out="g.json"))
    assert "one cut-off for all classes" in r.stdout and "(all)" in r.stdout
    assert not any(ln.strip().startswith("c0") for ln in r.stdout.splitlines())
    g = load_thresholds(t / "g.json")
    assert (
        g.mode == "global"
        and g.multiplicity == "bonferroni"
        and g.per_class[0].level == pytest.approx(0.05 / 3)
    )
    assert g.overall.cutoff is not None and np.all(g.cutoffs() == g.overall.cutoff)
    # apply with the global cut-off (on whichever family accepted more: the raw score reads the
    # input's top score) agrees with Thresholds.accept
    assert_ok(
        call("apply", t / "m.json", t / "new.csv", "--thresholds", t / "g.json", "-o", t / "g.csv")
    )
    out = pd.read_csv(t / "g.csv")
    codes = np.array([g.classes.index(k) for k in out["pred"]])
    expect = g.accept(codes, out["confidence"].to_numpy(), new.score)
    assert out["accepted"].tolist() == expect.tolist() and 0 < out["accepted"].mean() < 1


@pytest.mark.slow
def test_cli_bad_inputs_are_one_line_errors(files):
    t = files
    base = ["threshold", t / "held.csv", "--model", t / "m.json", "-o", t / "th.json"]
    assert_error(cli(*base, "--precision", "1.2"), "'precision' must be a number in (0, 1)", "1.2")
    assert_error(cli(*base, "--delta", "0"), "'delta' must be a number in (0, 1)")
    assert_error(cli(*base, "--pool-below", "-3"), "--pool-below", "'auto' or a number")
    assert_error(
        cli("threshold", t / "new.csv", "--model", t / "m.json", "-o", t / "th.json"),
        "needs labelled data",
    )
    assert_error(
        cli("threshold", t / "fit.csv", "--model", t / "m.json", "-o", t / "th.json"),
        "the model was fitted on",
        "held-out",
    )
    assert not (t / "th.json").exists()
    # thresholds of another model
    assert_ok(call(*base))
    assert_ok(call("fit", t / "held.csv", "--method", "hist", "-o", t / "m2.json"))
    assert_error(
        cli(
            "apply", t / "m2.json", t / "new.csv", "--thresholds", t / "th.json", "-o", t / "o.csv"
        ),
        "another 'hist' model",
    )
    pd.DataFrame({"p_a": [0.6, 0.3], "p_b": [0.4, 0.7], "label": ["a", "b"]}).to_csv(
        t / "ab.csv", index=False
    )
    assert_ok(call("fit", t / "ab.csv", "--method", "hist", "-o", t / "ab.json"))
    assert_error(
        cli("apply", t / "ab.json", t / "ab.csv", "--thresholds", t / "th.json", "-o", t / "o.csv"),
        "the thresholds are for a model with classes",
    )
    assert_error(
        cli(
            "apply", t / "m.json", t / "new.csv", "--thresholds", t / "nope.json", "-o", t / "o.csv"
        ),
        "does not exist",
    )
    assert not (t / "o.csv").exists()


@pytest.mark.slow
def test_cli_threshold_never_writes_over_an_input(files):
    t = files
    os.link(t / "held.csv", t / "hard.csv")
    before = snapshot(t)
    for out in (t / "held.csv", t / "hard.csv", t / "m.json"):
        assert_error(
            cli("threshold", t / "held.csv", "--model", t / "m.json", "-o", out),
            "is the input file",
        )
    assert_ok(_threshold(t))
    assert_error(
        cli(
            "apply", t / "m.json", t / "new.csv", "--thresholds", t / "th.json", "-o", t / "th.json"
        ),
        "is the input file",
    )
    after = snapshot(t)
    assert {k: v for k, v in after.items() if k != "th.json"} == before


# ------------------------------------------------------------------ report
@pytest.mark.slow
def test_report_with_thresholds_renders_the_acceptance_section(files):
    t = files
    assert_ok(_threshold(t, "--precision", "0.9"))
    before = snapshot(t)
    report = ("report", t / "held.csv", "--methods", "hist", "--thresholds", t / "th.json")
    assert_error(cli(*report, "-o", t / "rep"), "--thresholds and --model go together")
    assert_error(cli(*report, "--model", t / "m.json", "-o", t / "th.json"), "report folder")
    assert snapshot(t) == before
    assert_ok(call(*report, "--in-sample", "--model", t / "m.json", "-o", t / "rep"))
    page = (t / "rep" / "index.html").read_text()
    assert "Acceptance: precision &gt;= 0.9 at delta = 0.05 (per-class hist)" in page
    assert any("acceptance" in p.name for p in (t / "rep" / "figures").iterdir())


@pytest.mark.slow
def test_acceptance_view_marks_the_cutoff(files):
    from topcal.thresholds.plots import acceptance_view, plot_acceptance

    t = files
    model = topcal.load(t / "m.json")
    data = topcal.read_data(t / "held.csv")
    th = fit_thresholds(model, data, 0.9, 0.05)
    view = acceptance_view(model, data, th)
    assert view.curves[0].name == "(all)" and len(view.curves) == 1 + len(th.classes)
    for c, ref in zip(view.curves[1:], sorted(th.per_class, key=lambda c: -c.n_predicted)):
        assert c.name == ref.name and c.cutoff == ref.cutoff
        assert np.all(np.diff(c.accepted_fraction) > 0) and c.accepted_fraction[
            -1
        ] == pytest.approx(1.0)
        if (
            ref.cutoff is not None
        ):  # on the data it was chosen on, the dot is the reported (fraction, precision)
            assert c.chosen == pytest.approx((ref.accepted_fraction, ref.precision))
    fig = plot_acceptance(view)
    gids = {a.get_gid() for ax in fig.axes for a in ax.get_lines()}
    assert "acceptance:(all)" in gids and any(g and g.startswith("cutoff:") for g in gids)


@pytest.mark.slow
def test_dask_apply_with_thresholds_is_the_local_apply(files, cluster_address):
    # --thresholds on a real LocalCluster: the same accepted column as the local engine, the same
    # refusals
    t = files
    assert_ok(_threshold(t, "--precision", "0.9", "--delta", "0.1"))
    pd.read_csv(t / "new.csv").to_parquet(t / "new.parquet")
    dask = ("--engine", "dask", "--scheduler", cluster_address)

    def apply(model, data, out, *engine):
        """``topcal apply`` of ``model`` to ``data`` with the thresholds, written to ``out``."""
        return ("apply", t / model, t / data, *engine, "--thresholds", t / "th.json", "-o", t / out)

    assert_ok(call(*apply("m.json", "new.parquet", "local.csv")))
    r = assert_ok(call(*apply("m.json", "new.parquet", "dask.csv", *dask)))
    assert "with accepted" in r.stdout
    local, got = pd.read_csv(t / "local.csv"), pd.read_csv(t / "dask.csv")
    assert got["accepted"].dtype == bool and 0 < got["accepted"].mean() < 1
    pd.testing.assert_frame_equal(got, local)
    # thresholds of another model, and an input that already has an 'accepted' column: refused,
    # nothing written
    assert_ok(call("fit", t / "held.csv", "--method", "hist", "-o", t / "m2.json"))
    assert_error(cli(*apply("m2.json", "new.parquet", "o.csv", *dask)), "another 'hist' model")
    pd.read_csv(t / "new.csv").assign(accepted=1).to_parquet(t / "acc.parquet")
    assert_error(
        cli(*apply("m.json", "acc.parquet", "o.csv", *dask)), "already has a 'accepted' column"
    )
    assert not (t / "o.csv").exists()


def many_small_classes(n_classes=200, per_class=30, seed=0):
    """ImageNet-like: many classes of a few dozen rows, precision 0.97 above score 0.8 (0.5
    below)."""
    rng = np.random.default_rng(seed)
    pred = np.repeat(np.arange(n_classes), per_class)
    score = rng.uniform(0.3, 1.0, pred.size)
    right = rng.uniform(size=pred.size) < np.where(score > 0.8, 0.97, 0.5)
    labels = np.where(right, pred, (pred + 1) % n_classes)
    return TopLabelData.from_scores(
        pred, score, labels, classes=[f"c{i}" for i in range(n_classes)]
    )


def test_many_small_classes_share_one_cutoff_that_accepts_like_the_global_one(uncal):
    """Issue 33: per class (the default) at 200 classes of 30 rows accepted nothing; the classes too
    small to show the target alone now share one cut-off, tested on their rows pooled."""
    data = many_small_classes()
    model = topcal.calibrator("uncalibrated").fit(many_small_classes(seed=1))
    alone = fit_thresholds(model, data, 0.9, 0.05, pool_below=0)
    assert all(c.cutoff is None for c in alone.per_class)  # the former default
    th = fit_thresholds(model, data, 0.9, 0.05)
    assert th.pool_below == POOL_FACTOR * n_min(0.9, 0.05 / STARTS) > 30
    assert th.shared is not None and th.shared.cutoff is not None
    assert all(c.group == "shared" and c.cutoff == th.shared.cutoff for c in th.per_class)
    conf = model.predict(data)
    accepted = th.accept(data.pred, conf, data.score).mean()
    glob = dataclasses.replace(th, mode="global").accept(data.pred, conf, data.score).mean()
    assert accepted >= 0.9 * glob > 0
    assert (
        "200 classes with fewer than" in th.statements()
        and "0 classes with their own" in th.statements()
    )
    # the group's statement: precision of the accepted rows of the group, tested like the global one
    assert th.shared.precision_lower is not None and th.shared.precision_lower < th.shared.precision
    # bonferroni counts the group as one statement
    b = fit_thresholds(model, data, 0.9, 0.05, multiplicity="bonferroni")
    assert b.shared.level == pytest.approx(0.05)  # one statement: the group (one family here)
    # saved and loaded with the group; an edited group cut-off is refused
    back = loads_thresholds(th.dumps())
    assert back == th
    for bad in ("auto!", -1, float("nan"), True):
        with pytest.raises(TopcalError, match="pool_below"):
            fit_thresholds(model, data, 0.9, 0.05, pool_below=bad)


def one_big_many_small(seed):
    big = linear_population(2000, seed)
    small = many_small_classes(20, 30, seed=seed)
    pred = np.r_[np.zeros(2000, int), small.pred + 1]
    score = np.r_[big.score, small.score]
    labels = np.r_[np.where(big.tp > 0, 0, 1), np.where(small.tp > 0, small.pred + 1, 0)]
    return TopLabelData.from_scores(pred, score, labels, classes=[str(i) for i in range(21)])


def test_large_classes_are_tested_alone_small_ones_share():
    data = one_big_many_small(2)
    model = topcal.calibrator("uncalibrated").fit(one_big_many_small(3))
    th = fit_thresholds(model, data, 0.9, 0.05, multiplicity="bonferroni")
    assert th.per_class[0].group is None and all(c.group == "shared" for c in th.per_class[1:])
    assert th.per_class[0].level == pytest.approx(0.05 / 2)  # two statements: class 0, the group
    rows = th.table()
    assert [r[0] for r in rows[-2:]] == ["(shared)", "(all)"]
    assert "1 classes with their own cut-off" in th.statements()


def test_ties_of_a_step_curve_are_broken_by_the_raw_score():
    """Issue 33: hist ties many rows at one confidence; ordering by confidence, then raw score,
    gives cut-offs inside a tie, so the accepted share can grow where the tie's top rows are right.
    Pooled over classes, the raw score's own order accepts more still: the global cut-off is then
    on the raw score (one of two families at delta / 2)."""
    rng = np.random.default_rng(4)
    n = 6000
    pred = rng.integers(0, 2, n)
    score = rng.uniform(0.5, 1.0, n)
    right = rng.uniform(size=n) < np.where(
        score > 0.75, 0.5 + 0.5 * (score - 0.75) / 0.25 + 0.02, 0.6
    )
    labels = np.where(right, pred, 1 - pred)

    def make(idx):
        return TopLabelData.from_scores(pred[idx], score[idx], labels[idx], classes=["a", "b"])

    fit_part, held = make(np.arange(0, n, 2)), make(np.arange(1, n, 2))
    model = topcal.calibrator("hist", n_bins=2, shrinkage=0).fit(fit_part)  # two bins: many ties
    conf = model.predict(held)
    th = fit_thresholds(model, held, 0.9, 0.05, pool_below=0)  # each class alone: confidence
    o = th.per_class[0]
    assert o.on == "confidence" and o.cutoff is not None and o.score_cutoff is not None
    assert o.cutoff in set(conf)  # a tie's confidence, cut inside the tie by the raw score
    acc = th.accept(held.pred, conf, held.score)
    a = held.pred == 0
    assert 0 < acc[a].mean() < np.mean(conf[a] >= o.cutoff)  # part of the tie group only
    assert acc[a].sum() == o.n_accepted
    with pytest.raises(TopcalError, match="raw score"):
        th.accept(held.pred, conf)
    back = loads_thresholds(th.dumps())
    assert back.per_class[0].score_cutoff == o.score_cutoff
    assert np.array_equal(back.accept(held.pred, conf, held.score), acc)
    # pooled: the raw score ranks better than two bins; the global cut-off is on it
    g = dataclasses.replace(th, mode="global")
    assert g.overall.on == "score" and g.overall.score_cutoff is None
    both = ltt_cutoff(
        "(all)", conf, held.tp, held.fp, 0.9, 0.05 / 2, starts=GLOBAL_STARTS, score=held.score
    )
    assert g.overall.n_accepted > both.n_accepted  # more than the confidence's family
    acc = g.accept(held.pred, conf, held.score)
    assert np.array_equal(acc, held.score >= g.overall.cutoff)
    assert acc.sum() == g.overall.n_accepted
    with pytest.raises(TopcalError, match="raw score"):
        g.accept(held.pred, conf)
    assert loads_thresholds(g.dumps()) == g
