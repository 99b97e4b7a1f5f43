"""Versioned JSON models: exact round trips, and clear errors for bad files."""

import json
import pickle

import numpy as np
import pytest

import topcal
from topcal import TopLabelData, persist
from topcal.errors import ModelFileError

CORE = ["uncalibrated", "conf1", "hist", "cum", "cum-median", "cum-opt"]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    n = 2000
    probs = rng.dirichlet([0.5, 0.5, 0.5], n)
    labels = np.where(
        rng.uniform(size=n) < probs.max(1) ** 0.7, probs.argmax(1), rng.integers(0, 3, n)
    )
    return TopLabelData.from_probs(probs, labels, classes=["x", "y", "z"])


@pytest.mark.parametrize("method", CORE)
def test_round_trip_is_bit_for_bit(method, data, tmp_path):
    model = topcal.calibrator(method).fit(data)
    path = tmp_path / "m.json"
    model.save(path)
    loaded = topcal.load(path)
    assert type(loaded) is type(model) and loaded.get_params() == model.get_params()
    a, b = model.predict(data), loaded.predict(data)
    assert a.tobytes() == b.tobytes()
    grid = np.linspace(0, 1, 1001)
    assert (
        model.curve("y", grid).confidence.tobytes() == loaded.curve("y", grid).confidence.tobytes()
    )
    # saving the loaded model gives the same file
    assert persist.dumps(loaded) == persist.dumps(model)


def test_phanns_binned_round_trip(tmp_path):
    d = topcal.datasets.load_phanns()
    m = topcal.calibrator("hist", n_bins=20).fit(d)
    m.save(tmp_path / "p.json")
    assert topcal.load(tmp_path / "p.json").predict(d).tobytes() == m.predict(d).tobytes()


def _doc(data):
    return json.loads(persist.dumps(topcal.calibrator("hist").fit(data)))


def test_not_json_truncated_and_pickle_files(data, tmp_path):
    text = persist.dumps(topcal.calibrator("hist").fit(data))
    (tmp_path / "t.json").write_text(text[: len(text) // 2])
    with pytest.raises(ModelFileError, match="not a valid topcal model file.*truncated"):
        topcal.load(tmp_path / "t.json")
    (tmp_path / "p.json").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ModelFileError):
        topcal.load(tmp_path / "p.json")
    (tmp_path / "e.json").write_text("")
    with pytest.raises(ModelFileError, match="not a valid"):
        topcal.load(tmp_path / "e.json")
    with pytest.raises(ModelFileError, match="does not exist"):
        topcal.load(tmp_path / "missing.json")


def test_wrong_format_and_version(data):
    doc = _doc(data)
    doc["format_version"] = 99
    with pytest.raises(ModelFileError, match="version 99.*refit"):
        persist.loads(json.dumps(doc))
    with pytest.raises(ModelFileError, match="not a topcal model file"):
        persist.loads(json.dumps({"hello": 1}))
    with pytest.raises(ModelFileError, match="not a topcal model file"):
        persist.loads("[1, 2]")


def test_tampered_file_is_detected(data):
    doc = _doc(data)
    doc["model"]["state"]["class_state"][0]["values"][3] = 0.123
    with pytest.raises(ModelFileError, match="modified after it was saved"):
        persist.loads(json.dumps(doc))


def _rehash(doc):
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    return json.dumps(doc)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m["state"]["class_state"][0].__setitem__("values", [2.0] * 10), "in \\[0, 1\\]"),
        (
            lambda m: m["state"]["class_state"][0].__setitem__("edges", [0, 1]),
            "values must have 1 entries",
        ),
        (lambda m: m.__setitem__("classes", ["x"]), "inconsistent"),
        (lambda m: m["params"].__setitem__("n_bins", -3), "n_bins"),
        (lambda m: m["params"].__setitem__("evil", "os.system"), "unexpected keyword|malformed"),
        (lambda m: m.__setitem__("method", "__import__"), "unknown to this topcal"),
        (lambda m: m.pop("state"), "malformed"),
    ],
)
def test_consistent_checksum_but_invalid_content(data, edit, match):
    doc = _doc(data)
    edit(doc["model"])
    with pytest.raises(ModelFileError, match=match):
        persist.loads(_rehash(doc))


def test_nan_in_file_is_rejected(data):
    text = persist.dumps(topcal.calibrator("hist").fit(data)).replace(
        '"n_tp": [', '"n_tp": [NaN, ', 1
    )
    with pytest.raises(ModelFileError):
        persist.loads(text)


@pytest.mark.slow
def test_saved_digest_is_that_of_the_canonical_json_and_arrays_are_compact():
    """Issue 26: the file and its digest come from one encoding of each array; the digest is still
    the
    SHA-256 of canonical_json(model payload), so files of every version keep loading."""
    import hashlib
    import json

    import numpy as np

    import topcal
    from topcal.persist import canonical_json, dumps, loads

    rng = np.random.default_rng(5)
    probs = rng.dirichlet(np.ones(3), 800)
    labels = rng.integers(0, 3, 800)
    for method in ("hist", "kde-mon2", "sts", "auto"):
        model = topcal.calibrator(method).fit(probs, labels)
        text = dumps(model)
        doc = json.loads(text)
        assert doc["sha256"] == hashlib.sha256(canonical_json(doc["model"]).encode()).hexdigest()
        assert doc["model"] == json.loads(json.dumps(model.to_dict()))
        assert ", 0." not in text and ",0." in text  # lists of numbers without spaces
        assert loads(text).predict(probs).tolist() == model.predict(probs).tolist()


def test_many_class_states_are_one_line_each_and_load_as_they_were_saved():
    """A model of many classes writes each class's state on one line (its keys sorted, as in
    the digest) and reads all classes' equal-width bins in one pass: the states, predictions
    and errors are those of the class-by-class reader."""
    rng = np.random.default_rng(3)
    K, n = 300, 6000
    pred = np.minimum(rng.zipf(1.4, n) - 1, K - 1)
    score = rng.beta(5, 1.5, n)
    label = np.where(rng.random(n) < score, pred, (pred + 1) % K)
    data = TopLabelData.from_scores(pred, score, label, classes=[f"c{i}" for i in range(K)])
    with pytest.warns(UserWarning):  # classes never predicted fall back to the score
        model = topcal.calibrator("hist").fit(data)
    text = persist.dumps(model)
    states = [s for s in model.class_state_ if s is not None]
    assert 50 < len(states) < K
    assert text.count('{"bins":[0.0,1.0,10],"fp":[') == len(states)
    back = persist.loads(text)
    for a, b in zip(model.class_state_, back.class_state_):
        assert (a is None) == (b is None)
        if a is not None:
            for key in ("edges", "values", "tp", "fp"):
                np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(back.predict(data), model.predict(data))

    doc = json.loads(text)
    live = [i for i, s in enumerate(doc["model"]["state"]["class_state"]) if s is not None]
    mixed = json.loads(text)
    first = mixed["model"]["state"]["class_state"][live[0]]
    first["edges"] = np.linspace(0.0, 1.0, 11).tolist()  # one class's edges listed
    del first["bins"]
    again = persist.loads(_rehash(mixed))
    np.testing.assert_array_equal(again.predict(data), model.predict(data))

    bad = json.loads(text)
    bad["model"]["state"]["class_state"][live[-1]]["values"][3] = 1.5
    with pytest.raises(ModelFileError, match="in \\[0, 1\\]"):
        persist.loads(_rehash(bad))
