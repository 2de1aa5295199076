"""Every file a docstring or comment of the package names by path exists: a module moved
(``probes/`` became each product's ``remote/``, ``patchkit`` became ``patcher/kit`` and
``sglang/``) leaves no docstring sending the reader to a file that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sm120patch"
NAMED = re.compile(r"(?<![\w./-])((?:[a-z_]\w*/)+[a-z_]\w*\.py)\b")
#: The folders a path of this project starts with; sglang's and FlashInfer's (``srt/...``,
#: ``jit/comm.py``) are not checked, nor the few of sglang that start like one of ours.
OURS = {p.name for p in PACKAGE.rglob("*") if p.is_dir()} | {"sm120patch", "tests", "docs", "scripts"}
SGLANGS = {"runner/base_runner.py", "sglang/bench_one_batch.py", "sglang/benchmark/one_batch.py"}
GONE = re.compile(r"\bpatchkit\b")


def _exists(named: str, source: Path) -> bool:
    """``named`` from ``source``: beside it, or under one of the folders above it."""
    return any(
        (folder / named).is_file()
        for folder in [source.parent, *source.parent.parents]
        if ROOT in (folder, *folder.parents)
    )


def test_every_file_named_in_the_package_exists() -> None:
    missing = [
        f"{source.relative_to(ROOT)}: {named}"
        for source in sorted(PACKAGE.rglob("*.py"))
        for named in NAMED.findall(source.read_text())
        if named.split("/")[0] in OURS and named not in SGLANGS and not _exists(named, source)
    ]
    assert not missing


def test_no_module_of_a_layout_that_is_gone_is_named() -> None:
    assert not [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if GONE.search(p.read_text())]
