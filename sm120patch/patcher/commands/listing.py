"""``sm120patch list``: the patches, what each does, and its state in this sglang."""

from __future__ import annotations

from sm120patch.errors import ExitCode
from sm120patch.patcher.outcome import Command, Outcome
from sm120patch.patcher.plan.current import current_plan
from sm120patch.sglang.tree import SglangTree


def list_patches(tree: SglangTree) -> Outcome:
    plan = current_plan(tree)
    return Outcome(Command.LIST, tree, ExitCode.OK, plan.refusal or f"{len(plan.reports)} patches", plan)
