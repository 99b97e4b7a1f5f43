"""Plain-text and Markdown tables: the one table formatter of the command line and the
experiments."""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "format_value",
    "text_table",
    "format_table",
    "markdown_table",
    "FORMULA_START",
    "csv_text",
    "is_formula",
    "printable",
    "EscapedStream",
]

#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A plain decimal number ("-1", "+0.5", "-2e-3"): never a formula, so left as it is.
_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"


#: Characters a terminal acts on instead of showing: C0 controls, DEL, C1 controls (0x9b starts an
#: escape sequence too) and the bidirectional-text controls (they reorder what is shown).
_CONTROL = "\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_CONTROL_RE: dict = {}


def _escape(m) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, keep: str = "\n\t") -> str:
    """``text`` for a terminal: control characters other than ``keep`` written as escapes
    (``\\x1b``, ``\\u202e``), so a class name cannot move the cursor, retitle the window or
    hide text. The command line's one escaping of what it prints (tables, messages, warnings)."""
    if text.isprintable():
        return text
    pattern = _CONTROL_RE.get(keep)
    if pattern is None:
        kept = "".join(re.escape(c) for c in keep)
        cls = f"[{_CONTROL}]" if not kept else f"(?![{kept}])[{_CONTROL}]"
        pattern = _CONTROL_RE[keep] = re.compile(cls)
    return pattern.sub(_escape, text)


class EscapedStream:
    """A text stream that writes through :func:`printable` (newlines and tabs kept): what the
    command line puts in place of ``sys.stdout`` while a command runs."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable(text))

    def __getattr__(self, name):
        return getattr(self.stream, name)


def is_formula(text: str) -> bool:
    """Whether a spreadsheet would evaluate ``text`` as a formula (:data:`FORMULA_START`, and not
    a number)."""
    return text.startswith(FORMULA_START) and re.fullmatch(_NUMBER, text) is None


def csv_text(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: a leading ``'`` where it would be a
    formula (OWASP's neutralisation); anything else unchanged."""
    return "'" + text if is_formula(text) else text


def format_value(v, width: int = 9, digits: int = 4) -> str:
    """A number right-aligned in ``width``: integers without decimals, None/NaN as "-"."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-".rjust(width)
    if isinstance(v, (int, np.integer)) or (
        isinstance(v, float) and float(v).is_integer() and abs(v) >= 1
    ):
        return f"{v:>{width}.0f}"
    return f"{v:>{width}.{digits}f}"


def text_table(
    header: list[str], rows: list[list[str]], first_width: int, widths: list[int]
) -> str:
    """Fixed-width text: the first column left-aligned in ``first_width``, the others right-aligned,
    a rule below
    the header."""

    def cell(v):  # one line per row: a newline in a class name is shown as \x0a
        return printable(str(v), keep="")

    def line(r):
        rest = "".join(" " + cell(c).rjust(w) for c, w in zip(r[1:], widths))
        return cell(r[0]).ljust(first_width) + rest

    lines = [line(header)]
    lines.append("-" * len(lines[0]))
    lines += [line(r) for r in rows]
    return "\n".join(lines)


def format_table(header: list[str], rows: list[list], first_width: int | None = None) -> str:
    """A plain fixed-width text table of numbers (:func:`format_value`), columns at least 9 wide."""
    w0 = first_width or max(len(printable(str(r[0]), keep="")) for r in rows + [header])
    widths = [max(9, len(h)) for h in header[1:]]
    cells = [[r[0]] + [format_value(v, w) for v, w in zip(r[1:], widths)] for r in rows]
    return text_table(header, cells, w0, widths)


def _md_row(cells) -> str:
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def markdown_table(header: list[str], rows: list[list[str]], *, numeric: bool = True) -> str:
    """A Markdown table of preformatted cells; ``numeric`` right-aligns every column but the
    first."""
    rule = "|---|" + ("---:|" if numeric else "---|") * (len(header) - 1)
    return "\n".join([_md_row(header), rule] + [_md_row(r) for r in rows])
