"""Every hint, error, help and doc line names today's commands: ``bench kernel`` and ``bench
server``, never ``bench`` alone or ``bench --server`` (they still run, as aliases that print a
note, so a hint that names them sends the user into a deprecation note)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = re.compile(r"bench --server|sm120patch bench(?!\s+(kernel|server))\b|`bench( --tp \w+)?`")
# What may still name them: the aliases themselves, the JSON's "command" field (a schema
# value), the records of past runs, and the sentences that say what the aliases are.
ALIAS = ROOT / "sm120patch" / "cli" / "bench.py"
KEPT = re.compile(r'"command": "bench|still run|still work|`bench` alone|command: "bench --server"')
RECORDS = {"bench.md", "gpu-proof.md", "mutation.md"}


def _strings(path: Path) -> list[tuple[int, str]]:
    """Each string of ``path`` with its line, f-strings' parts too; not those of the mutants
    mutmut writes beside each function (``x_f__mutmut_3``) when it runs these tests."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and "__mutmut_" in child.name:
                continue
            if isinstance(child, ast.Constant) and isinstance(child.value, str):
                found.append((child.lineno, child.value))
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def test_the_package_names_todays_bench_commands() -> None:
    stale = [
        f"{path.relative_to(ROOT)}:{n}: {text}"
        for path in sorted((ROOT / "sm120patch").rglob("*.py"))
        if path != ALIAS
        for n, text in _strings(path)
        if OLD.search(text) and not KEPT.search(path.read_text().splitlines()[n - 1])
    ]
    assert not stale


def test_the_docs_name_todays_bench_commands() -> None:
    pages = [ROOT / "README.md", *(p for p in (ROOT / "docs").glob("*.md") if p.name not in RECORDS)]
    stale = [
        f"{page.name}:{n}: {line}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if OLD.search(line) and not KEPT.search(line)
    ]
    assert not stale
