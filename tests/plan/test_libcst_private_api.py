"""The private libcst API that plan/evidence.py relies on, checked against the installed libcst.

evidence.py prints single statements at a given indentation and notes where nodes start,
through ``libcst._nodes.internal.CodegenState`` (libcst has no public API for either that is
not a full ``PositionProvider`` pass, too slow on a 7000-line file).  If a libcst release
changes it, these tests fail with what changed: keep libcst below that release in
pyproject.toml, or port evidence.py.
"""

from __future__ import annotations

import importlib.metadata
import inspect

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

LIBCST = importlib.metadata.version("libcst")


def broken(what: str) -> str:
    return (
        f"libcst {LIBCST} changed its private code generation API: {what}. sm120patch/patcher/plan/evidence.py "
        f"relies on it; keep libcst below {LIBCST} in pyproject.toml, or port evidence.py"
    )


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


def codegen_state() -> type:
    try:
        from libcst._nodes.internal import CodegenState
    except ImportError as exc:
        pytest.fail(broken(f"libcst._nodes.internal.CodegenState does not import ({exc})"))
    return CodegenState


def test_codegen_state_is_built_and_filled_as_evidence_py_does() -> None:
    state_type = codegen_state()
    try:
        state = state_type(default_indent="    ", default_newline="\n")
    except TypeError as exc:
        pytest.fail(broken(f"CodegenState(default_indent=, default_newline=) fails ({exc})"))
    for name in ("indent_tokens", "tokens"):
        if not isinstance(getattr(state, name, None), list):
            pytest.fail(broken(f"CodegenState().{name} is not a list"))
    module = cst.parse_module(SOURCE)
    if not callable(getattr(module, "_codegen", None)):
        pytest.fail(broken("CSTNode._codegen(state) is gone"))
    module._codegen(state)
    if "".join(state.tokens) != SOURCE:
        pytest.fail(broken("Module._codegen(state) no longer prints the module into state.tokens"))


def test_indent_tokens_indent_a_statement_printed_alone() -> None:
    state_type = codegen_state()
    module = cst.parse_module(SOURCE)
    method = module.body[-1].body.body[0]
    state = state_type(default_indent="    ", default_newline="\n")
    state.indent_tokens.extend(["    "])
    method._codegen(state)
    if "".join(state.tokens) != "    def method(self):\n        pass\n":
        pytest.fail(broken("indent_tokens no longer lead each line of a statement printed alone"))


def test_record_syntactic_position_keeps_its_signature() -> None:
    state_type = codegen_state()
    method = getattr(state_type, "record_syntactic_position", None)
    if method is None:
        pytest.fail(broken("CodegenState.record_syntactic_position is gone"))
    parameters = [(p.name, p.kind) for p in inspect.signature(method).parameters.values()]
    expected = [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("node", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("start_node", inspect.Parameter.KEYWORD_ONLY),
        ("end_node", inspect.Parameter.KEYWORD_ONLY),
    ]
    if parameters != expected:
        pytest.fail(broken(f"record_syntactic_position takes {parameters}, evidence.py overrides {expected}"))


def test_evidence_lines_agree_with_libcsts_public_position_provider() -> None:
    """The override in evidence.py must see every node where libcst itself says it starts."""
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
