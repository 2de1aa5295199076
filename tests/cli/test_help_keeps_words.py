"""``--help`` breaks lines at spaces only, as every other line (output/lines.py): click's own
formatter broke at hyphens and split long words (``--allow-missing-`` / ``kernel``,
``--disable-`` / ``custom-all-reduce``, ``site-`` / ``packages/sglang``)."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.cli.help import HelpFormatter, fill, keep_words_in_help

WORD = re.compile(r"(?:`[^`]*`|\S)+")


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        found.extend(_commands(sub, (*path, name)))
    return found


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("path", _commands(main), ids=lambda p: " ".join(p) or "sm120patch")
def test_no_word_of_the_help_is_split(path: tuple[str, ...], columns: int) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    command = _command(path)
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    words = {word.strip(".,;:()") for text in texts for word in WORD.findall(text)} - {"\b"}
    split = sorted(word for word in words if not any(word in line for line in lines))
    assert not split, (split, result.output)


def test_a_word_wider_than_the_column_is_a_line_of_its_own() -> None:
    assert fill("see site-packages/sglang/srt/layers/communicator.py now", 20) == [
        "see",
        "site-packages/sglang/srt/layers/communicator.py",
        "now",
    ]


def test_paragraphs_and_kept_blocks_are_laid_out_as_click_lays_them_out() -> None:
    text = "one two\nthree\n\n\b\n  kept   as\n  written\n\n  indented para"
    assert fill(text, 40) == ["one two three", "", "  kept   as", "  written", "", "  indented para"]


def test_an_indented_paragraph_wraps_within_the_room_its_indent_leaves() -> None:
    assert fill("  aaa bbb ccc", 8) == ["  aaa", "  bbb", "  ccc"]


def test_an_indent_wider_than_the_column_leaves_one_cell_of_room() -> None:
    """A word of no width (a zero-width space) after a one-letter word needs two cells."""
    assert fill("    x \u200b", 5) == ["    x", "    \u200b"]


def test_the_line_between_indented_paragraphs_is_empty() -> None:
    formatter = HelpFormatter(width=40)
    formatter.indent()
    formatter.write_text("one\n\ntwo")
    assert formatter.getvalue() == "  one\n\n  two\n"


def test_every_command_under_a_group_formats_its_help_at_spaces_only() -> None:
    """``keep_words_in_help`` on a group of the test's own (the cli's ran while it was imported)."""

    @click.group()
    def top() -> None: ...

    @top.group()
    def middle() -> None: ...

    @middle.command()
    def leaf() -> None: ...

    keep_words_in_help(top)
    for command in (top, middle, leaf):
        ctx = command.make_context(command.name, [], resilient_parsing=True)
        assert isinstance(ctx.make_formatter(), HelpFormatter)
