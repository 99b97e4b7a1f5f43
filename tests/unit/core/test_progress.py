"""Progress bars (issue 26, item 5): on stderr when it is a terminal, never when piped, never with
--quiet."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

from _frames import probs_frame

pytestmark = pytest.mark.e2e

TOPCAL = Path(sys.executable).with_name("topcal")


def on_terminal(*args, timeout=180) -> tuple[int, str]:
    """Run the console script with stderr on a pseudo-terminal (stdout piped); (exit code, what
    stderr showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(
        slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0)
    )  # a terminal 100 columns wide
    proc = subprocess.Popen(
        [str(TOPCAL), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError("the command wrote nothing for too long")
        try:
            data = os.read(master, 65536)
        except OSError:  # the slave side closed: the process is done
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.stdout.read()
    proc.stdout.close()
    return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8", "replace")


def piped(*args, timeout=180):
    return subprocess.run(
        [str(TOPCAL), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "d.csv"
    probs_frame(3000, K=3).to_csv(path, index=False)
    return path


def test_auto_fit_shows_its_cross_validation_on_a_terminal(data_csv, tmp_path):
    code, err = on_terminal("fit", data_csv, "-o", tmp_path / "m.json")
    assert code == 0, err
    assert "auto: cross-validation" in err and "fits" in err  # one step per fold and candidate


def test_auto_fit_is_silent_when_piped(data_csv, tmp_path):
    r = piped("fit", data_csv, "-o", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    assert "cross-validation" not in r.stderr and "\r" not in r.stderr


def test_quiet_silences_the_bar_on_a_terminal(data_csv, tmp_path):
    code, err = on_terminal("fit", data_csv, "--quiet", "-o", tmp_path / "m.json")
    assert code == 0, err
    assert "cross-validation" not in err and "\r" not in err
    code, err = on_terminal("compare", data_csv, "--methods", "hist,bts", "-q")
    assert code == 0 and "cross-fitting" not in err and "\r" not in err


def test_compare_and_streamed_fit_show_bars_on_a_terminal(data_csv, tmp_path):
    code, err = on_terminal("compare", data_csv, "--methods", "hist,bts")
    assert code == 0, err
    assert (
        "cross-fitting" in err and "fits" in err and "fold 5/5" in err
    )  # the bar and the step lines
    code, err = on_terminal(
        "fit", data_csv, "--method", "hist", "--chunk-rows", 500, "-o", tmp_path / "s.json"
    )
    assert code == 0, err
    assert "reading" in err and "rows" in err
    r = piped("fit", data_csv, "--method", "hist", "--chunk-rows", 500, "-o", tmp_path / "s2.json")
    assert r.returncode == 0 and "reading" not in r.stderr


def test_every_command_takes_quiet():
    import argparse

    from topcal.cli import build_parser

    def leaves(parser, path=()):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
        for a in subs:
            for name, p in a.choices.items():
                yield from leaves(p, (*path, name))

    found = list(leaves(build_parser()))
    assert len(found) > 8
    for path, p in found:
        assert "--quiet" in p._option_string_actions, path


def test_library_bars_follow_the_terminal_and_quiet(monkeypatch):
    from topcal import _progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    for _ in _progress.bar(range(3), desc="bootstrap"):
        pass
    assert "bootstrap" in term.getvalue()
    old = _progress.set_quiet(True)
    try:
        term.seek(0)
        term.truncate()
        assert list(_progress.bar(range(3), desc="silent")) == [0, 1, 2]  # still iterates
        _progress.write("a line")
        assert term.getvalue() == ""
    finally:
        _progress.set_quiet(old)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    b = _progress.bar(total=4, desc="x")
    b.update(4)
    b.close()
    assert sys.stderr.getvalue() == "" and b.n == 4


def test_adapt_bootstrap_and_safety_simulation_bars_on_a_terminal(monkeypatch):
    import topcal
    from topcal import _progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), 2000)
    labels = rng.integers(0, 3, 2000)
    model = topcal.calibrator("hist").fit(probs, labels)
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert _progress.enabled()
    use = topcal.TopLabelData.from_probs(probs[:500])
    model.adapt(use, n_bootstrap=5)  # no shift: the safety step chooses 0, no resample runs
    assert "safety simulation" in term.getvalue() and "use sets" in term.getvalue()  # issue 34
    assert "bootstrap" not in term.getvalue()
    model.adapt(use, n_bootstrap=5, shrink=0.5)  # a given factor: the resamples run
    assert "bootstrap" in term.getvalue() and "resamples" in term.getvalue()


@pytest.mark.heavy
def test_long_runs_print_plain_lines_when_stderr_is_a_file(data_csv, tmp_path, monkeypatch):
    """Issue 34: with stderr redirected (CI, nohup, 2> log), a long run still says it is alive,
    a line at most every TOPCAL_PROGRESS_SECONDS (the suite sets an hour; this test 0.3 s);
    --quiet silences it."""
    env = {**os.environ, "TOPCAL_PROGRESS_SECONDS": "0.3"}
    log = tmp_path / "err.log"
    with open(log, "w") as err:
        r = subprocess.run(
            [str(TOPCAL), "fit", str(data_csv), "-o", str(tmp_path / "m.json")],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            timeout=300,
        )
    text = log.read_text()
    assert r.returncode == 0, text
    lines = [ln for ln in text.splitlines() if ln.startswith("topcal")]
    assert len(lines) >= 2, text  # the cross-validation's plain lines, or the heartbeat
    assert "\r" not in text and "\x1b" not in text  # no terminal bar drawn into a file
    r = subprocess.run(
        [str(TOPCAL), "fit", str(data_csv), "-q", "-o", str(tmp_path / "q.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0 and not any(ln.startswith("topcal") for ln in r.stderr.splitlines())
    bad = {**os.environ, "TOPCAL_PROGRESS_SECONDS": "soon"}
    r = subprocess.run(
        [str(TOPCAL), "describe", str(tmp_path / "m.json")],
        capture_output=True,
        text=True,
        env=bad,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "TOPCAL_PROGRESS_SECONDS" in r.stderr


def test_plain_lines_and_heartbeat_in_the_library(monkeypatch):
    import time as _time

    from topcal import _progress

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    old = _progress.set_plain(0.05)
    try:
        assert _progress.plain()
        with _progress.heartbeat("fit"):
            _time.sleep(0.3)
        assert "topcal fit: working" in err.getvalue()
        b = _progress.bar(total=3, desc="cross-validation", unit=" fits")
        _time.sleep(0.06)
        b.update(2)
        assert "topcal: cross-validation: 2/3 fits" in err.getvalue()
        _progress.set_quiet(True)
        err.truncate(0)
        err.seek(0)
        _time.sleep(0.06)
        _progress.write("quiet now")
        assert err.getvalue() == ""
    finally:
        _progress.set_quiet(False)
        _progress.set_plain(old)
    assert not _progress.plain()  # the library alone prints no plain lines
