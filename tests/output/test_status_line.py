"""The status line bench shows while it runs: one line however long its text, so each frame
erases the one before and none is left on the screen."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from sm120patch.output import console as console_module
from sm120patch.output.console import StatusLine

WORKSPACE = "creating FlashInfer's workspace (the first run builds its trtllm_comm module: minutes)"


@pytest.mark.parametrize("width", [30, 60, 80])
def test_a_status_wider_than_the_terminal_is_cut_to_one_line(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    shown = Console(file=io.StringIO(), force_terminal=True, width=width)
    monkeypatch.setattr(console_module, "console", lambda: shown)
    with StatusLine(True, WORKSPACE) as status:
        first = shown.render_lines(status._status.renderable, shown.options)
        status.update(f"{WORKSPACE} {WORKSPACE}")
        updated = shown.render_lines(status._status.renderable, shown.options)
    assert len(first) == len(updated) == 1
    assert "".join(s.text for s in first[0]).rstrip().endswith("…")


@pytest.mark.parametrize(("width", "shown"), [(30, "x" * 27 + "…"), (4, "x…"), (3, "…"), (1, "…")])
def test_a_status_leaves_two_columns_for_the_spinner_and_shows_at_least_the_ellipsis(width: int, shown: str) -> None:
    assert console_module._one_line("x" * 50, width).plain == shown
