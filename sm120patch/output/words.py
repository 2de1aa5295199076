"""Words that agree with their count: "1 warning", "2 warnings", never "1 warning(s)"."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural by an ``s`` unless the count is one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
