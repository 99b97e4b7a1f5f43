"""The contract every registered calibrator passes: :func:`check_calibrator`.

Like scikit-learn's ``check_estimator``, one function runs the checks a new method must pass
before it is registered, so that per-method copies of the same checks do not grow in the
test suite:

* parameters: stored untouched, ``set_params`` round-trips, unknown names rejected with the
  options;
* fit / predict / interval: ``fit`` returns ``self``; one confidence per row, finite, in [0,
  1]; row-wise (permuting the rows permutes the output); ``lower <= confidence <= upper``
  inside [0, 1];
* persistence: versioned JSON (no pickle), bit-exact predictions and intervals after a
  reload, the same file when saved again;
* ``update``: the model a fit on all the data gives (within ``atol``), or a
  :class:`~topcal.errors.TopcalError` with a one-line message;
* hostile inputs: predicting before ``fit`` or on other classes fails with a one-line
  :class:`~topcal.errors.TopcalError`; a bad interval level too;
* degenerate classes (never predicted, all right, all wrong, one row): a fit that gives
  finite confidences in [0, 1];
* engines: a file fitted whole, streamed in chunks and (given a Dask scheduler) on a cluster
  gives the same model; streamed = Dask bit for bit (the same statistics), whole = streamed
  within ``atol`` (the statistics' grid), or a clear error where a method cannot fit from
  counts.

A failed check raises :class:`AssertionError` naming the method and the check.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import numpy as np

from . import engines, persist
from .calibrators import available_methods, calibrator, get_class
from .calibrators.registry import fits_from_counts
from .calibrators.wrapper import Wrapper
from .data import TopLabelData
from .errors import NotFittedError, TopcalError
from .evidence.stats import ScoreStats

__all__ = ["check_calibrator", "contract_data", "CHECKS"]


def contract_data(n: int = 1500, k: int = 3, seed: int = 0) -> TopLabelData:
    """Seeded probabilities with labels: every class predicted, right 60-90% of the time."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(k, 0.6), n)
    top = probs.argmax(1)
    right = rng.uniform(size=n) < 0.45 + 0.5 * probs.max(1)
    labels = np.where(right, top, (top + rng.integers(1, k, n)) % k)
    return TopLabelData.from_probs(probs, labels, classes=[f"c{i}" for i in range(k)])


def _degenerate_data(seed: int = 1) -> TopLabelData:
    """Four classes: ``d`` never predicted, ``b`` always right, ``c`` always wrong, ``a``
    one row."""
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for cls, n, right in ((1, 300, 1.0), (2, 300, 0.0), (0, 1, 1.0)):
        p = rng.dirichlet([1, 1, 1, 1], n)
        p[:, cls] += 2.0
        p[:, 3] *= 0.1
        p /= p.sum(1, keepdims=True)
        rows.append(p)
        ok = rng.uniform(size=n) < right
        labels.append(np.where(ok, cls, (cls + 1) % 3))
    return TopLabelData.from_probs(
        np.vstack(rows), np.concatenate(labels), classes=["a", "b", "c", "d"]
    )


def _fail(name: str, check: str, detail: str) -> None:
    raise AssertionError(f"{name}: {check}: {detail}")


def _quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*args, **kwargs)


def _one_line(name: str, check: str, exc: Exception) -> None:
    if not isinstance(exc, TopcalError):
        _fail(name, check, f"raised {type(exc).__name__}, not a TopcalError: {exc}")
    if "\n" in str(exc) or not str(exc).strip():
        _fail(name, check, f"the error message is not one line: {str(exc)!r}")


def _fit(name: str, data):
    return _quiet(calibrator(name).fit, data)


def _check_confidences(name: str, check: str, conf, n: int) -> None:
    conf = np.asarray(conf)
    if conf.shape != (n,) or conf.dtype.kind != "f":
        _fail(
            name,
            check,
            f"predict gave shape {conf.shape}, dtype {conf.dtype}; expected ({n},) floats",
        )
    if not np.all(np.isfinite(conf)) or conf.min() < 0 or conf.max() > 1:
        _fail(
            name,
            check,
            f"confidences outside [0, 1] or not finite: {conf.min()}..{conf.max()}",
        )


def _check_holds(name: str, check: str, lo, conf, hi, tol: float = 1e-9) -> None:
    """lower <= confidence <= upper wherever the confidence is strictly inside (0, 1) (the
    documented contract of ``predict_interval``: an estimate of exactly 0 or 1 may lie
    outside)."""
    inside = (conf > 0) & (conf < 1)
    bad = inside & ((lo > conf + tol) | (hi < conf - tol))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _fail(name, check, f"row {i}: {lo[i]} <= {conf[i]} <= {hi[i]} fails")


def check_params(name: str, ctx: dict) -> None:
    """Parameters stored untouched; ``set_params`` round-trips; unknown names rejected with
    options."""
    cal = calibrator(name)
    params = cal.get_params()
    if not isinstance(params, dict):
        _fail(name, "params", "get_params() is no dict")
    again = calibrator(name, **params).get_params()
    if again != params:
        _fail(
            name,
            "params",
            f"calibrator(name, **get_params()) changed them: {params} -> {again}",
        )
    if cal.set_params(**params) is not cal:
        _fail(name, "params", "set_params does not return self")
    try:
        calibrator(name, no_such_parameter=1)
    except Exception as exc:  # noqa: BLE001 - the type is the check
        _one_line(name, "params", exc)
    else:
        _fail(name, "params", "an unknown parameter name was accepted")


def check_fit_predict(name: str, ctx: dict) -> None:
    """fit returns self; confidences finite in [0, 1], one per row; predict is row-wise."""
    data = ctx["data"]
    cal = calibrator(name)
    try:
        cal.predict(data)
    except NotFittedError as exc:
        _one_line(name, "fit/predict", exc)
    else:
        _fail(name, "fit/predict", "predict before fit did not raise NotFittedError")
    fitted = _quiet(cal.fit, data)
    if fitted is not cal:
        _fail(name, "fit/predict", "fit does not return self")
    conf = _quiet(cal.predict, data)
    _check_confidences(name, "fit/predict", conf, data.n_rows)
    perm = np.random.default_rng(3).permutation(data.n_rows)
    moved = _quiet(cal.predict, data.subset(perm))
    if not np.array_equal(moved, conf[perm]):
        _fail(name, "fit/predict", "predicting permuted rows does not permute the confidences")
    ctx["model"], ctx["conf"] = cal, conf


def check_interval(name: str, ctx: dict) -> None:
    """lower <= confidence <= upper, all in [0, 1], one per row; a bad level is a clear
    error."""
    cal, data, conf = ctx["model"], ctx["data"], ctx["conf"]
    lo, hi = _quiet(cal.predict_interval, data, 0.9)
    for side, arr in (("lower", lo), ("upper", hi)):
        arr = np.asarray(arr)
        if arr.shape != (data.n_rows,) or not np.all(np.isfinite(arr)):
            _fail(name, "interval", f"{side} has shape {arr.shape} or non-finite values")
        if arr.min() < 0 or arr.max() > 1:
            _fail(name, "interval", f"{side} leaves [0, 1]: {arr.min()}..{arr.max()}")
    _check_holds(name, "interval", lo, conf, hi)
    inside = (conf > 0) & (conf < 1)
    if not get_class(name).is_baseline and not (
        np.all(lo[inside] > 0) and np.all(hi[inside] < 1) and np.all(hi[inside] > lo[inside])
    ):  # the baseline estimates nothing: its interval is the point itself
        _fail(
            name, "interval", "an interval from finite counts reaches 0 or 1, or has no width"
        )
    lo80, hi80 = _quiet(cal.predict_interval, data, 0.8)
    if np.any(hi80 - lo80 > hi - lo + 1e-9):
        _fail(name, "interval", "an 80% interval is wider than the 90% one")
    for level in (0.0, 1.5, float("nan")):
        try:
            cal.predict_interval(data, level)
        except Exception as exc:  # noqa: BLE001 - the type is the check
            _one_line(name, "interval", exc)
        else:
            _fail(name, "interval", f"level={level} was accepted")


def check_persistence(name: str, ctx: dict) -> None:
    """Versioned JSON; reloaded predictions and intervals bit for bit; saving again, the
    same text."""
    cal, data = ctx["model"], ctx["data"]
    text = persist.dumps(cal)
    doc = json.loads(text)
    if not isinstance(doc, dict) or "format_version" not in json.dumps(doc)[:2000]:
        _fail(name, "persistence", "the saved model has no format_version")
    back = persist.loads(text)
    if type(back) is not type(cal) or back.get_params() != cal.get_params():
        _fail(name, "persistence", "the reloaded model has another type or other parameters")
    if _quiet(back.predict, data).tobytes() != ctx["conf"].tobytes():
        _fail(name, "persistence", "reloaded predictions differ")
    a, b = _quiet(cal.predict_interval, data), _quiet(back.predict_interval, data)
    if a[0].tobytes() != b[0].tobytes() or a[1].tobytes() != b[1].tobytes():
        _fail(name, "persistence", "reloaded intervals differ")
    if persist.dumps(back) != text:
        _fail(name, "persistence", "saving the reloaded model gives another file")


def check_vector(name: str, ctx: dict) -> None:
    """predict_proba: one probability vector per row (rows sum to 1), the predicted class's
    entry the confidence bit for bit, from a vector map (the baseline: the scores' own);
    row-wise; the same vectors after a JSON round trip."""
    cal, data, conf = ctx["model"], ctx["data"], ctx["conf"]
    proba = _quiet(cal.predict_proba, data)
    if proba.shape != (data.n_rows, data.n_classes) or not np.all(np.isfinite(proba)):
        _fail(name, "vector", f"predict_proba has shape {proba.shape} or non-finite values")
    if proba.min() < 0 or np.abs(proba.sum(axis=1) - 1.0).max() > 1e-9:
        _fail(name, "vector", "predict_proba's rows are not probability vectors")
    at_pred = proba[np.arange(data.n_rows), cal._check_compatible(data).pred]
    if at_pred.tobytes() != conf.tobytes():
        _fail(name, "vector", "the predicted class's entry is not the confidence")
    if cal.vector_map_ is None and not get_class(name).is_baseline:
        _fail(name, "vector", "a model fitted on full vectors has no vector map")
    perm = np.random.default_rng(4).permutation(data.n_rows)
    if not np.allclose(_quiet(cal.predict_proba, data.subset(perm)), proba[perm], rtol=1e-12):
        _fail(name, "vector", "predicting permuted rows does not permute the vectors")
    back = persist.loads(persist.dumps(cal))
    if _quiet(back.predict_proba, data).tobytes() != proba.tobytes():
        _fail(name, "vector", "reloaded vectors differ")


def check_update(name: str, ctx: dict, atol: float) -> None:
    """fit(A).update(B) is a fit on the statistics of A + B within atol, or a one-line
    TopcalError.

    ``update`` refits from merged statistics (``ScoreStats``, scores on a fine grid), so the
    reference is the fit on all the data's statistics (the documented contract of
    ``update``)."""
    data = ctx["data"]
    half = np.arange(data.n_rows) < data.n_rows // 2
    first, second = data.subset(np.flatnonzero(half)), data.subset(np.flatnonzero(~half))
    model = _fit(name, first)
    try:
        _quiet(model.update, second)
    except Exception as exc:  # noqa: BLE001 - a clear refusal passes
        _one_line(name, "update", exc)
        return
    # a method that chooses among methods (``auto``) keeps its choice on update and refits
    # the chosen model (``inner_``) with its parameters: the reference is that model fitted
    # on all
    inner = model.inner_ if isinstance(model, Wrapper) else None
    ref = calibrator(name) if inner is None else type(inner)(**inner.get_params())
    stats_data = ScoreStats.from_data(data).to_data()
    whole = _quiet(ref.fit, stats_data if fits_from_counts(ref) else data)
    gap = np.abs(_quiet(model.predict, data) - _quiet(whole.predict, data)).max()
    if gap > atol:
        _fail(
            name, "update", f"fit(A).update(B) differs from fit(A + B) by {gap:.3g} > {atol}"
        )


def check_hostile(name: str, ctx: dict) -> None:
    """Data with other classes are refused by predict with one line."""
    cal, data = ctx["model"], ctx["data"]
    k = len(data.classes)
    other = contract_data(50, k + 1, seed=5)
    try:
        cal.predict(other)
    except Exception as exc:  # noqa: BLE001 - the type is the check
        _one_line(name, "hostile", exc)
    else:
        _fail(name, "hostile", "predict accepted data with another number of classes")


def check_degenerate(name: str, ctx: dict) -> None:
    """Never-predicted, all-right, all-wrong and one-row classes: finite confidences in [0,
    1]."""
    data = _degenerate_data()
    try:
        cal = _fit(name, data)
    except TopcalError as exc:  # a clear refusal of data this degenerate passes
        _one_line(name, "degenerate", exc)
        return
    conf = _quiet(cal.predict, data)
    _check_confidences(name, "degenerate", conf, data.n_rows)
    lo, hi = _quiet(cal.predict_interval, data)
    _check_holds(name, "degenerate", lo, conf, hi)


def check_engines(name: str, ctx: dict, atol: float, scheduler: str | None) -> None:
    """Whole file = streamed (within atol) = Dask (bit for bit), or a clear refusal from
    counts."""
    data = ctx["data"]
    import pandas as pd

    frame = pd.DataFrame(data.full, columns=[f"p_{c}" for c in data.classes])
    frame["label"] = np.asarray(data.classes)[data.labels]
    with tempfile.TemporaryDirectory(prefix="topcal-check-") as tmp:
        path = Path(tmp) / "data.parquet"
        frame.to_parquet(path)
        whole = _quiet(engines.for_options().fit, calibrator(name), path)
        try:
            streamed = _quiet(engines.for_options(chunk_rows=400).fit, calibrator(name), path)
        except Exception as exc:  # noqa: BLE001 - a clear refusal passes for vector methods
            _one_line(name, "engines", exc)
            if fits_from_counts(name):
                _fail(name, "engines", f"a score method cannot be streamed: {exc}")
            return
        if streamed.evidence_.fingerprint != whole.evidence_.fingerprint:
            _fail(name, "engines", "the streamed fit keeps another fingerprint of its rows")
        inner = streamed.inner_ if isinstance(streamed, Wrapper) else None
        if (
            inner is not None
        ):  # a choosing method may choose otherwise on the grid: its choice, in memory
            whole = _quiet(type(inner)(**inner.get_params()).fit, data)
        a, b = _quiet(whole.predict, data), _quiet(streamed.predict, data)
        # the 95th percentile: a step curve's jumps move with the grid, so a few rows near a
        # jump may change by the jump's height
        gap = float(np.quantile(np.abs(a - b), 0.95))
        if gap > atol:
            _fail(
                name,
                "engines",
                f"whole vs streamed differ by {gap:.3g} > {atol} (95th percentile)",
            )
        if scheduler is not None:
            on_dask = _quiet(
                engines.for_options("dask", scheduler=scheduler).fit, calibrator(name), path
            )
            if _quiet(on_dask.predict, data).tobytes() != b.tobytes():
                _fail(name, "engines", "the Dask fit differs from the streamed fit")
            if on_dask.evidence_.fingerprint != streamed.evidence_.fingerprint:
                _fail(name, "engines", "the Dask fit keeps another fingerprint of its rows")


#: The checks, in the order they run (each takes the method's name and a shared context).
CHECKS = (
    "params",
    "fit_predict",
    "interval",
    "persistence",
    "vector",
    "update",
    "hostile",
    "degenerate",
    "engines",
)


def check_calibrator(
    method,
    *,
    data: TopLabelData | None = None,
    checks=CHECKS,
    atol: float = 0.02,
    scheduler: str | None = None,
) -> None:
    """Run the calibrator contract on one registered method (its name or its class).

    Parameters
    ----------
    method : str or type
        A name from :func:`topcal.available_methods`, or a registered calibrator class.
    data : TopLabelData, optional
        Labelled data with full probability vectors (default :func:`contract_data`).
    checks : sequence of str, default CHECKS
        Which checks to run (a subset of :data:`CHECKS`).
    atol : float, default 0.02
        Largest confidence gap allowed between an update and a fit on all the data, and
        between a whole and a streamed fit (the statistics' grid).
    scheduler : str, optional
        A Dask scheduler address: the engines check then also fits on that cluster.

    Raises
    ------
    AssertionError
        Naming the method and the failed check.
    """
    name = method if isinstance(method, str) else getattr(method, "name", None)
    if name not in available_methods():
        raise TopcalError(
            f"{method!r} is no registered method. Options are: "
            f"{', '.join(available_methods())}"
        )
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise TopcalError(
            f"unknown checks {sorted(unknown)}. Options are: {', '.join(CHECKS)}"
        )
    ctx = {"data": data if data is not None else contract_data()}
    order = [c for c in CHECKS if c in checks]
    if (
        any(c in order for c in ("interval", "persistence", "vector", "hostile"))
        and "fit_predict" not in order
    ):
        order.insert(0, "fit_predict")
    for check in order:
        if check == "params":
            check_params(name, ctx)
        elif check == "fit_predict":
            check_fit_predict(name, ctx)
        elif check == "interval":
            check_interval(name, ctx)
        elif check == "persistence":
            check_persistence(name, ctx)
        elif check == "vector":
            check_vector(name, ctx)
        elif check == "update":
            check_update(name, ctx, atol)
        elif check == "hostile":
            check_hostile(name, ctx)
        elif check == "degenerate":
            check_degenerate(name, ctx)
        else:
            check_engines(name, ctx, atol, scheduler)
