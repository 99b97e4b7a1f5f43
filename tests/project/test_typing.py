"""The public API is annotated, and no module is excused from the type checker (pyproject.toml).

``make lint`` runs mypy on src/ (0 errors); ``make wheel-check`` type-checks the README snippet
against the installed wheel (py.typed). This file checks what mypy does not: that every public
function and method has annotations on each parameter and its return, so a user's checker
sees types and not ``Any``.
"""

import inspect
import tomllib
from pathlib import Path

import pytest

import topcal

ROOT = Path(__file__).resolve().parents[2]


def _public_callables():
    """(qualified name, function) for every public function of ``topcal.__all__``, the modules
    it exports (datasets, metrics, report) and every public method of its classes (the
    scikit-learn estimator included)."""
    out = []

    def add_class(name, cls):
        seen = set()
        # its own methods and those of its topcal bases (the mixins Calibrator is made of)
        for base in cls.__mro__:
            if base.__module__.startswith("topcal"):
                add_members(name, base, seen)

    def add_members(name, cls, seen):
        for attr, value in vars(cls).items():
            if attr in seen or (attr.startswith("_") and attr not in ("__init__", "__call__")):
                continue
            seen.add(attr)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                out.append((f"{name}.{attr}", value))

    def add(name, obj):
        if inspect.isclass(obj):
            add_class(name, obj)
        elif inspect.isfunction(obj):
            out.append((name, obj))

    for name in topcal.__all__:
        obj = getattr(topcal, name)
        if inspect.ismodule(obj):
            for attr in getattr(obj, "__all__", []):
                value = getattr(obj, attr)
                if getattr(value, "__module__", "").startswith("topcal"):
                    add(f"{name}.{attr}", value)
        else:
            add(name, obj)
    return out


PUBLIC = _public_callables()


def test_the_public_api_is_large_enough_to_mean_something():
    names = {n for n, _ in PUBLIC}
    for expected in ("TopLabelData.from_probs", "Calibrator.fit", "calibrator", "load",
                     "TopLabelCalibratedClassifier.predict_confidence", "metrics.nll",
                     "datasets.load_phanns", "fit_thresholds", "report.build_report"):
        assert expected in names
    assert len(PUBLIC) > 80


@pytest.mark.parametrize("name,func", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_public_callable_is_annotated(name, func):
    sig = inspect.signature(func)
    missing = [
        p for p, v in sig.parameters.items()
        if p not in ("self", "cls") and v.annotation is inspect.Parameter.empty
    ]
    assert not missing, f"{name}: parameters without annotations: {missing}"
    if func.__name__ != "__init__":
        assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return type"


def test_the_ratchet_spares_the_public_api():
    """No module is excused from type checking (the ratchet list, emptied, is gone: add none)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    excused = {
        m for o in config.get("overrides", []) if o.get("ignore_errors") for m in o["module"]
    }
    homes = {inspect.getmodule(f).__name__ for _, f in PUBLIC}
    assert homes, homes
    assert not excused, f"modules excused from mypy (ignore_errors): {sorted(excused)}"


def test_the_package_ships_its_type_marker():
    assert (ROOT / "src" / "topcal" / "py.typed").is_file()
