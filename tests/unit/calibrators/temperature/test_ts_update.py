"""``update`` of sts and csts from their loss tables (issue 13).

Tolerance: the tables are interpolated between 257 nodes in log T, so an update
equals a fit on all the data to the interpolation error (measured <= 2e-8 relative
on real outputs, docs/scale.md), not bit for bit: T within 1e-6 relative.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import topcal
from topcal import persist
from topcal.data import TopLabelData
from topcal.errors import DataError, ModelFileError, ParameterError

from _frames import model_payload, probs_frame, run

T_RTOL = 1e-6

KEEP = {"keep_stats": True}  # opt-in: the tables cost 20-100 fits
VARIANTS = {
    "sts": ("sts", KEEP),
    "csts": ("csts", KEEP),
    "sts-brier": ("sts", {"loss": "brier", **KEEP}),
    "csts-brier": ("csts", {"loss": "brier", **KEEP}),
    "sts-multinomial": ("sts", {"objective": "multinomial", **KEEP}),
}


def _sim(n=2400, K=5, seed=0, logits=False):
    """Scores whose classes are miscalibrated differently (some over-, some underconfident)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.5, (n, K)) + np.linspace(0, 1, K)
    sharp = np.linspace(0.5, 1.6, K)[z.argmax(1)][:, None]
    q = np.exp(z * sharp - (z * sharp).max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(q, axis=1)).sum(axis=1).clip(0, K - 1)
    if logits:
        return TopLabelData.from_logits(z, y)
    p = np.exp(z - z.max(1, keepdims=True))
    return TopLabelData.from_probs(p / p.sum(1, keepdims=True), y)


def _fit(name, params, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return topcal.calibrator(name, **params).fit(data)


def _split(n, n_parts, seed):
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, n), n_parts - 1, replace=False))
    return np.split(rng.permutation(n), cuts)


def _close_to(a, b, data):
    np.testing.assert_allclose(a.temperature_, b.temperature_, rtol=T_RTOL, atol=0)
    np.testing.assert_array_equal(a.fitted_classes_, b.fitted_classes_)
    np.testing.assert_array_equal(a.n_tp_, b.n_tp_)
    np.testing.assert_array_equal(a.n_fp_, b.n_fp_)
    np.testing.assert_allclose(a.loss_, b.loss_, rtol=1e-9)
    np.testing.assert_allclose(
        a.class_nll_, b.class_nll_, rtol=T_RTOL
    )  # first order in T for brier
    np.testing.assert_allclose(a.predict(data), b.predict(data), rtol=0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("n_parts", [2, 3, 7, 10])
def test_update_over_any_split_equals_one_fit(variant, n_parts):
    name, params = VARIANTS[variant]
    data = _sim(seed=n_parts)
    whole = _fit(name, params, data)
    parts = _split(data.n_rows, n_parts, seed=n_parts)
    cal = _fit(name, params, data.subset(parts[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for idx in parts[1:]:
            cal.update(data.subset(idx))
    _close_to(cal, whole, data)
    # the merged tables are the tables of all the data (sums: equal up to rounding)
    for key, table in whole.evidence_.stats.tables.items():
        np.testing.assert_allclose(cal.evidence_.stats.tables[key], table, rtol=1e-12, atol=1e-9)


def test_update_on_logits_and_with_tables_directly():
    data = _sim(logits=True, seed=4)
    whole = _fit("csts", KEEP, data)
    a, b = _split(data.n_rows, 2, seed=1)
    cal = _fit("csts", KEEP, data.subset(a))
    cal.update(cal.evidence_of(data.subset(b)))
    _close_to(cal, whole, data)


def test_classes_one_sided_or_absent_in_a_part_match_the_fit():
    """A class absent from the first part, and one with only TP in all the data (csts: T at its
    bound)."""
    base = _sim(n=1500, K=4, seed=7)
    data = TopLabelData.from_probs(base.full, np.where(base.pred == 1, 1, base.labels))
    assert np.all(data.tp[data.pred == 1] == 1) and np.any(data.pred == 2)
    first = np.flatnonzero(data.pred != 2)[:500]
    rest = np.setdiff1d(np.arange(data.n_rows), first)
    for name in ("csts", "sts"):
        whole = _fit(name, KEEP, data)
        cal = _fit(name, KEEP, data.subset(first))
        assert not cal.fitted_classes_[2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal.update(data.subset(rest))
        _close_to(cal, whole, data)
        if name == "csts":
            assert (
                whole.temperature_[1] == cal.temperature_[1] == pytest.approx(1e-3, rel=1e-15)
            )  # the bound


def test_update_survives_save_and_load(tmp_path):
    data = _sim(seed=2)
    a, b = _split(data.n_rows, 2, seed=2)
    cal = _fit("csts", KEEP, data.subset(a))
    cal.save(tmp_path / "m.json")
    back = persist.load(tmp_path / "m.json")
    np.testing.assert_array_equal(back.predict(data), cal.predict(data))
    for key, table in cal.evidence_.stats.tables.items():
        np.testing.assert_array_equal(back.evidence_.stats.tables[key], table)  # bit for bit
    back.update(data.subset(b))
    _close_to(back, _fit("csts", KEEP, data), data)


@pytest.mark.slow
def test_tables_have_a_size_bound_independent_of_the_samples():
    """Per class and table 3 x 257 numbers; the JSON stays under 20 KB per class and table."""
    for name, params, n_tables in (("csts", KEEP, 2), ("sts", {"loss": "brier", **KEEP}, 3)):
        sizes = []
        for n in (300, 6000):
            cal = _fit(name, params, _sim(n=n, K=6))
            doc = cal.to_dict()["evidence"]["stats"]
            assert len(doc["tables"]) == n_tables and doc["n_nodes"] == 257
            assert all(
                len(rows) == 6 and all(len(r) == 3 * 257 for r in rows)
                for rows in doc["tables"].values()
            )
            sizes.append(len(json.dumps(doc)))
        assert max(sizes) <= 20_000 * 6 * n_tables, sizes
        assert abs(sizes[0] - sizes[1]) < 0.2 * sizes[0]  # not growing with the samples


def test_award_methods_and_keep_stats_false_ask_for_a_refit():
    data = _sim(n=600)
    for params in (
        {"keep_stats": False},
        {},
    ):  # the default keeps no tables (they cost 20-100 fits)
        cal = _fit("csts", params, data)
        assert cal.evidence_.stats is None and "stats" not in cal.to_dict()["evidence"]
        with pytest.raises(ParameterError, match="keep_stats=False.*keep_stats=true"):
            cal.update(data)
    with pytest.raises(ParameterError, match="keep_stats"):
        topcal.calibrator("sts", keep_stats="yes").fit(data)
    for name in ("tswa", "cstswa"):
        with pytest.raises(ParameterError, match="has an award"):
            _fit(name, {}, data).update(data)


def test_format_2_temperature_files_load_and_ask_for_a_refit():
    v3 = Path(__file__).parents[3] / "data" / "model_v3"
    doc = json.loads((v3 / "sts.json").read_text())
    assert "stats" not in doc["model"]
    del doc["model"]["params"]["keep_stats"]  # format 2 had neither
    doc["format_version"] = 2
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    old = persist.loads(json.dumps(doc))
    rows = np.load(v3 / "rows.npz")
    data = TopLabelData.from_probs(rows["probs"], rows["labels"])
    want = json.loads((v3 / "expected.json").read_text())["sts"]["pred"]
    assert old.predict(data).tolist() == want
    with pytest.raises(
        ParameterError, match="no loss tables.*refit"
    ):  # format 2 loads as keep_stats=False
        old.update(_sim(n=300))


def test_malformed_tables_are_model_file_errors():
    cal = _fit("csts", KEEP, _sim(n=600))
    good = json.loads(persist.dumps(cal))

    def broken(edit):
        doc = json.loads(json.dumps(good))
        edit(doc["model"]["evidence"]["stats"])
        doc["sha256"] = persist.hashlib.sha256(
            persist.canonical_json(doc["model"]).encode()
        ).hexdigest()
        return json.dumps(doc)

    edits = [
        lambda s: s["tables"]["nll"].pop(),
        lambda s: s.update(n_nodes=65),
        lambda s: s.update(kind="score-counts"),
        lambda s: s["n_tp"].pop(),
        lambda s: s["tables"]["nll"][0].pop(),
    ]
    for edit in edits:
        with pytest.raises(ModelFileError, match="malformed"):
            persist.loads(broken(edit))


def test_update_with_mismatched_tables_is_a_data_error():
    data = _sim(n=900)
    cal = _fit("csts", KEEP, data)
    brier = _fit("csts", {"loss": "brier", **KEEP}, data)
    with pytest.raises(DataError, match="do not match"):
        cal.update(brier.evidence_.stats)
    with pytest.raises(DataError, match="TopLabelData or LossTables"):
        cal.update(topcal.ScoreStats.from_data(data))


def test_cli_update_of_csts_equals_fit_on_all(tmp_path, capsys):
    frame = probs_frame(2400, K=4, seed=3)
    frame.to_csv(tmp_path / "all.csv", index=False)
    frame.iloc[:900].to_csv(tmp_path / "a.csv", index=False)
    frame.iloc[900:1600].to_csv(tmp_path / "b.csv", index=False)
    frame.iloc[1600:].to_parquet(tmp_path / "c.parquet", row_group_size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csts = ["--method", "csts", "--param", "keep_stats=true"]
        for name in ("all", "a"):
            argv = ["fit", tmp_path / f"{name}.csv", *csts, "-o", tmp_path / f"{name}.json"]
            assert run(argv, capsys)[0] == 0
        code, out, err = run(
            ["update", tmp_path / "a.json", tmp_path / "b.csv", "-o", tmp_path / "ab.json"], capsys
        )
        assert code == 0 and "900 + 700 samples" in out, err
        code, out, err = run(
            [
                "update",
                tmp_path / "ab.json",
                tmp_path / "c.parquet",
                "--chunk-rows",
                250,
                "-o",
                tmp_path / "abc.json",
            ],
            capsys,
        )
        assert code == 0 and "1600 + 800 samples" in out, err
    whole, upd = model_payload(tmp_path / "all.json"), model_payload(tmp_path / "abc.json")
    for key in ("n_tp", "n_fp"):
        assert upd["evidence"][key] == whole["evidence"][key]
    np.testing.assert_allclose(
        upd["state"]["temperature"], whole["state"]["temperature"], rtol=T_RTOL
    )
    assert (
        json.loads(open(tmp_path / "abc.json").read())["format_version"]
        == persist.FORMAT_VERSION
        == 5
    )
    code, out, err = run(
        [
            "update",
            tmp_path / "a.json",
            tmp_path / "c.parquet",
            "--engine",
            "dask",
            "-o",
            tmp_path / "x.json",
        ],
        capsys,
    )
    assert (
        code == 2
        and "keeps loss tables" in err
        and "--chunk-rows" in err
        and not (tmp_path / "x.json").exists()
    )
