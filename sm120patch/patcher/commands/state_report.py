"""What the commands say about the saved state and each file: its status against the state,
the state's summary, a state of another release set aside, what a Ctrl-C left behind."""

from __future__ import annotations

from pathlib import Path

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.outcome import CheckedBy, FileStatus, Recorded, StateSummary
from sm120patch.patcher.transaction.fsutil import sha256, sha256_file
from sm120patch.patcher.transaction.identity import same_tree
from sm120patch.patcher.transaction.state_dir import Manifest, StateDir
from sm120patch.sglang.tree import SglangTree


def file_statuses(
    tree: SglangTree,
    rels: list[str],
    manifest: Manifest | None,
    by_hash: bool = False,
    read: dict[str, bytes] | None = None,
) -> list[FileStatus]:
    """Each file against RECORD and the saved state (``read``: bytes just read, not re-read)."""
    checked_by = CheckedBy.HASH if by_hash else CheckedBy.STRUCTURE
    statuses = []
    for rel in rels:
        current = sha256(read[rel]) if read and rel in read else sha256_file(tree.path(rel))
        recorded = None
        if manifest is not None and rel in manifest.files:
            rec = manifest.files[rel]
            recorded = {rec.sha256_after: Recorded.PATCHED, rec.sha256_before: Recorded.ORIGINAL}.get(current or "")
        statuses.append(FileStatus(rel, current, tree.record.sha256(rel), recorded, checked_by))
    return statuses


def version_text(version: str | None) -> str:
    """A release's version as sentences name it: a saved state or a checkout may not know it."""
    return version or "(unknown version)"


def set_aside(state: StateDir, release: str) -> Path:
    """``state.set_aside``: the saved state of another sglang release moved under ``stale-*/``."""
    try:
        return state.set_aside(release)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot set the saved state of sglang {release} aside in {state.root} "
            f"({exc.strerror}: {exc.filename or state.root}); no sglang file was changed",
            code="not-writable",
        ) from exc


def state_summary(
    state: StateDir, manifest: Manifest | None, tree: SglangTree, own: bool | None = None
) -> StateSummary:
    """``own``: whether ``manifest`` is this tree's state, where the caller judged it already."""
    return StateSummary(
        dir=str(state.root),
        present=manifest is not None,
        sglang_version=manifest.sglang_version if manifest else None,
        tool_version=manifest.tool_version if manifest else None,
        stale=bool(manifest and not (same_tree(tree, manifest) if own is None else own)),
        files=sorted(manifest.files) if manifest else [],
        interrupted=state.journal_path.exists(),
    )


def interrupted_note(tree: SglangTree | None) -> str:
    """What a Ctrl-C left behind, and what the next run does about it.  The journal
    (``transaction/journal.py``) is written whole before the first sglang file is replaced
    and removed after the last: with it, each file is either as before or fully replaced and
    the next apply or revert finishes the job; without it, no file is half-way."""
    if tree is None:
        return "interrupted before sglang was found; nothing was written"
    journal = StateDir(tree.package_dir).journal_path
    if journal.exists():
        return (
            "interrupted while sglang's files were being replaced: each is either as before or fully "
            "replaced, and the next `sm120patch apply` or `sm120patch revert` finishes what was started "
            f"({journal})"
        )
    return "interrupted; no sglang file was left half-changed (`sm120patch verify` says where the patches stand)"
