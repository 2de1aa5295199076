"""fusion-backend-resolver: its named examples, its self-description, its rows of the release matrix.

The examples and the anchor rows are the patch's own (sm120patch/patches/fusion_backend_resolver.py); the rows
are checked on one real release per era (slow tier), through the full apply/verify/revert cycle.
"""

from __future__ import annotations

import pytest

from sm120patch.patchkit.model import Example
from sm120patch.plan.registry import by_id
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

PATCH = by_id()["fusion-backend-resolver"]


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
