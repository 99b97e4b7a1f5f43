"""Fuzz test of the command line over a generated corpus of malformed inputs (issue 10).

About 300 malformed data and model files, built by a seeded generator from valid ones (truncated,
cells replaced by junk, headers broken, odd types and shapes, edited and re-signed model files), go
through ``metrics``, ``fit``, ``apply`` and ``describe``. Every run must exit 0 or 2, never raise
(in process) or print a traceback (console script), and must not touch any file outside its output
folder. Most runs call ``main()`` in process (fast); a seeded sample runs the real console script.
"""

import contextlib
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from topcal.cli import main
from topcal.persist import canonical_json  # re-signing edited model files reaches the model parser

pytestmark = pytest.mark.e2e

TOPCAL = Path(sys.executable).with_name("topcal")

JUNK = [
    "",
    "nan",
    "inf",
    "-inf",
    "1e999",
    "-1",
    "2",
    "abc",
    "[1, 2]",
    "{}",
    "0x1F",
    "1,5",
    '"',
    "\u00e9\u6f22",
    "x" * 300,
    "True",
    "None",
    " ",
    "1e-320",
    "-0",
    "NaN",
    "p_",
    "0.5.5",
    "\t",
]


def _valid_frames(rng):
    n = int(rng.integers(3, 40))
    k = int(rng.integers(1, 5))
    names = [
        str(c)
        for c in rng.choice(["a", "b", "cat", "0", "1", "2", "10", "dog", "x y"], k, replace=False)
    ]
    p = rng.dirichlet(np.ones(k), n)
    lab = np.array(names)[rng.integers(0, k, n)]
    probs = pd.DataFrame({f"p_{c}": p[:, i] for i, c in enumerate(names)})
    probs["label"] = lab
    top = pd.DataFrame({"pred": np.array(names)[p.argmax(1)], "score": p.max(1), "label": lab})
    lo = np.round(rng.uniform(0, 0.5, n), 2)
    binned = pd.DataFrame(
        {
            "predicted_class": np.array(names)[rng.integers(0, k, n)],
            "bin_lo": lo,
            "bin_hi": lo + 0.5,
            "tp": rng.integers(0, 5, n),
            "fp": rng.integers(0, 5, n),
        }
    )
    return [probs, top, binned]


def _mutate_csv(text: str, rng) -> str:
    lines = text.splitlines()
    kind = int(rng.integers(0, 11))
    if kind == 0 and len(text) > 1:  # truncated anywhere
        return text[: int(rng.integers(0, len(text)))]
    if kind == 1:  # a cell replaced by junk
        i = int(rng.integers(1, len(lines)))
        cells = lines[i].split(",")
        cells[int(rng.integers(0, len(cells)))] = str(rng.choice(JUNK))
        lines[i] = ",".join(cells)
    elif kind == 2:  # a header name replaced
        cells = lines[0].split(",")
        cells[int(rng.integers(0, len(cells)))] = str(
            rng.choice(JUNK + ["label", "pred", "score", "p_a", "tp"])
        )
        lines[0] = ",".join(cells)
    elif kind == 3:  # a column dropped
        j = int(rng.integers(0, len(lines[0].split(","))))
        lines = [",".join(c for i, c in enumerate(ln.split(",")) if i != j) for ln in lines]
    elif kind == 4:  # ragged rows
        i = int(rng.integers(1, len(lines)))
        lines[i] = lines[i] + ",1,2" if rng.uniform() < 0.5 else lines[i].rsplit(",", 1)[0]
    elif kind == 5:  # only the header, or nothing
        return lines[0] + "\n" if rng.uniform() < 0.5 else ""
    elif kind == 6:  # binary junk
        return "".join(chr(int(c)) for c in rng.integers(1, 256, 200))
    elif kind == 7:  # every value of one column junk
        j = int(rng.integers(0, len(lines[0].split(","))))
        v = str(rng.choice(JUNK))
        lines = [lines[0]] + [
            ",".join(v if i == j else c for i, c in enumerate(ln.split(","))) for ln in lines[1:]
        ]
    elif kind == 8:  # numbers scaled out of range
        f = float(rng.choice([-1.0, 10.0, 1e300, 1e-300]))
        out = [lines[0]]
        for ln in lines[1:]:
            cells = []
            for c in ln.split(","):
                try:
                    cells.append(repr(float(c) * f))
                except ValueError:
                    cells.append(c)
            out.append(",".join(cells))
        lines = out
    elif kind == 9:  # duplicated rows and a duplicated column name
        lines = lines + lines[1:]
        lines[0] = lines[0] + "," + lines[0].split(",")[0]
        lines[1:] = [ln + ",0" for ln in lines[1:]]
    else:  # semicolons instead of commas, or a byte-order mark
        return text.replace(",", ";") if rng.uniform() < 0.5 else "\ufeff" + text
    return "\n".join(lines) + "\n"


def _npz_cases(folder: Path, rng):
    cases = {
        "complex": dict(probs=np.array([[0.9, 0.1], [0.2, 0.8]]) + 1j, labels=np.array([0, 1])),
        "labels2d": dict(probs=np.array([[0.9, 0.1], [0.2, 0.8]]), labels=np.array([[0], [1]])),
        "ragged": dict(
            pred=np.array(["a", "b", "a"]),
            score=np.array([0.5, 0.6]),
            label=np.array(["a", "b", "a"]),
        ),
        "probs3d": dict(probs=np.ones((2, 2, 2)) / 2),
        "classes_mismatch": dict(
            probs=np.array([[0.9, 0.1]]), classes=np.array(["a", "b", "c"]), labels=np.array(["a"])
        ),
        "empty": dict(probs=np.zeros((0, 2))),
        "bools": dict(
            probs=np.array([[True, False], [False, True]]), labels=np.array([True, False])
        ),
        "strings": dict(probs=np.array([["a", "b"], ["c", "d"]]), labels=np.array(["a", "b"])),
        "nan": dict(probs=np.array([[np.nan, 1.0], [0.5, 0.5]]), labels=np.array([0, 1])),
        "label_big": dict(probs=np.array([[0.9, 0.1], [0.2, 0.8]]), labels=np.array([0, 7])),
        "huge_ints": dict(
            pred=np.array([2**62, 1]), score=np.array([0.5, 0.6]), label=np.array([2**62, 1])
        ),
        "classes_dup": dict(
            probs=np.array([[0.9, 0.1]]), classes=np.array(["a", "a"]), labels=np.array(["a"])
        ),
        "binned_neg": dict(
            predicted_class=np.array(["a"]),
            bin_lo=np.array([0.2]),
            bin_hi=np.array([0.1]),
            tp=np.array([1.0]),
            fp=np.array([-1.0]),
        ),
    }
    paths = []
    for name, arrays in cases.items():
        path = folder / f"{name}.npz"
        np.savez(path, **arrays)
        paths.append(path)
    obj = folder / "object.npz"
    np.savez(obj, probs=np.array([[0.5, 0.5]], dtype=object), labels=np.array([None], dtype=object))
    paths.append(obj)
    (folder / "not.npz").write_bytes(bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    paths.append(folder / "not.npz")
    return paths


def _parquet_cases(folder: Path):
    cases = {
        "lists": pd.DataFrame({"pred": ["a", "b"], "score": [0.5, 0.6], "label": [["a"], ["b"]]}),
        "dicts": pd.DataFrame(
            {"pred": [{"a": 1}, {"b": 2}], "score": [0.5, 0.6], "label": ["a", "b"]}
        ),
        "nulls": pd.DataFrame({"pred": ["a", None], "score": [0.5, None], "label": [None, "b"]}),
        "bool_scores": pd.DataFrame(
            {"pred": ["a", "b"], "score": [True, False], "label": ["a", "b"]}
        ),
        "bytes": pd.DataFrame(
            {"pred": [b"a", b"\xff"], "score": [0.5, 0.6], "label": [b"a", b"b"]}
        ),
        "score_lists": pd.DataFrame(
            {"pred": ["a", "b"], "score": [[0.5], [0.6]], "label": ["a", "b"]}
        ),
        "ts": pd.DataFrame(
            {
                "pred": ["a", "b"],
                "score": pd.to_datetime(["2020-01-01", "2021-01-01"]),
                "label": ["a", "b"],
            }
        ),
    }
    paths = []
    for name, frame in cases.items():
        path = folder / f"{name}.parquet"
        frame.to_parquet(path)
        paths.append(path)
    return paths


def _model_cases(folder: Path, good: Path, rng):
    text = good.read_text()
    doc = json.loads(text)
    out = []

    def resign(d):
        d = json.loads(json.dumps(d))
        d["sha256"] = hashlib.sha256(canonical_json(d["model"]).encode()).hexdigest()
        return json.dumps(d)

    edits = [
        text[: len(text) // 2],
        text.replace('"format_version": 1', '"format_version": true'),
        text.replace('"format_version": 1', '"format_version": 1.0'),
        text.replace('"sha256"', '"x": 1e999, "sha256"'),
        text.replace('"sha256"', '"x": ' + "[" * 1000 + "]" * 1000 + ', "sha256"'),
        text.replace('"sha256"', '"x": NaN, "sha256"'),
        "[]",
        "null",
        "1e999",
        "\x00\x01",
        '{"format": "topcal-model"}',
    ]
    model = doc["model"]
    for key in list(model) + ["state"]:
        for value in (None, [], {}, "x", 1e308, -1, [[1]], True, "[" * 50):
            d = json.loads(text)
            d["model"][key] = value
            edits.append(resign(d))
    state = model["state"]
    if isinstance(state, dict):
        for key in state:
            for value in (None, [None], "x", [1e308] * 3, [], {"a": 1}):
                d = json.loads(text)
                d["model"]["state"][key] = value
                edits.append(resign(d))
    for _ in range(20):  # random number edits, re-signed
        d = json.loads(text)
        d["model"]["classes"] = [
            str(c) for c in rng.choice(["a", "b", "", "a"], int(rng.integers(0, 4)))
        ]
        d["model"]["score_range"] = [
            float(v) for v in rng.choice([0.0, 1.0, -1.0, 10.0, 1e-300], 2)
        ]
        edits.append(resign(d))
    for i, body in enumerate(edits):
        path = folder / f"model{i:03d}.json"
        path.write_text(body)
        out.append(path)
    return out


def _corpus(folder: Path):
    rng = np.random.default_rng(20261122)
    data_dir = folder / "in"
    data_dir.mkdir()
    files = []
    for i in range(170):
        frame = _valid_frames(rng)[i % 3]
        text = _mutate_csv(frame.to_csv(index=False), rng)
        path = data_dir / f"d{i:03d}.csv"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        files.append(path)
    files += _npz_cases(data_dir, rng)
    files += _parquet_cases(data_dir)
    good = _valid_frames(np.random.default_rng(1))[1]
    good["pred"] = good["pred"].astype(str)
    good_path = data_dir / "good.csv"
    good.to_csv(good_path, index=False)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert (
            main(["fit", str(good_path), "--method", "hist", "-o", str(folder / "good.json")]) == 0
        )
    models = _model_cases(data_dir, folder / "good.json", rng)
    return data_dir, files, models, folder / "good.json", good_path


def _state(folder: Path) -> dict:
    return {
        str(p): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _run_inprocess(args) -> int:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    assert code in (0, 2), (args, code, err.getvalue()[-1000:])
    if code == 2:
        assert err.getvalue().rstrip().splitlines()[-1].startswith("error: "), (
            args,
            err.getvalue()[-1000:],
        )
    return code


def _run_script(args) -> int:
    r = subprocess.run([str(TOPCAL), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 2), (args, r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, (args, r.stderr[-2000:])
    if r.returncode == 2:
        assert r.stderr.rstrip().splitlines()[-1].startswith("error: "), (args, r.stderr[-1000:])
    return r.returncode


@pytest.mark.heavy
def test_cli_fuzz_corpus(tmp_path):
    data_dir, files, models, good_model, good_data = _corpus(tmp_path)
    assert len(files) + len(models) >= 200
    out = tmp_path / "out"
    out.mkdir()
    before = _state(data_dir)
    rng = np.random.default_rng(7)
    runs = []
    for i, f in enumerate(files):
        runs += [
            ["metrics", f],
            ["fit", f, "--method", "hist", "-o", out / f"m{i}.json"],
            ["apply", good_model, f, "-o", out / f"o{i}.csv"],
        ]
    for i, m in enumerate(models):
        runs += [["describe", m], ["apply", m, good_data, "-o", out / f"a{i}.parquet"]]
    for f in [data_dir / "d000.csv", data_dir / "d001.csv", data_dir / "d002.csv"]:
        runs.append(["compare", f, "--methods", "hist,cum", "--folds", int(rng.integers(2, 6))])
    # issue 24's surfaces: update (whole and chunked), chunked apply, a column in two roles, a named
    # score
    # column beside probability columns, --folds with --in-sample
    for i, f in enumerate(files[:40]):
        if f.suffix != ".csv":
            continue
        runs += [
            ["update", good_model, f, "-o", out / f"u{i}.json"],
            ["update", good_model, f, "--chunk-rows", 3, "-o", out / f"uc{i}.json"],
            ["apply", good_model, f, "--chunk-rows", 2, "-o", out / f"oc{i}.csv"],
        ]
    for i, f in enumerate(files[:9]):
        runs += [
            ["metrics", f, "--column", "pred=label", "--column", "label=label"],
            ["metrics", f, "--column", "score=label"],
            ["compare", f, "--in-sample", "--folds", 3, "--methods", "hist"],
        ]
    # most runs in process (fast); a seeded sample of 10 through the real console script
    by_script = set(rng.choice(len(runs), 10, replace=False).tolist())
    codes = [
        (_run_script if i in by_script else _run_inprocess)(args) for i, args in enumerate(runs)
    ]
    # nothing outside the output folder was touched, and no temporary files are left anywhere
    assert _state(data_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.json", "in", "out"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    # the corpus exercises both outcomes
    assert codes.count(2) > 100 and codes.count(0) > 20
    assert all(
        c == 2 for c, args in zip(codes, runs) if "--in-sample" in args and "--folds" in args
    )


@pytest.mark.heavy
def test_cli_fuzz_new_surfaces(tmp_path):
    """Issue 24: huge and odd --param values, adapt's --seed/--bootstrap and -o onto its inputs,
    outputs onto
    devices, links, pipes, read-only files and folders. Exit 0 or 2, and nothing but the output
    folder changes."""
    import os

    rng = np.random.default_rng(24)
    data_dir = tmp_path / "in"
    data_dir.mkdir()
    frame = _valid_frames(np.random.default_rng(3))[0]
    while frame["label"].nunique() < 2:
        frame = _valid_frames(rng)[0]
    frame.to_csv(data_dir / "data.csv", index=False)
    frame.drop(columns="label").to_csv(data_dir / "use.csv", index=False)
    classes = [c[2:] for c in frame.columns if c.startswith("p_")]
    (data_dir / "p.csv").write_text(
        "class,prior\n" + "".join(f"{c},{1 / len(classes)}\n" for c in classes)
    )
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert (
            main(
                [
                    "fit",
                    str(data_dir / "data.csv"),
                    "--method",
                    "hist",
                    "-o",
                    str(data_dir / "m.json"),
                ]
            )
            == 0
        )
    (data_dir / "target.csv").write_text("the user's")
    (data_dir / "link.csv").symlink_to(data_dir / "target.csv")
    os.mkfifo(data_dir / "fifo.csv")
    (data_dir / "ro.csv").write_text("read only")
    os.chmod(data_dir / "ro.csv", 0o444)
    (data_dir / "folder.csv").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    before = _state(data_dir)
    huge = [
        "1" + "0" * 310,
        "-1" + "0" * 310,
        "1" + "0" * 5000,
        "1e999",
        "-0",
        "NaN",
        "[]",
        "{}",
        "null",
        "true",
        "0.5",
        "7",
        "-3",
        '"auto"',
    ]
    params = [
        ("hist", "n_bins"),
        ("hist", "shrinkage"),
        ("kde", "bandwidth"),
        ("bts", "max_iter"),
        ("auto", "folds"),
        ("auto", "seed"),
        ("cum-opt", "shrinkage"),
        ("kde-mon2", "shrinkage"),
    ]
    # outputs topcal must refuse: links, pipes, read-only files, folders, a device (and each
    # command's inputs)
    special = [data_dir / n for n in ("link.csv", "fifo.csv", "ro.csv", "folder.csv")] + [
        Path("/dev/null")
    ]
    runs = []
    for i in range(40):
        method, name = params[int(rng.integers(len(params)))]
        runs.append(
            [
                "fit",
                data_dir / "data.csv",
                "--method",
                method,
                "--param",
                f"{name}={rng.choice(huge)}",
                "-o",
                out / f"f{i}.json",
            ]
        )
    for i in range(30):
        seed = str(rng.choice(["-1", "0", "4294967296", "1" + "0" * 310]))
        boot = str(rng.choice(["0", "-1", "99999999999999999999", "2"]))
        extra = ["--priors", data_dir / "p.csv"] if rng.uniform() < 0.3 else [data_dir / "use.csv"]
        targets = special + [data_dir / "m.json", extra[-1]]
        target = (
            targets[int(rng.integers(len(targets)))] if rng.uniform() < 0.6 else out / f"a{i}.json"
        )
        runs.append(
            [
                "adapt",
                data_dir / "m.json",
                *extra,
                "--seed",
                seed,
                "--bootstrap",
                boot,
                "-o",
                target,
            ]
        )
    for target in special + [data_dir / "use.csv", data_dir / "m.json"]:
        runs.append(["apply", data_dir / "m.json", data_dir / "use.csv", "-o", target])
    for target in special + [data_dir / "data.csv"]:
        runs.append(["fit", data_dir / "data.csv", "--method", "hist", "-o", target])
    by_script = set(rng.choice(len(runs), 6, replace=False).tolist())
    codes = [
        (_run_script if i in by_script else _run_inprocess)(args) for i, args in enumerate(runs)
    ]
    assert _state(data_dir) == before
    assert (data_dir / "link.csv").is_symlink() and (data_dir / "folder.csv").is_dir()
    assert not [p for p in [*data_dir.iterdir(), *out.iterdir()] if "topcal-partial" in p.name]
    assert codes.count(2) > 60 and codes.count(0) > 5
