"""Lines people read, wrapped at spaces to the terminal's width.

A word (an identifier, a path, an option) is never split, nor a command in backticks
(`` `sm120patch bench kernel --tp 2` ``, spaces and all): one longer than the room left is
printed whole on a line of its own, which the terminal then wraps, so that what is copied
from it is the name itself.  Where the output is no terminal (a pipe, a log), nothing is
wrapped: each sentence is one line, whatever width ``COLUMNS`` claims.  Every report,
finding, note, warning, headline, error and demo line goes through ``put``; ``wrap`` gives
the lines themselves, for a caller that lays them out.  Text in, rich ``Text`` out: the
styles of each part are kept across the breaks.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console

#: A word: what lies between spaces, a backticked span counted as one character of it.
_WORD = re.compile(r"(?:`[^`]*`|\S)+\s*")

#: The narrowest room a line is wrapped in, however deep its indent on however narrow a
#: terminal: narrower would put each word on its own line and read no better.
MIN_ROOM = 20


def wrap(text: Text | str, width: int) -> list[Text]:
    """``text`` as lines of at most ``width`` cells, broken at spaces only (and at its own
    newlines; its tabs are spaces to the next stop of 8); a word wider than ``width`` is a line
    of its own, whole.  No line ends in spaces."""
    text = Text(text) if isinstance(text, str) else text
    lines = []
    for paragraph in text.split("\n", allow_blank=True):
        paragraph.expand_tabs()  # a tab is 0 cells to cell_len, up to 8 on the terminal
        plain = paragraph.plain
        column = cell_len(plain) - cell_len(plain.lstrip())  # the paragraph's own indent
        breaks = []
        for word in _WORD.finditer(plain):
            needs = cell_len(word.group().rstrip())
            if column > 0 and column + needs > width and plain[: word.start()].strip():
                breaks.append(word.start())
                column = 0
            column += cell_len(word.group())
        for line in paragraph.divide(breaks):
            line.rstrip()
            lines.append(line)
    return lines


def longest_word(text: Text) -> int:
    """The width of the widest word of ``text``: the narrowest column it fits whole."""
    return max((cell_len(word.group().rstrip()) for word in _WORD.finditer(text.plain)), default=0)


def put(out: Console, text: Text | str, lead: Text | str = "", width: int | None = None) -> None:
    """Print ``text`` wrapped to ``out``'s width after ``lead`` (an indent, a label): the first
    line starts with ``lead``, the others with as many spaces.  Printed as laid out here, so
    rich neither wraps again nor crops a word wider than the terminal.  A word too wide for
    its indent (a path, say) starts at the left edge instead: one that fits the terminal
    stays on one line of it; a longer one is the only thing on its line.  Where ``out`` is no
    terminal (a log, a pipe), each of the text's lines is printed whole, however long.  ``width``:
    a terminal wider than it wraps there (a report kept to the width of its tables)."""
    lead = Text(lead) if isinstance(lead, str) else lead
    text = Text(text) if isinstance(text, str) else text  # a styled sentence comes as a Text
    terminal = out.is_terminal
    indent = cell_len(lead.plain)
    room = max(min(out.width, width or out.width) - indent, MIN_ROOM)
    # A log or a pipe: its own lines only, each whole, for grep and for copying.
    lines = wrap(text, room) if terminal else text.split("\n", allow_blank=True)
    for i, line in enumerate(lines):
        first = lead if i == 0 else Text(" " * indent)
        if terminal and not first.plain.strip() and room < cell_len(line.plain):
            first = Text()
        shown = Text.assemble(first, line)
        shown.rstrip()
        out.print(shown, no_wrap=True, crop=False, overflow="ignore")
