"""communicator-flag: its named examples, its self-description, its rows of the release matrix.

The examples and the anchor rows are the patch's own (sm120patch/patcher/patches/communicator_flag.py); the rows
are checked on one real release per era (slow tier), through the full apply/verify/revert cycle.
"""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patcher.kit.model import Example, State
from sm120patch.patcher.plan.evidence import generate
from sm120patch.patcher.plan.registry import by_id
from tests.support.patch_checks import (
    ERAS,
    check_anchor_files,
    check_description,
    check_example,
    check_examples_cover,
    check_release_row,
    check_requirements,
    example_params,
)

PATCH = by_id()["communicator-flag"]


@pytest.mark.parametrize("example", example_params(PATCH))
def test_example_gives_its_state_and_code(example: Example) -> None:
    check_example(PATCH, example)


def test_describes_itself_and_anchors_in_known_files() -> None:
    check_description(PATCH)
    check_anchor_files(PATCH)


def test_examples_are_distinct_and_cover_pending_and_drift() -> None:
    check_examples_cover(PATCH)


def test_requires_only_patches_that_bind_its_names() -> None:
    check_requirements(PATCH)


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", ERAS)
def test_real_release_shows_its_anchor_row(release_cycle, version: str) -> None:
    check_release_row(PATCH, release_cycle(version), version)


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
