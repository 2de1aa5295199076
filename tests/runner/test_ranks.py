"""The rank watchdog (runner/ranks.py) that bench runs its ranks under, with real processes as fake
ranks (tests/bench/fakes.py ``rank_script``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sm120patch.runner import ranks as launch
from sm120patch.runner.ranks import FailureKind, RankFailure
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


@pytest.mark.offline
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


@pytest.mark.waits
@pytest.mark.offline
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


@pytest.mark.waits
@pytest.mark.offline
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


@pytest.mark.offline
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
    assert caught.value.kind is FailureKind.NO_KERNEL
    assert "No supported CUDA architectures" in caught.value.message


def test_a_kind_the_rank_says_is_read_as_one_this_side_knows() -> None:
    assert [FailureKind.said(word) for word in ("declined", "environment", "timeout")] == [
        FailureKind.DECLINED,
        FailureKind.ENVIRONMENT,
        FailureKind.TIMEOUT,
    ]
    assert FailureKind.said("mismatch") is FailureKind.FAILURE  # a word this side does not know
    assert FailureKind.said(None) is FailureKind.FAILURE  # an error event without a kind


@pytest.mark.offline
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
    assert (caught.value.rank, caught.value.phase, caught.value.kind) == (0, "process-group", "failure")
    assert caught.value.message == "exit 3: RuntimeError: NCCL error: unhandled system error"


@pytest.mark.offline
def test_exit_zero_without_done_is_a_failure(tmp_path: Path) -> None:
    script = rank_script(tmp_path / "rank.py", 'emit("phase", phase="setup")\n')
    with pytest.raises(RankFailure, match="exit 0: no message"):
        run(script, world=1)


@pytest.mark.offline
def test_a_rank_killed_by_a_signal_says_so(tmp_path: Path) -> None:
    script = rank_script(tmp_path / "rank.py", "import signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(RankFailure, match="killed by signal 9"):
        run(script, world=1)


@pytest.mark.offline
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


@pytest.mark.offline
def test_a_crash_with_nothing_on_stderr_says_no_message(tmp_path: Path) -> None:
    script = rank_script(tmp_path / "rank.py", 'emit("phase", phase="setup")\nsys.exit(4)\n')
    with pytest.raises(RankFailure) as caught:
        run(script, world=1)
    assert caught.value.message == "exit 4: no message"


@pytest.mark.waits
@pytest.mark.offline
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


@pytest.mark.offline
def test_each_rank_gets_its_rank_the_environment_a_scratch_folder_and_no_terminal_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment given plus RANK, LOCAL_RANK and WORLD_SIZE; a scratch folder of
    sm120patch's that is gone afterwards; stdin that is not this process's (here a pipe nobody
    writes to: a rank reading it would wait forever); nothing left in the user's folder."""
    script = rank_script(
        tmp_path / "rank.py",
        """
        seen = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MARK")}
        emit("env", cwd=os.getcwd(), stdin=sys.stdin.read(), **seen)
        emit("done", norm="n")
        """,
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    env = {k: v for k, v in os.environ.items() if k != "MARK"} | {"MARK": "given"}
    read, write = os.pipe()
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        logs = launch.launch(sys.executable, str(script), [], 2, env, 10.0)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)
    seen = [log.events[0] for log in logs]
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["MARK"], e["stdin"]) for e in seen] == [
        ("0", "0", "2", "given", ""),
        ("1", "1", "2", "given", ""),
    ]
    scratch = Path(seen[0]["cwd"])
    assert seen[1]["cwd"] == str(scratch) and scratch.name.startswith("sm120patch-bench-")
    assert not scratch.exists()
    assert list(work.iterdir()) == []


@pytest.mark.offline
def test_a_rank_output_that_is_not_utf8_is_read_with_replacements(tmp_path: Path) -> None:
    """A library printing bytes in another encoding on stdout, and an event whose text is
    UTF-8: neither stops the run, the event keeps its letters."""
    script = rank_script(
        tmp_path / "rank.py",
        r"""
        sys.stdout.flush()
        os.write(1, b"\xff\xfe noise from a library\n")
        os.write(1, '{"event": "phase", "phase": "caf\u00e9"}\n'.encode())
        emit("done", norm="n")
        """,
    )
    logs = run(script, world=1)
    assert [e.get("phase") for e in logs[0].events] == ["caf\u00e9", None]


@pytest.mark.waits
@pytest.mark.offline
def test_a_rank_that_closes_its_output_and_hangs_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = rank_script(
        tmp_path / "rank.py",
        f"""
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        emit("phase", phase="tokens 1")
        os.close(1)
        time.sleep(600)
        """,
    )
    start = time.monotonic()
    with pytest.raises(RankFailure) as caught:
        run(script, world=1, timeout=0.5)
    assert time.monotonic() - start < 15
    assert (caught.value.rank, caught.value.phase, caught.value.kind) == (0, "tokens 1", "timeout")
    assert not alive(int(pid_file.read_text()))


@pytest.mark.offline
def test_a_rank_that_is_done_is_not_held_by_a_helper_that_keeps_its_output(tmp_path: Path) -> None:
    """A rank done and exited 0 while processes it started hold its stdout open: one in its
    group (stopped with it) and one in a session of its own, which bench does not stop and
    whose pipe reader must not keep sm120patch from exiting."""
    pids = tmp_path / "pids"
    script = rank_script(
        tmp_path / "rank.py",
        f"""
        import subprocess
        sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
        helpers = [subprocess.Popen(sleep), subprocess.Popen(sleep, start_new_session=True)]
        open({str(pids)!r}, "w").write(" ".join(str(h.pid) for h in helpers))
        emit("done", norm="n")
        """,
    )
    before = set(threading.enumerate())
    start = time.monotonic()
    try:
        logs = run(script, world=1, timeout=5)  # a rank not judged when done would fail after 5 s
        took = time.monotonic() - start
        in_group = int(pids.read_text().split()[0])
        assert logs[0].returncode == 0 and took < 15
        assert not alive(in_group)
        readers = [t for t in set(threading.enumerate()) - before if t.is_alive()]
        assert readers and all(t.daemon for t in readers)
    finally:
        if pids.exists():
            os.kill(int(pids.read_text().split()[1]), 9)


def test_a_rank_stuck_alone_in_the_workspace_gets_its_longer_limit_named() -> None:
    log = launch.RankLog(0, phase="workspace")
    failure = launch._stuck([log], 0.2)
    assert (failure.rank, failure.phase, failure.kind) == (0, "workspace", "timeout")
    assert failure.message.startswith("no progress for 1 s ")
    assert failure.message.endswith("a peer that died); every rank was stopped")


@pytest.mark.parametrize("line", ['{"log": "a library"}\n', "[1, 2]\n", '"event"\n', "not json\n"])
def test_stdout_lines_that_are_not_events_are_passed_over(line: str) -> None:
    log = launch.RankLog(0)
    seen: list = []
    launch._take(log, line, lambda rank, event: seen.append(event))
    assert log.events == [] and seen == [] and log.phase == "starting"


def test_an_unreadable_stderr_file_gives_no_line(tmp_path: Path) -> None:
    assert launch._last_stderr(str(tmp_path / "gone.err")) == ""


def test_live_members_counts_processes_of_the_groups_but_not_zombies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A /proc written here: group 300 has a sleeping and a running process, group 400 only a
    zombie, group 500 nothing."""
    proc = tmp_path / "proc"
    for pid, state, pgid in [(301, "S", 300), (302, "R", 300), (401, "Z", 400), (402, "S", 1)]:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python) {state} 1 {pgid} {pgid} 0\n")
    monkeypatch.setattr(launch, "Path", lambda where: proc if where == "/proc" else Path(where))
    assert launch._live_members({300})
    assert not launch._live_members({400})
    assert not launch._live_members({500})
    assert launch._live_members({400, 300})
    monkeypatch.setattr(launch, "Path", lambda where: tmp_path / "no-proc")
    assert not launch._live_members({300})


@pytest.mark.offline
def test_the_process_table_reads_odd_names_and_leaves_out_zombies(tmp_path: Path) -> None:
    """A process whose name holds ") (" (stat's name field is in parentheses), in a group of
    its own inside this session, and a child that exited and was not reaped yet."""
    odd = tmp_path / "x) (y"
    odd.write_bytes(Path("/bin/sleep").read_bytes())
    odd.chmod(0o755)
    named = subprocess.Popen([str(odd), "30"], process_group=0)
    zombie = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while alive(zombie.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        table = launch.proc_table()
        assert table[named.pid] == (os.getpid(), named.pid)  # (parent, process group), not the session
        assert os.getsid(named.pid) != named.pid
        assert zombie.pid not in table
    finally:
        named.kill()
        named.wait()
        zombie.wait()


def test_a_process_that_ends_while_the_table_is_read_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A /proc written here: one entry that cannot be read (its process ended) among many."""
    proc = tmp_path / "proc"
    for pid in range(100, 140):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python) S 1 {pid} {pid} 0\n")
    (proc / "120" / "stat").unlink()
    (proc / "120" / "stat").mkdir()  # read_text fails with an OSError, as for an ended process
    monkeypatch.setattr(launch, "Path", lambda where: proc if where == "/proc" else Path(where))
    table = launch.proc_table()
    assert sorted(table) == [pid for pid in range(100, 140) if pid != 120]
    assert table[101] == (1, 101)


@pytest.mark.offline
def test_stopping_ranks_that_end_on_sigterm_does_not_wait_out_the_grace() -> None:
    """Two ranks (each the leader of its own session) that end at SIGTERM: the stop returns
    as soon as they are gone, not after the grace it would give a rank that stays."""
    procs = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(2)]
    started = time.monotonic()
    launch._stop(procs)
    assert time.monotonic() - started < launch.KILL_GRACE_S * 0.8
    assert [proc.returncode for proc in procs] == [-15, -15]


@pytest.mark.offline
def test_a_rank_group_that_may_not_be_signalled_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    real_killpg = os.killpg
    procs = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(2)]
    refused = procs[0].pid

    def killpg(pgid: int, sig: int) -> None:
        """Fake ``os.killpg``: the first rank's group refuses SIGTERM (a process in it changed
        user); SIGKILL, and every signal to the other group, is the real one."""
        if pgid == refused and sig == signal.SIGTERM:
            raise PermissionError(1, "Operation not permitted")
        real_killpg(pgid, sig)

    monkeypatch.setattr(launch.os, "killpg", killpg)
    monkeypatch.setattr(launch, "KILL_GRACE_S", 0.3)  # the refused rank is waited for that long
    launch._stop(procs)
    assert [proc.returncode for proc in procs] == [-9, -15]
