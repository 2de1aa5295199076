"""The tiers' rules (tests/conftest.py): a fast test starts no process, and one marked
``offline`` is in the slow tier (checked on a small test file of its own, run by pytest in a
process of its own, which is why that test is itself ``offline``); the host's own nvidia-smi
is off ``PATH`` for every test, and Ctrl-C reaches the processes the tests start."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import hide_gpu_tools, let_ctrl_c_through

REPO = Path(__file__).resolve().parent.parent

CONFTEST = "from tests.conftest import fast_tests_start_no_process, pytest_itemcollected  # noqa: F401\n"
TESTS = """
import os, subprocess, pytest

def test_quiet():
    assert sum(range(3)) == 3

def test_runs_true():
    subprocess.run(["true"], check=True)

def test_forks():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

def test_fills_a_host_cache():  # as matplotlib does the first time on a host
    subprocess.run([os.environ["FAKE_FC_LIST"]], check=True)

@pytest.mark.offline
def test_marked():
    subprocess.run(["true"], check=True)
"""


def run_pytest(folder: Path, marks: str) -> subprocess.CompletedProcess[str]:
    fc_list = folder / "bin" / "fc-list"
    fc_list.parent.mkdir(exist_ok=True)
    fc_list.write_text("#!/bin/sh\nexit 0\n")
    fc_list.chmod(0o755)
    # Not a mutation run's switch: mutated code in a process started outside the repository
    # cannot find mutmut's configuration, and what is checked here is the conftest, not the tool.
    env = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"}
    env.update(PYTHONPATH=str(REPO), FAKE_FC_LIST=str(fc_list))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marks, "-rE", str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
    )


@pytest.mark.offline
def test_a_fast_test_that_starts_a_process_fails_naming_it_and_an_offline_one_is_slow(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    offline: x\n    slow: x\n")

    fast = run_pytest(tmp_path, "not slow")
    assert fast.returncode == 1, fast.stdout + fast.stderr
    assert "4 passed, 1 deselected, 2 errors" in fast.stdout  # an error at the end of two of them
    said = "Failed: this fast test started 1 process(es), first"
    assert f"ERROR test_inner.py::test_runs_true - {said} 'true'" in fast.stdout
    assert f"ERROR test_inner.py::test_forks - {said} 'os.fork'" in fast.stdout

    slow = run_pytest(tmp_path, "slow")  # marked offline: slow, and there it may start processes
    assert slow.returncode == 0, slow.stdout + slow.stderr
    assert "1 passed, 4 deselected" in slow.stdout


def test_the_hosts_nvidia_smi_is_off_path_and_everything_beside_it_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_bin, other = tmp_path / "usr-bin", tmp_path / "other"
    for folder, names in ((host_bin, ("nvidia-smi", "sh-like")), (other, ("tool",))):
        folder.mkdir()
        for name in names:
            (folder / name).write_text("#!/bin/sh\n")
            (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{host_bin}")
    cleanups: list = []
    hide_gpu_tools(cleanups.append)
    assert shutil.which("nvidia-smi") is None
    assert Path(shutil.which("sh-like") or "").resolve() == host_bin / "sh-like"
    assert shutil.which("tool") == str(other / "tool")  # a folder without one is left as it was
    assert len(cleanups) == 1
    cleanups[0]()
    assert not Path(os.environ["PATH"].split(os.pathsep)[1]).exists()  # the links' folder goes at the end

    monkeypatch.setenv("PATH", str(other))  # nothing to hide: PATH and the cleanups stay as they were
    hide_gpu_tools(cleanups.append)
    assert os.environ["PATH"] == str(other) and len(cleanups) == 1


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (signal.SIG_IGN, signal.default_int_handler),  # a background job of a script: Ctrl-C let through
        (signal.SIG_DFL, signal.SIG_DFL),  # what the run was given otherwise is kept
        (signal.default_int_handler, signal.default_int_handler),
    ],
    ids=["ignored", "default", "python"],
)
def test_ctrl_c_ignored_by_the_shell_that_started_the_run_is_let_through(before: object, after: object) -> None:
    kept = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, before)
        let_ctrl_c_through()
        assert signal.getsignal(signal.SIGINT) is after
    finally:
        signal.signal(signal.SIGINT, kept)
