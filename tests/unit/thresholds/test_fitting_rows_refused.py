"""A guarantee's precondition, enforced (issue 33, item 2): the labelled rows a threshold is chosen
on are not the rows the calibrator was fitted on, in whatever encoding they come, and an update
does not count rows twice."""

import functools
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
import topcal.engines
from topcal import TopLabelData
from topcal.errors import DataError, TopcalWarning
from topcal.evidence.fingerprint import Fingerprint
from topcal.thresholds.core import fit_thresholds

from _cli import assert_error, assert_ok, call, cli

K = 4
NAMES = [f"c{j}" for j in range(K)]


def outputs(n, seed):
    """Probabilities of a K-class network that is right ~70% of the time, and the true classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    z = rng.normal(size=(n, K)) * 1.5
    z[np.arange(n), y] += 1.8
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True), y


@pytest.fixture()
def fitted():
    """A fresh model per test (``update`` changes the model it is called on)."""
    p, y = outputs(4000, 0)
    data = TopLabelData.from_probs(p, y, NAMES)
    return p, y, topcal.calibrator("hist").fit(data)


def reencodings(p, y):
    """The fitting rows as a user might hold them again."""
    pred, top = p.argmax(1), p.max(1)
    return {
        "6 decimals": TopLabelData.from_probs(np.round(p, 6), y, NAMES),
        "float32": TopLabelData.from_probs(p.astype(np.float32), y, NAMES, renormalize=True),
        "logits": TopLabelData.from_logits(np.log(p) + 3.0, y, NAMES),
        "top-score layout": TopLabelData.from_scores(pred, top, y, NAMES),
        "percentages": TopLabelData.from_probs(100 * p, y, NAMES, renormalize=True),
        "shuffled subset": TopLabelData.from_probs(
            np.round(p[::-3], 6), y[::-3], NAMES, renormalize=True
        ),
    }


@pytest.mark.parametrize(
    "how",
    ["6 decimals", "float32", "logits", "top-score layout", "percentages", "shuffled subset"],
)
def test_reencoded_fitting_rows_are_refused(fitted, how):
    p, y, model = fitted
    data = reencodings(p, y)[how]
    ov = model.evidence_.fingerprint.overlap(data)
    assert ov.of_data > 0.9, ov
    with pytest.raises(DataError, match="rows the model was fitted on.*held-out"):
        fit_thresholds(model, data, 0.9, 0.1)


@functools.cache
def _fitted_on_outputs(method):
    """``method`` fitted on outputs(3000, 0), once per module: the tests that share it only read it
    (no update)."""
    p, y = outputs(3000, 0)
    return topcal.calibrator(method).fit(TopLabelData.from_probs(p, y, NAMES))


@pytest.mark.parametrize(
    "how, encode",
    [
        ("4 decimals", lambda p: np.round(p, 4)),
        ("3 decimals", lambda p: np.round(p, 3)),
        ("percentages, 2 decimals", lambda p: np.round(100 * p, 2)),
        ("%.4f export", lambda p: np.array([[float(f"{v:.4f}") for v in r] for r in p])),
    ],
)
@pytest.mark.parametrize("method", ["hist", "auto"])
def test_coarsely_rounded_fitting_rows_are_refused(how, encode, method):
    """Rounded beyond the coarse keys' reach (up to 5e-4 a score), the rows are still found:
    by their top and second scores (the rough keys), renormalised or not."""
    p, y = outputs(3000, 0)
    model = _fitted_on_outputs(method)
    data = TopLabelData.from_probs(encode(p), y, NAMES, renormalize=True)
    assert model.evidence_.fingerprint.overlap(data).of_data > 0.9, how
    with pytest.raises(DataError, match="rows the model was fitted on.*held-out"):
        fit_thresholds(model, data, 0.9, 0.1)
    # and held-out rows rounded the same way pass
    q, z = outputs(3000, 1)
    held = TopLabelData.from_probs(encode(q), z, NAMES, renormalize=True)
    assert model.evidence_.fingerprint.overlap(held).of_data == 0.0, how


def test_a_fingerprint_without_rough_keys_says_what_it_cannot_check(fitted):
    """A model file written before the rough keys loads, and a guarantee on data with score
    vectors says that 3- or 4-decimal re-encodings could not be recognised."""
    from topcal.evidence.fingerprint import unchecked

    p, y, model = fitted
    d = model.evidence_.fingerprint.to_dict()
    del d["rough"], d["n_rough"]
    old = Fingerprint.from_dict(d)
    data = TopLabelData.from_probs(p[:100], y[:100], NAMES)
    assert "3 or 4 decimals" in unchecked(old, data)
    assert unchecked(model.evidence_.fingerprint, data) is None
    top_only = TopLabelData.from_scores(data.pred, data.score, data.labels, NAMES)
    assert unchecked(old, top_only) is None  # nothing a rough key could have found
    assert Fingerprint.from_dict(model.evidence_.fingerprint.to_dict()) == (
        model.evidence_.fingerprint
    )


def test_held_out_rows_pass_without_a_warning_and_a_third_of_fitting_rows_warns(fitted):
    p, y, model = fitted
    q, z = outputs(4000, 1)
    held = TopLabelData.from_probs(q, z, NAMES)
    assert model.evidence_.fingerprint.overlap(held).of_data < 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_thresholds(model, held, 0.9, 0.1)
    # a third of the rows are fitting rows (rounded): a warning, not a refusal
    mixed = TopLabelData.from_probs(
        np.round(np.vstack([q[:2000], p[:1000]]), 6),
        np.r_[z[:2000], y[:1000]],
        NAMES,
        renormalize=True,
    )
    with pytest.warns(TopcalWarning, match=r"about 3\d% of the labelled rows look like rows"):
        fit_thresholds(model, mixed, 0.9, 0.1)


def test_crowded_scores_of_a_large_fit_are_not_taken_for_its_rows():
    """Chance recurrences of a coarse key are measured away from it and taken off: a fit on
    20,000 rows whose scores crowd into [0.8, 0.999] does not see 2,000 new rows as its own (the
    data 10 x smaller than the fit, so chance is magnified 10 x), but sees them rounded."""
    rng = np.random.default_rng(3)

    def crowded(n):
        y = rng.integers(0, 4, n)
        return TopLabelData.from_scores(y, rng.uniform(0.8, 0.999, n), y, NAMES)

    fp = Fingerprint.of(crowded(20_000))
    for _ in range(5):
        assert fp.overlap(crowded(2000)).of_data < 0.1
    new = crowded(2000)
    rounded = TopLabelData.from_scores(new.pred, np.round(new.score, 6), new.labels, NAMES)
    assert Fingerprint.of(new).overlap(rounded).of_data > 0.9


def test_update_batches_count_towards_the_data_checked(fitted):
    """After ``update(held)``, thresholds on ``held`` are refused: the check asks how much of the
    data are fitting rows, not how much of the fitting rows the data hold (here 1 in 5)."""
    p, y, model = fitted
    q, z = outputs(1000, 2)
    held = TopLabelData.from_probs(q, z, NAMES)
    assert model.evidence_.fingerprint.overlap(held).of_data < 0.05
    updated = model.update(held)  # (the model itself, updated: scikit-learn's fit returns self)
    with pytest.raises(DataError, match="of the labelled rows are rows the model was fitted on"):
        fit_thresholds(updated, TopLabelData.from_probs(np.round(q, 6), z, NAMES, renormalize=True))


def test_update_with_rows_the_model_holds_is_refused_in_any_encoding(fitted):
    p, y, model = fitted
    for data in (TopLabelData.from_probs(p, y, NAMES), reencodings(p, y)["logits"]):
        with pytest.raises(DataError, match="count them twice: update with rows the model has not"):
            model.update(data)
    q, z = outputs(600, 4)  # 600 new rows and 400 old ones: warned, not refused
    mixed = TopLabelData.from_probs(np.vstack([q, p[:400]]), np.r_[z, y[:400]], NAMES)
    with pytest.warns(TopcalWarning, match=r"about 4\d% of these rows look like rows the model"):
        model.update(mixed)


def test_chunked_and_streamed_fits_keep_the_whole_fits_fingerprint(fitted, tmp_path):
    p, y, model = fitted
    frame = pd.DataFrame(p, columns=[f"p_{c}" for c in NAMES])
    frame["label"] = np.asarray(NAMES)[y]
    frame.to_parquet(tmp_path / "fit.parquet")
    whole = topcal.engines.for_options().fit(topcal.calibrator("hist"), tmp_path / "fit.parquet")
    chunks = topcal.engines.for_options(chunk_rows=700).fit(
        topcal.calibrator("hist"), tmp_path / "fit.parquet"
    )
    assert (
        chunks.evidence_.fingerprint == whole.evidence_.fingerprint == model.evidence_.fingerprint
    )
    with pytest.raises(DataError, match="fitted on"):
        fit_thresholds(chunks, TopLabelData.from_logits(np.log(p), y, NAMES), 0.9, 0.1)


def test_old_fingerprints_without_coarse_keys_load_and_still_check_exact_rows(fitted):
    p, y, model = fitted
    d = model.evidence_.fingerprint.to_dict()
    del d["coarse"], d["n_coarse"], d["rough"], d["n_rough"]
    old = Fingerprint.from_dict(d)
    assert old.coarse == () and old.n_coarse == 0 and old.rough == () and not old.rough_kept
    assert old.overlap(TopLabelData.from_probs(p, y, NAMES)).same
    assert old.overlap(reencodings(p, y)["logits"]).of_data < 0.5  # cannot be seen: no keys
    bad = dict(model.evidence_.fingerprint.to_dict(), n_coarse=10**9)
    with pytest.raises(ValueError, match="malformed"):
        Fingerprint.from_dict(bad)


@pytest.mark.slow
def test_cli_threshold_refuses_reencoded_updated_chunked_and_dask_fitting_rows(
    tmp_path, cluster_address
):
    """Every way round the check the issue lists, from the command line: one error line each."""
    p, y = outputs(3000, 6)
    t = tmp_path
    names = np.asarray(NAMES)
    probs = pd.DataFrame(p, columns=[f"p_{c}" for c in NAMES]).assign(label=names[y])
    probs.to_parquet(t / "fit.parquet")
    # one model per engine: in memory, chunked, dask
    for model, engine in (
        ("m.json", ()),
        ("chunked.json", ("--chunk-rows", "500")),
        ("dask.json", ("--engine", "dask", "--scheduler", cluster_address)),
    ):
        assert_ok(call("fit", t / "fit.parquet", "--method", "hist", *engine, "-o", t / model))
    probs.to_csv(t / "rounded.csv", index=False, float_format="%.6f")
    probs.astype({f"p_{c}": np.float32 for c in NAMES}).to_parquet(t / "f32.parquet")
    logits = pd.DataFrame(np.log(p), columns=[f"logit_{c}" for c in NAMES]).assign(label=names[y])
    logits.to_csv(t / "logits.csv", index=False)
    pd.DataFrame({"pred": names[p.argmax(1)], "score": p.max(1), "label": names[y]}).to_csv(
        t / "top.csv", index=False
    )
    (probs.drop(columns="label") * 100).assign(label=names[y]).to_csv(t / "pct.csv", index=False)
    th = ["--precision", "0.8", "-o", t / "th.json"]
    for model in ("m.json", "chunked.json", "dask.json"):
        for data, extra in (
            ("rounded.csv", ()),
            ("f32.parquet", ()),
            ("logits.csv", ()),
            ("top.csv", ()),
            ("pct.csv", ("--renormalize",)),
        ):
            if model != "m.json" and data not in ("rounded.csv", "top.csv"):
                continue  # the engines keep the same fingerprint: two encodings suffice
            r = cli("threshold", t / data, "--model", t / model, *extra, *th)
            assert_error(r, "rows the model was fitted on", "held-out")
    assert not (t / "th.json").exists()
    # an update's batch counts: thresholds on it are refused, and so is the batch again
    q, z = outputs(800, 7)
    pd.DataFrame(q, columns=[f"p_{c}" for c in NAMES]).assign(label=names[z]).to_csv(
        t / "held.csv", index=False
    )
    assert_ok(call("update", t / "m.json", t / "held.csv", "-o", t / "u.json"))
    assert_error(cli("threshold", t / "held.csv", "--model", t / "u.json", *th), "fitted on")
    assert_error(
        cli("update", t / "u.json", t / "held.csv", "-o", t / "u2.json"), "count them twice"
    )
    assert not (t / "u2.json").exists()
    assert_ok(call("threshold", t / "held.csv", "--model", t / "m.json", *th))
