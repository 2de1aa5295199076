"""The anchor tables against real releases: one release per era, and one of each refusal kind.

What each release must show comes from the patches' own anchor tables (``Patch.anchors``):
the row that covers the release names the file and the expected state (no row: not
needed), and the file's ``ast``-level changes must be exactly the patches' ``edits`` (plus
the helper import where a row says so).  A new variant is a new row; this test follows.
Each patch's own rows are also checked, by patch, in tests/patcher/patches/test_contract.py; both read
the same cycle (``release_cycle``, run once per release).
"""

from __future__ import annotations

import pytest

from sm120patch.patcher.kit.model import Edit, State
from sm120patch.patcher.plan.registry import all_patches
from tests.support.patch_checks import ERAS
from tests.support.realtrees import run_cycle

pytestmark = pytest.mark.slow  # real sglang releases from the package index

REFUSED = {
    "0.4.8.post1": "has no FlashInfer allreduce fusion",  # E0
    "0.5.3.post1": "has no SM12x probe",  # E6: fusion, but no is_sm120_supported
}


def expected(version: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Per patch the state, per file the edits, as the anchor tables say for ``version``."""
    states: dict[str, str] = {}
    edits: dict[str, set[str]] = {}
    for patch in all_patches():
        anchor = patch.anchor_at(version)
        state = anchor.expect if anchor else State.NOT_NEEDED
        states[patch.id] = state.value
        if anchor is not None and state is State.PENDING:
            kinds = edits.setdefault(anchor.file, set())
            kinds.add(patch.edits.value)
            if anchor.imports:
                kinds.add(Edit.IMPORT.value)
    return states, edits


@pytest.mark.parametrize("version", ERAS)
def test_era_cycle_changes_exactly_what_the_anchor_rows_say(release_cycle, version: str) -> None:
    states, edits = expected(version)
    result = release_cycle(version)
    assert result["exit_code"] == 0
    assert result["states"] == states
    assert {rel: set(kinds) for rel, kinds in result["changes"].items()} == edits


@pytest.mark.parametrize("version", list(REFUSED))
def test_release_before_0_5_4_is_refused_naming_why_and_the_first_supported(release, version: str) -> None:
    result = run_cycle(release(version))
    assert result["exit_code"] == 1
    assert REFUSED[version] in result["refusal"]
    assert "0.5.4" in result["refusal"]  # names the first supported release
