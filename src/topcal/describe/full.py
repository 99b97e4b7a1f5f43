"""Every entry of a fitted model's description as text (``topcal describe --full``), and the
pieces of ``describe()``'s dict the summary (:mod:`topcal.describe.summary`) reads the same
way.

One plain function of ``model.describe()``'s dict: the method, its parameters and score
range, what a wrapper or a blend adds in head lines (auto's choice and cross-validation
table, a blend's weights), then the method-wide results and each class's entries. What to
print is read from the dict's entries (``cross_validation``: auto's; ``components``: a
blend's; ``label_shift``: an adapted model's; ``model``: a wrapper's inner model), never
from a method's name.
"""

from __future__ import annotations

import json

__all__ = [
    "describe_text",
    "description_of",
    "body_of",
    "class_lines",
    "updated_lines",
    "entry_text",
]


def describe_text(model, classes=None) -> str:
    """Every entry of ``model.describe()`` as text (``topcal describe --full``); with
    ``classes`` (names), only those classes' entries."""
    d = description_of(model)
    out: list[str] = [
        f"method: {d['method']}",
        f"params: {json.dumps(d['params'])}",
        f"score range: {d['score_range']}",
    ]
    out.extend(_head(d))
    d = body_of(d)
    out += _method_wide(d)
    shown = d["classes"] if classes is None else {c: d["classes"][c] for c in classes}
    for name, info in shown.items():
        out += class_lines(name, info)
    return "\n".join(out)


def description_of(model) -> dict:
    return model.describe() if hasattr(model, "describe") else model


def entry_text(val) -> str:
    if isinstance(val, list) and len(val) > 12:
        shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val[:12])
        return f"[{shown}, ...] ({len(val)} values)"
    if isinstance(val, list):
        return (
            "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val) + "]"
        )
    if isinstance(val, float):
        return f"{val:.6g}"
    return str(val)


def _method_wide(d: dict) -> list[str]:
    """Method-wide results, e.g. a joint fit's loss and AIC, a hierarchical fit's pooled
    curve."""
    return [
        f"{key}: "
        + ", ".join(
            f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in val.items()
        )
        for key, val in d.items()
        if isinstance(val, dict) and key not in ("params", "classes")
    ]


def class_lines(name: str, info: dict) -> list[str]:
    out = [f"\n[{name}]  TP={info['n_tp']:g}  FP={info['n_fp']:g}"]
    out += [f"  {k}: {entry_text(v)}" for k, v in info.items() if k not in ("n_tp", "n_fp")]
    return out


def _head(d: dict) -> list[str]:
    """Lines after the method's name and parameters: auto's choice, or a blend's weights."""
    if "cross_validation" in d:
        return _auto_head(d)
    if "components" in d:
        b = d["blend"]
        return [
            "blend of "
            + ", ".join(f"{m} ({w:.3f})" for m, w in zip(b["methods"], b["weights"]))
        ]
    return []


def body_of(d: dict) -> dict:
    """The description whose method-wide and per-class entries are printed."""
    # an adapted model: its source's description and what adapting added
    if "label_shift" in d:
        return _wrapped(d)
    if "cross_validation" in d:  # auto: the chosen model's, without the blend the head shows
        d = {k: v for k, v in d.items() if k != "blend"}
        if isinstance(d.get("model"), dict):
            d["model"] = {k: v for k, v in d["model"].items() if k != "blend"}
        return _wrapped(d)
    if "components" in d:  # a blend: without the blend entry the head shows
        return {k: v for k, v in d.items() if k != "blend"}
    return d


def _wrapped(d: dict) -> dict:
    """A wrapper's inner description (``d["model"]``) with what the wrapper adds per class
    and method-wide."""
    if "model" not in d:
        return d
    outer, inner = d, d["model"]
    wrap = {
        k: v
        for k, v in outer.items()
        if isinstance(v, dict) and k not in ("params", "classes", "model", "cross_validation")
    }
    return {
        **inner,
        **wrap,
        "classes": {
            c: {
                **info,
                **{k: v for k, v in outer["classes"].get(c, {}).items() if k not in info},
            }
            for c, info in inner["classes"].items()
        },
    }


def _on(cv: dict) -> str:
    of = cv.get("of_samples", cv["samples"])
    if of <= cv["samples"]:
        return f"{cv['samples']:g} samples"
    return f"a stratified subsample of {cv['samples']:g} of the {of:g} samples"


def _auto_head(d: dict) -> list[str]:
    """auto's choice, its rule and the cross-validation table (then the chosen model)."""
    cv = d["cross_validation"]
    rule = cv.get("rule", "smallest cross-validated NLL")
    folds = "one split" if cv["folds"] == 1 else f"{cv['folds']}-fold"
    out = [f"chosen: {d['chosen']} ({rule}; {folds}, seed {cv['seed']}, on {_on(cv)})"]
    if cv.get("best") not in (None, d["chosen"]):
        out.append(f"best mean: {cv['best']}")
    out += updated_lines(d)
    ranked = sorted(((v, k) for k, v in cv["nll"].items() if v is not None))
    if ranked:
        se, dse = cv.get("se", {}), cv.get("diff_se", {})
        out.append("cross-validated NLL (mean ± SE; SE of the difference to the best):")
        out += [
            f"  {k:16s} {v:.4f}"
            + (f" ± {se[k]:.4f}" if se.get(k) is not None else "")
            + (f"  (diff SE {dse[k]:.4f})" if dse.get(k) is not None else "")
            for v, k in ranked
        ]
    for k, msg in cv["errors"].items():
        out.append(f"  {k} failed in cross-validation: {msg}")
    look = (cv.get("stages") or {}).get("table", {})
    for k, v in look.items():
        if k not in cv["nll"] and v["nll"] is not None:
            out.append(f"  {k:16s} stopped at the first look: NLL {v['nll']:.4f}")
    model = d["model"]
    if d.get("blend"):
        out.append(_blend_line(d["blend"]))
    out.append(f"\nchosen model: {model['method']}, params {json.dumps(model['params'])}")
    return out


def updated_lines(d: dict) -> list[str]:
    cv = d["cross_validation"]
    fitted = sum(info["n_tp"] + info["n_fp"] for info in d["classes"].values())
    if fitted > cv.get("of_samples", cv["samples"]):
        return [
            f"updated since: the chosen method is fitted on {fitted:g} samples; "
            "fit auto again to re-choose"
        ]
    return []


def _blend_line(b: dict) -> str:
    return "blend (beats the choice out of fold by {:.4f} ± {:.4f} NLL): ".format(
        -b["gain"], b["se"]
    ) + ", ".join(f"{m} {w:.3f}" for m, w in zip(b["methods"], b["weights"]))
