"""Each patch's state in a tree as it is now, judged against what the last apply was asked to
do, for the commands and doctor that only read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, ROLE_FINDS, State
from sm120patch.patcher.plan import auto_enable
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.plan.token_limit import recorded
from sm120patch.patcher.plan.trust import trusted_plan
from sm120patch.patcher.transaction.identity import same_tree
from sm120patch.patcher.transaction.journal import interrupted
from sm120patch.patcher.transaction.state_dir import Manifest, StateDir
from sm120patch.sglang.tree import SglangTree

if TYPE_CHECKING:
    from sm120patch.patcher.plan.types import Plan


@dataclass
class Judged:
    plan: Plan
    manifest: Manifest | None
    by_hash: bool  # the plan is the sealed record of the last apply (no parsing)
    own: bool = False  # ``manifest`` is this tree's saved state (``same_tree``, judged once)


def read_state(tree: SglangTree) -> Judged:
    """The tree and its saved state read at one moment no apply or revert is writing (the
    tree's lock, shared); a damaged journal or manifest raises what apply and revert say."""
    state = StateDir(tree.package_dir)
    return state.consistent(lambda: _judge(tree, state))


def current_plan(tree: SglangTree) -> Plan:
    return read_state(tree).plan


def _judge(tree: SglangTree, state: StateDir) -> Judged:
    interrupted(state)
    manifest = state.load()
    trusted = trusted_plan(tree, state, manifest)
    plan = trusted or _parsed(tree, manifest)
    refuse_role_finds(plan)
    own = manifest is not None and same_tree(tree, manifest)
    mark_skipped(plan, manifest, own)
    return Judged(plan, manifest, trusted is not None, own)


def _parsed(tree: SglangTree, manifest: Manifest | None) -> Plan:
    """Every patch checked by structure, the token limit and the auto-enable's TP against what
    the last apply recorded."""
    from sm120patch.patcher.plan.planner import make_plan  # loads libcst: only when parsing

    asked = recorded(manifest, tree)
    any_tp = auto_enable.any_tp(auto_enable.recorded(manifest, tree))
    return make_plan(tree, list(all_patches()), change=False, token_limit=asked.limit if asked else None, any_tp=any_tp)


def refuse_role_finds(plan: Plan) -> None:
    """Under ``--known-layouts-only`` a target the saved state says was found by role is drift,
    as a fresh plan would say it: a trusted tree is not read again, but its record is."""
    if ROLE_FINDS.get():
        return
    for report in plan.reports:
        if report.found_by == FOUND_BY_ROLE:
            report.state = report.state_after = State.DRIFT
            report.detail += (
                f"; found by role in {report.found_at}, not a known layout, which --known-layouts-only refuses"
            )


def mark_skipped(plan: Plan, manifest: Manifest | None, own: bool | None = None) -> None:
    """A patch the last apply of this release left out (``--skip``, or not chosen by
    ``--only``) is what was asked where it is not applied: it reads as skipped, not pending."""
    if manifest is None or not manifest.patch_set or not (same_tree(plan.tree, manifest) if own is None else own):
        return
    asked = set(manifest.patch_set)
    for report in plan.reports:
        if report.id not in asked:
            report.leave_out("left out by the last apply (--only / --skip)")
