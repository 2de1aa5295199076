"""``--help``'s option and command lists (``HelpFormatter.write_dl``) laid out as click lays
them out: the help column 30 cells in at most, a name wider than that on a line of its own,
a name without help alone on its line; only the wrapping differs (at spaces only,
test_help_keeps_words.py), and an empty line between help paragraphs carries no indent."""

from __future__ import annotations

import click
import pytest

from sm120patch.cli.help import HelpFormatter


def listed(rows: list[tuple[str, str]], width: int = 60, indent: int = 0) -> str:
    formatter = HelpFormatter(width=width)
    for _ in range(indent):
        formatter.indent()
    formatter.write_dl(rows)
    return formatter.getvalue()


def test_a_name_without_help_is_alone_on_its_line_and_the_next_row_follows() -> None:
    assert listed([("--a", ""), ("--b", "bee")]) == "--a\n--b  bee\n"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("x" * 30, "x" * 30 + "  help\n"),
        ("x" * 31, "x" * 31 + "\n" + " " * 32 + "help\n"),
    ],
    ids=["30-cells-beside", "31-cells-above"],
)
def test_the_help_column_starts_at_most_30_cells_and_two_spaces_in(name: str, expected: str) -> None:
    assert listed([(name, "help")]) == expected


def test_help_below_a_wide_name_starts_at_the_column_plus_the_indent() -> None:
    assert listed([("x" * 35, "help")], indent=1) == "  " + "x" * 35 + "\n" + " " * 34 + "help\n"


def test_a_narrow_terminal_still_gives_the_help_ten_cells() -> None:
    """18 columns leave the help 9 cells beside ``--opt``: it gets 10, one word a line."""
    assert listed([("--opt", "aaaaa bbbbb")], width=18) == "--opt  aaaaa\n       bbbbb\n"


def test_help_of_only_blank_lines_ends_the_row() -> None:
    assert listed([("--opt", "\n")]) == "--opt  \n"


def test_the_line_between_help_paragraphs_is_empty() -> None:
    assert listed([("--opt", "one\n\ntwo")]) == "--opt  one\n\n       two\n"


@pytest.mark.parametrize("rows", [[("a", "b", "c")], []], ids=["three-columns", "no-rows"])
def test_rows_not_of_two_columns_raise_what_click_raises(rows: list[tuple[str, ...]]) -> None:
    with pytest.raises(TypeError) as clicks:
        click.HelpFormatter().write_dl(rows)  # type: ignore[arg-type]
    with pytest.raises(TypeError) as ours:
        HelpFormatter().write_dl(rows)  # type: ignore[arg-type]
    assert str(ours.value) == str(clicks.value)
