"""The patches' own documentation as users read it: README's "What it changes" table and
``sm120patch list --docs``, made from each patch's docstring and anchor table."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from sm120patch.patcher.kit.model import Anchor, Edit, Kind, Releases, State
from sm120patch.patcher.plan import registry
from sm120patch.patcher.render.docs import patch_table_markdown, plain, render_docs

README = Path(__file__).resolve().parents[2] / "README.md"


@dataclass
class StandInPatch:
    """A stand-in for a registered ``Patch``: only what the docs read."""

    id: str
    summary: str
    doc: str
    anchors: tuple[Anchor, ...]
    edits: Edit = Edit.OR_TERM


STAND_INS = [
    StandInPatch(
        "gate",
        "widen the gate",
        """Widen the ``gate`` with SM12x.

        Why: the gate
            reads flags.
        """,
        (
            Anchor("srt/layers/a.py", "fuse", Releases("0.5.8")),
            Anchor("srt/layers/a.py", "fuse", Releases("0.5.4", "0.5.7"), cls="Fn", note="operands swapped"),
            Anchor("srt/b.py", "_flag", Releases("0.5.6", "0.5.6"), kind=Kind.ASSIGNMENT, expect=State.NOT_NEEDED),
            Anchor("srt/c.py", "resolve", Releases("0.5.14"), imports=True, note="helper spelling"),
        ),
    ),
    StandInPatch(
        "import",
        "import the probe",
        "Import it.",
        (Anchor("srt/a.py", "is_sm100_supported", Releases("0.5.4"), kind=Kind.IMPORT, imports=True),),
        Edit.IMPORT,
    ),
]


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "all_patches", lambda: STAND_INS)


def test_readme_shows_the_table_the_registered_patches_make() -> None:
    readme = README.read_text()
    table = readme.split("<!-- patch-table:begin -->\n", 1)[1].split("\n<!-- patch-table:end -->", 1)[0]
    assert patch_table_markdown() == table


def test_table_row_per_patch_each_place_with_what_is_special_there(stand_ins: None) -> None:
    assert patch_table_markdown().split("\n") == [
        "| patch | where it looks (file: what, releases) | what it changes |",
        "|---|---|---|",
        "| `gate` | `layers/a.py`: function fuse, 0.5.8 - now"
        "<br>`layers/a.py`: method Fn.fuse, 0.5.4 - 0.5.7 (operands swapped)"
        "<br>`b.py`: `_flag = ...`, 0.5.6 (not-needed)"
        "<br>`c.py`: function resolve, 0.5.14 - now (helper spelling; adds the import) | widen the gate |",
        # the import patch's own edit is the import: not said twice
        "| `import` | `a.py`: `from sglang.srt.utils import is_sm100_supported`, 0.5.4 - now | import the probe |",
    ]


def test_a_docstring_as_plain_text() -> None:
    assert plain("Use ``x`` and ``y.z()``.\n\n    Indented ``a`` line.\n    ") == "Use x and y.z().\n\nIndented a line."
    assert plain("a `single` and ``double``") == "a `single` and double"


def rendered(width: int = 100) -> list[str]:
    out = io.StringIO()
    render_docs(Console(file=out, width=width, no_color=True, highlight=False))
    return [line.rstrip() for line in out.getvalue().split("\n")]


def test_list_docs_each_patch_its_paragraphs_and_where_it_looks(stand_ins: None) -> None:
    assert rendered() == [
        "",
        "gate: widen the gate",
        "  Widen the gate with SM12x.",
        "",
        "  Why: the gate reads flags.",
        "",
        "  where it looks:",
        "    sglang/srt/layers/a.py: function fuse, 0.5.8 - now",
        "    sglang/srt/layers/a.py: method Fn.fuse, 0.5.4 - 0.5.7 — operands swapped",
        "    sglang/srt/b.py: `_flag = ...`, 0.5.6 [not-needed]",
        "    sglang/srt/c.py: function resolve, 0.5.14 - now — helper spelling",
        "",
        "import: import the probe",
        "  Import it.",
        "",
        "  where it looks:",
        "    sglang/srt/a.py: `from sglang.srt.utils import is_sm100_supported`, 0.5.4 - now",
        "",
    ]


def test_list_docs_wraps_paragraphs_to_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    long = StandInPatch("p", "s", " ".join(["word"] * 30), ())
    monkeypatch.setattr(registry, "all_patches", lambda: [long])
    lines = rendered(width=40)
    assert lines[2:6] == ["  " + " ".join(["word"] * 7)] * 4 and lines[6] == "  word word"


@pytest.fixture
def colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """A colour terminal as rich sees one: FORCE_COLOR, an xterm (8 colours), NO_COLOR unset."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("COLORTERM", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm")


def test_list_docs_in_colour_each_patch_and_where_it_looks_in_bold(stand_ins: None, colour: None) -> None:
    out = io.StringIO()
    render_docs(Console(file=out, width=100, highlight=False))
    lines = out.getvalue().split("\n")
    bold, reset = "\x1b[1m", "\x1b[0m"
    assert [line for line in lines if bold in line] == [
        f"{bold}gate: widen the gate{reset}",
        f"{bold}  where it looks:{reset}",
        f"{bold}import: import the probe{reset}",
        f"{bold}  where it looks:{reset}",
    ]
    assert "  Widen the gate with SM12x." + " " * 72 in lines  # the paragraphs stay plain


def test_list_docs_fills_each_line_to_the_terminals_last_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 54 columns a 52-character paragraph line (indented 2) and a 50-character anchor row
    (indented 4) fit exactly: nothing is kept free on the right."""
    patch = StandInPatch(
        "p",
        "s",
        "The gate reads the flags once, at import: the probes set them.",
        (Anchor("srt/layers/a.py", "fuse", Releases("0.5.8")),),
    )
    monkeypatch.setattr(registry, "all_patches", lambda: [patch])
    out = io.StringIO()
    render_docs(Console(file=out, width=54, no_color=True, highlight=False))
    assert out.getvalue().split("\n") == [
        "",
        "p: s",
        "  The gate reads the flags once, at import: the probes",
        "  set them." + " " * 43,
        " " * 54,
        "  where it looks:",
        "    sglang/srt/layers/a.py: function fuse, 0.5.8 - now",
        "",
    ]
