"""TopLabelData: constructors, splitting into TP/FP, and validation errors."""

import numpy as np
import pytest

import topcal
from topcal import TopLabelData
from topcal.errors import DataError, TopcalError


def test_from_probs_predicted_class_and_top_score():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.4, 0.4, 0.2]])
    d = TopLabelData.from_probs(probs, ["a", "c", "b"], classes=["a", "b", "c"])
    # ties go to the first maximum (row 2: a and b tie at 0.4)
    np.testing.assert_array_equal(d.pred, [0, 2, 0])
    np.testing.assert_allclose(d.score, [0.7, 0.6, 0.4])
    np.testing.assert_array_equal(d.tp, [1, 1, 0])
    np.testing.assert_array_equal(d.fp, [0, 0, 1])
    assert d.score_range == (0.0, 1.0)
    assert d.has_full and d.full_kind == "probs"


def test_from_probs_integer_labels_and_default_class_names():
    d = TopLabelData.from_probs([[0.9, 0.1], [0.2, 0.8]], [0, 0])
    assert d.classes == ("0", "1")
    np.testing.assert_array_equal(d.tp, [1, 0])


def test_from_logits_matches_softmax():
    z = np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 1.0]])
    d = TopLabelData.from_logits(z, [0, 2])
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    np.testing.assert_allclose(d.score, p.max(1))
    np.testing.assert_allclose(d.log_probs(), np.log(p))
    np.testing.assert_array_equal(d.tp, [1, 0])


def test_log_probs_floor_for_exact_zero():
    d = TopLabelData.from_probs([[1.0, 0.0]], [0])
    lp = d.log_probs()
    assert np.all(np.isfinite(lp)) and lp[0, 1] == np.log(topcal.data.LOG_PROB_FLOOR)


def test_from_scores_any_scale_and_class_split():
    d = TopLabelData.from_scores(
        ["x", "y", "x", "x"], [9.5, 3.0, 2.0, 10.0], ["x", "x", "y", "x"], score_range=(0, 10)
    )
    assert d.classes == ("x", "y")
    v = d.class_view(0)
    np.testing.assert_array_equal(v.score, [9.5, 2.0, 10.0])
    np.testing.assert_array_equal(v.tp, [1, 0, 1])
    tp, fp = d.class_counts()
    np.testing.assert_array_equal(tp, [2, 0])
    np.testing.assert_array_equal(fp, [1, 1])
    np.testing.assert_allclose(d.normalized_score(), [0.95, 0.3, 0.2, 1.0])


def test_from_binned_midpoints_and_counts():
    d = TopLabelData.from_binned(
        ["a", "a", "b"], [0, 5, 0], [5, 10, 10], [3, 1, 0], [1, 0, 2], score_range=(0, 10)
    )
    assert d.is_binned and d.score_range == (0.0, 10.0)
    np.testing.assert_allclose(d.score, [2.5, 7.5, 5.0])
    assert d.n_samples == 7


def test_phanns_embedded_totals():
    d = topcal.datasets.load_phanns()
    tp, fp = d.class_counts()
    # totals stated in the data README and the paper
    assert tp.sum() + fp.sum() == 46801
    assert tp.sum() == 40080
    i = d.classes.index("Minor capsid")
    assert (tp[i], fp[i]) == (63, 813)
    assert round(tp[i] / (tp[i] + fp[i]), 3) == 0.072
    assert d.n_classes == 11 and d.score_range == (0.0, 10.0)


def test_concat_and_subset_roundtrip():
    d = TopLabelData.from_scores([0, 1, 0], [0.5, 0.6, 0.7], [0, 1, 1])
    both = TopLabelData.concat([d, d.subset([0])])
    assert both.n_rows == 4
    np.testing.assert_array_equal(both.score, [0.5, 0.6, 0.7, 0.5])
    with pytest.raises(DataError, match="classes"):
        TopLabelData.concat([d, TopLabelData.from_scores([0], [0.5], [0], classes=["p", "q"])])


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "build, match",
    [
        (
            lambda: TopLabelData.from_probs([[0.5, np.nan]], [0]),
            r"non-finite value \(nan\) at row 1, column 2",
        ),
        (lambda: TopLabelData.from_probs([[0.5, np.inf]], [0]), "non-finite"),
        (lambda: TopLabelData.from_probs([[1.2, -0.2]], [0]), "negative value"),
        (lambda: TopLabelData.from_probs([[0.5, 0.4]], [0]), "sums to 0.9.*renormalize=True"),
        (
            lambda: TopLabelData.from_probs([[0.5, 0.5]], ["z"], classes=["a", "b"]),
            "'z' at row 1, which is not one of",
        ),
        (lambda: TopLabelData.from_probs([[0.5, 0.5]], [5]), "index 5 at row 1"),
        (
            lambda: TopLabelData.from_probs([[0.5, 0.5], [0.5, 0.5]], [0]),
            "labels has 1 rows but probs has 2",
        ),
        (lambda: TopLabelData.from_probs(np.zeros((0, 3)), []), "empty"),
        (
            lambda: TopLabelData.from_probs([[0.5, 0.5]], [0], classes=["a", "a"]),
            "duplicate class name 'a'",
        ),
        (
            lambda: TopLabelData.from_probs([[0.5, 0.5]], [0], classes=["a", "b", "c"]),
            "2 columns but 3 class names",
        ),
        (
            lambda: TopLabelData.from_scores([0], [11.0], [0], score_range=(0, 10)),
            "outside the declared score range",
        ),
        (lambda: TopLabelData.from_scores([0, 1], [0.5], [0, 1]), "must match row for row"),
        (lambda: TopLabelData.from_scores([0], [0.5], [0], score_range=(1, 1)), "lo < hi"),
        (lambda: TopLabelData.from_binned(["a"], [0], [1], [-1], [0]), "negative"),
        (lambda: TopLabelData.from_binned(["a"], [1], [1], [1], [0]), "bin_lo 1.0 >= bin_hi"),
        (lambda: TopLabelData.from_binned(["a"], [0], [1], [0], [0]), "holds no samples"),
        (lambda: TopLabelData.from_binned(["a", "b"], [0], [1], [1], [0]), "bin_lo has 1 rows"),
    ],
)
def test_bad_input_is_a_clear_one_line_error(build, match):
    with pytest.raises(DataError, match=match) as info:
        build()
    assert isinstance(info.value, TopcalError) and isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_renormalize_option_divides_rows():
    d = TopLabelData.from_probs([[0.5, 0.3]], [0], renormalize=True)
    np.testing.assert_allclose(d.full, [[0.625, 0.375]])
    np.testing.assert_allclose(d.score, [0.625])


def test_unlabelled_data_cannot_be_fitted():
    d = TopLabelData.from_probs([[0.7, 0.3]])
    assert not d.has_labels
    with pytest.raises(DataError, match="needs labelled data"):
        topcal.calibrator("hist").fit(d)


def test_class_order_is_the_stable_argsort():
    from topcal.data import class_order

    rng = np.random.default_rng(2)
    for k in (3, 1000, 70_000):  # uint16 radix path, and above 2^16 classes the plain sort
        pred = rng.integers(0, k, 50_000)
        np.testing.assert_array_equal(class_order(pred, k), np.argsort(pred, kind="stable"))


def test_class_supports_are_every_class_support():
    """One sort for all classes: per-sample rows (zero weights and a never-predicted class left
    out) and binned rows (the bins' edges)."""
    rng = np.random.default_rng(5)
    n = 500
    pred = rng.integers(0, 4, n)  # class 4 is never predicted
    tp = (rng.random(n) < 0.6) * rng.choice([0.0, 1.0, 2.5], n)
    fp = np.where(tp > 0, 0.0, rng.choice([0.0, 1.0], n))
    d = TopLabelData(tuple("abcde"), pred, rng.random(n), (0.0, 1.0), tp=tp, fp=fp)
    want = [d.class_support(k) for k in range(5)]
    assert d.class_supports() == want and want[4] is None and all(want[:4])
    edges = np.linspace(0.2, 1.0, 9)
    cls, lo, hi = np.repeat(np.arange(3), 8), np.tile(edges[:-1], 3), np.tile(edges[1:], 3)
    counts = rng.integers(0, 3, cls.size) * 1.0
    b = TopLabelData.from_binned(cls, lo, hi, counts, rng.integers(0, 3, cls.size) * 1.0)
    assert b.class_supports() == [b.class_support(k) for k in range(b.n_classes)]


def test_with_classes_on_the_same_names_is_the_data_itself():
    d = TopLabelData.from_scores([0, 1, 1], [0.5, 0.7, 0.9], [0, 1, 0])
    assert d.with_classes(list(d.classes)) is d
    assert d.with_classes([0, 1]) is d  # names compared as text, as the check gives them
    wider = d.with_classes(["0", "1", "2"])
    assert wider.classes == ("0", "1", "2")
    np.testing.assert_array_equal(wider.pred, d.pred)
    with pytest.raises(DataError, match="does not know"):
        d.with_classes(["1", "2"])
    with pytest.raises(DataError, match="duplicate"):
        d.with_classes(["0", "1", "1"])
