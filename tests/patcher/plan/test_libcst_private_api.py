"""What plan/evidence.py relies on in libcst, checked against the installed libcst.

evidence.py used libcst's private ``CodegenState`` to print one statement at a given
indentation and to note where nodes start; it now does both with public API only (a statement
printed inside one synthetic ``if _:`` per indentation level, PositionProvider on that small
module), at the same cost: docs/development.md, "libcst's private CodegenState".  These tests
say, with the installed libcst's version, if a release prints or places those differently.
"""

from __future__ import annotations

import importlib.metadata

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

LIBCST = importlib.metadata.version("libcst")


def broken(what: str) -> str:
    return f"libcst {LIBCST} changed what sm120patch/patcher/plan/evidence.py relies on: {what}"


SOURCE = '''\
import os


@decorator(
    1,
)
def gate(batch_size):
    """Doc."""
    if (
        _is_sm90_supported  # hopper
        or _is_sm100_supported
    ):
        return call(
            batch_size,
            key=value,
        )
    return x if y else z


class C:
    def method(self):
        pass
'''


def test_a_statement_printed_alone_stands_at_its_indentation() -> None:
    from sm120patch.patcher.plan.evidence import _code

    module = cst.parse_module(SOURCE)
    method = module.body[-1].body.body[0]
    if _code(module, [method], ["    "]) != "    def method(self):\n        pass\n":
        pytest.fail(broken("a statement inside synthetic `if _:` blocks no longer prints at their indentation"))
    gate = module.body[1]
    if _code(module, [gate], []) != SOURCE[len("import os\n") : SOURCE.index("\n\n\nclass C") + 1]:
        pytest.fail(broken("a top-level statement no longer prints as it stands in the module"))
    assert _code(module, [], ["    "]) == ""


def test_evidence_lines_agree_with_libcsts_public_position_provider() -> None:
    """generate (the fallback) places every node where libcst itself says it starts."""
    from sm120patch.patcher.plan.evidence import generate

    module = cst.parse_module(SOURCE)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    nodes = [
        node
        for node in positions
        if isinstance(
            node,
            (cst.BaseStatement, cst.BaseSmallStatement, cst.Name, cst.Call, cst.BooleanOperation, cst.Decorator),
        )
    ]
    assert len(nodes) > 20
    code, groups = generate(module, [[node] for node in nodes])
    assert code == SOURCE
    lines = [group[0].line if group else None for group in groups]
    expected = [positions[node].start.line for node in nodes]
    if lines != expected:
        wrong = [
            (type(n).__name__, got, want) for n, got, want in zip(nodes, lines, expected, strict=True) if got != want
        ]
        pytest.fail(broken(f"record_syntactic_position no longer marks where nodes start: {wrong[:5]}"))
