"""Each patch's state in a tree as it is now, for the commands and doctor that only read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sm120patch.locate.tree import SglangTree
from sm120patch.plan.registry import all_patches
from sm120patch.plan.trust import trusted_plan
from sm120patch.transaction.state import StateDir

if TYPE_CHECKING:
    from sm120patch.plan.types import Plan


def current_plan(tree: SglangTree) -> Plan:
    """From the sealed record of the last apply where it may be trusted (no libcst), else
    parsed and checked by structure."""
    state = StateDir(tree.package_dir)
    trusted = trusted_plan(tree, state, state.load())
    if trusted is not None:
        return trusted
    from sm120patch.plan.planner import make_plan  # loads libcst: only when parsing

    return make_plan(tree, list(all_patches()), change=False)
