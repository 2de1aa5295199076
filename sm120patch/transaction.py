"""All-or-nothing replacement of several files, with a journal for crash recovery.

Protocol (each step durable before the next):

1. the new content of every file is in the state dir (``backups/`` or ``staged/``), fsynced;
2. ``journal.json`` names every file with its sha256 before and after and where its new
   content is, plus the manifest to leave behind; it is written atomically, so it either
   exists whole or not at all;
3. each target is replaced atomically (``fsutil.atomic_write``);
4. the manifest is written (or the state removed, for revert), then the journal deleted.

A process killed anywhere leaves either no journal (nothing was replaced yet) or a whole
journal: the next run finishes it (``recover``), file by file, since every target is then
either at its "before" hash (not yet replaced) or its "after" hash (done).  Anything else
means someone else changed the file meanwhile, and recovery stops without touching it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sm120patch.errors import EnvironmentProblem, NotAsAsked
from sm120patch.fsutil import atomic_write, drop_pycache, fault, remove_stale_temps, sha256_file
from sm120patch.state import Manifest, StateDir


@dataclass(frozen=True)
class Entry:
    rel: str
    path: str  # target file (symlinks resolved when written)
    before: str
    after: str
    source: str  # new content, relative to the state dir


def commit(state: StateDir, entries: list[Entry], manifest: Manifest | None, op: str) -> None:
    journal = {
        "format": 1,
        "op": op,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "entries": [e.__dict__ for e in entries],
        "manifest": manifest.to_json() if manifest is not None else None,
    }
    try:
        fault("journal")
        state.write_json(state.journal_path, journal)
    except OSError as exc:
        raise EnvironmentProblem(
            f"{op} stopped before changing any sglang file: cannot write {state.journal_path} "
            f"({exc.strerror})"
        ) from exc
    try:
        _finish(state, journal)
    except OSError as exc:
        raise EnvironmentProblem(
            f"{op} was stopped by an I/O error ({exc.strerror}: {exc.filename or '?'}). Each "
            f"file is either as before or fully changed; {state.journal_path} lets the next "
            "`sm120patch apply` or `revert` finish the job once the problem is fixed"
        ) from exc


def _finish(state: StateDir, journal: dict) -> list[str]:
    done = []
    for raw in journal["entries"]:
        entry = Entry(**raw)
        current = sha256_file(Path(entry.path))
        if current == entry.after:
            continue
        if current != entry.before:
            raise NotAsAsked(
                f"interrupted {journal['op']}: {entry.rel} is neither the version before "
                f"({entry.before[:12]}) nor after ({entry.after[:12]}) the operation; it was "
                f"changed by something else. Left as is. Compare it with "
                f"{state.root / entry.source}, then remove {state.journal_path}"
            )
        source = state.root / entry.source
        data = source.read_bytes()
        if hashlib.sha256(data).hexdigest() != entry.after:
            raise NotAsAsked(f"interrupted {journal['op']}: {source} is damaged; {entry.rel} left as is")
        fault("replace")
        atomic_write(Path(entry.path), data)
        drop_pycache(Path(entry.path))
        done.append(entry.rel)
    fault("finalize")
    if journal["manifest"] is not None:
        state.save(Manifest.from_json(dict(journal["manifest"])))
        shutil.rmtree(state.root / "staged", ignore_errors=True)
    else:
        state.clear()
    try:
        state.journal_path.unlink()
    except FileNotFoundError:
        pass
    return done


def recover(state: StateDir) -> str | None:
    """Finish an operation a killed process left behind; say what was done."""
    journal = state.load_journal()
    if journal is None:
        shutil.rmtree(state.root / "staged", ignore_errors=True)  # never committed
        return None
    remove_stale_temps(Path(os.path.realpath(e["path"])).parent for e in journal["entries"])
    done = _finish(state, journal)
    files = ", ".join(done) if done else "no file needed it"
    return (
        f"recovered an interrupted {journal['op']} (pid {journal.get('pid', '?')}, started "
        f"{journal.get('started', '?')}): finished it ({files})"
    )
