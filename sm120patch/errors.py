"""Errors that end a command with a documented exit code (README: Exit codes)."""

from __future__ import annotations


class ToolError(Exception):
    """A problem the user can act on; its message is shown without a traceback."""

    exit_code = 1


class NotAsAsked(ToolError):
    """Exit 1: the tree is not as asked (drift, refused release, file changed since apply)."""

    exit_code = 1


class EnvironmentProblem(ToolError):
    """Exit 2: usage or environment (no sglang, unreadable path, state from a newer tool)."""

    exit_code = 2
