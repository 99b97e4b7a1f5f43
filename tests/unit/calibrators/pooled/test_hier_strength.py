"""The interval strength of ``hier-platt`` / ``hier-beta`` where classes are small: the exact
leave-one-out loss (calibrators/pooled/_strength.py, docs/intervals.md)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from scipy.special import expit, log_expit, ndtri

from topcal import TopLabelData, persist
from topcal.calibrators.pooled import _strength as _hier_strength
from topcal.calibrators import calibrator
from topcal.calibrators.pooled._rows import Rows
from topcal.calibrators.pooled._solve import newton


def small_classes(n_classes=30, rows=5, seed=0, spread=3.5, centre=3.3):
    """Classes of ``rows`` rows, logit(s) ~ N(centre, spread) (many rows far out, as ImageNet's),
    class k's truth expit(a_k logit(s) + b_k) around (1.0, 0.3)."""
    rng = np.random.default_rng(seed)
    pred = np.repeat(np.arange(n_classes), rows)
    z = rng.normal(centre, spread, pred.size)
    a = np.exp(0.3 * rng.normal(size=n_classes))[pred]
    b = 0.3 + 0.5 * rng.normal(size=n_classes)[pred]
    right = rng.random(pred.size) < expit(a * z + b)
    labels = np.where(right, pred, (pred + 1) % n_classes)
    s = np.clip(expit(z), 1e-12, 1 - 1e-12)
    classes = [f"c{k}" for k in range(n_classes)]
    return TopLabelData.from_scores(pred, s, labels, classes=classes, score_range=(0.0, 1.0))


def fit(name, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return calibrator(name).fit(data)


def test_exact_loo_is_each_row_left_out_and_its_class_refitted():
    """Against a loop that refits the class without each row in turn (a unit weight of 2 is left
    out once and counted twice, as the approximate loss counts units)."""
    data = small_classes(6, 4, seed=1, spread=1.0, centre=0.5)  # right and wrong rows
    model = fit("hier-platt", data)
    z = np.log(data.score) - np.log1p(-data.score)
    tp, fp = data.tp.astype(float), data.fp.astype(float)
    tp[0] *= 2.0
    fp[0] *= 2.0  # row 0: weight 2 (whichever it holds)
    k, p, lam = data.n_classes, 2, 8.0
    center = np.broadcast_to(model.pooled_, (k, p))
    rows = Rows([z], tp, fp, data.pred, k)
    theta = newton(rows, center.copy(), center, model.prior_, lam)[0]
    got = _hier_strength.exact_loo(rows, theta, center, model.prior_, lam)
    want = 0.0
    for i in range(data.n_rows):
        t, f = tp.copy(), fp.copy()
        w_t, w_f = t[i], f[i]
        t[i] -= min(w_t, 1.0)
        f[i] -= min(w_f, 1.0)
        th = newton(Rows([z], t, f, data.pred, k), theta, center, model.prior_, lam)[0]
        m = th[data.pred[i], 0] * z[i] + th[data.pred[i], 1]
        want -= w_t * log_expit(m) + w_f * log_expit(-m)
    assert want > 1.0
    assert got == pytest.approx(want, rel=1e-8)


def test_small_classes_far_out_in_the_score_get_a_stronger_interval_strength():
    """The approximate loss takes the interval's strength too weak where a class of 5 rows holds
    rows far out in logit(s); with the exact loss the interval is narrower, still about the same
    centre, and off 0 and 1."""
    data = small_classes(40, 5, seed=2)
    new = fit("hier-platt", data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_hier_strength, "EXACT_LOO_ROWS_PER_PARAM", 0)  # the approximate loss only
        old = fit("hier-platt", data)
    np.testing.assert_array_equal(new.theta_, old.theta_)  # the fit itself is untouched
    lo, hi = new.predict_interval(data, 0.9)
    olo, ohi = old.predict_interval(data, 0.9)
    assert np.mean(hi - lo) < 0.8 * np.mean(ohi - olo)
    assert np.all((0 < lo) & (lo < hi) & (hi < 1))


def test_no_small_class_keeps_the_approximate_rule_bit_for_bit():
    data = small_classes(6, 60, seed=3, spread=1.5)
    new = fit("hier-beta", data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_hier_strength, "EXACT_LOO_ROWS_PER_PARAM", 0)
        old = fit("hier-beta", data)
    np.testing.assert_array_equal(new.cov_, old.cov_)


def test_a_file_written_before_keeps_its_interval(tmp_path):
    """A model file's stored covariance is its interval's (nothing is recomputed at load): a file
    of the approximate rule (written before) gives the approximate rule's interval."""
    data = small_classes(20, 5, seed=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_hier_strength, "EXACT_LOO_ROWS_PER_PARAM", 0)
        before = fit("hier-platt", data)
    persist.save(before, tmp_path / "m.json")
    stored = json.loads((tmp_path / "m.json").read_text())
    loaded = persist.load(tmp_path / "m.json")
    lo, hi = loaded.predict_interval(data, 0.9)
    blo, bhi = before.predict_interval(data, 0.9)
    np.testing.assert_array_equal(lo, blo)
    np.testing.assert_array_equal(hi, bhi)
    assert np.max(np.abs(hi - lo - (bhi - blo))) == 0
    z = np.log(data.score) - np.log1p(-data.score)
    x = np.stack([z, np.ones_like(z)], axis=1)
    cov = np.asarray(loaded.cov_)[data.pred]
    m = np.einsum("np,np->n", x, loaded.theta_[data.pred])
    se = np.sqrt(np.einsum("ni,nij,nj->n", x, cov, x))
    np.testing.assert_allclose(hi, expit(m + ndtri(0.95) * se), rtol=1e-12)
    assert "cov" in json.dumps(stored)
