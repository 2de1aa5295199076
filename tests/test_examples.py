"""Every patch's own named examples (Fixit-style self-testing rules), and its self-description.

For each example: ``check`` gives the stated state; the code becomes ``after`` (for every
state: a non-pending example must stay as it is); a pending example re-checks as applied
and compiles; ``detail`` and the evidence lines are asserted where the example gives them.
"""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patchkit.layout import ADD_NORM, COMM_FUSION, COMMUNICATOR, OVERRIDES, SERVER_ARGS
from sm120patch.patchkit.model import Patch, State
from sm120patch.plan.evidence import generate
from sm120patch.plan.registry import all_patches, provided_for

CASES = [
    pytest.param(patch, example, id=f"{patch.id}: {example.name}")
    for patch in all_patches()
    for example in patch.examples
]


@pytest.mark.parametrize(("patch", "example"), CASES)
def test_example(patch: Patch, example) -> None:
    ctx = example.context(provided_for(patch))
    module = cst.parse_module(example.before)
    finding = patch.check(module, ctx)
    assert finding.state is example.state, finding.detail
    if example.detail is not None:
        assert example.detail in finding.detail
    if finding.state is State.PENDING:
        assert finding.apply is not None
        module = finding.apply(module)
        compile(module.code, "<example>", "exec")
        finding = patch.check(module, ctx)
        assert finding.state is State.APPLIED, finding.detail
    assert finding.apply is None
    assert module.code == (example.after if example.after is not None else example.before)
    if example.evidence is not None:
        _, (lines,) = generate(module, [finding.evidence])
        assert [e.line for e in lines] == list(example.evidence)


def test_examples_have_distinct_names() -> None:
    for patch in all_patches():
        names = [e.name for e in patch.examples]
        assert len(names) == len(set(names)), patch.id


@pytest.mark.parametrize("patch", all_patches(), ids=lambda p: p.id)
def test_every_patch_documents_itself(patch: Patch) -> None:
    assert patch.summary and len(patch.doc.splitlines()) > 5
    for word in ("Why", "Remove when"):
        assert word in patch.doc, word
    states = {e.state for e in patch.examples}
    assert State.PENDING in states and State.DRIFT in states
    assert patch.anchors and {a.file for a in patch.anchors} <= {
        COMMUNICATOR,
        ADD_NORM,
        SERVER_ARGS,
        OVERRIDES,
        COMM_FUSION,
    }
    for dep in patch.requires:
        assert dep in {p.id for p in all_patches()}


def test_order_puts_requirements_first() -> None:
    seen: set[str] = set()
    for patch in all_patches():
        assert set(patch.requires) <= seen, patch.id
        seen.add(patch.id)
