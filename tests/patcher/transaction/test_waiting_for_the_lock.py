"""A writer that finds the state lock held (transaction/state_dir.py's ``StateDir.lock``): it
tries again often until its timeout has passed, then names the holder's pid in one sentence,
whatever the lock file holds."""

from __future__ import annotations

import fcntl
import os
import time
from types import SimpleNamespace

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.transaction import state_dir as state_module
from sm120patch.patcher.transaction.state_dir import StateDir


class FakeClock:
    """Fake clock for state.py: ``monotonic`` reads ``now``, which only ``sleep`` moves (by
    the pause asked), so a wait of seconds takes none; ``on_sleep`` runs before each pause."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []
        self.on_sleep = lambda: None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.on_sleep()
        self.pauses.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """A FakeClock in place of the ``time`` state.py reads (only there: pytest keeps its own)."""
    fake = FakeClock()
    as_time = SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep, strftime=time.strftime)
    monkeypatch.setattr(state_module, "time", as_time)
    return fake


def test_a_writer_that_waits_out_its_timeout_names_the_writer_holding_the_lock(
    state: StateDir, clock: FakeClock
) -> None:
    # The first lock stands for another apply: flock() excludes a second open of the file.
    with state.lock(), pytest.raises(EnvironmentProblem) as raised, state.lock(timeout=5):
        pass
    assert str(raised.value) == f"another sm120patch (pid {os.getpid()}) has held {state.lock_path} for over 5s"
    assert raised.value.code == "locked"
    assert clock.now > 5
    # It looks again every few hundredths of a second: a writer starts soon after the holder is done.
    assert clock.pauses and max(clock.pauses) <= 0.1


@pytest.mark.parametrize(
    ("held", "shown"),
    [(b"", "?"), (b"\xff\xfe4242", "\ufffd\ufffd4242"), (b"7" * 80, "7" * 64)],
    ids=["empty", "not-utf8", "longer-than-a-pid"],
)
def test_a_lock_file_without_a_readable_pid_is_still_named_in_one_sentence(
    state: StateDir, clock: FakeClock, held: bytes, shown: str
) -> None:
    """Readers hold the lock without writing a pid; a lock file written by something else may
    hold anything: the writer still says who it waited for, as far as the file tells."""
    state.make()
    state.lock_path.write_bytes(held)
    with state.lock(shared=True) as reading:  # a verify or doctor, reading the tree
        assert reading
        with pytest.raises(EnvironmentProblem) as raised, state.lock(timeout=5):
            pass
    assert str(raised.value) == f"another sm120patch (pid {shown}) has held {state.lock_path} for over 5s"


def test_a_lock_let_go_when_the_timeout_is_reached_is_taken(state: StateDir, clock: FakeClock) -> None:
    """The writer gives up only once the clock is past its deadline, as "for over" says."""
    timeout = 0.0
    for _ in range(4):  # what the fake clock reads after four pauses, to the last bit
        timeout += 0.05
    state.make()
    state.lock_path.touch()
    reader = os.open(state.lock_path, os.O_RDONLY)  # a verify holding the lock, as a reader does
    fcntl.flock(reader, fcntl.LOCK_SH)

    reading = [reader]  # emptied when the reader is done, so its fd is closed once

    def done_reading_at_the_deadline() -> None:
        if clock.now == timeout and reading:
            os.close(reading.pop())

    clock.on_sleep = done_reading_at_the_deadline
    try:
        with state.lock(timeout=timeout) as taken:
            assert taken
        assert clock.now > timeout
    finally:
        for fd in reading:  # the writer gave up before the reader was done
            os.close(fd)
