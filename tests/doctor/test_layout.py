"""doctor's text in a real pseudo-terminal of 80 columns: no line wider than the terminal
(so the terminal never cuts a word), no 43-column indent, and every word of every finding
there, whole.  The host is ``FakeNvidiaSmi`` with two GPUs of unreadable capability and a
CUDA_VISIBLE_DEVICES that names no GPU: long findings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.doctor.hostfakes import fake_nvidia_smi, two_rtx
from tests.support.cli import jrun, run
from tests.support.terminal import assert_fits, in_terminal

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)

WIDTH = 80


def environment(tmp_path: Path) -> dict[str, str]:
    fake_nvidia_smi(tmp_path / "bin", two_rtx("[N/A]"))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update(
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        TERM="xterm-256color",
        CUDA_VISIBLE_DEVICES="GPU-deadbeef",
        PYTORCH_ALLOC_CONF="expandable_segments:True",
    )
    return env


def test_doctor_in_an_80_column_terminal(mini: Path, tmp_path: Path) -> None:
    env = environment(tmp_path)
    command = [sys.executable, "-m", "sm120patch", "doctor", "--sglang-path", str(mini), "--tp", "8"]
    text = in_terminal(command, env, WIDTH)
    lines = text.splitlines()
    assert "Traceback" not in text and len(lines) > 20
    assert_fits(lines, WIDTH)
    assert not [line for line in lines if line.startswith(" " * 9)]  # indented by 8 at most, never 43
    assert not [line for line in lines if line != line.rstrip()]  # no padding to the width
    _, findings = jrun(*command[3:], env=env)  # the same host, in this process
    shown = text.split()
    for finding in findings["findings"]:
        for part in ("summary", "detail"):
            assert " ".join(finding[part].split()) in " ".join(shown), (finding["id"], part)  # whole words, in order
    assert "): GPUs 0-1" in text and "cc unknown: nvidia-smi says [N/A]" in " ".join(shown)


def test_off_a_terminal_each_sentence_is_one_line_whatever_columns_says(mini: Path, tmp_path: Path) -> None:
    """Piped or logged, ``COLUMNS`` of 50 or 132 changes nothing: each summary and detail is
    one line, for grep (it wrapped at ``COLUMNS``), in this process."""
    env = environment(tmp_path)
    shown = []
    for columns in (50, 132):
        code, _, err = run("doctor", "--sglang-path", str(mini), env={**env, "COLUMNS": str(columns)})
        assert code in (0, 1) and len(err.splitlines()) > 10, err
        shown.append(err)
    assert shown[0] == shown[1]
    _, findings = jrun("doctor", "--sglang-path", str(mini), env={**env, "COLUMNS": "50"})
    lines = [line.strip() for line in shown[0].splitlines()]
    for finding in findings["findings"]:
        assert f"{finding['id']}: {finding['summary']}" in shown[0]
        assert not finding["detail"] or any(line == finding["detail"] for line in lines), finding["id"]
