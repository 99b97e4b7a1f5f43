"""The report that scales (issue 34, item 3): by default ``auto``, its own cross-validation reused
as the candidates' out-of-sample table (nothing cross-fitted again), the baseline and two peers;
the first screen says what ``auto`` chose and what it gains out of sample; ``--classes`` chooses
the classes drawn; warnings about the model in use first, the rest folded."""

from __future__ import annotations

import html as htmlmod
import re
import warnings

import numpy as np
import pytest

from topcal import TopLabelData
import topcal.calibrators.select.auto as auto_module
import topcal.evaluate as evaluate_module
from topcal.cli import main
from topcal.report import build_report
from topcal.report.checks import Finding
from topcal.report.classes import MAX_FIGURE_CLASSES, choose_classes, worst_classes
from topcal.report.page import about, warnings_html

from _sim import many_small_classes, simulate_probs


def _data(n=1_500, seed=3, k=5):
    p, lab = simulate_probs(n, seed, k, sharpen=np.linspace(0.6, 2.0, k))
    return TopLabelData.from_probs(p, lab, classes=[f"k{i}" for i in range(k)])


def _quiet(f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f()


# ------------------------------------------------------------------ fast: the pieces
def test_classes_keywords_names_and_errors():
    data = many_small_classes(0, 60, 3_000)
    tp, fp = data.class_counts()
    n = tp + fp
    only, text = choose_classes(data)  # the default above 24 classes: the largest 24
    assert only.size == MAX_FIGURE_CLASSES and set(n[only]) >= {n.max()}
    assert "largest classes (most positives) of 60" in text
    only, text = choose_classes(data, ["most:3"])
    assert only.tolist() == np.argsort(-n, kind="stable")[:3].tolist()
    only, _ = choose_classes(data, ["c7,c2", "most:2"])  # commas, then a keyword; each once
    assert only.tolist()[:2] == [7, 2] and len(only) == 4
    res = {
        "protocol": "kfold",
        "methods": {
            "uncalibrated": {
                "nll": {"overall": 0.5, "per_class": {c: 0.5 for c in data.classes}},
            },
            "auto": {
                "nll": {
                    "overall": 0.5,
                    "per_class": {c: 0.5 + (0.1 if c == "c9" else 0.0) for c in data.classes},
                },
            },
        },
    }
    assert worst_classes(data, res, "auto")[0] == 9
    only, text = choose_classes(data, ["worst:1"], res, "auto")
    assert only.tolist() == [9] and "worst:1" in text and "Shown: 1 of 60" in text
    from topcal.errors import TopcalError

    for bad, msg in (
        (["nope"], "no class of the data"),
        (["worst:0"], "at least 1"),
        (["worst:2"], "no such model"),
    ):
        with pytest.raises(TopcalError, match=msg):
            choose_classes(data, bad, res, None)


def test_warnings_about_the_model_in_use_come_first_and_the_rest_fold():
    found = [
        Finding("wiggles", "kde-opt on a: wiggles", "a", "kde-opt"),
        Finding("few-positives", "b: few positives", "b"),
        Finding("certainty", "auto: reaches 1", None, "auto"),
        Finding("already-calibrated", "c: close", "c", "uncalibrated"),
    ]
    mine, other = about(found, "auto")
    assert [f.text for f in mine] == ["b: few positives", "auto: reaches 1", "c: close"]
    assert [f.method for f in other] == ["kde-opt"]
    page = warnings_html(found, "auto")
    assert page.index("auto: reaches 1") < page.index("<details>") < page.index("kde-opt on a")
    assert "1 more about the other methods (kde-opt)" in page
    assert "<details>" not in warnings_html(found)  # no model in use: all shown, as before


# ---------------------------------------------------------------- end to end
@pytest.mark.e2e
def test_default_report_reuses_autos_cross_validation_and_says_its_choice_first(
    tmp_path, monkeypatch
):
    data = _data()
    runs = []  # every cross-fit the report runs: auto's own, and any other (there must be none)
    for module in (auto_module, evaluate_module):
        real = module.cross_fit

        def spy(*args, _real=real, **kwargs):
            out = _real(*args, **kwargs)
            runs.append(out)
            return out

        monkeypatch.setattr(module, "cross_fit", spy)
    res = _quiet(lambda: build_report(data, tmp_path / "r", dpi=40))
    assert len(runs) == 1  # auto's own cross-validation; nothing cross-fitted again
    monkeypatch.undo()
    auto = _quiet(lambda: __import__("topcal").calibrator("auto").fit(data))
    methods = list(res.comparison.methods)
    assert methods[:2] == ["uncalibrated", "auto"] and set(auto.cv_) <= set(methods)
    for name, row in auto.cv_.items():  # the table is auto's: the same folds, the same NLL
        assert res.comparison.methods[name].nll.overall == pytest.approx(row["nll"], rel=1e-9)
    assert res.focus == "auto" and res.comparison.protocol == "kfold"
    page = (tmp_path / "r" / "index.html").read_text()
    head = page[: page.index("<h2>Metrics</h2>")]  # the first screen
    assert f"<b><code>auto</code> chose <code>{auto.method_}</code></b>" in head
    gain = re.search(r"NLL ([\d.]+) against ([\d.]+) uncalibrated", htmlmod.unescape(head))
    assert float(gain.group(1)) == pytest.approx(res.comparison.methods["auto"].nll.overall, 1e-3)
    # it leads with the improvement and its paired interval, then the calibration loss
    num = r"([+-]?[\d.]+)"
    lead = re.search(
        rf"NLL improvement over the uncalibrated score: {num} \[{num}, {num}\]",
        htmlmod.unescape(head),
    )
    nll = res.comparison.methods
    want = nll["uncalibrated"].nll.overall - nll["auto"].nll.overall
    assert float(lead.group(1)) == pytest.approx(want, abs=1e-4)
    assert float(lead.group(2)) < float(lead.group(1)) < float(lead.group(3))
    loss = res.comparison.ranking
    assert head.index("NLL improvement") < head.index("Calibration loss")
    assert f"{loss['uncalibrated']['calibration_loss']['value']:.4f}" in head
    assert "auto's own 5-fold cross-validation" in page and "slightly optimistic" in page
    peers = [n for n in res.comparison.methods if n not in ("uncalibrated", "auto")]
    fitted = page.split("methods: ")[1].split("</p>")[0]
    assert fitted.split(", ")[:2] == ["uncalibrated", "auto"] and len(fitted.split(", ")) <= 4
    assert all(p in peers for p in fitted.split(", ")[2:])


@pytest.mark.heavy
@pytest.mark.e2e
def test_cli_classes_choose_the_panels_and_all_gives_every_method(tmp_path, capsys):
    data = many_small_classes(4, 40, 2_400)
    rows = "\n".join(
        f"{data.classes[p]},{s!r},{data.classes[y]}"
        for p, s, y in zip(data.pred.tolist(), data.score.tolist(), data.labels.tolist())
    )
    (tmp_path / "d.csv").write_text("pred,score,label\n" + rows + "\n")
    args = ["report", str(tmp_path / "d.csv"), "--dpi", "30", "--folds", "2"]
    code = _quiet(
        lambda: main(args + ["--classes", "worst:3", "--classes", "c5", "-o", str(tmp_path / "a")])
    )
    assert code == 0, capsys.readouterr().err
    page = htmlmod.unescape((tmp_path / "a" / "index.html").read_text())
    assert "Shown: 4 of 40 classes, chosen with --classes: worst:3 (" in page
    assert "'c5'" in page and "2-fold cross-validation" in page
    code = main(args + ["--classes", "zebra", "-o", str(tmp_path / "b")])
    assert code == 2 and "--classes 'zebra' is no class" in capsys.readouterr().err
    code = main(args + ["--param", "hist:shrinkage=0", "-o", str(tmp_path / "b")])
    assert code == 2 and "--methods all" in capsys.readouterr().err
    # one class drawn (--classes): the table's rows are what this run checks, and drawing every
    # method's panels of the default classes was ~2/3 of the test's time
    code = _quiet(
        lambda: main(
            args[:4]
            + ["--methods", "all", "--in-sample", "--classes", "c5", "-o", str(tmp_path / "c")]
        )
    )
    assert code == 0
    page = (tmp_path / "c" / "index.html").read_text()
    for m in ("kde-opt", "cum-opt", "btswa", "auto"):
        assert f"<tr><td>{m}</td>" in page, m


def test_peers_add_a_curve_method_where_the_choice_and_the_peers_have_none():
    from topcal.report.focus import peers_of

    table = [
        {"method": m, "nll": v}
        for m, v in (("sms", 0.16), ("vs", 0.17), ("tswa", 0.18), ("hier-beta", 0.19))
    ] + [{"method": "uncalibrated", "nll": 0.3}, {"method": "bts", "nll": None}]
    choice = {"chosen": "sms", "table": table}
    assert peers_of(choice, 2, curve=False) == ["vs", "tswa", "hier-beta"]  # CIFAR-10: sms chosen
    assert peers_of(choice, 2, curve=True) == ["vs", "tswa"]
    other = {"chosen": "vs", "table": table}
    assert peers_of(other, 2, curve=False) == ["sms", "tswa", "hier-beta"]


@pytest.mark.heavy
@pytest.mark.e2e
def test_the_first_screen_also_says_the_gain_on_a_second_test_set(tmp_path):
    res = _quiet(lambda: build_report(_data(), tmp_path / "r", eval_data=_data(seed=4), dpi=30))
    page = htmlmod.unescape((tmp_path / "r" / "index.html").read_text())
    head = page[: page.index("<h2>Metrics</h2>")]
    hold = res.holdout.methods
    assert "Out of sample (5-fold)" in head and "On the second test set" in head
    assert (
        f"NLL {hold['auto'].nll.overall:.4f} against {hold['uncalibrated'].nll.overall:.4f}"
        in head.split("On the second test set")[1]
    )
