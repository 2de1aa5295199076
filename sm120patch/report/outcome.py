"""What a command found and did, as report.py renders it (rich text or JSON)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from sm120patch.errors import ExitCode
from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State


class Command(str, Enum):
    APPLY = "apply"
    VERIFY = "verify"
    REVERT = "revert"
    LIST = "list"


@dataclass(frozen=True)
class Evidence:
    line: int
    text: str


@dataclass
class PatchReport:
    """One patch's state in one file, as found and as it will be after the planned change."""

    id: str
    summary: str
    requires: tuple[str, ...]
    file: str  # relative to the sglang package dir
    state: State  # as found
    detail: str
    where: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    state_after: State | None = None  # after the planned change (== state when nothing changes)


@dataclass
class FilePlan:
    rel: str
    path: Path
    original: bytes | None  # None: the file does not exist
    updated: bytes | None = None  # None: unchanged
    reports: list[PatchReport] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.updated is not None and self.updated != self.original


@dataclass
class Plan:
    """Every selected patch checked (and, for apply, its change made in memory)."""

    tree: SglangTree
    files: list[FilePlan]
    refusal: str | None = None

    @property
    def reports(self) -> list[PatchReport]:
        return [r for f in self.files for r in f.reports]

    @property
    def changes(self) -> list[FilePlan]:
        return [f for f in self.files if f.changed]

    @property
    def drift(self) -> list[PatchReport]:
        return [r for r in self.reports if r.state is State.DRIFT]


class Recorded(str, Enum):
    """What the saved state says a file's current bytes are."""

    PATCHED = "patched"
    ORIGINAL = "original"


class CheckedBy(str, Enum):
    """How a file's patch states were established."""

    STRUCTURE = "structure"  # parsed and matched
    HASH = "hash"  # its bytes are exactly what this tool wrote and recorded


@dataclass
class FileStatus:
    rel: str
    sha256: str | None
    record_sha256: str | None
    recorded: Recorded | None  # per the manifest, or None (unknown to it / changed since)
    checked_by: CheckedBy = CheckedBy.STRUCTURE

    @property
    def pristine(self) -> bool | None:
        if self.record_sha256 is None:
            return None
        return self.sha256 == self.record_sha256


@dataclass
class StateSummary:
    """The saved state beside the tree (state.py), as reports show it."""

    dir: str
    present: bool
    sglang_version: str | None
    tool_version: str | None
    stale: bool  # saved for another sglang release than the one installed
    files: list[str]
    interrupted: bool  # a journal is left: an apply/revert did not finish

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Outcome:
    command: Command
    tree: SglangTree
    exit_code: ExitCode
    headline: str
    plan: Plan | None = None
    notes: list[str] = field(default_factory=list)  # what happened on the way
    warnings: list[str] = field(default_factory=list)  # what keeps the fused path from running
    written: list[str] = field(default_factory=list)
    changes: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # (file, before, after)
    files: list[FileStatus] = field(default_factory=list)
    state: StateSummary | None = None
    runtime: dict[str, Any] | None = None  # verify --runtime: what the serving interpreter imported

    @property
    def diff(self) -> str:
        """The unified diff of ``changes``, made only when someone reads it."""
        return "".join(unified_diff(rel, old, new) for rel, old, new in self.changes)


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_diff(rel: str, old: bytes, new: bytes, context: int = 3) -> str:
    """A unified diff of one file.  The patches change a few lines of long files: the
    common head and tail are cut before difflib compares (and its line numbers moved back),
    which makes the same diff without matching thousands of equal lines."""
    import difflib

    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start = max(0, head - context)
    cut = max(0, tail - context)
    lines = difflib.unified_diff(
        a[start : len(a) - cut], b[start : len(b) - cut], f"a/sglang/{rel}", f"b/sglang/{rel}", n=context
    )

    def moved(line: str) -> str:
        match = _HUNK.match(line)
        if not match:
            return line
        old_start, old_len, new_start, new_len = match.groups()
        return (
            f"@@ -{int(old_start) + start}{old_len or ''} +{int(new_start) + start}{new_len or ''} @@"
            + line[match.end() :]
        )

    return "".join(moved(line) for line in lines)
