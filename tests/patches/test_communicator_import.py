"""communicator-import: its named examples, its self-description, its rows of the release matrix.

The examples and the anchor rows are the patch's own (sm120patch/patcher/patches/communicator_import.py); the rows
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

PATCH = by_id()["communicator-import"]


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


def test_the_pending_finding_shows_the_sm_imports_it_extends() -> None:
    """Before the edit, the evidence is the SM helpers already imported (lines 3 and 4 of the
    first example), which is what ``apply --dry-run`` shows next to the change."""
    example = PATCH.examples[0]
    module = cst.parse_module(example.before)
    finding = PATCH.check(module, example.context())
    assert finding.state is State.PENDING
    _, (lines,) = generate(module, [finding.evidence])
    assert [(e.line, e.text.strip()) for e in lines] == [(3, "is_sm90_supported,"), (4, "is_sm100_supported,")]
