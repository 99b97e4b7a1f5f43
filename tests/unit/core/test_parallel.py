"""Work on threads whose draws stay in one stream (topcal._parallel)."""

import numpy as np
import pytest

from topcal._parallel import available_cpus, in_threads


def test_in_threads_keeps_the_draw_order_and_raises_a_worker_error():
    """The draws are made in turn from one stream and each result keeps its place, on any
    number of threads; a worker's error reaches the caller."""
    def run(threads):
        rng = np.random.default_rng(5)
        return in_threads(
            lambda x: np.sort(x)[::-1], lambda: rng.random(50), 9, threads, "t", " x"
        )

    loop_rng = np.random.default_rng(5)
    loop = [np.sort(loop_rng.random(50))[::-1] for _ in range(9)]
    for threads in (1, 2, 3, 20):
        got = run(threads)
        assert len(got) == 9 and all(np.array_equal(a, b) for a, b in zip(got, loop))

    def fails(x):
        if x > 2:
            raise ValueError("item 3 failed")
        return x

    it = iter(range(6))
    with pytest.raises(ValueError, match="item 3 failed"):
        in_threads(fails, lambda: next(it), 6, 2, "t", " x")


def test_in_threads_with_a_bar_and_the_cpus():
    """A named bar counts the items; the CPUs are at least one."""
    got = in_threads(lambda x: x * 2, iter(range(4)).__next__, 4, 2, "doubling", " items")
    assert got == [0, 2, 4, 6]
    assert available_cpus() >= 1
