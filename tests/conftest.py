"""Fixtures shared by the test modules (helpers to import live in _sim.py and _frames.py)."""

import os
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


@pytest.fixture(scope="module")
def phanns():
    """The embedded PhANNs test set (binned counts, 10 classes, scores 0-10), loaded once per
    module."""
    return load_phanns()


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
