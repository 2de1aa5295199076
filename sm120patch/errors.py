"""Exit codes and the errors that end a command with one (README: Exit codes)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # as asked: patched / verified / reverted / nothing to do
    NOT_AS_ASKED = 1  # drift, a refused release, pending patches at verify, changed files
    ENVIRONMENT = 2  # usage or environment: bad option, no sglang, read-only tree, bad state
    INTERNAL = 70  # a bug in sm120patch (sysexits' EX_SOFTWARE): nothing was written


class ToolError(Exception):
    """A problem the user can act on; its message is shown without a traceback."""

    exit_code = ExitCode.NOT_AS_ASKED


class NotAsAsked(ToolError):
    """The tree is not as asked (drift, a file changed since apply, an unparsable source)."""

    exit_code = ExitCode.NOT_AS_ASKED


class EnvironmentProblem(ToolError):
    """Usage or environment (no sglang, unreadable path, state from a newer tool)."""

    exit_code = ExitCode.ENVIRONMENT


class InternalError(ToolError):
    """sm120patch itself went wrong (a patch produced code that does not compile or does
    not re-check as applied); caught before anything is written."""

    exit_code = ExitCode.INTERNAL
