"""The paper's ensemble experiment (appendix "MNIST Training Details").

1. Split the official training images into a training set and test set 1 (seeded); the
   official test images are test set 2.
2. Train M networks (:mod:`topcal.experiments.mlp`) and cache each network's log-softmax
   outputs on both test sets (:class:`~topcal.experiments.networks.NetworkCache`), so an
   interrupted run resumes and later analyses reuse them.
3. Draw E ensembles of ``ensemble_size`` distinct networks; an ensemble's output is the
   softmax of its members' summed log-softmax outputs (:func:`combine_log_probs`).
4. For each ensemble, fit every method on test set 1 (each method tunes its own bandwidths,
   temperatures, awards or cut-offs there), evaluate NLL, ECE1 and ECE2 on test set 1 and
   test set 2.
5. Report medians and quartiles over ensembles per class and method
   (:mod:`topcal.experiments.run`: :func:`~topcal.experiments.run.summarize`,
   :func:`~topcal.experiments.run.write_outputs`,
   :func:`~topcal.experiments.run.run_experiment`).

This module holds the configuration, the ensemble draw and combination and the evaluation
(steps 1, 3, 4); the network cache and outputs (step 2) are in
:mod:`topcal.experiments.networks`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import DataError, DegenerateClassWarning, ParameterError, TopcalError
from .mlp import TrainConfig

__all__ = [
    "REGIMES",
    "METRICS",
    "COMBINE_RULES",
    "ExperimentConfig",
    "EnsembleResults",
    "combine_log_probs",
    "draw_ensembles",
    "evaluate_ensembles",
    "class_counts",
]

#: The paper's two training regimes and this project's defaults for them. ``steps`` are the
#: paper's; ``n_networks``/``n_ensembles`` are sized for a 2-core machine (the paper: 1,000
#: networks, 1,000 ensembles). The over-trained networks train with bfloat16 matrix products
#: by default: 25x more steps would otherwise take hours on two cores (see TrainConfig).
REGIMES = {
    "under": {"steps": 400, "precision": "float32", "n_networks": 40, "n_ensembles": 200},
    "over": {"steps": 10_000, "precision": "bfloat16", "n_networks": 12, "n_ensembles": 50},
}

#: Metrics reported for every method, in the order of the result arrays.
METRICS = ("nll", "ece1", "ece2")

#: A true positive with a top score below this counts as "low-score" in the fully-trained
#: check (the paper: "only four TP scores less than 0.99").
LOW_SCORE = 0.99


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that defines one run of the ensemble experiment.

    Attributes
    ----------
    data_dir : str
        Directory with the four MNIST-format IDX files.
    regime : {"under", "over"}
        Label of the run; sets the defaults of ``steps``, ``n_networks`` and ``n_ensembles``
        in :meth:`for_regime`.
    n_networks : int
        M, the number of trained networks.
    n_ensembles : int
        E, the number of ensembles drawn.
    ensemble_size : int, default 10
    train : TrainConfig
    n_test1 : int, default 10000
        Size of test set 1, split off the official training images.
    train_size : int or None
        Use only this many of the training-set images (None: all of them).
    seed : int, default 0
        Seeds the split, every network and the ensemble draw.
    methods : tuple of str or None
        Registered method names; None = every registered method at run time.
    n_bins : int, default 10
        Bins of ECE1 / ECE2.
    combine : {"product", "geometric"}, default "product"
        Ensemble rule (:func:`combine_log_probs`); the paper's is "product".
    """

    data_dir: str
    regime: str = "under"
    n_networks: int = 40
    n_ensembles: int = 200
    ensemble_size: int = 10
    train: TrainConfig = field(default_factory=TrainConfig)
    n_test1: int = 10_000
    train_size: int | None = None
    seed: int = 0
    methods: tuple[str, ...] | None = None
    n_bins: int = 10
    combine: str = "product"

    @classmethod
    def for_regime(
        cls, data_dir: str, regime: str = "under", **overrides
    ) -> "ExperimentConfig":
        """Config with the regime's defaults; ``overrides`` that are None are ignored.

        ``steps``, ``batch_size``, ``lr``, ``hidden`` and ``precision`` go to the
        TrainConfig.
        """
        if regime not in REGIMES:
            raise ParameterError(f"regime must be one of {list(REGIMES)}, got {regime!r}")
        d: dict[str, Any] = dict(REGIMES[regime])
        train_keys = {"steps", "batch_size", "lr", "hidden", "precision"}
        train_kw: dict[str, Any] = {k: d.pop(k) for k in ("steps", "precision")}
        for k, v in overrides.items():
            if v is None:
                continue
            if k in train_keys:
                train_kw[k] = v
            else:
                d[k] = v
        return cls(data_dir=str(data_dir), regime=regime, train=TrainConfig(**train_kw), **d)

    def __post_init__(self):
        for name in ("n_networks", "n_ensembles", "ensemble_size", "n_test1", "n_bins"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        if self.ensemble_size > self.n_networks:
            raise ParameterError(
                f"ensemble_size ({self.ensemble_size}) is larger than the number of "
                f"networks ({self.n_networks}); train more networks (--networks) or use "
                "smaller ensembles"
            )
        n_comb = math.comb(self.n_networks, self.ensemble_size)
        if self.n_ensembles > n_comb:
            raise ParameterError(
                f"only {n_comb} distinct ensembles of {self.ensemble_size} exist among "
                f"{self.n_networks} networks, but {self.n_ensembles} were asked for; lower "
                "--ensembles or train more networks"
            )
        if self.train_size is not None and self.train_size < 1:
            raise ParameterError(f"train_size must be >= 1 or None, got {self.train_size!r}")
        if self.regime not in REGIMES:
            raise ParameterError(f"regime must be one of {list(REGIMES)}, got {self.regime!r}")
        if self.combine not in COMBINE_RULES:
            raise ParameterError(
                f"combine must be one of {list(COMBINE_RULES)}, got {self.combine!r}"
            )

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        d = asdict(self)
        d["train"] = self.train.to_dict()
        d["methods"] = None if self.methods is None else list(self.methods)
        return d

    def network_key(self, fingerprint: str) -> dict:
        """What determines the trained networks (and nothing else): the cache key."""
        return {
            "data": fingerprint,
            "n_test1": self.n_test1,
            "train_size": self.train_size,
            "seed": self.seed,
            "train": self.train.to_dict(),
            "format": 1,
        }


# --------------------------------------------------------------- ensembling
#: Ensemble combination rules (see :func:`combine_log_probs`).
COMBINE_RULES = ("product", "geometric")


def combine_log_probs(member_log_probs, rule: str = "product") -> np.ndarray:
    """Ensemble log-probabilities: log softmax(sum_i log p_i) (or of the mean).

    The paper's "softmax of their summed log outputs": softmax(sum_i log p_i)_k = prod_i
    p_ik / sum_j prod_i p_ij, the members' probabilities multiplied and renormalised (a
    product of experts). Note that this is *not* the normalised geometric mean
    softmax(mean_i log p_i): it is that mean's logits times n, i.e. the geometric mean at
    temperature 1/n, so ten agreeing members give a much sharper (more over-confident) top
    score than any one of them. ``rule="geometric"`` gives the normalised geometric mean
    softmax(mean_i log p_i) instead, whose top scores stay on the members' scale. Both rules
    predict the same class.

    Parameters
    ----------
    member_log_probs : array-like of shape (n_members, n_samples, K)
    rule : {"product", "geometric"}, default "product"
        "product": the paper's softmax of the summed log outputs; "geometric": softmax of
        their mean.

    Returns
    -------
    ndarray of float64, shape (n_samples, K)
        Normalised log-probabilities (valid logits for :meth:`TopLabelData.from_logits`).
    """
    if rule not in COMBINE_RULES:
        raise ParameterError(
            f"combination rule must be one of {list(COMBINE_RULES)}, got {rule!r}"
        )
    z = np.asarray(member_log_probs, dtype=np.float64)
    if z.ndim != 3:
        raise DataError(
            "member log-probabilities must have shape (members, samples, classes), got "
            f"{z.shape}"
        )
    s = z.sum(axis=0) if rule == "product" else z.mean(axis=0)
    mx = s.max(axis=1, keepdims=True)
    return s - (mx + np.log(np.exp(s - mx).sum(axis=1, keepdims=True)))


def draw_ensembles(n_networks: int, n_ensembles: int, size: int, seed) -> np.ndarray:
    """E distinct ensembles, each ``size`` distinct networks out of ``n_networks``.

    Returns
    -------
    ndarray of int64, shape (n_ensembles, size)
        Each row sorted; no two rows equal.
    """
    total = math.comb(n_networks, size)
    if size > n_networks or n_ensembles > total:
        raise ParameterError(
            f"cannot draw {n_ensembles} distinct ensembles of {size} from {n_networks} "
            f"networks ({total} exist)"
        )
    rng = np.random.default_rng(seed)
    if total <= 100_000:
        from itertools import combinations

        allc = np.array(list(combinations(range(n_networks), size)), dtype=np.int64)
        return allc[np.sort(rng.choice(total, size=n_ensembles, replace=False))][
            rng.permutation(n_ensembles)
        ]
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < n_ensembles:
        row = tuple(sorted(rng.choice(n_networks, size=size, replace=False).tolist()))
        if row not in seen:
            seen.add(row)
            out.append(row)
    return np.array(out, dtype=np.int64)


# --------------------------------------------------------------- evaluation
@dataclass(frozen=True, eq=False)
class EnsembleResults:
    """Per-ensemble metrics of every method on both test sets.

    Attributes
    ----------
    values : ndarray of shape (E, n_methods, 2, 3, K + 1)
        ``values[e, j, s, q, k]``: ensemble e, method j, test set s (0 = set 1, 1 = set 2),
        metric q (:data:`METRICS`), class k (index K = overall). NaN where a method failed
        on an ensemble.
    methods : tuple of str
    classes : tuple of str
    ensembles : ndarray of int64, shape (E, size)
    accuracy : ndarray of shape (E, 2)
        Each ensemble's accuracy on test set 1 and 2.
    counts : ndarray of shape (E, 2, 4, K)
        Per ensemble, test set and class: TP, FP, low-score TP and low-score FP counts (top
        score < :data:`LOW_SCORE`).
    failures : dict
        Method name -> number of ensembles on which it raised a TopcalError (with the first
        message).
    seconds : float
        Wall time of the evaluation.
    """

    values: np.ndarray
    methods: tuple[str, ...]
    classes: tuple[str, ...]
    ensembles: np.ndarray
    accuracy: np.ndarray
    counts: np.ndarray
    failures: dict
    seconds: float


def class_counts(data) -> np.ndarray:
    """Per predicted class: TP, FP, TP with score < 0.99 and FP with score < 0.99; shape (4,
    K)."""
    k = data.n_classes
    low = data.score < LOW_SCORE
    return np.stack(
        [
            np.bincount(data.pred, weights=data.tp, minlength=k),
            np.bincount(data.pred, weights=data.fp, minlength=k),
            np.bincount(data.pred, weights=data.tp * low, minlength=k),
            np.bincount(data.pred, weights=data.fp * low, minlength=k),
        ]
    )


def _evaluate_one(outputs, members, methods, n_bins, failures, rule):
    from ..calibrators import paper_calibrator
    from ..evaluate import fit_quietly
    from ..metrics import bundle

    sets = outputs.ensemble_data(members, rule)
    k = len(outputs.classes)
    vals = np.full((len(methods), 2, len(METRICS), k + 1), np.nan)
    for j, name in enumerate(methods):
        try:
            # tiny classes of one ensemble among hundreds: their warnings are dropped (the
            # class counts are reported)
            model = fit_quietly(
                paper_calibrator(name), sets[0], collect=DegenerateClassWarning
            )
            for s, d in enumerate(sets):
                for q, m in enumerate(
                    bundle(d, model.predict(d), n_bins=n_bins, names=METRICS)
                ):
                    vals[j, s, q, :k] = m.per_class
                    vals[j, s, q, k] = m.overall
        except TopcalError as exc:
            n, first = failures.get(name, (0, str(exc)))
            failures[name] = (n + 1, first)
            vals[j] = np.nan
    acc = np.array([float(np.mean(d.pred == d.labels)) for d in sets])
    counts = np.stack([class_counts(d) for d in sets])
    return vals, acc, counts


def evaluate_ensembles(
    outputs,
    ensembles: np.ndarray,
    methods: Sequence[str],
    *,
    n_bins: int = 10,
    combine: str = "product",
    progress: bool = True,
) -> EnsembleResults:
    """Fit every method on each ensemble's test set 1; score it on test sets 1 and 2.

    Parameters
    ----------
    outputs : NetworkOutputs
    ensembles : ndarray of int, shape (E, size)
        Member indices (from :func:`draw_ensembles`).
    methods : sequence of str
        Registered method names.
    n_bins : int, default 10
        ECE bins.
    combine : {"product", "geometric"}, default "product"
        Ensemble rule (:func:`combine_log_probs`).
    progress : bool, default True
    """
    from ..calibrators import get_class

    if combine not in COMBINE_RULES:
        raise ParameterError(f"combine must be one of {list(COMBINE_RULES)}, got {combine!r}")
    methods = tuple(methods)
    for name in methods:
        get_class(name)  # unknown names fail here, with the list of options
    ens = np.asarray(ensembles, dtype=np.int64)
    if ens.ndim != 2 or ens.size == 0 or ens.min() < 0 or ens.max() >= outputs.n_networks:
        raise ParameterError(
            "ensembles must be a (E, size) array of network indices below "
            f"{outputs.n_networks}"
        )
    it = range(ens.shape[0])
    if progress:
        from .mlp import progress_bar

        it = progress_bar(iterable=it, desc="ensembles", unit="ens", leave=False)
    t0 = time.monotonic()
    failures: dict = {}
    vals, accs, counts = [], [], []
    for e in it:
        v, a, c = _evaluate_one(outputs, ens[e], methods, n_bins, failures, combine)
        vals.append(v)
        accs.append(a)
        counts.append(c)
    return EnsembleResults(
        np.stack(vals),
        methods,
        outputs.classes,
        ens,
        np.stack(accs),
        np.stack(counts),
        {k: {"ensembles": n, "first_error": msg} for k, (n, msg) in failures.items()},
        time.monotonic() - t0,
    )


# ------------------------------------------------------------------ summary
