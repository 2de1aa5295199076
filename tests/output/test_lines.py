"""output/lines.py: lines wrapped at spaces, no word split, a word too wide on its own line."""

from __future__ import annotations

import io

import pytest
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from sm120patch.output.lines import MIN_ROOM, longest_word, put, wrap
from tests.support.properties import fast_and_slow

PATH = "/opt/conda/envs/serve/lib/python3.11/site-packages/sglang/srt/layers/communicator.py"


def printed(width: int, *args: object, terminal: bool = True, room: int | None = None, **kwargs: object) -> list[str]:
    """What ``put`` prints on a console ``width`` wide (``room``: put's own ``width``)."""
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    put(console, *args, width=room, **kwargs)  # type: ignore[arg-type]
    return out.getvalue().splitlines()


def test_a_path_wider_than_its_indent_starts_at_the_left_edge_whole() -> None:
    assert printed(60, f"kept the changed file as {PATH} for you", lead="    ") == [
        "    kept the changed file as",
        PATH,
        "    for you",
    ]


def test_a_label_stays_on_the_first_line_and_the_rest_hang_under_it() -> None:
    assert printed(30, "cannot write the manifest here, nothing was changed", lead="error: ") == [
        "error: cannot write the",
        "       manifest here, nothing",
        "       was changed",
    ]


def test_its_own_newlines_are_kept_and_styles_cross_the_breaks() -> None:
    text = Text.assemble(("bold words ", "bold"), "then plain\n  indented")
    lines = wrap(text, 10)
    assert [line.plain for line in lines] == ["bold words", "then plain", "  indented"]
    assert [(s.start, s.end, s.style) for s in lines[0].spans] == [(0, 10, "bold")]


def test_on_a_log_every_line_is_one_line_however_long() -> None:
    """Piped or logged, whatever width the console was given (``COLUMNS``): one sentence, one
    line, for grep and for copying; its own newlines are kept."""
    sentence = " ".join([f"no sglang found in {PATH}"] * 3)
    assert printed(40, sentence, lead="error: ", terminal=False) == [f"error: {sentence}"]
    assert printed(40, f"{sentence}\n{sentence}", lead="  ", terminal=False) == [f"  {sentence}"] * 2
    assert len(printed(40, sentence, lead="error: ", terminal=True)) > 3


@pytest.mark.parametrize(
    "command",
    ["`sm120patch bench kernel --tp 2`", "`sm120patch apply --skip server-args-auto-enable`,",
     "`pip install -U 'flashinfer-python>=0.6.17'`."],
)  # fmt: skip
def test_a_backticked_command_is_never_split(command: str) -> None:
    """A command in backticks is one word to the wrap: whole on the line it starts, or on a
    line of its own where it is wider than the room."""
    for width in range(MIN_ROOM, 90):
        lines = printed(width, f"fusion may not pay here: measure it with {command} then decide", lead="warning: ")
        assert next(line for line in lines if "`" in line).count("`") == 2, (width, lines)
        assert (
            " ".join(" ".join(lines).split())
            == f"warning: fusion may not pay here: measure it with {command} then decide"
        )


def test_a_backticked_command_is_one_word_to_the_column_it_needs() -> None:
    assert longest_word(Text("run `sm120patch bench kernel --tp 2` here")) == len("`sm120patch bench kernel --tp 2`")


def test_tabs_take_the_cells_they_take_on_the_terminal() -> None:
    """A tab is no zero-width character: it is spaces to the next stop, counted as such."""
    lines = printed(30, "a\tb\tc\td " * 6, lead="note: ")
    assert len(lines) > 1 and all(cell_len(line) <= 30 for line in lines)
    assert "\t" not in "".join(lines)
    assert printed(30, "a\tb")[0] == "a       b"


def words_stay_whole_and_in_order(words: list[str], spaces: list[str], width: int) -> None:
    joined = "".join(word + spaces[i % len(spaces)] for i, word in enumerate(words)).rstrip()
    lines = [line.plain for line in wrap(joined, width)]
    assert " ".join(lines).split() == words  # no word split, none lost, none reordered
    assert all(cell_len(line) <= width or len(line.split()) == 1 for line in lines)  # wider: one word alone
    assert all(line == line.rstrip() and "\t" not in line for line in lines)


test_every_word_stays_whole_and_in_order, test_every_word_stays_whole_and_in_order_many = fast_and_slow(
    words_stay_whole_and_in_order,
    st.lists(st.text(alphabet="abc_./-漢字", min_size=1, max_size=40), min_size=1, max_size=30),
    st.lists(st.sampled_from([" ", "  ", "\t", " \t"]), min_size=1, max_size=4),
    st.integers(min_value=1, max_value=50),
    fast=60,
    slow=2000,
)


def test_however_narrow_the_terminal_a_line_keeps_its_minimum_room() -> None:
    lines = printed(10, "alpha beta gamma delta epsilon", lead="warning ")
    assert lines[0] == "warning alpha beta gamma"
    assert all(len(line) <= 8 + MIN_ROOM for line in lines)


def test_an_indented_paragraph_counts_its_indent() -> None:
    """The paragraph's own indent takes cells of the first line: no line is wider than asked."""
    lines = [line.plain for line in wrap("intro\n    alpha beta gamma", 12)]
    assert lines[:2] == ["intro", "    alpha"]
    assert all(cell_len(line) <= 12 for line in lines), lines


def test_a_text_ending_in_a_newline_ends_in_a_blank_line_on_a_terminal_as_in_a_log() -> None:
    assert printed(80, "done\n", terminal=True) == printed(80, "done\n", terminal=False)
    assert printed(80, "done\n", terminal=True) == ["done", ""]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The space before the path takes no cells, the "x" one: the path still gets a line of its own.
        (f"x\u2028{PATH}", ["x", PATH]),
        # Nothing before the path takes a cell: a break there would leave a line that shows nothing.
        (f"\u0301\u2028{PATH}", [f"\u0301\u2028{PATH}"]),
    ],
    ids=["one-cell-word-then-zero-cell-space", "only-zero-cell-characters-before"],
)
def test_characters_that_take_no_cells_count_as_none(text: str, expected: list[str]) -> None:
    """Another program's text may hold a combining mark or a line separator (U+2028), which
    ``printable`` leaves as they are: the room is counted in cells, as the terminal shows them."""
    assert [line.plain for line in wrap(text, 40)] == expected


@pytest.mark.parametrize(
    ("text", "width"),
    [
        ("applied  not-needed", len("not-needed")),
        (f"kept {PATH}", len(PATH)),
        ("sglang 模型模型", 8),  # wide characters take two cells each, as on the terminal
        ("", 0),  # nothing to fit: no column needed
        ("  \n\t ", 0),
    ],
    ids=["two words", "a path", "wide characters", "empty", "only spaces"],
)
def test_the_narrowest_column_a_text_fits_whole_is_its_widest_word(text: str, width: int) -> None:
    assert longest_word(Text(text)) == width


def test_a_width_narrower_than_the_terminal_wraps_there_and_piped_output_stays_whole() -> None:
    sentence = "fusion pays in sglang's own decode at TP 2: launch with `--flashinfer-allreduce-fusion-backend trtllm`"
    assert printed(200, sentence, room=80) == [
        "fusion pays in sglang's own decode at TP 2: launch with",
        "`--flashinfer-allreduce-fusion-backend trtllm`",
    ]
    assert printed(50, sentence, room=80)[0] == "fusion pays in sglang's own decode at TP 2: launch"  # the narrower
    assert printed(200, sentence) == [sentence]
    assert printed(40, sentence, room=20, terminal=False) == [sentence]  # a log: whole, whatever the width
