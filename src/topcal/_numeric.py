"""Small numeric helpers shared by the metrics and the calibrators.

They sit at the bottom of the layers (docs/architecture.md) so that the
metrics and the calibration methods use one definition each: the
probability clip, the clipped binary log loss, the weighted quantile bin
edges and the bin index of a score.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PROB_CLIP", "binary_nll", "bin_index", "weighted_quantile_edges"]

#: Confidences are clipped to [PROB_CLIP, 1 - PROB_CLIP] inside the NLL, so a
#: confident mistake costs at most -log(1e-12) ~ 27.6 nats instead of inf.
#: (scikit-learn's log_loss clips at the dtype's eps, ~2.2e-16; at 1e-12 the
#: upper clip 1 - 1e-12 is still resolved by float64, to ~1e-4 relative.)
PROB_CLIP = 1e-12


def binary_nll(tp, fp, conf):
    """Binary NLL of weights ``tp`` (label 1) and ``fp`` (label 0) at confidence ``conf``, elementwise.

    -[tp log c + fp log(1 - c)] with c clipped to [PROB_CLIP, 1 - PROB_CLIP].
    """
    c = np.clip(conf, PROB_CLIP, 1.0 - PROB_CLIP)
    return -(tp * np.log(c) + fp * np.log1p(-c))


def bin_index(edges: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Index i of the bin (edges[i], edges[i+1]] holding each score.

    Scores at or below edges[0] go to bin 0, above edges[-1] to the last bin.
    """
    return np.clip(np.searchsorted(edges, score, side="left") - 1, 0, len(edges) - 2)


def weighted_quantile_edges(score: np.ndarray, weight: np.ndarray, n_bins: int, lo: float, hi: float) -> np.ndarray:
    """Edges of ``n_bins`` bins holding (as near as ties allow) equal weight.

    Interior edges are the weighted quantiles j / n_bins of the scores; equal
    edges (heavy ties) are merged, so fewer bins may result. The outer edges
    are the declared score range.
    """
    order = np.argsort(score, kind="stable")
    s, w = score[order], weight[order]
    keep = w > 0
    s, w = s[keep], w[keep]
    cw = np.cumsum(w)
    targets = cw[-1] * np.arange(1, n_bins) / n_bins
    inner = s[np.minimum(np.searchsorted(cw, targets, side="left"), s.size - 1)]
    edges = np.unique(np.concatenate([[lo], inner, [hi]]))
    return edges[(edges >= lo) & (edges <= hi)]
