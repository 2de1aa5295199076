"""A Ctrl-C that comes as a command finishes: exit 130 with the command's own message (it met
the default handler Python puts back while it shuts down, and the process ended by SIGINT,
exit -2, without a word).  Under ``--json`` the one object printed stands, with its code.
Made deterministic here: the Ctrl-C is sent as ``sys.exit`` is called."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import one_json_object

pytestmark = pytest.mark.offline  # each test starts a process: the slow tier (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
AT_THE_END = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT)!r})
real_exit = sys.exit

def exit_after_ctrl_c(code=0):
    os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, as the command is done
    real_exit(code)

sys.exit = exit_after_ctrl_c
sys.argv = ["sm120patch", *sys.argv[1:]]
from sm120patch.cli import main
main()
"""


def test_a_ctrl_c_as_a_command_finishes_is_130_with_its_message(mini: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", AT_THE_END, "list", "--sglang-path", str(mini)], capture_output=True, text=True
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith("error: interrupted; ")
    assert "Traceback" not in proc.stderr


def test_under_json_the_object_printed_stands(mini: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", AT_THE_END, "list", "--sglang-path", str(mini), "--json"],
        capture_output=True,
        text=True,
    )
    assert one_json_object(proc.returncode, proc.stdout)["exit_code"] == 0
    assert "Traceback" not in proc.stderr
