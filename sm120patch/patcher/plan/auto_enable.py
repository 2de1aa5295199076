"""At which TP the widened model auto-enable lets sglang turn fusion on by itself on SM12x
(``apply --auto-enable-tp 2|any``): carried in the manifest, so verify judges against it and
a plain apply keeps it."""

from __future__ import annotations

from sm120patch.patcher.kit.auto_enable_tp import ANY, AT_ANY, AT_TP2, CHOICES, TP2
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.types import PatchReport
from sm120patch.patcher.transaction.identity import same_tree
from sm120patch.patcher.transaction.state_dir import Manifest
from sm120patch.sglang.tree import SglangTree

PATCH_ID = "server-args-auto-enable"
WHY_TP2 = (
    "on PCIe SM12x fusion regressed at TP 4 (sglang#32330) and TP 8 is the all-to-all that sglang's "
    "PCIe-IPC allreduce says collapses there; no report has it losing at TP 2"
)


def any_tp(asked: str | None) -> bool | None:
    """What the patch's context holds (``PatchContext.auto_enable_any_tp``) for an ask."""
    return None if asked is None else asked == ANY


def recorded(manifest: Manifest | None, tree: SglangTree) -> str | None:
    """The TP the last apply of this very tree was asked for (``--auto-enable-tp``), if any."""
    if manifest is None or manifest.auto_enable_tp not in CHOICES or not same_tree(tree, manifest):
        return None
    return manifest.auto_enable_tp


def auto_enable_note(reports: list[PatchReport], asked: str | None) -> str | None:
    """Which form of the auto-enable is in force once apply is done, and why; None where the
    patch is not in force (not needed, drift, left out)."""
    report = next((r for r in reports if r.id == PATCH_ID), None)
    if report is None or (report.state_after or report.state) is not State.APPLIED:
        return None
    explicit = "an explicit fusion flag on the server still fuses at any TP"
    if AT_ANY in report.detail:
        why = "as `--auto-enable-tp any` asked" if asked == ANY else "the code has the SM120 term alone: a hand edit?"
        return (
            f"{AT_ANY} for the models sglang lists ({why}); `sm120patch apply --auto-enable-tp 2` "
            f"limits it to TP 2, the default ({WHY_TP2})"
        )
    why = "as `--auto-enable-tp 2` asked" if asked == TP2 else "the default"
    return (
        f"{AT_TP2} for the models sglang lists ({why}: {WHY_TP2}); {explicit}; "
        "`sm120patch apply --auto-enable-tp any` widens it to every TP, once `sm120patch bench server` shows fusion "
        "wins there"
    )
