"""Saved state: manifest, backups, journal and lock, inside the patched sglang tree.

Layout (``<sglang package dir>/.sm120patch/``, so it travels with the tree through a
Docker layer or an rsync and lives on the same filesystem as the files it protects)::

    manifest.json        what was patched: versions, per file sha256 before/after, patch ids
    backups/<rel>        byte-for-byte originals, written and fsynced before any target
    journal.json         present only while an apply/revert is committing (journal.py)
    staged/<rel>         new contents named by the journal
    lock                 flock()ed by the one process that may write (readers share it)
    stale-<ver>-<time>/  state of an earlier sglang release, kept aside after an upgrade
                         (``-2``, ``-3``, … added when a set-aside in the same second took it)

A complete revert removes the directory (``remove``); it stays only for what must be kept.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sm120patch import __version__
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.transaction.fsutil import atomic_write, fsync_dir, remove_tree, rename, unlink, write_advice
from sm120patch.sglang.tree import DIRNAME

FORMAT = 5  # 2: the manifest also records what the last apply saw in each file (``checked``)
# 3: and the fusion token limit the last apply was asked for (``token_limit``)
# 4: and which files were symlinks out of the package, that revert puts back (a file's ``link``)
# 5: and the TP the auto-enable was asked to admit SM12x at (``auto_enable_tp``)
# A manifest or journal is written with the lowest format that holds what it records
# (``format_for``), so an older sm120patch reads it where it can and says "upgrade" where not.
FORMAT_WITHOUT_AUTO_ENABLE = 4
FORMAT_WITHOUT_LINK = 3
FORMAT_WITHOUT_LIMIT = 2


def format_for(token_limit: bool, link: bool, auto_enable: bool = False) -> int:
    """The lowest state format that holds a token limit (``token_limit``), links (``link``)
    and the auto-enable's TP (``auto_enable``)."""
    if auto_enable:
        return FORMAT
    if link:
        return FORMAT_WITHOUT_AUTO_ENABLE
    return FORMAT_WITHOUT_LINK if token_limit else FORMAT_WITHOUT_LIMIT


BENCH_RESULT = "bench-last.json"  # bench kernel's last result (bench/kernel/saved.py); a full revert removes it
#: Times a writer makes the state directory and opens its lock before giving up: a revert that
#: finishes meanwhile removes the directory between the two.
LOCK_OPEN_TRIES = 5
T = TypeVar("T")


@dataclass
class FileRecord:
    sha256_before: str
    sha256_after: str
    patches: list[str]
    backup: str  # relative to the state dir
    link: str | None = None  # the file was a symlink out of the package with this text: revert relinks


@dataclass
class Manifest:
    sglang_version: str | None
    sglang_location: str
    tool_version: str = __version__
    format: int = FORMAT
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    updated: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    files: dict[str, FileRecord] = field(default_factory=dict)
    fingerprint: str = ""  # of the sm120patch code that wrote ``checked`` (plan/fingerprint.py)
    patch_set: list[str] = field(default_factory=list)  # the patches that last apply ran
    registry: list[str] = field(default_factory=list)  # every patch that sm120patch had
    # What the last apply saw in each file once the tree was written: plan/trust.py's
    # ``CheckedFile`` as JSON.  Written and read by trust.py alone; here it is only carried.
    checked: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The fusion token limit the last apply was asked for and its source (plan/token_limit.py).
    token_limit: dict[str, Any] | None = None
    # The TP the auto-enable was asked to admit SM12x at, "2" or "any" (plan/auto_enable.py).
    auto_enable_tp: str | None = None
    seal: str = ""  # sha256 over the fields above that plan/trust.py relies on

    def lowest_format(self) -> int:
        """The format this manifest is written with (``format_for``)."""
        links = any(r.link is not None for r in self.files.values())
        return format_for(self.token_limit is not None, links, self.auto_enable_tp is not None)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for rec in data["files"].values():
            if rec["link"] is None:  # what a file of its own had before links were recorded
                del rec["link"]
        if data["token_limit"] is None:  # as a manifest of a tool without --fuse-up-to has it
            del data["token_limit"]
        if data["auto_enable_tp"] is None:  # as a manifest of a tool without --auto-enable-tp has it
            del data["auto_enable_tp"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        """Raises TypeError on a shape this tool never wrote (``StateDir.load`` says so)."""
        files = {rel: FileRecord(**rec) for rel, rec in data.pop("files", {}).items()}
        checked = data.pop("checked", {})
        if not isinstance(checked, dict) or not all(isinstance(rec, dict) for rec in checked.values()):
            raise TypeError("'checked' is not an object of objects")
        return cls(**data, files=files, checked=checked)


class StateDir:
    def __init__(self, package_dir: Path) -> None:
        self.root = package_dir / DIRNAME

    def make(self) -> None:
        """Create the state directory, ignored by git (as pytest does for its cache): in a
        checkout, ``git status`` then shows the patched files and nothing of the state."""
        self.root.mkdir(parents=True, exist_ok=True)
        # Created once, in place and exclusively: every run calls this before it holds the lock,
        # so a temp file here could be taken for a stale one by the run that does.
        with contextlib.suppress(FileExistsError):
            fd = os.open(self.root / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, b"# written by sm120patch: its backups and state stay out of git\n*\n")
            finally:
                os.close(fd)

    # -- paths ---------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def journal_path(self) -> Path:
        return self.root / "journal.json"

    @property
    def sweep_path(self) -> Path:
        """What the last apply's sweep of SM checks found (plan/gate_sweep.py)."""
        return self.root / "sweep.json"

    def backup_path(self, rel: str) -> Path:
        return self.root / "backups" / rel

    def staged_path(self, rel: str) -> Path:
        return self.root / "staged" / rel

    # -- manifest ------------------------------------------------------------
    def load(self) -> Manifest | None:
        data = self._read_json(self.manifest_path, "manifest")
        if data is None:
            return None
        try:
            return Manifest.from_json(data)
        except (TypeError, AttributeError) as exc:  # a field missing, unknown or of another shape
            raise EnvironmentProblem(
                f"{self.manifest_path} is corrupted ({exc}); move {self.root} away and "
                "reinstall sglang (pip install --force-reinstall --no-deps sglang==<version>) "
                "to get pristine files",
                code="state-damaged",
            ) from exc

    def _read_json(self, path: Path, what: str) -> dict[str, Any] | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise EnvironmentProblem(f"{path}: cannot read the {what} ({exc.strerror})", code="state-damaged") from exc
        try:
            data = json.loads(raw)  # UTF-8 (or -16, -32); bytes that decode as none raise a ValueError
            fmt = data["format"]
        except (ValueError, KeyError, TypeError) as exc:
            raise EnvironmentProblem(
                f"{path} is corrupted (not a {what} this tool wrote); move {self.root} away "
                "and reinstall sglang to get pristine files, or restore it from a backup",
                code="state-damaged",
            ) from exc
        if not isinstance(fmt, int) or fmt > FORMAT:
            raise EnvironmentProblem(
                f"{path} was written by a newer sm120patch (state format {fmt}, this is "
                f"{__version__} with format {FORMAT}); upgrade sm120patch",
                code="state-newer",
            )
        return data

    def write_json(self, path: Path, data: dict[str, Any]) -> None:
        self.make()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())

    def save(self, manifest: Manifest) -> None:
        manifest.updated = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest.format = manifest.lowest_format()
        self.write_json(self.manifest_path, manifest.to_json())

    def load_journal(self) -> dict[str, Any] | None:
        return self._read_json(self.journal_path, "journal")

    # -- files ---------------------------------------------------------------
    def put(self, path: Path, data: bytes) -> None:
        """Write a backup or staged file durably (atomic, fsynced, directory fsynced)."""
        self.make()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)

    def new_folder(self, name: str) -> Path:
        """Create and return ``<name>/``, or ``<name>-2/``, ``<name>-3/``, … when that name is
        taken: what is kept aside never lands on what was kept before."""
        target, n = self.root / name, 1
        while True:
            try:
                target.mkdir(parents=True)
                return target
            except FileExistsError:
                n += 1
                target = self.root / f"{name}-{n}"

    def _new_stale_dir(self, label: str) -> Path:
        """``stale-<label>-<time>/`` (``-2``, ``-3``, … when a set-aside in the same second took it)."""
        return self.new_folder(f"stale-{label}-{time.strftime('%Y%m%dT%H%M%S')}")

    def set_aside(self, label: str) -> Path:
        """Move the current state under ``stale-<label>-<time>/``, never deleting it."""
        target = self._new_stale_dir(label)
        # Backups first: a kill in between leaves the manifest, which the next run sets
        # aside again; the backups are never left where a new apply would overwrite them.
        for name in ("backups", "manifest.json", self.sweep_path.name):
            if (self.root / name).exists():
                rename(self.root / name, target / name)
        fsync_dir(target)
        fsync_dir(self.root)
        return target

    def kept_states(self) -> list[tuple[str, Manifest]]:
        """The states set aside (``stale-*/`` folders with a manifest), newest first, each with
        its folder's name: ``<name>/<record.backup>`` is a backup of it.  One that does not load
        (damaged, or of a newer format) is left where it is, unread."""
        try:
            folders = [p for p in self.root.iterdir() if p.name.startswith("stale-") and p.is_dir()]
        except OSError:
            return []
        kept = []
        for folder in folders:
            with contextlib.suppress(EnvironmentProblem, OSError):
                manifest = StateDir._at(folder).load()
                if manifest is not None:
                    kept.append(((folder / "manifest.json").stat().st_mtime_ns, folder.name, manifest))
        return [(name, manifest) for _, name, manifest in sorted(kept, key=lambda k: k[:2], reverse=True)]

    @staticmethod
    def _at(root: Path) -> StateDir:
        """A state directory at ``root`` itself (a kept-aside one), for reading its manifest."""
        state = StateDir(root)
        state.root = root
        return state

    def keep_aside(self, label: str, path: Path) -> None:
        """Move one file under ``stale-<label>-<time>/`` (never delete a backup)."""
        if not path.exists():
            return
        target = self._new_stale_dir(label) / path.name
        rename(path, target)
        fsync_dir(target.parent)
        fsync_dir(self.root)  # the new stale folder's name
        fsync_dir(path.parent)

    def clear(self) -> None:
        """Remove manifest and backups after a completed revert (stale-* dirs stay)."""
        unlink(self.manifest_path)
        unlink(self.sweep_path)
        fsync_dir(self.root)  # the manifest is gone before any backup is
        remove_tree(self.root / "backups")
        remove_tree(self.root / "staged")
        fsync_dir(self.root)
        # The directory and its lock file stay: ``remove`` takes them, under the lock, once
        # a revert is complete.

    # -- lock ----------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.root / "lock"

    @contextmanager
    def lock(self, timeout: float = 300.0, shared: bool = False) -> Iterator[bool]:
        """One writer per tree; readers (``shared``) wait for it.  flock() is released by the
        kernel when a process dies, so a killed run never leaves a lock that blocks the next one.

        A writer creates the state directory and the lock file.  A reader creates nothing: with
        no lock file (no apply has begun here) it holds no lock and gets False; ``consistent``
        then checks that no writer began meanwhile.  A full revert removes the lock file while
        holding it (``remove``): whoever locked the removed file locks the new one instead."""
        while True:
            fd = self._open_lock(shared)
            if fd is None:
                yield False
                return
            try:
                self._flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, timeout)
            except BaseException:
                os.close(fd)
                raise
            if self._is_current(fd):
                break
            os.close(fd)  # a revert removed this lock file while we waited: lock the new one
        try:
            if not shared:
                try:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, str(os.getpid()).encode(), 0)
                except OSError as exc:
                    raise EnvironmentProblem(
                        f"cannot write the pid into {self.lock_path} ({exc.strerror})", code="not-writable"
                    ) from exc
            yield True
        finally:
            os.close(fd)  # closing releases the flock

    def consistent(self, read: Callable[[], T]) -> T:
        """``read()`` on a tree no apply or revert is changing: under a shared lock, or, where
        there is no lock file yet, judged again under the lock if a writer began meanwhile (a
        writer creates the lock file before it changes any file)."""
        while True:
            with self.lock(shared=True) as held:
                result = read()
            if held or not self.lock_path.exists():
                return result

    def _open_lock(self, shared: bool) -> int | None:
        """The lock file, opened; a reader gets None where there is none (and creates nothing)."""
        if shared:
            try:
                return os.open(self.lock_path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise EnvironmentProblem(f"cannot read {self.lock_path} ({exc.strerror})", code="unreadable") from exc
        try:
            for _ in range(LOCK_OPEN_TRIES - 1):
                with contextlib.suppress(FileNotFoundError):  # a revert removed the directory meanwhile
                    return self._make_and_open()
            return self._make_and_open()
        except OSError as exc:
            advice = write_advice(exc)
            raise EnvironmentProblem(
                f"cannot create the state directory {self.root} ({exc.strerror}: {exc.filename or self.lock_path})"
                + (f"; {advice}" if advice else ""),
                code="not-writable",
            ) from exc

    def _make_and_open(self) -> int:
        self.make()
        return os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)

    def _flock(self, fd: int, how: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):  # ENOLCK: a filesystem without locks
                    raise EnvironmentProblem(
                        f"cannot lock {self.lock_path} ({exc.strerror})", code="not-writable"
                    ) from exc
                if time.monotonic() > deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                    raise EnvironmentProblem(
                        f"another sm120patch (pid {holder or '?'}) has held {self.lock_path} for over {timeout:.0f}s",
                        code="locked",
                    ) from exc
                time.sleep(0.05)

    def _is_current(self, fd: int) -> bool:
        """Whether the locked file is still the one at ``lock_path`` (not removed by a revert)."""
        try:
            path = os.stat(self.lock_path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (path.st_dev, path.st_ino)

    def remove(self) -> list[str]:
        """After a full revert, under the lock: remove the state directory, the lock file last,
        so that nothing of this tool is left in the sglang tree.  What must be kept (``stale-*``
        folders: an earlier release's backups, files a ``revert --force`` kept aside) keeps the
        directory; their names are returned."""
        unlink(self.root / BENCH_RESULT)  # a measurement of this tree, no backup: it goes too
        kept = sorted(p.name for p in self.root.iterdir() if p.name not in ("lock", ".gitignore"))
        if not kept:
            unlink(self.root / ".gitignore")
        unlink(self.lock_path)  # whoever waits on it locks a new one (``lock``)
        if not kept:
            with contextlib.suppress(OSError):  # someone put a file there meanwhile: it stays
                self.root.rmdir()
            fsync_dir(self.root.parent)
        else:
            fsync_dir(self.root)
        return kept
