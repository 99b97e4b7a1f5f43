"""Every command at 10^5 classes (next-token-like outputs): the statistics follow the rows, not
K^2, so fit, apply, describe, threshold and update run on 2 x 10^4 rows in seconds and little
memory (the dense label-shift counts of these data were 16 GB)."""

import json

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.evidence.confusion import ConfusionStats

from _cli import call
from _frames import assert_confusion_equal, on_grid

pytestmark = pytest.mark.slow

K = 100_000


def zipf_rows(n, seed, *, seen=None):
    """Top-score rows over K classes, predicted class Zipf(1.1), score ~ Beta(5, 1.5), right with
    probability score^1.3; with ``seen``, only rows whose classes are in it."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, K + 1) ** 1.1)
    cdf /= cdf[-1]
    pred = np.searchsorted(cdf, rng.random(2 * n))
    other = np.searchsorted(cdf, rng.random(2 * n))
    score = rng.beta(5.0, 1.5, 2 * n)
    label = np.where(rng.random(2 * n) < score**1.3, pred, np.where(other == pred, pred + 1, other))
    label = np.minimum(label, K - 1)
    frame = pd.DataFrame({"pred": pred, "score": score, "label": label})
    for col in ("pred", "label"):  # tokens by name, as a language model's vocabulary
        frame[col] = "t" + frame[col].astype(str)
    if seen is not None:
        frame = frame[frame["pred"].isin(seen) & frame["label"].isin(seen)]
    return frame.iloc[:n].reset_index(drop=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("many")
    fit = zipf_rows(20_000, 0)
    seen = np.union1d(fit["pred"], fit["label"])
    held = zipf_rows(10_000, 1, seen=seen)
    fit.to_parquet(d / "fit.parquet", index=False)
    held.to_parquet(d / "held.parquet", index=False)
    held.drop(columns="label").to_parquet(d / "use.parquet", index=False)
    return d, fit


def ok(r):
    assert r.returncode == 0, r.stderr[-2000:]
    return r


@pytest.mark.heavy
def test_commands_at_many_classes(files):
    d, fit = files
    ok(call("fit", "fit.parquet", "--method", "hist", "-o", "hist.json", "-q", cwd=d))
    size = (d / "hist.json").stat().st_size
    # a few hundred bytes per predicted class and per row's statistics, nothing per K^2
    assert size < 400 * fit["pred"].nunique() + 100 * len(fit), size
    model = topcal.load(d / "hist.json")
    assert model.evidence_.confusion.table.nnz <= len(fit)
    r = ok(call("apply", "hist.json", "use.parquet", "--interval", "0.9", "-o", "a.parquet", cwd=d))
    out = pd.read_parquet(d / "a.parquet")
    assert len(out) == 10_000 and out["confidence"].between(0, 1).all()
    r = ok(call("describe", "hist.json", cwd=d))
    assert len(r.stdout.splitlines()) <= 60
    ok(call("threshold", "held.parquet", "--model", "hist.json", "-o", "t.json", "-q", cwd=d))
    assert json.loads((d / "t.json").read_text())
    ok(call("update", "hist.json", "held.parquet", "-o", "up.json", "-q", cwd=d))
    up = topcal.load(d / "up.json")
    assert up.evidence_.confusion.table.sum() == 30_000  # the counts of both files


def test_chunked_reads_count_what_a_whole_read_counts_at_many_classes(files):
    d, _ = files
    ok(call("fit", "fit.parquet", "--method", "hist", "-o", "whole.json", "-q", cwd=d))
    ok(
        call(
            "fit",
            "fit.parquet",
            "--method",
            "hist",
            "--chunk-rows",
            "3000",
            "-o",
            "c.json",
            "-q",
            cwd=d,
        )
    )
    chunked = topcal.load(d / "c.json")
    data = topcal.read_data(d / "fit.parquet", classes=list(chunked.classes_))
    assert_confusion_equal(chunked.evidence_.confusion, ConfusionStats.from_data(on_grid(data)))
    whole = topcal.load(d / "whole.json")
    np.testing.assert_array_equal(
        chunked.evidence_.confusion.column_sums(), whole.evidence_.confusion.column_sums()
    )


def test_the_command_line_keeps_freed_memory_unless_glibc_is_told_otherwise(monkeypatch):
    """The command line sets glibc's mmap and trim thresholds, so arrays dropped and made again
    (EM at 10^5 classes) reuse the heap instead of faulting in fresh pages; where the user set
    glibc's own variables, theirs decide."""
    import platform

    from topcal.cli import keep_freed_memory

    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert keep_freed_memory() is True
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_freed_memory() is False
