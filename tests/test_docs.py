"""The documentation the tool shows or ships says what the code does, from public sources."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sm120patch.plan.registry import all_patches

REPO = Path(__file__).resolve().parent.parent
PRIVATE = re.compile(r"upstream-sm120|sglang-versions\.md|fused-path|anchors\.md|shared/|seeds/|msg 743|§")


def test_readme_patch_table_is_generated_from_the_anchor_tables() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "docs_tables.py"), "--check"])
    assert proc.returncode == 0, "README.md is out of date: run python3 scripts/docs_tables.py"


def test_user_facing_text_cites_only_public_sources() -> None:
    texts = {f"{p.id} docstring": p.doc for p in all_patches()}
    shipped = [*REPO.glob("sm120patch/**/*.py"), *REPO.glob("docs/**/*.md"), REPO / "README.md", REPO / "CHANGELOG.md"]
    assert REPO / "sm120patch" / "patches" / "workspace_preflight.py" in shipped  # the subpackages too
    for path in shipped:
        texts[str(path.relative_to(REPO))] = path.read_text()
    cited = {name: PRIVATE.findall(text) for name, text in texts.items()}
    assert {name: found for name, found in cited.items() if found} == {}


def test_changelog_names_this_version() -> None:
    from sm120patch import __version__

    assert f"## {__version__}" in (REPO / "CHANGELOG.md").read_text()
