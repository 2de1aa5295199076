"""plan.current.mark_skipped: a patch the last apply of this release left out reads as what
was asked (skipped), not as work still to do (pending); any other saved state leaves the
reports as the code says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.current import mark_skipped
from sm120patch.patcher.plan.types import FilePlan, PatchReport, Plan
from sm120patch.patcher.transaction.state_dir import Manifest
from sm120patch.sglang.tree import InstallKind, SglangTree

TREE = SglangTree(Path("/site/sglang"), "0.5.11", InstallKind.WHEEL, None, "a test")


def a_plan() -> Plan:
    reports = [
        PatchReport("workspace-preflight", "", (), "srt/f.py", State.PENDING, "will guard", state_after=State.PENDING),
        PatchReport("fusion-backend-resolver", "", (), "srt/f.py", State.DRIFT, "not found", state_after=State.DRIFT),
        PatchReport("communicator-flag", "", (), "srt/c.py", State.APPLIED, "assigned", state_after=State.APPLIED),
    ]
    return Plan(TREE, [FilePlan("srt/f.py", Path("/site/sglang/srt/f.py"), b"", reports=reports)])


def states(plan: Plan) -> list[tuple[State, State | None, str]]:
    return [(r.state, r.state_after, r.detail) for r in plan.reports]


def test_what_the_last_apply_left_out_reads_as_skipped() -> None:
    plan = a_plan()
    mark_skipped(plan, Manifest("0.5.11", "/site/sglang", patch_set=["communicator-flag"]))
    assert states(plan) == [
        (State.SKIPPED, State.SKIPPED, "left out by the last apply (--only / --skip); the code: pending: will guard"),
        (State.SKIPPED, State.SKIPPED, "left out by the last apply (--only / --skip); the code: drift: not found"),
        (State.APPLIED, State.APPLIED, "assigned"),
    ]


@pytest.mark.parametrize(
    "manifest",
    [
        None,
        Manifest("0.5.11", "/site/sglang", patch_set=[]),  # a state that names no patch set
        Manifest("0.5.10", "/site/sglang", patch_set=["communicator-flag"]),  # another release's
    ],
    ids=["no-state", "no-patch-set", "another-release"],
)
def test_any_other_saved_state_leaves_the_reports_as_the_code_says(manifest: Manifest | None) -> None:
    plan = a_plan()
    before = [dataclasses.replace(r) for r in plan.reports]
    mark_skipped(plan, manifest)
    assert plan.reports == before
