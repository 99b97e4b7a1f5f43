"""A fitted model's description as the text ``topcal describe`` prints (``--json`` prints the dict).

One plain function of ``model.describe()``'s dict: the method, its parameters and score range,
what a wrapper or a blend adds in head lines (auto's choice and cross-validation table, a blend's
weights), then the method-wide results and each class's entries. What to print is read from
the dict's entries (``cross_validation``: auto's; ``components``: a blend's; ``label_shift``: an
adapted model's; ``model``: a wrapper's inner model), never from a method's name.
"""

from __future__ import annotations

import json

__all__ = ["describe_text"]


def describe_text(model) -> str:
    """:meth:`~topcal.calibrators.base.Calibrator.describe` of fitted ``model`` as text."""
    d = model.describe()
    out: list[str] = [
        f"method: {d['method']}",
        f"params: {json.dumps(d['params'])}",
        f"score range: {d['score_range']}",
    ]
    out.extend(_head(d))
    d = _body(d)
    for key, val in d.items():  # method-wide results, e.g. a joint fit's loss and AIC
        if isinstance(val, dict) and key not in ("params", "classes"):
            out.append(
                f"{key}: "
                + ", ".join(
                    f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in val.items()
                )
            )
    for name, info in d["classes"].items():
        out.append(f"\n[{name}]  TP={info['n_tp']:g}  FP={info['n_fp']:g}")
        for key, val in info.items():
            if key in ("n_tp", "n_fp"):
                continue
            if isinstance(val, list) and len(val) > 12:
                shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val[:12])
                val = f"[{shown}, ...] ({len(val)} values)"
            elif isinstance(val, list):
                val = (
                    "["
                    + ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in val)
                    + "]"
                )
            elif isinstance(val, float):
                val = f"{val:.6g}"
            out.append(f"  {key}: {val}")
    return "\n".join(out)


def _head(d: dict) -> list[str]:
    """Lines after the method's name and parameters: auto's choice, or a blend's weights."""
    if "cross_validation" in d:
        return _auto_head(d)
    if "components" in d:
        b = d["blend"]
        return [
            "blend of " + ", ".join(f"{m} ({w:.3f})" for m, w in zip(b["methods"], b["weights"]))
        ]
    return []


def _body(d: dict) -> dict:
    """The description whose method-wide and per-class entries are printed."""
    if "label_shift" in d:  # an adapted model: its source's description and what adapting added
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
    """A wrapper's inner description (``d["model"]``) with what the wrapper adds per class and
    method-wide."""
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
            c: {**info, **{k: v for k, v in outer["classes"].get(c, {}).items() if k not in info}}
            for c, info in inner["classes"].items()
        },
    }


def _auto_head(d: dict) -> list[str]:
    """auto's choice, its rule and the cross-validation table (then the chosen model)."""
    cv = d["cross_validation"]
    rule = cv.get("rule", "smallest cross-validated NLL")
    of = cv.get("of_samples", cv["samples"])
    on = (
        f"{cv['samples']:g} samples"
        if of <= cv["samples"]
        else f"a stratified subsample of {cv['samples']:g} of the {of:g} samples"
    )
    out = [f"chosen: {d['chosen']} ({rule}; {cv['folds']}-fold, seed {cv['seed']}, on {on})"]
    if cv.get("best") not in (None, d["chosen"]):
        out.append(f"best mean: {cv['best']}")
    fitted = sum(info["n_tp"] + info["n_fp"] for info in d["classes"].values())
    if fitted > of:
        out.append(
            f"updated since: the chosen method is fitted on {fitted:g} samples; "
            "fit auto again to re-choose"
        )
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
    model = d["model"]
    if d.get("blend"):
        b = d["blend"]
        out.append(
            "blend (beats the choice out of fold by {:.4f} ± {:.4f} NLL): ".format(
                -b["gain"], b["se"]
            )
            + ", ".join(f"{m} {w:.3f}" for m, w in zip(b["methods"], b["weights"]))
        )
    out.append(f"\nchosen model: {model['method']}, params {json.dumps(model['params'])}")
    return out
