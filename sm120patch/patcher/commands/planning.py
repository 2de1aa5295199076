"""Planning a tree for a command: parse and check the targets, the changes a plan makes, and
why a plan may not be written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sm120patch.patcher.kit.model import Patch
from sm120patch.sglang.tree import SglangTree

if TYPE_CHECKING:
    from sm120patch.patcher.plan.types import Plan


def plan_tree(
    tree: SglangTree, patches: list[Patch], change: bool, token_limit: int | None = None, any_tp: bool | None = None
) -> Plan:
    """Parse and check the targets (``token_limit``: the fusion token limit asked for;
    ``any_tp``: the auto-enable's TP asked for, ``plan.auto_enable``); every patch not in
    ``patches`` is checked too, as left out as asked (``Plan.left_out``).
    Imported on use: a revert from saved state compares hashes only and never loads libcst."""
    from sm120patch.patcher.plan.planner import make_plan as plan
    from sm120patch.patcher.plan.registry import all_patches

    chosen = {p.id for p in patches}
    left_out = [p for p in all_patches() if p.id not in chosen]
    return plan(tree, patches, change, token_limit, left_out=left_out, any_tp=any_tp)


def plan_changes(plan: Plan) -> list[tuple[str, bytes, bytes]]:
    return [(f.rel, f.original, f.updated) for f in plan.changes if f.original is not None and f.updated is not None]


def why_not_written(plan: Plan) -> str | None:
    """Why nothing may be written: a refused release, or drift (named file by file)."""
    if plan.refusal:
        return plan.refusal
    if plan.drift:
        release = f"sglang {plan.tree.version}" if plan.tree.version else "this sglang"
        return f"drift in {release}, nothing was written: " + "; ".join(
            f"sglang/{r.file}: {r.id}: {r.detail}" for r in plan.drift
        )
    return None
