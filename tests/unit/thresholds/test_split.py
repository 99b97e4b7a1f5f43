"""topcal.fit_and_threshold: fit and cut-offs on disjoint parts of one labelled dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

import topcal
from topcal.errors import DataError, ModelFileError, ParameterError
from topcal.thresholds.split import Split, split_rows


def _data(n, k=4, seed=0):
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, k, n)
    score = rng.uniform(0.3, 1.0, n)
    right = rng.random(n) < score
    labels = np.where(right, pred, (pred + 1) % k)
    names = [f"c{i}" for i in range(k)]
    return topcal.TopLabelData.from_scores(pred, score, labels, classes=names)


def test_split_is_stratified_seeded_and_disjoint():
    pred = np.repeat(np.arange(5), [7, 40, 101, 3, 250])
    mask, s = split_rows(pred, 0.3, 11)
    for k, n in enumerate([7, 40, 101, 3, 250]):
        assert abs(mask[pred == k].sum() - 0.3 * n) < 1  # each class's share, rounded once
    again, s2 = split_rows(pred, 0.3, 11)
    assert np.array_equal(mask, again) and s == s2
    other, s3 = split_rows(pred, 0.3, 12)
    assert not np.array_equal(mask, other) and s3.rows_sha256 != s.rows_sha256
    assert s.n_fit == mask.sum() and s.n_cutoff == (~mask).sum()


def test_split_share_is_unbiased_for_tiny_classes():
    pred = np.arange(4000)  # 4,000 classes of one row: the share must still be the fraction
    got = np.mean([split_rows(pred, 0.25, s)[0].mean() for s in range(5)])
    assert abs(got - 0.25) < 0.02


def test_fit_and_threshold_records_the_split_and_round_trips(tmp_path):
    data = _data(4000)
    model, th = topcal.fit_and_threshold(data, "hist", 0.8, 0.1, fit_fraction=0.5, seed=3)
    assert th.split.n_fit + th.split.n_cutoff == 4000
    assert model.evidence_.stats.n_samples == th.split.n_fit
    assert th.n_samples == th.split.n_cutoff
    th.save(tmp_path / "t.json")
    back = topcal.load_thresholds(tmp_path / "t.json")
    assert back.split == th.split and back == th
    # a file without the field (every file before splits) still loads, with no split
    th0 = topcal.fit_thresholds(model, _data(2000, seed=9), 0.8, 0.1)
    assert "split" not in th0.to_dict() and th0.split is None


def test_a_forged_split_is_refused(tmp_path):
    model, th = topcal.fit_and_threshold(_data(2000), "hist", 0.8, 0.1)
    doc = json.loads(th.dumps())
    doc["thresholds"]["split"]["fraction"] = 1.5
    from topcal.persist import canonical_json
    import hashlib

    doc["sha256"] = hashlib.sha256(canonical_json(doc["thresholds"]).encode()).hexdigest()
    with pytest.raises(ModelFileError, match="split.fraction"):
        topcal.thresholds.core.loads_thresholds(json.dumps(doc))


def test_fit_and_threshold_refuses_bad_input():
    data = _data(500)
    with pytest.raises(ParameterError, match="fit_fraction"):
        topcal.fit_and_threshold(data, "hist", fit_fraction=1.0)
    with pytest.raises(ParameterError, match="seed"):
        topcal.fit_and_threshold(data, "hist", seed=-2)
    with pytest.raises(DataError, match="empty"):
        topcal.fit_and_threshold(_data(3), "hist", fit_fraction=0.01)
    fitted = topcal.calibrator("hist").fit(data)
    with pytest.raises(ParameterError, match="fitted"):
        topcal.fit_and_threshold(data, fitted)


def test_split_from_dict_checks_fields():
    good = Split(0.5, 0, 10, 10, "a" * 64).to_dict()
    assert Split.from_dict(good) == Split(0.5, 0, 10, 10, "a" * 64)
    for key, bad in [("seed", 1.5), ("n_fit", -1), ("rows_sha256", "xyz"), ("stratify", "label")]:
        with pytest.raises(ValueError):
            Split.from_dict({**good, key: bad})
    with pytest.raises(ValueError):
        Split.from_dict({**good, "extra": 1})


@pytest.mark.slow
def test_one_command_guarantee_holds_on_repeated_splits():
    """Small-scale version of benchmarks/bench_trust_split.py: the global cut-off of the
    one-command path, measured on a held-out third, falls below the target in at most
    delta + 3 SE of the splits."""
    precision, delta, runs = 0.85, 0.1, 30
    bad = 0
    for seed in range(runs):
        data = _data(6000, k=5, seed=100 + seed)
        rng = np.random.default_rng(seed)
        test = rng.random(6000) < 1 / 3
        model, th = topcal.fit_and_threshold(
            data.subset(~test), "hist", precision, delta, mode="global", seed=seed
        )
        new = data.subset(test)
        acc = th.accept(new.pred, model.predict(new), new.score)
        if acc.sum() and new.tp[acc].sum() / acc.sum() < precision:
            bad += 1
    assert bad / runs <= delta + 3 * np.sqrt(delta * (1 - delta) / runs)
