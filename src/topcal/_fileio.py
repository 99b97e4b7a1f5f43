"""Safe output files: every writer of topcal goes through these helpers.

* :func:`check_output` refuses an output path that is one of the inputs
  (also through a hard link or a symbolic link), so no command can overwrite
  the data it reads.
* :func:`atomic_write` writes to a temporary file in the target's folder and
  renames it over the target only when the write succeeded; on any failure
  the temporary file is removed and a pre-existing target is left untouched.
* :func:`report_dir` does the same for a folder of files (the HTML report):
  the new folder is built beside the target and swapped in at the end. It
  only replaces a folder that is empty or that topcal made (it holds the
  marker file :data:`MARKER` listing the files topcal wrote there, and
  nothing else); a folder holding other files is refused unless
  ``force=True``, which then writes topcal's files into it and deletes
  nothing it did not write.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from .errors import TopcalError

__all__ = ["check_output", "atomic_write", "write_text", "report_dir", "check_report_dir", "MARKER"]

#: Marker file of a topcal-made folder; it lists the files topcal wrote there.
MARKER = ".topcal-report"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_output(output, inputs, what: str = "output file") -> None:
    """Raise TopcalError when ``output`` is one of ``inputs`` (same path, hard or symbolic link)."""
    out = Path(output)
    for inp in inputs:
        if inp is not None and _same(out, Path(inp)):
            raise TopcalError(
                f"the {what} is the input file {str(inp)!r} (same file as {str(out)!r}); "
                "write to another path so no data is lost"
            )


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _new_file_mode() -> int:
    return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_write(path):
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it is removed.

    OSErrors (missing folder, no permission, full disk) become one-line TopcalErrors.
    """
    target = Path(path)
    if target.is_dir():
        raise TopcalError(f"{str(target)!r} is a folder; give a file name to write")
    folder = target.parent
    if not folder.is_dir():
        raise TopcalError(f"cannot write {str(target)!r}: the folder {str(folder)!r} does not exist")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise TopcalError(f"cannot write {str(target)!r}: {_why(exc)}; check the path") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        mode = target.stat().st_mode & 0o7777 if target.exists() else _new_file_mode()
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        raise TopcalError(f"cannot write {str(target)!r}: {_why(exc)}; check the path") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _listed(folder: Path) -> set[str] | None:
    """Files (relative, '/'-separated) the marker of ``folder`` says topcal wrote; None without a marker."""
    marker = folder / MARKER
    if not marker.is_file():
        return None
    try:
        lines = marker.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return {ln.strip() for ln in lines[1:] if ln.strip()}


def _contents(folder: Path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for name in files:
            out.add((rel / name).as_posix())
        for name in dirs:
            sub = Path(root) / name
            if sub.is_symlink() or not any(sub.iterdir()):
                out.add((rel / name).as_posix() + "/")
    return out


def _foreign(folder: Path) -> list[str]:
    """Entries of ``folder`` that topcal did not write there (sorted)."""
    listed = _listed(folder) or set()
    dirs = {p.rsplit("/", 1)[0] + "/" for p in listed if "/" in p}
    return sorted(p for p in _contents(folder) if p != MARKER and p not in listed and p not in dirs)


def check_report_dir(out, force: bool = False) -> None:
    """Raise TopcalError unless ``out`` may receive a report (see the module docstring)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TopcalError(f"the report folder {str(out)!r} exists and is not a folder; choose another -o DIR")
    if out.is_dir() and not force:
        foreign = _foreign(out)
        if foreign:
            shown = ", ".join(repr(f) for f in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise TopcalError(
                f"the report folder {str(out)!r} holds files topcal did not write ({shown}); "
                "choose a new or empty folder, or pass --force to write index.html and figures/ into it "
                "(other files are kept)"
            )


@contextlib.contextmanager
def report_dir(out, force: bool = False):
    """Yield a fresh staging folder; on success its files become the folder ``out``.

    ``out`` missing, empty or topcal-made: the staged folder replaces it as a
    whole (an interrupted run leaves the old folder as it was). With
    ``force=True`` and other files in ``out``: the staged files are moved in
    one by one, replacing files of the same name, and only files an earlier
    topcal run listed in the marker are deleted.
    """
    out = Path(out)
    check_report_dir(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".topcal-tmp", dir=out.parent))
    except OSError as exc:
        raise TopcalError(f"cannot create the report folder {str(out)!r}: {_why(exc)}") from None
    try:
        yield stage
        written = sorted(_contents(stage))
        (stage / MARKER).write_text("files written by topcal; it may replace this folder\n"
                                    + "".join(f"{f}\n" for f in written), encoding="utf-8")
        os.chmod(stage, 0o777 & ~_umask())
        check_report_dir(out, force)  # the folder may have changed while the report was computed
        if not out.exists():
            os.rename(stage, out)
        elif not _foreign(out):
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".topcal-old", dir=out.parent))
            os.rmdir(old)
            os.rename(out, old)
            os.rename(stage, out)
            shutil.rmtree(old, ignore_errors=True)
        else:  # force, into a folder with other files
            before = _listed(out) or set()
            for rel in written + [MARKER]:
                dest = out / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / rel, dest)
            for rel in before - set(written):
                with contextlib.suppress(OSError):
                    (out / rel).unlink()
    except OSError as exc:
        raise TopcalError(f"cannot write the report folder {str(out)!r}: {_why(exc)}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
