"""Data frames and checks shared by the large-data tests (test_stats, test_scale, test_dask) and the
CLI runner
shared by every CLI test."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from topcal.cli import main


def have_dask() -> bool:
    """Whether the dask extra is installed; its absence fails under ``CI=true`` (``make test``
    installs it)."""
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError:  # pragma: no cover - make test installs the extra
        if os.environ.get("CI") == "true":
            pytest.fail(
                "dask is missing under CI=true; run 'make install' (it installs topcal[dask])",
                pytrace=False,
            )
        return False
    return True


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def probs_frame(n=4000, K=4, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(K, 0.7), size=n)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, K - 1)
    frame = pd.DataFrame({f"p_c{j}": p[:, j] for j in range(K)})
    frame["label"] = [f"c{v}" for v in y]
    return frame


def scores_frame(n=3000, seed=1, int_classes=False):
    rng = np.random.default_rng(seed)
    names = np.array(["zeta", "alpha", "mid", "beta"])
    pred = rng.integers(0, 4, n)
    lab = np.where(rng.random(n) < 0.7, pred, rng.integers(0, 4, n))
    if int_classes:
        return pd.DataFrame({"pred": pred, "score": rng.random(n), "label": lab})
    return pd.DataFrame({"pred": names[pred], "score": rng.random(n), "label": names[lab]})


def write_parts(tmp_path, frame, n_parts):
    d = tmp_path / "parts"
    d.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(frame)), n_parts)):
        frame.iloc[part].to_parquet(d / f"part{i:02d}.parquet")
    return d


def model_payload(path):
    return json.loads(open(path).read())["model"]


def on_grid(data, n_cells=4096):
    """Per-sample ``data`` with every score moved to its ScoreStats cell midpoint (what a fit from
    statistics sees)."""
    from topcal.data import TopLabelData
    from topcal.evidence.stats import cell_index, cell_midpoints

    mid = cell_midpoints(
        cell_index(data.score, data.score_range, n_cells), data.score_range, n_cells
    )
    return TopLabelData.from_scores(
        data.pred, mid, data.labels, classes=data.classes, score_range=data.score_range
    )


def assert_confusion_equal(a, b):
    """Two ConfusionStats bit for bit: classes, region edges and counts."""
    assert a is not None and b is not None and a.classes == b.classes
    for ea, eb in zip(a.edges, b.edges, strict=True):
        np.testing.assert_array_equal(ea, eb)
    for part in ("indptr", "indices", "data"):  # the sparse counts, cell by cell
        np.testing.assert_array_equal(getattr(a.table, part), getattr(b.table, part))


def dense_layout(stats) -> dict:
    """The confusion piece as topcal wrote it before the sparse layout: per class and region,
    the [true class, count] pairs."""
    return {
        "edges": [e.tolist() for e in stats.edges],
        "counts": [
            [[[int(j), float(row[j])] for j in np.flatnonzero(row)] for row in c]
            for c in stats.counts
        ],
    }


def format_4_text(model, confusion=None) -> str:
    """``model``'s file as the format-4 writer wrote it (its layout is this format's), with the
    label-shift counts ``confusion`` (e.g. :func:`dense_layout`: a model loaded from an older
    file and saved again kept them so); the checksum made for the text."""
    import hashlib

    from topcal.persist import canonical_json

    d = json.loads(json.dumps(model.to_dict()))
    if confusion is not None:
        d["evidence"]["confusion"] = json.loads(json.dumps(confusion))
    doc = {
        "format": "topcal-model",
        "format_version": 4,
        "topcal_version": "0.0.0",
        "model": d,
        "sha256": hashlib.sha256(canonical_json(d).encode()).hexdigest(),
    }
    return json.dumps(doc)
