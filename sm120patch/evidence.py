"""``file:line: text`` evidence for reports: the lines of the nodes a finding points at."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from sm120patch.outcome import Evidence


class Lines:
    """Line numbers of nodes in one module, resolved once and only if asked."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._positions: Mapping[cst.CSTNode, CodeRange] | None = None
        self._lines: list[str] = []

    def evidence(self, nodes: Sequence[cst.CSTNode]) -> list[Evidence]:
        if not nodes:
            return []
        if self._positions is None:
            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._positions = wrapper.resolve(PositionProvider)
            self._lines = self.module.code.splitlines()
        seen: dict[int, Evidence] = {}
        for node in nodes:
            pos = self._positions.get(node)
            if pos is not None:
                line = pos.start.line
                seen.setdefault(line, Evidence(line, self._lines[line - 1].rstrip()))
        return sorted(seen.values(), key=lambda e: e.line)
