"""Fixtures shared by the test modules (helpers to import live in _sim.py and _frames.py)."""

import pytest

from topcal.datasets import load_phanns


@pytest.fixture(scope="module")
def phanns():
    """The embedded PhANNs test set (binned counts, 10 classes, scores 0-10), loaded once per module."""
    return load_phanns()
