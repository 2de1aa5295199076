"""Unified diffs of the files a command changed (or would change)."""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_diff(rel: str, old: bytes, new: bytes, context: int = 3) -> str:
    """A unified diff of one file.  The patches change a few lines of long files: the
    common head and tail are cut before difflib compares (and its line numbers moved back),
    which makes the same diff without matching thousands of equal lines."""
    import difflib

    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    start = max(0, head - context)
    cut = max(0, tail - context)
    lines = difflib.unified_diff(
        a[start : len(a) - cut], b[start : len(b) - cut], f"a/sglang/{rel}", f"b/sglang/{rel}", n=context
    )

    def moved(line: str) -> str:
        match = _HUNK.match(line)
        if not match:
            return line
        old_start, old_len, new_start, new_len = match.groups()
        return (
            f"@@ -{int(old_start) + start}{old_len or ''} +{int(new_start) + start}{new_len or ''} @@"
            + line[match.end() :]
        )

    return "".join(moved(line) for line in lines)
