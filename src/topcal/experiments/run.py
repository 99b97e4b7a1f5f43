"""Summarising and writing the ensemble experiment, and running it end to end (step 5 of
:mod:`topcal.experiments.ensembles`)."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from .._fileio import atomic_write, write_text
from ..errors import ParameterError, TopcalError
from .ensembles import (
    METRICS,
    EnsembleResults,
    ExperimentConfig,
    draw_ensembles,
    evaluate_ensembles,
)
from .idx import load_mnist
from .networks import NetworkOutputs, network_outputs

__all__ = ["summarize", "write_outputs", "run_experiment"]


def summarize(results: EnsembleResults) -> dict:
    """Medians and quartiles over ensembles, plus the paper's two checks.

    Returns
    -------
    dict
        ``"metrics"``: {metric: {method: {"test1"|"test2": {class|"overall": {"median",
        "q25", "q75"}}}}}; ``"set2_vs_set1"``: per metric, how many (method, class) cells
        have a larger median on test set 2 than on test set 1 ("worse"), a smaller one
        ("better") or an equal one, the share of (ensemble, method, class) pairs with set 2
        worse, and per method the median over ensembles of the overall set 2 - set 1
        difference ("median_gap"; compare with the untuned "uncalibrated" score's gap, which
        measures how much the two sets differ without any tuning); ``"ranking"``: per metric
        and test set, methods ordered by their overall median, with the mean rank over
        classes of the per-class medians; ``"class_counts"``: per test set and class, the
        median TP, FP, low-score TP and low-score FP counts over ensembles; ``"accuracy"``:
        ensemble accuracy quartiles per test set.
    """
    v = results.values
    names = list(results.classes) + ["overall"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices of failed methods
        q25, med, q75 = np.nanpercentile(v, [25, 50, 75], axis=0)
    out: dict = {"metrics": {}, "set2_vs_set1": {}, "ranking": {}}
    for qi, metric in enumerate(METRICS):
        out["metrics"][metric] = {
            m: {
                f"test{s + 1}": {
                    c: {
                        "median": _f(med[j, s, qi, ci]),
                        "q25": _f(q25[j, s, qi, ci]),
                        "q75": _f(q75[j, s, qi, ci]),
                    }
                    for ci, c in enumerate(names)
                }
                for s in range(2)
            }
            for j, m in enumerate(results.methods)
        }
        out["set2_vs_set1"][metric] = _set2_vs_set1(v, med, qi, results.methods)
        out["ranking"][metric] = {
            f"test{s + 1}": _ranking(med[:, s, qi, :], results.methods) for s in range(2)
        }
    cmed = np.median(results.counts, axis=0)  # (2, 4, K)
    out["class_counts"] = {
        f"test{s + 1}": {
            c: {
                "tp": float(cmed[s, 0, ci]),
                "fp": float(cmed[s, 1, ci]),
                "tp_below_0.99": float(cmed[s, 2, ci]),
                "fp_below_0.99": float(cmed[s, 3, ci]),
            }
            for ci, c in enumerate(results.classes)
        }
        for s in range(2)
    }
    aq = np.percentile(results.accuracy, [25, 50, 75], axis=0)
    out["accuracy"] = {
        f"test{s + 1}": {
            "q25": float(aq[0, s]),
            "median": float(aq[1, s]),
            "q75": float(aq[2, s]),
        }
        for s in range(2)
    }
    out["failures"] = results.failures
    return out


def _set2_vs_set1(v, med, qi, methods) -> dict:
    """How metric ``qi`` moves from test set 1 to test set 2 (:func:`summarize`)."""
    diff = med[:, 1, qi, :-1] - med[:, 0, qi, :-1]  # methods x classes
    paired = v[:, :, 1, qi, :-1] - v[:, :, 0, qi, :-1]
    ok = np.isfinite(paired)
    return {
        "worse": int(np.sum(diff > 0)),
        "better": int(np.sum(diff < 0)),
        "equal": int(np.sum(diff == 0)),
        "share_of_ensembles_worse": _f(np.mean(paired[ok] > 0)) if ok.any() else None,
        "per_method_worse": {m: int(np.sum(diff[j] > 0)) for j, m in enumerate(methods)},
        # median over ensembles of (overall on set 2 - overall on set 1): the generalisation
        # gap
        "median_gap": {
            m: _f(np.nanmedian(v[:, j, 1, qi, -1] - v[:, j, 0, qi, -1]))
            if np.isfinite(v[:, j, :, qi, -1]).any()
            else None
            for j, m in enumerate(methods)
        },
    }


def _ranking(med_s, methods) -> list:
    """Methods by their overall median (``med_s``: methods x (classes + overall)), with the
    mean rank over classes of the per-class medians."""
    per_class = med_s[:, :-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ranks = (
            np.argsort(
                np.argsort(np.where(np.isnan(per_class), np.inf, per_class), axis=0), axis=0
            )
            + 1
        )
    order = np.argsort(np.where(np.isnan(med_s[:, -1]), np.inf, med_s[:, -1]))
    return [
        {
            "method": methods[j],
            "overall_median": _f(med_s[j, -1]),
            "mean_class_rank": float(ranks[j].mean()),
        }
        for j in order
    ]


def _f(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _summary_rows(summary: dict):
    for metric, by_method in summary["metrics"].items():
        for method, by_set in by_method.items():
            for test_set, by_class in by_set.items():
                for cls, st in by_class.items():
                    yield [metric, method, test_set, cls, st["median"], st["q25"], st["q75"]]


def write_outputs(
    out_dir,
    cfg: ExperimentConfig,
    outputs: NetworkOutputs,
    results: EnsembleResults,
    summary: dict,
    *,
    figures: bool = True,
) -> dict:
    """Write the run's files to ``out_dir``; return {kind: path}.

    * ``summary.json``: config, timings, network accuracies, :func:`summarize`;
    * ``medians.csv``: one row per metric, method, test set and class (median, q25, q75);
    * ``results.npz``: the per-ensemble arrays (for later analyses);
    * ``nll_*.png`` paired-bar figures (paper Figures 18-19) and ``curves.png`` (paper
      Figure 16) when ``figures``.
    """
    import csv

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TopcalError(
            f"cannot create output directory {str(out)!r}: {exc.strerror or exc}"
        ) from None
    paths = {}
    acc = outputs.accuracy()
    doc = {**_run_record(cfg, outputs, results, acc), **summary}
    paths["summary"] = out / "summary.json"
    # each file atomically: temp file + rename
    write_text(paths["summary"], json.dumps(doc, indent=1))
    paths["medians"] = out / "medians.csv"
    with atomic_write(paths["medians"]) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["metric", "method", "test_set", "class", "median", "q25", "q75"])
        for row in _summary_rows(summary):
            w.writerow(
                ["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in row]
            )
    paths["results"] = out / "results.npz"
    with atomic_write(paths["results"]) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(
            fh,
            values=results.values,
            methods=np.array(results.methods),
            classes=np.array(results.classes),
            metrics=np.array(METRICS),
            ensembles=results.ensembles,
            accuracy=results.accuracy,
            counts=results.counts,
            network_accuracy=acc,
        )
    if figures:
        from . import plots

        paths.update(plots.write_figures(out, results, summary, outputs, cfg))
    return paths


def _run_record(cfg, outputs, results, acc) -> dict:
    """The run's configuration, versions, timings and network accuracies (``summary.json``)."""
    import sys

    from .._version import __version__

    net_acc = {
        f"test{s + 1}": {
            "q25": float(np.percentile(acc[:, s], 25)),
            "median": float(np.median(acc[:, s])),
            "q75": float(np.percentile(acc[:, s], 75)),
            "min": float(acc[:, s].min()),
            "max": float(acc[:, s].max()),
        }
        for s in range(2)
    }
    versions = {
        "topcal": __version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }
    if "torch" in sys.modules:
        versions["torch"] = sys.modules["torch"].__version__
    return {
        "config": cfg.to_dict(),
        "versions": versions,
        "n_networks_trained_now": len(outputs.trained),
        "train_seconds": outputs.train_seconds,
        "evaluate_seconds": results.seconds,
        "cache_dir": outputs.cache_dir,
        "network_accuracy": net_acc,
    }


def run_experiment(
    cfg: ExperimentConfig,
    out_dir,
    *,
    cache_root=None,
    device: str = "auto",
    threads: int | None = None,
    chunk: int | None = None,
    figures: bool = True,
    progress: bool = True,
) -> dict:
    """The whole experiment: networks (cached), ensembles, evaluation, files.

    Returns
    -------
    dict
        ``{"summary": dict, "paths": {kind: Path}, "outputs": NetworkOutputs, "results":
        EnsembleResults, "config": ExperimentConfig}`` (the config with its method list
        filled in).
    """
    from ..calibrators import available_methods, get_class

    # the paper's methods; auto (a cross-validated choice among them) is left out: it would
    # refit every candidate K times per ensemble
    methods = (
        tuple(m for m in available_methods() if get_class(m).in_paper)
        if cfg.methods is None
        else tuple(cfg.methods)
    )
    if not methods:
        raise ParameterError("no methods to evaluate; pass --methods a,b,c")
    for name in methods:
        get_class(name)  # an unknown name fails now, not after an hour of training
    cfg = replace(cfg, methods=methods)
    data = load_mnist(cfg.data_dir)
    cache_root = Path(out_dir) / "cache" if cache_root is None else Path(cache_root)
    outputs = network_outputs(
        cfg,
        data,
        cache_root=cache_root,
        device=device,
        threads=threads,
        chunk=chunk,
        progress=progress,
    )
    ens = draw_ensembles(
        cfg.n_networks,
        cfg.n_ensembles,
        cfg.ensemble_size,
        np.random.SeedSequence([cfg.seed, 3]),
    )  # stream 3: the ensemble draw
    results = evaluate_ensembles(
        outputs, ens, methods, n_bins=cfg.n_bins, combine=cfg.combine, progress=progress
    )
    summary = summarize(results)
    paths = write_outputs(out_dir, cfg, outputs, results, summary, figures=figures)
    return {
        "summary": summary,
        "paths": paths,
        "outputs": outputs,
        "results": results,
        "config": cfg,
    }
