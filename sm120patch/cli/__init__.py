"""The ``sm120patch`` command line (click): options in, an outcome rendered out.  One module
per command, each registering itself on ``main``.

Exit codes (``errors.ExitCode``): 0 ok, 1 not as asked, 2 usage or environment, 70 a bug,
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

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
        argv = list(sys.argv[1:] if args is None else args)
        from sm120patch.runner import allow_probes

        # A Ctrl-C ends the probes of its own command only (main may run again in one process).
        allow_probes()
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            if "--json" in argv:
                from sm120patch.output import console as out

                out.print_json(out.error_json(exc.format_message(), ExitCode.ENVIRONMENT))
            _show_usage_error(exc)
            sys.exit(ExitCode.ENVIRONMENT)
        except click.Abort:  # Ctrl-C outside a command's body (click turns it into Abort)
            if "--json" in argv:
                from sm120patch.output import console as out

                out.print_json(out.error_json(INTERRUPTED, ExitCode.INTERRUPTED))
            click.echo(f"error: {INTERRUPTED}", err=True)
            sys.exit(ExitCode.INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


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
from sm120patch.cli import apply, bench, demo, doctor, listing, revert, verify  # noqa: E402
from sm120patch.cli.help import keep_words_in_help  # noqa: E402

keep_words_in_help(main)

__all__ = ["apply", "bench", "demo", "doctor", "listing", "main", "revert", "verify"]
