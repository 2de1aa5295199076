"""What planning found: each patch's state in each file, and the change made in memory.

Plain data (no libcst): reports, trust and the commands read it without loading a parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120patch.patcher.kit.model import FOUND_BY_ANCHOR, State
from sm120patch.sglang.tree import SglangTree


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
    found_by: str = FOUND_BY_ANCHOR  # "role": the target was found by what it does (plan/role_find.py)
    found_at: str = ""  # with a role find: "file:function" where it was found

    def leave_out(self, why: str) -> None:
        """A patch left out as asked (``--only`` / ``--skip``) that is not applied reads as
        skipped, not as pending or drift: ``why`` says who left it out."""
        if self.state in (State.PENDING, State.DRIFT):
            was = self.state.value
            self.state = self.state_after = State.SKIPPED
            self.detail = f"{why}; the code: {was}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        """The report as the manifest keeps it (``plan.trust``): as the file stands once the
        planned change is written, so one state; the file is the key the record sits under."""
        return {
            "id": self.id,
            "summary": self.summary,
            "requires": list(self.requires),
            "state": (self.state_after or self.state).value,
            "detail": self.detail,
            "where": self.where,
            "evidence": [[e.line, e.text] for e in self.evidence],
            "found_by": self.found_by,
            **({"found_at": self.found_at} if self.found_at else {}),
        }

    @classmethod
    def from_json(cls, file: str, data: Mapping[str, Any]) -> PatchReport:
        """A report ``to_json`` wrote for ``file``: nothing changes, so the state after is the
        state found.  KeyError, TypeError or ValueError when ``data`` is not one."""
        state = State(data["state"])
        return cls(
            id=data["id"],
            summary=data["summary"],
            requires=tuple(data["requires"]),
            file=file,
            state=state,
            detail=data["detail"],
            where=data["where"],
            evidence=[Evidence(line, text) for line, text in data["evidence"]],
            state_after=state,
            found_by=str(data.get("found_by", FOUND_BY_ANCHOR)),  # states before role finds have none
            found_at=str(data.get("found_at", "")),
        )


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

    @property
    def applies(self) -> tuple[str, ...]:
        """The patches the planned change applies here: those pending before it."""
        return tuple(r.id for r in self.reports if r.state is State.PENDING)


@dataclass
class Plan:
    """Every selected patch checked (and, for apply, its change made in memory)."""

    tree: SglangTree
    files: list[FilePlan]
    refusal: str | None = None
    # The patches apply was asked to leave out, checked on the files as this plan leaves them:
    # not in ``files``, so nothing is written or recorded for them.
    left_out: list[PatchReport] = field(default_factory=list)

    @property
    def reports(self) -> list[PatchReport]:
        return [r for f in self.files for r in f.reports]

    @property
    def skipped(self) -> list[PatchReport]:
        """Every patch left out as asked and not applied: by this apply, or by the last one."""
        return [r for r in [*self.reports, *self.left_out] if r.state is State.SKIPPED]

    @property
    def changes(self) -> list[FilePlan]:
        return [f for f in self.files if f.changed]

    @property
    def drift(self) -> list[PatchReport]:
        return [r for r in self.reports if r.state is State.DRIFT]
