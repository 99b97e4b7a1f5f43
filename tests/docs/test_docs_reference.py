"""The API reference (docs/reference/) names every public name, with an example that runs.

Each page's Python blocks run in order in one namespace, in a temporary folder, as the page
says; they belong to the ``examples`` lane (``make docs``, CI through .ci/run).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
from pathlib import Path

import pytest

import topcal
from _docs import blocks

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
PAGES = sorted(p.name for p in REFERENCE.glob("*.md") if p.name != "index.md")


def sections(page: str) -> dict[str, str]:
    """``::: name`` directive -> the text up to the next directive."""
    text = (REFERENCE / page).read_text()
    parts = re.split(r"^::: (\S+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_public_name_has_an_entry_with_an_example():
    """A name's entry is its ``::: topcal...NAME`` directive, or the directive of the module
    that holds it (``::: topcal.errors``) or that it is (``topcal.report.*``); its example is a
    Python block in that entry (a module page's: on the page)."""
    entries: dict[str, str] = {}  # public name -> the entry's text
    for page in PAGES:
        text = (REFERENCE / page).read_text()
        for directive, body in sections(page).items():
            name = directive.removeprefix("topcal.")
            entries.setdefault(name.rsplit(".", 1)[-1], body)
            module = getattr(topcal, name, None) if "." not in name else None
            if module is not None and type(module).__name__ in ("module", "_ReportPackage"):
                entries[name] = text
                for member in getattr(module, "__all__", []):
                    entries.setdefault(member, text)
            if name.startswith("report."):
                entries.setdefault("report", text)
    names = [n for n in topcal.__all__ if n != "__version__"]
    missing = [n for n in names if n not in entries]
    assert not missing, f"public names without a reference entry: {missing}"
    no_example = [n for n in names if "```python" not in entries[n]]
    assert not no_example, f"reference entries without an example: {no_example}"


@pytest.mark.examples
@pytest.mark.parametrize("page", PAGES)
def test_reference_examples_run(page, tmp_path):
    code = blocks(REFERENCE / page, "python")
    assert code, f"{page} has no example"
    namespace: dict = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            for block in code:
                exec(compile(block, f"{page}", "exec"), namespace)
    finally:
        os.chdir(cwd)
