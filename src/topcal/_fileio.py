"""Safe output files: every writer of topcal goes through these helpers.

* :func:`check_output` refuses an output path that is one of the inputs (also through a hard
  link or a symbolic link), so no command can overwrite the data it reads.
* :func:`atomic_write` writes to a temporary file in the target's folder and renames it over
  the target only when the write succeeded; on any failure the temporary file is removed and
  a pre-existing target is left untouched. It **refuses** (never writes through, never
  replaces) a target that is a symbolic link, a device, pipe or socket, or a write-protected
  file: topcal only replaces regular files it may write.
* :func:`report_dir` does the same for a folder of files (the HTML report, Dask's Parquet
  output): the new folder is built beside the target and swapped in at the end. It only
  replaces a folder that is empty or that topcal made (it holds the marker file
  :data:`MARKER` listing the files topcal wrote there, and nothing else); a folder holding
  other files is refused unless ``force=True``, which then writes topcal's files into it and
  deletes nothing it did not write. Marker entries that leave the folder (``..``, absolute
  paths) or pass through a link are ignored, and a link where topcal would write is refused.

Temporary files and folders are named
``.<target>.topcal-partial-<pid>-<start>-<owner>-<random>`` (``.tmp`` for files): the
process id, its start time (clock ticks since boot) and a token of the PID namespace on this
boot of this kernel (:func:`owner_token`). A run killed outright (SIGKILL, power loss)
leaves one behind, and the next run writing the same target removes it only when it is
*provably ours and dead*: same owner token (a pid means nothing in another container's PID
namespace, or on another host sharing the folder over NFS) and no process of that pid, or
one that started at another time (the pid was reused). Anything else (another namespace's or
host's run, a name of an older topcal) is left alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath

from .errors import TopcalError

__all__ = [
    "check_output",
    "atomic_write",
    "write_text",
    "read_text",
    "decoded_path",
    "report_dir",
    "check_report_dir",
    "check_writable",
    "MARKER",
    "PARTIAL",
    "owner_token",
]

#: Marker file of a topcal-made folder; it lists the files topcal wrote there.
MARKER = ".topcal-report"
#: Part of the name of every temporary file or folder topcal writes beside a target.
PARTIAL = "topcal-partial"


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
    """Raise TopcalError when ``output`` is one of ``inputs`` (same path, hard or symbolic
    link)."""
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


def check_writable(target) -> None:
    """Raise TopcalError unless ``target`` is missing or a writable regular file (not a
    link, device or folder)."""
    target = Path(target)
    if target.is_symlink():
        raise TopcalError(
            f"{str(target)!r} is a symbolic link; topcal neither writes through nor "
            "replaces links: give the real path or a new file name"
        )
    try:
        st = target.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TopcalError(
            f"cannot write {str(target)!r}: {_why(exc)}; check the path"
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise TopcalError(f"{str(target)!r} is a folder; give a file name to write")
    if not stat.S_ISREG(st.st_mode):
        raise TopcalError(
            f"{str(target)!r} is not a regular file (a device, pipe or socket); topcal "
            "neither writes through nor replaces special files: give a file name"
        )
    if not st.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise TopcalError(
            f"{str(target)!r} is write-protected; topcal does not replace read-only files: "
            "make it writable (chmod u+w) or give another file name"
        )


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def owner_token() -> str:
    """12 hex digits naming this process's PID namespace on this boot of this kernel: a hash
    of the boot id and the namespace's inode (Linux), else of the host name. Two processes
    with the same token see the same pids; any other token's pids are not ours to judge."""
    ns = ""
    with contextlib.suppress(OSError):
        ns = os.readlink("/proc/self/ns/pid")
    boot = _read("/proc/sys/kernel/random/boot_id").strip()
    if not (ns and boot):
        import socket

        ns, boot = "no-namespaces", socket.gethostname()
    return hashlib.sha256(f"{boot}\0{ns}".encode()).hexdigest()[:12]


def _start_time(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot, /proc/PID/stat field 22); None when
    unknown or when /proc shows another PID namespace than ours (then its numbers are not
    our pids)."""
    with contextlib.suppress(OSError):
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
    text = _read(f"/proc/{pid}/stat")
    fields = text[text.rfind(")") + 1 :].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _stem(name: str) -> str:
    """``name`` as it appears in its temporary's name: long names shortened (with a hash, so
    names differing only at the end stay apart) to keep the temporary's name under the
    255-byte limit."""
    if len(os.fsencode(name)) <= 120:
        return name
    short = name
    while len(os.fsencode(short)) > 80:
        short = short[:-1]
    return f"{short}~{hashlib.sha256(os.fsencode(name)).hexdigest()[:12]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process (or a number we cannot ask about): leave it alone
    return True


def _dead_and_ours(pid: int, start: int, owner: str) -> bool:
    """Whether the run that named a temporary ``pid``, ``start``, ``owner`` is provably
    gone."""
    if owner != owner_token() or pid == os.getpid():
        return False  # another PID namespace or host: its pids say nothing here
    if not _alive(pid):
        return True
    now = _start_time(pid)
    return now is not None and start > 0 and now != start  # the pid was reused


def _remove_stale(folder: Path, name: str) -> None:
    """Remove the temporaries of ``name`` in ``folder`` left by killed runs, where provably
    ours and dead (module docstring); leave every other file alone."""
    fields = r"(\d{1,10})-(\d{1,20})-([0-9a-f]{12})-"  # pid, start time, owner token
    pattern = re.compile(re.escape(f".{_stem(name)}.{PARTIAL}-") + fields)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for e in entries:
        m = pattern.match(e.name)
        if m is None or not _dead_and_ours(int(m.group(1)), int(m.group(2)), m.group(3)):
            continue
        with contextlib.suppress(OSError):
            if e.is_symlink():
                continue
            if e.is_dir():
                shutil.rmtree(e.path, ignore_errors=True)
            elif e.is_file():
                os.unlink(e.path)


def _temp_prefix(name: str) -> str:
    pid = os.getpid()
    return f".{_stem(name)}.{PARTIAL}-{pid}-{_start_time(pid) or 0}-{owner_token()}-"


@contextlib.contextmanager
def atomic_write(path):
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure
    it is removed.

    A target that is a link, a special file or write-protected is refused
    (:func:`check_writable`), before anything is written and again before the rename.
    OSErrors (missing folder, no permission, full disk) become one-line TopcalErrors.
    """
    target = Path(path)
    check_writable(target)
    folder = target.parent
    if not folder.is_dir():
        raise TopcalError(
            f"cannot write {str(target)!r}: the folder {str(folder)!r} does not exist"
        )
    _remove_stale(folder, target.name)
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=_temp_prefix(target.name), suffix=".tmp", dir=folder
        )
    except OSError as exc:
        raise TopcalError(
            f"cannot write {str(target)!r}: {_why(exc)}; check the path"
        ) from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        check_writable(target)  # it may have changed while the output was computed
        mode = target.stat().st_mode & 0o7777 if target.exists() else _new_file_mode()
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        raise TopcalError(
            f"cannot write {str(target)!r}: {_why(exc)}; check the path"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def decoded_path(path) -> str | os.PathLike | None:
    """``path`` as a str or path object (bytes decoded as the file system does), or None
    where it is none of str, bytes or a path object."""
    if isinstance(path, (bytes, bytearray)):
        path = os.fsdecode(bytes(path))
    return path if isinstance(path, (str, os.PathLike)) else None


def read_text(path, what: str, error=TopcalError, type_hint: str = "") -> str:
    """The text of the file at ``path`` (a str, bytes or path object) for a reader of
    ``what`` (e.g. "model file"); ``error`` (a TopcalError class) with a one-line message
    when it cannot be read."""
    given, path = path, decoded_path(path)
    if path is None:
        raise error(
            f"the {what} must be given as a path (str, bytes or pathlib.Path), got "
            f"{type(given).__name__}{type_hint}"
        )
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise error(f"{what} {str(path)!r} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {str(path)!r}: {exc}") from None


def _inside(rel: str) -> bool:
    """A marker entry that stays inside its folder: relative, no ``..``, no drive or
    backslash tricks."""
    p = PurePosixPath(rel)
    return (
        bool(rel)
        and not p.is_absolute()
        and ".." not in p.parts
        and "\\" not in rel
        and "\x00" not in rel
    )


def _listed(folder: Path) -> set[str] | None:
    """Files (relative, '/'-separated) the marker of ``folder`` says topcal wrote; None
    without a marker.

    Entries that would leave the folder are dropped: a marker is a file anyone can edit.
    """
    marker = folder / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        lines = marker.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return {s for s in (ln.strip() for ln in lines[1:]) if _inside(s)}


def _contents(folder: Path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for name in files:
            p = Path(root) / name
            out.add((rel / name).as_posix() + ("@" if p.is_symlink() else ""))
        for name in dirs:
            sub = Path(root) / name
            if sub.is_symlink():
                # a link is never topcal's (it writes none)
                out.add((rel / name).as_posix() + "@")
            elif not any(sub.iterdir()):
                out.add((rel / name).as_posix() + "/")
    return out


def _foreign(folder: Path) -> list[str]:
    """Entries of ``folder`` that topcal did not write there (sorted; links end in '@')."""
    listed = _listed(folder) or set()
    dirs = {p.rsplit("/", 1)[0] + "/" for p in listed if "/" in p}
    return sorted(
        p for p in _contents(folder) if p != MARKER and p not in listed and p not in dirs
    )


def _link_on_the_way(out: Path, rel: str) -> str | None:
    """The first component of ``out/rel`` (below ``out``) that is a link or not a folder
    where one is needed."""
    cur = out
    parts = PurePosixPath(rel).parts
    for i, part in enumerate(parts):
        cur = cur / part
        if cur.is_symlink():
            return "/".join(parts[: i + 1])
        if i < len(parts) - 1 and cur.exists() and not cur.is_dir():
            return "/".join(parts[: i + 1])
    return None


def _check_folder_path(out: Path, what: str) -> None:
    if out.is_symlink():
        raise TopcalError(
            f"the {what} {str(out)!r} is a symbolic link; topcal does not write through "
            "links: give the real folder or a new name"
        )
    here = Path.cwd().resolve()
    real = out.resolve()
    if real == here or real in here.parents:
        raise TopcalError(
            f"the {what} {str(out)!r} is the current folder or holds it; give a new folder "
            "name, e.g. -o results"
        )


def check_report_dir(
    out,
    force: bool = False,
    *,
    what: str = "report folder",
    writes=("index.html", "figures"),
    inputs=(),
) -> None:
    """Raise TopcalError unless ``out`` may receive a report (see the module docstring).

    ``writes``: top-level names topcal will write (checked for links with ``force``);
    ``inputs``: paths read by the command, which must not lie inside ``out``.
    """
    out = Path(out)
    _check_folder_path(out, what)
    if out.exists() and not out.is_dir():
        raise TopcalError(
            f"the {what} {str(out)!r} exists and is not a folder; choose another -o DIR"
        )
    real = out.resolve()
    for inp in inputs:
        if inp is None:
            continue
        p = Path(inp).resolve()
        if p == real or real in p.parents:
            raise TopcalError(
                f"the {what} {str(out)!r} holds the input {str(inp)!r}, which writing the "
                "folder would replace; choose another -o DIR"
            )
    if out.is_dir():
        foreign = _foreign(out)
        if foreign and not force:
            shown = ", ".join(repr(f) for f in foreign[:3]) + (
                f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            )
            how = (
                "choose a new or empty folder, or pass --force to write index.html and "
                "figures/ into it (other files are kept)"
                if writes
                else "choose a new or empty folder (topcal replaces only a folder it wrote itself)"
            )
            raise TopcalError(
                f"the {what} {str(out)!r} holds files topcal did not write ({shown}); {how}"
            )
        if foreign:
            for rel in (*writes, MARKER):
                bad = _link_on_the_way(out, rel)
                if bad is not None:
                    raise TopcalError(
                        f"{bad!r} in the {what} {str(out)!r} is a link or not a folder; "
                        "topcal does not write through links: remove it or choose another "
                        "folder"
                    )


def _unlink_inside(out: Path, rel: str) -> None:
    """Delete the regular file ``out/rel`` unless a link or a non-folder lies on the way."""
    if _link_on_the_way(out, rel) is None:
        p = out / rel
        with contextlib.suppress(OSError):
            if stat.S_ISREG(p.lstat().st_mode):
                p.unlink()


@contextlib.contextmanager
def report_dir(
    out,
    force: bool = False,
    *,
    what: str = "report folder",
    writes=("index.html", "figures"),
    inputs=(),
):
    """Yield a fresh staging folder; on success its files become the folder ``out``.

    ``out`` missing, empty or topcal-made: the staged folder replaces it as a whole (an
    interrupted run leaves the old folder as it was). With ``force=True`` and other files in
    ``out``: the staged files are moved in one by one, replacing files of the same name, and
    only files an earlier topcal run listed in the marker are deleted. Links on the way are
    refused.
    """
    out = Path(os.path.abspath(out))
    check_report_dir(out, force, what=what, writes=writes, inputs=inputs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(out.parent, out.name)
        stage = Path(
            tempfile.mkdtemp(prefix=_temp_prefix(out.name), suffix=".tmp", dir=out.parent)
        )
    except OSError as exc:
        raise TopcalError(f"cannot create the {what} {str(out)!r}: {_why(exc)}") from None
    try:
        yield stage
        written = sorted(_contents(stage))
        (stage / MARKER).write_text(
            "files written by topcal; it may replace this folder\n"
            + "".join(f"{f}\n" for f in written),
            encoding="utf-8",
        )
        os.chmod(stage, 0o777 & ~_umask())
        check_report_dir(
            out, force, what=what, writes=writes, inputs=inputs
        )  # it may have changed meanwhile
        if not out.exists():
            os.rename(stage, out)
        elif not _foreign(out):
            old = Path(
                tempfile.mkdtemp(prefix=_temp_prefix(out.name), suffix=".old", dir=out.parent)
            )
            os.rmdir(old)
            os.rename(out, old)
            os.rename(stage, out)
            shutil.rmtree(old, ignore_errors=True)
        else:  # force, into a folder with other files
            for rel in written + [MARKER]:
                bad = _link_on_the_way(out, rel.rstrip("/"))
                if bad is not None or (not rel.endswith("/") and (out / rel).is_dir()):
                    raise TopcalError(
                        f"{bad or rel!r} in the {what} {str(out)!r} is a link or a folder "
                        "where topcal writes a file; remove it or choose another folder"
                    )
            before = _listed(out) or set()
            for rel in written + [MARKER]:
                dest = out / rel
                if rel.endswith("/"):  # an empty folder
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / rel, dest)
            for rel in sorted(before - set(written) - {MARKER}):
                _unlink_inside(out, rel)
    except OSError as exc:
        raise TopcalError(f"cannot write the {what} {str(out)!r}: {_why(exc)}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
