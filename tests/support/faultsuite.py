"""Break ``apply`` and ``revert`` on purpose at every step of the write path, then recover.

For each step of the write path (``fsutil.step``: write, fsync, rename of every atomic
write; journal; replace of each target; finalize) and each time the step is reached, a real
sm120patch process (tests/support/faulty_cli.py) is SIGKILLed there, or gets ENOSPC / EACCES there.  After
each fault every target must be the release's original or the fully patched file, and the
next run must recover (finish the job) and leave no temp file behind.

Used by ``tests/patcher/transaction/test_faults.py`` (CI) and ``scripts/reliability_report.py`` (the figures in
docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.realtrees import copy_release, record_hashes, sha256

STEPS = ("write", "fsync", "rename", "journal", "replace", "finalize")
ACTIONS = ("kill", "ENOSPC", "EACCES")


@dataclass
class Stats:
    kill_points: int = 0
    io_faults: int = 0
    recovered: int = 0
    lost_or_half_written: int = 0
    leftover_temp_files: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, other: Stats) -> None:
        for name in ("kill_points", "io_faults", "recovered", "lost_or_half_written", "leftover_temp_files"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures += other.failures


REPO = Path(__file__).resolve().parents[2]


def cli(package: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    """``sm120patch ARGS --sglang-path PACKAGE --json`` in a new process (through
    tests/support/faulty_cli.py when a fault is given)."""
    env = dict(os.environ, NO_COLOR="1")
    entry = ["tests.support.faulty_cli", fault] if fault else ["sm120patch"]
    return subprocess.run(
        [sys.executable, "-m", *entry, *args, "--sglang-path", str(package), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )


def _temps(package: Path) -> list[Path]:
    return [p for p in package.rglob(".*.sm120patch-tmp")]


def _one_point_series(version: str, op: str, action: str, step: str, root: Path, ref: dict) -> Stats:
    """Fault ``step`` at its 1st, 2nd, ... occurrence until the run no longer reaches it."""
    stats = Stats()
    targets, allowed, expected_final = ref["targets"], ref["allowed"], ref["final"]
    nth = 1
    while True:
        package = copy_release(version, root / f"{action}-{step}-{nth}")
        if op == "revert":
            assert cli(package, "apply").returncode == 0
        proc = cli(package, op, fault=f"{step}@{nth}:{action}")
        label = f"{op} {step}@{nth}:{action}"
        if proc.returncode == 0:
            return stats  # the step is reached fewer than nth times: all its points done
        if action == "kill":
            stats.kill_points += 1
            if proc.returncode != -9:
                stats.failures.append(f"{label}: exit {proc.returncode}, not killed")
        else:
            stats.io_faults += 1
            error = json.loads(proc.stdout or "{}").get("error", "")
            if proc.returncode != 2 or "Traceback" in proc.stderr or not error:
                stats.failures.append(f"{label}: exit {proc.returncode}: {proc.stderr[-300:]}")
        for rel in targets:
            if sha256(package / rel) not in allowed[rel]:
                stats.lost_or_half_written += 1
                stats.failures.append(f"{label}: {rel} is neither original nor patched")
        again = cli(package, op)
        if again.returncode != 0:
            stats.failures.append(f"{label}: the next {op} failed: {again.stderr[-300:]}")
        elif {rel: sha256(package / rel) for rel in targets} != expected_final:
            stats.failures.append(f"{label}: the next {op} did not finish the job")
        else:
            stats.recovered += 1
        leftovers = _temps(package)
        stats.leftover_temp_files += len(leftovers)
        if leftovers:
            stats.failures.append(f"{label}: temp files left: {leftovers}")
        shutil.rmtree(package.parent, ignore_errors=True)
        nth += 1


def run_suite(version: str, op: str, actions: tuple[str, ...] = ACTIONS, workers: int = 2) -> Stats:
    """Every fault point of ``op`` ("apply" or "revert") on a real ``version`` tree."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = copy_release(version, root / "reference")
        assert cli(reference, "apply").returncode == 0
        originals = record_hashes(reference)
        targets = sorted(json.loads(cli(reference, "verify").stdout)["state"]["files"])
        patched = {rel: sha256(reference / rel) for rel in targets}
        ref = {
            "targets": targets,
            "allowed": {rel: {originals[rel], patched[rel]} for rel in targets},
            "final": patched if op == "apply" else {rel: originals[rel] for rel in targets},
        }
        stats = Stats()
        with ThreadPoolExecutor(max_workers=workers) as pool:  # the work is in subprocesses
            series = [
                pool.submit(_one_point_series, version, op, action, step, root, ref)
                for action in actions
                for step in STEPS
            ]
            for future in series:
                stats.add(future.result())
    return stats
