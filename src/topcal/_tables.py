"""Plain-text and Markdown tables: the one table formatter of the command line and the
experiments."""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "format_value",
    "format_column",
    "text_table",
    "format_table",
    "markdown_table",
    "FORMULA_START",
    "csv_text",
    "csv_untext",
    "is_formula",
    "needs_quote",
    "printable",
    "EscapedStream",
]

#: First characters that make a spreadsheet evaluate a CSV cell (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: Of those, the ones that make any cell a formula (or, tab and carriage return, a cell some
#: spreadsheets strip and then evaluate).
_ALWAYS_FORMULA = ("=", "@", "\t", "\r")
#: After a leading ``+`` or ``-``, what a formula needs to do more than arithmetic: call a
#: function ``(``, run a DDE command ``|`` or reach another sheet or file ``!``. Without one
#: ("-", "+ve", "-2.5", "-2+3") a spreadsheet at worst computes or shows an error; the text
#: is left as it is.
_SIGNED_FORMULA = re.compile(r"[(|!]")

#: Characters a terminal acts on instead of showing: C0 controls, DEL, C1 controls (0x9b
#: starts an escape sequence too) and the bidirectional-text controls (they reorder what is
#: shown).
_CONTROL = "\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_CONTROL_RE: dict = {}


def _escape(m) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, keep: str = "\n\t") -> str:
    """``text`` for a terminal: control characters other than ``keep`` written as escapes
    (``\\x1b``, ``\\u202e``), so a class name cannot move the cursor, retitle the window or
    hide text. The command line's one escaping of what it prints (tables, messages,
    warnings)."""
    if text.isprintable():
        return text
    pattern = _CONTROL_RE.get(keep)
    if pattern is None:
        kept = "".join(re.escape(c) for c in keep)
        cls = f"[{_CONTROL}]" if not kept else f"(?![{kept}])[{_CONTROL}]"
        pattern = _CONTROL_RE[keep] = re.compile(cls)
    return pattern.sub(_escape, text)


class EscapedStream:
    """A text stream that writes through :func:`printable` (newlines and tabs kept): what
    the command line puts in place of ``sys.stdout`` while a command runs."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable(text))

    def __getattr__(self, name):
        return getattr(self.stream, name)


def is_formula(text: str) -> bool:
    """Whether a spreadsheet would run ``text`` as a formula: it starts with ``=``, ``@``, a
    tab or a carriage return, or with ``+`` or ``-`` and holds ``(``, ``|`` or ``!``
    (docs/cli.md, the paragraph on hostile names)."""
    if text.startswith(_ALWAYS_FORMULA):
        return True
    return text.startswith(("+", "-")) and _SIGNED_FORMULA.search(text) is not None


def needs_quote(text: str) -> bool:
    """Whether :func:`csv_text` adds a ``'``: a formula, or a formula behind leading ``'``
    (so that :func:`csv_untext` can tell the quote it strips from the user's own)."""
    return is_formula(text.lstrip("'"))


def csv_text(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: a leading ``'`` where it would be
    run as a formula (OWASP's neutralisation) or is such a cell already quoted; anything
    else unchanged. :func:`csv_untext` undoes it exactly."""
    return "'" + text if needs_quote(text) else text


def csv_untext(text: str) -> str:
    """The text :func:`csv_text` was given: one leading ``'`` removed where it added one (a
    ``'`` before a formula); anything else unchanged. ``csv_untext(csv_text(t)) == t`` for
    every ``t``."""
    return text[1:] if text.startswith("'") and needs_quote(text) else text


def format_value(v, width: int = 9, digits: int = 4) -> str:
    """A number right-aligned in ``width``: integers without decimals, None/NaN as "-"."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-".rjust(width)
    if isinstance(v, (int, np.integer)) or (
        isinstance(v, float) and float(v).is_integer() and abs(v) >= 1
    ):
        return f"{v:>{width}.0f}"
    return f"{v:>{width}.{digits}f}"


def _is_whole(v) -> bool:
    return isinstance(v, (int, np.integer)) or (isinstance(v, float) and float(v).is_integer())


def format_column(values, width: int = 9, digits: int = 4) -> list[str]:
    """A column of numbers right-aligned in ``width``, all alike: without decimals where
    every value is a whole number (counts: 0, not 0.0000), else each with ``digits``
    decimals (a tier of 1 beside 1.5 is 1.0000); None/NaN as "-", text as it is."""
    nums = [
        v
        for v in values
        if isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, bool)
        and not np.isnan(v)
    ]
    places = 0 if all(_is_whole(float(v)) for v in nums) else digits
    out = []
    for v in values:
        if isinstance(v, str):
            out.append(v.rjust(width))
        elif v is None or (isinstance(v, (float, np.floating)) and np.isnan(v)):
            out.append("-".rjust(width))
        else:
            out.append(f"{v:>{width}.{places}f}")
    return out


def text_table(
    header: list[str], rows: list[list[str]], first_width: int, widths: list[int]
) -> str:
    """Fixed-width text: the first column left-aligned in ``first_width``, the others
    right-aligned, a rule below the header."""

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
    """A plain fixed-width text table of numbers (:func:`format_value`), columns at least 9
    wide."""
    w0 = first_width or max(len(printable(str(r[0]), keep="")) for r in rows + [header])
    widths = [max(9, len(h)) for h in header[1:]]
    columns = [format_column([r[j + 1] for r in rows], w) for j, w in enumerate(widths)]
    cells = [[r[0]] + [col[i] for col in columns] for i, r in enumerate(rows)]
    return text_table(header, cells, w0, widths)


def _md_row(cells) -> str:
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def markdown_table(header: list[str], rows: list[list[str]], *, numeric: bool = True) -> str:
    """A Markdown table of preformatted cells; ``numeric`` right-aligns every column but the
    first."""
    rule = "|---|" + ("---:|" if numeric else "---|") * (len(header) - 1)
    return "\n".join([_md_row(header), rule] + [_md_row(r) for r in rows])
