"""A fitted model's description for people: the summary ``topcal describe`` prints, one
class in full (``--class``), every class in full (``--full``) and the summary as JSON
(``--json``).

Everything is read from ``model.describe()``'s dict (a
:class:`~topcal.calibrators.hooks.Description`), never from a model file's layout or a
method's name: auto's choice and cross-validation table (``cross_validation``, ``chosen``,
``blend``), a blend's members (``components``), an adapted model's label shift
(``label_shift``), a wrapper's inner model (``model``), per class the counts (``n_tp``,
``n_fp``), the 90% interval width and the method's own numeric entries.

:func:`summary` is the summary as a dict (its keys are listed in docs/cli.md, "describe");
:func:`summary_text` renders it in at most about 60 lines at any class count (every class as
one row up to :data:`EVERY_CLASS` classes; above, the spread over classes and the
:data:`LISTED` worst and smallest); :func:`describe_text` (:mod:`topcal.describe.full`) is
every entry of every class (or of the classes named).
"""

from __future__ import annotations

import json
import textwrap

import numpy as np

from .._tables import text_table
from ..calibrators.select.rules import tier
from ..calibrators.hooks import register_hook
from ..calibrators.registry import BASELINE
from .full import body_of, class_lines, describe_text, description_of, entry_text
from .full import updated_lines
from ..errors import TopcalError

__all__ = [
    "describe_text",
    "summary",
    "summary_text",
    "class_text",
    "select_classes",
    "EVERY_CLASS",
    "LISTED",
]

#: Up to this many classes the summary lists every class, one row each.
EVERY_CLASS = 12
#: Classes in each of the summary's lists (the worst, the smallest) above
#: :data:`EVERY_CLASS`.
LISTED = 5
#: A method's own per-class numbers shown as spread rows, at most (the first ones it
#: reports).
MAX_OWN_ROWS = 6
#: Text width of the summary (tables and wrapped lines).
WIDTH = 100
#: Class names longer than this are cut in the summary's tables (``--class`` shows them
#: whole).
NAME_WIDTH = 28

#: Per-class entries that are no fitted parameter to summarise: the counts and the interval
#: width (rows of their own), the support, and the size of a stored table (its kernel
#: centres, grid points, distinct scores: bookkeeping, shown by --class).
_NOT_OWN = (
    "n_tp",
    "n_fp",
    "interval_width_90",
    "support",
    "kernel_centres",
    "table_points",
    "n_distinct_scores",
)
#: Entries of a description that are not method-wide results.
_STRUCTURE = (
    "params",
    "classes",
    "model",
    "components",
    "cross_validation",
    "blend",
    "chosen",
)


# --------------------------------------------------------------------------- --class
def select_classes(model, names) -> list[str]:
    """``names`` checked against the model's classes (one-line error naming the unknown
    ones)."""
    d = description_of(model)
    known = list(d["classes"])
    unknown = [n for n in names if n not in d["classes"]]
    if unknown:
        few = ", ".join(repr(c) for c in known[:8]) + (", ..." if len(known) > 8 else "")
        raise TopcalError(
            f"no class {', '.join(repr(n) for n in unknown)} in this model; its "
            f"{len(known)} classes are {few}"
        )
    return list(dict.fromkeys(names))


def class_text(model, names) -> str:
    """The named classes in full (``topcal describe --class NAME``): the model's head lines,
    then per class every entry, and a blend's members' entries for the class."""
    d = description_of(model)
    names = select_classes(d, names)
    out = [f"method: {d['method']}"] + _wrap(f"params: {json.dumps(d['params'])}")
    out += _summary_head(summary(d))
    body = body_of(d)
    members = _members_of(d)
    for name in names:
        out += class_lines(name, body["classes"][name])
        for comp, w in members:
            own = {
                k: v
                for k, v in comp["classes"][name].items()
                if k not in ("n_tp", "n_fp", "support")
            }
            text = (
                ", ".join(f"{k}={entry_text(v)}" for k, v in own.items()) or "(no own entries)"
            )
            out += _wrap(f"  member {w:.3f} {comp['method']}: {text}", indent=6)
    return "\n".join(out)


# --------------------------------------------------------------------------- the summary
def _members_of(d: dict) -> list[tuple[dict, float]]:
    """(component description, weight) of the blend ``d`` is or holds (auto's), else []."""
    inner = d.get("model") if isinstance(d.get("model"), dict) else d
    if "components" not in inner:
        return []
    return list(zip(inner["components"], inner["blend"]["weights"]))


def _spread(values) -> dict | None:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return None
    q = np.quantile(v, [0.0, 0.1, 0.5, 0.9, 1.0])
    return dict(zip(("min", "q10", "median", "q90", "max"), (float(x) for x in q)))


def _own_numbers(classes: dict, skip=()) -> list[str]:
    """Per-class entries that are numbers in some class (not counts, not lists, not flags)."""
    keys: list[str] = []
    for info in classes.values():
        for k, v in info.items():
            if k in keys or k in _NOT_OWN or k in skip or k.startswith("cv_nll_"):
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                keys.append(k)
    return keys


def _scalars(d: dict) -> dict:
    """A description's method-wide results as ``{entry: {name: number or short text}}``."""
    out = {}
    for key, val in d.items():
        if isinstance(val, dict) and key not in _STRUCTURE and key != "label_shift":
            kept = {
                k: v
                for k, v in val.items()
                if (isinstance(v, (int, float)) and not isinstance(v, bool))
                or (isinstance(v, str) and len(v) <= 16)
            }
            if kept:
                out[key] = kept
    return out


def summary(model) -> dict:
    """The summary of a fitted model (``topcal describe --json``'s ``"summary"``),
    JSON-ready.

    Keys: ``method``, ``n_classes``, ``samples``, ``score_range``; ``choice`` (auto's, else
    None: ``chosen``, ``rule``, ``folds``, ``cv_samples``, ``uncalibrated_nll``,
    ``model_nll`` (the blend's where blended), ``gain`` (uncalibrated minus model, > 0
    helps), ``table`` (every candidate: ``method``, ``tier``, ``nll``, ``se``, ``diff_se``,
    ``error``, ``weight`` in the blend, ``stage`` it reached (1: the first look only, 2: the
    K folds, None: no first look) and ``first_nll`` there), ``blend_gain``, ``blend_se``);
    ``members`` (a blend's, else []: ``method``, ``weight``, ``fitted`` (its method-wide
    results), ``per_class`` (spread of its per-class numbers)); ``fitted`` (the model's own
    method-wide results); ``label_shift`` (an adapted model's, else None); ``per_class``
    (``{row: {min, q10, median, q90, max}}``); ``worst`` (``{"by": how ranked, "classes":
    [names]}``); ``smallest`` (names, fewest samples first); ``rows`` (``{class: {n, tp, fp,
    accuracy, interval_width_90, cv_nll_uncalibrated, cv_nll_model}}`` of the classes
    listed).
    """
    d = description_of(model)
    body = body_of(d)
    classes = body["classes"]
    names = list(classes)
    tp = np.array([float(classes[c]["n_tp"]) for c in names])
    fp = np.array([float(classes[c]["n_fp"]) for c in names])
    n = tp + fp
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.where(n > 0, tp / np.where(n > 0, n, 1.0), np.nan)
    out: dict = {
        "method": d["method"],
        "n_classes": len(names),
        "samples": float(n.sum()),
        "score_range": list(d["score_range"]),
        "choice": _choice(d),
        "members": [],
        "fitted": _scalars(body),
        "label_shift": d.get("label_shift"),
    }
    out["members"] = _member_summaries(d, names)
    chosen = out["choice"]["chosen"] if out["choice"] else None
    raw_key, model_key = f"cv_nll_{BASELINE}", f"cv_nll_{chosen}"
    cv_raw = np.array([_nan(classes[c].get(raw_key)) for c in names])
    cv_model = np.array([_nan(classes[c].get(model_key)) for c in names])
    change = cv_model - cv_raw
    rows = {
        "samples (TP + FP)": n,
        "accuracy (TP / n)": acc,
        "90% interval width": np.array(
            [_nan(classes[c].get("interval_width_90")) for c in names]
        ),
        f"CV NLL change, {chosen} - {BASELINE}": change,
    }
    own_skip = ("source_prior", "use_prior", "estimated_prior") if d.get("label_shift") else ()
    for k in _own_numbers(classes, skip=own_skip)[:MAX_OWN_ROWS]:
        rows[k] = np.array([_nan(_num(classes[c].get(k))) for c in names])
    out["per_class"] = {
        k: s for k, v in rows.items() if (s := _spread(v[np.isfinite(v)].tolist())) is not None
    }
    order, by = _worst_first(n, acc, change, chosen)
    small = sorted(range(len(names)), key=lambda i: (n[i], i))
    listed = len(names) if len(names) <= EVERY_CLASS else LISTED
    out["worst"] = {"by": by, "classes": [names[i] for i in order[:listed]]}
    out["smallest"] = [names[i] for i in small[:listed]]
    show = names if len(names) <= EVERY_CLASS else out["worst"]["classes"] + out["smallest"]
    out["rows"] = {
        c: {
            "n": float(n[i]),
            "tp": float(tp[i]),
            "fp": float(fp[i]),
            "accuracy": _none(acc[i]),
            "interval_width_90": _none(rows["90% interval width"][i]),
            "cv_nll_uncalibrated": _none(cv_raw[i]),
            "cv_nll_model": _none(cv_model[i]),
        }
        for c in dict.fromkeys(show)
        for i in [names.index(c)]
    }
    return out


def _member_summaries(d: dict, names: list) -> list[dict]:
    """:func:`summary`'s ``members``: per member of a blend, its weight, method-wide results
    and the spread of its per-class numbers."""
    out = []
    for comp, w in _members_of(d):
        own = _own_numbers(comp["classes"])
        out.append(
            {
                "method": comp["method"],
                "weight": float(w),
                "fitted": _scalars(comp),
                "per_class": {
                    k: s
                    for k in own
                    if (s := _spread(_num(comp["classes"][c].get(k)) for c in names))
                    is not None
                },
            }
        )
    return out


def _worst_first(n, acc, change, chosen) -> tuple[list[int], str]:
    """The classes' indices, worst first, and how they are ranked: by the out-of-fold NLL
    change where there is one, else by accuracy."""
    if np.isfinite(change).any():
        # the class's total change (n x its mean per sample): a one-row class's noise ranks
        # below a real loss over dozens of rows
        order = sorted(
            (i for i in range(len(n)) if np.isfinite(change[i])),
            key=lambda i: (-change[i] * n[i], -n[i]),
        )
        by = (
            f"total out-of-fold NLL change (n x ({chosen} minus {BASELINE}); where "
            "calibration hurts most or helps least)"
        )
    else:
        order = sorted(np.flatnonzero(n > 0).tolist(), key=lambda i: (acc[i], -n[i]))
        by = "lowest accuracy in the fitting data (TP / n; larger classes first on ties)"
    return order, by


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _nan(v) -> float:
    v = _num(v)
    return np.nan if v is None else float(v)


def _none(v):
    return None if v is None or not np.isfinite(v) else float(v)


def _choice(d: dict) -> dict | None:
    """auto's choice and cross-validation table from its description, else None."""
    cv = d.get("cross_validation")
    if cv is None:
        return None
    blend = d.get("blend") or None
    weight = dict(zip(blend["methods"], blend["weights"])) if blend else {}
    se, dse = cv.get("se", {}), cv.get("diff_se", {})
    look = (cv.get("stages") or {}).get("table", {})  # the first look, if it ran
    rows = [
        {
            "method": m,
            "tier": tier(m),
            "nll": v,
            "se": se.get(m),
            "diff_se": dse.get(m),
            "error": cv["errors"].get(m),
            "weight": weight.get(m),
            "stage": (2 if cv.get("folds") != 1 else 1) if look else None,
            "first_nll": look[m]["nll"] if m in look else None,
        }
        for m, v in cv["nll"].items()
    ]
    rows += [
        {"method": m, "tier": tier(m), "nll": None, "se": None, "diff_se": None, "error": None,
         "weight": None, "stage": 1, "first_nll": v["nll"]}
        for m, v in look.items() if m not in cv["nll"]
    ]  # fmt: skip
    table = sorted(
        rows,
        key=lambda r: (r["stage"] == 1, r["nll"] is None, r["nll"] or r["first_nll"] or 0),
    )
    chosen = d["chosen"]
    model_nll = blend["nll"] if blend else cv["nll"].get(chosen)
    raw = cv["nll"].get(BASELINE)
    return {
        "chosen": chosen,
        "best": cv.get("best"),
        "rule": cv.get("rule", "smallest cross-validated NLL"),
        "folds": cv["folds"],
        "seed": cv["seed"],
        "cv_samples": cv["samples"],
        "of_samples": cv.get("of_samples", cv["samples"]),
        "uncalibrated_nll": raw,
        "model_nll": model_nll,
        "gain": None if raw is None or model_nll is None else raw - model_nll,
        "table": table,
        "blend_gain": None if not blend else -blend["gain"],
        "blend_se": None if not blend else blend["se"],
    }


# ------------------------------------------------------------------------ the text of it
def _g(v, digits: int = 4) -> str:
    """A number for a table: integers without decimals, others to ``digits`` significant
    digits."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _wrap(text: str, indent: int = 4) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [text]


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def _fitted_text(fitted: dict) -> str:
    return "; ".join(
        f"{key} "
        + ", ".join(f"{k}={v if isinstance(v, str) else _g(v)}" for k, v in val.items())
        for key, val in fitted.items()
    )


def _summary_head(s: dict) -> list[str]:
    """What was chosen and why, what it gains out of fold, a blend's members, the label
    shift."""
    out = []
    c = s["choice"]
    if c is not None:
        on = f"{_g(c['cv_samples'])} samples"
        if c["of_samples"] > c["cv_samples"]:
            on = f"a stratified subsample of {c['cv_samples']:g} of the {c['of_samples']:g} samples"
        folds = "one split" if c["folds"] == 1 else f"{c['folds']}-fold"
        out += _wrap(f"chosen: {c['chosen']} ({c['rule']}; {folds}, on {on})")
        if c["blend_gain"] is not None:
            b = " + ".join(f"{m['weight']:.3f} {m['method']}" for m in s["members"])
            out += _wrap(
                f"blend (beats the choice out of fold by {c['blend_gain']:.4f} ± "
                f"{c['blend_se']:.4f} NLL): {b}"
            )
        if c["gain"] is not None:
            raw, model = c["uncalibrated_nll"], c["model_nll"]
            what = "the blend" if c["blend_gain"] is not None else c["chosen"]
            verdict = "helps" if c["gain"] > 0 else "does not help"
            out += _wrap(
                f"out of fold, {what} {verdict}: NLL {model:.4f} vs {raw:.4f} uncalibrated "
                f"({-c['gain']:+.4f}, {-c['gain'] / raw:+.1%})"
            )
    for m in s["members"]:
        text = f"  member {m['weight']:.3f} {m['method']}: {_fitted_text(m['fitted'])}"
        if m["per_class"]:
            text += "; per class, median (10% to 90%): " + ", ".join(
                f"{k} {_g(v['median'], 3)} ({_g(v['q10'], 3)} to {_g(v['q90'], 3)})"
                for k, v in list(m["per_class"].items())[:MAX_OWN_ROWS]
            )
        out += _wrap(text, indent=6)
    if s["fitted"] and not s["members"]:
        out += _wrap("fitted: " + _fitted_text(s["fitted"]))
    ls = s["label_shift"]
    if ls:
        out += _wrap(
            f"label shift: priors by {ls.get('estimator')} on {_g(ls.get('n_use'))} use rows, "
            f"shrink {_g(ls.get('shrink'), 3)} ({ls.get('shrink_reason')}); interval "
            f"{ls.get('interval')}"
        )
    return out


def _cv_table(c: dict) -> list[str]:
    header = ["candidate", "tier", "CV NLL", "± SE", "diff SE"]
    rows, tags = [], []
    for r in c["table"]:
        tags.append(
            ", ".join(
                t
                for t, on in (
                    ("chosen", r["method"] == c["chosen"]),
                    ("best mean", r["method"] == c["best"] and r["method"] != c["chosen"]),
                    (f"blend {r['weight'] or 0:.3f}", bool(r["weight"])),
                    (f"failed: {r['error']}"[:40], r["error"] is not None),
                    (
                        f"first look {r['first_nll'] or 0:.4f}",
                        r["stage"] == 1 and r["nll"] is None,
                    ),
                )
                if on
            )
        )
        rows.append(
            [
                r["method"],
                _g(r["tier"], 2),
                "-" if r["nll"] is None else f"{r['nll']:.4f}",
                "-" if r["se"] is None else f"{r['se']:.4f}",
                "-" if r["diff_se"] is None else f"{r['diff_se']:.4f}",
            ]
        )
    w0 = max(len(r[0]) for r in rows + [header])
    lines = text_table(header, rows, w0, [4, 8, 8, 8]).splitlines()
    return ["  " + ln + (f"   {t}" if t else "") for ln, t in zip(lines, ["", ""] + tags)]


def _rows_table(s: dict, names, tags=None) -> list[str]:
    """One row per class of ``names`` (``tags``: a first column saying why it is listed)."""
    chosen = s["choice"]["chosen"] if s["choice"] else None
    has_cv = any(s["rows"][c]["cv_nll_model"] is not None for c in names)
    has_width = any(s["rows"][c]["interval_width_90"] is not None for c in names)
    header = ["class", "n", "TP", "FP", "accuracy"] + (["width90"] if has_width else [])
    if has_cv:
        header += ["CV NLL raw", f"CV {chosen}"[:14]]
    rows = []
    for c in names:
        r = s["rows"][c]
        row = [_short(c), _g(r["n"]), _g(r["tp"]), _g(r["fp"]), _g(r["accuracy"], 3)]
        if has_width:
            row.append(_g(r["interval_width_90"], 3))
        if has_cv:
            row += [_g(r["cv_nll_uncalibrated"], 3), _g(r["cv_nll_model"], 3)]
        rows.append(row)
    if tags is not None:
        pad = max(len(t) for t in tags) + 1
        header[0] = " " * pad + header[0]
        rows = [[t.ljust(pad) + r[0], *r[1:]] for t, r in zip(tags, rows)]
    widths = [max(6, len(h)) for h in header[1:]]
    w0 = max(len(r[0]) for r in rows + [header])
    return ["  " + ln for ln in text_table(header, rows, w0, widths).splitlines()]


def _spread_table(s: dict) -> list[str]:
    header = ["", "min", "10%", "median", "90%", "max"]
    rows = [
        [k[:40], *(_g(v[q], 3) for q in ("min", "q10", "median", "q90", "max"))]
        for k, v in s["per_class"].items()
    ]
    w0 = max(len(r[0]) for r in rows)
    return ["  " + ln for ln in text_table(header, rows, w0, [9] * 5).splitlines()]


def summary_text(model) -> str:
    """The summary ``topcal describe`` prints by default (and Jupyter shows for
    ``model.describe()``): about 60 lines at most at any class count."""
    d = description_of(model)
    s = summary(d)
    head = f"method: {s['method']}"
    if s["choice"] is not None:
        head += f" (chose {s['choice']['chosen']})"
    out = _wrap(
        f"{head}, fitted on {_g(s['samples'])} samples, {s['n_classes']:,} classes, score "
        f"range {_g(s['score_range'][0])} to {_g(s['score_range'][1])}"
    )
    out += _wrap(f"params: {json.dumps(d['params'])}")
    if s["choice"] is not None:
        out += updated_lines(d)
    out += _summary_head(s)
    c = s["choice"]
    if c is not None and c["table"]:
        out.append(
            "cross-validated NLL of every candidate (diff SE: SE of the paired difference)"
        )
        out += _cv_table(c)
    k = s["n_classes"]
    if k <= EVERY_CLASS:
        out.append(f"per class ({k}):")
        out += _rows_table(s, list(s["rows"]))
    else:
        out.append(f"spread over the {k:,} classes:")
        out += _spread_table(s)
        worst, small = s["worst"]["classes"], s["smallest"]
        out += _wrap(
            f"the worst {len(worst)} classes by {s['worst']['by']}, then the smallest "
            f"{len(small)} (fewest samples):"
        )
        out += _rows_table(
            s, worst + small, ["worst"] * len(worst) + ["smallest"] * len(small)
        )
    out.append(
        "more: --class NAME (one class in full; repeatable), --full (every class), --json"
    )
    return "\n".join(out)


# Jupyter's view of model.describe() (calibrators below)
register_hook("describe", summary_text)
