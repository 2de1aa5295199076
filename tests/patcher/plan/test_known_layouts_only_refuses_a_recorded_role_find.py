"""plan.current.refuse_role_finds: under ``--known-layouts-only`` a report the saved record says
was found by role turns to drift, its detail kept and the refusal added; a report found by a
known layout is left as it is, and without the option nothing changes.  On a real release's
trusted record: tests/patcher/plan/test_next_release.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, ROLE_FINDS, State
from sm120patch.patcher.plan.current import refuse_role_finds
from sm120patch.patcher.plan.types import FilePlan, PatchReport, Plan
from sm120patch.sglang.tree import InstallKind, SglangTree

TREE = SglangTree(Path("/site/sglang"), "0.5.11", InstallKind.WHEEL, None, "a test")
FOUND_AT = "sglang/srt/layers/fusion_gates.py:ar_norm_fusion_enabled"


def a_plan() -> Plan:
    reports = [
        PatchReport(
            "communicator-fusion-gate", "", (), "srt/c.py", State.APPLIED, "widened",
            state_after=State.APPLIED, found_by=FOUND_BY_ROLE, found_at=FOUND_AT,
        ),
        PatchReport("communicator-flag", "", (), "srt/c.py", State.APPLIED, "assigned", state_after=State.APPLIED),
    ]  # fmt: skip
    return Plan(TREE, [FilePlan("srt/c.py", Path("/site/sglang/srt/c.py"), b"", reports=reports)])


@pytest.fixture
def known_layouts_only() -> Iterator[None]:
    token = ROLE_FINDS.set(False)
    yield
    ROLE_FINDS.reset(token)


@pytest.mark.usefixtures("known_layouts_only")
def test_only_the_role_find_turns_to_drift_and_keeps_its_detail() -> None:
    plan = a_plan()
    refuse_role_finds(plan)
    gate, flag = plan.reports
    assert (gate.state, gate.state_after) == (State.DRIFT, State.DRIFT)
    assert gate.detail.startswith("widened; found by role in " + FOUND_AT)
    assert gate.detail.endswith("which --known-layouts-only refuses")
    assert (flag.state, flag.state_after, flag.detail) == (State.APPLIED, State.APPLIED, "assigned")


def test_role_finds_allowed_leave_the_reports_as_they_are() -> None:
    plan = a_plan()
    before = [dataclasses.replace(r) for r in plan.reports]
    refuse_role_finds(plan)
    assert plan.reports == before
