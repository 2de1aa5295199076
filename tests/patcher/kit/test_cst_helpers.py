"""cst_helpers.walk skips layout-only fields: what it leaves out must be layout and nothing else."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from sm120patch.patcher.kit.cst_helpers import walk
from sm120patch.patcher.plan.registry import all_patches
from tests.support.mini_sglang import FILES

LAYOUT = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.Comma, cst.Semicolon, cst.Colon, cst.Dot, cst.AssignEqual, cst.BitOr,
)  # fmt: skip


def every_node(node: cst.CSTNode) -> list[cst.CSTNode]:
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(current.children)
    return found


def sources() -> list[str]:
    texts = [e.before for p in all_patches() for e in p.examples] + list(FILES.values())
    return [t for t in texts if t.strip()]


@pytest.mark.parametrize("source", sources())
def test_walk_leaves_out_layout_only(source: str) -> None:
    module = cst.parse_module(source)
    walked = {id(n) for n in walk(module)}
    left_out = [n for n in every_node(module) if id(n) not in walked]
    assert [type(n).__name__ for n in left_out if not isinstance(n, LAYOUT)] == []


@pytest.mark.slow
def test_walk_leaves_out_layout_only_on_the_largest_real_file(release) -> None:
    module = cst.parse_module(Path(release("0.5.14"), "srt/server_args.py").read_bytes())
    walked = {id(n) for n in walk(module)}
    left_out = [n for n in every_node(module) if id(n) not in walked]
    assert {type(n).__name__ for n in left_out if not isinstance(n, LAYOUT)} == set()
