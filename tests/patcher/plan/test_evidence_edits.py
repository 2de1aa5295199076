"""plan.evidence on hand-made edits of a small module of its own: every kind of change a patch
makes (a statement inside nested bodies, an addition at the start, middle or end of a body, a
removal, a changed header, a block indented unlike the module) is spliced into the original
text, never by falling back to printing the whole module, and the result is byte for byte what
printing gives; ``_changed`` descends into exactly the bodies that changed."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import pytest

from sm120patch.patcher.plan import evidence
from sm120patch.patcher.plan.evidence import _changed, emit, generate

SOURCE = """import os

X = 1


class A:
    def f(self):
        if X:
            return 1
        for i in range(3):
            print(i)
        return 2

    def g(self):
        while True:
            break
        with open("f") as fh:
            pass

    def k(self): return 0


def h():
  y = 1
  return y
"""

Edit = Callable[[cst.Module], cst.Module]


def stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def in_body(node: cst.CSTNode, index: int, new: list[cst.BaseStatement]) -> cst.CSTNode:
    """``node`` (a compound statement) with statement ``index`` of its body replaced by ``new``."""
    body = list(node.body.body)  # type: ignore[attr-defined]
    body[index : index + 1] = new
    return node.with_changes(body=node.body.with_changes(body=body))  # type: ignore[attr-defined]


def at_class_method(module: cst.Module, method: int, change: Callable[[cst.CSTNode], cst.CSTNode]) -> cst.Module:
    cls = module.body[2]
    methods = list(cls.body.body)  # type: ignore[attr-defined]
    methods[method] = change(methods[method])
    body = list(module.body)
    body[2] = cls.with_changes(body=cls.body.with_changes(body=methods))  # type: ignore[attr-defined]
    return module.with_changes(body=body)


def module_body(module: cst.Module, index: int, new: list[cst.BaseStatement]) -> cst.Module:
    body = list(module.body)
    body[index : index + 1] = new
    return module.with_changes(body=body)


EDITS: dict[str, Edit] = {
    "a return deep in a method": lambda m: at_class_method(m, 0, lambda f: in_body(f, 2, [stmt("return 22\n")])),
    "the body of a for": lambda m: at_class_method(
        m,
        0,
        lambda f: in_body(f, 1, [in_body(f.body.body[1], 0, [stmt("print(i + 1)\n")])]),  # type: ignore[attr-defined]
    ),
    "the test of an if": lambda m: at_class_method(
        m,
        0,
        lambda f: in_body(f, 0, [f.body.body[0].with_changes(test=cst.parse_expression("not X"))]),  # type: ignore[attr-defined]
    ),
    "the body of a while": lambda m: at_class_method(
        m,
        1,
        lambda g: in_body(g, 0, [in_body(g.body.body[0], 0, [stmt("continue\n")])]),  # type: ignore[attr-defined]
    ),
    "the body of a with": lambda m: at_class_method(
        m,
        1,
        lambda g: in_body(g, 1, [in_body(g.body.body[1], 0, [stmt("fh.read()\n")])]),  # type: ignore[attr-defined]
    ),
    "a method renamed": lambda m: at_class_method(m, 1, lambda g: g.with_changes(name=cst.Name("gg"))),
    "a line added first in a body": lambda m: module_body(
        m,
        3,
        [in_body(m.body[3], 0, [stmt("z = 0\n"), m.body[3].body.body[0]])],  # type: ignore[attr-defined]
    ),
    "a line added last in a body": lambda m: at_class_method(
        m,
        1,
        lambda g: in_body(g, 1, [g.body.body[1], stmt("done = True\n")]),  # type: ignore[attr-defined]
    ),
    "a line added between two": lambda m: module_body(m, 1, [m.body[1], stmt("Y = 2\n")]),
    "a line removed": lambda m: at_class_method(m, 0, lambda f: in_body(f, 2, [])),
    "a line replaced by two": lambda m: module_body(m, 1, [stmt("X = 2\n"), stmt("Y = 3\n")]),
    "a one-line body grown into a block": lambda m: at_class_method(
        m, 2, lambda k: k.with_changes(body=cst.IndentedBlock([stmt("return 1\n")]))
    ),
    "a one-line body changed": lambda m: at_class_method(
        m,
        2,
        lambda k: k.with_changes(body=k.body.with_changes(body=[cst.Return(cst.Integer("1"))])),  # type: ignore[attr-defined]
    ),
    "a comment added after a def's colon": lambda m: at_class_method(
        m,
        1,
        lambda g: g.with_changes(
            body=g.body.with_changes(  # type: ignore[attr-defined]
                header=cst.TrailingWhitespace(cst.SimpleWhitespace("  "), cst.Comment("# note"))
            )
        ),
    ),
    "a line added first in a longer body": lambda m: at_class_method(
        m,
        0,
        lambda f: in_body(f, 0, [stmt("seen = []\n"), f.body.body[0]]),  # type: ignore[attr-defined]
    ),
    "the last statement repeated": lambda m: m.with_changes(body=[*m.body, m.body[-1]]),
    "a line in a body indented by two": lambda m: module_body(m, 3, [in_body(m.body[3], 1, [stmt("return y + 1\n")])]),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_each_edit_is_spliced_as_printing_gives(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = cst.parse_module(SOURCE)
    final = EDITS[name](parsed)
    assert final.code != SOURCE  # the edit changed something
    expected = final.code

    def no_fallback(*args: object) -> None:
        raise AssertionError("fell back to printing the whole module")

    monkeypatch.setattr(evidence, "generate", no_fallback)
    data, _ = emit(SOURCE.encode(), parsed, final, [])
    assert data.decode() == expected


def runs(edit: str) -> list[tuple[list[str], list[str], tuple[str, ...]]]:
    parsed = cst.parse_module(SOURCE)
    final = EDITS[edit](parsed)
    return [
        (
            [cst.Module([]).code_for_node(n).strip() for n in old],
            [cst.Module([]).code_for_node(n).strip() for n in new],
            ind,
        )
        for old, new, ind in _changed(parsed.body, final.body, (), final.default_indent)
    ]


def test_changed_descends_to_the_innermost_statement() -> None:
    assert runs("a return deep in a method") == [(["return 2"], ["return 22"], ("    ", "    "))]
    assert runs("the body of a for") == [(["print(i)"], ["print(i + 1)"], ("    ", "    ", "    "))]
    assert runs("the body of a with") == [(["pass"], ["fh.read()"], ("    ", "    ", "    "))]
    assert runs("a line in a body indented by two") == [(["return y"], ["return y + 1"], ("  ",))]


def test_changed_does_not_descend_past_a_changed_header() -> None:
    ((old, new, indents),) = runs("the test of an if")
    assert old[0].startswith("if X:") and new[0].startswith("if not X:") and indents == ("    ", "    ")
    ((old, new, indents),) = runs("a method renamed")
    assert old[0].startswith("def g(self):") and new[0].startswith("def gg(self):") and indents == ("    ",)


def test_an_addition_takes_its_neighbour_along() -> None:
    assert runs("a line added first in a body") == [(["y = 1"], ["z = 0", "y = 1"], ("  ",))]
    (((old,), new, indents),) = runs("a line added last in a body")
    assert old.startswith('with open("f") as fh:') and new == [old, "done = True"] and indents == ("    ", "    ")
    assert runs("a line added between two") == [(["X = 1"], ["X = 1", "Y = 2"], ())]
    assert runs("a line removed") == [(["return 2"], [], ("    ", "    "))]
    assert runs("a line replaced by two") == [(["X = 1"], ["X = 2", "Y = 3"], ())]


def test_evidence_lines_equal_the_printed_modules() -> None:
    parsed = cst.parse_module(SOURCE)
    final = EDITS["a line added between two"](parsed)
    nodes = [[final.body[2]], [final.body[4].body.body[1]]]  # type: ignore[attr-defined]
    data, lines = emit(SOURCE.encode(), parsed, final, nodes)
    assert (data.decode(), lines) == generate(final, nodes)
    assert [[e.line for e in group] for group in lines] == [[4], [26]]


def test_evidence_lines_after_a_leading_blank_line_and_a_header_comment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that starts with a blank line and a comment, a block indented by two: each
    evidence line is found in the spliced text (not by printing the module) and is the line
    printing gives."""
    source = "\n# header\n\nx = 1\n\n\ndef g():\n    return 1\n\n\ndef f():\n  return 2\n"
    parsed = cst.parse_module(source)
    final = module_body(parsed, 0, [stmt("x = 2\n")])
    nodes = [[final.body[0]], [final.body[2].body.body[0]]]  # type: ignore[attr-defined]
    expected = generate(final, nodes)
    assert [[e.line for e in group] for group in expected[1]] == [[4], [12]]
    assert generate(parsed, [[parsed.body[0]]])[1][0][0].line == 4  # and without a change

    def no_fallback(*args: object) -> None:
        raise AssertionError("fell back to printing the whole module")

    monkeypatch.setattr(evidence, "generate", no_fallback)
    data, lines = emit(source.encode(), parsed, final, nodes)
    assert (data.decode(), lines) == expected
