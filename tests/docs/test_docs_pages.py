"""Every page of docs/ runs as written: each Python block, and each command of each shell block.

Python blocks are executed in a temporary folder (names a block uses without defining them are
given by the test, with simulated data); ``topcal ...`` lines run (the command's code in process:
``_docs.run_topcal``) in a folder holding the files they name (simulated classifier outputs).
Lines that cannot run in the suite are listed in ``NOT_RUN`` with the reason, and each must still
appear in its page, so the list cannot rot. docs/sklearn.md has its own test
(tests/docs/test_docs_sklearn.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import time

import numpy as np
import pandas as pd
import pytest

import topcal
from topcal.cli import build_parser
from _docs import (
    DOCS,
    blocks,
    commands,
    exec_block,
    fences,
    probs_frame,
    run_topcal,
    top_score_frame,
)

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]

#: (page, command) -> why the suite does not run it
_LONG = "a full experiment run (minutes to hours); the tiny run of the same command runs"
NOT_RUN = {
    ("cli.md", "topcal experiment ensembles -o runs/under"): _LONG,
    (
        "experiment.md",
        "make install",
    ): "sets up the virtual environment the suite itself runs in (CI runs it)",
    (
        "experiment.md",
        "make system-deps",
    ): "installs Debian packages with apt-get as root (CI runs it)",
    ("experiment.md", "topcal experiment ensembles --regime under -o runs/under"): _LONG,
    (
        "experiment.md",
        "topcal experiment ensembles --regime under --combine geometric -o runs/under-geometric",
    ): _LONG,
    ("experiment.md", "topcal experiment ensembles --regime over --threads 1 -o runs/over"): _LONG,
    (
        "experiment.md",
        "topcal experiment ensembles --regime over --threads 1 --combine geometric "
        "-o runs/over-geometric",
    ): _LONG,
    (
        "experiment.md",
        "topcal experiment ensembles --networks 1000 --ensembles 1000 -o runs/paper-scale",
    ): _LONG,
    (
        "experiment.md",
        "mkdir -p ~/data/mnist && cd ~/data/mnist",
    ): "prepares the MNIST download (no network here)",
    (
        "experiment.md",
        "for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte "
        "t10k-labels-idx1-ubyte; do",
    ): "downloads MNIST (no network here)",
    (
        "experiment.md",
        'curl -fLO "https://ossci-datasets.s3.amazonaws.com/mnist/$f.gz"',
    ): "downloads MNIST (no network here)",
    ("experiment.md", "done"): "downloads MNIST (no network here)",
    (
        "experiment.md",
        "topcal experiment ensembles --data-dir ~/data/mnist -o runs/mnist-under",
    ): _LONG,
    (
        "report.md",
        "make demo",
    ): "builds the venv, runs `topcal demo` (CI runs it; cli.md's `topcal demo` runs here)",
}

#: page -> (Python blocks, shell blocks); each is run by the page's test below
PAGES = {
    "cli.md": (0, 2),
    "experiment.md": (0, 2),
    "kde.md": (1, 0),
    "label_shift.md": (0, 1),
    "metrics.md": (1, 0),
    "python.md": (2, 0),
    "report.md": (1, 2),
    "scale.md": (2, 3),
    "temperature.md": (1, 0),
    "thresholds.md": (2, 2),
}
OWN_TEST = {"sklearn.md"}  # tests/docs/test_docs_sklearn.py
NO_CODE_LANGS = {
    "text",
    "layers",
}  # program output; architecture.md's layer table (tests/project/test_architecture.py)


def run_lines(page: str, block: str, where, done: dict | None = None) -> dict[str, object]:
    """Run every command of a shell block of ``page`` in ``where`` (except the listed ones); their
    results by line.

    ``done``: the results of the lines already run in ``where`` (by another page showing the same
    command on the same files); such a line is not run twice, and ``done`` gains the new ones.
    """
    out = {}
    for line in commands(block):
        if (page, line) in NOT_RUN:
            continue
        if done is not None and line in done:
            out[line] = done[line]
            continue
        t0 = time.perf_counter()
        out[line] = run_topcal(line, where)
        print(f"{time.perf_counter() - t0:6.1f} s  {page}: {line}")
        if done is not None:
            done[line] = out[line]
    return out


# ------------------------------------------------------------------ coverage of the pages
def test_every_code_block_of_the_docs_is_run_here():
    for page in sorted(p.name for p in DOCS.glob("*.md")):
        if page in OWN_TEST:
            continue
        langs = [lang for lang, _ in fences(DOCS / page)]
        assert all(lang for lang in langs), (
            f"{page}: a code block without a language; label it (sh, python, text)"
        )
        counted = (langs.count("python"), langs.count("sh"))
        assert counted == PAGES.get(page, (0, 0)), (
            page,
            counted,
            "update PAGES and run the new blocks",
        )
        assert set(langs) <= {"python", "sh"} | NO_CODE_LANGS, (page, langs)


def test_lines_not_run_are_few_and_still_in_the_docs():
    lines = {(p, c) for p in PAGES for b in blocks(DOCS / p, "sh") for c in commands(b)}
    assert set(NOT_RUN) <= lines, set(NOT_RUN) - lines
    # everything else is a topcal command, which the tests below run
    for page, line in lines - set(NOT_RUN):
        assert line.startswith("topcal "), (page, line)
    assert (
        sum(p == "experiment.md" and c.startswith("topcal ") for p, c in lines - set(NOT_RUN)) == 1
    )  # the tiny run


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_pages_have_no_dangling_links(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        if target.startswith("http"):
            continue
        assert (DOCS / target).exists(), (page, target)


# ------------------------------------------------------------------ the pages
@pytest.fixture(scope="module")
def visual_check(tmp_path_factory):
    """The folder of the visual-check commands (cli.md and report.md show the same ones): preds.csv,
    preds2.csv and extra.csv (rows predicted as c1 only: a 'trove' of one class); the lines run
    there."""
    where = tmp_path_factory.mktemp("visual-check")
    probs_frame(300, k=3, seed=11).to_csv(where / "preds.csv", index=False)
    probs_frame(300, k=3, seed=12).to_csv(where / "preds2.csv", index=False)
    extra = probs_frame(300, k=3, seed=13)
    extra[extra.filter(like="p_").to_numpy().argmax(1) == 1].to_csv(
        where / "extra.csv", index=False
    )
    return where, {}


def test_cli_page(tmp_path, visual_check, demo_run):
    sh = blocks(DOCS / "cli.md", "sh")
    top_score_frame(400, seed=1).to_csv(tmp_path / "test.csv", index=False)
    top_score_frame(200, seed=2, labelled=False).to_csv(tmp_path / "new.csv", index=False)
    top_score_frame(200, seed=3).to_csv(tmp_path / "more.csv", index=False)
    top_score_frame(600, seed=4).to_parquet(tmp_path / "big.parquet")
    (tmp_path / "preds").mkdir()
    for i in range(3):
        top_score_frame(200, seed=5 + i).to_parquet(tmp_path / "preds" / f"part-{i}.parquet")
    top_score_frame(300, seed=9, labelled=False, priors=[0.7, 0.2, 0.1]).to_csv(
        tmp_path / "use.csv", index=False
    )

    # `topcal demo` is the session's one demo run (conftest's demo_run, `-o DIR`), its folder copied
    # to where the page's line writes it: the demo fits every method (about 15 CPU-seconds); the
    # default folder is the parser's (checked below).
    shutil.copytree(demo_run[0], tmp_path / "topcal-demo-report")
    demo = subprocess.CompletedProcess(["topcal", "demo"], 0, demo_run[1], demo_run[2])
    ran = run_lines("cli.md", sh[0], tmp_path, {"topcal demo": demo})
    assert "topcal demo" in ran and "NLL" in ran["topcal demo"].stdout.upper()
    demo_args = build_parser().parse_args(["demo"])
    assert demo_args.output == "topcal-demo-report"  # the folder the page names
    assert "kde-mon2" in ran["topcal methods"].stdout
    model = topcal.load(tmp_path / "model.json")
    assert model.name == "auto"
    new = pd.read_csv(tmp_path / "new_calibrated.csv")
    assert len(new) == 200 and new["confidence"].between(0, 1).all()
    np.testing.assert_allclose(
        new["confidence"], model.predict(topcal.read_data(tmp_path / "new.csv")), atol=1e-12
    )
    updated = topcal.load(tmp_path / "model2.json")
    assert updated.evidence_.stats.n_samples == 600  # 400 + the 200 of more.csv
    assert (
        topcal.load(tmp_path / "m.json").name == "auto"
    )  # written by the Dask fit, after the chunked one
    assert "method: auto" in ran["topcal describe model.json"].stdout
    assert "NLL" in ran["topcal metrics test.csv --model model.json"].stdout.upper()
    assert (tmp_path / "my-report" / "index.html").is_file()
    assert "5-fold" in ran["topcal compare test.csv"].stdout
    adapted = topcal.load(tmp_path / "adapted.json")
    source, use = adapted.estimate_.source, adapted.estimate_.priors
    assert use[0] > source[0]  # the use set predicts c0 far more often
    cut = json.loads((tmp_path / "cut.json").read_text(encoding="utf-8"))["thresholds"]
    assert "split" not in cut  # two files: the model's rows and the held-out ones
    split = json.loads((tmp_path / "cut2.json").read_text(encoding="utf-8"))["thresholds"]["split"]
    assert split["fraction"] == 0.5 and split["seed"] == 0, split
    assert topcal.load(tmp_path / "fitted.json").name == "hist"
    assert (tmp_path / "topcal-demo-report" / "index.html").is_file()

    where, done = visual_check
    ran = run_lines("cli.md", sh[1], where, done)
    table = json.loads(ran["topcal compare preds.csv --json"].stdout)
    assert table["protocol"] == "kfold" and {"hist", "kde-mon2", "sts"} <= set(table["methods"])
    figures = {
        p.name for p in (where / "my-report" / "figures").iterdir()
    }  # the last report: --add
    assert any("add" in f for f in figures), figures


def test_report_page(visual_check):
    where, done = visual_check
    sh = blocks(DOCS / "report.md", "sh")
    run_lines("report.md", sh[0], where, done)
    page = (where / "r" / "index.html").read_text(encoding="utf-8")
    assert "tswa" in page and "kde-opt" not in page  # --methods hist,kde-mon2,tswa
    ran = run_lines("report.md", sh[1], where, done)
    assert ran["topcal compare preds.csv"].stdout.startswith(
        "protocol: 5-fold"
    )  # the default is out of sample
    assert "same data" in ran["topcal compare preds.csv --in-sample"].stdout.splitlines()[0]
    assert json.loads(ran["topcal compare preds.csv --folds 5 --json"].stdout)["folds"] == 5

    ns = exec_block(blocks(DOCS / "report.md", "python")[0], where, name="report.md")
    assert (where / "curves.png").stat().st_size > 10_000
    assert set(ns["res"]["methods"]) == {"hist", "kde-mon2"}
    assert "btswa" in (where / "report-dir" / "index.html").read_text(encoding="utf-8")


def test_label_shift_page(tmp_path):
    pool = probs_frame(3000, k=3, seed=21)
    pool.iloc[:800].to_csv(tmp_path / "test.csv", index=False)
    rest = pool.iloc[800:]
    keep = np.random.default_rng(0).random(len(rest)) < rest["label"].map(
        {"c0": 1.0, "c1": 0.3, "c2": 0.3}
    )
    rest[keep.to_numpy()].drop(columns="label").to_csv(
        tmp_path / "use.csv", index=False
    )  # label shift toward c0
    (tmp_path / "P.csv").write_text("class,prior\nc0,0.6\nc1,0.2\nc2,0.2\n")
    run_topcal(
        "topcal fit test.csv --method kde-mon2 -o model.json", tmp_path
    )  # the page's model.json

    ran = run_lines("label_shift.md", blocks(DOCS / "label_shift.md", "sh")[0], tmp_path)
    for line, estimator in [
        ("topcal adapt model.json use.csv -o adapted.json", "em"),
        ("topcal adapt model.json use.csv -o adapted.json --estimator bbse", "bbse"),
    ]:
        assert f"to {estimator} " in ran[line].stdout, ran[line].stdout
    adapted = topcal.load(tmp_path / "adapted.json")  # the last one: --priors P.csv
    np.testing.assert_allclose(adapted.estimate_.priors, [0.6, 0.2, 0.2])
    assert "use" in ran["topcal describe adapted.json"].stdout
    out = pd.read_csv(tmp_path / "use_calibrated.csv")
    np.testing.assert_allclose(
        out["confidence"], adapted.predict(topcal.read_data(tmp_path / "use.csv")), atol=1e-12
    )
    assert "prior" in (tmp_path / "rep" / "index.html").read_text(encoding="utf-8").lower()


def test_experiment_page_tiny_run(tmp_path):
    from unit.experiments.test_experiments import _need_torch, make_synthetic_mnist

    _need_torch()
    make_synthetic_mnist(tmp_path / "mnist", n_train=3000, n_test=400)
    runs = [
        c
        for b in blocks(DOCS / "experiment.md", "sh")
        for c in commands(b)
        if ("experiment.md", c) not in NOT_RUN
    ]
    assert len(runs) == 1
    run_lines("experiment.md", "\n".join(runs), tmp_path)
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    assert summary["config"]["methods"] == ["hist", "conf1", "sts"]
    assert summary["config"]["train"]["steps"] == 20 and summary["config"]["n_networks"] == 4
    values = np.load(tmp_path / "runs" / "tiny" / "results.npz")["values"]
    assert values.shape[:2] == (3, 3) and np.isfinite(values).all()  # 3 ensembles x 3 methods


def test_python_page(tmp_path):
    from _docs import sklearn_split

    py = blocks(DOCS / "python.md", "python")
    ns = exec_block(py[0], tmp_path, sklearn_split(), name="python.md")
    conf = ns["conf"]
    assert conf.shape == (len(ns["X_test"]),) and np.all((conf > 0) & (conf < 1))
    assert ns["cal"].estimator_ is ns["clf"]

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        ns = exec_block(py[1], tmp_path, name="python.md")
    per_class = np.array(printed.getvalue().strip(" []\n").split(), dtype=float)
    np.testing.assert_allclose(
        per_class, topcal.metrics.nll(ns["data"], ns["conf"]).per_class, rtol=1e-6
    )
    assert per_class.shape == (len(ns["data"].classes),)
    np.testing.assert_array_equal(ns["same"].predict(ns["data"]), ns["conf"])
    assert ns["cal"].name == "auto" and np.all((ns["conf"] >= 0) & (ns["conf"] <= 1))


def test_kde_page(tmp_path):
    ns = exec_block(blocks(DOCS / "kde.md", "python")[0], tmp_path, name="kde.md")
    cal, curve, data = ns["cal"], ns["curve"], ns["data"]
    assert cal.bandwidth_.shape == (len(data.classes),) and np.nanmin(cal.bandwidth_) > 0
    assert ns["conf"].shape == (data.n_rows,) and np.all((ns["conf"] >= 0) & (ns["conf"] <= 1))
    assert np.all((curve.confidence >= 0) & (curve.confidence <= 1))
    assert ns["tp_density"].shape == ns["fp_density"].shape == curve.score.shape
    conf_x = ns["conf_x"]  # TP weight grows and FP weight falls with the score: an increasing curve
    assert (
        conf_x.shape == curve.score.shape
        and np.all(np.diff(conf_x) >= -1e-12)
        and 0 < conf_x[0] < conf_x[-1] < 1
    )


def _keys(comment: str):
    """The keys a comment {"a", ["b"]} lists: (required, optional)."""
    optional = set(re.findall(r'\["(\w+)"\]', comment))
    return set(re.findall(r'"(\w+)"', comment)) - optional, optional


def test_metrics_page(tmp_path):
    from topcal.overall import OVERALL

    ns = exec_block(blocks(DOCS / "metrics.md", "python")[0], tmp_path, name="metrics.md")
    res = ns["res"]
    assert set(OVERALL) | {"nll_improvement", "brier_improvement"} == set(res)
    gain = res["nll_improvement"]
    assert 0 < gain.lo < gain.value < gain.hi  # hist in sample beats the raw PhANNs score
    assert all(np.isfinite(e.value) and e.lo <= e.hi for e in res.values())


def test_temperature_page(tmp_path):
    from _sim import simulate_probs

    p, y = simulate_probs(2000, 31, 4, sharpen=[2.0, 1.5, 0.7, 1.0])
    p_new, _ = simulate_probs(300, 32, 4)
    block = blocks(DOCS / "temperature.md", "python")[0]
    ns = exec_block(
        block,
        tmp_path,
        {
            "logits": np.log(p),
            "labels": y,
            "new_data": topcal.TopLabelData.from_logits(np.log(p_new)),
        },
        name="temperature.md",
    )
    m = ns["m"]
    assert (
        m.temperature_.shape == m.awards_.shape == (4,) and np.ptp(m.temperature_) == 0
    )  # tswa: one T
    assert m.aic_ == pytest.approx(2 * m.n_params_ + 2 * m.nll_)
    assert ns["conf"].shape == (300,) and np.all((ns["conf"] > 0) & (ns["conf"] < 1))
    # the keys the comments promise are the keys describe() gives
    comments = dict(re.findall(r"^(m\.describe\(\)\[[^#]*?)\s+# (\{.*\})$", block, flags=re.M))
    assert len(comments) == 2
    for expr, listed in comments.items():
        required, optional = _keys(listed)
        got = set(eval(expr, ns))
        assert required <= got <= required | optional, (expr, got)


def test_scale_page(tmp_path):
    py, sh = blocks(DOCS / "scale.md", "python"), blocks(DOCS / "scale.md", "sh")
    top_score_frame(600, seed=41).to_csv(tmp_path / "old.csv", index=False)
    top_score_frame(300, seed=42).to_csv(tmp_path / "new.csv", index=False)
    for name, seeds in [("preds", (43, 44, 45)), ("more", (46,))]:
        (tmp_path / name).mkdir()
        for s in seeds:
            top_score_frame(200, seed=s).to_parquet(tmp_path / name / f"part-{s}.parquet")

    # update = a fit on the merged statistics
    ns = exec_block(py[0], tmp_path, name="scale.md")
    parts = [topcal.ScoreStats.from_data(ns[k]) for k in ("old_data", "new_data")]
    refit = topcal.calibrator("kde-mon2").fit(topcal.ScoreStats.merge_all(parts).to_data())
    np.testing.assert_allclose(
        ns["cal"].predict(ns["new_data"]), refit.predict(ns["new_data"]), atol=1e-12
    )
    assert ns["cal"].evidence_.stats.n_samples == 900

    run_topcal(
        "topcal fit old.csv --method kde-mon2 -o model.json", tmp_path
    )  # the page's model.json
    whole, chunked = commands(sh[0])
    run_lines("scale.md", whole, tmp_path)
    first = topcal.load(tmp_path / "model2.json")
    run_lines("scale.md", chunked, tmp_path)
    second = topcal.load(tmp_path / "model2.json")
    new = topcal.read_data(tmp_path / "new.csv")
    np.testing.assert_array_equal(first.predict(new), second.predict(new))
    np.testing.assert_allclose(first.predict(new), ns["cal"].predict(new), atol=1e-12)

    # Dask, in process (dask's default scheduler)
    ns = exec_block(py[1], tmp_path, {}, name="scale.md")
    pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "preds").iterdir())).to_csv(
        tmp_path / "all.csv"
    )
    whole = topcal.read_data(tmp_path / "all.csv")
    assert ns["stats"].equals(topcal.ScoreStats.from_data(whole))
    assert ns["cal"].evidence_.stats.n_samples == 800  # 600 + the update's 200
    out = ns["out"].compute()
    assert len(out) == 600 and {"pred", "confidence"} <= set(out.columns)
    np.testing.assert_allclose(
        np.sort(out["confidence"]), np.sort(ns["cal"].predict(whole)), atol=1e-12
    )

    # Dask from the command line, on a LocalCluster
    run_lines("scale.md", sh[1], tmp_path)
    assert topcal.load(tmp_path / "model.json").name == "kde-mon2"
    written = pd.concat(
        pd.read_parquet(p) for p in sorted((tmp_path / "calibrated").glob("*.parquet"))
    )
    assert len(written) == 600 and written["confidence"].between(0, 1).all()

    # many classes: a language model's next tokens (pred, score, label), 2,000 tokens
    rng = np.random.default_rng(47)
    tokens = np.minimum(rng.zipf(1.3, 3000), 2000)
    score = rng.beta(5.0, 1.5, 3000)
    label = np.where(rng.random(3000) < score**1.3, tokens, np.roll(tokens, 1))
    frame = pd.DataFrame({"pred": tokens, "score": score, "label": label})
    frame.to_parquet(tmp_path / "next.parquet")
    seen = set(frame["pred"]) | set(frame["label"])
    use = frame[frame["pred"].isin(seen)].iloc[:500].drop(columns="label")
    use.to_parquet(tmp_path / "new.parquet")
    res = run_lines("scale.md", sh[2], tmp_path)
    assert all(r.returncode == 0 for r in res.values()), res
    out = pd.read_parquet(tmp_path / "new_calibrated.parquet")
    assert len(out) == 500 and out["confidence"].between(0, 1).all()


def test_thresholds_page(tmp_path):
    # a frequent class c0 right far more often than its score says: precision 0.95 is reachable
    kind = {"power": [0.1, 1.0, 2.5], "priors": [0.6, 0.2, 0.2]}
    top_score_frame(800, seed=51, **kind).to_csv(tmp_path / "fit.csv", index=False)
    top_score_frame(1500, seed=52, **kind).to_csv(tmp_path / "held.csv", index=False)
    top_score_frame(500, seed=53, labelled=False, **kind).to_csv(tmp_path / "new.csv", index=False)
    # the recommended path: one labelled file, split into the calibrator's and the cut-offs' rows
    pd.concat([pd.read_csv(tmp_path / n) for n in ("fit.csv", "held.csv")]).to_csv(
        tmp_path / "labelled.csv", index=False
    )
    run_lines("thresholds.md", blocks(DOCS / "thresholds.md", "sh")[0], tmp_path)
    th = topcal.load_thresholds(tmp_path / "thresholds.json")
    assert th.split.n_fit + th.split.n_cutoff == 2300
    one = exec_block(blocks(DOCS / "thresholds.md", "python")[0], tmp_path, name="thresholds.md")
    assert one["th"].split == th.split
    run_lines("thresholds.md", blocks(DOCS / "thresholds.md", "sh")[1], tmp_path)
    out = pd.read_csv(tmp_path / "out.csv")
    assert out["accepted"].any() and not out["accepted"].all()
    assert (tmp_path / "rep" / "index.html").is_file()

    ns = exec_block(blocks(DOCS / "thresholds.md", "python")[1], tmp_path, name="thresholds.md")
    np.testing.assert_array_equal(
        ns["accepted"], out["accepted"].to_numpy()
    )  # the CLI's and Python's agree
    assert np.nanmin(ns["th"].cutoffs()) >= 0.5


# ------------------------------------------------------------------ user pages and research records
#: the project's measurement record: a log by design, as the research records under docs/research/
RECORDS = {"benchmarks.md"}
RESEARCH = DOCS / "research"
MAX_PAGE_LINES = 300


def user_pages() -> list:
    return sorted(p for p in DOCS.glob("*.md") if p.name not in RECORDS)


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.name)
def test_user_pages_are_short_and_say_no_issue_numbers(page):
    """A user page says what a method does, when to use it and what to trust; the history of how
    it came to be (issues, tried-and-rejected tables, seeds and loads) is in docs/research/."""
    lines = page.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_PAGE_LINES, (page.name, len(lines), "move records to docs/research/")
    for i, line in enumerate(lines, 1):
        assert not re.search(r"\b[Ii]ssues? #?\d+", line), (page.name, i, line)


def test_readme_says_no_issue_numbers():
    from _docs import README

    for i, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        assert not re.search(r"\b[Ii]ssues? #?\d+", line), ("README.md", i, line)


def test_research_records_are_indexed_and_linked():
    records = sorted(p.name for p in RESEARCH.glob("*.md") if p.name != "README.md")
    index = (RESEARCH / "README.md").read_text(encoding="utf-8")
    for name in records:
        assert f"]({name})" in index, name
        page = DOCS / name
        if page.exists():  # a page's record is linked from the page
            assert f"](research/{name}" in page.read_text(encoding="utf-8"), name
    for page in RESEARCH.glob("*.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (RESEARCH / target).exists(), (page.name, target)


def _anchors(path) -> set[str]:
    """The anchors of a Markdown page: its headings' GitHub slugs and its explicit ``<a id>``s."""
    text = path.read_text(encoding="utf-8")
    found = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    for heading in re.findall(
        r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), flags=re.M
    ):
        plain = re.sub(r"<[^>]+>", "", heading).strip().lower()
        found.add(re.sub(r"[^\w\- ]", "", plain).replace(" ", "-"))
    return found


def test_anchors_linked_from_docs_readme_src_and_tests_exist():
    """Every ``page.md#anchor`` that the docs, the README, src docstrings or the tests name."""
    from _docs import README, ROOT

    links = []  # (where, page path, anchor)
    md = [README, *DOCS.glob("*.md"), *RESEARCH.glob("*.md")]
    for path in md:
        for target, anchor in re.findall(
            r"\]\(([^)#:]*)#([^)]+)\)", path.read_text(encoding="utf-8")
        ):
            page = (path.parent / target) if target else path
            links.append((path.name, page, anchor))
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        for target, anchor in re.findall(
            r"(docs/[\w/-]+\.md)#([\w-]+)", path.read_text(encoding="utf-8")
        ):
            links.append((path.name, ROOT / target, anchor))
    assert len(links) > 20
    for where, page, anchor in links:
        assert page.exists(), (where, page)
        assert anchor in _anchors(page), (where, page.name, anchor)


def test_sections_named_from_src_and_tests_exist():
    """``docs/kde.md, "Persistence"``: a section of a user page that a docstring or a test names by
    its heading (the measurement record, benchmarks.md, is not held to it)."""
    from _docs import ROOT

    named = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        text = re.sub(r"\s*\n\s*(?:#:?)?\s*", " ", path.read_text(encoding="utf-8"))
        named += [(path.name, *m) for m in re.findall(r'(docs/[\w/-]+\.md),? "([^"]+)"', text)]
    assert len(named) >= 5
    for where, target, name in named:
        page = ROOT / target
        if page.name in RECORDS:
            continue
        headings = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
        assert name in _anchors(page) or any(name in h for h in headings), (where, target, name)
