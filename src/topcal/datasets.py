"""Data shipped with topcal."""

from __future__ import annotations

from importlib import resources

from .data import TopLabelData

__all__ = ["load_phanns"]


def load_phanns() -> TopLabelData:
    """The PhANNs test set of the paper, as per-class, per-bin TP/FP counts.

    PhANNs (Cantu et al., PLOS Comput. Biol. 2020) classifies phage proteins into 11
    functional classes; its score is the sum of the softmax outputs of an ensemble of 10
    networks, so ``score_range`` is (0, 10). The counts were recovered from the
    cumulative-confidence table the PhANNs repository publishes (Adrian-Cantu/PhANNs,
    ``web_server/test_set_stats.csv``, last the October 2020 version), which they reproduce
    bit-exactly: 46,801 samples, 40,080 correct, 100 bins (lo, lo + 0.1] per class. 20 of
    the 1,100 cells (all-TP bins above 9.2 in four classes, and one Collar false positive at
    5.8-6.0) are not pinned down by the published ratios; there the smoothest feasible split
    was chosen.

    Per-sample scores within a bin, the true class of false positives and the other ten
    entries of the score vector are not known, so methods needing the full vector
    (temperature scaling) cannot run on it.

    Returns
    -------
    TopLabelData
        Binned data, 11 classes x 100 bins, ``score_range=(0, 10)``.
    """
    from .io import read_frame
    import pandas as pd

    with resources.files("topcal").joinpath("_data/phanns_test_binned.csv").open("r") as fh:
        frame = pd.read_csv(fh)
    return read_frame(frame, score_range=(0.0, 10.0))
