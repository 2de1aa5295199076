"""What every command prints for people on stderr (rich, loaded only to print) and for
machines on stdout (one JSON object, versioned by ``SCHEMA``): errors, status lines, text
from other programs made printable."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from sm120patch import __version__
from sm120patch.output.lines import put

if TYPE_CHECKING:  # rich loads only to render for people (JSON output never needs it)
    from rich.console import Console

SCHEMA = "sm120patch/1"


#: Control characters (C0 but newline and tab, DEL, C1) spelled out, e.g. ESC as ``\x1b``.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"}


def printable(text: object) -> str:
    """Text that may come from another program (an interpreter's error, nvidia-smi, a file)
    as the terminal should show it: an escape sequence or carriage return spelled out, never
    obeyed.  JSON output needs no such care (json escapes them)."""
    return str(text).translate(_CONTROL)


class StatusLine:
    """A rich status line on stderr while something long runs (on a terminal only).  Always
    one line, cut short with an ellipsis: a status that wraps is two lines to erase at each
    frame, and where the terminal wraps otherwise than rich counted (a resize, a ``COLUMNS``
    of another width) the frames stay behind on the screen."""

    def __init__(self, enabled: bool, first: str) -> None:
        self.enabled, self.first = enabled, first
        self._status: Any = None
        self._width = 0

    def __enter__(self) -> StatusLine:
        if self.enabled:
            out = console()
            self._width = out.width
            self._status = out.status(_one_line(self.first, self._width))
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(_one_line(text, self._width))


def _one_line(text: str, width: int) -> Any:
    """``text`` cut to fit beside the spinner (its frame and a space) on a line ``width`` wide."""
    from rich.text import Text

    shown = Text(text)
    shown.truncate(max(width - 2, 1), overflow="ellipsis")
    return shown


def console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def error(message: str, code: str | None = None) -> None:
    """``error: [code] message`` on stderr (the code where the error has one: errors.CODES)."""
    from rich.text import Text

    lead = Text("error: ", style="bold red")
    if code:
        lead.append(f"[{code}] ")  # in the lead's own bold red
    put(console(), Text(printable(message)), lead=lead)


def usage_error(shown: str) -> None:
    """click's text for a usage error (usage, hint, ``Error: ...``): its ``Error:`` sentence
    wrapped as every error is (click leaves it one line however wide the terminal); the other
    lines as click laid them out (the help, for ``sm120patch`` alone, indented as ``--help``'s)."""
    out = console()
    for line in shown.removesuffix("\n").split("\n"):  # not splitlines(): a typed \r is no line break
        head, colon, rest = line.partition("Error: ")
        if colon and not head:
            put(out, printable(rest), lead="Error: ")
        else:
            out.print(printable(line), soft_wrap=True, markup=False, emoji=False)


SCHEMA = "sm120patch/1"


def error_json(message: str, exit_code: int, code: str) -> dict[str, Any]:
    """The one object an error prints under ``--json``: ``code`` is its stable code (errors.CODES)."""
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "ok": False,
        "exit_code": int(exit_code),
        "error": message,
        "code": code,
    }


def print_json(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
