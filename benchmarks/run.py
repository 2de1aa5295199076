#!/usr/bin/env python3
"""How fast is sm120patch, against what its work costs at least?  Writes docs/performance.md.

    python3 benchmarks/run.py [--repeat N] [--releases 0.5.9 0.5.15 0.5.23]
    python3 benchmarks/run.py --check   # exit 1 if the page is not what the code renders

Every figure comes from N rounds of cold processes (a new interpreter each time) on real
pip-installed sglang trees (tests/support/realtrees.py); in each round every command and three
baselines run once, on the same files:

* floor: the interpreter importing click (what any click CLI pays);
* naive: the interpreter importing libcst, parsing each target file once and writing it back
  (``parse_module(...).code``: what any libcst tool that rewrites these files pays);
* grep: the hand fix's check, ``grep -n 'sm120\\|sm100_supported\\|sm90_supported' <gate> | head``.

The budget (issue "as fast as its work allows"): --help <= 2.5 x floor; verify and list on a
patched tree <= 3 x floor; apply and apply --dry-run <= 1.5 x naive; peak RSS of apply
<= 150 MB; stretch: verify <= 0.10 s.  list and verify on a patched tree never load libcst
(tests/patcher/plan/test_trust.py).

The timings are kept in docs/performance.json and the page is rendered from them, so
``--check`` (the fast tier, tests/test_docs.py) tells a page the code would now write
differently without timing anything.
"""

from __future__ import annotations

import argparse
import json
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
from sm120patch.patcher.plan.registry import all_patches  # noqa: E402
from sm120patch.sglang.tree import from_directory  # noqa: E402
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


Sample = tuple[float, int]  # wall seconds, peak RSS (KiB)


def tool(*args: str) -> list[str]:
    return [sys.executable, "-m", "sm120patch", *args]


def measure(version: str, repeat: int, scratch: Path) -> dict[str, list[Sample]]:
    """``repeat`` rounds; in each, every baseline and command runs once, one after another,
    so a load that comes and goes on a shared machine weighs on a command and its baseline
    alike (``ratio`` compares them round by round)."""
    pristine = [copy_release(version, scratch / f"{version}-p{i}") for i in range(repeat)]
    patched = copy_release(version, scratch / f"{version}-patched")
    swept = copy_release(version, scratch / f"{version}-swept")  # patched, without the sweep's record
    tree = from_directory(patched)
    targets = sorted({str(tree.path(p.target(tree.exists))) for p in all_patches()})
    gate = next(t for t in targets if t.endswith(("communicator.py", "add_norm.py")))
    parse = "import libcst, sys\nfor f in sys.argv[1:]:\n    libcst.parse_module(open(f, 'rb').read()).code"
    grep = f"grep -n 'sm120\\|sm100_supported\\|sm90_supported' {gate} | head -10"
    assert run(tool("apply", "--sglang-path", str(patched)))[2] == 0
    assert run(tool("apply", "--sglang-path", str(swept)))[2] == 0
    (swept / ".sm120patch" / "sweep.json").unlink()  # verify sweeps the package, and writes nothing
    steps: list[tuple[str, Callable[[int], list[str]], int]] = [  # (row, argv of round i, expected exit)
        ("floor", lambda i: [sys.executable, "-c", "import click"], 0),
        ("naive", lambda i: [sys.executable, "-c", parse, *targets], 0),
        ("grep", lambda i: ["sh", "-c", grep], 0),
        ("--help", lambda i: tool("--help"), 0),
        ("list (patched)", lambda i: tool("list", "--sglang-path", str(patched)), 0),
        ("verify (patched)", lambda i: tool("verify", "--sglang-path", str(patched)), 0),
        ("verify (patched, swept)", lambda i: tool("verify", "--sglang-path", str(swept)), 0),
        ("apply (no-op)", lambda i: tool("apply", "--sglang-path", str(patched)), 0),
        # On round i's own pristine copy, in this order: it is patched, then restored.
        ("verify (pristine)", lambda i: tool("verify", "--sglang-path", str(pristine[i])), 1),
        ("apply --dry-run", lambda i: tool("apply", "--dry-run", "--sglang-path", str(pristine[i])), 0),
        ("apply", lambda i: tool("apply", "--sglang-path", str(pristine[i])), 0),
        ("revert", lambda i: tool("revert", "--sglang-path", str(pristine[i])), 0),
    ]
    result: dict[str, list[Sample]] = {row: [] for row, _, _ in steps}
    for i in range(repeat):
        for row, argv, expect in steps:
            seconds, rss, code = run(argv(i))
            if code != expect:
                raise SystemExit(f"{argv(i)} exited {code}, expected {expect}")
            result[row].append((seconds, rss))
    return result


def seconds(samples: list[Sample]) -> float:
    return statistics.median(s for s, _ in samples)


def ratio(samples: list[Sample], baseline: list[Sample]) -> float:
    """The median of the round-by-round ratios."""
    return statistics.median(s / b for (s, _), (b, _) in zip(samples, baseline, strict=True))


def peak_mb(samples: list[Sample]) -> float:
    return max(rss for _, rss in samples) / 1024


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
    "verify (patched, swept)",
    "verify (pristine)",
    "apply --dry-run",
    "apply",
    "apply (no-op)",
    "revert",
]


DATA = REPO / "docs" / "performance.json"
PAGE = REPO / "docs" / "performance.md"


def report(data: dict) -> tuple[str, bool]:
    """The page, and whether every budget is met, from a run's ``data``."""
    results: dict[str, dict[str, list[Sample]]] = data["results"]
    repeat, versions = data["repeat"], list(results)
    lines = [
        "# Performance",
        "",
        f"Generated by `python3 benchmarks/run.py --repeat {repeat}` on {data['date']} "
        f"(sm120patch {data['tool_version']}, CPython {data['python']}, {data['cores']} cores, "
        f"{data['machine']}; {data['seconds']} s). {repeat} rounds of cold processes "
        "(`python -m sm120patch ... --sglang-path`, bytecode compiled as pip does on install) on real "
        "pip-installed trees; in each round every command and the baselines run once, one after "
        "another: **floor** = `python -c 'import click'`, **naive** = "
        "`python -c 'import libcst'` + parsing each target file once and writing it back "
        "(`parse_module(...).code`), **grep** = the hand fix's check. `verify (patched, swept)` is "
        "`verify` of a patched tree without the record of apply's sweep of SM checks: the sweep of "
        "every module of the package, as after a file was added. Seconds are medians; each ratio "
        "is the median of the round-by-round ratios, so a load that comes and goes weighs on a "
        "command and its baseline alike. The timings: `docs/performance.json`; the fast tier checks "
        "that this page is what the code renders from them.",
        "",
        "| | " + " | ".join(f"sglang {v}" for v in versions) + " |",
        "|---|" + "---|" * len(versions),
    ]
    for base in ("floor", "naive", "grep"):
        lines.append(f"| *{base}* | " + " | ".join(f"{seconds(results[v][base]):.3f}" for v in versions) + " |")
    for row in ROWS:
        cells = []
        for v in versions:
            r = results[v]
            cells.append(
                f"{seconds(r[row]):.3f} ({ratio(r[row], r['floor']):.1f}× floor, "
                f"{ratio(r[row], r['naive']):.2f}× naive, {ratio(r[row], r['grep']):.0f}× grep)"
            )
        lines.append(f"| `{row}` | " + " | ".join(cells) + " |")
    peaks = [f"{peak_mb(results[v]['apply']):.0f} MB" for v in versions]
    lines.append("| peak RSS of `apply` | " + " | ".join(peaks) + " |")
    lines += ["", "## Budget", "", "| line | " + " | ".join(versions) + " |", "|---|" + "---|" * len(versions)]
    ok = True
    for row, base, factor in BUDGET:
        cells = []
        for v in versions:
            found = ratio(results[v][row], results[v][base])
            met = found <= factor
            ok &= met
            cells.append(f"{found:.2f} {'ok' if met else '**missed**'}")
        lines.append(f"| `{row}` ≤ {factor} × {base} | " + " | ".join(cells) + " |")
    cells = []
    for v in versions:
        mb = peak_mb(results[v]["apply"])
        ok &= mb <= 150
        cells.append(f"{mb:.0f} MB {'ok' if mb <= 150 else '**missed**'}")
    lines.append("| peak RSS of `apply` ≤ 150 MB | " + " | ".join(cells) + " |")
    cells = [f"{seconds(results[v]['verify (patched)']):.3f} s" for v in versions]
    lines.append("| stretch: `verify` ≤ 0.10 s | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--releases", nargs="+", default=["0.5.9", "0.5.15", "0.5.23"])
    parser.add_argument("--output", type=Path, default=PAGE, help="the page; the timings go beside it, as .json")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what the code renders")
    args = parser.parse_args()
    if args.check:
        return 0 if PAGE.read_text() == report(json.loads(DATA.read_text()))[0] else 1
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "sm120patch"), str(REPO / "patches")], check=True
    )
    scratch = Path(tempfile.mkdtemp(prefix="sm120patch-bench-"))
    try:
        results = {v: measure(v, args.repeat, scratch) for v in args.releases}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    data = {
        "tool_version": __version__,
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started),
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "results": {
            v: {row: [list(sample) for sample in samples] for row, samples in r.items()} for v, r in results.items()
        },
    }
    text, ok = report(data)
    args.output.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    args.output.write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
