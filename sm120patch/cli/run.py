"""How a command body runs: the errors a user can act on become exit codes, a bug exit 70,
Ctrl-C exit 130; and the commands that locate sglang and render a patcher outcome."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sm120patch import __version__
from sm120patch.cli.options import location_options, locators, timeout_option
from sm120patch.errors import ExitCode, ToolError

if TYPE_CHECKING:
    from sm120patch.output.result import Result
    from sm120patch.patcher.outcome import Outcome
    from sm120patch.sglang.tree import SglangTree


def _fail(message: str, exit_code: int, as_json: bool, code: str) -> None:
    from sm120patch.output import console as out

    if as_json:
        out.print_json(out.error_json(message, exit_code, code))
    out.error(message, code)


def guarded(as_json: bool, run: Callable[[], int], interrupted: Callable[[], str] | None = None) -> None:
    """Run a command body; turn the errors a user can act on into their exit codes, a bug
    into exit 70 with its traceback, and Ctrl-C into exit 130 with ``interrupted()``: what
    it left behind."""
    ctx = click.get_current_context()
    _SAYS_WHEN_INTERRUPTED[:] = [interrupted] if interrupted else []
    try:
        code = run()
    except KeyboardInterrupt:
        _fail(interrupted() if interrupted else INTERRUPTED, ExitCode.INTERRUPTED, as_json, "interrupted")
        code = ExitCode.INTERRUPTED
    except ToolError as exc:
        _fail(str(exc), exc.exit_code, as_json, exc.code)
        code = exc.exit_code
    except OSError as exc:  # an unreadable file or directory met while reading
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}", ExitCode.ENVIRONMENT, as_json, "unreadable")
        code = ExitCode.ENVIRONMENT
    except Exception as exc:
        if _from_ctrl_c(exc):  # a Ctrl-C that a library wrapped (dataclasses while importing libcst)
            _fail(interrupted() if interrupted else INTERRUPTED, ExitCode.INTERRUPTED, as_json, "interrupted")
            ctx.exit(int(ExitCode.INTERRUPTED))
        import traceback

        traceback.print_exc()
        _fail(
            f"internal error ({type(exc).__name__}: {exc}); this is a bug in sm120patch {__version__}",
            ExitCode.INTERNAL,
            as_json,
            "internal-error",
        )
        code = ExitCode.INTERNAL
    ctx.exit(int(code))


def _from_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt wrapped by the code it went through: a Ctrl-C
    in an import raised "Error calling __set_name__" (a RuntimeError), reported as a bug."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def show_result(result: Result, as_json: bool) -> int:
    """The one place a command's result is rendered: one JSON object, or its text."""
    if as_json:
        from sm120patch.output import console as out

        out.print_json(result.to_json())
    else:
        result.render_text()
    return result.exit_code


#: What Ctrl-C leaves behind in a command that writes nothing (doctor, bench, demo's scratch).
INTERRUPTED = "interrupted; nothing was written"

#: The running command's own words for a Ctrl-C (``guarded``'s ``interrupted``), for one that
#: comes once its body is done (``late_interrupt``).
_SAYS_WHEN_INTERRUPTED: list[Callable[[], str]] = []


def late_interrupt() -> str:
    """What a Ctrl-C that came as the command finished says: what one in its body would."""
    try:
        return _SAYS_WHEN_INTERRUPTED[0]() if _SAYS_WHEN_INTERRUPTED else INTERRUPTED
    except Exception:  # the state it reads is what it is; the interrupt is still said
        return INTERRUPTED


def _known_layouts_only(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """Refuse role finds for this command only; and refuse a ``SM120PATCH_KNOWN_UP_TO`` that
    names no release (the backtest's knowledge)."""
    from sm120patch.patcher.kit.model import KNOWN_UP_TO

    raw = os.environ.get(KNOWN_UP_TO, "").strip()
    if raw:
        from packaging.version import InvalidVersion, Version

        try:
            Version(raw)
        except InvalidVersion:
            raise click.UsageError(f"{KNOWN_UP_TO}={raw!r} is not a release number (e.g. 0.5.21)") from None
    if value:
        from sm120patch.patcher.kit.model import ROLE_FINDS

        token = ROLE_FINDS.set(False)
        ctx.call_on_close(lambda: ROLE_FINDS.reset(token))


def tree_command(func: Callable[..., Outcome]) -> Callable[..., None]:
    """A command that locates sglang, runs ``func`` on it and renders the outcome."""
    takes_timeout = "timeout" in func.__code__.co_varnames[: func.__code__.co_argcount]  # not inspect: 4 ms

    @location_options
    @timeout_option
    @click.option(
        "--known-layouts-only",
        is_flag=True,
        expose_value=False,
        envvar="SM120PATCH_KNOWN_LAYOUTS_ONLY",
        show_envvar=True,
        callback=_known_layouts_only,
        help="Patch only targets found where a known sglang release keeps them: a target found by role "
        "(what it does, in a release that moved it) is then drift, and nothing is written.",
    )
    @functools.wraps(func)
    def wrapper(python: str | None, sglang_path: Path | None, as_json: bool, timeout: float, **kwargs: Any) -> None:
        python, sglang_path = locators(python, sglang_path)
        located: list[SglangTree] = []  # for what an interrupt says

        def run() -> int:
            from sm120patch.patcher.render.shown import ShownOutcome
            from sm120patch.runner.locate import locate

            tree = locate(python=python, sglang_path=sglang_path, timeout=timeout)
            located.append(tree)
            if takes_timeout:
                kwargs["timeout"] = timeout
            outcome = func(tree=tree, **kwargs)
            return show_result(ShownOutcome(outcome, kwargs.get("docs", False), kwargs.get("dry_run", False)), as_json)

        def interrupted() -> str:
            from sm120patch.patcher.commands.state_report import interrupted_note

            return interrupted_note(located[0] if located else None)

        guarded(as_json, run, interrupted)

    return wrapper
