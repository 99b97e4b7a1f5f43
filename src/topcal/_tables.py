"""Plain-text and Markdown tables: the one table formatter of the command line and the experiments."""

from __future__ import annotations

import numpy as np

__all__ = ["format_value", "text_table", "format_table", "markdown_table"]


def format_value(v, width: int = 9, digits: int = 4) -> str:
    """A number right-aligned in ``width``: integers without decimals, None/NaN as "-"."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-".rjust(width)
    if isinstance(v, (int, np.integer)) or (isinstance(v, float) and float(v).is_integer() and abs(v) >= 1):
        return f"{v:>{width}.0f}"
    return f"{v:>{width}.{digits}f}"


def text_table(header: list[str], rows: list[list[str]], first_width: int, widths: list[int]) -> str:
    """Fixed-width text: the first column left-aligned in ``first_width``, the others right-aligned, a rule below
    the header."""
    lines = [str(header[0]).ljust(first_width) + "".join(" " + str(h).rjust(w) for h, w in zip(header[1:], widths))]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(str(r[0]).ljust(first_width) + "".join(" " + str(c).rjust(w) for c, w in zip(r[1:], widths)))
    return "\n".join(lines)


def format_table(header: list[str], rows: list[list], first_width: int | None = None) -> str:
    """A plain fixed-width text table of numbers (:func:`format_value`), columns at least 9 wide."""
    w0 = first_width or max(len(str(r[0])) for r in rows + [header])
    widths = [max(9, len(h)) for h in header[1:]]
    cells = [[r[0]] + [format_value(v, w) for v, w in zip(r[1:], widths)] for r in rows]
    return text_table(header, cells, w0, widths)


def _md_row(cells) -> str:
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def markdown_table(header: list[str], rows: list[list[str]], *, numeric: bool = True) -> str:
    """A Markdown table of preformatted cells; ``numeric`` right-aligns every column but the first."""
    rule = "|---|" + ("---:|" if numeric else "---|") * (len(header) - 1)
    return "\n".join([_md_row(header), rule] + [_md_row(r) for r in rows])
