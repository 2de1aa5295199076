"""The tiers' rule (tests/conftest.py): a fast test starts no process, and one marked
``offline`` is in the slow tier.  Checked on a small test file of its own, run by pytest in a
process of its own (which is why this test is itself ``offline``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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

@pytest.mark.offline
def test_marked():
    subprocess.run(["true"], check=True)
"""


def run_pytest(folder: Path, marks: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
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
    assert "3 passed, 1 deselected, 2 errors" in fast.stdout  # an error at the end of two of them
    said = "Failed: this fast test started 1 process(es), first"
    assert f"ERROR test_inner.py::test_runs_true - {said} 'true'" in fast.stdout
    assert f"ERROR test_inner.py::test_forks - {said} 'os.fork'" in fast.stdout

    slow = run_pytest(tmp_path, "slow")  # marked offline: slow, and there it may start processes
    assert slow.returncode == 0, slow.stdout + slow.stderr
    assert "1 passed, 3 deselected" in slow.stdout
