"""Exit codes and the errors that end a command with one (docs/reference.md: Exit codes)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, ClassVar


class ExitCode(IntEnum):
    OK = 0  # as asked: patched / verified / reverted / nothing to do
    NOT_AS_ASKED = 1  # drift, a refused release, pending patches at verify, changed files
    ENVIRONMENT = 2  # usage or environment: bad option, no sglang, read-only tree, bad state
    INTERNAL = 70  # a bug in sm120patch (sysexits' EX_SOFTWARE): nothing was written
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


class ToolError(Exception):
    """A problem the user can act on; its message is shown without a traceback.

    Only the subclasses are raised, and each carries its own ``exit_code``: catch
    ``ToolError``, raise ``NotAsAsked``, ``EnvironmentProblem`` or ``InternalError``.
    """

    exit_code: ClassVar[ExitCode]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(getattr(cls, "exit_code", None), ExitCode):
            raise TypeError(f"{cls.__name__} must set exit_code (an ExitCode)")

    def __init__(self, *args: object) -> None:
        if type(self) is ToolError:
            raise TypeError("raise a subclass of ToolError: the subclass says the exit code")
        super().__init__(*args)


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
