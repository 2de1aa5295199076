"""Where the known rows kept a target a role find located (plan/gate_sweep._known_as): the
rows of the patch that found it there, methods named with their class; nothing for a place no
role find located."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, State
from sm120patch.patcher.plan.gate_sweep import _known_as
from sm120patch.patcher.plan.types import PatchReport, Plan
from sm120patch.sglang.layout import OVERRIDES, SERVER_ARGS

FOUND_AT = ("srt/arg_groups/moved.py", "Overrides.auto_enable")


def plan_of(found_at: str) -> Plan:
    moved = PatchReport("server-args-auto-enable", "", (), FOUND_AT[0], State.PENDING, "", FOUND_AT[1])
    moved.found_by, moved.found_at = FOUND_BY_ROLE, found_at
    gate = PatchReport("communicator-fusion-gate", "", (), "srt/layers/communicator.py", State.PENDING, "")
    return cast(Plan, SimpleNamespace(reports=[moved, gate]))


def test_a_role_find_is_known_where_its_patchs_rows_kept_it_methods_with_their_class() -> None:
    places = _known_as(*FOUND_AT, plan_of(":".join(FOUND_AT)))
    assert (OVERRIDES, "_flashinfer_allreduce_fusion_auto_enable") in places
    assert (SERVER_ARGS, "ServerArgs._handle_model_specific_adjustments") in places
    assert {file for file, _ in places} == {OVERRIDES, SERVER_ARGS}  # none of the gate's rows


def test_a_place_no_role_find_located_is_known_nowhere_else() -> None:
    assert _known_as(*FOUND_AT, plan_of("")) == []
