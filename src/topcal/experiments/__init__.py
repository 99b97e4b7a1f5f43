"""The paper's experiments (needs the ``experiments`` extra: torch, tqdm).

:mod:`~topcal.experiments.ensembles` reproduces the appendix "MNIST Training Details": MLP
ensembles on MNIST-format data with two test sets and medians over many ensembles (``topcal
experiment ensembles``). Importing this package does not import torch; training does.
"""

from .ensembles import (
    COMBINE_RULES,
    METRICS,
    REGIMES,
    EnsembleResults,
    ExperimentConfig,
    class_counts,
    combine_log_probs,
    draw_ensembles,
    evaluate_ensembles,
)
from .idx import MnistData, load_mnist, read_idx, split_train_test1, write_idx
from .mlp import TrainConfig
from .networks import NetworkCache, NetworkOutputs, network_outputs
from .run import run_experiment, summarize, write_outputs

__all__ = [
    "COMBINE_RULES",
    "METRICS",
    "REGIMES",
    "EnsembleResults",
    "ExperimentConfig",
    "MnistData",
    "NetworkCache",
    "NetworkOutputs",
    "TrainConfig",
    "class_counts",
    "combine_log_probs",
    "draw_ensembles",
    "evaluate_ensembles",
    "load_mnist",
    "network_outputs",
    "read_idx",
    "run_experiment",
    "split_train_test1",
    "summarize",
    "write_idx",
    "write_outputs",
]
