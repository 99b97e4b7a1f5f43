"""Running the ``topcal`` command in tests: the real console script (:func:`cli`) or the same
command in this process (:func:`call`); check one-line errors, snapshot folders.

Shared by the hostile-input files (test_hostile_*.py) and the tests that drive the command line.
A console script costs about 1.2 CPU-seconds before it starts working (importing numpy, pandas and
scipy): :func:`call` is for the runs whose answer or files a test checks, :func:`cli` for what only
the process shows (the exit code and the one ``error:`` line with no traceback, signals, file-size
limits, start-up).
"""

import contextlib
import io
import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

TOPCAL = Path(sys.executable).with_name("topcal")


def cli(*args, cwd=None, fsize=None, timeout=180, process=False):
    """Run ``topcal ARGS``: in this process (:func:`call`: the console script is
    ``topcal.cli:main`` itself, so its exit code, stdout and stderr are the same, and an uncaught
    exception fails the test instead of printing a traceback) unless ``process`` is set or
    ``fsize`` caps the size of any file it writes (bytes) or the run uses the Dask engine: then the
    real console script, for what only a process shows (start-up, file-size limits).
    ``test_console_script_answers_as_main`` checks that both give the same answers."""
    # a Dask engine run keeps a process of its own: the client, its event loop and any cluster it
    # starts would outlive the call in this worker (a module's LocalCluster then failed to start)
    if fsize is None and not process and "dask" not in map(str, args):
        return call(*args, cwd=cwd)
    pre = None
    if fsize is not None:

        def pre():
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [str(TOPCAL), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=pre,
    )


def call(*args, cwd=None, env=None):
    """The command ``topcal ARGS`` run by :func:`topcal.cli.main` in this process, with its own
    stdout, stderr, working folder (``cwd``), extra environment variables (``env``) and a fresh
    interpreter's warning filters; returns a ``CompletedProcess`` as :func:`cli` does.

    An exception the command does not turn into an ``error:`` line propagates (the test fails with
    it) instead of becoming a traceback on stderr.
    """
    from topcal.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    saved = {k: os.environ.get(k) for k in env or {}}
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(),
        ):
            warnings.resetwarnings()  # python's defaults: shown once per place, these ignored
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning):
                warnings.simplefilter("ignore", category)
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                code = main(argv)
            except SystemExit as exc:  # --help, --version
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        os.chdir(here)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["topcal", *argv], code, out.getvalue(), err.getvalue())


def assert_error(r, *fragments):
    """Exit 2, one 'error:' line (the last line of stderr), no traceback, the fragments in it."""
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and r.stderr.rstrip().splitlines()[-1] == errors[0], r.stderr
    for f in fragments:
        assert f in errors[0], (f, errors[0])
    return errors[0]


def assert_ok(r):
    assert r.returncode == 0, (r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    return r


def snapshot(folder: Path) -> dict:
    """Every file under ``folder``: path -> (size, mtime_ns, bytes)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, p.read_bytes())
    return out
