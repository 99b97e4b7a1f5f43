"""Running the real ``topcal`` console script in tests: run, check one-line errors, snapshot
folders.

Shared by the hostile-input files (test_hostile_*.py) and the tests that drive the command line.
"""

import resource
import subprocess
import sys
from pathlib import Path

TOPCAL = Path(sys.executable).with_name("topcal")


def cli(*args, cwd=None, fsize=None, timeout=180):
    """Run the console script; ``fsize`` caps the size of any file it writes (bytes)."""
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
