"""One reader per input form (arrays, DataFrame, file), each to validated TopLabelData in one
step."""

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.errors import DataError, first_line
from topcal.io.inputs import as_data, read_arrays
from topcal.io import read_data, read_frame
from topcal.stream import model_read_options


@pytest.fixture
def probs():
    rng = np.random.default_rng(3)
    p = rng.dirichlet([1, 1, 1], 200)
    y = rng.integers(0, 3, 200)
    return p, y


def _same(a, b):
    assert a.classes == b.classes and a.score_range == b.score_range
    for f in ("pred", "score", "tp", "fp", "labels", "full"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_the_three_readers_give_the_same_data(probs, tmp_path):
    p, y = probs
    names = ["a", "b", "c"]
    want = topcal.TopLabelData.from_probs(p, np.asarray(names)[y], classes=names)
    frame = pd.DataFrame(p, columns=[f"p_{c}" for c in names])
    frame.assign(label=np.asarray(names)[y]).to_csv(tmp_path / "d.csv", index=False)
    _same(read_arrays(p, np.asarray(names)[y], classes=names), want)
    _same(read_frame(frame, y=np.asarray(names)[y]), want)  # labels beside the frame
    _same(read_frame(frame.assign(label=np.asarray(names)[y])), want)  # labels in it
    _same(read_data(tmp_path / "d.csv"), want)
    # as_data only picks the reader of the form
    _same(as_data(p, np.asarray(names)[y], classes=names), want)
    _same(as_data(frame, np.asarray(names)[y]), want)
    _same(as_data(tmp_path / "d.csv"), want)
    assert as_data(want) is want


def test_reader_errors_are_one_line(probs, tmp_path):
    p, y = probs
    frame = pd.DataFrame(p, columns=["p_a", "p_b", "p_c"])
    with pytest.raises(DataError, match="y was given but the DataFrame also has a 'label' column"):
        read_frame(frame.assign(label="a"), y=y)
    with pytest.raises(DataError, match=r"y has shape \(199,\) but the DataFrame has 200 rows"):
        as_data(frame, y[:199])
    with pytest.raises(DataError, match="kind must be one of"):
        read_arrays(p, y, kind="probability")
    with pytest.raises(DataError, match="y was given with a data file"):
        as_data(tmp_path / "d.csv", y)
    with pytest.raises(DataError, match="X must be numeric"):
        read_arrays(np.array([["a", "b"]]))


def test_first_line_of_a_library_message():
    assert first_line(ValueError("bad value\nTraceback ...")) == "bad value"
    assert first_line(KeyError()) == "KeyError"


def test_model_read_options_gives_the_model_classes_only_where_a_column_names_them(tmp_path):
    frame = pd.DataFrame(
        {"pred": list("abcab") * 20, "score": np.linspace(1, 9, 100), "label": list("abcba") * 20}
    )
    frame.to_csv(tmp_path / "top.csv", index=False)
    model = topcal.calibrator("hist").fit(read_data(tmp_path / "top.csv", score_range=(0, 10)))
    opts = model_read_options(model, tmp_path / "top.csv", {}, model_classes=True)
    assert opts == {"score_range": (0.0, 10.0), "classes": ["a", "b", "c"]}
    assert model_read_options(model, tmp_path / "top.csv", {}) == {"score_range": (0.0, 10.0)}
    # probability columns: their classes and range are their own
    pd.DataFrame({"p_a": [0.5, 0.2], "p_b": [0.5, 0.8], "label": ["a", "b"]}).to_csv(
        tmp_path / "v.csv", index=False
    )
    assert model_read_options(model, tmp_path / "v.csv", {}, model_classes=True) == {}
    # a given range is kept, the classes still come from the model
    assert model_read_options(
        model, tmp_path / "top.csv", {"score_range": (0, 20)}, model_classes=True
    ) == {"score_range": (0, 20), "classes": ["a", "b", "c"]}


def test_a_categorical_label_column_with_integer_class_names_is_read_by_name():
    # Parquet dictionary columns arrive as categoricals; their codes are no class names ("3", "5")
    f = pd.DataFrame(
        {"p_3": [0.9, 0.2, 0.6], "p_5": [0.1, 0.8, 0.4], "label": pd.Categorical(["3", "5", "5"])}
    )
    want = read_frame(f.assign(label=["3", "5", "5"]))
    got = read_frame(f)
    assert got.classes == ("3", "5")
    np.testing.assert_array_equal(got.labels, want.labels)
    np.testing.assert_array_equal(got.labels, [0, 1, 1])
    top = pd.DataFrame(
        {
            "pred": pd.Categorical(["5", "3"]),
            "score": [0.7, 0.9],
            "label": pd.Categorical(["5", "5"]),
        }
    )
    d = read_frame(top, classes=["3", "5"])
    np.testing.assert_array_equal(d.pred, [1, 0])
    np.testing.assert_array_equal(d.labels, [1, 1])


def test_a_categorical_label_column_with_names_takes_the_fast_path_to_the_same_data(probs):
    p, y = probs
    names = np.asarray(["a", "b", "c"])[y]
    f = pd.DataFrame(p, columns=["p_a", "p_b", "p_c"])
    _same(
        read_frame(f.assign(label=pd.Categorical(names, categories=["c", "b", "a"]))),
        read_frame(f.assign(label=names)),
    )
