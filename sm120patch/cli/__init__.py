"""The ``sm120patch`` command line (click): options in, an outcome rendered out.  One module
per command, each registering itself on ``main``.

Exit codes (``errors.ExitCode``): 0 ok, 1 not as asked, 2 usage or environment, 70 a bug,
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from sm120patch import __version__
from sm120patch.cli.run import INTERRUPTED
from sm120patch.errors import ExitCode


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``: which releases sm120patch patches, read from sglang/releases.py only
    here (``--help`` and the commands that need no release facts do not load them)."""
    if not value or ctx.resilient_parsing:
        return
    from sm120patch.sglang.releases import FIRST_SUPPORTED, LAST_KNOWN

    click.echo(
        f"sm120patch {__version__} — patches sglang {FIRST_SUPPORTED} to {LAST_KNOWN} (newer releases are "
        "checked by structure), refuses older ones"
    )
    ctx.exit()


class _Cli(click.Group):
    """click's group, with one contract for errors: a usage error exits 2 and, under
    ``--json``, also prints the JSON error object on stdout, like every other error."""

    def main(  # always standalone: it exits, with one contract for errors
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        own_process = args is None  # this process's command line, not a test's call
        argv = list(sys.argv[1:] if args is None else args)
        from sm120patch.runner import allow_probes

        # A Ctrl-C ends the probes of its own command only (main may run again in one process).
        allow_probes()
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            if "--json" in argv:
                from sm120patch.output import console as out

                out.print_json(out.error_json(exc.format_message(), ExitCode.ENVIRONMENT, "usage"))
            _show_usage_error(exc)
            _exit(ExitCode.ENVIRONMENT, own_process, "--json" in argv)
        except click.Abort:  # Ctrl-C outside a command's body (click turns it into Abort)
            if "--json" in argv:
                from sm120patch.output import console as out

                out.print_json(out.error_json(INTERRUPTED, ExitCode.INTERRUPTED, "interrupted"))
            click.echo(f"error: [interrupted] {INTERRUPTED}", err=True)
            _exit(ExitCode.INTERRUPTED, own_process, "--json" in argv)
        _exit(code if isinstance(code, int) else 0, own_process, "--json" in argv)


def _exit(code: int, own_process: bool, as_json: bool) -> NoReturn:
    """``sys.exit(code)``.  In its own process, a Ctrl-C from here on is held (blocked) and
    answered once the interpreter is shutting down: exit 130 with the command's message.  Left
    to Python, one that came while the interpreter shut down met the default handler it puts
    back there and ended the process by SIGINT (exit -2) without a word.  One held past the
    answer is dropped with the process.  Under ``--json`` the one object printed stands, with
    its exit code: a Ctrl-C this late changes neither."""
    if own_process and threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        if not as_json:
            atexit.register(_answer_held_interrupt)
    sys.exit(code)


def _answer_held_interrupt() -> None:
    """At exit (after the threads are done, before the interpreter unloads): a Ctrl-C held
    since the command finished ends the process 130, with what the command says of one."""
    if signal.SIGINT not in signal.sigpending():
        return
    from sm120patch.cli.run import late_interrupt

    with contextlib.suppress(Exception):  # a closed stdout: nothing more to say there
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        click.echo(f"error: {late_interrupt()}", err=True)
        sys.stderr.flush()
    os._exit(ExitCode.INTERRUPTED)


def _show_usage_error(exc: click.ClickException) -> None:
    """click's own text for ``exc``, printed as the report prints its lines (output/lines.py)."""
    import io

    from sm120patch.output import console as out

    shown = io.StringIO()
    exc.show(file=shown)
    out.usage_error(shown.getvalue())


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main() -> None:
    """Let SGLang's FlashInfer allreduce fusion run on SM120 Blackwell GPUs
    (RTX PRO 6000, RTX 5090), by patching the installed sglang in place, reversibly.

    \b
      sm120patch apply    back up, patch, print the verification report
      sm120patch verify   after an upgrade, at container start (exit 0 = patched)
      sm120patch revert   restore the original files byte for byte
      sm120patch doctor   what else stands between this host and the fused kernel
      sm120patch bench    kernel or server: does fusion pay on this host? measured
      sm120patch list     the patches and their state in this sglang
      sm120patch demo     the whole cycle on a downloaded release, in a temp dir

    Exit codes: 0 ok, 1 not as asked (drift, refused release, changed files),
    2 usage or environment error (no sglang found, read-only tree), 70 a bug,
    130 interrupted (Ctrl-C).
    """


# The commands register themselves on main: imported after it, for that (their own modules
# load only when a command runs, not for --help).
from sm120patch.cli import apply, bench, demo, doctor, listing, revert, self_test, verify  # noqa: E402
from sm120patch.cli.help import keep_words_in_help  # noqa: E402

keep_words_in_help(main)

__all__ = ["apply", "bench", "demo", "doctor", "listing", "main", "revert", "self_test", "verify"]
