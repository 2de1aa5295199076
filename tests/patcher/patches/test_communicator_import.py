"""communicator-import beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
the evidence its pending finding shows."""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.evidence import generate
from sm120patch.patcher.plan.registry import by_id

PATCH = by_id()["communicator-import"]


def test_the_pending_finding_shows_the_sm_imports_it_extends() -> None:
    """Before the edit, the evidence is the SM helpers already imported (lines 3 and 4 of the
    first example), which is what ``apply --dry-run`` shows next to the change."""
    example = PATCH.examples[0]
    module = cst.parse_module(example.before)
    finding = PATCH.check(module, example.context())
    assert finding.state is State.PENDING
    _, (lines,) = generate(module, [finding.evidence])
    assert [(e.line, e.text.strip()) for e in lines] == [(3, "is_sm90_supported,"), (4, "is_sm100_supported,")]
