"""The planner on the miniature release: a target file that is not there, a report's
summary and location, and what a plan with drift anywhere holds."""

from __future__ import annotations

from pathlib import Path

from sm120patch.locate.tree import from_directory
from sm120patch.patchkit.model import State
from sm120patch.plan.planner import make_plan
from sm120patch.plan.registry import all_patches, by_id
from tests.support.mini_sglang import COMM, FILES, FUSION, write_mini_sglang

PREFLIGHT = "workspace-preflight"


def without(rel: str) -> dict[str, str]:
    return {name: text for name, text in FILES.items() if name != rel}


def test_a_target_file_that_is_not_there_is_drift_naming_it(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", files=without(FUSION))
    plan = make_plan(from_directory(package), list(all_patches()), change=False)
    missing = {r.id: r for r in plan.reports if r.file == FUSION}
    assert missing["fusion-backend-resolver"].state is State.NOT_NEEDED  # 0.5.14+ only
    report = missing[PREFLIGHT]
    assert (report.state, report.state_after) == (State.DRIFT, State.DRIFT)
    assert report.detail == f"none of {FUSION} exists in sglang 0.5.11"
    assert report.summary == by_id()[PREFLIGHT].summary and report.where == ""
    assert next(f for f in plan.files if f.rel == FUSION).original is None


def test_before_the_release_that_added_it_a_missing_file_is_not_needed(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site", version="0.5.10", files=without(FUSION))
    plan = make_plan(from_directory(package), [by_id()[PREFLIGHT]], change=True)
    (report,) = plan.reports
    assert (report.state, report.state_after) == (State.NOT_NEEDED, State.NOT_NEEDED)
    assert report.detail == f"nothing to change before sglang 0.5.11 (no {FUSION})"
    assert plan.changes == []


def test_every_report_carries_its_patchs_summary_and_where_it_looked(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    plan = make_plan(from_directory(package), list(all_patches()), change=True)
    for report in plan.reports:
        assert report.summary == by_id()[report.id].summary, report.id
    where = {r.id: r.where for r in plan.reports}
    assert where["communicator-fusion-gate"] == "apply_flashinfer_allreduce_fusion"
    assert where["server-args-auto-enable"] == "ServerArgs._handle_model_specific_adjustments"
    assert where["communicator-import"] == ""  # module level
    gate = next(r for r in plan.reports if r.id == "communicator-fusion-gate")
    assert gate.file == COMM and gate.state is State.PENDING and gate.state_after is State.APPLIED


def test_a_file_that_does_not_parse_is_drift_for_each_of_its_patches(tmp_path: Path) -> None:
    files = dict(FILES)
    files[COMM] = files[COMM] + "\ndef broken(:\n"
    package = write_mini_sglang(tmp_path / "site", files=files)
    plan = make_plan(from_directory(package), list(all_patches()), change=True)
    broken = [r for r in plan.reports if r.file == COMM]
    assert [r.id for r in broken] == ["communicator-import", "communicator-flag", "communicator-fusion-gate"]
    for report in broken:
        assert (report.state, report.state_after, report.where) == (State.DRIFT, State.DRIFT, "")
        assert report.detail.startswith(f"{COMM}:") and "does not parse" in report.detail
    assert plan.changes == []  # drift anywhere: nothing is planned to be written
