"""The typed result of :func:`topcal.evaluate.compare_methods`: :class:`Comparison`.

A comparison holds, per method, its metrics (:class:`MethodMetrics`), each an overall value
and one per class (:class:`MetricValues`), and what happened on the way: the protocol, the
methods skipped or failed, the fits' warnings
and what ``auto`` chose. Read it by attribute::

    res.methods["hist"].nll.per_class["A"]
    res.protocol, res.folds, res.failed

Each of the three is also a read-only :class:`~collections.abc.Mapping` with the old
dictionary's keys, so code written for the plain nested dict keeps working
(``res["methods"]["hist"]["nll"]["per_class"]["A"]``, ``.get``, ``in``, iteration, ``==``
against a dict); ``to_dict()`` is that dict, ready for :func:`json.dumps`.
:meth:`Comparison.of` turns such a dict (or a comparison) into a comparison, for functions
that accept either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, cast

__all__ = ["Comparison", "MethodMetrics", "MetricValues"]


class _FieldMapping(Mapping):
    """Read-only mapping view of a dataclass: its fields are the keys (equal to a dict of
    the same items)."""

    def __getitem__(self, key):
        if isinstance(key, str) and key in self._keys():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    @classmethod
    def _keys(cls) -> tuple:
        return tuple(f.name for f in fields(cast(Any, cls)))  # cls: a dataclass subclass


@dataclass(frozen=True, eq=False)
class MetricValues(_FieldMapping):
    """One metric of one method.

    Attributes
    ----------
    overall : float or None
        The metric over all positives.
    per_class : dict of str -> float or None
        Per predicted class (None where a class has no positives).
    """

    overall: float | None
    per_class: dict

    @classmethod
    def of(cls, value) -> "MetricValues":
        """``value`` as metric values (a mapping with keys "overall" and "per_class", e.g.
        ``ClassMetric.to_dict()``)."""
        if isinstance(value, cls):
            return value
        return cls(value["overall"], dict(value["per_class"]))

    def to_dict(self) -> dict:
        """``{"overall": float, "per_class": {class: float or None}}``."""
        return {"overall": self.overall, "per_class": dict(self.per_class)}


@dataclass(frozen=True, eq=False)
class MethodMetrics(Mapping):
    """The metrics of one method, by name (``nll``, ``brier``, ``ece1``, ``ece2``: the
    evaluated bundle).

    ``m.nll`` and ``m["nll"]`` are the same :class:`MetricValues`; a metric that was not
    evaluated raises AttributeError / KeyError.
    """

    metrics: dict = field(default_factory=dict)

    @classmethod
    def of(cls, value) -> "MethodMetrics":
        """``value`` as method metrics (a mapping metric name -> metric values, e.g.
        :func:`topcal.evaluate.evaluate`'s)."""
        if isinstance(value, cls):
            return value
        return cls({name: MetricValues.of(v) for name, v in value.items()})

    def __getitem__(self, key) -> MetricValues:
        return self.metrics[key]

    def __iter__(self):
        return iter(self.metrics)

    def __len__(self) -> int:
        return len(self.metrics)

    def __getattr__(self, name: str) -> MetricValues:
        metrics = self.__dict__.get("metrics", {})
        if name in metrics:
            return metrics[name]
        raise AttributeError(
            f"no metric {name!r} was evaluated (metrics: {', '.join(metrics) or 'none'})"
        )

    def to_dict(self) -> dict:
        """``{metric: {"overall", "per_class"}}``, as :func:`topcal.evaluate.evaluate`
        returns it."""
        return {name: v.to_dict() for name, v in self.metrics.items()}


@dataclass(frozen=True, eq=False)
class Comparison(_FieldMapping):
    """What :func:`topcal.evaluate.compare_methods` found.

    Attributes
    ----------
    protocol : {"same", "holdout", "kfold"}
    folds : int or None
        The number of folds under "kfold".
    methods : dict of str -> MethodMetrics
        The methods evaluated, in the order run.
    skipped : list of str
        Methods not run: they need full score vectors, which the data lacks.
    failed : dict of str -> str
        Methods whose fit raised, with the error (the others went on).
    warnings : dict of str -> list of str
        What the fits warned about, per method ("data": about the data).
    choices : dict of str -> list of dict
        What every fitted ``auto`` chose (one entry per fold under "kfold") and its
        cross-validation table (:func:`topcal.evaluate.auto_summary`).
    ranking : dict of str -> dict
        The methods ranked by NLL with paired 90% intervals
        (:func:`topcal.overall.paired_ranking`), in rank order.
    """

    protocol: str
    folds: int | None = None
    methods: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    failed: dict = field(default_factory=dict)
    warnings: dict = field(default_factory=dict)
    choices: dict = field(default_factory=dict)
    ranking: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(
            self, "methods", {n: MethodMetrics.of(m) for n, m in self.methods.items()}
        )

    @classmethod
    def of(cls, value) -> "Comparison":
        """``value`` as a comparison: a comparison itself, or a dict of the old form (keys
        as the attributes; only "methods" is required, "protocol" defaults to "same")."""
        if isinstance(value, cls):
            return value
        return cls(
            value.get("protocol", "same"),
            value.get("folds"),
            dict(value["methods"]),
            list(value.get("skipped", [])),
            dict(value.get("failed", {})),
            dict(value.get("warnings", {})),
            dict(value.get("choices", {})),
            dict(value.get("ranking", {})),
        )

    def to_dict(self) -> dict:
        """The plain nested dict (JSON-ready; the form ``compare_methods`` returned before
        this class)."""
        return {
            "protocol": self.protocol,
            "folds": self.folds,
            "methods": {n: m.to_dict() for n, m in self.methods.items()},
            "skipped": list(self.skipped),
            "failed": dict(self.failed),
            "warnings": dict(self.warnings),
            "choices": dict(self.choices),
            "ranking": dict(self.ranking),
        }
