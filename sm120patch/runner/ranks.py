"""Start one bench rank per GPU and watch them: no hang and no process outlives the run.

Each rank is a process of its own session (its own process group), so a kill reaches what
it started too (NCCL helpers, FlashInfer's compiler).  The ranks report phases as JSON
lines; a rank that stays in one phase past its limit, or exits with an error, ends the
whole run: every rank is stopped (SIGTERM, then SIGKILL) and the error names the rank and
the phase.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, Any

from sm120patch.runner import RUNNER, leave_ctrl_c_to_the_main_thread, start_recorded

#: A phase allowed to take ``LONG_PHASE_FACTOR`` times the limit: the first workspace builds
#: FlashInfer's trtllm_comm module, which takes minutes.
LONG_PHASES = ("workspace",)
LONG_PHASE_FACTOR = 6
KILL_GRACE_S = 3.0


class FailureKind(str, Enum):
    """What ended a bench run: the kind a rank's ``error`` event names, or the watcher's timeout."""

    ENVIRONMENT = "environment"  # the host cannot run it (exit 2)
    NO_KERNEL = "no-kernel"  # FlashInfer has no trtllm allreduce kernel for these GPUs (exit 2)
    DECLINED = "declined"  # sglang would not fuse on these GPUs (exit 1)
    FAILURE = "failure"  # anything else a rank raised, or a rank that exited without a word
    TIMEOUT = "timeout"  # a rank made no progress within its phase's limit: every rank was stopped

    @classmethod
    def said(cls, kind: object) -> FailureKind:
        """The kind a rank's ``error`` event names; one this side does not know is a failure."""
        try:
            return cls(kind)
        except ValueError:
            return cls.FAILURE


@dataclass
class RankFailure(Exception):
    """A rank failed or hung, and how (``kind``)."""

    rank: int
    phase: str
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"rank {self.rank}, phase {self.phase}: {self.message}"


@dataclass
class RankLog:
    rank: int
    phase: str = "starting"
    since: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None


def limit_for(phase: str, timeout: float) -> float:
    return timeout * LONG_PHASE_FACTOR if phase in LONG_PHASES else timeout


def _reader(rank: int, stream: IO[str], out: queue.Queue[tuple[int, str | None]]) -> None:
    leave_ctrl_c_to_the_main_thread()
    try:
        for line in stream:
            out.put((rank, line))
    finally:  # whatever ends the reading, the watcher learns that no more lines come
        out.put((rank, None))


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) of every live process, from /proc (empty where there is none).
    A zombie waiting to be reaped is not live: it holds no GPU and runs nothing."""
    table: dict[int, tuple[int, int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        if fields[0] not in ("Z", "X"):
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))
    return table


def _live_members(pgids: set[int]) -> bool:
    """Whether a process of these groups still runs.  Where there is no /proc, the rank
    processes' own exit has to do."""
    return any(pgid in pgids for _, pgid in proc_table().values())


def _stop(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """SIGTERM every rank's process group, then SIGKILL what is left; reap the ranks and
    wait until nothing they started runs on (NCCL helpers, a compiler)."""
    pgids = {proc.pid for proc in procs}  # each rank leads its own session and group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or _live_members(pgids)):
            time.sleep(0.05)
    for proc in procs:
        proc.wait()


def _last_stderr(path: str) -> str:
    """The last line that is not blank; CUDA, NCCL and Python write what they like there."""
    try:
        text = Path(path).read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def launch(
    python: str,
    script: str,
    args: Sequence[str],
    world: int,
    env: Mapping[str, str],
    timeout: float,
    on_event: Callable[[int, dict[str, Any]], None] = lambda rank, event: None,
) -> list[RankLog]:
    """Run ``python script args`` as ranks 0..world-1 (``RANK``/``WORLD_SIZE`` set) and
    return each rank's events once all exit 0; raise RankFailure otherwise."""
    logs = [RankLog(rank) for rank in range(world)]
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory(prefix="sm120patch-bench-") as scratch:
        stderr_paths = [os.path.join(scratch, f"rank{rank}.err") for rank in range(world)]
        try:
            for rank in range(world):
                rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
                with open(stderr_paths[rank], "w", encoding="utf-8") as err:
                    proc = start_recorded(  # recorded before a held-back Ctrl-C: the finally below stops it
                        procs,
                        [python, "-c", RUNNER, script, *args],
                        stdout=subprocess.PIPE,
                        stderr=err,
                        stdin=subprocess.DEVNULL,
                        text=True,
                        encoding="utf-8",
                        errors="replace",
                        env=rank_env,
                        cwd=scratch,
                        start_new_session=True,
                    )
                assert proc.stdout is not None
                threading.Thread(target=_reader, args=(rank, proc.stdout, lines), daemon=True).start()
            _watch(procs, logs, lines, stderr_paths, timeout, on_event)
        finally:
            _stop(procs)
    return logs


def _watch(
    procs: list[subprocess.Popen[str]],
    logs: list[RankLog],
    lines: queue.Queue[tuple[int, str | None]],
    stderr_paths: list[str],
    timeout: float,
    on_event: Callable[[int, dict[str, Any]], None],
) -> None:
    ended: set[int] = set()  # ranks whose output ended
    while any(log.returncode is None for log in logs):
        try:
            rank, line = lines.get(timeout=0.1)
        except queue.Empty:
            pass
        else:
            if line is None:
                ended.add(rank)
            else:
                _take(logs[rank], line, on_event)
        for log in logs:  # judged once it exited and said all it will: its output ended or it is done
            said_all = log.rank in ended or any(e["event"] == "done" for e in log.events)
            if log.returncode is None and said_all and procs[log.rank].poll() is not None:
                _check_exit(log, procs[log.rank], stderr_paths[log.rank])
        # Every rank not judged yet is held to its phase's limit: one that closed its output
        # but runs on, and one that failed while a process it started holds its output open.
        now = time.monotonic()
        waiting = [log for log in logs if log.returncode is None]
        if any(now - log.since > limit_for(log.phase, timeout) for log in waiting):
            raise _stuck(waiting, timeout)


def _stuck(waiting: list[RankLog], timeout: float) -> RankFailure:
    """The rank that made the least progress is the one to blame: the others wait for it
    in a collective."""
    laggard = min(waiting, key=lambda log: (sum(e["event"] == "phase" for e in log.events), log.since))
    others = "; ".join(f"rank {log.rank} was waiting in {log.phase}" for log in waiting if log is not laggard)
    return RankFailure(
        laggard.rank,
        laggard.phase,
        FailureKind.TIMEOUT,
        f"no progress for {limit_for(laggard.phase, timeout):.0f} s (a GPU without P2P, a stuck NCCL init or a "
        f"peer that died); every rank was stopped" + (f" ({others})" if others else ""),
    )


def _take(log: RankLog, line: str, on_event: Callable[[int, dict[str, Any]], None]) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return  # a library printing on stdout; only the rank's own JSON lines count
    if not isinstance(event, dict) or "event" not in event:
        return
    log.events.append(event)
    if event["event"] == "phase":
        log.phase, log.since = str(event.get("phase")), time.monotonic()
    else:
        log.since = time.monotonic()
    on_event(log.rank, event)


def _check_exit(log: RankLog, proc: subprocess.Popen[str], stderr_path: str) -> None:
    log.returncode = proc.returncode
    if proc.returncode == 0 and any(e["event"] == "done" for e in log.events):
        return
    errors = [e for e in log.events if e["event"] == "error"]
    if errors:
        raise RankFailure(log.rank, log.phase, FailureKind.said(errors[-1].get("kind")), str(errors[-1].get("message")))
    last = _last_stderr(stderr_path) or "no message"
    how = f"exit {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
    raise RankFailure(log.rank, log.phase, FailureKind.FAILURE, f"{how}: {last}")
