"""Durable file operations: atomic replace with fsync, mode and owner kept, stale .pyc dropped.

Every change apply and revert make on disk goes through this module: a file written and
fsynced, a rename, a directory fsync, an unlink.  Two hooks, both None in production:

* ``step(name)`` marks each point of the write path (write, fsync, rename here; the journal,
  each replace and the finalize in journal.py); the reliability suite sets ``STEP_HOOK`` to
  kill the process or raise an I/O error there (tests/support/faulty_cli.py, docs/reliability.md);
* ``OP_HOOK`` sees each operation as it is done (``Op``); the crash-consistency tests record
  them and rebuild every disk state a power cut could leave.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

STEP_HOOK: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Op:
    """One operation on disk: ``create`` (a new file with ``data``, not yet fsynced),
    ``symlink`` (a new link whose text is ``data``), ``fsync`` (its data), ``rename``
    (``path`` to ``target``), ``unlink``, ``fsync_dir``."""

    kind: str
    path: Path
    target: Path | None = None
    data: bytes | None = None


OP_HOOK: Callable[[Op], None] | None = None


def _did(kind: str, path: Path, target: Path | None = None, data: bytes | None = None) -> None:
    if OP_HOOK is not None:
        OP_HOOK(Op(kind, Path(path), None if target is None else Path(target), data))


def step(name: str) -> None:
    """A point of the write path where the reliability suite may inject a fault."""
    if STEP_HOOK is not None:
        STEP_HOOK(name)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def fsync_dir(directory: Path) -> None:
    """Make the renames and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _did("fsync_dir", directory)


def rename(source: Path, target: Path) -> None:
    """``os.replace``; durable once the directories are fsynced."""
    os.replace(source, target)
    _did("rename", source, target)


def unlink(path: Path) -> None:
    """Remove a file if it is there; durable once its directory is fsynced."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        _did("unlink", path)


def remove_tree(directory: Path) -> None:
    """Remove a directory of files (staged copies, backups) file by file, then the folders."""
    if not directory.is_dir():
        return
    for path in sorted(directory.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.rmdir()
        else:
            unlink(path)
    with contextlib.suppress(OSError):
        directory.rmdir()


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` all at once: a reader sees the old or the new file.

    The bytes go to a temp file in the same directory, are fsynced, get the mode and owner
    of the file they replace (if there is one), and ``os.replace`` swaps them in; the
    directory is fsynced so the rename survives power loss.  The name ``path`` is replaced,
    never what it links to: a symlink or hard link into a store becomes a file of its own
    (``links.target`` says which name to pass).
    """
    path = Path(path)
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            step("write")
            fh.write(data)
            fh.flush()
            _did("create", Path(tmp), data=data)
            step("fsync")
            os.fsync(fh.fileno())
            _did("fsync", Path(tmp))
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
                # Not root: the file keeps our owner, as any editor would leave it.
                with contextlib.suppress(PermissionError):
                    os.chown(tmp, st.st_uid, st.st_gid)
        step("rename")
        rename(Path(tmp), path)
    except BaseException:  # a KeyboardInterrupt too: never leave the temp file, and re-raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_symlink(path: Path, text: str) -> None:
    """Replace ``path`` with a symlink whose text is ``text``, all at once: the link is made
    under a temp name beside it, renamed over it, and the directory fsynced."""
    tmp = path.parent / f".{path.name}.{os.getpid()}{TEMP_SUFFIX}"
    unlink(tmp)
    step("write")
    os.symlink(text, tmp)
    _did("symlink", tmp, data=os.fsencode(text))
    try:
        step("rename")
        rename(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


TEMP_SUFFIX = ".sm120patch-tmp"


def remove_stale_temps(directories: Iterable[Path]) -> None:
    """Delete temp files a killed run left behind (callers hold the tree's lock)."""
    for directory in set(directories):
        for leftover in directory.glob(f".*{TEMP_SUFFIX}"):
            unlink(leftover)


def drop_pycache(source: Path) -> None:
    """Delete cached bytecode of ``source`` so the next import compiles the new text."""
    for pyc in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
        unlink(pyc)


def write_advice(exc: OSError) -> str:
    """What the user can do about ``exc``, a write refused under the sglang install, as one
    clause; "" where no permission is at fault (a file where a folder goes, a race).  Owner
    and permission differ in what to do: the owner makes the tree writable, anyone else runs
    as its owner."""
    if exc.errno == errno.EROFS:
        return "its file system is mounted read-only: patch the image it comes from, or mount it read-write"
    if exc.errno not in (errno.EACCES, errno.EPERM) or not exc.filename:
        return ""
    where = Path(os.fsdecode(exc.filename))
    if not where.exists():  # a file that was to be made: its folder refused it
        where = where.parent
    try:
        owner = where.stat().st_uid
    except OSError:
        return "run as the user who owns the sglang install, or make it writable"
    if owner == os.geteuid():
        immutable = " (or `chattr -i` it, where it is immutable)" if exc.errno == errno.EPERM else ""
        return f"you own {where} but may not write there: make it writable (`chmod -R u+w {where}`){immutable}"
    import pwd

    try:
        name = pwd.getpwuid(owner).pw_name
    except KeyError:
        name = f"uid {owner}"
    return f"{where} belongs to {name}: run as {name}, or have it made writable for you"
