"""issue 36, item 4: the read path of top-score files without a class list reads the class
columns coded (a categorical's codes, or text hashed once) instead of naming every row: the same
TopLabelData as naming every row, and the same errors."""

import numpy as np
import pandas as pd
import pytest

from topcal import TopLabelData
from topcal.data import label_names, sorted_names
from topcal.errors import DataError
from topcal.io import read_frame

N = 2000


def _columns(names, seed=0):
    rng = np.random.default_rng(seed)
    k = len(names)
    pred = rng.integers(0, k, N)
    label = np.where(rng.random(N) < 0.7, pred, rng.integers(0, k, N))
    names = np.asarray(names, dtype=object)
    return names[pred], rng.uniform(0.2, 1.0, N), names[label]


def _same(a: TopLabelData, b: TopLabelData):
    assert a.classes == b.classes
    for attr in ("pred", "score", "tp", "fp", "labels"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr), err_msg=attr)


@pytest.mark.parametrize(
    "names", [["c000", "c001", "c002", "c003"], ["3", "10", "7"], ["b", "a", "10", "2"]]
)
@pytest.mark.parametrize("form", ["categorical", "text", "categorical, unused categories"])
def test_coded_columns_read_as_naming_every_row(names, form):
    pred, score, label = _columns(names)
    want = TopLabelData.from_scores(list(pred), score, list(label))
    if form == "text":
        col = pd.Series
    else:
        extra = ["zz-unused"] if "unused" in form else []
        col = lambda v: pd.Series(pd.Categorical(v, categories=list(names) + extra))  # noqa: E731
    got = read_frame(pd.DataFrame({"pred": col(pred), "score": score, "label": col(label)}))
    _same(got, want)
    assert "zz-unused" not in got.classes  # the classes are the names that occur
    nolabel = read_frame(pd.DataFrame({"pred": col(pred), "score": score}))
    assert nolabel.classes == TopLabelData.from_scores(list(pred), score).classes


def test_coded_reading_keeps_the_errors():
    pred, score, label = _columns(["x", "y", "z"])
    label = label.copy()
    label[17] = None
    frame = pd.DataFrame({"pred": pred, "score": score, "label": label})
    with pytest.raises(DataError, match="missing value at row 18"):
        read_frame(frame)
    frame["label"] = pd.Categorical(label)
    with pytest.raises(DataError, match="missing value at row 18"):
        read_frame(frame)
    frame["label"] = pd.Categorical(np.full(N, "q", dtype=object))
    with pytest.raises(DataError, match="no label in 'label' names a predicted class"):
        read_frame(frame)


def test_label_names_of_text_and_of_mixed_objects():
    text = np.array(["a", "10", "b", "a"] * 40, dtype=object)
    np.testing.assert_array_equal(label_names(text), text)
    # mixed objects keep the one-by-one naming: 1 and 1.0 are "1", True is "True"
    mixed = np.array([1, True, 1.0, "a"] * 40, dtype=object)
    np.testing.assert_array_equal(label_names(mixed), np.array(["1", "True", "1", "a"] * 40))
    assert sorted_names(text) == ("10", "a", "b")
    assert sorted_names(mixed) == ("1", "1.0", "True", "a")  # str() of each, as before


def test_number_columns_and_integer_labels_read_as_before():
    """Probability columns of numbers are copied in one block (their NaN named as before);
    integer labels beside integer class names are matched by name, as named labels are."""
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.ones(3), N)
    y = rng.integers(0, 3, N)
    frame = pd.DataFrame({"p_0": p[:, 0], "p_1": p[:, 1], "p_2": p[:, 2], "label": y})
    _same(read_frame(frame), TopLabelData.from_probs(p, y.astype(str), classes=["0", "1", "2"]))
    frame["p_1"] = frame["p_1"].where(np.arange(N) != 33)
    frame["p_2"] = frame["p_2"].where(np.arange(N) != 5)
    with pytest.raises(DataError, match="column 'p_1' is empty \\(NaN\\) at row 34"):
        read_frame(frame)
