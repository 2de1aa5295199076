"""All-or-nothing replacement of several files, with a journal for crash recovery.

Protocol (each step durable before the next):

1. ``check_writable`` proves every target can be replaced, before anything is written;
2. the new content of every file is in the state dir (``backups/`` or ``staged/``), fsynced
   (``stage`` for apply; revert's new content is the backup);
3. ``journal.json`` names every file with its sha256 before and after and where its new
   content is, plus the manifest to leave behind; written atomically, it exists whole or not;
4. each target is replaced atomically (``fsutil.atomic_write``; a link revert puts back,
   ``fsutil.atomic_symlink``), by its own name: never a file in a store it links to
   (``links.py``);
5. the manifest is written (or the state removed, for revert), then the journal deleted.

A process killed anywhere leaves either no journal (nothing was replaced yet) or a whole
journal: the next run finishes it (``recover``), file by file, since every target is then
either at its "before" identity (not yet replaced) or its "after" one (done): a file's sha256,
or a symlink's text (``links.identity``), never the bytes a link leads to.  Anything else
means someone else changed the file meanwhile, and recovery stops without touching it.

This layer knows files, not patches: it takes paths, bytes, hashes and patch ids
(``Change``, ``Entry``); the commands turn a plan into them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from sm120patch.errors import EnvironmentProblem, NotAsAsked
from sm120patch.patcher.transaction import links
from sm120patch.patcher.transaction.fsutil import (
    atomic_symlink,
    atomic_write,
    drop_pycache,
    fsync_dir,
    remove_stale_temps,
    remove_tree,
    sha256,
    step,
    unlink,
    write_advice,
)
from sm120patch.patcher.transaction.state_dir import FORMAT_WITHOUT_LIMIT, FileRecord, Manifest, StateDir, format_for

JOURNAL_FORMAT = 1


class Op(str, Enum):
    """What a journal commits (its ``op`` field on disk)."""

    APPLY = "apply"
    REVERT = "revert"


@dataclass(frozen=True)
class Entry:
    """One name the journal replaces.  ``before`` and ``after`` are what ``links.identity``
    gives: a file's sha256, or ``link:<text>`` for a symlink."""

    rel: str
    path: str  # the name replaced (``links.target``: never a file in a store it links to)
    before: str
    after: str
    source: str  # new content, relative to the state dir
    link: str | None = None  # the new state is this symlink (revert of a link apply replaced)


@dataclass(frozen=True)
class Change:
    """One file apply replaces: its bytes now and after, and the patches the change applies."""

    rel: str
    path: Path
    before: bytes
    after: bytes
    patches: tuple[str, ...]
    link: str | None = None  # ``path`` is a symlink out of the package, with this text: kept


@dataclass
class Journal:
    op: Op
    entries: list[Entry]
    manifest: dict[str, Any] | None  # what to leave behind; None: remove the state (revert)
    pid: int = field(default_factory=os.getpid)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    format: int = JOURNAL_FORMAT

    def to_json(self) -> dict[str, Any]:
        data = {**asdict(self), "op": self.op.value}
        for entry in data["entries"]:
            if entry["link"] is None:  # a file's entry, as journals without links have it
                del entry["link"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Journal:
        try:
            entries = [Entry(**e) for e in data["entries"]]
            return cls(
                Op(data["op"]), entries, data["manifest"], data.get("pid", 0), data.get("started", "?"), data["format"]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvironmentProblem(
                f"the journal of an interrupted run is corrupted ({exc})", code="state-damaged"
            ) from exc


def check_writable(paths: list[Path]) -> None:
    """Prove each file can be replaced before replacing any: open it for appending (writes
    nothing) and create a temp file beside it.  ``os.access`` would say yes to root even
    for an immutable file or a read-only mount.  A symlink or a hard link is not opened: its
    data is a store's, never written (``os.replace`` needs only the folder, which the temp
    file proves)."""
    for path in paths:
        try:
            if not path.is_symlink() and os.stat(path).st_nlink == 1:
                with open(path, "ab"):
                    pass
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".sm120patch-probe-"):
                pass
        except OSError as exc:
            advice = write_advice(exc)
            raise EnvironmentProblem(
                f"{path}: cannot be replaced ({exc.strerror}); no sglang file was changed"
                + (f": {advice}" if advice else ""),
                code="not-writable",
            ) from exc


def remove_temps(state: StateDir, targets: list[Path]) -> None:
    """Temp files of a killed run: beside the targets and anywhere in the state dir."""
    dirs = []
    for path in targets:
        with contextlib.suppress(EnvironmentProblem):  # a folder out of the package: apply refuses it
            dirs.append(links.target(state.root.parent, path).path.parent)
    try:
        dirs += [d for d in state.root.rglob("*") if d.is_dir()] + [state.root]
        remove_stale_temps(d for d in dirs if d.is_dir())
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot remove {exc.filename or 'a temp file'}, left by a run that was killed ({exc.strerror}); "
            "no sglang file was changed",
            code="not-writable",
        ) from exc


def unchanged(expected: Iterable[tuple[Path, bytes | None]]) -> bool:
    """Whether every file still has the bytes expected of it (None: the file is absent)."""
    for path, data in expected:
        try:
            current = path.read_bytes() if path.is_file() else None
        except OSError:
            return False
        if current != data:
            return False
    return True


def stage(state: StateDir, changes: Sequence[Change], manifest: Manifest) -> list[Entry]:
    """Back up each original (first apply only) and stage each new content, durably; record
    each file, and the patches its change applies, in ``manifest``."""
    entries = []
    writing = state.root  # named when a write fails
    try:
        for change in changes:
            rel = change.rel
            before, after = sha256(change.before), sha256(change.after)
            record = manifest.files.get(rel)
            if record is not None and before == record.sha256_before:
                record.link = change.link  # the original again: a link now, or a file
            if record is None or (before not in (record.sha256_before, record.sha256_after)):
                # First time this file is patched, or it was edited by hand since: back up what
                # is there now, and keep the earlier backup aside rather than overwrite it.
                writing = state.backup_path(rel)
                if record is not None:
                    state.keep_aside(f"superseded-{rel.replace('/', '_')}", state.backup_path(rel))
                state.put(state.backup_path(rel), change.before)
                record = FileRecord(before, after, [], f"backups/{rel}", link=change.link)
            writing = state.staged_path(rel)
            state.put(state.staged_path(rel), change.after)
            record.sha256_after = after
            record.patches = sorted(set(record.patches) | set(change.patches))
            manifest.files[rel] = record
            was = before if change.link is None else links.LINK_PREFIX + change.link
            entries.append(Entry(rel, str(change.path), was, after, f"staged/{rel}"))
    except OSError as exc:
        remove_tree(state.root / "staged")
        raise EnvironmentProblem(
            f"cannot write backups into {state.root}: {writing} ({exc.strerror}); no sglang file was changed",
            code="not-writable",
        ) from exc
    return entries


def journal_format(entries: list[Entry], manifest: Manifest | None) -> int:
    """1, as journals always were, unless it records links (an entry's, or the manifest's it
    leaves) or a token limit: then the lowest state format that holds them (``format_for``)."""
    link = any(e.link is not None or e.before.startswith(links.LINK_PREFIX) for e in entries)
    needed = max(manifest.lowest_format() if manifest is not None else FORMAT_WITHOUT_LIMIT, format_for(False, link))
    return needed if needed > FORMAT_WITHOUT_LIMIT else JOURNAL_FORMAT


def commit(state: StateDir, entries: list[Entry], manifest: Manifest | None, op: Op) -> None:
    """Journal ``entries``, replace each target, then leave ``manifest`` (None: remove the state)."""
    for entry in entries:  # a journal whose "before" is not what is there could never finish
        if links.identity(Path(entry.path)) not in (entry.before, entry.after):
            raise NotAsAsked(
                f"{op.value}: {entry.rel} changed while sm120patch read it; nothing was written. Run it again",
                code="changed-while-read",
            )
    journal = Journal(
        op, entries, manifest.to_json() if manifest is not None else None, format=journal_format(entries, manifest)
    )
    try:
        step("journal")
        state.write_json(state.journal_path, journal.to_json())
    except OSError as exc:
        raise EnvironmentProblem(
            f"{op.value} stopped before changing any sglang file: cannot write {state.journal_path} ({exc.strerror})",
            code="not-writable",
        ) from exc
    try:
        _finish(state, journal)
    except OSError as exc:
        raise _stopped(state, op.value, exc) from exc


def _stopped(state: StateDir, what: str, exc: OSError) -> EnvironmentProblem:
    """An I/O error while the journal stands: each file is as before or fully changed."""
    return EnvironmentProblem(
        f"{what} was stopped by an I/O error ({exc.strerror or exc}: {exc.filename or '?'}). Each "
        f"file is either as before or fully changed; {state.journal_path} lets the next "
        "`sm120patch apply` or `revert` finish the job once the problem is fixed"
    )


def _short(identity: str) -> str:
    """An identity as a message names it: a link whole, a hash by its first 12 digits."""
    return identity if identity.startswith(links.LINK_PREFIX) else identity[:12]


def _finish(state: StateDir, journal: Journal) -> list[str]:
    done = []
    for entry in journal.entries:
        current = links.identity(Path(entry.path))
        if current == entry.after:
            continue
        if current != entry.before:
            raise NotAsAsked(
                f"interrupted {journal.op.value}: {entry.rel} is neither the version before "
                f"({_short(entry.before)}) nor after ({_short(entry.after)}) the operation; it was "
                f"changed by something else. Left as is. Compare it with "
                f"{state.root / entry.source}, then remove {state.journal_path}",
                code="changed-since-apply",
            )
        step("replace")
        if entry.link is not None:
            atomic_symlink(Path(entry.path), entry.link)
        else:
            source = state.root / entry.source
            data = source.read_bytes()
            if sha256(data) != entry.after:
                raise NotAsAsked(
                    f"interrupted {journal.op.value}: {source} is damaged; {entry.rel} left as is", code="state-damaged"
                )
            atomic_write(Path(entry.path), data)
        drop_pycache(Path(entry.path))
        done.append(entry.rel)
    step("finalize")
    if journal.manifest is not None:
        state.save(Manifest.from_json(dict(journal.manifest)))
        remove_tree(state.root / "staged")
    else:
        state.clear()
    unlink(state.journal_path)
    fsync_dir(state.root)
    return done


def interrupted(state: StateDir) -> Journal | None:
    """The journal of an apply/revert a killed process left behind, or None.  A damaged one
    raises the same EnvironmentProblem for every command: verify, list and doctor name it as
    apply and revert do, rather than judge a tree that is half of one operation."""
    data = state.load_journal()
    return None if data is None else Journal.from_json(data)


def recover(state: StateDir) -> str | None:
    """Finish an operation a killed process left behind; say what was done."""
    journal = interrupted(state)
    if journal is None:
        remove_tree(state.root / "staged")  # never committed
        return None
    try:
        remove_stale_temps(Path(e.path).parent for e in journal.entries)
        done = _finish(state, journal)
    except OSError as exc:
        raise _stopped(state, f"finishing the interrupted {journal.op.value}", exc) from exc
    files = ", ".join(done) if done else "no file needed it"
    op, pid, started = journal.op.value, journal.pid, journal.started
    return f"recovered an interrupted {op} (pid {pid}, started {started}): finished it ({files})"
