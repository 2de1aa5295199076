"""fusion-backend-resolver beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
what it says of a file without the resolver, by release, and where its drift is."""

from __future__ import annotations

import libcst as cst
import pytest
from packaging.version import Version

from sm120patch.patcher.kit.model import PatchContext, State
from sm120patch.patcher.plan.registry import by_id

PATCH = by_id()["fusion-backend-resolver"]


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
