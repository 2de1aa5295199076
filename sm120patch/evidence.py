"""The module's code and the lines of the nodes findings point at, in one code-generation pass.

``file:line: text`` evidence needs the line each node starts on.  libcst's PositionProvider
computes a range for every node of the file (and copies it first); here the one
code-generation pass that produces the file's bytes anyway also notes the start line of the
few nodes asked for, the same line PositionProvider reports (the syntactic start).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import libcst as cst
from libcst._nodes.internal import CodegenState

from sm120patch.outcome import Evidence


class _LineState(CodegenState):
    """Code generation that notes, for the wanted nodes, how many tokens precede them (their
    lines are counted once at the end, not token by token)."""

    def __init__(self, module: cst.Module, wanted: set[int]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = wanted
        self.starts: dict[int, int] = {}  # node id -> index of its first token

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> Iterator[None]:
        if id(node) in self.wanted and start_node is None:
            self.starts[id(node)] = len(self.tokens)
        yield

    def lines(self) -> dict[int, int]:
        """node id -> 1-based line of its first token."""
        order = sorted(self.starts.items(), key=lambda item: item[1])
        found: dict[int, int] = {}
        line, done = 1, 0
        for ident, index in order:
            line += sum(token.count("\n") for token in self.tokens[done:index])
            done = index
            found[ident] = line
        return found


def generate(module: cst.Module, groups: Sequence[Sequence[cst.CSTNode]]) -> tuple[str, list[list[Evidence]]]:
    """The module's code, and for each group of nodes its evidence lines (sorted, one per line)."""
    wanted = {id(node) for group in groups for node in group}
    state = _LineState(module, wanted)
    module._codegen(state)
    code = "".join(state.tokens)
    lines = code.splitlines()
    starts = state.lines()
    found: list[list[Evidence]] = []
    for group in groups:
        seen: dict[int, Evidence] = {}
        for node in group:
            line = starts.get(id(node))
            if line is not None:
                seen.setdefault(line, Evidence(line, lines[line - 1].rstrip()))
        found.append(sorted(seen.values(), key=lambda e: e.line))
    return code, found
