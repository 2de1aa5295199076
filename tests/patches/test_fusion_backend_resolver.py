"""fusion-backend-resolver: its named examples, its self-description, its rows of the release matrix.

The examples and the anchor rows are the patch's own (sm120patch/patcher/patches/fusion_backend_resolver.py); the rows
are checked on one real release per era (slow tier), through the full apply/verify/revert cycle.
"""

from __future__ import annotations

import libcst as cst
import pytest
from packaging.version import Version

from sm120patch.patcher.kit.model import Example, PatchContext, State
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


NO_RESOLVER = "def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop):\n    return []\n"


def test_a_file_without_resolver_or_sm_check_says_exactly_that() -> None:
    finding = PATCH.check(cst.parse_module(NO_RESOLVER), PatchContext(None, lambda module, name: True))
    assert (finding.state, finding.detail) == (State.NOT_NEEDED, "no backend resolver and no SM check in this file")


def test_a_release_before_the_resolver_needs_nothing() -> None:
    ctx = PatchContext(Version("0.5.13"), lambda module, name: True)
    finding = PATCH.check(cst.parse_module(NO_RESOLVER), ctx)
    assert (finding.state, finding.detail) == (State.NOT_NEEDED, "no backend resolver before sglang 0.5.14")


def test_a_release_with_the_resolver_that_lacks_it_is_drift() -> None:
    ctx = PatchContext(Version("0.5.14"), lambda module, name: True)
    finding = PATCH.check(cst.parse_module(NO_RESOLVER), ctx)
    assert (finding.state, finding.detail) == (
        State.DRIFT,
        "no function _resolve_backend (seen in 0.5.14 - now): the backend resolver moved",
    )


@pytest.mark.parametrize(
    "name", ["a resolver defined twice, with and without FlashInfer", "a resolver that no longer raises"]
)
def test_drift_inside_the_resolver_names_it(name: str) -> None:
    (example,) = [e for e in PATCH.examples if e.name == name]
    finding = PATCH.check(cst.parse_module(example.before), example.context())
    assert (finding.state, finding.where) == (State.DRIFT, "_resolve_backend")
