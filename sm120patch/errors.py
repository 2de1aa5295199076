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


#: Every stable code a refusal, an error or a warning carries, with what it means: shown as
#: ``[code]`` before the sentence and as ``code`` in ``--json`` (docs/reference.md lists them,
#: as ruff's rule codes and pip's error references are listed).  A code is never reused for
#: another meaning; a sentence may be reworded, its code stays.
CODES: dict[str, str] = {
    # errors (exit 2): the environment
    "environment": "usage or environment, no more specific code applies",
    "no-sglang": "no sglang package where it was looked for (this interpreter, --python, --sglang-path)",
    "bad-python": "--python names no interpreter that runs: missing, a broken venv link, not an environment root",
    "unreadable": "a file or folder sglang keeps (or its install metadata) cannot be read",
    "not-writable": "the sglang tree or its state folder cannot be written (permissions, a read-only mount)",
    "shared-store": "sglang's files are links into an installer's cache; writing them would change other environments",
    "state-damaged": "the saved state (.sm120patch) or an interrupted run's journal is not as this tool wrote it",
    "state-newer": "the saved state was written by a newer sm120patch",
    "locked": "another sm120patch holds the tree's lock",
    "usage": "options that cannot go together, or a value the command cannot take",
    "download": "demo could not download or read a release",
    "bench-host": "bench cannot run on this host or with this interpreter (GPUs, torch, sglang's benchmark)",
    "no-measurement": "--fuse-up-to measured: no saved bench result fits this host, TP, release and install",
    # not as asked (exit 1)
    "not-as-asked": "the tree is not as asked, no more specific code applies",
    "drift": "a patch's target is not what the patch knows: nothing was written",
    "release-refused": "a release the tool does not patch (older than 0.5.4: no SM12x probe, or no fusion)",
    "missing-kernel": "the FlashInfer beside sglang has no SM12x allreduce kernel (>= 0.6.17 has)",
    "changed-since-apply": "a patched file changed after apply wrote it (a hand edit, another tool)",
    "changed-while-read": "a file changed while sm120patch read it; nothing was written",
    "pending": "verify: a patch is not applied",
    "not-as-released": "revert: a file differs from the release's RECORD and sm120patch did not write it",
    "no-backup": "revert: a file holds sm120patch's patches, and no backup its apply wrote can restore it",
    "foreign-state": "revert: the state kept aside backs up another release than the one installed",
    "strict": "--strict: a warning about the fused path refused the command",
    "runtime-check": "verify --runtime: the serving interpreter lacks torch, cannot import the tree or run its probe",
    # warnings
    "unknown-sm-check": "an SM check on the fused path that no patch owns and the known list does not name",
    "left-out-shuts-fusion": "a patch left out by --only / --skip keeps the fused path shut on SM12x",
    "revert-refuses": "verify: revert will refuse a file changed since apply",
    "kernel-missing": "warning: the FlashInfer sglang pins (or none installed) lacks the SM12x allreduce kernel",
    # internal
    "internal-error": "a bug in sm120patch: nothing was written",
    "interrupted": "Ctrl-C: what the command left behind is said with it",
}


def coded(code: str, sentence: str) -> str:
    """``sentence`` with its stable code before it (``[code] sentence``)."""
    if code not in CODES:
        raise ValueError(f"unknown code {code!r}: add it to errors.CODES with its meaning")
    return f"[{code}] {sentence}"


class ToolError(Exception):
    """A problem the user can act on; its message is shown without a traceback.

    Only the subclasses are raised, and each carries its own ``exit_code``: catch
    ``ToolError``, raise ``NotAsAsked``, ``EnvironmentProblem`` or ``InternalError``.
    ``code`` is its stable code (``CODES``); each subclass has a default.
    """

    exit_code: ClassVar[ExitCode]
    default_code: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(getattr(cls, "exit_code", None), ExitCode):
            raise TypeError(f"{cls.__name__} must set exit_code (an ExitCode)")

    def __init__(self, *args: object, code: str | None = None) -> None:
        if type(self) is ToolError:
            raise TypeError("raise a subclass of ToolError: the subclass says the exit code")
        super().__init__(*args)
        self.code = code or self.default_code
        if self.code not in CODES:
            raise ValueError(f"unknown code {self.code!r}: add it to errors.CODES with its meaning")


class NotAsAsked(ToolError):
    """The tree is not as asked (drift, a file changed since apply, an unparsable source)."""

    exit_code = ExitCode.NOT_AS_ASKED
    default_code = "not-as-asked"


class EnvironmentProblem(ToolError):
    """Usage or environment (no sglang, unreadable path, state from a newer tool)."""

    exit_code = ExitCode.ENVIRONMENT
    default_code = "environment"


class InternalError(ToolError):
    """sm120patch itself went wrong (a patch produced code that does not compile or does
    not re-check as applied); caught before anything is written."""

    exit_code = ExitCode.INTERNAL
    default_code = "internal-error"
