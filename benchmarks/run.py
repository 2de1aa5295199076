#!/usr/bin/env python3
"""How fast is sm120patch, against what its work costs at least?  Writes docs/performance.md.

    python3 benchmarks/run.py [--repeat N] [--releases 0.5.9 0.5.15 0.5.23]

Every figure is the median wall time of N cold processes (a new interpreter each time) on
real pip-installed sglang trees (tests/support/realtrees.py), next to three baselines measured in
the same run on the same files:

* floor: the interpreter importing click (what any click CLI pays);
* naive: the interpreter importing libcst and parsing each target file once (what any
  libcst tool that reads these files pays);
* grep: the hand fix's check, ``grep -n 'sm120\\|sm100_supported\\|sm90_supported' <gate> | head``.

The budget (issue "as fast as its work allows"): --help <= 2.5 x floor; verify and list on a
patched tree <= 3 x floor; apply and apply --dry-run <= 1.5 x naive; peak RSS of apply
<= 150 MB; stretch: verify <= 0.10 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120patch import __version__  # noqa: E402
from sm120patch.locate.tree import from_directory  # noqa: E402
from sm120patch.plan.registry import all_patches  # noqa: E402
from tests.support.realtrees import copy_release  # noqa: E402

# As installed: pip compiles bytecode at install time, so the processes may use and write it
# (this workplace sets PYTHONDONTWRITEBYTECODE, which would make every run compile the tool).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"NO_COLOR": "1", "COLUMNS": "200"}


def run(argv: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and exit code of one process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd="/")
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - started, usage.ru_maxrss, os.waitstatus_to_exitcode(status)


def median_of(repeat: int, argv_for_run: Callable[[int], list[str]], expect: int | None = 0) -> tuple[float, int]:
    times, peak = [], 0
    for i in range(repeat):
        seconds, rss, code = run(argv_for_run(i))
        if expect is not None and code != expect:
            raise SystemExit(f"{argv_for_run(i)} exited {code}, expected {expect}")
        times.append(seconds)
        peak = max(peak, rss)
    return statistics.median(times), peak


def tool(*args: str) -> list[str]:
    return [sys.executable, "-m", "sm120patch", *args]


def measure(version: str, repeat: int, scratch: Path) -> dict[str, tuple[float, int]]:
    pristine = [copy_release(version, scratch / f"{version}-p{i}") for i in range(repeat)]
    patched = copy_release(version, scratch / f"{version}-patched")
    tree = from_directory(patched)
    targets = sorted({str(tree.path(p.target(tree.exists))) for p in all_patches()})
    gate = next(t for t in targets if t.endswith(("communicator.py", "add_norm.py")))
    parse = "import libcst, sys\nfor f in sys.argv[1:]:\n    libcst.parse_module(open(f, 'rb').read())"
    grep = f"grep -n 'sm120\\|sm100_supported\\|sm90_supported' {gate} | head -10"
    result: dict[str, tuple[float, int]] = {}
    result["floor"] = median_of(repeat, lambda i: [sys.executable, "-c", "import click"])
    result["naive"] = median_of(repeat, lambda i: [sys.executable, "-c", parse, *targets])
    result["grep"] = median_of(repeat, lambda i: ["sh", "-c", grep])
    result["--help"] = median_of(repeat, lambda i: tool("--help"))
    result["verify (pristine)"] = median_of(repeat, lambda i: tool("verify", "--sglang-path", str(pristine[i])), 1)
    result["apply --dry-run"] = median_of(
        repeat, lambda i: tool("apply", "--dry-run", "--sglang-path", str(pristine[i]))
    )
    result["apply"] = median_of(repeat, lambda i: tool("apply", "--sglang-path", str(pristine[i])))
    assert run(tool("apply", "--sglang-path", str(patched)))[2] == 0
    result["verify (patched)"] = median_of(repeat, lambda i: tool("verify", "--sglang-path", str(patched)))
    result["list (patched)"] = median_of(repeat, lambda i: tool("list", "--sglang-path", str(patched)))
    result["apply (no-op)"] = median_of(repeat, lambda i: tool("apply", "--sglang-path", str(patched)))
    result["revert"] = median_of(repeat, lambda i: tool("revert", "--sglang-path", str(pristine[i])))
    return result


BUDGET = [  # (row, baseline, factor)
    ("--help", "floor", 2.5),
    ("verify (patched)", "floor", 3.0),
    ("list (patched)", "floor", 3.0),
    ("apply", "naive", 1.5),
    ("apply --dry-run", "naive", 1.5),
]
ROWS = [
    "--help",
    "list (patched)",
    "verify (patched)",
    "verify (pristine)",
    "apply --dry-run",
    "apply",
    "apply (no-op)",
    "revert",
]


def report(results: dict[str, dict[str, tuple[float, int]]], repeat: int, elapsed: float) -> tuple[str, bool]:
    versions = list(results)
    lines = [
        "# Performance",
        "",
        f"Generated by `python3 benchmarks/run.py --repeat {repeat}` on {time.strftime('%Y-%m-%d')} "
        f"(sm120patch {__version__}, CPython {platform.python_version()}, {os.cpu_count()} cores, "
        f"{platform.machine()}; {elapsed:.0f} s). Median wall seconds of {repeat} cold processes "
        "(`python -m sm120patch ... --sglang-path`, bytecode compiled as pip does on install) on real "
        "pip-installed trees, each command against "
        "the baselines measured in the same run: **floor** = `python -c 'import click'`, **naive** = "
        "`python -c 'import libcst'` + parsing each target file once, **grep** = the hand fix's check.",
        "",
        "| | " + " | ".join(f"sglang {v}" for v in versions) + " |",
        "|---|" + "---|" * len(versions),
    ]
    for base in ("floor", "naive", "grep"):
        lines.append(f"| *{base}* | " + " | ".join(f"{results[v][base][0]:.3f}" for v in versions) + " |")
    for row in ROWS:
        cells = []
        for v in versions:
            seconds = results[v][row][0]
            cells.append(
                f"{seconds:.3f} ({seconds / results[v]['floor'][0]:.1f}× floor, "
                f"{seconds / results[v]['naive'][0]:.2f}× naive, {seconds / results[v]['grep'][0]:.0f}× grep)"
            )
        lines.append(f"| `{row}` | " + " | ".join(cells) + " |")
    lines.append(
        "| peak RSS of `apply` | " + " | ".join(f"{results[v]['apply'][1] / 1024:.0f} MB" for v in versions) + " |"
    )
    lines += ["", "## Budget", "", "| line | " + " | ".join(versions) + " |", "|---|" + "---|" * len(versions)]
    ok = True
    for row, base, factor in BUDGET:
        cells = []
        for v in versions:
            ratio = results[v][row][0] / results[v][base][0]
            met = ratio <= factor
            ok &= met
            cells.append(f"{ratio:.2f} {'ok' if met else '**missed**'}")
        lines.append(f"| `{row}` ≤ {factor} × {base} | " + " | ".join(cells) + " |")
    cells = []
    for v in versions:
        mb = results[v]["apply"][1] / 1024
        ok &= mb <= 150
        cells.append(f"{mb:.0f} MB {'ok' if mb <= 150 else '**missed**'}")
    lines.append("| peak RSS of `apply` ≤ 150 MB | " + " | ".join(cells) + " |")
    cells = [f"{results[v]['verify (patched)'][0]:.3f} s" for v in versions]
    lines.append("| stretch: `verify` ≤ 0.10 s | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--releases", nargs="+", default=["0.5.9", "0.5.15", "0.5.23"])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "performance.md")
    args = parser.parse_args()
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "sm120patch"), str(REPO / "patches")], check=True
    )
    scratch = Path(tempfile.mkdtemp(prefix="sm120patch-bench-"))
    try:
        results = {v: measure(v, args.repeat, scratch) for v in args.releases}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text, ok = report(results, args.repeat, time.perf_counter() - started)
    args.output.write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
