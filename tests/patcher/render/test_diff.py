"""The diff cut to the changed middle still applies to the whole file, line numbers included."""

from __future__ import annotations

import re

import pytest
from hypothesis import strategies as st

from sm120patch.patcher.render.diff import unified_diff
from tests.support.properties import fast_and_slow

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


def check_cut_diff_applies(base: list[str], changes: list) -> None:
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


test_cut_diff_applies_to_the_whole_file, test_many_more_cut_diffs_apply_to_the_whole_file = fast_and_slow(
    check_cut_diff_applies, lines, edits, fast=100, slow=300
)


def whole_file_diff(old: list[str], new: list[str], context: int = 3) -> str:
    """What difflib makes of the whole files (slow on long ones; the reference here)."""
    import difflib

    return "".join(difflib.unified_diff(old, new, "a/sglang/x.py", "b/sglang/x.py", n=context))


NUMBERED = [f"line {n}\n" for n in range(1, 21)]


def test_a_change_in_the_middle_has_its_line_numbers_in_the_whole_file() -> None:
    new = [*NUMBERED[:9], "changed\n", *NUMBERED[10:]]
    diff = unified_diff("x.py", "".join(NUMBERED).encode(), "".join(new).encode())
    assert diff == (
        "--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -7,7 +7,7 @@\n"
        " line 7\n line 8\n line 9\n-line 10\n+changed\n line 11\n line 12\n line 13\n"
    )


@pytest.mark.parametrize("context", [0, 1, 2, 3, 5])
@pytest.mark.parametrize(
    "new",
    [
        ["first\n", *NUMBERED[1:]],  # at the top: less context above than asked
        [*NUMBERED[:19], "last\n"],  # at the end: less below
        [*NUMBERED[:2], *NUMBERED[4:]],  # two lines removed
        [*NUMBERED[:5], "a\n", "b\n", *NUMBERED[5:]],  # two added
        [*NUMBERED[:3], "x\n", *NUMBERED[4:15], "y\n", *NUMBERED[16:]],  # two hunks
        [*NUMBERED[:8], "x\n", *NUMBERED[9:12], "y\n", *NUMBERED[13:]],  # close enough for one hunk at 3
    ],
)
def test_the_cut_diff_is_the_whole_file_diff(context: int, new: list[str]) -> None:
    diff = unified_diff("x.py", "".join(NUMBERED).encode(), "".join(new).encode(), context=context)
    assert diff == whole_file_diff(NUMBERED, new, context)


def test_the_default_context_is_three_lines() -> None:
    new = [*NUMBERED[:9], "changed\n", *NUMBERED[10:]]
    assert unified_diff("x.py", "".join(NUMBERED).encode(), "".join(new).encode()) == whole_file_diff(NUMBERED, new, 3)


def test_bytes_that_are_not_utf8_are_shown_replaced() -> None:
    diff = unified_diff("srt/a.py", b"ok\nbad \xff\n", b"ok\nbad \xfe!\n")
    assert diff == "--- a/sglang/srt/a.py\n+++ b/sglang/srt/a.py\n@@ -1,2 +1,2 @@\n ok\n-bad \ufffd\n+bad \ufffd!\n"


def test_a_tail_that_repeats_earlier_lines_is_cut_only_where_both_files_end_alike() -> None:
    """The common tail is counted from both files' ends at once (here `y y`): lines that only
    repeat earlier ones of the other file are not common, and no context is lost to them."""
    old, new = "z\ny\ny\nz\ny\ny\n", "x\nx\ny\ny\n"
    assert unified_diff("x.py", old.encode(), new.encode(), 1) == (
        "--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1,5 +1,3 @@\n-z\n+x\n+x\n y\n-y\n-z\n-y\n"
    )


def test_the_common_tail_is_cut_before_difflib_compares() -> None:
    """`line 0` ends both files, so only the two lines before it are new; difflib given the
    whole files would pair the old line with the first `line 0` instead (a valid diff too,
    but not the one the cut gives, which keeps the end of the file as it was)."""
    assert unified_diff("x.py", b"line 0\n", b"line 1\nline 0\nline 0\n", 0) == (
        "--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -0,0 +1,2 @@\n+line 1\n+line 0\n"
    )
