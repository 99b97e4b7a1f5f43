"""Fixtures shared by the test modules (helpers to import live in _sim.py and _frames.py)."""

import contextlib
import io
import json
import os
import signal
import warnings

import pytest

from topcal.datasets import load_phanns

# Plain progress lines (stderr not a terminal) only in the tests that ask for them: elsewhere a
# command slowed past 10 s by a loaded machine would add lines to the stderr a test reads.
os.environ["TOPCAL_PROGRESS_SECONDS"] = "3600"

# An idle Dask cluster polls: its event loop ticks every 20 ms, the workers sample their own stacks
# every 10 ms and check memory every 100 ms. The session's cluster (below) idles for most of the run
# and burned about 8 CPU-seconds a minute per pytest worker (a tenth of `make test`); these slower
# polls (set before dask is imported, and inherited by the console scripts' own LocalClusters) cut
# that to about 1. No test depends on Dask's profiler or its polling rates.
for _key, _value in {
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "200ms",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "2s",
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "2s",
}.items():
    os.environ.setdefault(_key, _value)

# One native thread per pytest worker: `make test` runs two workers on the two cores, and each
# worker's OpenBLAS/OpenMP pool would otherwise start one thread per core that spins while it waits
# (measured on three BLAS-heavy test files at load 7: 47 -> 31 CPU-seconds, the same results). The
# variables reach the console scripts and Dask workers the tests start; threadpoolctl covers the
# libraries this process loaded before this file. A thread count the developer set is kept.
if not any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")):
    from threadpoolctl import threadpool_limits

    for _key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_key] = "1"
    _ONE_THREAD = threadpool_limits(limits=1)


@pytest.fixture(scope="module")
def phanns():
    """The embedded PhANNs test set (binned counts, 10 classes, scores 0-10), loaded once per
    module."""
    return load_phanns()


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal: progress is drawn there only."""

    def isatty(self):
        return True


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """``topcal demo -o DIR`` (``topcal.cli.main``, stderr a terminal, warnings ignored) run once
    for the whole run, shared by the pytest workers (a file lock: the first worker runs it, the
    others read it): ``(DIR, stdout, stderr)``. DIR is read-only to the tests (copy it to write).

    The demo fits every method on the PhANNs data and draws the all-methods report (about 25
    CPU-seconds); four tests in three files read its report and table.
    """
    import fcntl

    from topcal.cli import main

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this run
    where = root / "shared-demo"
    with open(root / "shared-demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = where / "done.json"
        if not done.exists():
            where.mkdir(exist_ok=True)
            out, err = io.StringIO(), _Terminal()
            with (
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")
                code = main(["demo", "-o", str(where / "demo-report")])
            done.write_text(
                json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
            )
        ran = json.loads(done.read_text())
    assert ran["code"] == 0, ran["stderr"][-3000:]
    return where / "demo-report", ran["stdout"], ran["stderr"]


@pytest.fixture(scope="session")
def cluster():
    """A real Dask ``LocalCluster`` (2 worker processes) and its client, started once for the whole
    run.

    Missing dask fails under ``CI=true`` (``make test`` installs the extra) and skips elsewhere.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - make test installs the extra
        if os.environ.get("CI") == "true":
            pytest.fail("dask is missing under CI=true; run 'make install'", pytrace=False)
        pytest.skip("the dask extra is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(lc)
    yield client
    client.close()
    lc.close()


@pytest.fixture(scope="session")
def cluster_address(cluster):
    """The scheduler address of :func:`cluster`, for ``--scheduler``."""
    return cluster.scheduler.address


@pytest.fixture
def signals_as_from_a_terminal():
    """Signals as a terminal's shell passes them on: the processes a test starts inherit the
    default SIGINT action and a signal mask that blocks none of SIGINT, SIGTERM, SIGHUP.
    A pytest run started in the background of a non-interactive shell ignores SIGINT, and a
    CI harness may start it with SIGHUP blocked; both survive exec, so the command under test
    would never see the signal. Python's SIGINT handler here (reset to the default at exec)
    and an unblocked mask for the test, the previous ones after it."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    signal.signal(signal.SIGINT, previous)
