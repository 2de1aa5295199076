"""Regenerating only what changed gives exactly what printing the whole module gives."""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patchkit.model import State
from sm120patch.plan.evidence import _lines_by_statement, _NotUnique, _splice, emit, generate
from sm120patch.plan.registry import all_patches, provided_for

CASES = [
    pytest.param(patch, example, id=f"{patch.id}: {example.name}")
    for patch in all_patches()
    for example in patch.examples
]


@pytest.mark.parametrize(("patch", "example"), CASES)
def test_splice_equals_printing_the_module(patch, example) -> None:
    ctx = example.context(provided_for(patch))
    original = example.before.encode()
    parsed = cst.parse_module(original)
    finding = patch.check(parsed, ctx)
    final = finding.apply(parsed) if finding.state is State.PENDING and finding.apply else parsed
    evidence = [patch.check(final, ctx).evidence]
    code, lines = generate(final, evidence)
    assert emit(original, parsed, final, evidence) == (code.encode(), lines)
    # and without falling back to printing the whole module, unless a line repeats
    # (the sed of the hand fix run twice), where a statement's text is not unique:
    try:
        text = _splice(example.before, parsed, final) if final is not parsed else example.before
        assert text == code
        assert _lines_by_statement(final, text, evidence) == lines
    except _NotUnique:
        assert len(set(code.splitlines())) < len(code.splitlines())


def test_a_text_that_is_not_unique_falls_back_to_printing() -> None:
    source = "x = 1\nif a:\n    y = 2\nif b:\n    y = 2\n"
    parsed = cst.parse_module(source)
    first_if = parsed.body[1]
    final = parsed.with_changes(body=[parsed.body[0], first_if.with_changes(test=cst.Name("c")), parsed.body[2]])
    duplicate = final.body[2].body.body[0]  # `y = 2` appears twice: its line cannot be found by text
    data, (lines,) = emit(source.encode(), parsed, final, [[duplicate]])
    assert data == final.bytes
    assert [e.line for e in lines] == [5]
