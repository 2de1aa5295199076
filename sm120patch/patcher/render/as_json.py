"""One JSON object on stdout for machines (docs/reference.md: "JSON output"), versioned by ``SCHEMA``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sm120patch import __version__
from sm120patch.output.console import SCHEMA
from sm120patch.patcher.kit.model import FOUND_BY_ANCHOR, State
from sm120patch.patcher.outcome import Command, Outcome
from sm120patch.patcher.plan.token_limit import limit_json
from sm120patch.sglang.releases import tree_json

if TYPE_CHECKING:
    pass


def _patch_json(
    ident: str,
    summary: str,
    requires: tuple[str, ...],
    file: str | None,
    state: State,
    after: State,
    where: str,
    detail: str,
    evidence: list[dict[str, Any]],
    found_by: str = FOUND_BY_ANCHOR,
    found_at: str = "",
) -> dict[str, Any]:
    return {
        "id": ident,
        "summary": summary,
        "requires": list(requires),
        "file": file,
        "state": state.value,
        "state_after": after.value,
        "where": where,
        "detail": detail,
        "evidence": evidence,
        "found_by": found_by,  # "role": found by what it does, not a known layout
        "found_at": f"sglang/{found_at}" if found_at else None,
    }


def to_json(outcome: Outcome) -> dict[str, Any]:
    plan = outcome.plan
    if plan is not None and plan.refusal:
        from sm120patch.patcher.plan.registry import all_patches

        patches = [
            _patch_json(p.id, p.summary, p.requires, None, State.REFUSED, State.REFUSED, "", plan.refusal, [])
            for p in all_patches()
        ]
    else:
        patches = [
            _patch_json(
                r.id,
                r.summary,
                r.requires,
                f"sglang/{r.file}",
                r.state,
                r.state_after or r.state,
                r.where,
                r.detail,
                [{"file": f"sglang/{r.file}", "line": e.line, "text": e.text} for e in r.evidence],
                r.found_by,
                r.found_at,
            )
            for r in (plan.reports if plan else [])
        ]
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": outcome.command.value,
        "ok": outcome.exit_code == 0,
        "exit_code": int(outcome.exit_code),
        "headline": outcome.headline,
        "code": outcome.code,  # the stable code of an outcome not as asked (errors.CODES)
        "sglang": tree_json(outcome.tree),
        "refusal": plan.refusal if plan else None,
        "patches": patches,
        "files": [
            {
                "file": f"sglang/{f.rel}",
                "sha256": f.sha256,
                "record_sha256": f.record_sha256,
                "pristine": f.pristine,
                "recorded": f.recorded.value if f.recorded else None,
                "checked_by": f.checked_by.value,
            }
            for f in outcome.files
        ],
        "state": outcome.state.to_json() if outcome.state else {},
        "written": [f"sglang/{rel}" for rel in outcome.written],
        "messages": outcome.notes,
        "warnings": outcome.warnings,
        "sm_checks": outcome.sm_checks,
        "left_out": [f.to_json() for f in outcome.left_out],
        "runtime": outcome.runtime.to_json() if outcome.runtime is not None else None,
        "diff": outcome.diff,
        "token_limit": limit_json(outcome.tree) if outcome.command in (Command.APPLY, Command.VERIFY) else None,
    }


# --- people --------------------------------------------------------------------------------
