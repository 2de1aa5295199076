"""What a command found and did, as ``report`` renders it (rich text or JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from sm120patch.errors import ExitCode
from sm120patch.patcher.plan.types import Plan
from sm120patch.sglang.tree import SglangTree

if TYPE_CHECKING:
    from sm120patch.patcher.plan.left_out import LeftOut
    from sm120patch.patcher.runtime import RuntimeCheck


class Command(str, Enum):
    APPLY = "apply"
    VERIFY = "verify"
    REVERT = "revert"
    LIST = "list"


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
    # What keeps the fused path from running; and verify's [revert-refuses], which --strict does not count.
    warnings: list[str] = field(default_factory=list)
    sm_checks: list[dict[str, Any]] = field(default_factory=list)  # the sweep's, as data (gate_sweep)
    left_out: list[LeftOut] = field(default_factory=list)  # patches left out as asked (plan/left_out.py)
    written: list[str] = field(default_factory=list)
    changes: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # (file, before, after)
    files: list[FileStatus] = field(default_factory=list)
    state: StateSummary | None = None
    runtime: RuntimeCheck | None = None  # verify --runtime: what the serving interpreter imported
    refused_as: str | None = None  # the stable code of a refusal the command set (errors.CODES)

    @property
    def code(self) -> str | None:
        """The stable code of an outcome that is not as asked (errors.CODES); None when it is."""
        if self.exit_code == ExitCode.OK:
            return None
        if self.refused_as:
            return self.refused_as
        if self.plan is not None and self.plan.refusal:
            return "release-refused"
        if self.plan is not None and self.plan.drift:
            return "drift"
        return "not-as-asked"

    @property
    def diff(self) -> str:
        """The unified diff of ``changes``, made only when someone reads it."""
        from sm120patch.patcher.render.diff import unified_diff

        return "".join(unified_diff(rel, old, new) for rel, old, new in self.changes)
