"""Regression tests of issue 52 (hardening, round four): each case gave a wrong answer, a traceback,
an unreadable output or a message too long to read before the fix. Commands run in process
(``call`` of _cli.py); the files are small simulated sets, the 1,000-class cases included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.errors import TopcalError

from _cli import assert_error, assert_ok, call

#: The longest one-line error message a user should have to read.
MAX_ERROR_CHARS = 300


def _scores(k, n, seed=0, *, prefix="class_"):
    """A top-score frame over ``k`` classes: pred, score, label (correct with probability s)."""
    rng = np.random.default_rng(seed)
    names = np.array([f"{prefix}{i:04d}" for i in range(k)], dtype=object)
    pred = rng.integers(0, k, n)
    score = rng.uniform(0.3, 1.0, n)
    right = rng.random(n) < score
    other = (pred + rng.integers(1, k, n)) % k
    return pd.DataFrame(
        {"pred": names[pred], "score": score, "label": names[np.where(right, pred, other)]}
    )


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """A 1,000-class hist model (fit.csv) and a use set (use.csv) in which 55 classes are never
    predicted."""
    d = tmp_path_factory.mktemp("many")
    fit = _scores(1000, 20_000)
    fit.to_csv(d / "fit.csv", index=False)
    use = _scores(1000, 20_000, seed=1)
    gone = {f"class_{i:04d}" for i in range(0, 1000, 18)[:55]}
    use = use[~use["pred"].isin(gone)]
    assert use["pred"].nunique() == 945  # every other class is predicted
    use[["pred", "score"]].to_csv(d / "use.csv", index=False)
    assert_ok(call("fit", d / "fit.csv", "--method", "hist", "-o", d / "m.json"))
    return d


def test_adapt_on_a_use_set_lacking_classes_command_line(many):
    r = assert_ok(call("adapt", many / "m.json", many / "use.csv", "-o", many / "a.json"))
    assert "adapted hist" in r.stdout
    adapted = topcal.load(many / "a.json")
    assert len(adapted.classes_) == 1000
    use = topcal.read_data(many / "use.csv")
    c = adapted.predict(use)
    assert c.shape == (use.n_rows,) and np.all((c >= 0) & (c <= 1))


def test_adapt_on_a_use_set_lacking_classes_python(many):
    model = topcal.load(many / "m.json")
    use = topcal.read_data(many / "use.csv")  # its classes: the 945 it predicts
    assert use.n_classes == 945
    adapted = model.adapt(use, n_bootstrap=0)
    assert adapted.classes_ == model.classes_
    est = topcal.labelshift.estimate_priors(model, use, n_bootstrap=0)
    assert len(est.priors) == 1000 and abs(est.priors.sum() - 1) < 1e-9


def test_adapt_use_set_with_an_unknown_class_is_one_short_line(many, tmp_path):
    use = pd.read_csv(many / "use.csv")
    use.loc[:3, "pred"] = ["x" * 500, "y" * 80, "z", "w"]
    use.to_csv(tmp_path / "bad.csv", index=False)
    line = assert_error(
        call("adapt", many / "m.json", tmp_path / "bad.csv", "-o", tmp_path / "a.json"),
        "does not know",
    )
    assert len(line) <= MAX_ERROR_CHARS, len(line)
    assert not (tmp_path / "a.json").exists()


def test_python_class_mismatch_messages_are_capped(many):
    model = topcal.load(many / "m.json")
    probs = np.full((4, 999), 1 / 999)
    data = topcal.TopLabelData.from_probs(probs, classes=[f"q{i}" * 20 for i in range(999)])
    for call_it in (lambda: model.adapt(data), lambda: model.predict(data)):
        with pytest.raises(TopcalError) as info:
            call_it()
        assert len(str(info.value)) <= MAX_ERROR_CHARS, len(str(info.value))
