"""A kde class's fitted state in its three layouts, and the model file's form of each
(private module of :mod:`topcal.calibrators.kde`; docs/kde.md, "Persistence").

Every layout keeps the bandwidth, engine, degenerate note, sign changes, admissibility,
candidate range and the table's range (``table_lo``, ``table_hi``), and:

* ``"table"``: the kernel centres and weights (``points``, ``tp``, ``fp``) and the full
  prediction table (``table``, ``table_n``): what a fit holds until it ends, what older
  files hold (they load and save as they were), and what degenerate classes keep (two
  points);
* ``"centres"``: the kernel centres and weights and the table's grid (``table_stride``:
  every that many fine cells), whose values are computed where a prediction needs them
  (:data:`~._compact.CENTRES_MAX` centres at most);
* ``"knots"``: the number of kernel centres (``centres``), the grid (``table_cells``), the
  table at its knots (``knots``, ``conf``, ``count``; ``_compact.select_knots``) and the
  interval's wide-bandwidth terms where the bandwidth spans the class (``wide``: cells,
  scale, bias).
"""

from __future__ import annotations

import math

import numpy as np

from ..base import finite_array, to_jsonable
from ._compact import CENTRES_MAX, round_values, select_knots
from ._kernels import FINE_CELLS
from ._tables import layout, wide_of

__all__ = ["compact_states", "drop_tables", "dump_state", "load_state"]

#: The keys every layout starts with, in a fit's order.
_HEAD = ("bandwidth", "engine", "degenerate", "sign_changes", "admissible", "b_range")


def _compactable(st) -> bool:
    """A fitted class whose table is stored at knots: not degenerate, and binned or with
    more than CENTRES_MAX centres."""
    return (
        st is not None
        and st["degenerate"] is None
        and "table" in st
        and (st["engine"] == "binned" or st["points"].size > CENTRES_MAX)
    )


def compact_states(states, count_scale, wide_sd, bounds=None) -> list:
    """``states`` with every binned-engine class (and exact one of more than CENTRES_MAX
    centres) in the "knots" layout: its table at the knots of ``_compact.select_knots`` (all
    such classes in one call), its interval's wide-bandwidth terms computed from its centres
    (``_tables.wide_of``), the centres themselves dropped."""
    ks = [k for k, st in enumerate(states) if _compactable(st)]
    if not ks:
        return list(states)
    sizes = np.array([states[k]["table"].size for k in ks], dtype=np.int64)
    off = np.concatenate([[0], np.cumsum(sizes)])
    knot, conf, count = select_knots(
        np.concatenate([states[k]["table"] for k in ks]),
        np.concatenate([states[k]["table_n"] for k in ks]),
        off,
    )
    out = list(states)
    for j, k in enumerate(ks):
        st = states[k]
        sel = np.flatnonzero(knot[off[j] : off[j + 1]])
        wide = wide_of(st, count_scale, wide_sd, bounds)
        if wide is not None:
            wide = (wide[0], round_values(wide[1]), round_values(wide[2]))
        out[k] = {
            **{h: st[h] for h in _HEAD},
            "centres": int(st["points"].size),
            "table_lo": st["table_lo"],
            "table_hi": st["table_hi"],
            "table_cells": int(sizes[j] - 1),
            "knots": sel,
            "conf": conf[off[j] : off[j + 1]][sel],
            "count": count[off[j] : off[j + 1]][sel],
            "wide": wide,
        }
    return out


def drop_tables(states) -> list:
    """``states`` with every other non-degenerate class that still holds its full table in
    the "centres" layout: the table dropped, its grid kept (``table_stride``)."""
    out = list(states)
    for k, st in enumerate(states):
        if st is not None and st["degenerate"] is None and "table" in st:
            rest = {h: v for h, v in st.items() if h not in ("table", "table_n")}
            out[k] = {**rest, "table_stride": FINE_CELLS // (st["table"].size - 1)}
    return out


def dump_state(st) -> dict:
    """One class's state as JSON (null for no bandwidth; the wide terms as a dict)."""
    d = dict(st)
    if np.isnan(d["bandwidth"]):
        d["bandwidth"] = None
    if "wide" in d and d["wide"] is not None:
        cells, scale, bias = d["wide"]
        d["wide"] = {"cells": cells, "scale": scale, "bias": bias}
    return to_jsonable(d)


def load_state(state: dict) -> dict:
    """Validate one class's saved state, any layout (raise ValueError if malformed); the
    keys in the order they were saved, so that a loaded model saves the same file."""
    b = state["bandwidth"]
    if b is None:
        b = float("nan")  # no bandwidth (fitting.NO_BANDWIDTH)
    else:
        b = float(b)
        if not (math.isfinite(b) and b > 0):
            raise ValueError("bandwidth must be a positive number or null")
    if state["engine"] not in (None, "exact", "binned"):
        raise ValueError(f"unknown engine {state['engine']!r}")
    br = state["b_range"]
    out = {
        "bandwidth": b,
        "engine": state["engine"],
        "degenerate": None if state["degenerate"] is None else str(state["degenerate"]),
        "sign_changes": int(state["sign_changes"]),
        "admissible": bool(state["admissible"]),
        "b_range": None if br is None else _pair(br, "b_range"),
    }
    kind = layout(state)
    if kind == "knots":
        out["centres"] = _count(state["centres"], "centres", 1)
    else:  # one conversion and one check for the three lists (a model has a thousand classes)
        out["points"], out["tp"], out["fp"] = _finite_rows(state, ("points", "tp", "fp"))
        if np.any(out["tp"] < 0) or np.any(out["fp"] < 0) or not out["points"].size:
            raise ValueError("tp and fp must hold weights >= 0 of at least one kernel centre")
    lo, hi = float(state["table_lo"]), float(state["table_hi"])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError("table_lo and table_hi must be finite with table_lo <= table_hi")
    out["table_lo"], out["table_hi"] = lo, hi
    if kind == "table":
        table = finite_array(state["table"], "table")
        if table.size < 2 or np.any((table < 0) | (table > 1)):
            raise ValueError("table must hold at least 2 confidences in [0, 1]")
        out["table"] = table
        if "table_n" in state:  # the counts behind the table (files since shrinkage)
            n = finite_array(state["table_n"], "table_n", table.size)
            out["table_n"] = _counts(n, "table_n")
    elif kind == "centres":
        stride = _count(state["table_stride"], "table_stride", 1)
        if FINE_CELLS % stride or stride > FINE_CELLS:
            raise ValueError(f"table_stride must divide {FINE_CELLS}")
        out["table_stride"] = stride
    else:
        cells = _count(state["table_cells"], "table_cells", 1)
        knots = np.asarray(state["knots"])
        if (
            knots.ndim != 1
            or knots.size < 2
            or knots.dtype.kind != "i"
            or knots[0] != 0
            or knots[-1] != cells
            or np.any(np.diff(knots) <= 0)
        ):
            raise ValueError("knots must be increasing grid points from 0 to table_cells")
        conf = finite_array(state["conf"], "conf", knots.size)
        if np.any((conf < 0) | (conf > 1)):
            raise ValueError("conf must hold confidences in [0, 1]")
        count = _counts(finite_array(state["count"], "count", knots.size), "count")
        wide = state["wide"]
        if wide is not None:
            n_wide = _count(wide["cells"], "wide cells", 1)
            wide = (
                n_wide,
                finite_array(wide["scale"], "wide scale", n_wide + 1),
                finite_array(wide["bias"], "wide bias", n_wide + 1),
            )
        out.update(
            table_cells=cells, knots=knots.astype(np.int64), conf=conf, count=count, wide=wide
        )
    return out


#: The largest sample count a model file may state at a point: doubles' exact integers (no
#: data set holds more rows); a larger one (a hand-edited 1e308) only makes the interval's
#: ends NaN.
MAX_COUNT = 2.0**53


def _counts(values: np.ndarray, name: str) -> np.ndarray:
    if np.any((values < 0) | (values > MAX_COUNT)):
        raise ValueError(f"{name} must hold sample counts in [0, 2**53]")
    return values


def _pair(values, name: str) -> list:
    """Two finite numbers (raise ValueError otherwise)."""
    if not isinstance(values, list) or len(values) != 2:
        raise ValueError(f"{name} must be a list of 2 finite numbers")
    out = [float(v) for v in values]
    if not all(map(math.isfinite, out)):
        raise ValueError(f"{name} must be a list of 2 finite numbers")
    return out


def _finite_rows(state: dict, keys) -> np.ndarray:
    """The lists ``keys`` of ``state`` as the rows of one array: finite numbers, one length."""
    try:
        rows = np.array([state[k] for k in keys], dtype=np.float64)
    except ValueError:  # lists of different lengths, or not lists
        rows = None
    if rows is None or rows.ndim != 2 or not np.isfinite(rows).all():
        raise ValueError(f"{', '.join(keys)} must be lists of finite numbers of one length")
    return rows


def _count(v, name: str, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ValueError(f"{name} must be an integer >= {least}")
    return v
