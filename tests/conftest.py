"""Fixtures shared by the test modules (helpers to import live in _sim.py and _frames.py)."""

import os
import warnings

import pytest

from topcal.datasets import load_phanns

# Plain progress lines (stderr not a terminal) only in the tests that ask for them: elsewhere a
# command slowed past 10 s by a loaded machine would add lines to the stderr a test reads.
os.environ["TOPCAL_PROGRESS_SECONDS"] = "3600"


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
