"""``apply --auto-enable-tp`` on an auto-enable already widened (server_args_auto_enable
``_reshape``): every anchored function is put in the form asked, not only the first or the
last, and the finding names each term it changes; a bare term with no parameter to hold the
TP size stays as it is."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
import pytest

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.registry import by_id
from tests.support.patch_checks import bare_context

PATCH = by_id()["server-args-auto-enable"]
TWO = (
    "def _flashinfer_allreduce_fusion_auto_enable(view):\n"
    "    if get_platform().is_sm90 or get_platform().is_sm100 or {view}:\n"
    "        return {{'flashinfer_allreduce_fusion_backend': 'auto'}}\n"
    "    return {{}}\n"
    "class ServerArgs:\n"
    "    def _handle_model_specific_adjustments(self):\n"
    "        if get_platform().is_sm90 or get_platform().is_sm100 or {self}:\n"
    "            self.enable_flashinfer_allreduce_fusion = True\n"
)
BARE = TWO.format(view="get_platform().is_sm120", self="get_platform().is_sm120")
GATED = TWO.format(
    view="(get_platform().is_sm120 and view.tp_size == 2)", self="(get_platform().is_sm120 and self.tp_size == 2)"
)


@pytest.mark.parametrize(("source", "any_tp", "result"), [(GATED, True, BARE), (BARE, False, GATED)], ids=["any", "2"])
def test_each_anchored_function_is_put_in_the_form_asked(source: str, any_tp: bool, result: str) -> None:
    module = cst.parse_module(source)
    finding = PATCH.check(module, replace(bare_context(PATCH), auto_enable_any_tp=any_tp))
    assert finding.state is State.PENDING and finding.apply is not None
    assert finding.apply(module).code == result
    terms = [line.split(" or ")[-1].rstrip(":") for line in source.splitlines() if "is_sm120" in line]
    assert "; ".join(terms) in finding.detail


def test_a_bare_term_with_no_parameter_for_the_tp_size_stays_bare_under_tp_2() -> None:
    source = (
        "def _flashinfer_allreduce_fusion_auto_enable():\n"
        "    if get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120:\n"
        "        return {'flashinfer_allreduce_fusion_backend': 'auto'}\n"
        "    return {}\n"
    )
    finding = PATCH.check(cst.parse_module(source), replace(bare_context(PATCH), auto_enable_any_tp=False))
    assert (finding.state, finding.apply) == (State.APPLIED, None)
