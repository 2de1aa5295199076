#!/usr/bin/env python3
"""Do the fast tests catch structural slips?  Apply hand-made mutants, one at a time, to a
copy of the repository and run the fast tier on each; a mutant the tests still pass "survived".

mutmut (scripts/mutation_report.py) changes one token at a time: an operator, a constant,
an argument, a ``not``.  The ten mutants here are slips its operators never make: a libcst
wrapper dropped (the parentheses around a widened term, the ``not`` of a new guard), a
condition replaced by a constant, a comprehension's filter dropped, ``!= 1`` loosened to
``< 1``.  Each stands for a bug that once existed or nearly did.

    python3 scripts/mutation_probe.py        # prints a table; exit 1 if any mutant survived
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (name, file, original text, mutated text)
MUTANTS = [
    (
        "no parentheses when a bare term in an `and` chain is widened",
        "sm120patch/patcher/kit/sm_terms.py",
        "    return widened.with_changes(lpar=(cst.LeftParen(),), rpar=(cst.RightParen(),))",
        "    return widened",
    ),
    (
        "sglang.srt.utils is assumed to define is_sm120_supported",
        "sm120patch/patcher/kit/decide.py",
        "    if not ctx.defines(site.source, SM120_HELPER):",
        "    if False:",
    ),
    (
        "evidence line numbers off by one",
        "sm120patch/patcher/plan/evidence.py",
        "        line, done = 1, 0\n",
        "        line, done = 2, 0\n",
    ),
    (
        "a negated SM clause accepted as the fusion gate",
        "sm120patch/patcher/patches/communicator_fusion_gate.py",
        "[c for c in clauses_in(f) if not c.negated]",
        "list(clauses_in(f))",
    ),
    (
        "two SM100 flags accepted",
        "sm120patch/patcher/patches/communicator_flag.py",
        "        if len(sm100) != 1:",
        "        if len(sm100) < 1:",
    ),
    (
        "an applied gate whose SM120 name is never bound",
        "sm120patch/patcher/kit/decide.py",
        "    missing = unbound(module, ctx, sm120_terms(terms))\n    if not missing:\n        return None",
        "    missing = unbound(module, ctx, sm120_terms(terms))\n    if True:\n        return None",
    ),
    (
        "the preflight guard without `not`",
        "sm120patch/patcher/patches/workspace_preflight.py",
        "test=cst.UnaryOperation(operator=cst.Not(), expression=term)",
        "test=term",
    ),
    (
        "a statement unrelated to the query guarded too",
        "sm120patch/patcher/patches/workspace_preflight.py",
        "if not (_uses_multicast(stmt) or names_read(stmt) & from_multicast):",
        "if False:",
    ),
    (
        "the multi-node clause widened as if it were an SM clause",
        "sm120patch/patcher/kit/sm_terms.py",
        "    if any(t is None for t in terms):\n        return None",
        "    if all(t is None for t in terms):\n        return None",
    ),
    (
        "SM12x blocks that also pick SM100 kernels widened",
        "sm120patch/patcher/patches/server_args_auto_enable.py",
        "if admits_sm12x(c.terms) or _only_fusion(node.body)]",
        "]",
    ),
]

FAST = ["tests/patcher/patches", "tests/cli/test_cli_on_mini_release.py", "tests/cli/test_verify_runtime.py"]


def main() -> int:
    rows, survived = [], 0
    for name, rel, old, new in MUTANTS:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "repo"
            shutil.copytree(
                REPO,
                copy,
                symlinks=True,
                ignore=shutil.ignore_patterns(".git", ".whl", ".fi_aot", "__pycache__", "*.egg-info", ".mypy_cache"),
            )
            path = copy / rel
            text = path.read_text()
            if text.count(old) != 1:
                rows.append((name, "NOT APPLIED (the code moved: update the mutant)"))
                survived += 1
                continue
            path.write_text(text.replace(old, new))
            # Run the copy's code: its sm120patch first on the path.
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider", *FAST],
                cwd=copy,
                capture_output=True,
                text=True,
                env={"PYTHONPATH": str(copy), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
            )
            killed = proc.returncode != 0
            survived += not killed
            rows.append((name, "killed" if killed else "SURVIVED"))
    width = max(len(n) for n, _ in rows)
    for name, verdict in rows:
        print(f"{name:<{width}}  {verdict}")
    print(f"{len(rows) - survived} of {len(rows)} mutants killed")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main())
