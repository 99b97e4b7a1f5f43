"""Published file layouts, --column, and the Python entry points compare / report / _repr_html_."""

import numpy as np
import pandas as pd
import pytest

import topcal
from _sim import simulate_probs
from topcal.cli import main
from topcal.errors import DataError
from topcal.evaluate import compare_methods
from topcal.io import read_data

pytestmark = pytest.mark.filterwarnings("ignore::topcal.errors.DegenerateClassWarning")


@pytest.fixture(scope="module")
def sim():
    return simulate_probs(2000, seed=11, k=5)


def test_netcal_npz_is_read_without_options(sim, tmp_path, capsys):
    p, y = sim
    path = tmp_path / "records.npz"
    np.savez(path, predictions=p.astype(np.float32), ground_truth=y.astype(np.int64))
    data = read_data(path)
    assert data.has_full and data.full_kind == "probs" and data.classes == ("0", "1", "2", "3", "4")
    np.testing.assert_array_equal(data.labels, y)
    assert main(["fit", str(path), "--method", "sts", "-o", str(tmp_path / "m.json")]) == 0
    assert "fitted sts on 2000 samples, 5 classes" in capsys.readouterr().out


@pytest.mark.slow
def test_true_label_csv_is_read_without_options(sim, tmp_path, capsys):
    p, y = sim
    path = tmp_path / "imagenet-like.csv"
    pd.DataFrame({"true_label": y, "pred_label": p.argmax(1), "confidence": p.max(1)}).to_csv(
        path, index=False
    )
    data = read_data(path)
    assert not data.has_full and data.n_classes == 5
    np.testing.assert_array_equal(data.pred, p.argmax(1))
    np.testing.assert_allclose(data.score, p.max(1))
    np.testing.assert_array_equal(data.tp, (p.argmax(1) == y).astype(float))
    assert main(["compare", str(path), "--methods", "hist,kde-mon2", "--csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "method,metric,class,value" and len(out) == 1 + 2 * 4 * 6
    # apply reads this layout too (issue 24): the calibrated value goes beside the raw 'confidence'
    # (nothing lost)
    pd.read_csv(path).drop(columns="true_label").to_csv(tmp_path / "new.csv", index=False)
    assert main(["fit", str(path), "-o", str(tmp_path / "h.json")]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "apply",
                str(tmp_path / "h.json"),
                str(tmp_path / "new.csv"),
                "-o",
                str(tmp_path / "o.csv"),
            ]
        )
        == 0
    )
    # issue 34: apply says where the calibrated value went
    assert (
        "the calibrated confidence is in column 'calibrated_confidence'" in capsys.readouterr().out
    )
    out = pd.read_csv(tmp_path / "o.csv")
    assert list(out.columns) == ["pred_label", "confidence", "pred", "calibrated_confidence"]
    np.testing.assert_allclose(out["confidence"], p.max(1))


@pytest.mark.slow
def test_column_mapping_for_any_other_layout(sim, tmp_path, capsys):
    p, y = sim
    path = tmp_path / "own.csv"
    pd.DataFrame({"truth": y, "guess": p.argmax(1), "conf": p.max(1)}).to_csv(path, index=False)
    assert main(["fit", str(path), "-o", str(tmp_path / "m.json")]) == 2
    assert "cannot find score columns" in capsys.readouterr().err
    args = ["--column", "label=truth", "--column", "pred=guess", "--column", "score=conf"]
    assert main(["fit", str(path), "-o", str(tmp_path / "m.json"), *args]) == 0
    ref = read_data(path, columns={"label": "truth", "pred": "guess", "score": "conf"})
    np.testing.assert_array_equal(ref.labels, y)
    assert main(["fit", str(path), "-o", str(tmp_path / "m.json"), "--column", "truth"]) == 2
    assert "must look like ROLE=NAME" in capsys.readouterr().err
    assert main(["fit", str(path), "-o", str(tmp_path / "m.json"), "--column", "colour=truth"]) == 2
    assert "unknown column role 'colour'" in capsys.readouterr().err
    assert main(["fit", str(path), "-o", str(tmp_path / "m.json"), "--column", "label=nope"]) == 2
    assert (
        "column 'nope' (given for the role 'label') is not in the data" in capsys.readouterr().err
    )


def test_compare_is_a_tidy_frame_of_compare_methods(sim):
    p, y = sim
    data = topcal.TopLabelData.from_probs(p, y)
    df = topcal.compare(p, y, methods=["hist", "sts"], folds=3)
    assert list(df.columns) == ["method", "class", "metric", "value", "protocol"]
    assert set(df["protocol"]) == {"kfold"} and df.attrs["folds"] == 3
    ref = compare_methods(data, ["hist", "sts"], folds=3)
    for m in ("hist", "sts"):
        for metric in ("nll", "brier", "ece1", "ece2"):
            got = df[(df.method == m) & (df.metric == metric)].set_index("class")["value"]
            assert got["overall"] == pytest.approx(ref["methods"][m][metric]["overall"])
            for c, v in ref["methods"][m][metric]["per_class"].items():
                assert got[c] == pytest.approx(v, nan_ok=True)
    held = topcal.compare(
        data.subset(np.arange(1000)), methods=["hist"], eval_data=(p[1000:], y[1000:])
    )
    assert set(held["protocol"]) == {"holdout"}
    phanns = topcal.compare(topcal.datasets.load_phanns(), methods=["hist", "sts"], in_sample=True)
    assert phanns.attrs["skipped"] == ["sts"] and set(phanns["method"]) == {"hist"}
    assert set(phanns["protocol"]) == {"same"}
    default = topcal.compare(p, y, methods=["hist"])  # as `topcal compare`: 5-fold out of sample
    assert set(default["protocol"]) == {"kfold"} and default.attrs["folds"] == 5
    with pytest.raises(topcal.TopcalError, match="exclude each other"):
        topcal.compare(p, y, methods=["hist"], eval_data=(p, y), in_sample=True)


@pytest.mark.slow
def test_report_writes_html_and_returns_its_path(sim, tmp_path):
    p, y = sim
    path = topcal.make_report(
        p, y, output=tmp_path / "rep", methods=["hist", "kde-mon2"], dpi=40, folds=2
    )
    assert path == tmp_path / "rep" / "index.html" and path.is_file()
    assert "kde-mon2" in path.read_text(encoding="utf-8")
    with pytest.raises(DataError, match="does not exist"):
        topcal.make_report(tmp_path / "missing.csv", output=tmp_path / "x")


@pytest.mark.slow
def test_topcal_report_is_the_package_and_its_old_call_still_works_with_a_future_warning(
    sim, tmp_path
):
    import importlib

    import topcal.report as pkg

    assert (
        pkg is topcal.report is importlib.import_module("topcal.report")
        and pkg.build_report is not None
    )
    from topcal import report

    assert report is pkg
    p, y = sim
    with pytest.warns(FutureWarning, match=r"topcal\.make_report"):
        path = topcal.report(
            p[:400], y[:400], output=tmp_path / "old", methods=["hist"], dpi=30, folds=None
        )
    assert path == tmp_path / "old" / "index.html" and path.is_file()


@pytest.mark.slow
def test_fitted_calibrators_show_their_curves_in_jupyter(sim):
    p, y = sim
    cal = topcal.calibrator("kde-mon2")
    assert cal._repr_html_() is None  # unfitted: the plain repr
    html = cal.fit(p, y)._repr_html_()
    assert "<img src='data:image/png;base64," in html and "kde-mon2" in html and "5 classes" in html
    table = topcal.calibrator("csts").fit(p, y)._repr_html_()
    assert "no per-class curve" in table and table.count("<tr>") == 6
    auto = topcal.calibrator("auto", candidates=["hist", "sts"]).fit(p, y)
    shown = auto._repr_html_()
    assert f"chose <code>{auto.method_}</code>" in shown and (
        "<img" in shown or "no per-class curve" in shown
    )
