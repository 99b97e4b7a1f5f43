"""One Evidence per fitted model, told what to keep by its caller (issue 38, point 1).

The source checks (an AST scan of ``src/topcal``) keep it so: no module sets a private attribute
of another object (a calibrator is told what to keep by ``fit``'s arguments, never flagged from
outside), ``__dict__`` writes and ``getattr(obj, name, default)`` stay few, and the calibrator
contract stays small. The behaviour checks: what each ``keep`` keeps, a model file stores each
piece of evidence once, and files of the former layout (an ``auto`` file with the counts and
fingerprint twice) still load, predict the same and save back to the same model digest.
"""

import ast
import functools
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import topcal
from topcal import persist
from topcal.calibrators.base import Calibrator
from topcal.calibrators.select.blend import Blend
from topcal.errors import ParameterError
from topcal.evidence.core import Evidence

from _sim import simulate_probs

PKG = Path(__file__).resolve().parents[3] / "src" / "topcal"

#: The issue's limits: each count below 10, the public surface at most 25 names, and two more
#: for the calibrated vector of scikit-learn's contract (``predict_proba`` and its map,
#: ``vector_map_``).
MAX_DICT_WRITES = 9
MAX_GETATTR_DEFAULTS = 9
MAX_PUBLIC_NAMES = 27

#: ``getattr(obj, name, default)`` as the issue counts it (a plain grep of src/).
GETATTR_DEFAULT = re.compile(r"getattr\([^)]*,[^)]*,[^)]*\)")


def _quiet(f, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*a, **k)


def _own(node) -> bool:
    """Whether ``node`` is ``self`` or ``cls``: an object's own attributes."""
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


@functools.cache
def _parsed(source: str) -> ast.Module:
    """``source``'s syntax tree, parsed once for the checkers below (which only read it)."""
    return ast.parse(source)


def foreign_private_writes(source: str) -> list[str]:
    """Statements of ``source`` that set a private attribute of an object other than ``self`` or
    ``cls``:
    ``x._a = ...`` (also augmented, annotated, in tuples), ``x.__dict__[...] = ...``,
    ``x.__dict__.pop/update/setdefault(...)``, ``setattr(x, "_a", ...)``."""
    out = []
    for node in ast.walk(_parsed(source)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        flat = []
        for t in targets:
            flat.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        for t in flat:
            if (
                isinstance(t, ast.Attribute)
                and t.attr.startswith("_")
                and not _own(t.value)
                and not (t.attr.startswith("__") and t.attr.endswith("__"))
            ):
                out.append(f"{node.lineno}: {ast.unparse(t)}")
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Attribute)
                and t.value.attr == "__dict__"
                and not _own(t.value.value)
            ):
                out.append(f"{node.lineno}: {ast.unparse(t)}")
        if isinstance(node, ast.Call):
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr in ("pop", "update", "setdefault", "clear")
                and isinstance(f.value, ast.Attribute)
                and f.value.attr == "__dict__"
                and not _own(f.value.value)
            ):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
            if (
                isinstance(f, ast.Name)
                and f.id == "setattr"
                and len(node.args) >= 2
                and not _own(node.args[0])
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_")
            ):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def dict_writes(source: str) -> int:
    """``__dict__`` writes of ``source``: subscript assignments and deletions, pop, update,
    setdefault."""
    n = 0
    for node in ast.walk(_parsed(source)):
        targets = (
            node.targets
            if isinstance(node, (ast.Assign, ast.Delete))
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        n += sum(
            isinstance(t, ast.Subscript)
            and isinstance(t.value, ast.Attribute)
            and t.value.attr == "__dict__"
            for t in targets
        )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pop", "update", "setdefault", "clear")
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "__dict__"
        ):
            n += 1
    return n


def _sources():
    return {
        str(p.relative_to(PKG)): p.read_text(encoding="utf-8") for p in sorted(PKG.rglob("*.py"))
    }


def test_no_module_sets_another_objects_private_attributes():
    found = {f: hits for f, text in _sources().items() if (hits := foreign_private_writes(text))}
    assert not found, (
        f"private attributes set from outside (tell the object by an argument): {found}"
    )


def test_dict_writes_and_getattr_defaults_stay_few():
    texts = _sources()
    writes = sum(dict_writes(t) for t in texts.values())
    subscripts = sum(len(re.findall(r"__dict__\[", t)) for t in texts.values())
    defaults = sum(
        len(GETATTR_DEFAULT.findall(line)) > 0 for t in texts.values() for line in t.splitlines()
    )
    assert writes <= MAX_DICT_WRITES and subscripts <= MAX_DICT_WRITES, (writes, subscripts)
    assert defaults <= MAX_GETATTR_DEFAULTS, f"{defaults} getattr(obj, name, default) in src/topcal"


def test_the_calibrator_contract_stays_small():
    public = [n for n in dir(Calibrator) if not n.startswith("_")]
    assert len(public) <= MAX_PUBLIC_NAMES, public


def test_the_checkers_catch_what_they_are_meant_to():
    bad = (
        "def f(model, ref):\n    model._scratch = True\n    ref.__dict__['_x'] = 1\n"
        "    a, ref._y = 1, 2\n    setattr(model, '_z', 3)\n    ref.__dict__.pop('_x', None)\n"
    )
    assert len(foreign_private_writes(bad)) == 5
    ok = (
        "class A:\n    def f(self):\n        self._a = 1\n        self.__dict__['_b'] = 2\n"
        "    def g(self, other):\n        other.public = 1\n"
    )
    assert foreign_private_writes(ok) == [] and dict_writes(ok) == 1 and dict_writes(bad) == 2


# ------------------------------------------------------------------------------ behaviour
def _data(seed=1, n=600, k=4):
    p, y = simulate_probs(n, seed, k, sharpen=[1.5, 0.8, 1.2, 1.0][:k])
    return topcal.TopLabelData.from_probs(p, y)


@pytest.mark.parametrize("keep", ["evidence", "model", "predictions"])
def test_a_fit_keeps_what_its_caller_says(keep):
    data = _data()
    model = _quiet(topcal.calibrator("hist").fit, data, keep=keep)
    full = _quiet(topcal.calibrator("hist").fit, data)
    np.testing.assert_array_equal(model.predict(data), full.predict(data))
    ev = model.evidence_
    if keep == "evidence":
        assert ev.stats is not None and ev.confusion is not None and ev.fingerprint is not None
        assert len(ev.marks) == 1
    else:
        assert ev.is_empty and ev.stats is None and ev.confusion is None and ev.fingerprint is None
    with pytest.raises(ParameterError, match="keep must be one of"):
        topcal.calibrator("hist").fit(data, keep="all")


def test_parts_of_a_model_keep_no_evidence_of_their_own():
    data = _data()
    shrunk = _quiet(topcal.calibrator("hist").fit, data)
    pooled = _quiet(topcal.calibrator("pooled-beta").fit, data)
    blend = _quiet(Blend(methods=("hist", "pooled-platt"), weights=(0.5, 0.5)).fit, data)
    assert shrunk.reference_.evidence_.is_empty and pooled.model_.evidence_.is_empty
    assert all(m.evidence_.is_empty for m in blend.models_)
    assert not any(m.evidence_.is_empty for m in (shrunk, pooled, blend))


def test_an_adapted_model_shows_its_source_models_evidence():
    data = _data()
    model = _quiet(topcal.calibrator("hist").fit, data)
    adapted = model.adapt(priors=[0.4, 0.2, 0.2, 0.2])
    assert adapted.evidence_ is model.evidence_
    d = adapted.to_dict()
    assert "confusion" not in d["evidence"] and "confusion" in d["state"]["base"]["evidence"]


def _pieces(d, path="") -> list[str]:
    """Where a model dict holds evidence pieces (confusion, fingerprint, stats), nested models
    included."""
    out = [f"{path}/{k}" for k in ("confusion", "fingerprint", "stats") if k in d["evidence"]]
    for key, val in d.get("state", {}).items():
        if isinstance(val, dict) and "method" in val and "state" in val:
            out += _pieces(val, f"{path}/{key}")
        if isinstance(val, list):
            out += [
                p
                for i, v in enumerate(val)
                if isinstance(v, dict) and "state" in v
                for p in _pieces(v, f"{path}/{key}/{i}")
            ]
    return out


def test_an_auto_file_stores_its_evidence_once():
    data = _data(n=800)
    model = _quiet(topcal.calibrator("auto", candidates=["pooled-hist", "hist", "bts"]).fit, data)
    assert sorted(_pieces(model.to_dict())) == ["/confusion", "/fingerprint", "/stats"]


def test_an_auto_file_of_the_former_layout_still_loads(tmp_path):
    """Format-3 auto files of an earlier layout held the label-shift counts and fingerprint in
    the chosen model's dict too; they load through the migration and predict the same."""
    path = PKG.parents[1] / "tests" / "data" / "model_v3" / "auto.json"
    doc = json.loads(path.read_text())
    model = persist.loads(path.read_text())
    nested = doc["model"]["state"]["model"]
    nested["confusion"], nested["fingerprint"] = (
        doc["model"]["confusion"],
        doc["model"]["fingerprint"],
    )
    doc["sha256"] = persist.hashlib.sha256(
        persist.canonical_json(doc["model"]).encode()
    ).hexdigest()
    back = persist.loads(json.dumps(doc))
    rows = np.load(path.parent / "rows.npz")
    data = topcal.TopLabelData.from_probs(rows["probs"], rows["labels"])
    np.testing.assert_array_equal(back.predict(data), model.predict(data))
    assert doc["sha256"] in persist.digests(back)  # thresholds chosen for that file match
    back.save(tmp_path / "auto.json")
    again = persist.load(tmp_path / "auto.json")
    np.testing.assert_array_equal(again.predict(data), model.predict(data))
    assert again.evidence_.fingerprint == model.evidence_.fingerprint


def test_evidence_is_read_only_and_merges_into_a_new_object():
    data = _data()
    a = Evidence.for_fit(data)
    with pytest.raises(AttributeError):
        a.stats = None
    merged = a.merge(Evidence.for_fit(data))
    assert merged is not a and merged.stats.n_samples == 2 * a.stats.n_samples
