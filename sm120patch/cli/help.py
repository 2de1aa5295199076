"""``--help`` wrapped as every other line people read (output/lines.py): at spaces only.
click's own formatter breaks at hyphens and splits a word longer than the column
(``--allow-missing-`` / ``kernel``, ``site-`` / ``packages/sglang``); here an option, a path
or a backticked command stays whole, on a line of its own where it is wider than the room."""

from __future__ import annotations

from collections.abc import Iterable

import click
from click.formatting import iter_rows, measure_table, term_len


def fill(text: str, width: int) -> list[str]:
    """``text`` as click lays out help paragraphs (separated by an empty line; one led by a
    ``\\b`` line kept as written), each paragraph at its own indent, wrapped at spaces to
    ``width``; the lines, an empty one between paragraphs."""
    from sm120patch.output.lines import wrap

    paragraphs: list[list[str]] = [[]]
    for line in text.expandtabs().splitlines():
        if line:
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    lines: list[str] = []
    for paragraph in filter(None, paragraphs):
        if lines:
            lines.append("")
        indent = " " * (term_len(paragraph[0]) - term_len(paragraph[0].lstrip()))
        if paragraph[0].strip() == "\b":
            lines.extend(indent + line for line in paragraph[1:])
            continue
        flowed = " ".join(line.strip() for line in paragraph)
        lines.extend(indent + line.plain for line in wrap(flowed, max(width - len(indent), 1)))
    return lines


class HelpFormatter(click.HelpFormatter):
    """click's formatter with its text and definition lists wrapped by ``fill``."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        for line in fill(text, self.width - self.current_indent):
            self.write(f"{indent}{line}\n" if line else "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        widths = measure_table(rows)
        if len(widths) != 2:
            raise TypeError("Expected two columns for definition list")
        first_col = min(widths[0], col_max) + col_spacing
        for first, second in iter_rows(rows, len(widths)):
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if term_len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - term_len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = fill(second, max(self.width - first_col - 2, 10)) or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n" if line else "\n")


class HelpContext(click.Context):
    formatter_class = HelpFormatter


def keep_words_in_help(command: click.Command) -> None:
    """Every command under ``command`` (itself included) formats its help with ``HelpFormatter``."""
    command.context_class = HelpContext
    for sub in getattr(command, "commands", {}).values():
        keep_words_in_help(sub)
