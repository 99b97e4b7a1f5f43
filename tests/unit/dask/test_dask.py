"""topcal.dask and --engine dask on a real LocalCluster (2 worker processes x 1 thread), issue
13."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.evidence.fingerprint import Fingerprint
from topcal import persist
from topcal.evidence.confusion import ConfusionStats, GridConfusion
from topcal.evidence.core import Evidence
from topcal.evidence.stats import ScoreStats

from _frames import (
    assert_confusion_equal,
    have_dask,
    model_payload,
    on_grid,
    probs_frame,
    run,
    scores_frame,
    write_parts,
)

pytestmark = pytest.mark.slow

if not have_dask():  # pragma: no cover - make test installs the extra
    pytest.skip(
        "the dask extra is not installed (pip install 'topcal[dask]')", allow_module_level=True
    )


def test_dask_fit_equals_in_memory_fit_on_a_local_cluster(tmp_path, cluster):
    import dask.dataframe as dd

    from topcal import dask as tdask

    assert cluster.status == "running" and len(cluster.scheduler_info()["workers"]) == 2
    frame = probs_frame(6000)
    d = write_parts(tmp_path, frame, 11)
    ddf = dd.read_parquet(str(d))
    assert ddf.npartitions == 11
    from distributed import get_task_stream

    with get_task_stream(cluster) as ts:
        stats = tdask.stats(ddf, split_every=3)  # a tree: 11 -> 4 -> 2 -> 1
    # the statistics were computed on the cluster's workers (11 partitions, 4 + 2 + 1 merges)
    keys = [t["key"] for t in ts.data]
    assert (
        sum("_partition_stats" in str(k) for k in keys) == 11
        and sum("_merge" in str(k) for k in keys) == 7
    )
    assert {t["worker"] for t in ts.data} <= set(cluster.scheduler_info()["workers"])
    data = read_data_frame(frame)
    assert stats.equals(ScoreStats.from_data(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = tdask.fit(ddf, "kde-mon2")
        ref = topcal.calibrator("kde-mon2").fit(  # with the rows' fingerprint (issue 33)
            Evidence(
                ScoreStats.from_data(data), GridConfusion.from_data(data), Fingerprint.of(data)
            )
        )
    assert persist.dumps(cal).split('"sha256"')[0] == persist.dumps(ref).split('"sha256"')[0]
    # the label-shift counts came through the tree too: those of the data with scores at their cell
    # midpoints
    assert_confusion_equal(cal.evidence_.confusion, ConfusionStats.from_data(on_grid(data)))
    out = tdask.apply(cal, ddf).compute()
    np.testing.assert_array_equal(out["confidence"].to_numpy(), ref.predict(data))
    assert list(out["pred"].astype(str)) == list(np.asarray(data.classes)[data.pred])


def read_data_frame(frame):
    from topcal.io import read_frame

    return read_frame(frame)


def test_dask_top_score_layout_infers_classes_like_a_whole_read(tmp_path, cluster):
    import dask.dataframe as dd

    from topcal import dask as tdask

    frame = scores_frame(3000)
    d = write_parts(tmp_path, frame, 5)
    stats = tdask.stats(dd.read_parquet(str(d)))
    assert stats.equals(ScoreStats.from_data(read_data_frame(frame)))
    with pytest.raises(topcal.errors.ParameterError, match="full score vector"):
        tdask.fit(dd.read_parquet(str(d)), "tswa")


def test_cli_engine_dask_with_scheduler_address(tmp_path, capsys, cluster):
    frame = probs_frame(4000)
    d = write_parts(tmp_path, frame, 4)
    frame.to_csv(tmp_path / "all.csv", index=False)
    addr = cluster.scheduler.address
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, out, err = run(
            [
                "fit",
                d,
                "--engine",
                "dask",
                "--scheduler",
                addr,
                "--method",
                "hist",
                "-o",
                tmp_path / "dk.json",
            ],
            capsys,
        )
        assert code == 0, err
        run(
            [
                "fit",
                tmp_path / "all.csv",
                "--chunk-rows",
                1000,
                "--method",
                "hist",
                "-o",
                tmp_path / "st.json",
            ],
            capsys,
        )
    assert model_payload(tmp_path / "dk.json") == model_payload(tmp_path / "st.json")
    code, out, err = run(
        [
            "apply",
            tmp_path / "dk.json",
            d,
            "--engine",
            "dask",
            "--scheduler",
            addr,
            "-o",
            tmp_path / "out",
        ],
        capsys,
    )
    assert code == 0, err
    got = pd.read_parquet(tmp_path / "out")
    model = persist.load(tmp_path / "dk.json")
    np.testing.assert_array_equal(
        got["confidence"].to_numpy(), model.predict(read_data_frame(frame))
    )
    code, out, err = run(
        [
            "fit",
            tmp_path / "nothing-*.parquet",
            "--engine",
            "dask",
            "--scheduler",
            addr,
            "-o",
            tmp_path / "x.json",
        ],
        capsys,
    )
    assert code == 2 and "no Parquet data" in err


@pytest.mark.parametrize("n_parts", [1, 3, 7])
def test_dask_update_carries_confusion_counts_on_a_local_cluster(tmp_path, cluster, n_parts):
    import dask.dataframe as dd

    from topcal import dask as tdask

    frame = probs_frame(5000, seed=3)
    data = read_data_frame(frame)
    first = np.arange(1500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = topcal.calibrator("hist").fit(data.subset(first))
        ref = (
            topcal.calibrator("hist")
            .fit(data.subset(first))
            .update(data.subset(np.arange(1500, 5000)))
        )
    d = write_parts(tmp_path, frame.iloc[1500:], n_parts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdask.update(cal, dd.read_parquet(str(d)), split_every=2)
    assert cal.evidence_.stats.equals(ref.evidence_.stats)
    assert_confusion_equal(
        cal.evidence_.confusion, ref.evidence_.confusion
    )  # in the first fit's regions, counts of all rows
    np.testing.assert_array_equal(
        cal.evidence_.confusion.confusion().sum(axis=0), np.bincount(data.labels, minlength=4)
    )
    adapted = cal.adapt(priors=np.array([0.4, 0.3, 0.2, 0.1]))
    np.testing.assert_array_equal(
        adapted.predict(data), ref.adapt(priors=np.array([0.4, 0.3, 0.2, 0.1])).predict(data)
    )


def test_cli_update_engine_dask_keeps_confusion_counts(tmp_path, capsys, cluster):
    frame = probs_frame(4000, seed=6)
    frame.iloc[:1000].to_csv(tmp_path / "a.csv", index=False)
    d = write_parts(tmp_path, frame.iloc[1000:], 3)
    frame.iloc[1000:].to_csv(tmp_path / "rest.csv", index=False)
    addr = cluster.scheduler.address
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            run(["fit", tmp_path / "a.csv", "--method", "hist", "-o", tmp_path / "a.json"], capsys)[
                0
            ]
            == 0
        )
        code, out, err = run(
            [
                "update",
                tmp_path / "a.json",
                d,
                "--engine",
                "dask",
                "--scheduler",
                addr,
                "-o",
                tmp_path / "dk.json",
            ],
            capsys,
        )
        assert code == 0, err
        code, out, err = run(
            ["update", tmp_path / "a.json", tmp_path / "rest.csv", "-o", tmp_path / "mem.json"],
            capsys,
        )
        assert code == 0, err
    assert model_payload(tmp_path / "dk.json") == model_payload(
        tmp_path / "mem.json"
    )  # confusion included
    assert "confusion" in model_payload(tmp_path / "dk.json")["evidence"]


@pytest.mark.parametrize("make", [probs_frame, scores_frame])
def test_dask_apply_output_is_the_local_apply_output(tmp_path, capsys, cluster, make):
    # one formatting and one writer for every engine: the same bytes, with an empty partition on the
    # way
    frame = make(3000)
    d = write_parts(tmp_path, frame, 4)
    frame.iloc[:0].to_parquet(d / "part99.parquet")
    frame.to_csv(tmp_path / "all.csv", index=False)
    addr = cluster.scheduler.address
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            run(
                ["fit", tmp_path / "all.csv", "--method", "hist", "-o", tmp_path / "m.json"], capsys
            )[0]
            == 0
        )
        for args, out in [
            ((), "local.csv"),
            (("--engine", "dask", "--scheduler", addr), "dask.csv"),
            (("--engine", "dask", "--scheduler", addr), "folder"),
        ]:
            code, _, err = run(
                ["apply", tmp_path / "m.json", d, *args, "-o", tmp_path / out], capsys
            )
            assert code == 0, err
    local = (tmp_path / "local.csv").read_bytes()
    assert (tmp_path / "dask.csv").read_bytes() == local
    assert local.count(b"confidence") == 1  # one header line
    # the folder: one file per partition, named in partition order, written by the same writer
    files = sorted(p.name for p in (tmp_path / "folder").iterdir())
    assert files[0] == ".topcal-report" and len(files) >= 5
    assert files[1:] == [f"part.{i:05d}.parquet" for i in range(len(files) - 1)]
    got = pd.read_parquet(tmp_path / "folder")
    want = pd.read_csv(tmp_path / "local.csv")
    assert list(got.columns) == list(want.columns)
    np.testing.assert_array_equal(got["confidence"].to_numpy(), want["confidence"].to_numpy())
    assert list(got["pred"].astype(str)) == list(want["pred"].astype(str))


def test_dask_statistics_equal_in_memory_ones_at_many_classes(tmp_path, cluster):
    """10^5 classes (Zipf-predicted tokens), 2 x 10^4 rows on the 2-worker cluster: the score
    statistics and the label-shift counts (sparse; dense ones were rows x K per class) equal the
    in-memory ones."""
    import dask.dataframe as dd

    from topcal import dask as tdask

    from test_many_classes import zipf_rows

    frame = zipf_rows(20_000, 0)
    d = write_parts(tmp_path, frame, 4)
    ddf = dd.read_parquet(str(d))
    data = read_data_frame(frame)
    assert tdask.stats(ddf).equals(ScoreStats.from_data(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = tdask.fit(ddf, "hist")
    assert tuple(cal.classes_) == tuple(data.classes)
    assert_confusion_equal(cal.evidence_.confusion, ConfusionStats.from_data(on_grid(data)))
    np.testing.assert_array_equal(
        cal.evidence_.confusion.column_sums(), ConfusionStats.from_data(data).column_sums()
    )
