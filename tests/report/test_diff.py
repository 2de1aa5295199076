"""The diff cut to the changed middle still applies to the whole file, line numbers included."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sm120patch.report.diff import unified_diff

HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def patch(base: list[str], diff: str) -> list[str]:
    """Apply a unified diff by its hunk headers (an independent reader of the format)."""
    out, pos, lines, i = [], 0, diff.splitlines(keepends=True)[2:], 0
    while i < len(lines):
        match = HUNK.match(lines[i])
        assert match, lines[i]
        start, length = int(match.group(1)), int(match.group(2) or 1)
        start += length == 0  # an empty old range names the line before it
        out += base[pos : start - 1]
        pos, i = start - 1, i + 1
        while i < len(lines) and not lines[i].startswith("@@"):
            tag, text = lines[i][0], lines[i][1:]
            if tag in " -":
                assert base[pos] == text
                pos += 1
            if tag in " +":
                out.append(text)
            i += 1
    return out + base[pos:]


lines = st.lists(st.sampled_from([f"line {n}\n" for n in range(12)]), max_size=80)
edits = st.lists(
    st.tuples(st.sampled_from("ids"), st.integers(0, 80), st.sampled_from(["new\n", "x = 1\n"])), min_size=1, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(lines, edits)
def test_cut_diff_applies_to_the_whole_file(base: list[str], changes: list) -> None:
    new = list(base)
    for op, where, text in changes:
        at = min(where, len(new))
        if op == "i":
            new.insert(at, text)
        elif new and op == "d":
            new.pop(min(at, len(new) - 1))
        elif new:
            new[min(at, len(new) - 1)] = text
    diff = unified_diff("x.py", "".join(base).encode(), "".join(new).encode())
    assert patch(base, diff) == new
    assert (diff == "") == (base == new)
