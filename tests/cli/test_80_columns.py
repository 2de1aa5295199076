"""What each command prints in a real 80-column pseudo-terminal: no line wider than the
terminal but a single word wider than it (a path, whole, from the left edge), and no name of
the report split across lines: every patch id, file, path and word of a detail is whole in
the text, in order.  The tree sits in a deep folder, so that its paths are long."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sm120patch.cli import main
from tests.cli.test_demo_offline import mini_wheel
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, write_mini_sglang
from tests.support.terminal import assert_fits, in_terminal

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)

WIDTH = 80
DEEP = "a-folder-as-deep-as-a-conda-env/lib/python3.11/site-packages"


def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    # No nvidia-smi (a build host); the demo's scratch folder deep in the test's own.
    env.update(PATH=os.environ["PATH"], TERM="xterm-256color", TMPDIR=str(tmp_path / "tmp"))
    return env


def shown(args: list[str], env: dict[str, str]) -> tuple[str, list[str]]:
    """``sm120patch ARGS`` in the terminal: its text and its lines, checked to fit."""
    text = in_terminal([sys.executable, "-m", "sm120patch", *args], env, WIDTH)
    lines = text.splitlines()
    assert "Traceback" not in text and lines, text
    assert_fits(lines, WIDTH)
    assert not [line for line in lines if line != line.rstrip()]  # no padding to the width
    return text, lines


def words(text: str) -> str:
    return " ".join(text.split())


def assert_whole(text: str, *names: str) -> None:
    """Each of ``names`` (a sentence, an id, a path) is in ``text`` with its words whole and
    in order: a name split across lines would be two words there."""
    for name in names:
        assert f" {words(name)} " in f" {words(text)} ", name


@pytest.mark.parametrize("command", ["apply", "verify", "list", "doctor"])
def test_a_report_fits_and_no_name_of_it_is_split(tmp_path: Path, command: str) -> None:
    package = write_mini_sglang(tmp_path / DEEP)
    env = environment(tmp_path)
    # What the report holds, as JSON: apply's as it says on its twin (the same release, as
    # deep), list's and verify's as they find it.
    twin = write_mini_sglang(tmp_path / "twin" / DEEP) if command == "apply" else package
    _, expected = jrun("verify" if command == "doctor" else command, "--sglang-path", str(twin))
    text, lines = shown([command, "--sglang-path", str(package)], env)
    if command == "doctor":
        _, findings = jrun("doctor", "--sglang-path", str(package), env={"PATH": env["PATH"]})
        assert_whole(text, *(f[part] for f in findings["findings"] for part in ("summary", "detail") if f[part]))
        return
    assert_whole(text, str(package), *(p["id"] for p in expected["patches"]), *(p["file"] for p in expected["patches"]))
    assert_whole(text, *(p["detail"] for p in expected["patches"]), *expected["messages"])
    assert lines[0] == f"sglang 0.5.11  {package}  [wheel]" or lines[1] == str(package)
    if command != "list":  # list names the patches, not what keeps the fused path from running
        assert_whole(text, *expected["warnings"])


def test_the_demo_fits(tmp_path: Path) -> None:
    wheel = mini_wheel(tmp_path / DEEP)
    text, lines = shown(["demo", "--wheel", str(wheel)], environment(tmp_path))
    assert lines[0] == "sm120patch demo: sglang-0.5.11-py3-none-any.whl unpacked into"
    assert lines[1].startswith(str(tmp_path / "tmp" / "sm120patch-demo-"))  # the folder, whole
    assert "demo ok: sglang 0.5.11 patched" in words(text)
    assert_whole(text, "(pipx: add --python /path/to/env/bin/python).")


@pytest.mark.parametrize("args", [["--help"], *([command, "--help"] for command in sorted(main.commands))])
def test_help_fits(tmp_path: Path, args: list[str]) -> None:
    text, lines = shown(args, environment(tmp_path))
    assert lines[0].startswith("Usage: python -m sm120patch") and "-h, --help" in text


def test_sm120patch_alone_prints_its_help_as_help_does(tmp_path: Path) -> None:
    """With no command click's usage error is the help itself: laid out as ``--help`` lays it
    out, its indents kept, not re-wrapped as a sentence (on a terminal narrower than its lines)."""
    env = environment(tmp_path)
    alone, help_text = (in_terminal([sys.executable, "-m", "sm120patch", *args], env, 50) for args in ([], ["--help"]))
    assert alone.startswith("Usage: python -m sm120patch") and "\n  -h, --help" in alone
    assert alone == help_text


def test_each_error_fits_and_names_its_path_whole(tmp_path: Path) -> None:
    """An error, a refusal and a usage error, each a sentence longer than the terminal."""
    package = write_mini_sglang(tmp_path / DEEP)
    env = environment(tmp_path)
    not_sglang = tmp_path / DEEP / "not-sglang"
    not_sglang.mkdir()
    text, _ = shown(["verify", "--sglang-path", str(not_sglang)], env)
    assert_whole(
        text, f"error: [no-sglang] --sglang-path {not_sglang}: not an sglang package; pass the 'sglang' directory"
    )
    text, _ = shown(["list", "--python", sys.executable], {**env, "PYTHONPATH": ""})
    assert "error: [no-sglang] no sglang found in --python" in words(text) and "Searched sys.path:" in text
    text, _ = shown(["apply", "--sglang-path", str(package), "--python", sys.executable], env)
    assert_whole(text, "Error: give either --python or --sglang-path, not both")
    assert jrun("apply", "--sglang-path", str(package))[0] == 0
    with (package / COMM).open("a") as fh:
        fh.write("# edited by hand\n")
    text, _ = shown(["revert", "--sglang-path", str(package)], env)
    assert_whole(text, f"refusing to revert: changed since apply (hash differs from the patched one): {COMM}.")
    text, _ = shown(["apply", "--sglang-path", str(package), "--no-such-option"], env)
    assert "Error: No such option '--no-such-option'." in text
    text, _ = shown(["apply", "--sglang-path", str(package), "--only", "no-such-patch"], env)  # click's, 160 wide
    assert_whole(text, "Error: unknown patch id no-such-patch; known: communicator-import, communicator-flag,")
