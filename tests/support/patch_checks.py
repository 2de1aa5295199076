"""What every patch's test file (tests/patches/test_<patch>.py) checks, written once.

* ``check_example``: a named example (Fixit-style self-testing rule) gives its state, its
  patched code, re-checks as applied, compiles, and shows its detail and evidence lines.
* ``check_description``, ``check_examples_cover``, ``check_anchor_files``,
  ``check_requirements``: the patch describes itself the way ``list --docs`` and README's
  table need, and its requirements are sound.
* ``check_release_row``: what the full cycle found on a real release (``run_cycle``) is what
  the patch's anchor row for that release says.
* ``sm_clause``, ``bare_context``: the pieces of the generated-variant (property) tests.
"""

from __future__ import annotations

import libcst as cst
import pytest
from hypothesis import strategies as st

from sm120patch.patcher.kit.model import Edit, Example, Patch, PatchContext, State
from sm120patch.patcher.plan.evidence import generate
from sm120patch.patcher.plan.registry import all_patches, by_id, provided_for
from sm120patch.sglang.layout import ADD_NORM, COMM_FUSION, COMMUNICATOR, OVERRIDES, SERVER_ARGS

#: One release of each era E8 - E17 of the research on sglang's releases.
ERAS = ["0.5.4", "0.5.5", "0.5.6.post2", "0.5.7", "0.5.12.post1", "0.5.14", "0.5.18", "0.5.20", "0.5.21", "0.5.23"]

#: Every file a patch may look in (sm120patch.sglang.layout).
LAYOUT_FILES = {COMMUNICATOR, ADD_NORM, SERVER_ARGS, OVERRIDES, COMM_FUSION}


def example_params(patch: Patch) -> list:
    """``patch``'s examples as pytest parameters named by the example."""
    return [pytest.param(example, id=example.name) for example in patch.examples]


def every_example() -> list:
    """(patch, example) of every registered patch, for the checks that run them all."""
    return [
        pytest.param(patch, example, id=f"{patch.id}: {example.name}")
        for patch in all_patches()
        for example in patch.examples
    ]


def check_example(patch: Patch, example: Example) -> None:
    ctx = example.context(provided_for(patch))
    module = cst.parse_module(example.before)
    finding = patch.check(module, ctx)
    assert finding.state is example.state, finding.detail
    if example.detail is not None:
        assert example.detail in finding.detail
    if finding.state is State.PENDING:
        assert finding.apply is not None
        module = finding.apply(module)
        assert module.code == example.after
        compile(module.code, "<example>", "exec")
        finding = patch.check(module, ctx)
        assert finding.state is State.APPLIED, finding.detail
    assert finding.apply is None  # applied, not needed or drift: nothing left to change
    if example.evidence is not None:
        _, (lines,) = generate(module, [finding.evidence])
        assert [e.line for e in lines] == list(example.evidence)


def check_description(patch: Patch) -> None:
    """A summary for the table, and a docstring that says why and when to remove it."""
    assert patch.summary and len(patch.doc.splitlines()) > 5
    for word in ("Why", "Remove when"):
        assert word in patch.doc, word


def check_examples_cover(patch: Patch) -> None:
    """Distinct example names, and at least one pending and one drift example."""
    names = [e.name for e in patch.examples]
    assert len(names) == len(set(names)), names
    states = {e.state for e in patch.examples}
    assert State.PENDING in states and State.DRIFT in states, states


def check_anchor_files(patch: Patch) -> None:
    assert patch.anchors and {a.file for a in patch.anchors} <= LAYOUT_FILES


def check_requirements(patch: Patch) -> None:
    """Each required patch binds a name, in the same files as ``patch`` (that is why it is
    required: the name ``patch`` adds would not resolve without it)."""
    registry = by_id()
    for dep in patch.requires:
        assert registry[dep].provides, f"{patch.id} requires {dep}, which binds no name"
        assert registry[dep].files == patch.files, (dep, registry[dep].files, patch.files)
    assert bool(provided_for(patch)) == bool(patch.requires)


def check_release_row(patch: Patch, cycle: dict, version: str) -> None:
    """``cycle`` (``run_cycle`` on ``version``) shows the state of ``patch``'s anchor row for
    ``version`` (no row: not needed), and where pending, the patch's edit in the row's file
    (with the helper import where the row says so)."""
    anchor = patch.anchor_at(version)
    state = anchor.expect if anchor else State.NOT_NEEDED
    assert cycle["exit_code"] == 0
    assert cycle["states"][patch.id] == state.value
    if anchor is not None and state is State.PENDING:
        kinds = set(cycle["changes"].get(anchor.file, ()))
        assert patch.edits.value in kinds, (anchor.file, kinds)
        if anchor.imports:
            assert Edit.IMPORT.value in kinds, (anchor.file, kinds)


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
