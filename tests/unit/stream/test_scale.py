"""Beyond memory (issue 13): streamed statistics and apply, `topcal update` (Dask: test_dask.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal import persist
from topcal.evidence.confusion import ConfusionStats
from topcal.datasets import load_phanns
from topcal.errors import DataError
from topcal.io import iter_tables, read_data, read_stats
from topcal.evidence.stats import ScoreStats
from topcal.stream import fit_file, update_file

from _frames import (
    assert_confusion_equal,
    model_payload,
    on_grid,
    probs_frame,
    run,
    scores_frame,
    write_parts,
)


# ------------------------------------------------------------ streaming reads
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("layout", ["probs", "names", "ints"])
def test_streamed_statistics_equal_whole_file(tmp_path, fmt, layout):
    frame = {
        "probs": probs_frame,
        "names": scores_frame,
        "ints": lambda: scores_frame(int_classes=True),
    }[layout]()
    path = tmp_path / f"d.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, row_group_size=700)
    whole = ScoreStats.from_data(read_data(path))
    for chunk in (333, 1000, 10**6):
        s = read_stats(path, chunk)
        assert s.equals(whole), (chunk, s, whole)


def _phanns_csv(path):
    """The embedded PhANNs counts written as a binned CSV file; returns the TopLabelData."""
    phanns = load_phanns()
    pd.DataFrame(
        {
            "predicted_class": np.asarray(phanns.classes)[phanns.pred],
            "bin_lo": phanns.bin_edges[:, 0],
            "bin_hi": phanns.bin_edges[:, 1],
            "tp": phanns.tp,
            "fp": phanns.fp,
        }
    ).to_csv(path, index=False)
    return phanns


def test_streamed_binned_counts_keep_class_order_and_range(tmp_path):
    phanns = _phanns_csv(tmp_path / "b.csv")
    whole = ScoreStats.from_data(read_data(tmp_path / "b.csv", score_range=(0, 10)))
    s = read_stats(tmp_path / "b.csv", 37, score_range=(0, 10))
    assert s.equals(whole) and s.classes == phanns.classes and s.score_range == phanns.score_range
    with pytest.raises(
        DataError, match="outside the default score range"
    ):  # never guessed from the bins
        read_stats(tmp_path / "b.csv", 37)


def test_directory_of_parquet_files_streams_in_name_order(tmp_path):
    frame = scores_frame(2000)
    d = write_parts(tmp_path, frame, 3)
    frame.to_parquet(tmp_path / "one.parquet")
    assert read_stats(d, 300).equals(read_stats(tmp_path / "one.parquet", 300))
    assert [len(f) for f in iter_tables(d, 10**6)] == [667, 667, 666]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no .parquet files"):
        read_stats(tmp_path / "empty")


def test_csv_class_column_that_changes_type_between_chunks(tmp_path):
    # the first chunk's labels look like integers, a later one's do not: read as names throughout
    frame = pd.DataFrame(
        {
            "pred": ["1"] * 50 + ["x"] * 50,
            "score": np.linspace(0.1, 0.9, 100),
            "label": ["1"] * 40 + ["x"] * 60,
        }
    )
    frame.to_csv(tmp_path / "m.csv", index=False)
    s = read_stats(tmp_path / "m.csv", 50)
    assert s.classes == ("1", "x")
    assert s.equals(ScoreStats.from_data(read_data(tmp_path / "m.csv")))


def test_chunked_reader_bounds_and_errors(tmp_path):
    probs_frame(1000).to_parquet(tmp_path / "d.parquet", row_group_size=1000)
    sizes = [len(f) for f in iter_tables(tmp_path / "d.parquet", 300)]
    assert max(sizes) <= 300 and sum(sizes) == 1000
    with pytest.raises(DataError, match="chunk_rows"):
        next(iter_tables(tmp_path / "d.parquet", 0))
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(DataError, match="cannot be read in chunks"):
        read_stats(tmp_path / "x.json")
    bad = probs_frame(200)
    bad["p_c0"] = bad["p_c0"].astype(object)
    bad.loc[150, "p_c0"] = "oops"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(
        DataError, match=r"non-numeric value .oops. at row 151"
    ):  # the file's row, not the chunk's
        read_stats(tmp_path / "bad.csv", 100)


# ------------------------------------------------------------------ CLI update
@pytest.mark.slow
@pytest.mark.parametrize("method", ["kde-mon2", "hist", "cum-opt", "auto"])
def test_cli_update_equals_fit_on_all(tmp_path, capsys, method):
    frame = probs_frame(3000)
    frame.to_csv(tmp_path / "all.csv", index=False)
    frame.iloc[:1000].to_parquet(tmp_path / "a.parquet")
    frame.iloc[1000:2200].to_csv(tmp_path / "b.csv", index=False)
    frame.iloc[2200:].to_csv(tmp_path / "c.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for data, rows, model in (("all.csv", 500, "all.json"), ("a.parquet", 300, "a.json")):
            argv = ["fit", tmp_path / data, "--method", method, "--chunk-rows", rows]
            assert run([*argv, "-o", tmp_path / model], capsys)[0] == 0
        code, out, err = run(
            ["update", tmp_path / "a.json", tmp_path / "b.csv", "-o", tmp_path / "ab.json"], capsys
        )
        assert code == 0 and "1000 + 1200 samples" in out
        code, out, err = run(
            [
                "update",
                tmp_path / "ab.json",
                tmp_path / "c.csv",
                "--chunk-rows",
                77,
                "-o",
                tmp_path / "abc.json",
            ],
            capsys,
        )
        assert code == 0
    whole, upd = model_payload(tmp_path / "all.json"), model_payload(tmp_path / "abc.json")
    assert all(upd["evidence"][k] == whole["evidence"][k] for k in ("stats", "n_tp"))
    if (
        method == "auto"
    ):  # keeps its first choice; the chosen method equals a fit of it on all the counts
        assert "kept its choice" in out
        chosen = upd["state"]["method"]
        ref = topcal.calibrator(chosen).fit(
            ScoreStats.from_dict(whole["evidence"]["stats"], whole["classes"], (0, 1)).to_data()
        )
        got = persist.load(tmp_path / "abc.json")
        data = read_data(tmp_path / "all.csv")
        np.testing.assert_allclose(got.predict(data), ref.predict(data), rtol=0, atol=1e-12)
        code, out, err = run(["describe", tmp_path / "abc.json", "--full"], capsys)
        assert (
            code == 0
            and "on 1000 samples" in out
            and "fitted on 3000 samples; fit auto again" in out
        )
    else:
        assert_same_but_regions(upd, whole)


def assert_same_but_regions(upd: dict, whole: dict) -> None:
    """The whole model bit for bit, except that an update keeps its first fit's confusion regions:
    the confusion matrix (counts summed over regions) is that of all the data exactly."""
    skip = ("confusion", "fingerprints")  # an update also records its parts' fingerprints

    def kept(d):
        return {**d, "evidence": {k: v for k, v in d["evidence"].items() if k not in skip}}

    assert kept(upd) == kept(whole)
    classes = tuple(whole["classes"])
    a, b = (ConfusionStats.from_dict(m["evidence"]["confusion"], classes) for m in (upd, whole))
    np.testing.assert_array_equal(a.confusion(), b.confusion())


def test_cli_update_errors(tmp_path, capsys):
    frame = probs_frame(600)
    frame.to_csv(tmp_path / "d.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(["fit", tmp_path / "d.csv", "--method", "tswa", "-o", tmp_path / "t.json"], capsys)
    code, out, err = run(
        ["update", tmp_path / "t.json", tmp_path / "d.csv", "-o", tmp_path / "u.json"], capsys
    )
    assert code == 2 and "has an award" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(
        [
            "fit",
            tmp_path / "d.csv",
            "--method",
            "sts",
            "--chunk-rows",
            100,
            "-o",
            tmp_path / "s.json",
        ],
        capsys,
    )
    assert code == 2 and "cannot be fitted from counts" in err
    run(["fit", tmp_path / "d.csv", "--method", "hist", "-o", tmp_path / "h.json"], capsys)
    other = frame.rename(columns={"p_c3": "p_c9"})
    other.to_csv(tmp_path / "o.csv", index=False)
    code, out, err = run(
        ["update", tmp_path / "h.json", tmp_path / "o.csv", "-o", tmp_path / "u.json"], capsys
    )
    assert code == 2 and "classes" in err
    code, out, err = run(
        ["fit", tmp_path / "d.csv", "--chunk-rows", 0, "-o", tmp_path / "z.json"], capsys
    )
    assert code == 2 and "--chunk-rows must be >= 1" in err
    code, out, err = run(
        ["fit", tmp_path / "d.csv", "--scheduler", "tcp://x:1", "-o", tmp_path / "z.json"], capsys
    )
    assert code == 2 and "--scheduler needs --engine dask" in err


def test_cli_update_top_score_model_uses_its_score_range(tmp_path, capsys):
    frame = scores_frame(2000)
    frame["score"] *= 10
    frame.iloc[:900].to_csv(tmp_path / "a.csv", index=False)
    frame.iloc[900:].to_csv(tmp_path / "b.csv", index=False)
    frame.to_csv(tmp_path / "all.csv", index=False)
    fit = ["--method", "hist", "--score-range", 0, 10]
    run(["fit", tmp_path / "a.csv", *fit, "--chunk-rows", 400, "-o", tmp_path / "a.json"], capsys)
    run(
        ["fit", tmp_path / "all.csv", *fit, "--chunk-rows", 400, "-o", tmp_path / "all.json"],
        capsys,
    )
    code, out, err = run(
        ["update", tmp_path / "a.json", tmp_path / "b.csv", "-o", tmp_path / "ab.json"], capsys
    )
    assert code == 0, err
    assert_same_but_regions(
        model_payload(tmp_path / "ab.json"), model_payload(tmp_path / "all.json")
    )


# ------------------------------------------------------------------ CLI apply
@pytest.mark.parametrize("out_name", ["o.parquet", "o.csv"])
def test_streamed_apply_equals_in_memory_predict(tmp_path, capsys, out_name):
    frame = probs_frame(5000)
    frame.to_parquet(tmp_path / "d.parquet", row_group_size=1500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(
            ["fit", tmp_path / "d.parquet", "--method", "kde-mon2", "-o", tmp_path / "m.json"],
            capsys,
        )
    model = persist.load(tmp_path / "m.json")
    expected = model.predict(read_data(tmp_path / "d.parquet"))
    code, out, err = run(
        [
            "apply",
            tmp_path / "m.json",
            tmp_path / "d.parquet",
            "--chunk-rows",
            777,
            "-o",
            tmp_path / out_name,
        ],
        capsys,
    )
    assert code == 0 and "calibrated 5000 rows" in out
    got = (
        pd.read_parquet(tmp_path / out_name)
        if out_name.endswith("parquet")
        else pd.read_csv(tmp_path / out_name)
    )
    assert list(got.columns) == list(frame.columns) + ["pred", "confidence"]
    np.testing.assert_allclose(
        got["confidence"].to_numpy(), expected, rtol=0, atol=0 if "parquet" in out_name else 1e-15
    )
    pd.testing.assert_frame_equal(got[frame.columns.tolist()], frame, check_dtype=False)
    assert not list(tmp_path.glob(".*.tmp"))


def test_streamed_apply_leaves_no_partial_output(tmp_path, capsys):
    frame = probs_frame(1000)
    frame.to_csv(tmp_path / "d.csv", index=False)
    run(["fit", tmp_path / "d.csv", "--method", "hist", "-o", tmp_path / "m.json"], capsys)
    bad = frame.copy()
    bad.loc[900, "p_c1"] = np.nan
    bad.to_csv(tmp_path / "bad.csv", index=False)
    code, out, err = run(
        [
            "apply",
            tmp_path / "m.json",
            tmp_path / "bad.csv",
            "--chunk-rows",
            200,
            "-o",
            tmp_path / "o.csv",
        ],
        capsys,
    )
    assert code == 2 and "at row 901" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.csv").exists() and not list(tmp_path.glob(".*.tmp"))


def test_apply_of_a_top_score_model_takes_its_classes_and_range(tmp_path, capsys):
    frame = scores_frame(1500)
    frame["score"] *= 10
    frame.to_csv(tmp_path / "d.csv", index=False)
    run(
        [
            "fit",
            tmp_path / "d.csv",
            "--method",
            "hist",
            "--score-range",
            0,
            10,
            "-o",
            tmp_path / "m.json",
        ],
        capsys,
    )
    only_two = frame[frame["pred"].isin(["zeta", "alpha"])].drop(columns=["label"])
    only_two.to_csv(tmp_path / "new.csv", index=False)
    code, out, err = run(
        [
            "apply",
            tmp_path / "m.json",
            tmp_path / "new.csv",
            "--chunk-rows",
            100,
            "-o",
            tmp_path / "o.csv",
        ],
        capsys,
    )
    assert code == 0, err
    got = pd.read_csv(tmp_path / "o.csv")
    model = persist.load(tmp_path / "m.json")
    exp = model.predict(
        topcal.TopLabelData.from_scores(
            only_two["pred"], only_two["score"], classes=model.classes_, score_range=(0, 10)
        )
    )
    np.testing.assert_allclose(got["confidence"], exp, rtol=0, atol=1e-15)


def test_apply_checks_a_pred_column_beside_probabilities(tmp_path, capsys):
    frame = probs_frame(500)
    frame.to_csv(tmp_path / "d.csv", index=False)
    run(["fit", tmp_path / "d.csv", "--method", "hist", "-o", tmp_path / "m.json"], capsys)
    frame["pred"] = "c0"  # not the argmax everywhere: it would be overwritten
    frame.drop(columns=["label"]).to_parquet(tmp_path / "p.parquet")
    code, out, err = run(
        ["apply", tmp_path / "m.json", tmp_path / "p.parquet", "-o", tmp_path / "o.csv"], capsys
    )
    assert code == 2 and "'pred' column disagrees" in err and not (tmp_path / "o.csv").exists()


def test_progress_line_on_a_terminal(monkeypatch, capsys):
    from topcal.cli import common

    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    p = common.RowProgress("reading", 200)
    p(100)
    p.bar.refresh()
    err = capsys.readouterr().err
    p.done()
    assert "reading" in err and "100/200" in err and "50%" in err and "rows/s" in err


@pytest.mark.heavy
@pytest.mark.slow
def test_streaming_memory_does_not_grow_with_rows(tmp_path, capsys):
    """Peak traced memory of a streamed fit and apply: 10x the rows, about the same peak."""
    import tracemalloc

    peaks = {}
    for n in (40_000, 400_000):
        frame = scores_frame(n, seed=n)
        frame.to_parquet(tmp_path / f"d{n}.parquet", row_group_size=5_000)
        tracemalloc.start()
        read_stats(tmp_path / f"d{n}.parquet", 5_000)
        fit_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        run(
            [
                "fit",
                tmp_path / f"d{n}.parquet",
                "--method",
                "hist",
                "--chunk-rows",
                5_000,
                "-o",
                tmp_path / f"m{n}.json",
            ],
            capsys,
        )
        tracemalloc.start()
        assert (
            run(
                [
                    "apply",
                    tmp_path / f"m{n}.json",
                    tmp_path / f"d{n}.parquet",
                    "--chunk-rows",
                    5_000,
                    "-o",
                    tmp_path / f"o{n}.parquet",
                ],
                capsys,
            )[0]
            == 0
        )
        apply_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peaks[n] = (fit_peak, apply_peak)
    # a whole-file read would need ~10x; allow 1.5x for the statistics (more occupied cells)
    assert peaks[400_000][0] < 1.5 * peaks[40_000][0], peaks
    assert peaks[400_000][1] < 1.5 * peaks[40_000][1], peaks


# ------------------------------------------------- label-shift counts when streaming
# 97 rows: chunks within and across the row groups (600, 700 rows); 10^6: one chunk; 1,000 (the
# same paths as 97) in the slow lane
@pytest.mark.parametrize("chunk", [97, pytest.param(1000, marks=pytest.mark.slow), 10**6])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_streamed_update_carries_the_confusion_counts_of_an_in_memory_update(tmp_path, chunk, fmt):
    frame = probs_frame(4000, seed=2)
    frame.iloc[:1500].to_csv(tmp_path / "a.csv", index=False)
    new = tmp_path / f"b.{fmt}"
    frame.iloc[1500:].to_csv(new, index=False) if fmt == "csv" else frame.iloc[1500:].to_parquet(
        new, row_group_size=600
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = topcal.calibrator("kde-mon2").fit(read_data(tmp_path / "a.csv"))
        got = topcal.calibrator("kde-mon2").fit(read_data(tmp_path / "a.csv"))
        update_file(ref, new)  # read whole: per-sample counts
        update_file(got, new, chunk_rows=chunk)
    assert got.evidence_.stats.equals(ref.evidence_.stats)
    assert_confusion_equal(got.evidence_.confusion, ref.evidence_.confusion)
    use = read_data(tmp_path / "a.csv")
    priors = np.array([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(
        got.adapt(priors=priors).predict(use), ref.adapt(priors=priors).predict(use)
    )


# 97 rows: chunks within and across the row groups (600, 700 rows); 10^6: one chunk; 1,000 (the
# same paths as 97) in the slow lane
@pytest.mark.parametrize("chunk", [97, pytest.param(1000, marks=pytest.mark.slow), 10**6])
@pytest.mark.parametrize("layout", ["probs", "names"])
def test_streamed_fit_counts_confusion_on_the_grid(tmp_path, chunk, layout):
    frame = probs_frame(5000, seed=4) if layout == "probs" else scores_frame(5000)
    frame.to_parquet(tmp_path / "d.parquet", row_group_size=700)
    data = read_data(tmp_path / "d.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = fit_file(topcal.calibrator("hist"), tmp_path / "d.parquet", chunk_rows=chunk)
        ref = topcal.calibrator("hist").fit(ScoreStats.from_data(data).to_data())
    np.testing.assert_array_equal(
        cal.predict(data), ref.predict(data)
    )  # the fit itself is unchanged
    # its own definition: the rule of the in-memory fit on the scores at their cell midpoints
    assert_confusion_equal(cal.evidence_.confusion, ConfusionStats.from_data(on_grid(data)))
    # the in-memory fit's confusion matrix exactly; its region edges within half a cell
    raw = ConfusionStats.from_data(data)
    np.testing.assert_array_equal(cal.evidence_.confusion.confusion(), raw.confusion())
    assert any(e.size for e in raw.edges)
    for e, r in zip(cal.evidence_.confusion.edges, raw.edges):
        assert e.size == r.size and np.all(np.abs(e - r) <= 0.5 / 4096 + 1e-15)


def test_cli_streamed_fit_and_update_can_be_adapted(tmp_path, capsys):
    frame = probs_frame(4000, seed=5)
    frame.iloc[:2500].to_csv(tmp_path / "a.csv", index=False)
    frame.iloc[2500:].to_parquet(tmp_path / "b.parquet", row_group_size=400)
    use = frame.iloc[:800].drop(columns="label")
    use.to_csv(tmp_path / "use.csv", index=False)
    pd.DataFrame({"class": ["c0", "c1", "c2", "c3"], "prior": [0.4, 0.3, 0.2, 0.1]}).to_csv(
        tmp_path / "p.csv", index=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            run(
                [
                    "fit",
                    tmp_path / "a.csv",
                    "--method",
                    "hist",
                    "--chunk-rows",
                    300,
                    "-o",
                    tmp_path / "a.json",
                ],
                capsys,
            )[0]
            == 0
        )
        code, out, err = run(
            [
                "update",
                tmp_path / "a.json",
                tmp_path / "b.parquet",
                "--chunk-rows",
                150,
                "-o",
                tmp_path / "ab.json",
            ],
            capsys,
        )
        assert code == 0, err
        code, out, err = run(
            [
                "adapt",
                tmp_path / "ab.json",
                "--priors",
                tmp_path / "p.csv",
                "-o",
                tmp_path / "ad.json",
            ],
            capsys,
        )
        assert code == 0, err
    model = persist.load(tmp_path / "ab.json")
    data = read_data(tmp_path / "a.csv")
    whole = read_data_frame(frame)
    np.testing.assert_array_equal(
        model.evidence_.confusion.confusion(), ConfusionStats.from_data(whole).confusion()
    )
    # the regions stay those of the streamed fit of a.csv
    first = ConfusionStats.from_data(on_grid(data))
    for e, r in zip(model.evidence_.confusion.edges, first.edges):
        np.testing.assert_array_equal(e, r)
    adapted = persist.load(tmp_path / "ad.json")
    assert not np.array_equal(
        adapted.predict(whole), model.predict(whole)
    )  # the priors moved the confidences


def test_streamed_fit_of_binned_counts_has_no_confusion(tmp_path):
    phanns = _phanns_csv(tmp_path / "b.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = fit_file(
            topcal.calibrator("hist"), tmp_path / "b.csv", chunk_rows=50, score_range=(0, 10)
        )
    assert cal.evidence_.confusion is None and cal.evidence_.stats.n_samples == phanns.n_samples


def read_data_frame(frame):
    from topcal.io import read_frame

    return read_frame(frame)
