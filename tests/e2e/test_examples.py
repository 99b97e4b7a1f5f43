"""The scripts of examples/ run as a user runs them, and say what they should.

The ``examples`` lane: ``make docs`` runs it (CI too, through .ci/run) with
``TOPCAL_EXAMPLES_OUT=docs/examples/output``, so the site shows the figures and summaries of
this very run; elsewhere each script writes to a temporary folder. Each runs in its own
process with this tree's ``src`` first on the path. The bench data (shared/data/bench) are
needed by three of them: missing, those fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BENCH = Path(
    os.environ.get("TOPCAL_BENCH_DATA") or ROOT.parent / "shared" / "data" / "bench"
)

pytestmark = pytest.mark.examples

#: script -> the bench file it reads (None: data it makes or scikit-learn ships)
SCRIPTS = {
    "quickstart.py": None,
    "sklearn_pipeline.py": None,
    "pytorch_logits.py": None,
    "imagenet_thresholds.py": "imagenet-resnet101.csv",
    "label_shift.py": "wideresnet-16-4-cifar-10.npz",
    "dask_fit.py": "densenet-bc-100-cifar-100.npz",
}


def test_every_example_is_run_here():
    on_disk = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert on_disk == set(SCRIPTS)


def run(script: str, tmp_path) -> tuple[Path, dict[str, str]]:
    """Run one example; its output folder and its summary as ``{label: value}``."""
    needs = SCRIPTS[script]
    if needs and not (BENCH / needs).is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{BENCH / needs} is missing under CI=true", pytrace=False)
        pytest.skip(f"{BENCH / needs} is not here")
    out = Path(os.environ.get("TOPCAL_EXAMPLES_OUT") or tmp_path).resolve()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    ), TOPCAL_BENCH_DATA=str(BENCH), MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    stem = script.removesuffix(".py")
    assert (out / f"{stem}.png").stat().st_size > 10_000  # a figure, not an empty canvas
    text = (out / f"{stem}.txt").read_text()
    assert text == done.stdout  # the summary is what the script printed
    return out, dict(line.split(": ", 1) for line in text.splitlines())


def number(text: str) -> float:
    return float(re.match(r"[-+0-9.e]+", text).group())


def test_quickstart(tmp_path):
    out, got = run("quickstart.py", tmp_path)
    assert got["classes"] == "11, samples: 46801"
    assert number(got["top-label NLL, kde-mon2 (in sample)"]) < number(
        got["top-label NLL, uncalibrated score / 10"]
    )
    assert 0 < number(got["Minor capsid at score 9"]) < 0.3  # the paper's worst class
    assert got["reloaded model predicts the same"] == "True"
    assert (out / "quickstart-model.json").stat().st_size > 1000


def test_sklearn_pipeline(tmp_path):
    _, got = run("sklearn_pipeline.py", tmp_path)
    assert number(got["accuracy"]) > 0.9
    assert number(got["top-label NLL, calibrated"]) < number(got["top-label NLL, raw"])


def test_pytorch_logits(tmp_path):
    _, got = run("pytorch_logits.py", tmp_path)
    raw = number(got["top-label NLL, uncalibrated"])
    assert number(got["top-label NLL, sts"]) < raw  # the over-trained network is over-confident
    assert number(got["top-label NLL, auto"]) < raw
    assert number(got["sts temperature"]) > 1


def test_imagenet_thresholds(tmp_path):
    _, got = run("imagenet_thresholds.py", tmp_path)
    assert got["classes"].startswith("1000,")
    raw = number(got["top-label NLL on the check rows, raw"])
    assert number(got["top-label NLL on the check rows, kde-mon2"]) < raw
    assert 0 < number(got["90% interval width, median"]) < 0.5
    assert number(got["check rows accepted"]) > 0.3
    # the guarantee is on the cut-offs' own rows; on fresh rows the precision stays near 0.9
    assert number(got["precision of the accepted check rows"]) > 0.87


def test_label_shift(tmp_path):
    _, got = run("label_shift.py", tmp_path)
    true = [float(v) for v in got["true use priors"].strip(" []").split()]
    est = [float(v) for v in got["estimated use priors"].strip(" []").split()]
    assert max(abs(a - b) for a, b in zip(true, est)) < 0.03
    before = number(got["top-label NLL on the use set, calibrated on the source mix"])
    assert number(got["top-label NLL on the use set, adapted"]) < before


def test_dask_fit(tmp_path):
    _, got = run("dask_fit.py", tmp_path)
    assert number(got["largest difference from the in-memory fit on the same statistics"]) == 0
    assert number(got["largest difference from the in-memory fit on the rows"]) < 1e-3
    assert number(got["top-label NLL, kde-mon2 fitted with Dask"]) < number(
        got["top-label NLL, raw"]
    )
    assert "confidence_lo" in got["output columns"]
