"""Model files of the previous format load through :func:`topcal.persist.migrate` and predict
bit for bit what they did; older files are refused with a one-line error.

``tests/data/model_v3/`` was written by the format-3 writer (main at 5aa3ef9, before the one
``evidence`` object): one model per method family and an adapted one, each fitted with default
parameters on 600 simulated rows of 4 classes, the first 60 of those rows (``rows.npz``) and
their predictions and 90% intervals there (``expected.json``). Do not regenerate them: they
are what that writer wrote.
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import topcal
from topcal import TopLabelData, persist
from topcal.errors import ModelFileError
from topcal.thresholds.cutoffs import model_digest

HERE = Path(__file__).parents[2] / "data" / "model_v3"
EXPECTED = json.loads((HERE / "expected.json").read_text())


@pytest.fixture(scope="module")
def rows():
    z = np.load(HERE / "rows.npz")
    return TopLabelData.from_probs(z["probs"], z["labels"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_format_3_file_loads_and_predicts_bit_for_bit(name, rows, tmp_path):
    doc = json.loads((HERE / f"{name}.json").read_text())
    assert doc["format_version"] == 3 and "evidence" not in doc["model"]
    model = topcal.load(HERE / f"{name}.json")
    want = EXPECTED[name]
    assert model.predict(rows).tolist() == want["pred"]
    if "lo" in want:
        lo, hi = model.predict_interval(rows, 0.9)
        assert (lo.tolist(), hi.tolist()) == (want["lo"], want["hi"])
    # saved again: the new layout, which loads to the same predictions
    model.save(tmp_path / "m.json")
    new = json.loads((tmp_path / "m.json").read_text())
    assert new["format_version"] == persist.FORMAT_VERSION
    assert "n_tp" in new["model"]["evidence"] and "n_tp" not in new["model"]
    assert topcal.load(tmp_path / "m.json").predict(rows).tolist() == want["pred"]


def test_migrate_moves_every_piece_of_evidence_into_one_object():
    doc = json.loads((HERE / "auto.json").read_text())
    old = doc["model"]
    new = persist.migrate(doc)
    assert new["format_version"] == persist.FORMAT_VERSION
    model = new["model"]
    assert set(model) - {"vector"} == {
        "method",
        "params",
        "classes",
        "score_range",
        "state",
        "evidence",
    }
    assert {"cv", "cv_samples", "fit_samples"}.isdisjoint(model["state"])
    assert model["evidence"]["cv"] == old["state"]["cv"]
    assert model["evidence"]["n_tp"] == old["n_tp"]
    assert model["evidence"]["stats"] == old["stats"]
    nested = model["state"]["model"]  # the chosen model: its counts moved too
    assert "n_tp" not in nested and nested["evidence"]["n_tp"] == old["state"]["model"]["n_tp"]
    assert doc["model"] is old and "n_tp" in old  # the input is left as it was


def test_a_migrated_model_saves_the_file_a_fit_writes(rows):
    loaded = topcal.load(HERE / "sts.json")
    assert persist.loads(persist.dumps(loaded)).to_dict() == loaded.to_dict()
    assert "spread" in loaded.to_dict()["evidence"]


def test_thresholds_chosen_for_a_format_3_file_still_match_until_it_changes():
    doc = json.loads((HERE / "hist.json").read_text())
    model = topcal.load(HERE / "hist.json")
    assert persist.digests(model) == (model_digest(model), doc["sha256"])
    held_out = TopLabelData.from_probs(*_other_rows(11))
    thr = topcal.fit_thresholds(model, held_out, precision=0.6)
    chosen = dataclasses.replace(thr, model_sha256=doc["sha256"])  # as main chose them
    chosen.check_model(model)  # the file's digest names this model
    model.update(TopLabelData.from_probs(*_other_rows(12)))
    with pytest.raises(topcal.TopcalError, match="checksum differs"):
        chosen.check_model(model)


def _other_rows(seed):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(4), 200)
    return p, p.argmax(1)


@pytest.mark.parametrize("version", [1, 0, 6])
def test_files_of_other_formats_are_refused_with_one_line(version, tmp_path):
    doc = json.loads((HERE / "hist.json").read_text())
    doc["format_version"] = version
    (tmp_path / "old.json").write_text(json.dumps(doc))
    with pytest.raises(ModelFileError) as err:
        topcal.load(tmp_path / "old.json")
    msg = str(err.value)
    assert "\n" not in msg and f"format version {version}" in msg and "refit" in msg


def test_migration_keeps_the_checksum_check():
    text = (HERE / "hist.json").read_text().replace('"n_tp": [', '"n_tp": [1.0, ', 1)
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        persist.loads(text)


def test_a_format_4_file_with_dense_label_shift_counts_migrates_to_the_same_model(rows):
    """A model loaded from a file before the sparse counts and saved again in format 4 kept the
    dense per-class layout: migrate writes it as the sparse one (the only layout the counts'
    reader reads), the model predicts and adapts as before, and the file's digest still names
    it (thresholds chosen for it hold)."""
    from _frames import dense_layout, format_4_text

    fitted = topcal.calibrator("hist").fit(rows)
    text = format_4_text(fitted, dense_layout(fitted.evidence_.confusion))
    doc = json.loads(text)
    new = persist.migrate(doc)
    assert new["format_version"] == persist.FORMAT_VERSION
    assert new["model"]["evidence"]["confusion"] == fitted.to_dict()["evidence"]["confusion"]
    loaded = persist.loads(text)
    np.testing.assert_array_equal(loaded.predict(rows), fitted.predict(rows))
    priors = np.array([0.4, 0.3, 0.2, 0.1])
    np.testing.assert_array_equal(
        loaded.adapt(priors=priors).predict(rows), fitted.adapt(priors=priors).predict(rows)
    )
    assert persist.digests(loaded) == (model_digest(fitted), doc["sha256"])
    assert persist.dumps(loaded) == persist.dumps(fitted)  # saved again: the current layout
    # a format-4 file that needs no change loads as written, its own digest alone
    plain = persist.loads(format_4_text(fitted))
    assert persist.digests(plain) == (model_digest(fitted),)
