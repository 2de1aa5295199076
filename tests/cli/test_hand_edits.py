"""Trees someone already edited by hand, and trees whose code moved."""

from __future__ import annotations

import subprocess

import pytest

from sm120patch.patcher.kit.model import ROLE_FINDS, State
from sm120patch.sglang.layout import COMMUNICATOR as COMM
from tests.support.cli import apply_all, tree_hashes, verify_tree
from tests.support.hand_fix import SED_FLAG, SED_IMPORT, SEED_LINES
from tests.support.hand_fix import grep_sm_lines as grep

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def test_apply_completes_a_partial_sed_fix_without_duplicating(release) -> None:
    package = release("0.5.9", hardlink=False)
    target = package / COMM
    subprocess.run(["sed", "-i", SED_IMPORT, str(target)], check=True)
    subprocess.run(["sed", "-i", SED_FLAG, str(target)], check=True)
    assert len(grep(target)) == 7  # import and flag added, gate not yet

    outcome = apply_all(package)
    assert outcome.exit_code == 0, outcome.headline
    states = {r.id: (r.state, r.state_after) for r in outcome.plan.reports}
    assert states["communicator-import"] == (State.APPLIED, State.APPLIED)
    assert states["communicator-flag"] == (State.APPLIED, State.APPLIED)
    assert states["communicator-fusion-gate"] == (State.PENDING, State.APPLIED)
    assert grep(target)[:10] == SEED_LINES
    assert verify_tree(package).exit_code == 0


def test_sed_run_twice_is_reported_and_not_made_worse(release) -> None:
    package = release("0.5.9", hardlink=False)
    target = package / COMM
    subprocess.run(["sed", "-i", SED_FLAG, str(target)], check=True)
    subprocess.run(["sed", "-i", SED_FLAG, str(target)], check=True)
    flags_before = [line for line in grep(target) if line.split(":", 1)[1].startswith("_is_sm120")]
    assert len(flags_before) == 2
    outcome = apply_all(package)
    assert outcome.exit_code == 0
    flag = next(r for r in outcome.plan.reports if r.id == "communicator-flag")
    assert "2 times" in flag.detail
    flags_after = [line for line in grep(target) if line.split(":", 1)[1].startswith("_is_sm120")]
    assert len(flags_after) == 2


def test_renamed_gate_is_found_by_role_or_with_known_layouts_only_drift_and_nothing_is_written(release) -> None:
    package = release("0.5.9", hardlink=False)
    target = package / COMM
    text = target.read_text()
    target.write_text(text.replace("def apply_flashinfer_allreduce_fusion(", "def fusion_allowed("))
    before = tree_hashes(package)

    token = ROLE_FINDS.set(False)
    try:
        outcome = apply_all(package)
    finally:
        ROLE_FINDS.reset(token)
    assert outcome.exit_code == 1
    drift = [r for r in outcome.plan.reports if r.state is State.DRIFT]
    assert [r.id for r in drift] == ["communicator-fusion-gate"]
    assert drift[0].file == COMM
    assert "apply_flashinfer_allreduce_fusion" in drift[0].detail
    assert f"found by role in {COMM}:fusion_allowed, not a known layout" in drift[0].detail
    assert "nothing was written" in outcome.headline
    assert tree_hashes(package) == before  # server_args.py was patchable, and still untouched
    assert not (package / ".sm120patch").exists()

    found = apply_all(package)  # what a user gets by default: the gate found by what it does
    assert found.exit_code == 0, found.headline
    gate = {r.id: r for r in found.plan.reports}["communicator-fusion-gate"]
    assert (gate.found_by, gate.found_at, gate.state_after) == ("role", f"{COMM}:fusion_allowed", State.APPLIED)
    assert "def fusion_allowed(" in target.read_text()


def test_broken_hand_edit_that_does_not_parse(release) -> None:
    package = release("0.5.9", hardlink=False)
    target = package / COMM
    target.write_text(target.read_text().replace("_is_cuda = is_cuda()", "_is_cuda = is_cuda("))
    before = tree_hashes(package)
    outcome = apply_all(package)
    assert outcome.exit_code == 1
    details = {r.detail for r in outcome.plan.reports if r.file == COMM}
    assert any("does not parse" in d for d in details)
    assert tree_hashes(package) == before
