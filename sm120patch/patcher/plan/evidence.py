"""A planned file's bytes and the evidence lines of its findings, regenerating only what changed.

libcst prints a module back byte for byte, so the original bytes already are the code of
every statement a patch did not touch.  Only the statements that changed (the innermost
ones: a ``return``, an import line, a loop body) are generated, in their indentation, and
spliced in where their old text stands; the old text must occur exactly once, which makes
the splice equal to printing the whole module.  A node's evidence line is its statement's
line (found the same way) plus its line inside that statement.  Whenever a text is not
unique, the whole module is printed instead (``generate``), the way libcst's own code
generation does, and lines are counted there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from sm120patch.patcher.kit.cst_helpers import scoped_paths
from sm120patch.patcher.plan.types import Evidence


def _nested(module: cst.Module, statements: Sequence[cst.CSTNode], indents: Sequence[str]) -> cst.Module:
    """A module of ``statements`` inside one ``if _:`` per indentation level: printed, each
    header is one line above them and they stand at their indentation (libcst's public API
    has no way to print a statement at a given indentation)."""
    body: list[Any] = list(statements)  # statements of a body: SimpleStatementLine or compound
    for indent in reversed(indents):
        body = [cst.If(test=cst.Name("_"), body=cst.IndentedBlock(body=body, indent=indent))]
    return cst.Module(body=body, default_indent=module.default_indent, default_newline=module.default_newline)


def _without_headers(code: str, headers: int, newline: str) -> str:
    at = 0
    for _ in range(headers):
        at = code.index(newline, at) + len(newline)
    return code[at:]


def _starts(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> dict[int, int]:
    """node id -> 1-based line where libcst's PositionProvider says it starts in ``module``."""
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {id(node): positions[node].start.line for node in nodes if node in positions}


def generate(module: cst.Module, groups: Sequence[Sequence[cst.CSTNode]]) -> tuple[str, list[list[Evidence]]]:
    """The whole module's code, and for each group of nodes its evidence lines."""
    code = module.code
    return code, _evidence(code, _starts(module, [node for group in groups for node in group]), groups)


def _evidence(code: str, starts: dict[int, int], groups: Sequence[Sequence[cst.CSTNode]]) -> list[list[Evidence]]:
    lines = code.splitlines()
    found: list[list[Evidence]] = []
    for group in groups:
        seen: dict[int, Evidence] = {}
        for node in group:
            line = starts.get(id(node))
            if line is not None:
                seen.setdefault(line, Evidence(line, lines[line - 1].rstrip()))
        found.append(sorted(seen.values(), key=lambda e: e.line))
    return found


class _NotUnique(Exception):
    """A text to splice or to find occurs more than once: print the whole module instead."""


def _code(module: cst.Module, statements: Sequence[cst.CSTNode], indents: Sequence[str]) -> str:
    if not statements:  # a removal's new run: an empty block would print as ``pass``
        return ""
    return _without_headers(_nested(module, statements, indents).code, len(indents), module.default_newline)


_BODIES = (cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.With, cst.If)


def _changed(
    old: Sequence[cst.CSTNode], new: Sequence[cst.CSTNode], indents: tuple[str, ...], default_indent: str
) -> Iterator[tuple[list[cst.CSTNode], list[cst.CSTNode], tuple[str, ...]]]:
    """The runs of statements that differ between two versions of a body: descend into a
    compound statement whose only change is inside its indented body; a run that only adds
    statements takes its unchanged neighbour along (an empty text cannot be found)."""
    if len(old) == len(new):
        for before, after in zip(old, new, strict=True):
            if before is after:
                continue
            if _only_body_changed(before, after):
                block_old, block_new = before.body, after.body  # type: ignore[attr-defined]
                indent = block_new.indent if block_new.indent is not None else default_indent
                yield from _changed(block_old.body, block_new.body, (*indents, indent), default_indent)
            else:
                yield [before], [after], indents
        return
    start = 0
    while start < min(len(old), len(new)) and old[start] is new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] is new[end_new - 1]:
        end_old, end_new = end_old - 1, end_new - 1
    if start == end_old:  # only additions: take a neighbour so that there is text to find
        if start > 0:
            start -= 1
        else:
            end_old, end_new = end_old + 1, end_new + 1
    yield list(old[start:end_old]), list(new[start:end_new]), indents


def _only_body_changed(before: cst.CSTNode, after: cst.CSTNode) -> bool:
    if type(before) is not type(after) or not isinstance(before, _BODIES):
        return False
    assert isinstance(after, _BODIES)
    for name in ("body", *(f for f in before.__dataclass_fields__ if f != "body")):
        if name == "body":
            if not (isinstance(before.body, cst.IndentedBlock) and isinstance(after.body, cst.IndentedBlock)):
                return False
            if any(getattr(before.body, f) is not getattr(after.body, f) for f in ("header", "indent", "footer")):
                return False
        elif getattr(before, name) is not getattr(after, name):
            return False
    return True


def _find_once(text: str, part: str) -> int:
    at = text.find(part)
    if at < 0 or text.find(part, at + 1) >= 0:
        raise _NotUnique
    return at


def _splice(original: str, parsed: cst.Module, final: cst.Module) -> str:
    """``final``'s code: ``original`` with the changed runs of statements replaced."""
    if any(getattr(parsed, f) is not getattr(final, f) for f in parsed.__dataclass_fields__ if f != "body"):
        raise _NotUnique  # the header or footer changed: nothing to anchor on
    text = original
    for old, new, indents in _changed(parsed.body, final.body, (), final.default_indent):
        old_text, new_text = _code(parsed, old, indents), _code(final, new, indents)
        at = _find_once(text, old_text)
        text = text[:at] + new_text + text[at + len(old_text) :]
    return text


def _lines_by_statement(
    module: cst.Module, text: str, groups: Sequence[Sequence[cst.CSTNode]], scopes: Sequence[cst.CSTNode] = ()
) -> list[list[Evidence]]:
    """Evidence lines without printing the module: each node's statement is printed alone
    and found in ``text`` (it must occur once), its line inside the statement added."""
    nodes = [node for group in groups for node in group]
    starts: dict[int, int] = {}
    for ident, path in scoped_paths(module, {id(n) for n in nodes}, scopes).items():
        depth = max(i for i, n in enumerate(path) if isinstance(n, cst.BaseStatement))
        statement = path[depth]
        indents = [
            n.indent if n.indent is not None else module.default_indent
            for n in path[:depth]
            if isinstance(n, cst.IndentedBlock)
        ]
        nested = _nested(module, [statement], indents)
        own = _without_headers(nested.code, len(indents), module.default_newline)
        at = _find_once(text, own)
        starts[ident] = text.count("\n", 0, at) + _starts(nested, [path[-1]])[ident] - len(indents)
    return _evidence(text, starts, groups)


def emit(
    original: bytes,
    parsed: cst.Module,
    final: cst.Module,
    groups: Sequence[Sequence[cst.CSTNode]],
    scopes: Sequence[cst.CSTNode] = (),
) -> tuple[bytes, list[list[Evidence]]]:
    """The bytes ``final`` prints as, and each group's evidence lines in them (``scopes``:
    functions of ``final`` that hold evidence, a hint for finding it)."""
    try:
        text = original.decode(final.encoding)
        if final is not parsed:
            text = _splice(text, parsed, final)
        return text.encode(final.encoding), _lines_by_statement(final, text, groups, scopes)
    except (_NotUnique, KeyError, UnicodeError):
        code, evidence = generate(final, groups)
        return code.encode(final.encoding), evidence
