"""Regression tests of issue 24 (hardening, round two), part A: data loss, tracebacks and hangs, the
report at many classes. A run ends with the right answer, or exit 2 and one ``error:`` line, and
leaves every file it did not create as it was. The errors, the file-safety cases and the signals
run through the real ``topcal`` console script; the answers of the other exit-0 runs (a report or
comparison checked for its content, a model made for a test) come from the command in process
(``call`` of _cli.py), the API cases from the API; the Dask cases on a real
``distributed.LocalCluster``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.errors import NotFittedError, ParameterError, TopcalError

from _cli import TOPCAL, assert_error, assert_ok, call, cli, snapshot
from _frames import have_dask

pytestmark = pytest.mark.e2e

BIG = "1" + "0" * 310  # an integer above 1.8e308: float() of it overflows


needs_dask = pytest.mark.skipif(not have_dask(), reason="the dask extra is not installed")


def _probs(n=600, seed=0, names=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(len(names)), n)
    lab = np.array(names)[[rng.choice(len(names), p=r) for r in p]]
    frame = pd.DataFrame({f"p_{c}": p[:, i] for i, c in enumerate(names)})
    frame["label"] = lab
    return frame


@pytest.fixture(scope="module")
def _base_files(tmp_path_factory):
    """The files of :func:`base`, made once per module (M.json by the command in process)."""
    d = tmp_path_factory.mktemp("base")
    frame = _probs()
    frame.to_csv(d / "base.csv", index=False)
    frame.drop(columns="label").iloc[:300].to_csv(d / "use.csv", index=False)
    assert_ok(call("fit", d / "base.csv", "--method", "hist", "-o", d / "M.json"))
    return d


@pytest.fixture
def base(tmp_path, _base_files):
    """A folder of the test's own holding base.csv (labelled, p_a,p_b,p_c,label), use.csv
    (unlabelled) and M.json (hist)."""
    for name in ("base.csv", "use.csv", "M.json"):
        shutil.copyfile(_base_files / name, tmp_path / name)
    return tmp_path


def _parts(folder: Path, frame: pd.DataFrame, n=3) -> Path:
    folder.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(len(frame)), n)):
        frame.iloc[idx].to_parquet(folder / f"part{i}.parquet")
    return folder


# ================================================================ data loss
@pytest.mark.heavy
@needs_dask
def test_dask_apply_output_folder_never_deletes_what_topcal_did_not_write(base, cluster_address):
    t = base
    pq = _parts(t / "pq", pd.read_csv(t / "base.csv"))
    (t / "results").mkdir()
    (t / "results" / "mine.txt").write_text("keep me")
    (t / "sub").mkdir()
    (t / "sub" / "notes.txt").write_text("mine")
    before = snapshot(t)
    dk = ("--engine", "dask", "--scheduler", cluster_address)
    # a folder of the user's files: refused, the files stay
    assert_error(
        cli("apply", t / "M.json", pq, *dk, "-o", t / "results"), "did not write", "mine.txt"
    )
    # the output folder holds the input (a glob into it, or the folder itself): refused
    assert_error(cli("apply", t / "M.json", f"{pq}/*.parquet", *dk, "-o", pq), "holds the input")
    assert_error(cli("apply", t / "M.json", pq, *dk, "-o", pq), "input")
    # the parent of the current folder, and the current folder: refused (was: parent emptied; a
    # traceback)
    assert_error(cli("apply", t / "M.json", pq, *dk, "-o", "..", cwd=t / "sub"), "current folder")
    assert_error(cli("apply", t / "M.json", pq, *dk, "-o", ".", cwd=t / "sub"), "current folder")
    # a .csv output that is a folder: refused, not removed
    (t / "r.csv").mkdir()
    assert_error(cli("apply", t / "M.json", pq, *dk, "-o", t / "r.csv"), "is a folder")
    (t / "r.csv").rmdir()
    assert snapshot(t) == before
    # a new folder is written (with the marker, which Parquet readers skip), and topcal may replace
    # its own
    assert_ok(cli("apply", t / "M.json", pq, *dk, "-o", t / "out"))
    first = pd.read_parquet(t / "out")
    assert (t / "out" / ".topcal-report").is_file() and len(first) == 600
    assert_ok(cli("apply", t / "M.json", pq, *dk, "-o", t / "out"))
    pd.testing.assert_frame_equal(pd.read_parquet(t / "out"), first)
    # ... but not once the user put a file there; and its own output as input is refused
    (t / "out" / "note.txt").write_text("mine")
    assert_error(cli("apply", t / "M.json", pq, *dk, "-o", t / "out"), "note.txt")
    assert (t / "out" / "note.txt").read_text() == "mine"
    assert_error(
        cli("apply", t / "M.json", f"{t / 'out'}/*.parquet", *dk, "-o", t / "out"),
        "holds the input",
    )
    assert not [p for p in t.iterdir() if "topcal-partial" in p.name]


def test_adapt_refuses_to_overwrite_its_inputs(base):
    t = base
    (t / "p.csv").write_text("class,prior\na,0.2\nb,0.3\nc,0.5\n")
    before = snapshot(t)
    for args, name in [
        ((t / "use.csv",), "use.csv"),
        ((t / "use.csv",), "M.json"),
        (("--priors", t / "p.csv"), "p.csv"),
        ((t / "use.csv", "--test", t / "base.csv"), "base.csv"),
    ]:
        assert_error(
            cli("adapt", t / "M.json", *args, "--bootstrap", 0, "-o", t / name), "input file", name
        )
    assert snapshot(t) == before
    assert_ok(cli("adapt", t / "M.json", t / "use.csv", "--bootstrap", 0, "-o", t / "A.json"))


def _report(data, out, *extra):
    return cli("report", data, "--methods", "hist", "--in-sample", "-o", out, *extra)


def test_report_marker_cannot_reach_outside_and_force_never_writes_through_links(base):
    t = base
    rep = t / "rep"
    assert_ok(_report(t / "base.csv", rep))
    outside = t / "outside"
    outside.mkdir()
    (outside / "keep.png").write_text("not a figure")
    (t / "victim.txt").write_text("victim")
    marker = rep / ".topcal-report"
    lines = marker.read_text().splitlines()
    # a marker edited to list files outside the folder, an absolute path and a path through a link
    (rep / "lnk").symlink_to(outside, target_is_directory=True)
    marker.write_text(
        "\n".join(
            lines
            + ["../victim.txt", str(t / "victim.txt"), "lnk/keep.png", "figures/../../victim.txt"]
        )
        + "\n"
    )
    (rep / "mine.txt").write_text("user file")
    before = snapshot(t)
    assert_error(_report(t / "base.csv", rep), "did not write")  # the link and mine.txt are foreign
    assert snapshot(t) == before
    assert_ok(_report(t / "base.csv", rep, "--force"))
    assert (t / "victim.txt").read_text() == "victim" and (
        outside / "keep.png"
    ).read_text() == "not a figure"
    assert (rep / "mine.txt").read_text() == "user file" and (rep / "lnk").is_symlink()
    # a figures/ symlink: --force refuses instead of writing into the linked folder
    rep2 = t / "rep2"
    rep2.mkdir()
    (rep2 / "figures").symlink_to(outside, target_is_directory=True)
    before = snapshot(t)
    assert_error(_report(t / "base.csv", rep2, "--force"), "figures", "link")
    assert snapshot(t) == before and sorted(p.name for p in outside.iterdir()) == ["keep.png"]
    # the report folder itself a link: refused
    (t / "replink").symlink_to(outside, target_is_directory=True)
    assert_error(_report(t / "base.csv", t / "replink", "--force"), "symbolic link")
    assert sorted(p.name for p in outside.iterdir()) == ["keep.png"]


def test_outputs_refuse_devices_links_and_write_protected_files(base):
    t = base
    (t / "target.csv").write_text("the user's file")
    (t / "link.csv").symlink_to(t / "target.csv")
    os.mkfifo(t / "fifo.csv")
    (t / "ro.csv").write_text("read only")
    os.chmod(t / "ro.csv", 0o444)
    before = snapshot(t)
    runs = {
        "/dev/null": "not a regular file",
        str(t / "fifo.csv"): "not a regular file",
        str(t / "link.csv"): "symbolic link",
        str(t / "ro.csv"): "write-protected",
    }
    for out, why in runs.items():
        assert_error(cli("fit", t / "base.csv", "--method", "hist", "-o", out), why)
        assert_error(cli("apply", t / "M.json", t / "use.csv", "-o", out), why)
        assert_error(cli("adapt", t / "M.json", t / "use.csv", "--bootstrap", 0, "-o", out), why)
    assert snapshot(t) == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # (as root the device used to become a file)
    assert stat.S_ISFIFO(os.lstat(t / "fifo.csv").st_mode) and (t / "link.csv").is_symlink()
    assert not [p for p in t.iterdir() if "topcal-partial" in p.name]


def _wait_for_temp(folder: Path, proc, limit=60.0):
    deadline = time.time() + limit
    while time.time() < deadline and proc.poll() is None:
        temps = [p for p in folder.iterdir() if "topcal-partial" in p.name]
        if temps:
            return temps
        time.sleep(0.02)
    raise AssertionError("no temporary output appeared")


def test_killed_apply_leaves_a_named_temp_that_the_next_run_removes(
    base, signals_as_from_a_terminal
):
    t = base
    big = pd.concat([pd.read_csv(t / "use.csv")] * 200, ignore_index=True)  # 60,000 rows
    big.to_csv(t / "big.csv", index=False)
    args = [
        str(TOPCAL),
        "apply",
        str(t / "M.json"),
        str(t / "big.csv"),
        "-o",
        str(t / "out.csv"),
        "--chunk-rows",
        "50",
    ]
    # SIGHUP (terminal closed) unwinds like SIGTERM: no temp, no output
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_temp(t, proc)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and proc.returncode == 130
    assert (
        not [p for p in t.iterdir() if "topcal-partial" in p.name] and not (t / "out.csv").exists()
    )
    # SIGKILL cannot be caught: the temp stays, named after the output and topcal
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (temp,) = _wait_for_temp(t, proc)
    proc.kill()
    proc.wait(timeout=60)
    assert (
        temp.exists()
        and temp.name.startswith(".out.csv.topcal-partial-")
        and not (t / "out.csv").exists()
    )
    # ... and the next run writing the same output removes it
    assert_ok(cli("apply", t / "M.json", t / "use.csv", "-o", t / "out.csv"))
    assert not temp.exists() and [p.name for p in t.iterdir() if "topcal-partial" in p.name] == []


# ================================================================ tracebacks and hangs
def test_report_with_class_names_matplotlib_reads_as_math(tmp_path):
    names = ["under $5", "$5_to_$10", "$\\frac$"]
    frame = _probs(400, seed=1, names=names)
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.drop(columns="label").iloc[:200].to_csv(tmp_path / "u.csv", index=False)
    assert_ok(
        call(
            "report",
            tmp_path / "d.csv",
            "--methods",
            "hist,kde-mon2",
            "--in-sample",
            "-o",
            tmp_path / "r",
        )
    )
    page = (tmp_path / "r" / "index.html").read_text()
    assert "under $5" in page and "$\\frac$" in page
    assert_ok(call("fit", tmp_path / "d.csv", "--method", "hist", "-o", tmp_path / "m.json"))
    assert_ok(
        call(
            "adapt",
            tmp_path / "m.json",
            tmp_path / "u.csv",
            "--bootstrap",
            5,
            "-o",
            tmp_path / "a.json",
        )
    )
    assert_ok(
        call(
            "report",
            tmp_path / "d.csv",
            "--methods",
            "hist",
            "--in-sample",
            "--adapted",
            tmp_path / "a.json",
            "-o",
            tmp_path / "r2",
        )
    )
    assert "Label shift" in (tmp_path / "r2" / "index.html").read_text()


@pytest.mark.parametrize(
    "method,param",
    [
        ("hist", "n_bins"),
        ("hist", "shrinkage"),
        ("kde", "bandwidth"),
        ("bts", "max_iter"),
        ("auto", "folds"),
        ("auto", "seed"),
        ("cum-opt", "shrinkage"),
    ],
)
def test_param_integers_beyond_float_range_are_errors(base, method, param):
    before = snapshot(base)
    err = assert_error(
        cli(
            "fit",
            base / "base.csv",
            "--method",
            method,
            "--param",
            f"{param}={BIG}",
            "-o",
            base / "x.json",
        ),
        f"'{param}'",
        "must be",
    )
    assert len(err) < 400  # the 311-digit value is shortened
    assert snapshot(base) == before


def test_param_huge_integers_in_compare_report_and_over_4300_digits(base):
    assert_error(
        cli("compare", base / "base.csv", "--methods", "hist", "--param", f"hist:n_bins={BIG}"),
        "n_bins",
    )
    assert_error(
        cli(
            "report",
            base / "base.csv",
            "--methods",
            "kde",
            "--param",
            f"kde:bandwidth={BIG}",
            "-o",
            base / "r",
        ),
        "bandwidth",
    )
    assert_error(
        cli(
            "fit",
            base / "base.csv",
            "--method",
            "hist",
            "--param",
            "n_bins=1" + "0" * 5000,
            "-o",
            base / "x.json",
        ),
        "n_bins",
    )
    assert not (base / "r").exists() and not (base / "x.json").exists()


def test_adapt_seed_and_bootstrap_bounds(base):
    t = base
    for seed in ("-1", str(2**32), BIG):
        assert_error(
            cli("adapt", t / "M.json", t / "use.csv", "--seed", seed, "-o", t / "a.json"), "--seed"
        )
    t0 = time.perf_counter()
    assert_error(
        cli(
            "adapt",
            t / "M.json",
            t / "use.csv",
            "--bootstrap",
            "99999999999999999999",
            "-o",
            t / "a.json",
            timeout=60,
        ),
        "--bootstrap",
        "at most",
    )
    assert time.perf_counter() - t0 < 60
    assert not (t / "a.json").exists()
    # the API alike
    model = topcal.load(t / "M.json")
    use = topcal.read_data(t / "use.csv")
    for kw in ({"seed": -1}, {"seed": 2**40}, {"n_bootstrap": 10**20}):
        with pytest.raises(ParameterError):
            model.adapt(use, **kw)
    from sklearn.linear_model import LogisticRegression

    X = np.random.default_rng(0).normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    est = topcal.TopLabelCalibratedClassifier(LogisticRegression(), method="hist", cv=3).fit(X, y)
    with pytest.raises(ParameterError):
        est.adapt(X, seed=-1)


def test_api_predict_confidence_before_fit_and_load_of_bytes(base):
    from sklearn.exceptions import NotFittedError as SklearnNotFitted
    from sklearn.linear_model import LogisticRegression

    est = topcal.TopLabelCalibratedClassifier(LogisticRegression())
    for f in (est.predict_confidence, est.predict_proba, est.predict):
        with pytest.raises(NotFittedError, match="not fitted") as info:
            f(np.zeros((2, 2)))
        assert isinstance(
            info.value, SklearnNotFitted
        )  # scikit-learn's except clause catches it too
    assert topcal.load(os.fsencode(base / "M.json")).name == "hist"
    assert topcal.load(str(base / "M.json")).name == "hist"
    with pytest.raises(TopcalError, match="path"):
        topcal.load(3)


@needs_dask
def test_dask_scheduler_address_errors_are_one_line(base):
    pq = _parts(base / "pq", pd.read_csv(base / "base.csv"))
    for addr in ("not an address", "tcp://", "tcp://127.0.0.1:notaport"):
        r = cli(
            "fit",
            pq,
            "--engine",
            "dask",
            "--scheduler",
            addr,
            "--method",
            "hist",
            "-o",
            base / "d.json",
            timeout=120,
        )
        assert_error(r, "cannot connect", "Dask scheduler")
        assert r.stderr.count("\n") == 1
    assert not (base / "d.json").exists()


@needs_dask
def test_dask_apply_to_current_folder_is_an_error(base, cluster_address):
    pq = _parts(base / "pq", pd.read_csv(base / "base.csv"))
    before = snapshot(base)
    assert_error(
        cli(
            "apply",
            base / "M.json",
            pq,
            "--engine",
            "dask",
            "--scheduler",
            cluster_address,
            "-o",
            ".",
            cwd=base,
        ),
        "current folder",
    )
    assert snapshot(base) == before


@pytest.mark.heavy
@needs_dask
def test_dask_task_errors_are_one_error_line_without_log(base, cluster_address):
    t = base
    frame = pd.read_csv(t / "base.csv")
    bad = frame.copy()
    bad.loc[450, "p_a"] = np.nan
    pqnan = _parts(t / "pqnan", bad)
    # on the LocalCluster the command starts itself: the worker's "Compute Failed" log is silenced
    for cmd in (
        ["fit", pqnan, "--engine", "dask", "--method", "hist", "-o", t / "d.json"],
        ["apply", t / "M.json", pqnan, "--engine", "dask", "-o", t / "o"],
    ):
        r = cli(*cmd, timeout=170)
        assert_error(r, "NaN")
        assert r.stderr.count("\n") == 1, r.stderr
    # update --engine dask with a class the model does not know, on the module's LocalCluster
    top = pd.DataFrame(
        {"pred": list("abcabc"), "score": [0.5, 0.6, 0.7, 0.8, 0.9, 0.6], "label": list("abcaba")}
    )
    top.to_csv(t / "top.csv", index=False)
    assert_ok(call("fit", t / "top.csv", "--method", "hist", "-o", t / "T.json"))
    new = top.copy()
    new.loc[2, "pred"] = "d"
    (t / "pqnew").mkdir()
    new.to_parquet(t / "pqnew" / "a.parquet")
    r = cli(
        "update",
        t / "T.json",
        t / "pqnew",
        "--engine",
        "dask",
        "--scheduler",
        cluster_address,
        "-o",
        t / "T2.json",
    )
    assert_error(r, "'d'")
    assert r.stderr.count("\n") == 1, r.stderr
    assert not (t / "d.json").exists() and not (t / "o").exists() and not (t / "T2.json").exists()


# ================================================================ the report at many classes
@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """1,000 classes, 20 positives each on average: ~1,000 per-class warnings of one kind."""
    t = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(2)
    k, n = 1000, 20000
    pred = rng.integers(0, k, n)
    s = rng.uniform(0.2, 1, n)
    lab = np.where(rng.uniform(size=n) < s, pred, (pred + 1) % k)
    pd.DataFrame(
        {"pred": [f"c{i}" for i in pred], "score": s, "label": [f"c{i}" for i in lab]}
    ).to_csv(t / "many.csv", index=False)
    return t / "many.csv"


@pytest.mark.heavy
def test_report_at_1000_classes_groups_warnings_and_keeps_figures_legible(many, tmp_path):
    from PIL import Image

    r = assert_ok(
        call(
            "report",
            many,
            "--methods",
            "hist,conf1",
            "--in-sample",
            "-o",
            tmp_path / "r",
        )
    )
    warn = [ln for ln in r.stderr.splitlines() if ln.strip().startswith("warning:")]
    assert len(warn) <= 12, warn  # was: one line per class (~1,000)
    few = [ln for ln in warn if "classes with few positives" in ln]
    assert (
        len(few) == 1
        and re.search(r"warning: 9\d\d classes with few positives", few[0])
        and "worst:" in few[0]
    )
    page = (tmp_path / "r" / "index.html").read_text()
    assert (
        page.index("<h2>Metrics</h2>") < page.index(">Warnings (") < page.index("<h2>Figures</h2>")
    )
    assert "<details open" not in page  # per-class tables (1,000 rows) collapsed
    assert re.search(r"<details><summary>all 9\d\d \(worst first\)</summary>", page)
    # conf1 is not ranked on ECE, and the page says why
    assert "conf1 is not ranked on ECE1/ECE2" in page
    # figures: at most 24 classes drawn, a note says so, no figure of tens of thousands of pixels
    assert "largest classes (most positives) of 1000" in page
    for png in (tmp_path / "r" / "figures").iterdir():
        w, h = Image.open(png).size
        assert w <= 4000 and h <= 4000, (png.name, w, h)


def test_compare_at_1000_classes_summarises(many):
    r = assert_ok(call("compare", many, "--methods", "hist,conf1", "--folds", 2))
    table = r.stdout.split("per-class NLL")[1].split("warnings")[0]
    rows = [ln for ln in table.splitlines() if re.match(r"c\d+ ", ln)]
    assert len(rows) == 30 and "30 of 1000 classes shown" in table
    assert len(r.stdout.splitlines()) < 80
    # conf1 is never 'best' on ECE, and the table says why
    conf1 = next(ln for ln in r.stdout.splitlines() if ln.startswith("conf1 "))
    assert (
        "ECE" not in conf1.partition("best")[2] and "conf1 is not ranked on ECE1/ECE2" in r.stdout
    )


def test_nll_bars_give_every_method_its_own_colour():
    from matplotlib.colors import to_rgba

    from topcal.calibrators import available_methods
    from topcal.plots import MethodScores, plot_method_bars

    methods = tuple(available_methods())
    assert {"auto", "bts"} <= set(methods)
    scores = MethodScores(
        "nll", ("a", "b"), methods, np.ones((2, len(methods))), np.ones(len(methods))
    )
    fig = plot_method_bars(scores)
    colours = {}
    for patch in fig.axes[0].patches:
        gid = patch.get_gid() or ""
        if gid.startswith("bars:"):
            colours.setdefault(gid[5:], to_rgba(patch.get_facecolor()))
    assert len(colours) == len(methods) and len(set(colours.values())) == len(methods)


def test_binary_ts_certainty_warning_does_not_recommend_shrinkage(tmp_path):
    rng = np.random.default_rng(3)
    n = 200
    pred = rng.choice(["a", "b"], n)
    s = rng.uniform(0.5, 1, n)
    lab = np.where(
        pred == "a", "a", np.where(rng.uniform(size=n) < s, "b", "a")
    )  # class a: no false positives
    pd.DataFrame({"pred": pred, "score": s, "label": lab}).to_csv(tmp_path / "d.csv", index=False)
    r = assert_ok(call("compare", tmp_path / "d.csv", "--methods", "bts,btswa,hist", "--in-sample"))
    # compare wraps each warning to 100 columns: read them as one line each
    text = " ".join(r.stdout.split())
    lines = [
        "- " + w
        for w in text.split(" - ")
        if "reaches confidence 0 or 1" in w and w.startswith(("bts", "btswa"))
    ]
    assert lines, r.stdout
    for ln in lines:
        assert "use shrinkage" not in ln and "has no shrinkage" in ln
