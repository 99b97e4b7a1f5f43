"""Helpers of the tests that run README.md's and docs/*.md's code blocks as written.

* :func:`fences` / :func:`blocks`: the fenced code blocks of a page.
* :func:`commands`: the commands of a shell block, one per logical line (``\\`` continuations
  joined, comments and blank lines dropped), as the text a reader copies.
* :func:`run_topcal`: one ``topcal ...`` line, in a folder (the command's code in this process).
* :func:`exec_block`: one Python block, executed in a folder with a prepared namespace.
* Simulated classifier outputs in the CLI's file layouts: :func:`probs_frame` (``p_<class>``
  columns) and :func:`top_score_frame` (``pred``, ``score``); :func:`sklearn_split` for the
  scikit-learn blocks.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def fences(path) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block of a Markdown file, in order."""
    return re.findall(
        r"^```(\S*)\n(.*?)^```", Path(path).read_text(encoding="utf-8"), flags=re.S | re.M
    )


def blocks(path, lang) -> list[str]:
    """The bodies of the ``lang`` code blocks of a Markdown file."""
    return [body for lg, body in fences(path) if lg == lang]


def commands(block: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines
    dropped."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(
            r"(^|\s)#(\s.*)?$", "", line
        )  # a comment: '#' after a blank, at the end of the line
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


def run_topcal(command: str, cwd) -> subprocess.CompletedProcess:
    """Run one ``topcal ...`` command line in ``cwd``, split as a shell would; it must succeed
    cleanly.

    The command's own code runs in this process (``_cli.call``: ``topcal.cli.main`` with its own
    stdout, stderr, working folder and warnings): what a page promises is what the command does
    with the files it names; the console script around it (start-up, exit codes, signals) is
    tested by test_cli.py and the hostile files. ``XDG_CACHE_HOME`` is ``cwd/.cache`` (the
    experiment's network cache).
    """
    from _cli import call

    args = shlex.split(command)
    assert args[0] == "topcal", command
    r = call(*args[1:], cwd=cwd, env={"XDG_CACHE_HOME": str(Path(cwd) / ".cache")})
    assert r.returncode == 0, (command, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, (command, r.stderr[-3000:])
    return r


def exec_block(code: str, where, ns: dict | None = None, *, name="<doc>") -> dict:
    """Execute a Python block with the working directory ``where``; returns its namespace.

    Native thread pools (BLAS, OpenMP) run one thread: on a shared 2-core machine OpenMP's
    spinning threads slow scikit-learn's boosting 10x or more.
    """
    from threadpoolctl import threadpool_limits

    ns = {} if ns is None else ns
    cwd = os.getcwd()
    os.chdir(where)
    try:
        with warnings.catch_warnings(), threadpool_limits(limits=1):
            warnings.simplefilter("ignore")
            exec(compile(code, name, "exec"), ns)
    finally:
        os.chdir(cwd)
    return ns


def probs_frame(n, *, k=4, seed=0, labelled=True) -> pd.DataFrame:
    """A simulated classifier's probabilities (``p_c0``..) and, if ``labelled``, true classes
    (``label``)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 2.0
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = np.exp(logits / 1.5 - (logits / 1.5).max(1, keepdims=True))
    q /= q.sum(
        1, keepdims=True
    )  # labels from a flatter distribution: the reported p is over-confident
    y = (q.cumsum(1) > rng.random(n)[:, None]).argmax(1)
    df = pd.DataFrame({f"p_c{j}": p[:, j] for j in range(k)})
    if labelled:
        df["label"] = [f"c{j}" for j in y]
    return df


def top_score_frame(n, *, k=3, seed=0, labelled=True, priors=None, power=None) -> pd.DataFrame:
    """Top-score data (``pred``, ``score``, ``label``) with class-dependent miscalibration:
    P(right) = score ** power_k (default: powers 0.6 to 2.5); ``priors`` sets the predicted
    classes' frequencies."""
    rng = np.random.default_rng(seed)
    pred = rng.choice(k, n, p=priors)
    score = np.clip(rng.beta(4, 2, n), 1e-6, 1.0)
    power = np.linspace(0.6, 2.5, k) if power is None else np.asarray(power, dtype=float)
    right = rng.random(n) < score ** power[pred]
    label = np.where(right, pred, (pred + 1 + rng.integers(0, k - 1, n)) % k)
    df = pd.DataFrame({"pred": [f"c{j}" for j in pred], "score": score})
    if labelled:
        df["label"] = [f"c{j}" for j in label]
    return df


def sklearn_split(seed=0) -> dict:
    """``X_train, y_train, X_cal, y_cal, X_test, y_test`` of a 3-class problem (the names the docs'
    blocks use)."""
    from sklearn.datasets import make_classification
    from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: F401  (loads OpenMP before exec_block's limit)
    from sklearn.model_selection import train_test_split

    X, y = make_classification(
        n_samples=1500, n_features=12, n_informative=6, n_classes=3, random_state=seed
    )
    X_train, X_rest, y_train, y_rest = train_test_split(X, y, test_size=0.6, random_state=seed)
    X_cal, X_test, y_cal, y_test = train_test_split(
        X_rest, y_rest, test_size=0.5, random_state=seed
    )
    return {
        "X_train": X_train,
        "y_train": y_train,
        "X_cal": X_cal,
        "y_cal": y_cal,
        "X_test": X_test,
        "y_test": y_test,
    }
