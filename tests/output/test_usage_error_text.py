"""A usage error as the user reads it (``output.console.usage_error``): click's usage and hint
lines as click laid them out, then its ``Error:`` sentence, wrapped under its label on a
terminal as every error is, one line in a log."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.output.console import usage_error
from tests.support.cli import run

USAGE = "Usage: sm120patch apply [OPTIONS]\nTry 'sm120patch apply --help' for help.\n\n"


def test_in_a_log_the_error_sentence_is_one_line_and_clicks_lines_are_not_folded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 columns, narrower than the hint line and the sentence: a log keeps both whole (for
    grep), and the blank line click puts before the sentence stays blank."""
    monkeypatch.setenv("COLUMNS", "30")
    code, out, err = run("apply", "--only=", "--python", str(tmp_path / "py"))
    assert (code, out) == (2, "")
    assert err == USAGE + (
        "Error: Invalid value for '--only': '' names no patch; give comma-separated ids "
        "(`sm120patch list` shows them)\n"
    )


def test_on_a_terminal_the_error_sentence_wraps_under_its_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sentence quotes what was typed, here an ``Error: `` of its own: only the label that
    starts the line is click's, and the rest hangs under it."""
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich takes the captured stderr for a terminal
    code, _, err = run("apply", "--only=Error: none", "--python", str(tmp_path / "py"))
    assert code == 2
    assert err.splitlines() == [
        *USAGE.splitlines(),
        "Error: unknown patch id Error: none;",
        "       known: communicator-import,",
        "       communicator-flag,",
        "       communicator-fusion-gate,",
        "       fusion-backend-resolver,",
        "       fusion-token-limit,",
        "       server-args-auto-enable,",
        "       workspace-preflight",
    ]


def test_clicks_lines_are_printed_as_typed(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Help lines hold brackets (click's ``[default: ...]``) and colon-separated words: neither
    is rich markup or an emoji code here, and a line wider than the terminal is not folded."""
    monkeypatch.setenv("COLUMNS", "40")
    shown = (
        "Usage: main bench kernel [OPTIONS]\n"
        "  --hidden INTEGER  The model's hidden size.  [default: 7168]\n"
        "  --master TEXT  where ranks meet, as host:x:29500\n"
    )
    usage_error(shown)
    assert capsys.readouterr().err == shown
