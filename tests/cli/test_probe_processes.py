"""A serving interpreter that hangs costs ``--timeout`` and leaves nothing running: every
probe runs in a session of its own, and on timeout its whole process group is ended
(SIGTERM, then SIGKILL for what ignores it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import run
from tests.support.fakes import hanging_executable, kill_leftovers, pids_in, running

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)


@pytest.mark.parametrize(("command", "probes"), [("apply", 1), ("doctor", 2)])
@pytest.mark.waits
def test_a_hung_interpreter_leaves_no_process_behind(tmp_path: Path, command: str, probes: int) -> None:
    pids = tmp_path / "pids"
    python = hanging_executable(tmp_path / "env" / "bin" / "python", pids)
    try:
        code, _, err = run(command, "--python", str(python), "--timeout", "1")
        assert code == 2, err
        assert "within 1 s" in err
        started = pids_in(pids)
        assert len(started) == probes  # doctor: looking for sglang, then the host facts
        assert [pid for pid in started if running(pid)] == []
    finally:
        kill_leftovers(pids)


@pytest.mark.waits
def test_apply_gives_nvidia_smi_the_timeout_asked_for(tmp_path: Path, mini: Path) -> None:
    pids = tmp_path / "pids"
    hanging_executable(tmp_path / "bin" / "nvidia-smi", pids)
    try:
        code, _, err = run(
            "apply",
            "--sglang-path",
            str(mini),
            "--timeout",
            "1",
            env={"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"},
        )
        assert code == 0, err
        assert "nvidia-smi did not answer within 1 s" in err
        assert [pid for pid in pids_in(pids) if running(pid)] == []
    finally:
        kill_leftovers(pids)


def test_a_probe_started_after_ctrl_c_ends_at_once() -> None:
    """Ctrl-C may arrive before doctor's nvidia-smi thread has started its probe (a loaded
    machine): that probe must not run out its whole --timeout."""
    import time

    from sm120patch import runner as probes

    probes.end_all()
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            probes.run_isolated(["sleep", "30"], timeout=60)
        assert time.monotonic() - start < 10
        assert not probes._RUNNING
    finally:
        probes.allow_probes()
    assert probes.run_isolated(["true"], timeout=10)[0] == 0


@pytest.mark.waits
def test_ctrl_c_with_two_deaf_probes_costs_one_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor runs the host facts and nvidia-smi side by side; when both ignore SIGTERM, Ctrl-C
    waits out the grace once for both, then SIGKILLs both."""
    import subprocess
    import time

    from sm120patch import runner as probes

    monkeypatch.setattr(probes, "GRACE_S", 0.6)
    deaf = ["sh", "-c", "trap '' TERM; exec sleep 30"]  # one process: nothing left to reap after SIGKILL
    procs = [subprocess.Popen(deaf, start_new_session=True) for _ in range(2)]
    time.sleep(0.2)  # both shells have set their trap
    monkeypatch.setattr(probes, "_RUNNING", set(procs))
    try:
        start = time.monotonic()
        probes.end_all()
        elapsed = time.monotonic() - start
    finally:
        probes.allow_probes()
        for proc in procs:
            proc.kill()
    assert 0.6 <= elapsed < 1.0
    assert [proc.returncode for proc in procs] == [-9, -9]
