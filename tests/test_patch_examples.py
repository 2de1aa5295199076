"""Every patch's own before/after examples (Fixit-style self-testing rules)."""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.registry import PatchContext, State, all_patches

CTX = PatchContext(package_dir=None, version=None)
CASES = [
    pytest.param(patch, example, id=f"{patch.id}-{i}-{example.state.value}")
    for patch in all_patches()
    for i, example in enumerate(patch.examples)
]


def test_every_patch_documents_itself() -> None:
    assert len(all_patches()) == 6
    for patch in all_patches():
        assert patch.summary and len(patch.doc.splitlines()) > 5, patch.id
        for word in ("Why", "Remove when"):
            assert word in patch.doc, (patch.id, word)
        states = {e.state for e in patch.examples}
        assert State.PENDING in states and State.DRIFT in states, patch.id


@pytest.mark.parametrize("patch, example", CASES)
def test_example(patch, example) -> None:
    module = cst.parse_module(example.before)
    finding = patch.check(module, CTX)
    assert finding.state is example.state, finding.detail
    assert example.detail in finding.detail
    if example.state is not State.PENDING:
        assert finding.apply is None
        return
    patched = finding.apply(module)
    assert patched.code == example.after
    compile(patched.code, "<example>", "exec")
    again = patch.check(cst.parse_module(patched.code), CTX)
    assert again.state is State.APPLIED, again.detail
    assert again.apply is None
