"""What the tests of the patches share (the contract itself: tests/patcher/patches/test_contract.py).

* ``ERAS``: the real releases the release-matrix rows are checked on (slow tier).
* ``every_example``: every registered patch's named examples, as pytest parameters.
* ``sm_clause``, ``bare_context``: the pieces of the generated-variant (property) tests.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from sm120patch.patcher.kit.model import Patch, PatchContext, State
from sm120patch.patcher.plan.registry import all_patches, provided_for

#: One release of each era E8 - E17 of the research on sglang's releases.
ERAS = ["0.5.4", "0.5.5", "0.5.6.post2", "0.5.7", "0.5.12.post1", "0.5.14", "0.5.18", "0.5.20", "0.5.21", "0.5.23"]


def every_example(state: State | None = None) -> list:
    """(patch, example) of every registered patch (only those in ``state``, where given), as
    pytest parameters named ``<patch id>/<example name>``, for the checks that run them all."""
    return [
        pytest.param(patch, example, id=f"{patch.id}/{example.name}")
        for patch in all_patches()
        for example in patch.examples
        if state is None or example.state is state
    ]


def bare_context(patch: Patch) -> PatchContext:
    """No release around the code: sglang.srt.utils defines everything asked for."""
    return PatchContext(None, lambda module, name: True, provided_for(patch))


@st.composite
def sm_clause(draw, names: tuple[str, ...] = ("_is_sm90_supported", "_is_sm100_supported")) -> str:
    """An ``or`` of ``names`` in any order, on one line or several, maybe parenthesized twice."""
    operands = list(draw(st.permutations(names)))
    if draw(st.booleans()):
        inner = "\n        or ".join(operands)
        clause = f"(\n        {inner}\n    )"
    else:
        clause = "(" + " or ".join(operands) + ")"
    if draw(st.booleans()):
        clause = f"({clause})"
    return clause


def expected_states(version: str) -> dict[str, str]:
    """Each patch's state in a pristine ``version``, from the patches' own rows: what the row
    covering that release expects; not needed where no row covers it (before the target)."""
    return {
        patch.id: (row.expect.value if (row := patch.anchor_at(version)) is not None else State.NOT_NEEDED.value)
        for patch in all_patches()
    }
