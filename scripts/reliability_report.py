#!/usr/bin/env python3
"""Break sm120patch on purpose and write the figures to docs/reliability.md.

Runs, on real pip-installed sglang releases:
  * the fault-injection suite (tests/support/faultsuite.py): SIGKILL, ENOSPC and EACCES at every
    step of the apply and revert write paths, each followed by a recovering run;
  * rounds of eight concurrent ``apply`` processes on one tree;
  * the hostile-input, hand-edit, concurrency and upgrade tests (pytest), counted.

    python3 scripts/reliability_report.py [--rounds 5] [--release 0.5.9]
    python3 scripts/reliability_report.py --check   # exit 1 if the page is not what the code renders

The figures are kept in docs/reliability.json and the page is rendered from them, so
``--check`` (the fast tier, tests/test_docs.py) tells a page the code would now write
differently without breaking anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120patch import __version__  # noqa: E402
from tests.support.faultsuite import ACTIONS, STEPS, Stats, cli, run_suite  # noqa: E402
from tests.support.realtrees import copy_release  # noqa: E402


def concurrent_rounds(version: str, rounds: int) -> dict:
    runs = writers_ok = corrupted = 0
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            package = copy_release(version, Path(tmp))
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "sm120patch", "apply", "--sglang-path", str(package), "--json"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(8)
            ]
            results = [(p.wait(), json.loads(p.stdout.read())) for p in procs]
            runs += len(results)
            writers = [d for code, d in results if code == 0 and d["written"]]
            writers_ok += len(writers) == 1 and all(code == 0 for code, _ in results)
            text = (package / "srt/layers/communicator.py").read_text()
            corrupted += text.count("_is_sm120_supported = ") != 1
            corrupted += cli(package, "verify").returncode != 0
    return {"rounds": rounds, "processes": runs, "rounds_with_exactly_one_writer": writers_ok, "corrupted": corrupted}


def pytest_counts(files: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tail)}
    return {"summary": tail, **counts}


HOSTILE_FILES = [
    "tests/cli/test_hostile.py",
    "tests/cli/test_hand_edits.py",
    "tests/patcher/patches/test_communicator_fusion_gate.py::test_generated_gate_variants_are_widened_exactly_or_refused_as_drift",
    "tests/patcher/patches/test_server_args_auto_enable.py::test_generated_auto_enable_blocks_are_widened_unless_they_also_pick_sm100_kernels",
]
DATA = REPO / "docs" / "reliability.json"
PAGE = REPO / "docs" / "reliability.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="0.5.9")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what the code renders")
    args = parser.parse_args()
    if args.check:
        return 0 if PAGE.read_text() == page(json.loads(DATA.read_text())) else 1
    started = time.time()
    suites = {op: dataclasses.asdict(run_suite(args.release, op)) for op in ("apply", "revert")}
    concurrency = concurrent_rounds(args.release, args.rounds)
    hostile = pytest_counts(HOSTILE_FILES)
    upgrades = pytest_counts(["tests/patcher/transaction/test_concurrency_and_upgrades.py"])
    data = {
        "tool_version": __version__,
        "release": args.release,
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.time() - started),
        "suites": suites,
        "concurrency": concurrency,
        "hostile": hostile,
        "upgrades": upgrades,
    }
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    PAGE.write_text(page(data))
    print(f"wrote {PAGE} and {DATA}", file=sys.stderr)
    failed = any(suite["failures"] for suite in suites.values())
    return 0 if not failed and concurrency["corrupted"] == 0 else 1


def page(data: dict) -> str:
    """docs/reliability.md from what a run found (``data``)."""
    suites = {op: Stats(**fields) for op, fields in data["suites"].items()}
    total = Stats()
    for stats in suites.values():
        total.add(stats)
    concurrency, hostile, upgrades = data["concurrency"], data["hostile"], data["upgrades"]
    rows = "\n".join(
        f"| `{op}` | {s.kill_points} | {s.io_faults} | {s.recovered} | {s.lost_or_half_written} | {s.leftover_temp_files} |"
        for op, s in suites.items()
    )
    failures = "\n".join(f"- {f}" for f in total.failures) or "none"
    return f"""# Reliability

sm120patch rewrites files in someone's serving image, so it is tested the way package
managers and databases test themselves: by breaking it on purpose. Figures below come from
`python3 scripts/reliability_report.py` (sm120patch {data["tool_version"]}, sglang {data["release"]},
pip-installed from the package index; {data["date"]}, {data["seconds"]} s; the figures:
`docs/reliability.json`). The same suite runs in CI
(`tests/patcher/transaction/test_faults.py`, `tests/cli/test_hostile.py`,
`tests/patcher/transaction/test_concurrency_and_upgrades.py`, the generated variants in `tests/patcher/patches/`).

## How a write can fail, and what happens

The write path (`sm120patch/patcher/transaction/journal.py`): plan everything in memory and compile it;
write and fsync the backups and the new contents into the state directory; write the journal
atomically; replace each target atomically (temp file in the same directory, fsync,
`os.replace`, directory fsync); write the manifest; delete the journal. A run killed anywhere
leaves either no journal (no sglang file was replaced yet) or a whole one, and the next
`apply`/`revert` finishes it file by file — each target is then at its "before" or "after"
hash — and says so (`recovered an interrupted apply ...: finished it (...)`). An I/O error
is reported in one line with exit 2: before the journal, "no sglang file was changed"; after
it, the next run finishes the job once the disk has room again.

## Fault injection

`python -m tests.support.faulty_cli <step>@<n>:<kill|ENOSPC|EACCES> ...` runs the real command line
with a hook at `fsutil.step` that makes the n-th occurrence of a step SIGKILL the process or
raise that error (production code leaves the hook unset). Steps: {", ".join(STEPS)}
(write/fsync/rename of every atomic write: backups, staged contents, journal, targets,
manifest). Every occurrence of every step was hit, each in a fresh process, with
{", ".join(ACTIONS)}; after each, every target was checked to be the release's original
(RECORD hash) or the fully patched file, then the next run had to finish the job and leave
no temp file.

| operation | kill points | I/O faults (ENOSPC, EACCES) | recovered by the next run | files lost or half-written | temp files left |
|---|---|---|---|---|---|
{rows}
| **total** | **{total.kill_points}** | **{total.io_faults}** | **{total.recovered}** | **{total.lost_or_half_written}** | **{total.leftover_temp_files}** |

Failures: {failures}

## Concurrency

{concurrency["rounds"]} rounds of eight `sm120patch apply` processes started at once on one
tree ({concurrency["processes"]} processes): rounds where exactly one patched and the other
seven found the tree already applied and exited 0: **{concurrency["rounds_with_exactly_one_writer"]} / {concurrency["rounds"]}**;
corrupted or duplicated results: **{concurrency["corrupted"]}**. Writers serialize on an
`flock` in the state directory; the kernel releases it when a process dies, so a killed
holder never blocks the next run (tested).

## Hostile and odd input, upgrades

`{" ".join(HOSTILE_FILES)}`: {hostile["summary"]} — a file edited after apply (revert
refuses without `--force`, keeps the changed file aside with it), a symlinked target (the
real file is patched, the link stays), CRLF + BOM + coding cookie + tab indentation (kept byte
for byte outside the change), mode and owner (kept), an immutable file or directory
(`chattr +i`: refused before anything is written, exit 2), a read-only package directory, a
corrupted manifest or one from a newer sm120patch (exit 2), a re-apply over a hand edit (the
earlier backup is kept aside), a `--python` that is not an interpreter, the seed's `sed` run once or twice, a renamed gate and a file that does not parse
(drift, nothing written), and generated variants of the gate code (property tests).

`tests/patcher/transaction/test_concurrency_and_upgrades.py`: {upgrades["summary"]} — real `pip install -U`
upgrades and downgrades (0.5.8 ⇄ 0.5.9) under a patched tree: `verify` reports the pristine
release files and the stale state, `apply` keeps the old state aside in `stale-<version>-<time>/`
and patches the new release, `revert` restores the new release's files.
"""


if __name__ == "__main__":
    raise SystemExit(main())
