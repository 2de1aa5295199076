"""The scripts that run inside the serving interpreter, and ``run_script`` that runs them.

The scripts (``find_sglang``, ``host_facts``, ``import_check``, ``bench_rank``) read or
measure the serving environment from inside it.  They obey other rules than the rest of
sm120patch: the standard library plus torch (and FlashInfer / sgl_kernel where asked for),
any Python >= 3.8, and no import from sm120patch.  Run as ``python script.py``, the script's own directory would lead
``sys.path`` and sm120patch's modules would shadow what is probed; run through ``-c`` the
path starts with the (scratch) working directory instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: How long one step in the serving interpreter may take by default: a hanging interpreter
#: costs a command well under a minute in all (``--timeout`` raises it).
DEFAULT_TIMEOUT_S = 20.0

#: ``python -c RUNNER script args``: run ``script`` as __main__ with a clean ``sys.path[0]``.
RUNNER = (
    "import runpy, sys; sys.argv[0] = sys.argv[1]; del sys.argv[1]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


#: How long a probe's process group has to end after SIGTERM before SIGKILL.
GRACE_S = 1.0

#: The probes running now, in any thread (``end_all``).
_RUNNING: set[subprocess.Popen[bytes]] = set()
#: Set by ``end_all``: a probe another thread starts after it ends at once (under load the
#: thread may not have started its probe yet when Ctrl-C arrives); ``allow_probes`` clears it.
_STOPPED = threading.Event()


class ProbeError(Exception):
    """The serving interpreter gave no usable answer: it did not start, ran past its limit,
    or printed no JSON object.  The message names the interpreter and the step."""


@dataclass(frozen=True)
class Answer:
    """What a script said, decoded with replacement: bytes that are not UTF-8 (a localized
    error, a broken interpreter) never stop a command."""

    returncode: int
    stdout: str
    stderr: str

    @classmethod
    def from_bytes(cls, returncode: int, stdout: bytes, stderr: bytes) -> Answer:
        return cls(returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def last_line(self) -> str:
        """The last line it printed (stderr first), or its exit status."""
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit {self.returncode}" if self.returncode >= 0 else f"killed by signal {-self.returncode}"

    def json_object(self, python: str, step: str) -> dict[str, Any]:
        """stdout as one JSON object; ProbeError with the last line it printed otherwise."""
        try:
            data = json.loads(self.stdout)
        except ValueError:
            raise ProbeError(f"{python} could not {step}: {self.last_line()}") from None
        except RecursionError:  # nested past the parser's depth
            raise ProbeError(f"{python} could not {step}: it printed JSON nested too deep to read") from None
        if not isinstance(data, dict):
            raise ProbeError(f"{python} could not {step}: it printed a JSON {type(data).__name__}, not an object")
        return data


def run_isolated(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> tuple[int, bytes, bytes]:
    """``argv`` in a session of its own: (exit status, stdout, stderr).  Past ``timeout``,
    or when this process is interrupted, its whole process group is ended, so what a hung
    interpreter started never outlives the command.  subprocess.TimeoutExpired or OSError
    when it ran too long or could not start."""
    started: list[subprocess.Popen[bytes]] = []  # filled before a held-back Ctrl-C is delivered
    try:
        proc = start_recorded(
            started,
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,  # its own group: Ctrl-C reaches us, and we end the group
        )
        _RUNNING.add(proc)
        if _STOPPED.is_set():
            raise KeyboardInterrupt
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, and Ctrl-C too
        for proc in started:
            end_group(proc)
        raise
    finally:
        for proc in started:
            _RUNNING.discard(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
    return started[0].returncode, stdout, stderr


def start_recorded(into: list[subprocess.Popen[Any]], argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **popen)``, appended to ``into`` before a Ctrl-C that arrived
    meanwhile is let through: the caller's cleanup, which ends what ``into`` holds, then
    sees it."""
    with interrupts_deferred():
        proc = subprocess.Popen(list(argv), **popen)
        into.append(proc)
    return proc


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while a process is started and recorded, then deliver it.  A
    KeyboardInterrupt inside ``subprocess.Popen`` would lose the process it had just started
    (in a session of its own, so the terminal's SIGINT never reaches it) and leave it running.
    Only the main thread receives KeyboardInterrupt, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[Any] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held and callable(previous):
        previous(signal.SIGINT, held[0])


def leave_ctrl_c_to_the_main_thread() -> None:
    """Block SIGINT in the calling helper thread (one that runs nvidia-smi, or reads a rank's
    output).  The kernel hands the process's SIGINT to any thread that does not block it, and
    Python runs the handler only in the main thread: taken by a helper while the main thread
    waits on a probe or a rank, Ctrl-C was seen only once that wait ended on its own (a hung
    probe: its whole limit).  Blocked here, it interrupts the main thread's wait.  For helper
    threads only (in the main thread it would hold Ctrl-C back).  A process started from the
    thread inherits the block: nvidia-smi does, which runs in a session of its own and is ended
    with SIGTERM and SIGKILL, never SIGINT; a probe that should see SIGINT must not start here."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def end_all() -> None:
    """End every probe still running, those of other threads too: Ctrl-C reaches only the
    main thread, and a probe in its own session does not see the terminal's SIGINT."""
    _STOPPED.set()
    _end_groups(list(_RUNNING))


def allow_probes() -> None:
    """Probes may run again (a new command in the same process, as in tests)."""
    _STOPPED.clear()


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL to what is left after ``GRACE_S``."""
    _end_groups([proc])


def _end_groups(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    # Every group is signalled before any is waited for: two hung probes cost one grace, not two.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signalled = []
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                continue
            signalled.append(proc)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(_group_alive(proc) for proc in signalled):
            time.sleep(0.02)
    for proc in procs:
        proc.wait()


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap the leader: a zombie still counts as a member of its group
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def run_script(
    python: str,
    script: str,
    args: Sequence[str] = (),
    *,
    step: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Answer:
    """``python script args...`` with a clean ``sys.path[0]``, to ``step`` (words for
    messages: "find sglang"), in its own session (``run_isolated``); ProbeError when it
    cannot start or runs past ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="sm120patch-") as scratch:
        try:
            returncode, stdout, stderr = run_isolated(
                [python, "-c", RUNNER, script, *args], timeout=timeout, env=env, cwd=cwd or scratch
            )
        except subprocess.TimeoutExpired:
            raise ProbeError(f"{python} did not {step} within {timeout:g} s (--timeout raises the limit)") from None
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise ProbeError(f"could not run {python} to {step}: {getattr(exc, 'strerror', None) or exc}") from None
    return Answer.from_bytes(returncode, stdout, stderr)
