"""Durable file operations: atomic replace with fsync, mode and owner kept, stale .pyc dropped.

``fault(step)`` is the fault-injection point of the write path: the reliability suite
sets ``SM120PATCH_FAULT=<step>[@<n>][:<ERRNO>|:kill]`` to kill the process or raise an
I/O error at the n-th time a step is reached (docs/reliability.md).  Unset, it is a no-op.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_hits: Counter[str] = Counter()


def fault(step: str) -> None:
    spec = os.environ.get("SM120PATCH_FAULT")
    if not spec:
        return
    where, _, action = spec.partition(":")
    name, _, nth = where.partition("@")
    if name != step:
        return
    _hits[step] += 1
    if _hits[step] != int(nth or 1):
        return
    if action in ("", "kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    code = getattr(errno, action)
    raise OSError(code, os.strerror(code), step)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, like: Path | None = None) -> None:
    """Replace ``path`` with ``data`` all at once: a reader sees the old or the new file.

    The bytes go to a temp file in the same directory, are fsynced, get the mode and owner
    of ``like`` (default: ``path`` itself), and ``os.replace`` swaps them in; the directory
    is fsynced so the rename survives power loss.  Symlinks are resolved first: the real
    file is replaced and the link stays a link.
    """
    real = Path(os.path.realpath(path))
    reference = like if like is not None else real
    try:
        st: os.stat_result | None = os.stat(reference)
    except FileNotFoundError:
        st = None
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fault("write")
            fh.write(data)
            fh.flush()
            fault("fsync")
            os.fsync(fh.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
                try:
                    os.chown(tmp, st.st_uid, st.st_gid)
                except PermissionError:
                    pass  # not root: the file keeps our owner, as any editor would leave it
        fault("rename")
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(real.parent)


TEMP_SUFFIX = ".sm120patch-tmp"


def remove_stale_temps(directories: Iterable[Path]) -> int:
    """Delete temp files a killed run left behind (callers hold the tree's lock)."""
    removed = 0
    for directory in set(directories):
        for leftover in directory.glob(f".*{TEMP_SUFFIX}"):
            try:
                leftover.unlink()
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def drop_pycache(source: Path) -> list[Path]:
    """Delete cached bytecode of ``source`` so the next import compiles the new text."""
    real = Path(os.path.realpath(source))
    cache = real.parent / "__pycache__"
    removed = []
    for pyc in cache.glob(f"{real.stem}.*.pyc"):
        try:
            pyc.unlink()
            removed.append(pyc)
        except FileNotFoundError:
            pass
    return removed
