"""Text tables of the metrics with intervals: ``metrics``' overall table, ``compare``'s
ranking, and the wrapping that keeps ``compare``'s prose within 100 columns."""

from __future__ import annotations

from .._tables import printable

__all__ = ["overall_lines", "ranking_table", "wrap_line"]


def overall_lines(res: dict, level: float) -> str:
    """The overall metrics ``{name: Estimate}`` as a text table: name, value, interval, what
    it is (or why it is missing)."""
    from ..overall import DESCRIPTIONS

    head = f"{'metric':<22} {'value':>9}  {f'{level:.0%} interval':<20}  what"
    lines = [head, "-" * len(head)]
    for name, e in res.items():
        value = "undefined" if e.value is None else f"{e.value:.4f}"
        span = "" if e.lo is None else f"[{e.lo:.4f}, {e.hi:.4f}]"
        what = e.reason or DESCRIPTIONS.get(name, "")
        if e.value is not None and e.lo is not None and not e.lo <= e.value <= e.hi:
            what += " (biased up; the interval is bias-corrected)"
        lines.append(f"{name:<22} {value:>9}  {span:<20}  {printable(what)}")
    return "\n".join(lines)


def ranking_table(ranking: dict) -> str:
    """Methods in rank order (lowest NLL first) with the paired 90% intervals of their NLL
    behind the best and their improvement over the uncalibrated score."""

    def span(e) -> str:
        if e is None or e["value"] is None:
            return "-"
        if e["lo"] is None:
            return f"{e['value']:+.4f}"
        return f"{e['value']:+.4f} [{e['lo']:+.4f}, {e['hi']:+.4f}]"

    head = f"{'rank':>4}  {'method':<16} {'NLL':>8}  {'behind best (paired)':<28} gain over uncal."
    lines = [head.rstrip(), "-" * len(head.rstrip())]
    for name, r in ranking.items():
        lines.append(
            f"{r['rank']:>4}  {printable(name):<16} {r['nll']['value']:>8.4f}  "
            f"{span(r['vs_best']) if r['rank'] > 1 else 'best':<28} {span(r['vs_baseline'])}"
        )
    lines.append(
        "(90% intervals of the per-sample NLL difference on the same rows: an interval "
        "above 0 is a gap beyond noise)"
    )
    return "\n".join(lines)


def wrap_line(line: str, width: int = 100) -> str:
    """A line of prose longer than ``width`` wrapped, its continuations indented (tables are
    narrower than ``width`` and pass unchanged)."""
    import textwrap

    if len(line) <= width:
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False)
