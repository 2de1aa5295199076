"""probes.run_script / run_isolated / end_all on real processes: what a probe that dies, a
path Python refuses, a group already gone and a probe that traps every signal it can make
of the runner; and that a probe leaves neither its scratch folder nor open pipes behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm120patch import runner as probes
from sm120patch.runner import ProbeError, run_isolated, run_script

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "probe.py"
    path.write_text(body)
    return str(path)


def test_a_probe_killed_by_a_signal_says_so(tmp_path: Path) -> None:
    probe = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    answer = run_script(sys.executable, probe, step="find sglang", timeout=30)
    with pytest.raises(ProbeError) as error:
        answer.json_object(sys.executable, "find sglang")
    assert str(error.value) == f"{sys.executable} could not find sglang: killed by signal 9"


def test_a_probe_that_exits_silently_names_its_exit_status(tmp_path: Path) -> None:
    answer = run_script(sys.executable, script(tmp_path, "raise SystemExit(3)\n"), step="find sglang", timeout=30)
    assert answer.last_line() == "exit 3"


def test_an_interpreter_path_python_cannot_use_is_one_sentence() -> None:
    with pytest.raises(ProbeError) as error:
        run_script("/srv/env/bin/py\0thon", "probe.py", step="find sglang", timeout=30)
    assert str(error.value) == "could not run /srv/env/bin/py\0thon to find sglang: embedded null byte"


def test_a_probe_runs_in_a_scratch_folder_of_its_own_that_is_removed(tmp_path: Path) -> None:
    answer = run_script(sys.executable, script(tmp_path, "import os\nprint(os.getcwd())\n"), step="look", timeout=30)
    scratch = Path(answer.stdout.strip())
    assert scratch.name.startswith("sm120patch-")
    assert scratch != tmp_path and not scratch.exists()


def test_a_probe_past_its_limit_leaves_no_pipe_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closed before the timeout reaches the caller, not when the garbage collector frees the
    process object (the exception keeps it alive while it is handled)."""
    started: list[subprocess.Popen[bytes]] = []
    real = probes.start_recorded

    def recording(into: list, argv: object, **popen: object) -> subprocess.Popen[bytes]:
        """The real start, with the process kept here to look at its pipes."""
        proc = real(into, argv, **popen)  # type: ignore[arg-type]
        started.append(proc)
        return proc

    monkeypatch.setattr(probes, "start_recorded", recording)
    try:
        run_isolated(["sleep", "30"], timeout=0.2)
    except subprocess.TimeoutExpired:
        pipes = [started[0].stdout, started[0].stderr]
        assert all(pipe is not None and pipe.closed for pipe in pipes)
    assert len(started) == 1


def test_every_group_is_ended_though_an_earlier_one_is_already_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "GRACE_S", 0.3)
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    hung = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        probes._end_groups([gone, hung])
    finally:
        hung.kill()
    assert hung.returncode == -15  # SIGTERM reached it


@pytest.mark.waits
def test_ending_a_group_sends_sigterm_then_sigkill_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe deaf to SIGTERM that records every other signal it is sent: asking whether its
    group is alive must not signal it."""
    monkeypatch.setattr(probes, "GRACE_S", 0.3)
    seen = tmp_path / "signals"
    ready = tmp_path / "ready"
    # Python, not sh: sh cannot trap a signal that was ignored when it started (nohup's SIGHUP).
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "def note(signum, frame):\n"
        f"    open({str(seen)!r}, 'a').write(signal.Signals(signum).name + '\\n')\n"
        "for name in ('SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2', 'SIGALRM'):\n"
        "    signal.signal(getattr(signal, name), note)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    probes.end_group(proc)
    assert proc.returncode == -9
    assert not seen.exists(), seen.read_text()
