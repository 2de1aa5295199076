"""A usage error may repeat what was typed (here a --plot file name): a control character in
it (a bell, the escape that sets the terminal's title) is spelled out, as the report spells
out text from elsewhere, never handed to the terminal; click's sentence is otherwise the one
on stderr."""

from __future__ import annotations

import pytest

from tests.support.cli import run


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        ("out\x07.txt", "out\\x07.txt"),
        ("\x1b]0;owned\x07.txt", "\\x1b]0;owned\\x07.txt"),
        ("ok.png\rnot.txt", "ok.png\\x0dnot.txt"),  # a carriage return would let it overwrite the line
    ],
    ids=["bell", "terminal-title", "carriage-return"],
)
def test_a_control_character_typed_into_a_usage_error_is_spelled_out(typed: str, shown: str) -> None:
    code, out, err = run("bench", "kernel", "--plot", typed)
    assert (code, out) == (2, "")
    assert err.startswith("Usage: ") and not any(c in err for c in "\x07\x1b\r")
    assert f"Error: Invalid value for '--plot': {shown}: the file must end in .png or .svg" in err
