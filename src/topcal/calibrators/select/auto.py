"""``auto``: the simplest candidate whose cross-validated NLL is within noise of the best.

Candidates (default), in order of simplicity (:data:`~.rules.TIERS`):

0. ``uncalibrated``: the raw score;
1. one parametric curve for all classes: ``pooled-platt``, ``pooled-beta`` and, with full
   score vectors, ``sts`` (one temperature);
1.5. one non-parametric curve for all classes: ``pooled-hist`` (``pooled-kde-mon2`` by
   ``candidates=``: :data:`~.rules.DEFAULT_CANDIDATES` says why; 2 or 3 parameters are simpler than
   15 bins or a kernel curve: within noise of each other, the parametric curve generalises
   better on ImageNet's 2-5 rows a class, docs/benchmarks.md);
2. per-class curves shrunk toward a pooled one: ``hier-platt``, ``hier-beta`` and the shrunk
   count methods ``kde-mon2``, ``hist``, ``cum-opt``; with full vectors ``vs`` (class-wise
   scales and biases of the whole vector shrunk toward one temperature);
2.25. ``vs-hier-platt``: ``hier-platt`` on ``vs``'s top-label confidence (full vectors, by
   default above ``sms``'s class limit only: below it ``sms`` did better held out);
2.5. ``sms``: ``vs`` plus a shrunk class-to-class matrix (full vectors, at most
   :attr:`~.vector.StructuredMatrixScaling.auto_max_classes` classes: above that its fit
   costs O(n K^2) a pass and its ridge leaves it at ``vs``);
3. unshrunk per-class fits: ``bts``, ``btswa`` and, with full vectors, ``tswa``, ``csts``
   (by default not above 1,000 classes where the median predicted class holds fewer than
   :data:`~.rules.UNSHRUNK_MIN_MEDIAN_SAMPLES` samples).

Every candidate is cross-fitted on the same seeded K folds of the fitting data
(:func:`topcal.data.kfold_split`: stratified by predicted class; binned counts dealt by a
multinomial draw, as ``topcal compare`` does), which gives every sample a held-out loss
under every candidate. The choice compares *paired* per-sample losses: with d_i the
difference between a candidate's loss and the best candidate's (smallest mean) on sample i,
the candidate's excess is mean(d) and its noise the standard error sd(d) / sqrt(N). ``auto``
takes, among the candidates whose excess is at most ``tolerance`` standard errors (default
:data:`~.rules.TOLERANCE` = 1: the one-standard-error rule of Breiman et al. 1984), the one of the
lowest tier, and within a tier the one with the smallest mean. So on few samples a simpler
fit that is as good as the best within noise wins over a richer one that won by chance, and
where the data can tell, the best wins. Why 1 and not 0.75: on the 32 cells of the auto-rule
grid (``benchmarks/bench_auto_tolerance.py``) 0.75 fixed one cell where a pooled curve
chosen at 0.96 SE generalised 9% worse, but the blend below fixes that cell at 1 SE too, and
on the full benchmark sets 0.75 lost 0.24% on DenseNet-BC-100 CIFAR-100 (docs/benchmarks.md,
"auto-blend"). The choice is global (one method for every class). A candidate that fails in
a fold is dropped (recorded with its error), never fatal.

**The blend** (``blend``, default :data:`~.rules.BLEND_GATE` = 1 standard error): from the same
out-of-fold confidences, convex weights for the choice and the two best other score
candidates (:func:`~.rules.plan_blend`, :class:`~.blend.Blend`: a mixture of their curves in
probability space). It replaces the single choice only where its out-of-fold NLL is lower
than the choice's by more than ``blend`` standard errors of the paired difference (the
weights are fitted on those same confidences, so the gate guards against their optimism);
``blend=None`` never blends. A full-vector choice (``sts``, ``tswa``, ``csts``) is never
blended: a blend refits from score statistics. Its components are fitted on all the data
like the choice; the model records the blend (methods, weights, out-of-fold gain and its SE)
beside the table.

**Large data** (``cv_rows``, default :data:`~.rules.CV_ROWS` = 100,000): per-sample data with more
rows makes its choice (and its blend's weights) on a stratified, seeded subsample of that
many rows (:func:`topcal.data.stratified_subsample`), then fits the choice on all the rows.
The choice's cost then stops growing with the data (at 10^6 rows x 10 classes auto took 88
s, 126 x per-class isotonic regression, before; docs/benchmarks.md), and 10^5 rows measure
NLL differences of about 0.001 nats (the standard errors in the table say how well). Binned
data always chooses on all its bins (its cost is its bins, not its counts). ``cv_rows=None``
always chooses on all the rows.

**The first look** (``screen``, :mod:`.staging`): before the K folds, one cheap fit of every
candidate; only those within 3 standard errors of its best get the K folds (``stages_``).

The model file records the choice, the best candidate, and every candidate's mean CV loss
with its standard error and the standard error of its paired difference to the best;
``topcal describe``, ``topcal compare`` and the report show them.
"""

from __future__ import annotations


import warnings
from typing import Any, cast

import numpy as np

from ..._params import Interval, NoneOr
from ...data import TopLabelData, stratified_subsample
from ...errors import DegenerateClassWarning, ParameterError, TopcalWarning
from .rules import (
    BLEND_GATE,
    CV_ROWS,
    DEFAULT_CANDIDATES,
    LARGE_SYSTEM_CANDIDATES,
    LARGE_SYSTEM_CLASSES,
    TOLERANCE,
    UNSHRUNK_MIN_MEDIAN_SAMPLES,
    Candidates,
    check_cv_table,
    choose,
    plan_blend,
    tabulate_cv,
    tier,
)
from ..base import Calibrator, to_jsonable
from ..context import FitContext
from .blend import Blend
from .crossfit import cross_fit, refit_start
from ..fullvector import fit_map, map_name
from . import staging
from ..registry import BASELINE, calibrator, fits_from_counts, get_class, register
from ..wrapper import Wrapper

__all__ = ["Auto"]


def _fit_unrepeated(model, data, keep: str, warm=None, same_rows: bool = False):
    """``model`` fitted on ``data`` (from ``warm``, fitted on these very rows where
    ``same_rows``) as auto's own model: auto's fit has said which classes are never
    predicted, so the model's own saying it again is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=".*never predicted in the fitting data",
            category=DegenerateClassWarning,
        )
        return model.fit(data, keep=keep, warm=warm, context=FitContext(same_rows=same_rows))


@register
class Auto(Wrapper):
    """Choose the calibration method by K-fold cross-validated top-label NLL.

    Parameters
    ----------
    candidates : list of str or None, default None
        Methods to choose from; None: :data:`~.rules.DEFAULT_CANDIDATES` that can run on the data
        (the full-vector ones only with full vectors; tswa not above 1,000 classes that
        outnumber half the rows).
    folds : int >= 2, default 5
        Cross-validation folds.
    seed : int >= 0, default 0
        Seed of the fold split.
    tolerance : float >= 0, default 1.0 (:data:`~.rules.TOLERANCE`)
        How many standard errors of the paired difference a simpler candidate may lose to
        the best by and still be chosen (0: the smallest mean always wins).
    blend : float >= 0 or None, default 1.0 (:data:`~.rules.BLEND_GATE`)
        Return a convex blend of the choice and the two best other score candidates
        (:class:`~.blend.Blend`, weights fitted on the out-of-fold confidences) where it
        beats the choice out of fold by more than this many standard errors of the paired
        difference (:func:`~.rules.plan_blend`; 0: any out-of-fold gain); None: always the single
        choice.
    cv_rows : int >= 100 or None, default 100000 (:data:`~.rules.CV_ROWS`)
        Per-sample data with more rows than this makes its choice (the cross-validation and
        the blend's weights) on a stratified, seeded subsample of this many rows
        (:func:`~topcal.data.stratified_subsample`, seed ``seed``); the choice is then
        fitted on all the rows. Binned data always uses all its bins. None: always all the
        rows.
    screen : int >= 100 or None, default 2000 (:data:`~.staging.SCREEN_ROWS`)
        Rows of the first look (:mod:`.staging`): every candidate fitted once on about this
        many rows and scored on up to 8 x as many others; only those within 3 standard
        errors of the best go on to the K-fold cross-validation. Skipped for binned data and
        for data with fewer than twice as many rows. None: every candidate gets the K folds.

    Attributes
    ----------
    method_ : str
        The chosen method.
    model_ : Calibrator
        The chosen method fitted on all the data (a :class:`~.blend.Blend` of it and others
        where ``blend_`` is set).
    blend_ : dict or None
        ``{"methods", "weights", "nll", "gain", "se"}`` of the blend (see
        :func:`~.rules.plan_blend`), or None where the single choice is returned.
    best_ : str
        The candidate with the smallest mean cross-validated NLL.
    cv_ : dict
        ``{method: {"nll": mean, "se": its standard error, "diff_se": standard error of the
        paired difference to the best, "per_class": [...], "error": str or None}}``:
        held-out NLL of every candidate (mean over samples; per class, mean over the class's
        positives: kept for the chosen method, the blend's members and ``uncalibrated``,
        None for the other candidates and for those that failed; older files hold every
        candidate's).
    cv_samples_ : float
        Samples the cross-validation ran on (fewer than ``fit_samples_`` where ``cv_rows``
        cut the data).
    fit_samples_ : float
        Samples of the data the choice was made for (the first fit's; an ``update`` adds
        samples to the model, not to this).
    stages_ : dict or None
        The first look (:func:`~.staging.record`: its samples, margin, best, and per
        candidate its first-look NLL and the stage it reached), or None where it did not run
        (older files included: every candidate reached the K folds).
    """

    in_paper = (
        # not one of the paper's methods (the paper-reproducing experiments leave it out)
        False
    )
    name = "auto"
    # the cross-validation table is evidence: the model file keeps it there
    _evidence_keys = ("cv", "cv_samples", "fit_samples")
    # fitted attributes that files of older versions, or an unblended choice, do not set
    model_: Calibrator | None = None
    blend_: dict | None = None
    refitted_from_: str | None = None
    rule_: str = "se"
    stages_: dict | None = None
    summary = (
        "the simplest candidate (uncalibrated, pooled, shrunk per-class, per-class) whose "
        f"K-fold cross-validated NLL is within {TOLERANCE:g} standard errors of the best"
    )
    _parameter_constraints = {
        "candidates": Candidates(),
        "folds": Interval(2, 100, integer=True),
        "seed": NoneOr(Interval(0, 2**32 - 1, integer=True)),
        "tolerance": Interval(0, 100),
        "blend": NoneOr(Interval(0, 100)),
        "cv_rows": NoneOr(Interval(100, None, integer=True)),
        "screen": NoneOr(Interval(100, None, integer=True)),
    }

    def __init__(
        self,
        *,
        candidates=None,
        folds: int = 5,
        seed: int = 0,
        tolerance: float = TOLERANCE,
        blend: float | None = BLEND_GATE,
        cv_rows: int | None = CV_ROWS,
        screen: int | None = staging.SCREEN_ROWS,
    ):
        self.candidates = candidates
        self.folds = folds
        self.seed = seed
        self.tolerance = tolerance
        self.blend = blend
        self.cv_rows = cv_rows
        self.screen = screen

    def _names(self, data: TopLabelData) -> list[str]:
        names = list(DEFAULT_CANDIDATES if self.candidates is None else self.candidates)
        run = [n for n in names if not get_class(n).needs_full or data.has_full]
        if self.candidates is None and data.n_classes > max(data.n_rows / 2, LARGE_SYSTEM_CLASSES):
            # tswa fits K awards and a temperature in one Newton system of (K + 1)^2
            # entries: with over 1,000 classes and more than half the rows that outgrows the
            # data (2,000 x 10^4: 28 x the input in memory), each award on under two rows.
            # Named, it runs.
            run = [n for n in run if n not in LARGE_SYSTEM_CANDIDATES]
        if self.candidates is None and data.n_classes > LARGE_SYSTEM_CLASSES:
            # unshrunk per-class fits on a sample or two a class (rules.py says why)
            tp, fp = data.class_counts()
            per = tp + fp
            if per.any() and np.median(per[per > 0]) < UNSHRUNK_MIN_MEDIAN_SAMPLES:
                run = [n for n in run if tier(n) < 3]
        if (
            self.candidates is None
        ):  # a default candidate may declare the most (sms) or fewest (vs-hier-platt) classes
            run = [
                n
                for n in run
                if vars(get_class(n)).get("auto_min_classes", 0)
                <= data.n_classes
                <= vars(get_class(n)).get("auto_max_classes", np.inf)
            ]
        if not run:
            raise ParameterError(
                f"auto: none of the candidates {names} can run on data without full score "
                "vectors; add a score method (kde-mon2, hist, ...) or bts/btswa"
            )
        return run

    def _fit(self, data: TopLabelData) -> None:
        names = self._names(data)
        self.rule_, self.stages_ = "se", None
        n_folds = int(self.folds)
        if data.n_samples < 2 * n_folds or (not data.is_binned and data.n_rows < 2 * n_folds):
            self._keep_uncalibrated(data, n_folds)
            return
        self.fit_samples_ = float(data.n_samples)
        choice = data
        if self.cv_rows is not None and not data.is_binned and data.n_rows > self.cv_rows:
            choice = stratified_subsample(data, int(self.cv_rows), seed=int(self.seed or 0))
        look = run = None  # the first look (staging.py), then the K folds for its contenders
        # the runs are appended where the caller asked for them (the report reuses them)
        record = None if self._context is None else self._context.runs
        if self.screen is not None and len(names) > 1:
            look = staging.first_look(
                choice,
                names,
                rows=int(self.screen),
                seed=self.seed or 0,
                folds=n_folds,
                record=record,
            )
        if look is not None:  # one contender left: the K folds cannot change the choice
            names, margin = staging.contenders(look[0], staging.MARGIN), staging.MARGIN
            first = 1 if staging.decisive(look[0], names, margin) else 2
            self.stages_ = staging.record(look[0], names, look[1], look[2], margin, first)
        if self.stages_ and self.stages_["decided"] == 1:
            cv, self.cv_samples_ = {n: look[0][n] for n in names}, look[2]
        else:
            run = cross_fit(
                choice,
                names,
                n_folds,
                seed=int(self.seed or 0),
                desc="auto: cross-validation",
                begin=look and look[3].warm,  # the all-data vs/sms from the first look's
                done=look and look[3],  # its fold, where it is the K folds' first
                record=record,
            )
            cv, self.cv_samples_ = tabulate_cv(run, names), float(choice.n_samples)
        best, self.best_ = choose(cv, float(self.tolerance))
        self.method_ = best
        self.cv_ = {n: cv[n] for n in names}
        self.blend_ = (
            None if self.blend is None or run is None else plan_blend(run, cv, best, self.blend)
        )
        # per class, only the losses of the model in use (the choice, its blend's members)
        # and of the baseline are kept: at 1,000 classes every candidate's were most of the
        # table
        keep = {best, BASELINE, *(self.blend_["methods"] if self.blend_ else ())}
        for n, v in self.cv_.items():
            if n not in keep:
                v["per_class"] = None
        # the vector map (fullvector.py) starts from the cross-validation's all-data fit of
        # it
        runs = [r for r in (run, look and look[3]) if r is not None]
        map_warm = runs[0].warm.get(map_name(data.n_classes)) if runs and data.has_full else None
        warm = refit_start(best if self.blend_ is None else None, run, look and look[3])
        # the K folds' all-data fit was made on these very rows: the final fit may take it
        # as is
        on_rows = set() if run is None or choice is not data else run.on_data
        same = warm is not None and best in on_rows
        map_same = map_warm is not None and map_name(data.n_classes) in on_rows
        del choice, look, run  # the folds, out-of-fold confidences: not held in the final fit
        # auto updates from its own score statistics, never from a chosen full-vector
        # method's (sts/csts keep no loss tables by default)
        model = (
            calibrator(best)
            if self.blend_ is None
            else Blend(methods=tuple(self.blend_["methods"]), weights=tuple(self.blend_["weights"]))
        )
        # the final model holds the evidence
        self.model_ = _fit_unrepeated(model, data, self._part_keep(), warm, same_rows=same)
        if self._map_wanted:
            self._vector = fit_map(self, data, map_warm, same_rows=map_same)

    def _keep_uncalibrated(self, data: TopLabelData, n_folds: int) -> None:
        """Too few samples to judge anything out of sample: doing nothing is the only safe
        choice."""
        warnings.warn(
            f"auto: {data.n_samples:g} samples are too few for {n_folds}-fold "
            f"cross-validation (at least {2 * n_folds} needed); keeping the uncalibrated "
            "score",
            DegenerateClassWarning,
            stacklevel=4,
        )
        self.method_ = self.best_ = "uncalibrated"
        self.cv_, self.blend_ = {}, None
        self.cv_samples_ = self.fit_samples_ = float(data.n_samples)
        self.model_ = _fit_unrepeated(calibrator("uncalibrated"), data, self._part_keep())

    def _refit(self, stats) -> None:
        """``update``: refit the chosen method from the merged statistics; keep the choice.

        Re-choosing would need the cross-validation to run again on all the data: fit
        ``auto`` again (from statistics: ``fit(stats.to_data())``, e.g. ``topcal fit
        --chunk-rows``; with full score vectors: in memory). The cross-validation table
        stays that of the original fit, and ``cv_samples_`` says how many samples it was run
        on.
        """
        cls = type(self.model_)  # the chosen method's class, or Blend (of score methods)
        params = self.model_.get_params()
        if not fits_from_counts(cls):
            # the full vector has no mergeable statistics: the best candidate that can be
            # refitted from them, by the first fit's cross-validation (a warning says which)
            new, table = staging.best_score_method(self.cv_), self.cv_
            if new in (None, BASELINE):  # the K folds held no other: the first look's best
                look = (self.stages_ or {}).get("table", {})
                if staging.best_score_method(look) not in (None, BASELINE):
                    new, table = staging.best_score_method(look), look
            if new is None:
                raise ParameterError(
                    f"auto chose {self.method_!r}, which recalibrates the full score "
                    "vector and has no mergeable statistics, and no score method ran in "
                    "its cross-validation; refit auto on all the data (old and new) "
                    "instead of updating"
                )
            warnings.warn(
                f"auto: {self.method_!r}, its choice, recalibrates the full score vector "
                f"and cannot be updated from statistics; the update refits {new!r}, the "
                "best score method in the first fit's cross-validation (NLL "
                f"{table[new]['nll']:.4g} vs {table[self.method_]['nll']:.4g}); refit "
                "auto on all the data to choose again",
                TopcalWarning,
                stacklevel=4,
            )
            self.refitted_from_ = self.method_
            self.method_, cls, params = new, get_class(new), {}
        data = stats.to_data()
        model = cls(**params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateClassWarning)
            model.fit(data, keep="model")
        self.model_ = model
        self.n_tp_, self.n_fp_ = data.class_counts()

    @property
    def inner_(self) -> Calibrator:  # type: ignore[override]  # read-only here (Wrapper allows it)
        """The chosen method, fitted on all the data (``model_``)."""
        return self.model_

    def summary_line(self) -> str:
        if self.refitted_from_:
            return (
                f"refitted {self.method_} instead of {self.refitted_from_}, which cannot be "
                "updated from statistics; see the warning"
            )
        if (
            float(self.n_tp_.sum() + self.n_fp_.sum()) > self.fit_samples_
        ):  # updated since the choice
            return (
                f"kept its choice {self.method_}; cross-validation from the first fit, on "
                f"{self.cv_samples_:g} samples (fit auto again to re-choose)"
            )
        line = f"chose {self.method_} by {int(self.folds)}-fold cross-validated NLL"
        if self.stages_ and self.stages_["decided"] == 1:
            line = f"chose {self.method_} at its first look (one split: the others far behind)"
        if self.cv_samples_ < self.fit_samples_:
            line += (
                f" on a stratified subsample of {self.cv_samples_:g} of its "
                f"{self.fit_samples_:g} samples"
            )
        b = self.blend_
        if b:
            line += (
                "; blended with "
                + ", ".join(f"{m} ({w:.2f})" for m, w in zip(b["methods"][1:], b["weights"][1:]))
                + f" (weight of {self.method_}: {b['weights'][0]:.2f}; out-of-fold NLL "
                f"{b['gain']:+.4f}, {abs(b['gain']) / b['se']:.1f} SE)"
            )
        return line

    def curve(self, k, score=None, *, n_points: int = 401):
        """The chosen method's curve (score methods, bts and btswa; see
        ScoreCalibrator.curve)."""
        self._check_fitted()
        if not self.model_.has_curve:
            raise ParameterError(
                f"auto chose {self.method_!r}, which recalibrates the score vector and has "
                "no curve of the score alone; plot its confidences against the score "
                "instead"
            )
        return cast(Any, self.model_).curve(k, score, n_points=n_points)  # has_curve models

    def describe(self) -> dict:
        d = super().describe()
        d["chosen"] = self.method_
        d["blend"] = self.blend_
        d["model"] = self.model_.describe()
        d["cross_validation"] = {
            "folds": 1 if self.stages_ and self.stages_["decided"] == 1 else int(self.folds),
            "seed": int(self.seed or 0),
            "samples": self.cv_samples_,
            "of_samples": self.fit_samples_,
            "rule": self.rule_text(),
            "best": self.best_,
            "nll": {n: v["nll"] for n, v in self.cv_.items()},
            "se": {n: v.get("se") for n, v in self.cv_.items()},
            "diff_se": {n: v.get("diff_se") for n, v in self.cv_.items()},
            "errors": {n: v["error"] for n, v in self.cv_.items() if v["error"]},
            "stages": self.stages_,
        }
        return d

    def choice(self) -> dict:
        """The choice, the best mean, the rule in words, the blend and the cross-validation
        table."""
        return {
            "chosen": self.method_,
            "best": self.best_,
            "rule": self.rule_text(),
            "blend": self.blend_,
            "table": self.cv_table(),
            "stages": self.stages_,
        }

    def rule_text(self) -> str:
        """How the method was chosen, in words (describe, compare and the report print it)."""
        if self.rule_ == "min":
            return "smallest cross-validated NLL"
        first = staging.rule_text(self.stages_)
        return (
            "simplest candidate within "
            f"{float(self.tolerance):g} standard "
            "error(s) of the best cross-validated NLL "
            "(paired per-sample differences)" + (f"; {first}" if first else "")
        )

    def cv_table(self) -> list[dict]:
        """Every candidate's row: method, tier, mean CV NLL, its SE, SE of the paired
        difference to the best, chosen/best flags, error, its weight in the blend (None: not
        blended), the stage it reached (None: no first look) and its first-look NLL; sorted
        by mean NLL (failed candidates, then those that stopped at the first look, last)."""
        b = self.blend_ or {"methods": [], "weights": []}
        weight = dict(zip(b["methods"], b["weights"]))
        rows = [
            {
                "method": n,
                "tier": tier(n),
                "nll": v["nll"],
                "se": v.get("se"),
                "diff_se": v.get("diff_se"),
                "chosen": n == self.method_,
                "best": n == self.best_,
                "error": v["error"],
                "blend_weight": weight.get(n),
            }
            for n, v in self.cv_.items()
        ]
        look = (self.stages_ or {}).get("table", {})
        for r in rows:
            r["stage"], r["first_nll"] = (2, look[r["method"]]["nll"]) if look else (None, None)
        rows += [
            {"method": n, "tier": tier(n), "nll": None, "se": None, "diff_se": None,
             "chosen": False, "best": False, "error": None, "blend_weight": None, "stage": 1,
             "first_nll": v["nll"]}
            for n, v in look.items() if v["stage"] == 1
        ]  # fmt: skip
        return sorted(
            rows,
            key=lambda r: (r["stage"] == 1, r["nll"] is None, r["nll"] or r["first_nll"] or 0),
        )

    def _describe_classes(self) -> list[dict]:
        out = []
        for i, _ in enumerate(self.classes_):
            row = {}
            for n, v in self.cv_.items():
                if v["per_class"] is not None:
                    row[f"cv_nll_{n}"] = v["per_class"][i]
            out.append(row)
        return out

    def _get_state(self) -> dict:
        state = {
            "method": self.method_,
            "model": self.model_.to_dict(),
            "cv": to_jsonable(self.cv_),
            "cv_samples": self.cv_samples_,
            "fit_samples": self.fit_samples_,
            "best": self.best_,
            "rule": self.rule_,
        }
        if self.refitted_from_:  # an update refitted another method than the choice
            state["refitted_from"] = self.refitted_from_
        if self.blend_:
            state["blend"] = to_jsonable(self.blend_)
        if self.stages_:
            state["stages"] = to_jsonable(self.stages_)
        return state

    def _set_state(self, state: dict) -> None:
        method = str(state["method"])
        if method == "auto":
            raise ValueError("auto cannot choose itself")
        blend = state.get("blend")  # files before blends, and unblended choices: none
        cv = state["cv"]
        st = state.get("stages")  # an update may refit a candidate of the first look
        look = st.get("table", {}) if isinstance(st, dict) else {}
        if not isinstance(cv, dict) or (cv and method not in cv and method not in look):
            raise ValueError("the cross-validation table is missing the chosen method")
        check_cv_table(cv, len(self.classes_))
        if blend is None:
            model = get_class(method).from_dict(state["model"])
            if model.name != method or tuple(model.classes_) != tuple(self.classes_):
                raise ValueError(
                    "the chosen model does not match the auto model's method and classes"
                )
        else:
            if not isinstance(blend, dict) or not all(
                k in blend for k in ("methods", "weights", "gain", "se")
            ):
                raise ValueError("blend must hold methods, weights, gain and se")
            model = Blend.from_dict(state["model"])
            if (
                list(model.methods) != list(blend["methods"])
                or list(model.weights) != list(blend["weights"])
                or tuple(model.classes_) != tuple(self.classes_)
            ):
                raise ValueError(
                    "the blended model does not match the blend's methods, weights and classes"
                )
            if blend["methods"][0] != method or (cv and not all(m in cv for m in blend["methods"])):
                raise ValueError(
                    "a blend must start with the chosen method and blend candidates of the table"
                )
        self.blend_ = blend
        self.method_, self.model_, self.cv_ = method, model, cv
        self.rule_ = str(state["rule"])
        if self.rule_ not in ("se", "min"):
            raise ValueError(f"unknown choice rule {self.rule_!r}")
        best = state["best"]
        if not isinstance(best, str) or (cv and best not in cv):
            raise ValueError("the best candidate is not in the cross-validation table")
        self.best_ = best
        self.cv_samples_ = float(state["cv_samples"])
        self.fit_samples_ = float(state["fit_samples"])
        if not self.fit_samples_ >= self.cv_samples_:
            raise ValueError("fit_samples must be at least cv_samples")
        # optional: files before it, or never refitted, have none
        was = state.get("refitted_from")
        if was is not None and (not isinstance(was, str) or was not in cv or was == method):
            raise ValueError(
                "refitted_from must name another candidate of the cross-validation table"
            )
        self.refitted_from_ = was
        # files written before the first look existed, and fits without one: none
        st = state.get("stages")
        self.stages_ = None if st is None else staging.check_record(st, list(cv))
