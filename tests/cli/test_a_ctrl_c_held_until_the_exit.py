"""A Ctrl-C held since the command finished, answered at exit (``_answer_held_interrupt``):
exit 130 with the command's own words on stderr, even where stdout or stderr is closed; none
held, nothing is said.  What those words are (``late_interrupt``), and which errors are a
Ctrl-C wrapped by a library (``_from_ctrl_c``).  In this process: the exit and the pending
signals are fakes; the whole path in a process of its own is test_late_ctrl_c.py's."""

from __future__ import annotations

import io
import signal
import sys

import pytest

import sm120patch.cli as cli_module
from sm120patch.cli import run as run_module
from sm120patch.errors import ExitCode

WORDS = "interrupted; nothing was written (the run's own words)"


class Exited(BaseException):
    """Stands in for ``os._exit``: the process would end here, with ``code``."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


def _exit(code: object) -> None:
    """Fake ``os._exit``."""
    raise Exited(code)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C pending (blocked) at exit; the command's words for one; ``os._exit`` faked."""
    monkeypatch.setattr(cli_module.signal, "sigpending", lambda: {signal.SIGINT})
    monkeypatch.setattr(cli_module.os, "_exit", _exit)
    monkeypatch.setattr(run_module, "_SAYS_WHEN_INTERRUPTED", [lambda: WORDS])


def test_a_held_ctrl_c_ends_the_process_130_with_the_commands_words(
    held: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(Exited) as exited:
        cli_module._answer_held_interrupt()
    assert exited.value.code == ExitCode.INTERRUPTED == 130
    assert capsys.readouterr() == (("", f"error: {WORDS}\n"))


class GonePipe(io.StringIO):
    """Stands in for a stream whose reader has gone (``| head``): flushing it fails."""

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stdout_whose_reader_is_gone_does_not_stop_the_answer(
    held: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", GonePipe())
    with pytest.raises(Exited) as exited:
        cli_module._answer_held_interrupt()
    assert exited.value.code == 130
    assert capsys.readouterr().err == f"error: {WORDS}\n"


def test_a_closed_stderr_still_ends_the_process_130(held: None, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    with pytest.raises(Exited) as exited:
        cli_module._answer_held_interrupt()
    assert exited.value.code == 130


def test_no_ctrl_c_held_says_nothing_and_lets_the_exit_be(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_module.signal, "sigpending", set)
    monkeypatch.setattr(cli_module.os, "_exit", _exit)
    assert cli_module._answer_held_interrupt() is None
    assert capsys.readouterr() == ("", "")


def test_a_late_ctrl_c_says_what_the_running_command_says_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "_SAYS_WHEN_INTERRUPTED", [lambda: WORDS])
    assert run_module.late_interrupt() == WORDS
    monkeypatch.setattr(run_module, "_SAYS_WHEN_INTERRUPTED", [])
    assert run_module.late_interrupt() == run_module.INTERRUPTED


class Looped(RuntimeError):
    """An error whose context leads back to itself; reading the context a fourth time fails
    the test rather than loop for ever."""

    reads = 0

    @property  # type: ignore[override]
    def __context__(self) -> BaseException | None:
        Looped.reads += 1
        assert Looped.reads <= 3, "the chain was walked round its loop again"
        return self


def test_a_ctrl_c_found_through_the_cause_or_the_context() -> None:
    by_cause = RuntimeError("Error calling __set_name__")
    by_cause.__cause__ = KeyboardInterrupt()
    by_context = RuntimeError("Error calling __set_name__")
    by_context.__context__ = KeyboardInterrupt()
    assert run_module._from_ctrl_c(by_cause) and run_module._from_ctrl_c(by_context)
    assert not run_module._from_ctrl_c(RuntimeError("a bug"))


def test_a_chain_that_loops_without_a_ctrl_c_is_walked_once() -> None:
    Looped.reads = 0
    assert run_module._from_ctrl_c(Looped()) is False
