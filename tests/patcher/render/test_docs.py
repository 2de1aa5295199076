"""The patches' own documentation as users read it: README's "What it changes" table and
``sm120patch list --docs``, made from each patch's docstring and anchor table."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from sm120patch.patcher.kit.model import Anchor, Edit, Kind, Releases, Role, State
from sm120patch.patcher.plan import registry
from sm120patch.patcher.render.docs import patch_table_markdown, plain, render_docs, render_known_gates

README = Path(__file__).resolve().parents[3] / "README.md"


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


def rendered(width: int = 100, terminal: bool = False) -> list[str]:
    out = io.StringIO()
    render_docs(Console(file=out, width=width, force_terminal=terminal, color_system=None, highlight=False))
    return out.getvalue().split("\n")


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
    lines = rendered(width=40, terminal=True)
    assert lines[2:6] == ["  " + " ".join(["word"] * 7)] * 4 and lines[6] == "  word word"


def test_list_docs_piped_keeps_each_paragraph_and_row_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe or a log (for grep): one line per paragraph and per row, whatever the width."""
    long = StandInPatch(
        "p", "s", " ".join(["word"] * 30), (Anchor("srt/layers/" + "a" * 60 + ".py", "fuse", Releases("0.5.8")),)
    )
    monkeypatch.setattr(registry, "all_patches", lambda: [long])
    lines = rendered(width=40)
    assert lines[2] == "  " + " ".join(["word"] * 30)
    assert lines[5] == f"    sglang/srt/layers/{'a' * 60}.py: function fuse, 0.5.8 - now"
    assert all(line == line.rstrip() for line in lines)


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
    assert "  Widen the gate with SM12x." in lines  # the paragraphs stay plain, and unpadded


def test_list_docs_fills_each_line_to_the_terminals_last_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 54 columns a 52-character paragraph line (indented 2) and a 50-character anchor row
    (indented 4) fit exactly: nothing is kept free on the right, and no line is padded."""
    patch = StandInPatch(
        "p",
        "s",
        "The gate reads the flags once, at import: the probes set them.",
        (Anchor("srt/layers/a.py", "fuse", Releases("0.5.8")),),
    )
    monkeypatch.setattr(registry, "all_patches", lambda: [patch])
    out = io.StringIO()
    render_docs(Console(file=out, width=54, force_terminal=True, color_system=None, highlight=False))
    assert out.getvalue().split("\n") == [
        "",
        "p: s",
        "  The gate reads the flags once, at import: the probes",
        "  set them.",
        "",
        "  where it looks:",
        "    sglang/srt/layers/a.py: function fuse, 0.5.8 - now",
        "",
    ]


def test_list_docs_names_the_fused_path_and_each_known_gate_filling_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each row indented 4 and exactly as wide as the terminal: nothing kept free on the right,
    no blank line between rows; a known gate with every architecture it may name."""
    from sm120patch.sglang import fusion_path

    known = fusion_path.KnownGate(
        "an SM100-only backend",
        "srt/x.py",
        "pick",
        frozenset({"sm90", "sm100"}),
        ("mnnvl",),
        "mnnvl needs NVLink",
        "0.5.19 - now",
    )
    gate_row = "an SM100-only backend: sglang/srt/x.py: pick (sm100, sm90), 0.5.19 - now — mnnvl needs NVLink"
    path_row = "allreduce: the function names the allreduce fusion: its gate, the fused call and its backends"
    assert len(path_row) == len(gate_row)  # one terminal width fits both exactly
    monkeypatch.setattr(fusion_path, "ON_PATH", (fusion_path.OnPath(re.compile("allreduce"), path_row[11:]),))
    monkeypatch.setattr(fusion_path, "KNOWN_GATES", (known,))
    out = io.StringIO()
    render_known_gates(
        Console(file=out, width=len(gate_row) + 4, force_terminal=True, color_system=None, highlight=False)
    )
    assert out.getvalue().split("\n") == [
        "",
        "the sweep of SM checks: on the fused path are",
        f"    {path_row}",
        "  known and deliberate, never reported:",
        f"    {gate_row}",
        "",
    ]


def test_list_docs_in_colour_the_fused_path_headings_in_bold(colour: None) -> None:
    out = io.StringIO()
    render_known_gates(Console(file=out, width=100, highlight=False))
    bold, reset = "\x1b[1m", "\x1b[0m"
    assert [line for line in out.getvalue().split("\n") if bold in line] == [
        f"{bold}the sweep of SM checks: on the fused path are{reset}",
        f"{bold}  known and deliberate, never reported:{reset}",
    ]


@dataclass
class StandInWithRole(StandInPatch):
    """A stand-in that also says what its target does, to find it where no row matches."""

    role: Role | None = None


ROLES = [
    StandInWithRole("gate", "g", "G.", (), role=Role("the function that gates the fusion")),
    StandInWithRole("flag", "f", "F.", (), role=Role("the flag the gate reads", follows="gate")),
]


def test_list_docs_says_by_what_role_each_patch_is_found_and_whose_target_it_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "all_patches", lambda: ROLES)
    assert [line for line in rendered() if "by role" in line] == [
        "  where no row matches, by role: the function that gates the fusion",
        "  where no row matches, by role: the flag the gate reads, followed from gate's target",
    ]


def test_list_docs_in_colour_the_role_line_in_bold(monkeypatch: pytest.MonkeyPatch, colour: None) -> None:
    monkeypatch.setattr(registry, "all_patches", lambda: ROLES[:1])
    out = io.StringIO()
    render_docs(Console(file=out, width=100, highlight=False))
    assert "  \x1b[1mwhere no row matches, by role: the function that gates the fusion\x1b[0m" in out.getvalue()
