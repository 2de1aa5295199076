"""Each patch's state in the located tree, from the plan layer (read-only)."""

from __future__ import annotations

from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State
from sm120patch.plan.current import current_plan, judge
from sm120patch.plan.gate_sweep import sweep_tree
from sm120patch.plan.registry import all_patches
from sm120patch.plan.types import Plan


def _states(plan: Plan) -> dict[str, State]:
    if plan.refusal:
        return {p.id: State.REFUSED for p in all_patches()}
    return {r.id: r.state for r in plan.reports}


def patch_states(tree: SglangTree) -> dict[str, State]:
    """Each patch's state in ``tree``; every patch is ``State.REFUSED`` when the release is."""
    return _states(current_plan(tree))


def tree_states(tree: SglangTree) -> tuple[dict[str, State], list[str]]:
    """``patch_states``, and the SM checks on the fused path that no patch owns
    (``plan/gate_sweep.py``, as sentences), from one reading of the tree."""
    judged = judge(tree)
    return _states(judged.plan), sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash).warnings
