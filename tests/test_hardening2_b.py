"""Regression tests of issue 24 (hardening, round two), part B: wrong answers with exit 0, friction, and
following the README as a new user. CLI cases run through the real ``topcal`` console script (the
``cli``/``assert_error`` helpers of test_hardening.py), API cases through the API, Dask cases on a real
``dask.distributed.LocalCluster``.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from test_hardening import assert_error, assert_ok, cli


def _probs_csv(path, n=600, seed=0):
    """Columns p_a,p_b,p_c,label (the issue's base.csv)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet([1, 1, 1], n)
    y = np.array([rng.choice(3, p=p) for p in P])
    frame = pd.DataFrame(P, columns=["p_a", "p_b", "p_c"])
    frame["label"] = np.array(list("abc"))[y]
    frame.to_csv(path, index=False)
    return frame


@pytest.fixture
def base(tmp_path):
    """(base.csv, M = a hist model fitted on it)."""
    data = tmp_path / "base.csv"
    _probs_csv(data)
    model = tmp_path / "M.json"
    assert_ok(cli("fit", data, "--method", "hist", "-o", model))
    return data, model


@pytest.fixture(scope="module")
def cluster():
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - make test installs the extra
        if os.environ.get("CI") == "true":
            pytest.fail("dask is missing under CI=true; run 'make install'", pytrace=False)
        pytest.skip("the dask extra is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(lc)
    yield client
    client.close()
    lc.close()


# ----------------------------------------------------------------- wrong answers with exit 0
# rows whose top class is c, a, b (so a label read by column position would be wrong)
_ROWS = {"p_c": [0.9, 0.1, 0.2], "p_a": [0.05, 0.8, 0.1], "p_b": [0.05, 0.1, 0.7]}


def _reordered_inputs(tmp_path):
    """The same three rows as CSV, Parquet and npz with columns c, a, b; and a subset a, c."""
    frame = pd.DataFrame(_ROWS)
    frame.to_csv(tmp_path / "re.csv", index=False)
    frame.to_parquet(tmp_path / "re.parquet", index=False)
    np.savez(tmp_path / "re.npz", probs=frame.to_numpy(), classes=np.array(["c", "a", "b"]))
    pd.DataFrame({"p_a": [0.1, 0.6], "p_c": [0.9, 0.4]}).to_csv(tmp_path / "sub.csv", index=False)
    return ["c", "a", "b"], ["c", "a"]


def test_apply_names_pred_by_column_name_when_columns_are_reordered_or_a_subset(base, tmp_path):
    _, model = base
    want, want_sub = _reordered_inputs(tmp_path)
    m = topcal.load(model)
    for src, extra in [("re.csv", ()), ("re.parquet", ()), ("re.npz", ()), ("re.csv", ("--chunk-rows", "1")),
                       ("re.parquet", ("--chunk-rows", "2"))]:
        out = tmp_path / f"out-{src}-{len(extra)}.csv"
        assert_ok(cli("apply", model, tmp_path / src, "-o", out, *extra))
        got = pd.read_csv(out)
        assert list(got["pred"]) == want, (src, extra)
        # the confidence is that of the named class's curve at the top score
        top = pd.DataFrame(_ROWS).max(axis=1).to_numpy()
        idx = [m.classes_.index(c) for c in want]
        expect = [float(m.curve(k, [s]).confidence[0]) for k, s in zip(idx, top)]
        np.testing.assert_allclose(got["confidence"], expect)
    for extra in [(), ("--chunk-rows", "1")]:
        out = tmp_path / f"sub-{len(extra)}.csv"
        assert_ok(cli("apply", model, tmp_path / "sub.csv", "-o", out, *extra))
        assert list(pd.read_csv(out)["pred"]) == want_sub


def test_dask_apply_names_pred_by_column_name(base, tmp_path, cluster):
    _, model = base
    want, _ = _reordered_inputs(tmp_path)
    out = tmp_path / "dk.csv"
    assert_ok(cli("apply", model, tmp_path / "re.parquet", "--engine", "dask", "--scheduler",
                  cluster.scheduler.address, "-o", out))
    assert list(pd.read_csv(out)["pred"]) == want
