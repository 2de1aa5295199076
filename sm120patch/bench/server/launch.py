"""Run sglang's benchmark once, under a watchdog, and leave no process behind.

The benchmark is started in a session of its own; its TP ranks (``multiprocessing``
children) share its process group.  While it runs, the process groups of all its
descendants are collected from /proc (a helper that made a session of its own, too), and
at the end -- a normal exit, an error or a timeout -- every one of them is stopped:
SIGTERM, then SIGKILL, through ``bench.launch``'s group stop.

The watchdog's unit is a phase: the lines in ``parse.MILESTONES`` start one, and each
result line (prefill, decode, total) counts as progress within it.  A phase that makes no
progress for its limit (``--timeout``; ``SLOW_PHASES`` get a multiple: imports, weights and
graph capture may compile kernels for minutes) stops the run, and the error names the phase
and sglang's last lines.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sm120patch.bench.server import parse
from sm120patch.runner import leave_ctrl_c_to_the_main_thread, ranks, start_recorded

STARTING = "starting (importing sglang)"
#: Phases that may take a multiple of --timeout: JIT builds of FlashInfer / sgl-kernel modules.
SLOW_PHASES = {STARTING: 3, "loading weights": 3, "capturing CUDA graphs": 6}
TAIL = 12
SCAN_EVERY_S = 0.5
PROGRESS = (parse.PREFILL, parse.DECODE_STEP, parse.DECODE_MEDIAN, parse.TOTAL, parse.SKIPPING)


def limit_for(phase: str, timeout: float) -> float:
    return timeout * SLOW_PHASES.get(phase, 1)


@dataclass
class RunFailure(Exception):
    """The benchmark ran past a phase's limit ("timeout") or exited with an error ("exit")."""

    kind: str
    phase: str
    message: str
    tail: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.message} (phase: {self.phase})"


@dataclass
class Output:
    lines: list[str]
    returncode: int
    seconds: float
    phases: list[tuple[str, float]]  # each phase and the seconds it took


def descendant_groups(root: int) -> set[int]:
    """The process groups of ``root`` and every live descendant of it."""
    table = ranks.proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    groups, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            groups.add(table[pid][1])
        todo.extend(children.get(pid, []))
    return groups


def stop(proc: subprocess.Popen[str], groups: set[int]) -> None:
    """Stop ``proc``'s group and every other group seen among its descendants."""
    own = os.getpgrp()
    others = groups - {proc.pid, own}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in others:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        if sig == signal.SIGTERM:
            ranks._stop([proc])  # the benchmark's own group: TERM, then KILL, reaped


def _reader(stream: IO[str], out: queue.Queue[str | None]) -> None:
    leave_ctrl_c_to_the_main_thread()
    for line in stream:
        out.put(line)
    out.put(None)


def run(
    command: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    log: IO[str] | None = None,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> Output:
    """Run ``command`` (stdout and stderr merged) to its end; RunFailure when a phase stalls
    or it exits non-zero.  Every process it started is gone when this returns or raises."""
    lines: list[str] = []
    phases: list[tuple[str, float]] = []
    phase, since, started = STARTING, time.monotonic(), time.monotonic()
    on_phase(phase)
    out: queue.Queue[str | None] = queue.Queue()
    procs: list[subprocess.Popen[str]] = []  # filled before a held-back Ctrl-C is delivered
    groups: set[int] = set()
    try:
        proc = start_recorded(
            procs,
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        groups.add(proc.pid)
        assert proc.stdout is not None
        threading.Thread(target=_reader, args=(proc.stdout, out), daemon=True).start()
        scanned = 0.0
        while True:
            try:
                line = out.get(timeout=0.1)
            except queue.Empty:
                line = ""
            now = time.monotonic()
            if line is None:
                break
            if line:
                lines.append(line.rstrip("\n"))
                if log is not None:
                    log.write(line)
                new = parse.milestone(line)
                if new is not None:
                    phases.append((phase, now - since))
                    phase, since = new, now
                    on_phase(phase)
                elif any(p.search(line) for p in PROGRESS):
                    since = now
            if now - scanned >= SCAN_EVERY_S:
                groups |= descendant_groups(proc.pid)
                scanned = now
            if now - since > limit_for(phase, timeout):
                raise RunFailure(
                    "timeout",
                    phase,
                    f"no progress for {limit_for(phase, timeout):.0f} s; every process of the run was stopped",
                    lines[-TAIL:],
                )
        try:  # its output ended; the process may still run (it closed stdout)
            proc.wait(timeout=max(limit_for(phase, timeout) - (time.monotonic() - since), 0.1))
        except subprocess.TimeoutExpired:
            raise RunFailure(
                "timeout",
                phase,
                "its output ended but it did not exit; every process of the run was stopped",
                lines[-TAIL:],
            ) from None
    finally:
        for one in procs:
            groups |= descendant_groups(one.pid) | {one.pid}
            stop(one, groups)
    phases.append((phase, time.monotonic() - since))
    if proc.returncode != 0:
        how = f"exit {proc.returncode}" if proc.returncode > 0 else f"killed by signal {-proc.returncode}"
        raise RunFailure("exit", phase, f"sglang's benchmark ended with {how}", lines[-TAIL:])
    return Output(lines, proc.returncode, time.monotonic() - started, phases)
