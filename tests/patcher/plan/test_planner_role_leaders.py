"""What the planner hands role finding and takes back from it (plan/planner.py), on reports
written here: the known row each patch's target was found through (its leader: the row its
report names, else its file's first row unless it drifted), and how each report then says it
was found."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, Anchor, Releases, State
from sm120patch.patcher.plan.planner import _leaders, _say_roles
from sm120patch.patcher.plan.registry import by_id
from sm120patch.patcher.plan.role_find import Located
from sm120patch.patcher.plan.types import PatchReport, Plan
from sm120patch.sglang.layout import ADD_NORM, COMMUNICATOR

GATE = "communicator-fusion-gate"
OLD_GATE = "_gather_hidden_states_and_residual"  # its row for 0.5.4 - 0.5.7, after the 0.5.8 one


def report(pid: str, file: str, state: State, where: str = "", detail: str = "the rows' finding") -> PatchReport:
    return PatchReport(pid, "", (), file, state, detail, where)


def plan_of(*reports: PatchReport) -> Plan:
    return cast(Plan, SimpleNamespace(reports=list(reports)))


def leader(rep: PatchReport) -> Anchor | None:
    return _leaders(plan_of(rep)).get(rep.id)


@pytest.mark.parametrize("state", [State.PENDING, State.DRIFT])
def test_the_row_a_report_names_leads_even_a_drift(state: State) -> None:
    row = leader(report(GATE, COMMUNICATOR, state, OLD_GATE))
    assert row is not None and (row.file, row.name) == (COMMUNICATOR, OLD_GATE)


def test_a_report_naming_no_row_is_led_by_its_files_first_row() -> None:
    row = leader(report(GATE, COMMUNICATOR, State.NOT_NEEDED))
    first = next(a for a in by_id()[GATE].anchors if a.file == COMMUNICATOR)
    assert row == first


def test_a_row_of_another_file_never_leads() -> None:
    """add_norm.py's 0.5.21 row has the same function name as communicator.py's."""
    row = leader(report(GATE, COMMUNICATOR, State.PENDING, "apply_flashinfer_allreduce_fusion"))
    assert row is not None and row.file == COMMUNICATOR
    assert leader(report(GATE, "srt/elsewhere.py", State.PENDING)) is None


def test_a_drift_that_named_nothing_and_a_patch_not_registered_lead_nowhere() -> None:
    reports = (report(GATE, COMMUNICATOR, State.DRIFT), report("not-registered", COMMUNICATOR, State.PENDING))
    assert _leaders(plan_of(*reports)) == {}


def located(where: str, known: bool = False) -> Located:
    row = Anchor(ADD_NORM, "x", Releases("0"), found_by=FOUND_BY_ROLE)
    return Located((row,), where, known=known)


def test_a_known_layout_reads_as_found_by_anchor_and_the_reports_after_it_are_said() -> None:
    first, second = report("communicator-flag", ADD_NORM, State.PENDING), report(GATE, ADD_NORM, State.PENDING)
    found = {first.id: located(f"{ADD_NORM}: _is_sm100", known=True), second.id: located(f"{ADD_NORM}:gate")}
    _say_roles(plan_of(first, second), found, {}, allowed=True)
    assert (first.found_by, first.found_at) == ("anchor", "")
    assert (second.found_by, second.found_at) == (FOUND_BY_ROLE, f"{ADD_NORM}:gate")


def test_a_role_find_refused_keeps_what_the_rows_said_and_adds_where_it_was_found() -> None:
    drift = report(GATE, COMMUNICATOR, State.DRIFT, detail="the fusion gate was renamed or moved")
    _say_roles(plan_of(drift), {GATE: located(f"{ADD_NORM}:gate")}, {}, allowed=False)
    assert drift.found_by == "anchor"
    assert drift.detail.startswith("the fusion gate was renamed or moved; found by role in ")
    assert f"{ADD_NORM}:gate" in drift.detail
