"""Fitting several methods and comparing their metrics."""

from __future__ import annotations

import warnings

from .calibrators import available_methods, calibrator, get_class
from .data import TopLabelData
from .errors import DegenerateClassWarning
from .metrics import brier, ece1, ece2, nll

__all__ = ["compare_methods", "evaluate"]


def evaluate(data: TopLabelData, confidence, *, n_bins: int = 10) -> dict:
    """NLL, Brier, ECE1, ECE2 of ``confidence`` on ``data`` as ClassMetric dicts."""
    return {
        m.name: m.to_dict()
        for m in (nll(data, confidence), brier(data, confidence), ece1(data, confidence, n_bins=n_bins),
                  ece2(data, confidence, n_bins=n_bins))
    }


def compare_methods(data: TopLabelData, methods=None, *, eval_data: TopLabelData | None = None,
                    n_bins: int = 10) -> dict:
    """Fit each method on ``data`` and evaluate it on ``eval_data`` (default: ``data``).

    Methods that need the full score vector are skipped (and listed under
    ``"skipped"``) when ``data`` has only top scores.

    Returns
    -------
    dict
        ``{"methods": {name: {metric: {"overall", "per_class"}}}, "skipped": [...]}``
    """
    names = list(available_methods()) if methods is None else list(methods)
    target = data if eval_data is None else eval_data
    out: dict = {"methods": {}, "skipped": []}
    for name in names:
        cls = get_class(name)
        if cls.needs_full and not (data.has_full and target.has_full):
            out["skipped"].append(name)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            model = calibrator(name).fit(data)
        out["methods"][name] = evaluate(target, model.predict(target), n_bins=n_bins)
    return out
