"""What people read on stderr: the patch report of apply / verify / revert / list, verify
--runtime's imports, doctor's findings, errors, the diff and the status line, line by line and
colour by colour.

The reports are built by hand (``PatchReport``, ``Plan``, ``Outcome``), so each shape the
commands can produce is rendered without running a command; rich renders them as on a
200-column terminal without colour, or (the ``colour`` fixture) as on an 8-colour one.
"""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120patch.doctor.findings import DoctorReport, HostFinding, Severity
from sm120patch.doctor.render import render_doctor
from sm120patch.errors import ExitCode
from sm120patch.output import console
from sm120patch.output.console import StatusLine
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.outcome import Command, FileStatus, Outcome, Recorded
from sm120patch.patcher.plan.types import Evidence, FilePlan, PatchReport, Plan
from sm120patch.patcher.render.as_text import print_diff, render
from sm120patch.patcher.runtime import ModuleImport, RuntimeCheck, SglangImport, Sm120Probe, TorchImport
from sm120patch.sglang.tree import InstallKind, SglangTree, from_directory

PACKAGE = Path("/site/sglang")
HEADER = "sglang 0.5.11  /site/sglang  [wheel]"
NO_METADATA = "no install metadata (not installed from a wheel)"


@pytest.fixture(autouse=True)
def wide_plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr as rich sees a terminal, where lines wrap to COLUMNS (piped, each is whole)."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")


def layout(err: str) -> str:
    """What was printed, without the bold and dim a terminal gets even under NO_COLOR."""
    return re.sub(r"\x1b\[[0-9;]*m", "", err) if os.environ.get("TTY_COMPATIBLE") == "1" else err


@pytest.fixture
def colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """A colour terminal as rich sees one: FORCE_COLOR, an xterm (8 colours), NO_COLOR unset."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("COLORTERM", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm")


def a_tree(version: str | None = "0.5.11", kind: InstallKind = InstallKind.WHEEL, **more: Any) -> SglangTree:
    """A tree that exists only as these facts (nothing on disk is read to render it)."""
    return SglangTree(more.pop("package_dir", PACKAGE), version, kind, more.pop("dist_info", None), "a test", **more)


def a_report(
    ident: str,
    file: str,
    state: State,
    detail: str = "",
    after: State | None = None,
    evidence: tuple[Evidence, ...] = (),
    summary: str = "",
) -> PatchReport:
    return PatchReport(ident, summary, (), file, state, detail, evidence=list(evidence), state_after=after)


def an_outcome(
    command: Command = Command.LIST,
    reports: tuple[PatchReport, ...] | None = None,
    tree: SglangTree | None = None,
    code: int = ExitCode.OK,
    headline: str = "done",
    **more: Any,
) -> Outcome:
    tree = tree or a_tree()
    plan = None
    if reports is not None:
        files: dict[str, list[PatchReport]] = {}
        for r in reports:  # files in the order their first report comes, as given
            files.setdefault(r.file, []).append(r)
        plan = Plan(tree, [FilePlan(rel, tree.path(rel), b"", reports=group) for rel, group in files.items()])
    return Outcome(command, tree, ExitCode(code), headline, plan, **more)


def shown(capsys: pytest.CaptureFixture[str], outcome: Outcome, **options: bool) -> list[str]:
    """``render``'s stderr, line by line, without the padding at the ends of lines."""
    render(outcome, **options)
    return [line.rstrip() for line in layout(capsys.readouterr().err).splitlines()]


# --- the header ----------------------------------------------------------------------------


def test_header_names_release_location_and_install_kind_then_the_headline(capsys: pytest.CaptureFixture[str]) -> None:
    assert shown(capsys, an_outcome(headline="nothing to do")) == [HEADER, "nothing to do"]


def test_a_tree_of_unknown_version_or_a_bare_directory(capsys: pytest.CaptureFixture[str]) -> None:
    tree = a_tree(None, InstallKind.PATH, package_dir=Path("/opt/\x1b[2Jsrc/sglang"))
    assert shown(capsys, an_outcome(tree=tree)) == ["sglang (unknown version)  /opt/\\x1b[2Jsrc/sglang  [path]", "done"]
    assert shown(capsys, an_outcome(tree=a_tree("0.5\x07"))) == ["sglang 0.5\\x07  /site/sglang  [wheel]", "done"]


def test_an_editable_install_warns_that_the_checkout_is_edited(capsys: pytest.CaptureFixture[str]) -> None:
    assert shown(capsys, an_outcome(tree=a_tree(kind=InstallKind.EDITABLE))) == [
        "sglang 0.5.11  /site/sglang  [editable]",
        "note: editable install: this edits your sglang checkout",
        "done",
    ]


# --- the patch tables ----------------------------------------------------------------------


def test_one_table_per_file_in_path_order_columns_aligned_across_files(capsys: pytest.CaptureFixture[str]) -> None:
    reports = (
        a_report("longer-id", "srt/b.py", State.PENDING, "will widen \x1b[31m", after=State.APPLIED),
        a_report("c", "srt/b.py", State.DRIFT, "the gate moved"),
        a_report("aa", "srt/a.py", State.NOT_NEEDED, "nothing to do", after=State.NOT_NEEDED),
        a_report("s", "srt/c.py", State.SKIPPED, "left out", after=None),
    )
    assert shown(capsys, an_outcome(reports=reports)) == [
        HEADER,
        "sglang/srt/a.py",
        "  aa          not-needed           nothing to do",
        "sglang/srt/b.py",
        "  longer-id   pending -> applied   will widen \\x1b[31m",
        "  c           drift                the gate moved",
        "sglang/srt/c.py",
        "  s           skipped              left out",
        "done",
    ]


def test_a_dry_run_says_would_apply(capsys: pytest.CaptureFixture[str]) -> None:
    reports = (
        a_report("gate", "srt/a.py", State.PENDING, "will widen", after=State.APPLIED),
        a_report("flag", "srt/a.py", State.APPLIED, "there", after=State.APPLIED),
    )
    assert shown(capsys, an_outcome(reports=reports), dry_run=True)[1:4] == [
        "sglang/srt/a.py",
        "  gate   pending, would apply   will widen",
        "  flag   applied                there",
    ]


def test_cells_are_shown_as_they_are_not_read_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    """sglang's code and the patches' details hold brackets (``sizes[i]``); a closing
    ``[/x]`` once made rich raise (exit 70)."""
    reports = (
        a_report(
            "gate[i]",
            "srt/a.py",
            State.PENDING,
            "sizes[i] and [bold]x[/bold] [/x]",
            evidence=(Evidence(4, "x = sizes[i] [/y]"),),
        ),
    )
    assert shown(capsys, an_outcome(Command.VERIFY, reports=reports))[2:6] == [
        "  gate[i]   pending   sizes[i] and [bold]x[/bold] [/x]",
        "evidence:",
        "  sglang/srt/a.py",
        "    4     x = sizes[i] [/y]",
    ]


def test_list_docs_shows_each_summary_and_prints_the_docs_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    reports = (a_report("gate", "srt/a.py", State.PENDING, "the detail \x1b", summary="widen the gate"),)
    render(an_outcome(reports=reports), show_docs=True)
    captured = capsys.readouterr()
    assert [line.rstrip() for line in captured.err.splitlines()] == [
        HEADER,
        "sglang/srt/a.py",
        "  gate   pending   widen the gate",
        "done",
    ]
    out = captured.out.splitlines()
    assert out[:2] == [
        "",
        "communicator-import: import is_sm120_supported next to is_sm100_supported in the fusion-gate module",
    ]
    assert "  where it looks:" in out


@pytest.mark.usefixtures("terminal")
def test_a_detail_word_longer_than_the_terminal_is_whole_on_its_own_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A name is never split: one wider than the detail column puts the details under their
    patches, and one wider than the terminal is a line of its own, whole, for the terminal to
    wrap (what is copied from it is the name)."""
    detail = "".join(f"{n:03d}" for n in range(100))  # 300 characters, no space to wrap at
    lines = shown(capsys, an_outcome(reports=(a_report("gate", "srt/a.py", State.PENDING, detail),)))[2:-1]
    assert lines == ["  gate  pending", detail]


@pytest.mark.usefixtures("terminal")
def test_where_the_detail_has_room_it_is_a_third_column(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "75")  # 24 + 18 + 9 of padding leave the detail its 24 columns
    reports = (a_report("communicator-fusion-gate", "srt/a.py", State.PENDING, "will widen " * 8, after=State.APPLIED),)
    lines = shown(capsys, an_outcome(reports=reports))[2:-1]
    assert lines[0].startswith("  communicator-fusion-gate   pending -> applied   will")
    assert all(line.startswith(" " * 49) for line in lines[1:])
    assert " ".join(" ".join(line.split()) for line in lines).count("will widen") == 8


@pytest.mark.parametrize("columns", [74, 60, 40])
@pytest.mark.usefixtures("terminal")
def test_on_a_narrow_terminal_the_detail_goes_under_its_patch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    """Below the width that leaves the detail 24 columns, the id and state make one line and the
    detail wraps under it: nothing is cropped, however narrow the terminal."""
    monkeypatch.setenv("COLUMNS", str(columns))
    detail = "apply_flashinfer_allreduce_fusion: will widen (_is_sm90_supported or _is_sm100_supported)"
    reports = (
        a_report("communicator-fusion-gate", "srt/a.py", State.PENDING, detail, after=State.APPLIED),
        a_report("communicator-flag", "srt/a.py", State.APPLIED, "_is_sm120_supported is assigned"),
    )
    lines = shown(capsys, an_outcome(reports=reports))[2:-1]
    assert all(len(line) <= columns for line in lines)
    first_detail = next(i for i, line in enumerate(lines) if line.startswith("    "))
    assert " ".join(line.strip() for line in lines[:first_detail]) == "communicator-fusion-gate  pending -> applied"
    gate_detail = lines[first_detail : lines.index("  communicator-flag  applied")]
    assert all(line.startswith("    ") for line in gate_detail)
    assert " ".join(line.strip() for line in gate_detail) == detail
    assert lines[-1] == "    _is_sm120_supported is assigned"


@pytest.mark.usefixtures("terminal")
def test_a_detail_word_wider_than_its_column_puts_every_detail_under_its_patch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long id in one file widens the id column of every file; where a word of a detail
    (an identifier, a path) is then wider than the detail column, every detail goes under its
    patch, where the word fits whole: no name is split across lines."""
    monkeypatch.setenv("COLUMNS", "120")
    ident = "sm120-" + "x" * 49
    digits = "".join(f"{n:03d}" for n in range(30))
    reports = (
        a_report("gate", "srt/a.py", State.PENDING, "will widen " * 4 + digits),
        a_report(ident, "srt/b.py", State.SKIPPED, "left out"),
    )
    assert shown(capsys, an_outcome(reports=reports))[1:-1] == [
        "sglang/srt/a.py",
        "  gate  pending",
        "    will widen will widen will widen will widen",
        "    " + digits,
        "sglang/srt/b.py",
        f"  {ident}  skipped",
        "    left out",
    ]


@pytest.mark.usefixtures("terminal")
def test_a_narrow_report_exactly_no_word_split_no_line_padded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stacked, byte for byte, on a terminal: an id wider than the terminal is whole on its
    own line, from the left edge; the detail wraps at spaces in the 26 columns right of its
    indent; no line ends in spaces.  Piped, each line is whole."""
    monkeypatch.setenv("COLUMNS", "30")
    reports = (
        a_report(
            "communicator-fusion-gate-and-flag",
            "srt/a.py",
            State.PENDING,
            "widens the gate for sm120a and sets the flag",
            after=State.APPLIED,
        ),
        a_report("flag", "srt/a.py", State.APPLIED, "set"),
    )
    render(an_outcome(reports=reports))
    assert layout(capsys.readouterr().err) == (
        "sglang 0.5.11  /site/sglang\n"
        "[wheel]\n"
        "sglang/srt/a.py\n"
        "communicator-fusion-gate-and-flag\n"
        "  pending -> applied\n"
        "    widens the gate for sm120a\n"
        "    and sets the flag\n"
        "  flag  applied\n"
        "    set\n"
        "done\n"
    )
    monkeypatch.delenv("TTY_COMPATIBLE")  # piped: the same report, each line whole
    render(an_outcome(reports=reports))
    assert capsys.readouterr().err.splitlines()[2:5] == [
        "  communicator-fusion-gate-and-flag  pending -> applied",
        "    widens the gate for sm120a and sets the flag",
        "  flag  applied",
    ]


# --- evidence --------------------------------------------------------------------------------


EVIDENCE = (
    a_report("gate", "srt/b.py", State.APPLIED, "ok", evidence=(Evidence(120, "  x = 1  "), Evidence(7, "y \x1b"))),
    a_report("flag", "srt/b.py", State.APPLIED, "ok", evidence=(Evidence(7, "y \x1b"),)),  # the same line again
    a_report("import", "srt/a.py", State.APPLIED, "ok", evidence=(Evidence(3, "import z"),)),
)
EVIDENCE_LINES = [
    "  sglang/srt/a.py",
    "    3     import z",
    "  sglang/srt/b.py",
    "      7     y \\x1b",
    "    120     x = 1",
]


@pytest.mark.parametrize("command", [Command.VERIFY, Command.APPLY])
def test_evidence_per_file_then_by_line_each_line_once(capsys: pytest.CaptureFixture[str], command: Command) -> None:
    lines = shown(capsys, an_outcome(command, reports=EVIDENCE))
    at = lines.index("evidence:")
    assert lines[at + 1 :] == [*EVIDENCE_LINES, "done"]


@pytest.mark.parametrize(
    ("command", "options"),
    [(Command.LIST, {}), (Command.REVERT, {}), (Command.VERIFY, {"brief": True}), (Command.APPLY, {"brief": True})],
    ids=["list", "revert", "verify --brief", "apply --brief"],
)
def test_evidence_only_in_verify_and_apply_and_not_in_the_demo(
    capsys: pytest.CaptureFixture[str], command: Command, options: dict[str, bool]
) -> None:
    lines = shown(capsys, an_outcome(command, reports=EVIDENCE), **options)
    assert not any(line.startswith("evidence") for line in lines)
    assert "    3     import z" not in lines


def test_a_long_evidence_word_is_whole_after_its_line_number(capsys: pytest.CaptureFixture[str]) -> None:
    code = "".join(f"{n:03d}" for n in range(100))  # 300 characters, no space to wrap at
    reports = (a_report("gate", "srt/a.py", State.APPLIED, evidence=(Evidence(7, code),)),)
    lines = shown(capsys, an_outcome(Command.VERIFY, reports=reports))
    at = lines.index("  sglang/srt/a.py", lines.index("evidence:"))
    assert lines[at + 1 : at + 3] == ["    7     " + code, "done"]


def test_on_a_tiny_terminal_the_evidence_line_number_stays_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """However narrow, the line number is never split, and the code keeps 20 columns (the
    terminal wraps the line): no word of it is split either."""
    monkeypatch.setenv("COLUMNS", "16")
    reports = (a_report("g", "srt/a.py", State.APPLIED, "ok", evidence=(Evidence(12345, "x = 1"),)),)
    lines = shown(capsys, an_outcome(Command.VERIFY, reports=reports))
    assert lines[lines.index("evidence:") + 2 : -1] == ["    12345     x = 1"]


def test_no_evidence_no_heading(capsys: pytest.CaptureFixture[str]) -> None:
    lines = shown(capsys, an_outcome(Command.VERIFY, reports=(a_report("gate", "srt/a.py", State.PENDING),)))
    assert lines == [HEADER, "sglang/srt/a.py", "  gate   pending", "done"]


def test_evidence_of_a_change_not_written_is_what_apply_would_write(capsys: pytest.CaptureFixture[str]) -> None:
    planned = (a_report("gate", "srt/a.py", State.PENDING, after=State.APPLIED, evidence=(Evidence(3, "x"),)),)
    lines = shown(capsys, an_outcome(Command.APPLY, reports=planned))
    assert "evidence, as apply would write it:" in lines and "evidence:" not in lines
    lines = shown(capsys, an_outcome(Command.APPLY, reports=planned, written=["srt/a.py"]))
    assert "evidence:" in lines and "evidence, as apply would write it:" not in lines
    unchanged = (
        a_report("gate", "srt/a.py", State.APPLIED, after=State.APPLIED, evidence=(Evidence(3, "x"),)),
        a_report("flag", "srt/a.py", State.APPLIED, after=None, evidence=(Evidence(4, "y"),)),
    )
    lines = shown(capsys, an_outcome(Command.APPLY, reports=unchanged))
    assert "evidence:" in lines and "evidence, as apply would write it:" not in lines


# --- files ---------------------------------------------------------------------------------


FILES = [
    FileStatus("srt/c.py", "h1", "h2", Recorded.PATCHED),
    FileStatus("srt/a.py", "h", "h", None),
    FileStatus("srt/b.py", "h", None, Recorded.ORIGINAL),
]


@pytest.mark.parametrize("command", [Command.VERIFY, Command.REVERT])
def test_each_file_against_the_release_and_the_saved_state(
    capsys: pytest.CaptureFixture[str], command: Command
) -> None:
    assert shown(capsys, an_outcome(command, files=FILES)) == [
        HEADER,
        "  sglang/srt/a.py: matches the release (RECORD)",
        f"  sglang/srt/b.py: no RECORD hash ({NO_METADATA}), original per saved state",
        "  sglang/srt/c.py: differs from the release, patched per saved state",
        "done",
    ]


def test_a_file_line_as_wide_as_the_terminal_stays_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    line = "  sglang/srt/a.py: matches the release (RECORD)"
    monkeypatch.setenv("COLUMNS", str(len(line)))  # the indent, then every column to the edge
    assert shown(capsys, an_outcome(Command.VERIFY, files=[FileStatus("srt/a.py", "h", "h", None)])) == [
        HEADER,
        line,
        "done",
    ]


@pytest.mark.parametrize(
    ("command", "options"),
    [(Command.APPLY, {}), (Command.LIST, {}), (Command.VERIFY, {"brief": True})],
    ids=["apply", "list", "verify --brief"],
)
def test_files_only_in_verify_and_revert_and_not_in_the_demo(
    capsys: pytest.CaptureFixture[str], command: Command, options: dict[str, bool]
) -> None:
    assert shown(capsys, an_outcome(command, files=FILES), **options) == [HEADER, "done"]


def test_a_file_the_record_does_not_list(capsys: pytest.CaptureFixture[str], mini: Path) -> None:
    tree = from_directory(mini)  # the miniature release: a RECORD that reads
    assert tree.record.problem is None
    lines = shown(capsys, an_outcome(Command.VERIFY, tree=tree, files=[FileStatus("srt/x.py", "h", None, None)]))
    assert lines[1:] == ["  sglang/srt/x.py: no RECORD entry", "done"]


def test_why_the_record_is_off_is_shown_spelled_out(capsys: pytest.CaptureFixture[str]) -> None:
    tree = a_tree(dist_info=Path("/gone/\x1b]0;x\x07sglang.dist-info"))
    lines = shown(capsys, an_outcome(Command.VERIFY, tree=tree, files=[FileStatus("srt/x.py", "h", None, None)]))
    assert lines[1].startswith(
        "  sglang/srt/x.py: no RECORD hash (cannot read /gone/\\x1b]0;x\\x07sglang.dist-info/RECORD ("
    )
    assert "\x1b" not in "".join(lines)


# --- notes, warnings, headline -------------------------------------------------------------


def test_notes_then_warnings_each_once_then_the_headline(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = an_outcome(
        notes=["first", "second \x1b", "first"],
        warnings=["w1", "w2 \x07", "w1"],
        headline="head \x1b[0m",
        code=ExitCode.NOT_AS_ASKED,
    )
    assert shown(capsys, outcome) == [
        HEADER,
        "first",
        "second \\x1b",
        "warning: w1",
        "warning: w2 \\x07",
        "[not-as-asked] head \\x1b[0m",  # the stable code of an outcome not as asked first
    ]


# --- verify --runtime ----------------------------------------------------------------------

TORCH = TorchImport(True, "2.9.0", "12.9", (12, 0), "RTX PRO 6000")
SGLANG = SglangImport(True)
LONG = "x" * 250  # longer than the terminal: such lines are not wrapped (soft wrap)


def runtime_lines(capsys: pytest.CaptureFixture[str], check: RuntimeCheck) -> list[str]:
    return shown(capsys, an_outcome(Command.VERIFY, runtime=check))[1:-1]


def a_check(torch: TorchImport | None = TORCH, sglang: SglangImport | None = SGLANG, **more: Any) -> RuntimeCheck:
    return RuntimeCheck(
        more.get("python", "/env/bin/python"), torch, sglang, more.get("probe"), more.get("modules", ()), 0
    )


def test_runtime_imports_probe_and_each_module_flags(capsys: pytest.CaptureFixture[str]) -> None:
    modules = (
        ModuleImport(
            "sglang.srt.layers.communicator", True, {"_is_sm120_supported": True, "_is_sm100_supported": False}
        ),
        ModuleImport("sglang.srt.server_args", True, {}),
        ModuleImport("sglang.srt.layers.flashinfer_comm_fusion", False, error="ImportError: no \x1b"),
    )
    probe = Sm120Probe(True, "is_sm120_supported()", True)
    assert runtime_lines(capsys, a_check(probe=probe, modules=modules)) == [
        "runtime (/env/bin/python):",
        "  torch 2.9.0 (CUDA 12.9), RTX PRO 6000 (cc 12.0)",
        "  is_sm120_supported() = True",
        "  sglang.srt.layers.communicator: imports; _is_sm120_supported=True _is_sm100_supported=False",
        "  sglang.srt.server_args: imports; (no cached SM flags)",
        "  sglang.srt.layers.flashinfer_comm_fusion: ImportError: no \\x1b",
    ]


def test_runtime_without_a_gpu_and_a_failed_probe(capsys: pytest.CaptureFixture[str]) -> None:
    torch = TorchImport(True, "2.9.0+cpu", None, None, None)
    assert runtime_lines(capsys, a_check(torch, probe=Sm120Probe(False, error="NameError: x"))) == [
        "runtime (/env/bin/python):",
        "  torch 2.9.0+cpu (CUDA None), no CUDA GPU visible",
        "  SM120 probe failed: NameError: x",
    ]
    assert runtime_lines(capsys, a_check(torch, probe=None))[-1] == "  SM120 probe failed: None"


def test_runtime_stops_at_the_first_import_that_fails(capsys: pytest.CaptureFixture[str]) -> None:
    probe, modules = Sm120Probe(True, "p", True), (ModuleImport("m", True),)
    assert runtime_lines(capsys, a_check(TorchImport(False, error="No module named 'torch'"), probe=probe)) == [
        "runtime (/env/bin/python):",
        "  torch: No module named 'torch'",
    ]
    assert runtime_lines(capsys, a_check(None, python=None, probe=probe)) == ["runtime (None):", "  torch: None"]
    assert runtime_lines(capsys, a_check(sglang=SglangImport(False, "boom \x1b"), probe=probe, modules=modules))[
        2:
    ] == ["  import sglang: boom \\x1b"]
    assert runtime_lines(capsys, a_check(sglang=None, probe=probe, modules=modules))[2:] == ["  import sglang: None"]


def test_long_runtime_lines_are_not_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    """Each is one line a user can copy (an error, a module's flags), however wide."""
    torch = TorchImport(True, LONG, "12.9", None, None)
    modules = (ModuleImport("ok", True, {LONG: True}), ModuleImport("bad", False, error=LONG))
    lines = runtime_lines(capsys, a_check(torch, probe=Sm120Probe(False, error=LONG), modules=modules))
    assert lines == [
        "runtime (/env/bin/python):",
        f"  torch {LONG} (CUDA 12.9), no CUDA GPU visible",
        f"  SM120 probe failed: {LONG}",
        f"  ok: imports; {LONG}=True",
        f"  bad: {LONG}",
    ]
    assert runtime_lines(capsys, a_check(TorchImport(False, error=LONG)))[1:] == [f"  torch: {LONG}"]
    assert runtime_lines(capsys, a_check(sglang=SglangImport(False, LONG)))[2:] == [f"  import sglang: {LONG}"]
    probe = Sm120Probe(True, f"get_platform().{LONG}", True)  # the answer stays beside the question
    assert runtime_lines(capsys, a_check(probe=probe))[2:] == [f"  get_platform().{LONG} = True"]


# --- colours -------------------------------------------------------------------------------


def test_each_state_has_its_colour(capsys: pytest.CaptureFixture[str], colour: None) -> None:
    reports = (
        a_report("a", "srt/a.py", State.PENDING, after=State.APPLIED),
        a_report("b", "srt/a.py", State.NOT_NEEDED),
        a_report("c", "srt/a.py", State.PENDING),
        a_report("d", "srt/a.py", State.DRIFT),
        a_report("e", "srt/a.py", State.REFUSED),
        a_report("f", "srt/a.py", State.SKIPPED),
    )
    err = "".join(shown(capsys, an_outcome(reports=reports)))
    for painted in (
        "\x1b[32mpending -> applied",
        "\x1b[36mnot-needed",
        "\x1b[33mpending\x1b[0m ",
        "\x1b[1;31mdrift\x1b[0m ",
        "\x1b[1;31mrefused\x1b[0m ",
        "\x1b[2mskipped\x1b[0m",
    ):
        assert painted in err


def test_the_rest_of_the_report_in_colour(capsys: pytest.CaptureFixture[str], colour: None) -> None:
    outcome = an_outcome(
        Command.VERIFY,
        reports=(a_report("gate", "srt/a.py", State.APPLIED, evidence=(Evidence(12, "x"),)),),
        tree=a_tree(kind=InstallKind.EDITABLE),
        files=[FileStatus("srt/a.py", "h", "h", None)],
        runtime=a_check(TorchImport(False, error="gone")),
        warnings=["careful"],
    )
    err = "\n".join(shown(capsys, outcome))
    for painted in (
        "\x1b[1msglang \x1b[0m\x1b[1m0.5.11\x1b[0m  /site/sglang  \x1b[2m[editable]\x1b[0m",
        "\x1b[33mnote: editable install: this edits your sglang checkout\x1b[0m",
        "\x1b[1msglang/srt/a.py\x1b[0m",
        "\x1b[1mevidence:\x1b[0m",
        "  \x1b[2msglang/srt/a.py\x1b[0m",
        "\x1b[2m12\x1b[0m",
        "\x1b[2msglang/srt/a.py: matches the release (RECORD)\x1b[0m",
        "\x1b[1mruntime (/env/bin/python):\x1b[0m",
        "  \x1b[31mtorch: gone\x1b[0m",
        "\x1b[1;33mwarning: \x1b[0m\x1b[33mcareful\x1b[0m",
        "\x1b[1;32mdone\x1b[0m",
    ):
        assert painted in err
    assert "\x1b[1;31m[not-as-asked] failed\x1b[0m" in "".join(
        shown(capsys, an_outcome(code=ExitCode.NOT_AS_ASKED, headline="failed"))
    )


def test_runtime_failures_in_red(capsys: pytest.CaptureFixture[str], colour: None) -> None:
    modules = (ModuleImport("good", True, {"f": True}), ModuleImport("bad", False, error="e"))
    err = "\n".join(shown(capsys, an_outcome(runtime=a_check(probe=Sm120Probe(False, error="p"), modules=modules))))
    assert "  \x1b[31mSM120 probe failed: p\x1b[0m" in err and "  \x1b[31mbad: e\x1b[0m" in err
    assert "\n  good: imports; f=True\n" in err and "\n  torch 2.9.0 (CUDA 12.9), RTX PRO 6000 (cc 12.0)\n" in err
    err = "\n".join(shown(capsys, an_outcome(runtime=a_check(sglang=SglangImport(False, "s")))))
    assert "  \x1b[31mimport sglang: s\x1b[0m" in err
    err = "\n".join(shown(capsys, an_outcome(runtime=a_check(probe=Sm120Probe(True, "p", False)))))
    assert "\n  p = False\n" in err


# --- doctor --------------------------------------------------------------------------------


def doctor_lines(capsys: pytest.CaptureFixture[str], *findings: HostFinding) -> list[str]:
    render_doctor(DoctorReport(list(findings)))
    return layout(capsys.readouterr().err).splitlines()


def test_doctor_one_block_per_finding_under_its_severity(capsys: pytest.CaptureFixture[str]) -> None:
    lines = doctor_lines(
        capsys,
        HostFinding("gpus", Severity.OK, "2 SM12x GPUs"),
        HostFinding("kernel", Severity.ERROR, "no kernel \x1b", "upgrade FlashInfer", "flashinfer/jit/comm.py \x07"),
        HostFinding("p2p", Severity.WARNING, "no P2P", source="nvidia-smi topo -m"),
        HostFinding("pin", Severity.INFO, "pinned", detail="0.6.16"),
    )
    assert lines == [
        "ok      gpus: 2 SM12x GPUs",
        "error   kernel: no kernel \\x1b",
        "        upgrade FlashInfer",
        "        from: flashinfer/jit/comm.py \\x07",
        "warning p2p: no P2P",
        "        from: nvidia-smi topo -m",
        "info    pin: pinned",
        "        0.6.16",
        "1 error stands between this host and the fused allreduce: kernel",
    ]


@pytest.mark.usefixtures("terminal")
def test_doctor_wraps_at_words_inside_the_indent_with_no_trailing_space(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    detail = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    lines = doctor_lines(capsys, HostFinding("x", Severity.WARNING, "s", detail, "/" + "p" * 40))
    assert lines == [
        "warning x: s",
        "        alpha beta gamma delta epsilon",
        "        zeta eta theta iota kappa",
        "        from:",
        "/" + "p" * 40,  # a word wider than the column: whole, from the left edge
        "no blocking error; 1 warning to read",
    ]


@pytest.mark.usefixtures("terminal")
def test_doctor_keeps_twenty_columns_on_a_tiny_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under 28 columns each line is wider than the terminal, which wraps it: no word is cut."""
    monkeypatch.setenv("COLUMNS", "24")
    lines = doctor_lines(
        capsys, HostFinding("x", Severity.INFO, "s", "alpha beta gamma delta epsilon zeta " + "a" * 45)
    )
    assert lines[1:4] == [
        "        alpha beta gamma",
        "        delta epsilon zeta",
        "a" * 45,
    ]


def test_doctor_in_colour(capsys: pytest.CaptureFixture[str], colour: None) -> None:
    err = "\n".join(
        doctor_lines(
            capsys,
            HostFinding("a", Severity.OK, "s", source="src"),
            HostFinding("b", Severity.INFO, "s"),
            HostFinding("c", Severity.WARNING, "s"),
        )
    )
    for painted in (
        "\x1b[32mok      \x1b[0m\x1b[1ma\x1b[0m: s",
        "        \x1b[2mfrom: src\x1b[0m",
        "\x1b[36minfo    \x1b[0m\x1b[1mb\x1b[0m: s",
        "\x1b[33mwarning \x1b[0m\x1b[1mc\x1b[0m: s",
        "\x1b[1;32mno blocking error; 1 warning to read\x1b[0m",
    ):
        assert painted in err
    err = "\n".join(doctor_lines(capsys, HostFinding("d", Severity.ERROR, "s")))
    assert "\x1b[1;31merror   \x1b[0m" in err
    assert "\x1b[1;31m1 error stands between this host and the fused allreduce: d\x1b[0m" in err


# --- errors, the diff, the status line -----------------------------------------------------


def test_an_error_is_one_line_however_long_and_spelled_out(capsys: pytest.CaptureFixture[str]) -> None:
    console.error(f"cannot write {LONG} \x1b[31m")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"error: cannot write {LONG} \\x1b[31m\n"


def test_an_error_in_colour(capsys: pytest.CaptureFixture[str], colour: None) -> None:
    console.error("no")
    assert capsys.readouterr().err == "\x1b[1;31merror: \x1b[0mno\n"


class Terminal(io.StringIO):
    """A stand-in for stdout on a terminal: a StringIO that says it is a tty."""

    def isatty(self) -> bool:
        return True


DIFF = "--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n"


def test_a_piped_diff_is_written_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    print_diff(DIFF)
    assert capsys.readouterr().out == DIFF


def test_no_diff_prints_nothing_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch, colour: None) -> None:
    monkeypatch.setattr(sys, "stdout", Terminal())
    print_diff("")
    assert sys.stdout.getvalue() == ""


def test_a_diff_on_a_terminal_is_highlighted_in_the_terminals_colours(
    monkeypatch: pytest.MonkeyPatch, colour: None
) -> None:
    monkeypatch.setattr(sys, "stdout", Terminal())
    print_diff(DIFF)
    out = sys.stdout.getvalue()
    # ansi_dark: the terminal's own (bright) green and red, on its default background
    assert "\x1b[92;49m+new\x1b[0m\n" in out and "\x1b[91;49m-old\x1b[0m\n" in out
    assert "\x1b[49mkeep\x1b[0m\n" in out


class StandInStatus:
    """A stand-in for rich's Status: records what the status line was asked to do."""

    def __init__(self, text: object, calls: list[tuple[str, object]]) -> None:
        self.calls = calls
        calls.append(("status", str(text)))

    def __enter__(self) -> StandInStatus:
        self.calls.append(("enter", None))
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls.append(("exit", exc))

    def update(self, text: object) -> None:
        self.calls.append(("update", str(text)))


class StandInConsole:
    """A stand-in for ``console.console()`` whose ``status`` is a ``StandInStatus``."""

    width = 80

    def __init__(self, calls: list[tuple[str, object]]) -> None:
        self.calls = calls

    def status(self, text: object) -> StandInStatus:
        return StandInStatus(text, self.calls)


def test_a_status_line_shows_the_first_text_then_each_update(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(console, "console", lambda: StandInConsole(calls))
    with StatusLine(True, "asking for GPUs") as status:
        status.update("measuring tokens=1 (1/3)")
    assert calls == [
        ("status", "asking for GPUs"),
        ("enter", None),
        ("update", "measuring tokens=1 (1/3)"),
        ("exit", (None, None, None)),
    ]


def test_no_status_line_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(console, "console", lambda: StandInConsole(calls))
    with StatusLine(False, "asking for GPUs") as status:
        status.update("measuring")
    assert calls == []


def test_the_console_writes_to_stderr_unhighlighted() -> None:
    out = console.console()
    assert out.file is sys.stderr
    assert out.render_str("0.5.11 at /tmp 'x'").spans == []  # no repr highlighting of numbers or paths
