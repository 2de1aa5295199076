"""Ctrl-C lands in the main thread.  The kernel hands a process's SIGINT to any thread that
does not block it, and Python runs the handler only in the main thread: a helper thread that
took it (doctor's nvidia-smi thread, bench's output readers) left the main thread waiting on a
hung probe or rank for its whole limit.  Every helper thread a command starts blocks SIGINT
(``probes.leave_ctrl_c_to_the_main_thread``); the main thread never does."""

from __future__ import annotations

import io
import queue
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.bench.server import launch as server_launch
from sm120patch.doctor import host
from sm120patch.runner import leave_ctrl_c_to_the_main_thread
from sm120patch.runner import ranks as rank_launch
from sm120patch.runner.gpus import GpuReport
from tests.doctor.hostfakes import serving_python


def blocked() -> set[signal.Signals]:
    """The signals the calling thread blocks."""
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def in_a_thread(target: Callable[[], object]) -> set[signal.Signals]:
    """What a new thread blocks once ``target`` has run in it."""
    seen: list[set[signal.Signals]] = []
    thread = threading.Thread(target=lambda: (target(), seen.append(blocked())))
    thread.start()
    thread.join()
    return seen[0]


def test_it_blocks_sigint_in_the_helper_only() -> None:
    assert signal.SIGINT in in_a_thread(leave_ctrl_c_to_the_main_thread)
    assert signal.SIGINT not in in_a_thread(lambda: None)  # a new thread does not block it by itself
    assert signal.SIGINT not in blocked()


@pytest.mark.offline
def test_doctors_nvidia_smi_thread_leaves_ctrl_c_to_the_main_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    masks: list[set[signal.Signals]] = []

    def nvidia_smi(timeout: float) -> GpuReport:
        masks.append(blocked())
        return GpuReport((), "nvidia-smi", "nvidia-smi is not on PATH")

    monkeypatch.setattr(host, "from_nvidia_smi", nvidia_smi)
    host.read_host(serving_python(tmp_path / "env", body="echo '{}'"), env={}, timeout=5)
    assert len(masks) == 1 and signal.SIGINT in masks[0]
    assert signal.SIGINT not in blocked()


@pytest.mark.parametrize(
    "read",
    [
        lambda stream: rank_launch._reader(0, stream, queue.Queue()),
        lambda stream: server_launch._reader(stream, queue.Queue()),
    ],
    ids=["bench ranks", "bench server"],
)
def test_benchs_output_readers_leave_ctrl_c_to_the_main_thread(read: Callable[[io.StringIO], None]) -> None:
    assert signal.SIGINT in in_a_thread(lambda: read(io.StringIO("a line\n")))
