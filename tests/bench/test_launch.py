"""bench's watchdog, with real processes as fake ranks (tests/bench/fakes.py ``rank_script``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from sm120patch.bench import launch
from sm120patch.bench.launch import RankFailure
from tests.bench.fakes import rank_script


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, not yet reaped by init) is dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def run(script: Path, world: int = 2, timeout: float = 2.0, events: list | None = None) -> list[launch.RankLog]:
    seen = events if events is not None else []
    return launch.launch(
        sys.executable, str(script), [], world, dict(os.environ), timeout, lambda rank, e: seen.append((rank, e))
    )


def test_ranks_that_finish_return_their_events(tmp_path: Path) -> None:
    script = rank_script(
        tmp_path / "rank.py",
        """
        print("a library talking on stdout")
        emit("phase", phase="tokens 1")
        emit("row", tokens=1)
        emit("done", norm="n")
        """,
    )
    events: list = []
    logs = run(script, world=3, events=events)
    assert [log.returncode for log in logs] == [0, 0, 0]
    assert [[e["event"] for e in log.events] for log in logs] == [["phase", "row", "done"]] * 3
    assert sorted(rank for rank, e in events if e["event"] == "done") == [0, 1, 2]


def test_a_hanging_rank_is_stopped_with_its_phase_and_no_process_is_left(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    script = rank_script(
        tmp_path / "rank.py",
        f"""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(os.path.join({str(pids)!r}, str(RANK)), "w").write(f"{{os.getpid()}} {{child.pid}}")
        emit("phase", phase="process-group")
        if RANK == 1:
            time.sleep(600)  # a stuck NCCL init
        emit("phase", phase="tokens 1")
        time.sleep(600)  # waits for its peer in the first collective
        """,
    )
    start = time.monotonic()
    with pytest.raises(RankFailure) as caught:
        run(script, timeout=0.8)
    assert time.monotonic() - start < 15
    failure = caught.value
    assert (failure.kind, failure.phase) == ("timeout", "process-group")
    assert failure.rank == 1
    assert str(failure).startswith("rank 1, phase process-group: no progress for 1 s")
    assert str(failure).endswith("every rank was stopped (rank 0 was waiting in tokens 1)")
    records = sorted(pids.iterdir())
    assert len(records) == 2  # each rank wrote its pid and its child's before its first phase
    for record in records:
        for pid in map(int, record.read_text().split()):
            assert not alive(pid), f"process {pid} outlived the run"


def test_the_workspace_phase_may_take_longer(tmp_path: Path) -> None:
    script = rank_script(
        tmp_path / "rank.py",
        """
        emit("phase", phase="workspace")
        time.sleep(1.0)  # FlashInfer building its module: longer than the timeout, inside 6x
        emit("done", norm="n")
        """,
    )
    logs = run(script, world=1, timeout=0.5)
    assert logs[0].returncode == 0


def test_a_rank_error_event_ends_every_rank(tmp_path: Path) -> None:
    script = rank_script(
        tmp_path / "rank.py",
        """
        emit("phase", phase="workspace")
        if RANK == 0:
            emit("error", kind="no-kernel", message="RuntimeError: No supported CUDA architectures found")
            sys.exit(2)
        time.sleep(600)
        """,
    )
    start = time.monotonic()
    with pytest.raises(RankFailure) as caught:
        run(script, timeout=60)
    assert time.monotonic() - start < 15  # the peer was stopped, not waited for
    assert (caught.value.rank, caught.value.phase, caught.value.kind) == (0, "workspace", "no-kernel")
    assert "No supported CUDA architectures" in caught.value.message


def test_a_crash_without_an_event_names_the_exit_and_the_last_stderr_line(tmp_path: Path) -> None:
    script = rank_script(
        tmp_path / "rank.py",
        """
        emit("phase", phase="process-group")
        sys.stderr.write("Traceback ...\\nRuntimeError: NCCL error: unhandled system error\\n")
        sys.exit(3)
        """,
    )
    with pytest.raises(RankFailure) as caught:
        run(script, world=1)
    assert caught.value.kind == "failure"
    assert caught.value.message == "exit 3: RuntimeError: NCCL error: unhandled system error"


def test_exit_zero_without_done_is_a_failure(tmp_path: Path) -> None:
    script = rank_script(tmp_path / "rank.py", 'emit("phase", phase="setup")\n')
    with pytest.raises(RankFailure, match="exit 0: no message"):
        run(script, world=1)


def test_a_rank_killed_by_a_signal_says_so(tmp_path: Path) -> None:
    script = rank_script(tmp_path / "rank.py", "import signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(RankFailure, match="killed by signal 9"):
        run(script, world=1)


def test_the_last_stderr_line_is_read_whatever_its_bytes(tmp_path: Path) -> None:
    # A rank's stderr is whatever CUDA, NCCL and Python wrote: several lines, blank ones, and
    # bytes that are not UTF-8 (a driver message in another locale).
    script = rank_script(
        tmp_path / "rank.py",
        r"""
        emit("phase", phase="process-group")
        sys.stderr.flush()
        os.write(2, b"Traceback ...\n  File x\n\nRuntimeError: NCCL \xff\xfe failed\n\n")
        sys.exit(3)
        """,
    )
    with pytest.raises(RankFailure) as caught:
        run(script, world=1)
    assert caught.value.message == "exit 3: RuntimeError: NCCL \ufffd\ufffd failed"


def test_a_crash_with_nothing_on_stderr_says_no_message(tmp_path: Path) -> None:
    script = rank_script(tmp_path / "rank.py", 'emit("phase", phase="setup")\nsys.exit(4)\n')
    with pytest.raises(RankFailure) as caught:
        run(script, world=1)
    assert caught.value.message == "exit 4: no message"


def test_a_stuck_rank_names_every_peer_that_waited_for_it(tmp_path: Path) -> None:
    script = rank_script(
        tmp_path / "rank.py",
        """
        emit("phase", phase="process-group")
        if RANK == 1:
            time.sleep(600)
        emit("phase", phase="tokens 1")
        time.sleep(600)
        """,
    )
    with pytest.raises(RankFailure) as caught:
        run(script, world=3, timeout=0.8)
    assert caught.value.rank == 1
    assert str(caught.value).endswith(
        "every rank was stopped (rank 0 was waiting in tokens 1; rank 2 was waiting in tokens 1)"
    )
