"""The HTML report: content, warnings, the CLI, the demo, and a headless-Chromium check."""

from __future__ import annotations

import html as htmlmod
import json
import os
import re
import shutil
import struct
import subprocess
import warnings

import numpy as np
import pytest

from topcal import TopLabelData
from topcal.cli import main

from _sim import simulate_probs
from topcal.evaluate import evaluate, fit_quietly, score_models
from topcal.report import build_report, count_wiggles, diagnose

pytestmark = pytest.mark.e2e

CLASSES = np.array(["ant", "bee", "cow", "dog", "eel"])


def simulate(n, seed, *, sharpen=(0.6, 0.8, 1.0, 1.5, 2.0)):
    """Labels drawn from softmax(z); reported probabilities softmax(z * sharpen) (per-class
    miscalibration)."""
    return simulate_probs(n, seed, len(CLASSES), sharpen=sharpen)


def _npz(path, probs, labels):
    np.savez(path, probs=probs, labels=CLASSES[labels], classes=CLASSES)
    return str(path)


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    """`topcal report --methods all` (every method, the default before issue 34) on full-vector
    data with a second test set and extra samples."""
    d = tmp_path_factory.mktemp("full")
    a = _npz(d / "a.npz", *simulate(1_200, 1))
    b = _npz(d / "b.npz", *simulate(1_200, 2))
    p, lab = simulate(2_000, 3)
    keep = np.flatnonzero((lab == 2) & (p.argmax(1) == 2))[:150]  # extra true positives of "cow"
    extra = _npz(d / "extra.npz", p[keep], lab[keep])
    out = d / "report"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(
            ["report", a, "--eval", b, "--add", extra, "--methods", "all", "-o", str(out)]
            + ["--dpi", "60"]
        )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def demo_report(demo_run, tmp_path_factory):
    """The session's ``topcal demo -o DIR`` run (conftest's ``demo_run``), its folder copied here
    (the browser test writes beside the page)."""
    shared, stdout, stderr = demo_run
    out = tmp_path_factory.mktemp("demo") / "demo-report"
    shutil.copytree(shared, out)
    return out, stdout, stderr


def _png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# -------------------------------------------------------------- content
@pytest.mark.heavy
def test_full_report_has_every_figure_table_and_parameter(full_report):
    page = (full_report / "index.html").read_text()
    for key in (
        "joint",
        "curves",
        "kde-rules",
        "densities",
        "clouds-sts",
        "clouds-csts",
        "clouds-tswa",
        "clouds-cstswa",
        "nll",
        "overlay",
        "paired",
        "added",
    ):
        assert f"id='fig-{key}'" in page, key
    figs = sorted((full_report / "figures").glob("*.png"))
    assert len(figs) == page.count("<img ")
    for f in figs:
        w, h = _png_size(f.read_bytes())
        assert w > 150 and h > 150
    # self-contained: images are data URIs, nothing is fetched from anywhere
    assert page.count("src='data:image/png;base64,") == len(figs)
    assert not re.search(r"(src|href)=['\"]?(https?:|//)", page)
    assert "<script" not in page
    # metric tables for both sets, per class and overall
    for word in ("NLL per class", "ECE2 per class", "Evaluated on the second test set", "overall"):
        assert word in page
    for c in CLASSES:
        assert f"<td>{c}</td>" in page
    # fitted parameters: temperatures, awards, bandwidths, cut-offs
    for word in ("temperature", "award", "bandwidth", "theta"):
        assert word in page, word
    assert "extra samples (--add)" in page
    from topcal import read_data

    tp, fp = read_data(str(full_report.parent / "a.npz")).class_counts()
    assert (
        page.count(f"<tr><td>ant</td><td>{tp[0]:.0f}</td><td>{fp[0]:.0f}</td>") >= 10
    )  # one per method


def test_full_report_metrics_match_the_library(full_report):
    from topcal import read_data

    page = (full_report / "index.html").read_text()
    data = read_data(str(full_report.parent / "a.npz"))
    # the report ranks out of sample by default: 5-fold cross-fitting, seed 0
    from topcal.evaluate import compare_methods

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nll = compare_methods(data, ["kde-mon2"], folds=5, seed=0)["methods"]["kde-mon2"]["nll"][
            "overall"
        ]
    assert "out of sample" in page
    row = re.search(r"<tr><td>kde-mon2</td>(.*?)</tr>", page).group(1)
    first = re.findall(r"<td[^>]*>([^<]*)</td>", row)[0]
    assert float(first) == pytest.approx(nll, abs=5e-5)


def test_demo_report_and_terminal_table(demo_report, demo_run):
    out, stdout, stderr = demo_report
    page = (out / "index.html").read_text()
    assert "PhANNs" in page and "Minor capsid" in page
    for key in ("joint", "curves", "kde-rules", "binary-ts", "densities", "nll"):
        assert f"id='fig-{key}'" in page, key
    assert "clouds-" not in page  # no full vectors in the PhANNs counts
    # terminal: per-class and overall tables, warnings, the report's path; progress on stderr
    assert "per-class NLL" in stdout and "ECE1" in stdout and "kde-mon2" in stdout
    assert str((demo_run[0] / "index.html").resolve()) in stdout  # the folder it wrote (copied)
    assert "fitting kde-mon2" in stderr and "figure: calibration curves" in stderr
    # the paper's Fig. 7: Minor tail and Portal are already close to calibrated
    assert "Minor tail: the uncalibrated score is already close" in stdout
    assert "Portal: the uncalibrated score is already close" in stdout
    # kde-opt wiggles on PhANNs (the paper's Fig. 13), kde-mon2 does not
    assert "kde-opt on HTJ" in stdout and "kde-mon2 on" not in stdout


def test_report_cli_errors(full_report, tmp_path, capsys):
    a = str(full_report.parent / "a.npz")
    other = tmp_path / "o.npz"
    p, lab = simulate(200, 5)
    np.savez(
        other,
        probs=p[:, :4] / p[:, :4].sum(1, keepdims=True),
        labels=CLASSES[:4][np.minimum(lab, 3)],
        classes=CLASSES[:4],
    )
    assert main(["report", a, "--eval", str(other), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: the second test set (--eval) must have the same classes")
        and err.count("\n") == 1
    )
    assert main(["report", a, "--methods", "hist,nope", "-o", str(tmp_path / "r")]) == 2
    assert "unknown method 'nope'" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", a, "--methods", "hist", "-o", str(blocker)]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_report_methods_option_limits_the_fits(tmp_path):
    p, lab = simulate(600, 8)
    data = TopLabelData.from_probs(p, lab, classes=CLASSES)
    res = build_report(data, tmp_path / "r", methods=["hist", "tswa"], dpi=40)
    assert list(res.comparison["methods"]) == ["uncalibrated", "hist", "tswa"]
    titles = [t for t, _ in res.figures]
    assert any("tswa" in t for t in titles) and not any("Kernel" in t for t in titles)
    # a second run into the same folder with fewer figures leaves no stale PNG behind
    res2 = build_report(data, tmp_path / "r", methods=["hist"], dpi=40)
    assert sorted((tmp_path / "r" / "figures").glob("*.png")) == sorted(p for _, p in res2.figures)
    assert len(res2.figures) < len(res.figures)


def _caption(page, key):
    return htmlmod.unescape(
        re.search(rf"<figure id='fig-{key}'>.*?<figcaption>(.*?)</figcaption>", page, re.S).group(1)
    )


def test_report_curve_figure_draws_an_interval_band_around_each_curve(full_report):
    from topcal.report.figures import report_figures

    page = (full_report / "index.html").read_text()
    assert "Shaded band around each curve: the 90% interval on the fitted curve" in _caption(
        page, "curves"
    )
    assert "No band for" not in _caption(page, "curves")
    assert "Shaded band" not in _caption(
        page, "kde-rules"
    )  # four bandwidths' curves: no bands there
    # the figure the report draws for its per-class curves holds one band per method and class
    p, lab = simulate(800, 9)
    data = TopLabelData.from_probs(p, lab, classes=CLASSES)
    models = {
        n: fit_quietly(n, data, collect=Warning) for n in ("uncalibrated", "hist", "kde-mon2")
    }
    shown = report_figures(data, models, {}, None, None, None, True, lambda msg: None)
    figs = {key: (cap, fig) for _, (key, _, cap, fig) in zip(range(2), shown)}  # joint, then curves
    cap, fig = figs["curves"]
    bands = [
        a.get_gid()
        for ax in fig.axes
        for a in ax.collections
        if (a.get_gid() or "").startswith("band:")
    ]
    assert sorted(set(bands)) == ["band:hist", "band:kde-mon2"] and len(bands) == 2 * len(CLASSES)
    assert "90% interval" in cap


# ------------------------------------------------------------- warnings
def _fit_all(data, specs):
    models = {
        name: fit_quietly(m, data, params=kw, collect=Warning) for name, (m, kw) in specs.items()
    }
    return models, {"methods": score_models(models, data)}


def test_diagnose_flags_small_one_sided_narrow_and_wiggly_classes():
    rng = np.random.default_rng(0)
    s_a = rng.uniform(0.3, 1.0, 600)
    ok_a = rng.random(600) < s_a
    s_d = rng.uniform(0.9, 1.0, 300)
    ok_d = rng.random(300) < 0.9
    pred = np.array(["a"] * 600 + ["b"] * 12 + ["c"] * 40 + ["d"] * 300)
    score = np.concatenate([s_a, rng.uniform(0.5, 1, 12), rng.uniform(0.3, 1, 40), s_d])
    labels = pred.copy()
    labels[:600][~ok_a] = "d"
    labels[612:652] = "a"  # class c: never right
    labels[652:][~ok_d] = "a"
    data = TopLabelData.from_scores(pred, score, labels, classes=list("abcd"))
    models, comp = _fit_all(
        data,
        {
            "uncalibrated": ("uncalibrated", {}),
            "hist": ("hist", {}),
            "kde": ("kde", {"bandwidth": 0.004}),
        },
    )
    found = {(f.kind, f.class_name) for f in diagnose(data, models, comp)}
    assert ("few-positives", "b") in found and ("no-fp", "b") in found
    assert ("no-tp", "c") in found and ("few-positives", "c") not in found
    assert ("extrapolated", "d") in found and ("extrapolated", "a") not in found
    assert ("wiggles", "a") in found
    wig = [f for f in diagnose(data, models, comp) if f.kind == "wiggles"]
    assert all(f.method == "kde" for f in wig)  # step functions (hist) are never "wiggly"


def test_diagnose_already_calibrated_and_overfit():
    p, lab = simulate(20_000, 4, sharpen=(1, 1, 1, 1, 1))  # perfectly calibrated
    data = TopLabelData.from_probs(p, lab, classes=CLASSES)
    models, comp = _fit_all(data, {"uncalibrated": ("uncalibrated", {}), "hist": ("hist", {})})
    close = [f.class_name for f in diagnose(data, models, comp) if f.kind == "already-calibrated"]
    assert sorted(close) == sorted(CLASSES)
    # a tiny bandwidth fitted on 400 samples: in-sample great, on a second set much worse
    small = TopLabelData.from_probs(*simulate(400, 6), classes=CLASSES)
    second = TopLabelData.from_probs(*simulate(4_000, 7), classes=CLASSES)
    models, comp = _fit_all(
        small, {"uncalibrated": ("uncalibrated", {}), "kde": ("kde", {"bandwidth": 0.002})}
    )
    hold = {"methods": {n: evaluate(second, m.predict(second)) for n, m in models.items()}}
    over = [f for f in diagnose(small, models, comp, hold) if f.kind == "overfit"]
    assert [f.method for f in over] == ["kde"]
    miscal = TopLabelData.from_probs(*simulate(20_000, 4), classes=CLASSES)
    models, comp = _fit_all(miscal, {"uncalibrated": ("uncalibrated", {}), "hist": ("hist", {})})
    close = [f.class_name for f in diagnose(miscal, models, comp) if f.kind == "already-calibrated"]
    assert "ant" not in close and "eel" not in close  # sharpen 0.6 and 2.0: far from calibrated


def test_diagnose_says_calibration_hurts_where_every_method_loses_to_the_raw_score():
    """Issue 34: a class where calibration hurts out of sample was told "calibration gains
    little"."""
    small = TopLabelData.from_probs(*simulate(400, 6, sharpen=(1, 1, 1, 1, 1)), classes=CLASSES)
    second = TopLabelData.from_probs(*simulate(4_000, 7, sharpen=(1, 1, 1, 1, 1)), classes=CLASSES)
    # a tiny bandwidth on 400 calibrated samples, scored on other samples: worse than the raw score
    models, _ = _fit_all(
        small, {"uncalibrated": ("uncalibrated", {}), "kde": ("kde", {"bandwidth": 0.002})}
    )
    found = diagnose(small, models, {"methods": score_models(models, second)})
    hurt = [f for f in found if f.kind == "calibration-hurts"]
    assert hurt and all("worse than the uncalibrated score" in f.text for f in hurt)
    assert not {f.class_name for f in hurt} & {
        f.class_name for f in found if f.kind == "already-calibrated"
    }


def test_count_wiggles():
    x = np.linspace(0, 1, 500)
    assert count_wiggles(x) == 0
    assert count_wiggles(x + 0.004 * np.sin(60 * x)) == 0  # ripples below the 0.01 amplitude
    assert (
        count_wiggles(0.5 + 0.2 * np.sin(2 * np.pi * 2 * x)) == 4
    )  # two periods: extrema at 1/8, 3/8, 5/8, 7/8
    assert count_wiggles(np.array([0.0, 0.5, 0.48, 1.0])) == 2


# ------------------------------------------------------- headless Chromium
_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--log-level=0",
    "--virtual-time-budget=15000",
]

#: Injected in a copy of the page (the report itself has no script): records
#: script errors, failed resource loads (capture phase) and console.error
#: calls, then each image's decoded size, into a <pre> that --dump-dom prints.
_CHECK = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  var t = e.target;
  window.__errors.push(t && t !== window ? 'failed to load ' + (t.src || t.href)
                                         : String(e.message));
}, true);
['error', 'warn'].forEach(function (k) { var o = console[k]; console[k] = function () {
  window.__errors.push(k + ': ' + Array.prototype.join.call(arguments, ' '));
  o.apply(console, arguments); }; });
window.addEventListener('load', function () {
  var imgs = Array.prototype.map.call(document.images, function (i) {
    return {w: i.naturalWidth, h: i.naturalHeight, complete: i.complete,
            shown: i.getBoundingClientRect().width}; });
  var p = document.createElement('pre'); p.id = 'topcal-check';
  p.textContent = JSON.stringify({errors: window.__errors, images: imgs, title: document.title});
  document.body.appendChild(p);
});
</script>"""


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        exe = shutil.which(name)
        if exe:
            return exe
    msg = (
        "headless Chromium is not installed (Debian package 'chromium'; 'make test' installs it "
        "when it can)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(msg + "; under CI=true this test must run")
    pytest.skip(msg)


def _run_chromium(exe, args, tmp_path):
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    r = subprocess.run(
        [exe, *_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return r


@pytest.mark.browser
@pytest.mark.parametrize("which", ["full", "demo"])
def test_report_renders_in_headless_chromium(which, full_report, demo_report, tmp_path):
    exe = _chromium()
    out = full_report if which == "full" else demo_report[0]
    page = (out / "index.html").read_text()
    check = out / "chromium-check.html"
    check.write_text(page.replace("<head>", "<head>" + _CHECK, 1))
    try:
        r = _run_chromium(exe, ["--dump-dom", check.as_uri()], tmp_path)
    finally:
        check.unlink()
    m = re.search(r'<pre id="topcal-check">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the page did not finish loading; chromium exit {r.returncode}: {r.stderr[-2000:]}"
    result = json.loads(htmlmod.unescape(m.group(1)))
    assert result["errors"] == []
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], console
    n_img = page.count("<img ")
    assert n_img >= 5 and len(result["images"]) == n_img
    sizes = [_png_size(f.read_bytes()) for f in sorted((out / "figures").glob("*.png"))]
    for img, (w, h) in zip(result["images"], sizes):
        assert img["complete"] and img["w"] == w and img["h"] == h and img["shown"] > 0
    assert result["title"]
    shot = tmp_path / f"{which}-report.png"
    r = _run_chromium(
        exe,
        [f"--screenshot={shot}", "--window-size=1280,2400", (out / "index.html").as_uri()],
        tmp_path,
    )
    assert shot.exists(), r.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 2400) and len(data) > 20_000


@pytest.mark.browser
def test_chromium_check_catches_broken_images(tmp_path):
    """Negative control: the same check reports a missing file and an undecodable image."""
    exe = _chromium()
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>t</title></head><body>"
        "<img src='missing.png'><img src='data:image/png;base64,iVBORw0KGgoAAAA='></body></html>"
    )
    check = tmp_path / "check.html"
    check.write_text(page.read_text().replace("<head>", "<head>" + _CHECK, 1))
    r = _run_chromium(exe, ["--dump-dom", check.as_uri()], tmp_path)
    result = json.loads(
        htmlmod.unescape(re.search(r'<pre id="topcal-check">(.*?)</pre>', r.stdout, re.S).group(1))
    )
    assert any("missing.png" in e for e in result["errors"])
    assert [img["w"] for img in result["images"]] == [0, 0]


def test_report_survives_degenerate_classes(tmp_path):
    """A class never predicted and a class that is always right: warnings, no crash, densities skip
    them."""
    rng = np.random.default_rng(0)
    n = 1_500
    z = rng.normal(0, 1, (n, 4))
    z[:, 2] -= 6
    z[np.arange(n), rng.integers(2, size=n)] += 2
    z[:, 3] += np.where(rng.random(n) < 0.1, 6, 0)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    pred = p.argmax(1)
    lab = np.where(rng.random(n) < p.max(1), pred, (pred + 1) % 4)
    lab[pred == 1] = 1
    data = TopLabelData.from_probs(p, lab, classes=list("abcd"))
    assert data.class_counts()[0][2] == 0 and data.class_counts()[1][1] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = build_report(data, tmp_path / "r", methods=["hist", "kde-mon2", "tswa"], dpi=40)
    kinds = {(f.kind, f.class_name) for f in res.findings}
    assert ("never-predicted", "c") in kinds and ("no-fp", "b") in kinds
    titles = [t for t, _ in res.figures]
    assert any("Kernel densities" in t for t in titles) and any("tswa" in t for t in titles)


def test_report_cli_binned_extra_file_naming_one_class(tmp_path, capsys):
    """A file of extra samples usually names only the classes it adds: it is aligned to the data's
    classes."""
    from topcal.datasets import load_phanns

    d = load_phanns()
    data_csv = tmp_path / "phanns.csv"
    rows = ["predicted_class,bin_lo,bin_hi,tp,fp"] + [
        f"{d.classes[p]},{float(lo)!r},{float(hi)!r},{tp:.0f},{fp:.0f}"
        for p, (lo, hi), tp, fp in zip(d.pred, d.bin_edges, d.tp, d.fp)
    ]
    data_csv.write_text("\n".join(rows) + "\n")
    extra = tmp_path / "extra.csv"
    extra.write_text("predicted_class,bin_lo,bin_hi,tp,fp\nHTJ,7.0,7.1,40,0\nHTJ,9.0,9.1,120,0\n")
    out = tmp_path / "r"
    args = [
        "report",
        str(data_csv),
        "--score-range",
        "0",
        "10",
        "--methods",
        "hist",
        "--dpi",
        "40",
        "-o",
        str(out),
    ]
    assert main(args + ["--add", str(extra)]) == 0
    page = (out / "index.html").read_text()
    assert (
        "id='fig-added'" in page and "HTJ: +160 TP, +0 FP" not in page
    )  # the title is in the PNG, not the HTML
    assert "extra samples (--add)</b>: 160 samples" in page
    extra.write_text("predicted_class,bin_lo,bin_hi,tp,fp\nNope,7.0,7.1,40,0\n")
    capsys.readouterr()
    assert main(args + ["--add", str(extra)]) == 2
    assert "classes ['Nope'] are not in the data" in capsys.readouterr().err
