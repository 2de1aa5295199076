"""Bytes from other programs reach the terminal spelled out: an escape sequence in an
interpreter's error, nvidia-smi's or a finding's text is shown as ``\\x1b[31m``, never obeyed
(newlines and tabs kept); the JSON output keeps the text as it came (json escapes it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sm120patch.output.console import printable
from tests.support.cli import run

RED = "\x1b[31mboom\x1b[0m\x07"
SHOWN = "\\x1b[31mboom\\x1b[0m\\x07"


def test_control_characters_are_spelled_out_newlines_and_tabs_kept() -> None:
    assert printable(RED) == SHOWN
    assert printable("over\rwritten") == "over\\x0dwritten"
    assert printable("a\n\tb\x7f\x9b") == "a\n\tb\\x7f\\x9b"
    assert printable("plain ü ✓") == "plain ü ✓"


def test_the_control_ranges_end_to_end() -> None:
    """C0 (0x00-0x1f), DEL and C1 (0x80-0x9f) are spelled out; their neighbours are text."""
    assert printable("\x00\x1f\x7f\x80\x9f") == "\\x00\\x1f\\x7f\\x80\\x9f"
    assert printable(" ~\xa0\xff") == " ~\xa0\xff"
    assert printable(12) == "12"


def shouting_python(path: Path) -> Path:
    """An interpreter that fails, whatever it is asked, with a coloured error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write({RED!r})\nsys.exit(1)\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("command", ["apply", "verify", "revert", "list", "doctor"])
@pytest.mark.offline
def test_an_interpreters_escape_sequence_is_shown_not_obeyed(tmp_path: Path, command: str) -> None:
    python = shouting_python(tmp_path / "env" / "bin" / "python")
    code, _, err = run(command, "--python", str(python))
    assert code == 2
    assert SHOWN in err
    assert "\x1b" not in err and "\x07" not in err
    code, out, _ = run(command, "--python", str(python), "--json")
    assert RED in json.loads(out)["error"]
