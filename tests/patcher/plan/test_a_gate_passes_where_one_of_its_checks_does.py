"""An SM check written outside ``and``/``or`` (a call's arguments, a conditional expression):
the sweep takes it as passing on SM12x when any one of its checks does, whichever comes first."""

from __future__ import annotations

import pytest

from sm120patch.patcher.plan.gate_sweep import checks_in

COMM = "srt/layers/flashinfer_comm_fusion.py"

# (expression, whether the sweep reports it as a gate that keeps SM12x out)
GATES = [
    ("supported(major >= 9, major == 10)", False),  # the threshold passes on SM12x, first
    ("supported(major == 10, major >= 9)", False),  # the threshold passes on SM12x, last
    ("major == 12 if x else major == 10", False),  # one branch admits SM12x
    ("major == 10 if x else major == 12", False),
    ("supported(major == 10, major == 9)", True),  # no check passes on SM12x
]


@pytest.mark.parametrize(("expression", "reported"), GATES, ids=[expression for expression, _ in GATES])
def test_a_gate_with_several_checks_is_reported_only_when_none_passes(expression: str, reported: bool) -> None:
    source = f"def allreduce_fusion_ok(major, x):\n    if {expression}:\n        return 1\n"
    checks = checks_in(COMM, source.encode())
    assert not isinstance(checks, str)
    assert bool(checks) is reported
