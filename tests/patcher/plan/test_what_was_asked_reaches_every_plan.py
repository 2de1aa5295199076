"""make_plan plans more than once: again with what a role find found, again without changes
where a patch drifted, and once more for the patches left out as asked.  What was asked
(``--auto-enable-tp any``, the patches left out) reaches each of those plans, not only the
first: the auto-enable reads the any-TP form (no ``tp_size == 2``) and the left-out patch is
still named."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.patcher.plan.planner import make_plan
from sm120patch.patcher.plan.registry import all_patches, by_id
from sm120patch.patcher.plan.types import Plan
from sm120patch.sglang.tree import from_directory
from tests.patcher.plan.test_planner import RENAMED_GATE
from tests.support.mini_sglang import COMM, FILES, SERVER_ARGS, write_mini_sglang

AUTO = "server-args-auto-enable"
PREFLIGHT = "workspace-preflight"
ANY_TP_FORM = "with is_sm120_supported() and import"


def auto_enable_detail(plan: Plan) -> str:
    return next(r.detail for r in plan.reports if r.id == AUTO)


@pytest.mark.parametrize(("any_tp", "tp2"), [(True, False), (None, True)], ids=["any TP asked", "the default"])
def test_the_plan_made_with_a_role_find_writes_the_form_asked(tmp_path: Path, any_tp: bool | None, tp2: bool) -> None:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: RENAMED_GATE})
    plan = make_plan(from_directory(package), list(all_patches()), change=True, any_tp=any_tp)
    assert next(r.found_by for r in plan.reports if r.id == "communicator-fusion-gate") == "role"
    updated = next(f.updated for f in plan.changes if f.rel == SERVER_ARGS)
    assert updated is not None and b"is_sm120_supported()" in updated
    assert (b"tp_size == 2" in updated) is tp2


def test_the_plan_made_again_after_a_drift_reads_the_form_asked_and_what_was_left_out(tmp_path: Path) -> None:
    moved = FILES[COMM].replace("def apply_flashinfer_allreduce_fusion", "def fusion_applies")
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: moved})
    chosen = [p for p in all_patches() if p.id != PREFLIGHT]
    plan = make_plan(from_directory(package), chosen, change=True, any_tp=True, left_out=[by_id()[PREFLIGHT]])
    assert plan.drift and not plan.changes
    assert ANY_TP_FORM in auto_enable_detail(plan)
    assert [r.id for r in plan.left_out] == [PREFLIGHT]


def test_a_left_out_auto_enable_is_read_in_the_form_asked(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    chosen = [p for p in all_patches() if p.id != AUTO]
    plan = make_plan(from_directory(package), chosen, change=True, any_tp=True, left_out=[by_id()[AUTO]])
    (left,) = plan.left_out
    assert left.id == AUTO and ANY_TP_FORM in left.detail
