"""Ctrl-C that lands while a process is being started (inside ``subprocess.Popen``): the
process is still ended.  Every process sm120patch starts runs in a session of its own, so
the terminal's SIGINT never reaches it; had the KeyboardInterrupt fired inside Popen, the
process would be lost to the cleanup and run on.

FakeCtrlC (``ctrl_c_inside_popen``): ``subprocess.Popen`` that starts the real process, then
sends this process SIGINT before it returns, as a Ctrl-C at that instant would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sm120patch import runner as probes
from sm120patch.bench.server import launch as server_launch
from sm120patch.runner import ranks as rank_launch
from tests.support.fakes import running

DEAF = "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


@pytest.fixture
def ctrl_c_inside_popen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """FakeCtrlC; the pids of the processes it started.  SIGINT gets Python's own handler for
    the test, as in a terminal (a test runner may have put one of its own there)."""
    started: list[int] = []
    real = subprocess.Popen
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        proc = real(*args, **kwargs)
        started.append(proc.pid)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, still inside "Popen"
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    yield started
    signal.signal(signal.SIGINT, previous)


def gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(running(pid) for pid in pids)


@pytest.mark.offline
def test_a_probe(ctrl_c_inside_popen: list[int]) -> None:
    with pytest.raises(KeyboardInterrupt):
        probes.run_isolated([sys.executable, "-c", DEAF], timeout=60)
    assert len(ctrl_c_inside_popen) == 1 and gone(ctrl_c_inside_popen)
    assert not probes._RUNNING


@pytest.mark.waits
@pytest.mark.offline
def test_the_ranks_of_the_kernel_bench(ctrl_c_inside_popen: list[int], tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(DEAF.replace("; ", "\n") + "\n")
    with pytest.raises(KeyboardInterrupt):
        rank_launch.launch(sys.executable, str(script), [], 2, dict(os.environ), 60)
    assert len(ctrl_c_inside_popen) == 1 and gone(ctrl_c_inside_popen)  # the first rank; no second was started


@pytest.mark.waits
@pytest.mark.offline
def test_the_benchmark_of_bench_server(ctrl_c_inside_popen: list[int], tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        server_launch.run([sys.executable, "-c", DEAF], dict(os.environ), tmp_path, 60)
    assert len(ctrl_c_inside_popen) == 1 and gone(ctrl_c_inside_popen)


def test_outside_the_main_thread_nothing_is_held_back() -> None:
    """Only the main thread gets KeyboardInterrupt; a probe thread (doctor's nvidia-smi) must
    not touch the SIGINT handler, which only the main thread may set."""
    import threading

    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []

    def probe() -> None:
        with probes.interrupts_deferred():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    assert seen == [before]
