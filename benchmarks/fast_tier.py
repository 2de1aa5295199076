"""How long the fast tier takes on this machine: the README's command, run a few times.

    python3 benchmarks/fast_tier.py             # three runs, bytecode as the last run left it
    python3 benchmarks/fast_tier.py --cold      # each run after removing the repository's
                                                #   __pycache__ folders, as on a fresh clone (CI)

Prints one Markdown row per run: the host's speed just before it (seconds for a fixed loop of
pure Python, best of three: on a shared machine it varies by half), pytest's own time, the
wall-clock time of the whole command and the CPU it used (every process it started).  A
machine's load shows in the first column; compare runs of like speed.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-n", "2", "--dist", "worksteal"]


def host_speed() -> float:
    """Seconds for ``sum(range(3 * 10**7))``, best of three (about 0.35 s on an idle 2-core host)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        sum(range(3 * 10**7))
        best = min(best, time.perf_counter() - start)
    return best


def clear_bytecode() -> None:
    for folder in ("sm120patch", "tests"):
        for cache in (REPO / folder).rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)


def one_run(cold: bool) -> tuple[float, float, float, float, str]:
    """(host speed, pytest's seconds, wall seconds, CPU seconds, pytest's last line)."""
    if cold:
        clear_bytecode()
    speed = host_speed()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(COMMAND, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-200:]
    found = re.search(r"in ([\d.]+)s", last)
    if proc.returncode != 0 or found is None:
        sys.exit(f"the fast tier failed (exit {proc.returncode}): {last}")
    return speed, float(found.group(1)), wall, cpu, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="remove __pycache__ before each run")
    args = parser.parse_args()
    print("| run | bytecode | host speed (s) | pytest (s) | wall (s) | CPU (s) |")
    print("|---|---|---|---|---|---|")
    for run in range(1, args.runs + 1):
        speed, pytest_s, wall, cpu, _ = one_run(args.cold)
        state = "none (fresh clone)" if args.cold else "kept"
        print(f"| {run} | {state} | {speed:.2f} | {pytest_s:.1f} | {wall:.1f} | {cpu:.0f} |", flush=True)


if __name__ == "__main__":
    main()
