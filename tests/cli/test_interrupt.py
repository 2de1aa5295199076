"""Ctrl-C: exit 130, the JSON error object under ``--json``, and a line that says what the
interrupt left behind (the journal: the next apply or revert finishes what was started)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import one_json_object, run_process
from tests.support.fakes import hanging_executable, kill_leftovers, pids_in, running
from tests.support.faultsuite import REPO, cli

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)


def interrupted(proc: subprocess.CompletedProcess[str]) -> str:
    """The error of an interrupted run: exit 130, one JSON object that says so."""
    assert proc.returncode == 130, proc.stderr
    data = one_json_object(130, proc.stdout)
    assert "Traceback" not in proc.stderr and "Aborted!" not in proc.stderr
    assert data["error"] in proc.stderr
    return data["error"]


def test_ctrl_c_while_files_are_replaced_is_finished_by_the_next_apply(mini: Path) -> None:
    note = interrupted(cli(mini, "apply", fault="replace:int"))
    assert "the next `sm120patch apply` or `sm120patch revert` finishes what was started" in note
    assert Path(note.rpartition("(")[2].rstrip(")")).name == "journal.json"
    assert Path(note.rpartition("(")[2].rstrip(")")).is_file()
    again = cli(mini, "apply")
    assert again.returncode == 0, again.stderr
    assert any("recovered an interrupted apply" in m for m in json.loads(again.stdout)["messages"])
    assert json.loads(again.stdout)["headline"].startswith("finished the interrupted run")
    assert cli(mini, "verify").returncode == 0


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_ctrl_c_before_the_journal_leaves_no_file_half_changed(mini: Path, command: str) -> None:
    if command == "revert":
        assert cli(mini, "apply").returncode == 0
    note = interrupted(cli(mini, command, fault="write:int"))
    assert note.startswith("interrupted; no sglang file was left half-changed")


@pytest.mark.waits
def test_ctrl_c_while_a_probe_hangs_ends_it_and_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    python = hanging_executable(tmp_path / "env" / "bin" / "python", pids)
    command = [sys.executable, "-m", "sm120patch", "apply", "--python", str(python), "--json", "--timeout", "60"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not pids_in(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        note = interrupted(subprocess.CompletedProcess(command, proc.returncode, stdout, stderr))
        assert note == "interrupted before sglang was found; nothing was written"
        assert [pid for pid in pids_in(pids) if running(pid)] == []
    finally:
        proc.kill()
        kill_leftovers(pids)


def test_ctrl_c_outside_a_command_body_is_130_too(tmp_path: Path) -> None:
    """Click turns a KeyboardInterrupt it meets into Abort ("Aborted!", exit 1 before)."""
    script = tmp_path / "sitecustomize.py"
    script.write_text(
        "import click.core\nclick.core.Context.invoke = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    assert interrupted(run_process("list", "--json", env=env, cwd=REPO)) == "interrupted; nothing was written"


@pytest.mark.waits
def test_ctrl_c_in_doctor_ends_a_hung_nvidia_smi_rather_than_wait_it_out(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hanging_executable(tmp_path / "bin" / "nvidia-smi", pids)
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(  # looks for sglang as this interpreter does, then Ctrl-C at the host facts
        f'#!/bin/sh\ncase "$3" in *host_facts.py) kill -INT $PPID; exec sleep 30;; esac\nexec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(REPO))
    try:
        start = time.monotonic()
        proc = run_process("doctor", "--python", python, "--timeout", "60", "--json", env=env, cwd=REPO)
        assert time.monotonic() - start < 30
        assert interrupted(proc) == "interrupted; nothing was written"
        assert len(pids_in(pids)) <= 1  # under load the interrupt may come before nvidia-smi starts
        assert [pid for pid in pids_in(pids) if running(pid)] == []
    finally:
        kill_leftovers(pids)
