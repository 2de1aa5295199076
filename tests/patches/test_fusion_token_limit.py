"""fusion-token-limit: its named examples and self-description, and sglang's own gate run with
the lowered limit (a batch above it is no longer fused, one at or below it still is)."""

from __future__ import annotations

import pytest

from sm120patch.patchkit.model import Example
from sm120patch.plan.registry import by_id
from tests.support.patch_checks import (
    check_anchor_files,
    check_description,
    check_example,
    check_examples_cover,
    example_params,
)

PATCH = by_id()["fusion-token-limit"]


@pytest.mark.parametrize("example", example_params(PATCH))
def test_example_gives_its_state_and_code(example: Example) -> None:
    check_example(PATCH, example)


def test_describes_itself_and_anchors_in_known_files() -> None:
    check_description(PATCH)
    check_anchor_files(PATCH)
    assert "max_token_num" in PATCH.doc  # how sglang sizes the workspace a larger limit would overrun


def test_examples_are_distinct_and_cover_pending_and_drift() -> None:
    check_examples_cover(PATCH)


def test_is_opt_in_and_requires_nothing() -> None:
    assert PATCH.requires == () and PATCH.provides == ()
    assert all(a.expect.value == "not-needed" for a in PATCH.anchors)
