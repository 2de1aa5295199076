"""What the patcher tells doctor and bench, read-only: each patch's state in the located tree
(one function, ``tree_states``), and the fusion token limit (sglang's own, the one an apply
recorded, whether a saved bench result is this host's) with the state folder bench keeps its
result in.  The only patcher module the other products import (the layers contract in
``pyproject.toml`` names these two edges)."""

from __future__ import annotations

from pathlib import Path

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.patches.fusion_token_limit import LIMIT_NAME, limit_in_force
from sm120patch.patcher.plan.current import current_plan, read_state
from sm120patch.patcher.plan.gate_sweep import sweep_tree
from sm120patch.patcher.plan.registry import all_patches, by_id
from sm120patch.patcher.plan.token_limit import (
    GIVEN,
    MEASURED,
    PATCH_ID,
    SGLANG,
    LimitAsk,
    gate_rel,
    mismatch,
    recorded,
    recorded_rel,
    sglang_limit,
    sglang_sites,
)
from sm120patch.patcher.plan.types import Plan
from sm120patch.patcher.transaction.state_dir import BENCH_RESULT, StateDir
from sm120patch.sglang.layout import GATE, files_keeping, module_name
from sm120patch.sglang.tree import SglangTree

__all__ = [
    "AUTO_ENABLE_OFF",
    "BENCH_RESULT",
    "GIVEN",
    "LIMIT_NAME",
    "MEASURED",
    "PATCH_ID",
    "SGLANG",
    "LimitAsk",
    "State",
    "StateDir",
    "gate_modules",
    "gate_rel",
    "keeps_fused_path_shut",
    "limit_in_force",
    "mismatch",
    "patch_states",
    "recorded",
    "sglang_limit",
    "sglang_sites",
    "tree_states",
]


#: The commands that make fusion opt-in again, patched or not: ``--skip`` leaves a patch that is
#: already applied as it is, so the auto-enable goes with a revert first (one that finds
#: nothing to revert exits 0).
AUTO_ENABLE_OFF = "`sm120patch revert`, then `sm120patch apply --skip server-args-auto-enable`"


def gate_modules(package_dir: Path) -> tuple[str, ...]:
    """The modules sglang may keep its fusion gate (and token limit) in, as it imports them: where
    the last apply found the limit in this tree first (a role find), then every layout known."""
    found = recorded_rel(StateDir(package_dir).load()) if package_dir.is_dir() else None
    return tuple(dict.fromkeys(module_name(rel) for rel in (*([found] if found else []), *files_keeping(GATE))))


def keeps_fused_path_shut(pid: str) -> bool:
    """Whether patch ``pid``, left out as asked (``--only`` / ``--skip``), keeps the fused path
    shut on SM12x (``Patch.optional`` says why one does not)."""
    return by_id()[pid].optional is None


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
    judged = read_state(tree)
    return _states(judged.plan), sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash).warnings
