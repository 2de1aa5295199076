"""communicator-flag beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
the evidence its pending finding shows, and the details of its applied and not-needed findings.
"""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.evidence import generate
from sm120patch.patcher.plan.registry import by_id

PATCH = by_id()["communicator-flag"]


def test_the_pending_finding_shows_the_sm_flags_it_follows() -> None:
    """Before the edit, the evidence is the SM flags already cached (lines 1 and 2 of the
    first example), which is what ``apply --dry-run`` shows next to the change."""
    example = PATCH.examples[0]
    module = cst.parse_module(example.before)
    finding = PATCH.check(module, example.context())
    assert finding.state is State.PENDING
    _, (lines,) = generate(module, [finding.evidence])
    assert [(e.line, e.text.strip()) for e in lines] == [
        (1, "_is_sm90_supported = _is_cuda and is_sm90_supported()"),
        (2, "_is_sm100_supported = _is_cuda and is_sm100_supported()"),
    ]


def test_a_single_added_flag_reads_as_assigned_without_the_duplicate_warning() -> None:
    example = PATCH.examples[0]
    assert example.after is not None
    finding = PATCH.check(cst.parse_module(example.after), example.context())
    assert (finding.state, finding.detail) == (State.APPLIED, "_is_sm120_supported is assigned")


def test_a_module_that_caches_no_flags_says_the_gate_tests_inline() -> None:
    (example,) = [e for e in PATCH.examples if e.name == "a gate that tests get_platform() inline caches no flags"]
    finding = PATCH.check(cst.parse_module(example.before), example.context())
    assert (finding.state, finding.detail) == (
        State.NOT_NEEDED,
        "no cached _is_smXX_supported flags here: the gate tests its terms inline",
    )
