"""An OSError at a chosen point where sm120patch touches the user's files or the environment
(tests only; tests/cli/test_no_raw_oserror.py).

The points are what the running command does under one folder (``root``: the miniature
release, its dist-info, the state folder, the scratch folders, a ``--model-config``, a
``--plot``), seen three ways:

* the interpreter's audit events (``sys.addaudithook``): every ``open`` (a read, a write, a
  lock file, a temp file), ``os.rename`` (``os.replace`` too), ``os.remove``, ``os.mkdir``,
  ``os.rmdir``, ``os.scandir`` / ``os.listdir`` (``glob``, ``iterdir``), ``os.chmod``,
  ``fcntl.flock`` and ``os.truncate`` (the lock file), and ``subprocess.Popen`` of any
  program (a probe, nvidia-smi);
* fsutil's ``STEP_HOOK`` (write, fsync, rename, journal, replace, finalize: the points
  tests/support/faulty_cli.py fails), the fsync that has no audit event;
* fsutil's ``OP_HOOK`` after a directory fsync (``fsync_dir``).

``record(root)`` lists the points a command reaches, each as (kind, path relative to
``root`` with a temp name's random part as ``*``, n-th time); ``fail(root, point, errno)``
raises ``OSError(errno)`` there, with the path as its ``filename`` where the call would
name one.  Production code never sees any of it: the hook does nothing unless a test armed it.
"""

from __future__ import annotations

import errno as errnos
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sm120patch.patcher.transaction import fsutil

#: The audit events that touch a path (the path is their first argument).
PATH_EVENTS = frozenset(
    {"open", "os.rename", "os.remove", "os.mkdir", "os.rmdir", "os.scandir", "os.listdir", "os.chmod"}
)
#: The audit events on a file descriptor sm120patch holds.
FD_EVENTS = frozenset({"fcntl.flock", "os.truncate"})

ERRNOS = (
    "EACCES",
    "EPERM",
    "EROFS",
    "ENOSPC",
    "EIO",
    "ENOENT",
    "ELOOP",
    "EISDIR",
    "ENOTDIR",
    "EDQUOT",
    "EMFILE",
    "ENOLCK",
)


@dataclass(frozen=True, order=True)
class Point:
    kind: str  # an audit event, "step:<name>" or "op:fsync_dir"
    path: str  # relative to the root ("" for a step, which names no path; the program for Popen)
    nth: int  # the n-th time this (kind, path) is met in the run

    def __str__(self) -> str:
        return f"{self.kind} {self.path or '-'} #{self.nth}"


@dataclass
class _Armed:
    root: str
    point: Point | None  # None: only record
    errno: int = 0
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    points: list[Point] = field(default_factory=list)
    fired: Point | None = None
    fired_path: str | None = None  # the absolute path it named


class _Hook:
    """What the process-wide audit hook does now: nothing unless ``armed``."""

    armed: _Armed | None = None
    installed = False  # once per process: an audit hook cannot be removed


def _normalize(rel: str) -> str:
    parts = []
    for part in rel.split("/"):
        parts.append(re.sub(r"^(\.[^.]+(?:\.[^.]+)*?\.|\.sm120patch-probe-|sm120patch-)[a-z0-9_]{8}", r"\1*", part))
    return "/".join(parts)


def _relative(armed: _Armed, path: object) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return None  # a file descriptor
    text = os.path.abspath(os.fspath(path))
    if text != armed.root and not text.startswith(armed.root + os.sep):
        return None
    return _normalize(os.path.relpath(text, armed.root))


def _meet(armed: _Armed, kind: str, rel: str, absolute: str | None) -> None:
    armed.seen[(kind, rel)] += 1
    point = Point(kind, rel, armed.seen[(kind, rel)])
    if armed.point is None:
        armed.points.append(point)
    elif point == armed.point and armed.fired is None:
        armed.fired, armed.fired_path = point, absolute
        if absolute is None:
            raise OSError(armed.errno, os.strerror(armed.errno))
        raise OSError(armed.errno, os.strerror(armed.errno), absolute)


def _audit(event: str, args: tuple[object, ...]) -> None:
    armed = _Hook.armed
    if armed is None:
        return
    if event == "subprocess.Popen":
        program = os.path.basename(os.fsdecode(args[0])) if isinstance(args[0], (str, bytes, os.PathLike)) else "?"
        _meet(armed, event, program, os.fsdecode(args[0]) if isinstance(args[0], (str, bytes, os.PathLike)) else None)
        return
    if event in FD_EVENTS:  # the lock file's descriptor: flock, and the truncate before its pid is written
        _meet(armed, event, "", None)
        return
    if event not in PATH_EVENTS or not args:
        return
    rel = _relative(armed, args[0])
    if rel is not None:
        _meet(armed, event, rel, os.path.abspath(os.fsdecode(args[0])))  # type: ignore[arg-type]


def _step(name: str) -> None:
    if _Hook.armed is not None:
        _meet(_Hook.armed, f"step:{name}", "", None)


def _op(op: fsutil.Op) -> None:
    armed = _Hook.armed
    if armed is not None and op.kind == "fsync_dir":
        rel = _relative(armed, op.path)
        if rel is not None:
            _meet(armed, "op:fsync_dir", rel, str(op.path))


@contextmanager
def _armed(root: Path, point: Point | None, errno: int = 0) -> Iterator[_Armed]:
    if not _Hook.installed:
        sys.addaudithook(_audit)
        _Hook.installed = True
    scratch = root / "tmp"  # the probes' scratch folders count as the environment's
    scratch.mkdir(exist_ok=True)
    armed = _Armed(os.path.abspath(root), point, errno)
    saved = (fsutil.STEP_HOOK, fsutil.OP_HOOK, tempfile.tempdir)
    fsutil.STEP_HOOK, fsutil.OP_HOOK, tempfile.tempdir = _step, _op, str(scratch)
    _Hook.armed = armed
    try:
        yield armed
    finally:
        _Hook.armed = None
        fsutil.STEP_HOOK, fsutil.OP_HOOK, tempfile.tempdir = saved


def record(root: Path) -> AbstractContextManager[_Armed]:
    """``with record(root) as seen:`` ... ``seen.points``: every point met."""
    return _armed(root, None)


def fail(root: Path, point: Point, errno: int) -> AbstractContextManager[_Armed]:
    """``with fail(root, point, errno) as armed:`` ... ``armed.fired``: whether it was met."""
    return _armed(root, point, errno)


def code(name: str) -> int:
    return int(getattr(errnos, name))
