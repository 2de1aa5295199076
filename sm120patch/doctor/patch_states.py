"""Each patch's state in the located tree, from the plan layer (read-only)."""

from __future__ import annotations

from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State
from sm120patch.plan.current import current_plan
from sm120patch.plan.registry import all_patches


def patch_states(tree: SglangTree) -> dict[str, State]:
    """Each patch's state in ``tree``; every patch is ``State.REFUSED`` when the release is."""
    plan = current_plan(tree)
    if plan.refusal:
        return {p.id: State.REFUSED for p in all_patches()}
    return {r.id: r.state for r in plan.reports}
