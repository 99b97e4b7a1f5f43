"""README.md runs as written: every Python block, and every command of its shell blocks.

The quick-start block (``make demo``, ``make test``) is what CI itself runs, so it is checked for
its two lines only (running ``make test`` inside the tests would recurse). The other shell blocks
run line by line through the real ``topcal`` console script, in a folder holding the files they
name (a simulated classifier's outputs).
"""

import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TOPCAL = Path(sys.executable).with_name("topcal")


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_is_short_and_has_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    quick = blocks("sh")[0]
    assert [ln.split("#")[0].strip() for ln in quick.strip().splitlines()] == ["make demo", "make test"]
    # the one picture exists
    for img in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (ROOT / img).is_file(), img


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?:docs/)[^)#]+)", text):
        assert (ROOT / target).exists(), target


def _simulated_frame(n, k=4, seed=0, labelled=True):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 2.0
    y = np.array([rng.choice(k, p=np.exp(r / 1.5) / np.exp(r / 1.5).sum()) for r in logits])
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    df = pd.DataFrame({f"p_c{j}": p[:, j] for j in range(k)})
    if labelled:
        df["label"] = [f"c{j}" for j in y]
    return df


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split

    py = blocks("python")
    assert len(py) == 2
    X, y = make_classification(n_samples=1500, n_features=12, n_informative=6, n_classes=3, random_state=0)
    X_train, X_rest, y_train, y_rest = train_test_split(X, y, test_size=0.6, random_state=0)
    X_cal, X_test, y_cal, _ = train_test_split(X_rest, y_rest, test_size=0.5, random_state=0)
    monkeypatch.chdir(tmp_path)
    ns = {"X_train": X_train, "y_train": y_train, "X_cal": X_cal, "y_cal": y_cal, "X_test": X_test}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(py[0], "README.md", "exec"), ns)
    conf = ns["conf"]
    assert conf.shape == (len(X_test),) and np.all((conf > 0) & (conf < 1))

    ns2: dict = {}
    exec(compile(py[1], "README.md", "exec"), ns2)
    assert (tmp_path / "model.json").is_file()
    np.testing.assert_array_equal(ns2["same"].predict(ns2["data"]), ns2["conf"])


def test_readme_shell_blocks_run(tmp_path):
    _simulated_frame(1200, seed=1).to_csv(tmp_path / "preds.csv", index=False)
    _simulated_frame(300, seed=2, labelled=False).to_csv(tmp_path / "new.csv", index=False)
    commands = [ln.split("  #")[0].strip() for b in blocks("sh")[1:] for ln in b.strip().splitlines()]
    commands = [c for c in commands if c]
    assert commands and all(c.startswith("topcal ") for c in commands), commands
    env = dict(os.environ, MPLBACKEND="Agg")
    for c in commands:
        r = subprocess.run([str(TOPCAL), *shlex.split(c)[1:]], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300, env=env)
        assert r.returncode == 0, (c, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, (c, r.stderr)
    out = pd.read_csv(tmp_path / "new_calibrated.csv")
    assert {"pred", "confidence"} <= set(out.columns) and len(out) == 300
    assert (tmp_path / "my-report" / "index.html").is_file()


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_docs_pages_have_no_dangling_links(page):
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        if target.startswith("http"):
            continue
        assert (ROOT / "docs" / target).exists(), (page, target)
